"""What ``shardBy=share`` relies on from Mosquitto 2 (3.1.1 clients, persistent sessions).

Pinned here with a real broker and our own client, so that a broker upgrade that changes any
of it fails this test rather than the guarantees in docs/delivery.md:

* each message of a shared subscription goes to exactly one member of the group;
* a member whose persistent session is offline still gets its turn: its messages are queued
  in its session and delivered when it reconnects (not handed to the online members, not
  dropped) - so no message waits forever only if every receiver comes back;
* retained messages go to every member that subscribes (hence shard 0 alone keeps them).
"""

from __future__ import annotations

from collections.abc import Callable

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.publishing import Message, publish
from tests.support.waiting import wait_until

FILTER = "$share/grp/shr/#"
TIMEOUT = 20.0
TOPIC = "shr/t"


def member(broker: MosquittoBroker, client_id: str) -> MqttClient:
    client = MqttClient(broker.url, SessionConfig(client_id, clean_session=False), [(FILTER, 1)])
    client.connect()
    return client


def collector(client: MqttClient, into: list[tuple[bytes, bool]]) -> Callable[[], None]:
    """One poll of ``client``: what it read goes to ``into``, acknowledged."""

    def poll() -> None:
        read = client.poll(0.05)
        into.extend((m.payload, m.retain) for m in read.messages)
        client.acknowledge(read.messages, read.released)

    return poll


def test_mosquitto_queues_an_offline_members_share_and_sends_retained_to_every_member(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    publish(broker, [Message(TOPIC, b"retained", retain=True)])
    got_a: list[tuple[bytes, bool]] = []
    got_b: list[tuple[bytes, bool]] = []
    a, b = member(broker, "shr-a"), member(broker, "shr-b")
    poll_a, poll_b = collector(a, got_a), collector(b, got_b)
    try:

        def both_have_retained() -> bool:
            poll_a()
            poll_b()
            return (b"retained", True) in got_a and (b"retained", True) in got_b

        wait_until(both_have_retained, TIMEOUT, message=lambda: f"{got_a} / {got_b}")

        online = [f"on-{n}".encode() for n in range(20)]
        publish(broker, [Message(TOPIC, p) for p in online])

        def online_delivered() -> bool:
            poll_a()
            poll_b()
            return len(got_a) + len(got_b) >= 2 + len(online)

        wait_until(online_delivered, TIMEOUT, message=lambda: f"{got_a} / {got_b}")
        live_a = [p for p, _ in got_a if p.startswith(b"on-")]
        live_b = [p for p, _ in got_b if p.startswith(b"on-")]
        assert sorted(live_a + live_b) == sorted(online), "not exactly one member per message"
        assert live_a and live_b, "the group did not share the load"

        b.disconnect()  # its persistent session stays, and so does its group membership
        got_a.clear()
        got_b.clear()
        offline = [f"off-{n}".encode() for n in range(20)]
        publish(broker, [Message(TOPIC, p) for p in offline])
        b = member(broker, "shr-b")
        poll_b = collector(b, got_b)

        def all_delivered() -> bool:
            poll_a()
            poll_b()
            return len(got_a) + len(got_b) >= len(offline)

        wait_until(all_delivered, TIMEOUT, message=lambda: f"{got_a} / {got_b}")
        assert sorted(p for p, _ in got_a + got_b) == sorted(offline)
        assert got_b, "the offline member's share went to the online member"
        assert len(got_a) < len(offline)
    finally:
        a.disconnect()
        b.disconnect()
