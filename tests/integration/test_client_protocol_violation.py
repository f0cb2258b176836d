"""A scripted broker, built on our own codec, that breaks the protocol on the first connection.

The client must log the rule broken, drop the connection, reconnect, and go on receiving.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable

import pytest

from connector.mqtt.codec import encode, encode_publish
from connector.mqtt.decoder import StreamDecoder
from connector.mqtt.driver import MqttClient, ReconnectPolicy
from connector.mqtt.packets import Connack, Connect, Suback, Subscribe
from connector.mqtt.session import SessionConfig
from tests.waiting import wait_until

Script = Callable[[socket.socket, int], None]


class ScriptedBroker:
    """Accepts connections on loopback; answers CONNECT and SUBSCRIBE, then runs ``script``
    with the connection number (1, 2, ...)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(
                target=self._handle, args=(conn, self.connections), daemon=True
            ).start()

    def _handle(self, conn: socket.socket, number: int) -> None:
        decoder = StreamDecoder()
        conn.settimeout(10)
        with conn:
            try:
                while True:
                    data = conn.recv(65536)
                    if not data:
                        return
                    for packet in decoder.feed(data):
                        if isinstance(packet, Connect):
                            conn.sendall(encode(Connack(False, 0)))
                        elif isinstance(packet, Subscribe):
                            codes = [qos for _, qos in packet.subscriptions]
                            conn.sendall(encode(Suback(packet.packet_id, codes)))
                            self.script(conn, number)
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self.server.close()
        self._thread.join(timeout=5)


@pytest.mark.parametrize(
    ("bad_frame", "rule"),
    [
        (bytes([0x36, 0x05, 0x00, 0x01, 0x61, 0x00, 0x01]), "QoS 3"),
        (bytes([0x32, 0x05, 0x00, 0x01, 0x61, 0x00, 0x00]), "packet identifier 0"),
        (bytes([0x30, 0x04, 0x00, 0x02, 0xC3, 0x28]), "UTF-8"),
        (bytes([0x30, 0x05, 0x00, 0x03, 0x61, 0x2F, 0x23]), "wildcard"),
        (bytes([0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]), "more than 4 bytes"),
        (bytes([0x62, 0x02, 0x00, 0x01]), "PUBREL"),  # unknown PUBREL is fine: not a violation
    ],
)
def test_violation_drops_connection_logs_rule_and_reconnects(
    bad_frame: bytes, rule: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = encode_publish("a/good", b"payload-after-reconnect", 1, 7)

    def script(conn: socket.socket, number: int) -> None:
        # A valid message before the bad frame, in the same write: it must not be lost either
        # (it is dropped unacknowledged and the broker would redeliver it).
        if number == 1:
            conn.sendall(encode_publish("a/first", b"before", 1, 5) + bad_frame)
        else:
            conn.sendall(encode_publish("a/first", b"before", 1, 5, dup=True))
        if number > 1 or rule == "PUBREL":
            conn.sendall(good)

    broker = ScriptedBroker(script)
    client = MqttClient(
        f"tcp://127.0.0.1:{broker.port}",
        SessionConfig("violation-test", clean_session=True, keep_alive=30),
        [("a/#", 1)],
        reconnect=ReconnectPolicy(initial=0.01, maximum=0.05),
    )
    received: list[tuple[str, bytes]] = []
    try:
        with caplog.at_level(logging.WARNING, logger="connector.mqtt"):
            client.connect()

            def got_good() -> bool:
                batch = client.poll(0.2)
                received.extend((m.topic, m.payload) for m in batch.messages)
                client.acknowledge(batch.messages, batch.released)
                return ("a/good", b"payload-after-reconnect") in received

            wait_until(got_good, timeout=10, message=lambda: f"received only {received}")
    finally:
        client.disconnect()
        broker.close()
    if rule == "PUBREL":
        # An unknown PUBREL is answered with PUBCOMP (section 4.3.3) on the same connection.
        assert broker.connections == 1
        assert ("a/first", b"before") in received
        return
    assert broker.connections >= 2, "the client must reconnect after a violation"
    assert any(rule in record.getMessage() for record in caplog.records), caplog.text
    assert ("a/first", b"before") in received
