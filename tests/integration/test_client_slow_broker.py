"""A broker that floods the client and reads its acknowledgements slowly (Mosquitto reads one
packet per loop turn, so a deep backlog sent at full speed leaves our PUBACKs queued). The
client waits for room to write, however long the last read's timeout was, and keeps the
connection: dropping it would make the broker resend everything in flight."""

from __future__ import annotations

import socket
import time

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.encode import encode_publish
from connector.mqtt.packets import Puback, Publish
from tests.support.brokers import BrokerFactory
from tests.support.hostile_broker import ScriptedBroker
from tests.support.publishing import publish_with_cli
from tests.support.waiting import wait_until

COUNT = 60_000
"""PUBACKs (4 bytes each) well past what the two shrunken socket buffers hold."""
PAUSE = 1.5
"""Seconds the broker reads nothing after sending the backlog: far above the poll timeout."""


def test_acks_to_a_broker_that_reads_slowly_wait_for_room_and_keep_the_connection() -> None:
    backlog = b"".join(
        encode_publish("slow/t", b"%06d" % n, 1, n + 1, False, False) for n in range(COUNT)
    )

    def script(conn: socket.socket, number: int) -> None:
        if number == 1:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.sendall(backlog)
            time.sleep(PAUSE)  # the handler reads nothing meanwhile

    with ScriptedBroker(script) as broker:
        client = MqttClient(
            broker.url, SessionConfig("slow-reader", keep_alive=2), [("slow/#", 1)],
            connect_timeout=2.0,
        )  # fmt: skip
        client.connect()
        assert client._sock is not None
        assert isinstance(client._sock, socket.socket)  # tcp://: the driver's stream is the socket
        client._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        received: list[Publish] = []
        deadline = time.monotonic() + 30
        while len(received) < COUNT and time.monotonic() < deadline:
            received += client.poll(0.05).messages  # leaves a read timeout of <= 50 ms
        assert len(received) == COUNT
        began = time.monotonic()
        client.acknowledge(received)
        blocked = time.monotonic() - began
        assert client.connected, "the connection was dropped while acknowledging"
        assert blocked > 0.2, f"the acknowledgements never had to wait ({blocked:.3f} s)"
        wait_until(
            lambda: sum(type(p) is Puback for p in broker.received.get(1, [])) == COUNT,
            30,
            message=lambda: f"{sum(type(p) is Puback for p in broker.received.get(1, []))} acks",
        )
        assert broker.connections == 1
        assert [p.packet_id for p in broker.received[1] if type(p) is Puback] == [
            n + 1 for n in range(COUNT)
        ]
        client.disconnect()


def test_a_disconnect_with_unread_messages_keeps_the_acks_the_broker_has_not_read_yet(
    broker_factory: BrokerFactory,
) -> None:
    """Mosquitto without an inflight limit sends a whole backlog at once and reads our PUBACKs
    one per loop turn. The client reads part of it, acknowledges that part and disconnects
    with the rest unread. A close with unread data sends a reset, on which Mosquitto drops the
    connection without reading the PUBACKs still queued: it then resent the whole backlog,
    acknowledged part included. The disconnect shuts the write side and drains until the
    broker closes, so the broker reads every PUBACK and the DISCONNECT first."""
    broker = broker_factory(max_inflight_messages=0)
    topic, count, part = "slow/closing", 20_000, 5_000

    def client() -> MqttClient:
        # Reads of 64 KiB: one read of the default size can hold the whole backlog.
        return MqttClient(
            broker.url,
            SessionConfig("closing", keep_alive=10),
            [("slow/#", 1)],
            read_size=1 << 16,
        )

    offline = client()
    offline.connect()
    offline.disconnect()
    publish_with_cli(broker, topic, 1, count)

    first = client()
    first.connect()
    read: list[Publish] = []
    deadline = time.monotonic() + 30
    while len(read) < part and time.monotonic() < deadline:
        read += first.poll(1.0).messages
    assert part <= len(read) < count, "the client should stop with messages unread"
    first.acknowledge(read)
    first.disconnect()

    second = client()
    assert second.connect().session_present
    resent: list[Publish] = []

    def resent_so_far() -> int:
        resent.extend(second.poll(0.2).messages)
        return len(resent)

    wait_until(
        lambda: resent_so_far() >= count - len(read),
        30,
        message=lambda: f"{len(resent)} of the {count - len(read)} unacknowledged resent",
    )
    second.close()
    numbers = [int(bytes(m.payload)[:10]) for m in resent]
    assert numbers == list(range(len(read), count)), "only what was never acknowledged"
