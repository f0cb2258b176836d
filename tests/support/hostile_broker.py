"""A scripted MQTT broker on loopback, built on our own codec, that misbehaves on purpose.

It answers CONNECT with CONNACK and SUBSCRIBE with SUBACK, then hands the connection to a
script with the connection number (1, 2, ...). Everything the client sends is decoded and kept
per connection, so tests can check what was acknowledged.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable

from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import MqttError
from connector.mqtt.packets import (
    Connack,
    Connect,
    Packet,
    Pingreq,
    Pingresp,
    ProtocolLevel,
    Puback,
    Suback,
    Subscribe,
)
from connector.mqtt.receive_buffer import ReceiveBuffer

Script = Callable[[socket.socket, int], None]
"""Runs after SUBACK: what the broker sends on connection ``number``."""
OnConnect = Callable[[socket.socket, int], None]
"""Answers CONNECT on connection ``number`` (default: an accepting CONNACK)."""

CONNACK = encode(Connack(False, 0))
PINGRESP = encode(Pingresp())


def send_connack(conn: socket.socket, number: int) -> None:
    conn.sendall(CONNACK)


def trickle(conn: socket.socket, data: bytes, interval: float) -> None:
    """Send ``data`` one byte at a time, ``interval`` seconds apart."""
    for byte in data:
        conn.sendall(bytes([byte]))
        time.sleep(interval)


class ScriptedBroker:
    """Accepts connections on 127.0.0.1 and plays ``script`` on each one."""

    def __init__(
        self,
        script: Script,
        on_connect: OnConnect = send_connack,
        level: int = ProtocolLevel.MQTT_3_1_1,
    ) -> None:
        self.script = script
        self.on_connect = on_connect
        self.level = level
        """The protocol level the client's packets are decoded at (and SUBACK encoded)."""
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.connections = 0
        self.received: dict[int, list[Packet]] = {}
        """Packets the client sent, per connection number."""
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._conns.append(conn)
            threading.Thread(
                target=self._handle, args=(conn, self.connections), daemon=True
            ).start()

    def _handle(self, conn: socket.socket, number: int) -> None:
        decoder = ReceiveBuffer(self.level)
        received = self.received.setdefault(number, [])
        conn.settimeout(None)  # close() shuts the socket down to end this handler
        with conn:
            try:
                while not self._stop.is_set():
                    data = conn.recv(65536)
                    if not data:
                        return
                    for packet in decoder.feed(data):
                        received.append(packet)
                        if isinstance(packet, Connect):
                            self.on_connect(conn, number)
                        elif isinstance(packet, Pingreq):
                            conn.sendall(PINGRESP)
                        elif isinstance(packet, Subscribe):
                            codes = [qos for _, qos in packet.subscriptions]
                            conn.sendall(encode(Suback(packet.packet_id, codes), self.level))
                            self.script(conn, number)
            except (OSError, MqttError):
                return

    def close(self) -> None:
        self._stop.set()
        self.server.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)  # wakes a handler blocked in recv
            with contextlib.suppress(OSError):
                conn.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class QueueBroker(ScriptedBroker):
    """A broker that holds QoS 1 ``messages`` until they are acknowledged.

    On each connection, after SUBACK, a sender thread runs ``plan(number, send, wait_acked)``:
    ``send(indexes, extra=b"")`` writes the given messages (DUP=1 when sent before) followed by
    ``extra`` in one write; ``wait_acked(indexes)`` waits until PUBACK came for each of them
    on this connection. Packet id of message ``i`` is ``i + 1``.
    """

    def __init__(
        self,
        messages: list[tuple[str, bytes]],
        plan: Callable[[int, Callable[..., None], Callable[[list[int]], bool]], None],
    ) -> None:
        self.messages = messages
        self.plan = plan
        self.sent: set[int] = set()
        super().__init__(self._start_plan)

    def unacked(self) -> list[int]:
        """Messages with no PUBACK on any connection yet."""
        acked = {
            p.packet_id - 1
            for packets in list(self.received.values())
            for p in list(packets)
            if isinstance(p, Puback)
        }
        return [i for i in range(len(self.messages)) if i not in acked]

    def _start_plan(self, conn: socket.socket, number: int) -> None:
        def send(indexes: list[int], extra: bytes = b"") -> None:
            frames = []
            for i in indexes:
                topic, payload = self.messages[i]
                frames.append(encode_publish(topic, payload, 1, i + 1, dup=i in self.sent))
                self.sent.add(i)
            conn.sendall(b"".join(frames) + extra)

        def wait_acked(indexes: list[int], timeout: float = 60.0) -> bool:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and not self._stop.is_set():
                acked = {
                    p.packet_id - 1 for p in self.received.get(number, []) if isinstance(p, Puback)
                }
                if set(indexes) <= acked:
                    return True
                time.sleep(0.02)
            return False

        def run() -> None:
            with contextlib.suppress(OSError):
                self.plan(number, send, wait_acked)

        threading.Thread(target=run, daemon=True).start()
