"""Our MQTT client (``connector.mqtt.driver.MqttClient``) against a real Mosquitto broker.

A paho-mqtt 2.x client publishes; ours subscribes, polls and acknowledges. Covered: every QoS
with binary, empty and large payloads, flow control past ``max_inflight_messages``, wildcard
filters, retained messages, persistent sessions with messages queued while offline,
redelivery of unacknowledged QoS 1/2 messages, the QoS 2 PUBREL/PUBCOMP exchange across
reconnects, and reconnecting by itself across broker restarts and kills.

Absence ("nothing else arrives") is checked with a sentinel: a last message published after
the others by the same publisher, or after a reconnect whose redeliveries are in question
(the broker resends those right behind CONNACK). Once the sentinel is in, anything that was
going to come before it has come.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest

from connector.mqtt import ProtocolLevel, Publish, SessionConfig
from connector.mqtt.driver import MqttClient, ReconnectPolicy
from connector.mqtt.events import Connected
from devtools.backlog import create_session
from tests.support.brokers import MosquittoBroker
from tests.support.ids import unique_id
from tests.support.paho_client import connected_paho
from tests.support.waiting import wait_until

TIMEOUT = 10.0
POLL = 0.05
V31 = ProtocolLevel.MQTT_3_1
V311 = ProtocolLevel.MQTT_3_1_1
VERSIONS = [pytest.param(V31, id="mqtt3.1"), pytest.param(V311, id="mqtt3.1.1")]
BINARY = bytes(range(256))
NOT_UTF8 = b"\xff\xfe\xc3\x28\x00\x80\xed\xa0\x80"


def make_client(
    broker: MosquittoBroker,
    level: ProtocolLevel,
    subscriptions: list[tuple[str, int]],
    *,
    client_id: str | None = None,
    clean_session: bool = True,
    on_connect: Callable[[Connected], None] | None = None,
) -> MqttClient:
    config = SessionConfig(
        client_id or unique_id("ours-"), clean_session=clean_session, keep_alive=30, level=level
    )
    return MqttClient(
        broker.url,
        config,
        subscriptions,
        connect_timeout=5.0,
        reconnect=ReconnectPolicy(initial=0.05, maximum=0.5),
        on_connect=on_connect,
    )


class Inbox:
    """Polls an MqttClient from the test thread, recording messages and QoS 2 releases.

    With ``ack`` the messages and releases of every read are acknowledged right away, as a
    consumer would after persisting them; without, nothing is acknowledged.
    """

    def __init__(self, client: MqttClient, *, ack: bool = True) -> None:
        self.client = client
        self.ack = ack
        self.messages: list[Publish] = []
        self.released: list[int] = []

    def poll(self) -> None:
        read = self.client.poll(POLL)
        self.messages.extend(read.messages)
        self.released.extend(read.released)
        if self.ack:
            self.client.acknowledge(read.messages, read.released)

    def until(self, condition: Callable[[], object], what: str, timeout: float = TIMEOUT) -> None:
        def step() -> object:
            self.poll()
            return condition()

        wait_until(
            step,
            timeout,
            interval=0,
            message=lambda: (
                f"{what}; received {[(m.topic, m.payload[:20]) for m in self.messages]}"
                f", released {self.released}"
            ),
        )

    def sync(self) -> None:
        """A round trip on the client's connection: once the broker acknowledged this QoS 1
        PUBLISH it has read everything the client sent before it (our acks included), so a
        close() that follows cannot overtake them."""
        packet_id = self.client.publish(unique_id("sync/"), b"", 1)
        self.until(lambda: packet_id in self.client.publish_done, "no PUBACK for the sync")

    def receive(self, count: int, timeout: float = TIMEOUT) -> list[Publish]:
        """Poll until ``count`` messages in all arrived; return them."""
        self.until(lambda: len(self.messages) >= count, f"expected {count} messages", timeout)
        return self.messages

    def receive_through(self, sentinel_topic: str, timeout: float = TIMEOUT) -> list[Publish]:
        """Poll until a message on ``sentinel_topic`` arrived; return the messages before it."""
        self.until(
            lambda: any(m.topic == sentinel_topic for m in self.messages),
            f"no sentinel on {sentinel_topic!r}",
            timeout,
        )
        *before, last = self.messages
        assert last.topic == sentinel_topic, "messages arrived after the sentinel"
        return before


def payloads(messages: list[Publish]) -> list[bytes]:
    return [m.payload for m in messages]


# --------------------------------------------------------------------------------------------
# Delivery: every field of every QoS


@pytest.mark.parametrize("level", VERSIONS)
def test_each_qos_arrives_with_its_fields(mosquitto: MosquittoBroker, level: ProtocolLevel) -> None:
    topic = unique_id("fields/")
    published = [
        (f"{topic}/q0", b"plain text", 0),
        (f"{topic}/q1", BINARY, 1),
        (f"{topic}/q2", NOT_UTF8, 2),
        (f"{topic}/empty0", b"", 0),
        (f"{topic}/empty1", b"", 1),
        (f"{topic}/empty2", b"", 2),
        (f"{topic}/utf8", "grüße ✓ 名前".encode(), 2),
    ]
    with (
        make_client(mosquitto, level, [(f"{topic}/#", 2)]) as client,
        connected_paho(mosquitto) as pub,
    ):
        connected = client.connect()
        assert connected == Connected(session_present=False, session_lost=False)
        for name, payload, qos in published:
            pub.publish(name, payload, qos)
        received = Inbox(client).receive(len(published))
    assert [(m.topic, m.payload, m.qos) for m in received] == published
    for message in received:
        assert message.retain is False
        assert message.dup is False
        if message.qos == 0:
            assert message.packet_id is None
        else:
            assert isinstance(message.packet_id, int) and 1 <= message.packet_id <= 0xFFFF


@pytest.mark.parametrize(("publish_qos", "subscribe_qos"), [(2, 0), (2, 1), (1, 0), (0, 2)])
def test_delivered_qos_is_the_lower_of_publish_and_subscription(
    mosquitto: MosquittoBroker, publish_qos: int, subscribe_qos: int
) -> None:
    topic = unique_id("downgrade/")
    with make_client(mosquitto, V311, [(topic, subscribe_qos)]) as client:
        client.connect()
        with connected_paho(mosquitto) as pub:
            pub.publish(topic, b"m", publish_qos)
        [message] = Inbox(client).receive(1)
    assert message.qos == min(publish_qos, subscribe_qos)
    assert (message.packet_id is None) == (message.qos == 0)


@pytest.mark.parametrize("level", VERSIONS)
def test_large_binary_payload_spanning_many_reads(
    mosquitto: MosquittoBroker, level: ProtocolLevel
) -> None:
    topic = unique_id("large/")
    big = BINARY * (3 * 4096 + 7)  # 3 MB: more than one 1 MB socket read
    with make_client(mosquitto, level, [(topic, 1)]) as client, connected_paho(mosquitto) as pub:
        client.connect()
        pub.publish(topic, big, 1)
        pub.publish(topic, b"after", 1)
        received = Inbox(client).receive(2)
    assert [len(p) for p in payloads(received)] == [len(big), 5]
    assert received[0].payload == big


@pytest.mark.parametrize("level", VERSIONS)
@pytest.mark.parametrize("qos", [1, 2])
def test_acks_keep_messages_flowing_past_the_inflight_window(
    mosquitto: MosquittoBroker, level: ProtocolLevel, qos: int
) -> None:
    """200 messages through a broker allowing 20 unacknowledged: each arrives exactly once,
    in order and never as a duplicate, so the broker saw every PUBACK / PUBREC+PUBCOMP."""
    assert mosquitto.max_inflight_messages == 20
    topic = unique_id("flow/")
    sent = [b"%05d" % i for i in range(200)]
    with make_client(mosquitto, level, [(topic, 2)]) as client, connected_paho(mosquitto) as pub:
        client.connect()
        for payload in sent:
            pub.publish(topic, payload, qos)
        pub.publish(topic, b"end", qos)  # QoS 0 could overtake the queued messages
        inbox = Inbox(client)
        received = inbox.receive(201)
        if qos == 2:
            inbox.until(lambda: len(inbox.released) == 201, "PUBREL for every message")
    assert payloads(received) == [*sent, b"end"]
    assert all(m.qos == qos and not m.dup for m in received)
    assert client.session.export_qos2_pending() == set(), "every PUBREL was completed"


def test_held_back_messages_follow_the_acknowledgements(
    broker_factory: Callable[..., MosquittoBroker],
) -> None:
    """With a window of 5 and nothing acknowledged, the broker holds the rest back; the
    acknowledgements of the first 5 (sent late, in one write) release them."""
    broker = broker_factory(max_inflight_messages=5)
    topic = unique_id("window/")
    with make_client(broker, V311, [(topic, 1)]) as client, connected_paho(broker) as pub:
        client.connect()
        for i in range(12):
            pub.publish(topic, b"%d" % i, 1)
        held = Inbox(client, ack=False)
        assert payloads(held.receive(5)) == [b"%d" % i for i in range(5)]
        client.acknowledge(held.messages)
        rest = Inbox(client).receive(7)
    assert payloads(rest) == [b"%d" % i for i in range(5, 12)]
    assert not any(m.dup for m in rest)


# --------------------------------------------------------------------------------------------
# Topic filters


@pytest.mark.parametrize("level", VERSIONS)
def test_wildcard_filters_select_the_right_topics(
    mosquitto: MosquittoBroker, level: ProtocolLevel
) -> None:
    root = unique_id("wild")
    filters = [(f"{root}/+/temp", 2), (f"{root}/logs/#", 1), (f"{root}/exact", 0)]
    matching = [
        f"{root}/kitchen/temp",
        f"{root}//temp",  # '+' matches an empty level
        f"{root}/logs",  # '#' includes the parent level
        f"{root}/logs/app",
        f"{root}/logs/app/error/detail",
        f"{root}/exact",
    ]
    other = [
        f"{root}/kitchen/temp/raw",
        f"{root}/temp",
        f"{root}/kitchen/humidity",
        f"{root}/logsx/app",
        f"{root}/exact/more",
        f"{root}/Exact",
        f"other/{root}/logs",
    ]
    sentinel = f"{root}/sentinel/temp"
    with make_client(mosquitto, level, filters) as client, connected_paho(mosquitto) as pub:
        client.connect()
        for i, topic in enumerate(matching + other):
            pub.publish(topic, b"%d" % i, 2)
        pub.publish(sentinel, b"sentinel", 1)
        received = Inbox(client).receive_through(sentinel)
    assert [m.topic for m in received] == matching
    granted = {f"{root}/kitchen/temp": 2, f"{root}//temp": 2, f"{root}/exact": 0}
    assert [m.qos for m in received] == [granted.get(m.topic, 1) for m in received]


def test_hash_alone_matches_every_topic_but_not_sys_topics(mosquitto: MosquittoBroker) -> None:
    """Mosquitto holds some 50 retained ``$SYS/broker/...`` messages: of those, only the one
    named by a filter of its own arrives, as '#' does not match topics starting with '$'."""
    topics = ["a", "a/b", "/leading", "trailing/", "x/y/z/w"]
    filters = [("#", 1), ("$SYS/broker/version", 0)]
    with make_client(mosquitto, V311, filters) as client, connected_paho(mosquitto) as pub:
        client.connect()
        for topic in topics:
            pub.publish(topic, topic.encode(), 1)
        pub.publish("end", b"", 1)
        received = Inbox(client).receive_through("end")
    version, *rest = received
    assert (version.topic, version.retain) == ("$SYS/broker/version", True)
    assert version.payload.startswith(b"mosquitto version ")
    assert [m.topic for m in rest] == topics
    assert [m.payload for m in rest] == [t.encode() for t in topics]


# --------------------------------------------------------------------------------------------
# Retained messages


@pytest.mark.parametrize("level", VERSIONS)
def test_retained_message_arrives_flagged_on_subscribe(
    mosquitto: MosquittoBroker, level: ProtocolLevel
) -> None:
    root = unique_id("retained/")
    with connected_paho(mosquitto) as pub:
        pub.publish(f"{root}/a", NOT_UTF8, 1, retain=True)
        pub.publish(f"{root}/b", b"two", 2, retain=True)
        with make_client(mosquitto, level, [(f"{root}/#", 2)]) as client:
            client.connect()
            inbox = Inbox(client)
            retained = sorted(inbox.receive(2), key=lambda m: m.topic)
            pub.publish(f"{root}/a", b"live", 1, retain=True)
            live = inbox.receive(3)[2]
    assert [(m.topic, m.payload, m.qos, m.retain) for m in retained] == [
        (f"{root}/a", NOT_UTF8, 1, True),
        (f"{root}/b", b"two", 2, True),
    ]
    # A message that is published while the subscription exists is not "retained" for it.
    assert (live.topic, live.payload, live.retain) == (f"{root}/a", b"live", False)


# --------------------------------------------------------------------------------------------
# Persistent sessions


def persistent_client(
    broker: MosquittoBroker,
    level: ProtocolLevel,
    root: str,
    client_id: str,
    on_connect: Callable[[Connected], None] | None = None,
) -> MqttClient:
    """Our client with the persistent session of ``client_id``, subscribed to ``root/#`` at
    QoS 2 (the tests make the session first, with ``create_session``, then publish data to
    ``root/data`` and sentinels to ``root/end``)."""
    return make_client(
        broker,
        level,
        [(f"{root}/#", 2)],
        client_id=client_id,
        clean_session=False,
        on_connect=on_connect,
    )


def publish_sentinel(broker: MosquittoBroker, root: str) -> None:
    with connected_paho(broker) as pub:
        pub.publish(f"{root}/end", b"sentinel", 1)


@pytest.mark.parametrize("level", VERSIONS)
def test_messages_queued_while_offline_arrive_on_reconnect(
    mosquitto: MosquittoBroker, level: ProtocolLevel
) -> None:
    root = unique_id("offline")
    client_id = unique_id("keep-")
    create_session(mosquitto.url, client_id, f"{root}/#", 2, level=level)
    queued = [(b"q1-%d" % i, 1) for i in range(5)] + [(b"q2-%d" % i, 2) for i in range(5)]
    with connected_paho(mosquitto) as pub:
        for payload, qos in queued:
            pub.publish(f"{root}/data", payload, qos)
        pub.publish(f"{root}/data", b"QoS 0 is not queued", 0)
    events: list[Connected] = []
    client = persistent_client(mosquitto, level, root, client_id, events.append)
    # As a restarted process that knows it had a session (e.g. from its write-ahead log).
    client.session.expect_session_present = True
    with client:
        connected = client.connect()
        assert events == [connected]
        # A 3.1 CONNACK has no session-present flag (and so cannot report a lost session).
        assert connected.session_present is (level == V311)
        assert connected.session_lost is False
        inbox = Inbox(client)
        inbox.receive(len(queued))
        publish_sentinel(mosquitto, root)
        received = inbox.receive_through(f"{root}/end")
    assert [(m.topic, m.payload, m.qos, m.dup) for m in received] == [
        (f"{root}/data", payload, qos, False) for payload, qos in queued
    ]


@pytest.mark.parametrize("level", VERSIONS)
def test_session_queue_sharing_the_connack_read_is_not_lost(
    mosquitto: MosquittoBroker, level: ProtocolLevel
) -> None:
    """Mosquitto sends a resumed session's queue right behind CONNACK, often in the same TCP
    segment: connect() must keep those messages for the next poll(), on every reconnect."""
    root = unique_id("connack")
    client_id = unique_id("keep-")
    create_session(mosquitto.url, client_id, f"{root}/#", 2, level=level)
    with connected_paho(mosquitto) as pub:
        for i in range(10):
            pub.publish(f"{root}/data", b"%d" % i, 1 + i % 2)
    for attempt in range(3):
        with persistent_client(mosquitto, level, root, client_id) as client:
            client.connect()
            inbox = Inbox(client, ack=attempt == 2)
            inbox.receive(10)
            inbox.sync()
            client.close()  # unacknowledged until the last attempt: all ten come again
        assert payloads(inbox.messages) == [b"%d" % i for i in range(10)]
        assert [m.dup for m in inbox.messages] == [attempt > 0] * 10


@pytest.mark.parametrize("level", VERSIONS)
def test_unacknowledged_qos1_messages_are_redelivered_as_duplicates(
    mosquitto: MosquittoBroker, level: ProtocolLevel
) -> None:
    root = unique_id("redeliver1")
    client_id = unique_id("keep-")
    create_session(mosquitto.url, client_id, f"{root}/#", 2, level=level)
    sent = [b"a", b"", BINARY]
    with persistent_client(mosquitto, level, root, client_id) as client:
        client.connect()
        with connected_paho(mosquitto) as pub:
            for payload in sent:
                pub.publish(f"{root}/data", payload, 1)
        first = Inbox(client, ack=False).receive(3)
        assert [(m.payload, m.dup) for m in first] == [(p, False) for p in sent]
        client.close()  # no PUBACK reached the broker

        assert client.connect().session_present is (level == V311)
        inbox = Inbox(client)
        again = inbox.receive(3)
        assert [(m.topic, m.payload, m.qos, m.dup) for m in again] == [
            (f"{root}/data", p, 1, True) for p in sent
        ]
        inbox.sync()
        client.close()

        # Acknowledged this time: the next connection gets only what is new.
        client.connect()
        publish_sentinel(mosquitto, root)
        assert Inbox(client).receive_through(f"{root}/end") == []


@pytest.mark.parametrize("level", VERSIONS)
def test_unacknowledged_qos2_messages_are_redelivered_then_completed(
    mosquitto: MosquittoBroker, level: ProtocolLevel
) -> None:
    root = unique_id("redeliver2")
    client_id = unique_id("keep-")
    create_session(mosquitto.url, client_id, f"{root}/#", 2, level=level)
    sent = [b"x-%d" % i for i in range(4)]
    with persistent_client(mosquitto, level, root, client_id) as client:
        client.connect()
        with connected_paho(mosquitto) as pub:
            for payload in sent:
                pub.publish(f"{root}/data", payload, 2)
        first = Inbox(client, ack=False).receive(4)
        ids = [m.packet_id for m in first]
        client.close()  # no PUBREC was sent: the broker still owns the messages

        client.connect()
        inbox = Inbox(client)  # acknowledges: PUBREC, then PUBCOMP for each PUBREL
        again = inbox.receive(4)
        assert [(m.payload, m.qos, m.dup) for m in again] == [(p, 2, True) for p in sent]
        assert [m.packet_id for m in again] == ids
        qos2_ids = cast("list[int]", ids)  # QoS 2: every message has its packet id
        inbox.until(lambda: sorted(inbox.released) == sorted(qos2_ids), "PUBREL for every message")
        assert client.session.export_qos2_pending() == set()
        inbox.sync()
        client.close()

        # PUBCOMP reached the broker: nothing is resent, neither PUBLISH nor PUBREL.
        client.connect()
        after = Inbox(client)
        publish_sentinel(mosquitto, root)
        assert after.receive_through(f"{root}/end") == []
        assert after.released == []


@pytest.mark.parametrize("level", VERSIONS)
def test_pubrel_is_resent_after_reconnect_until_completed(
    mosquitto: MosquittoBroker, level: ProtocolLevel
) -> None:
    """PUBREC sent, PUBREL received but never completed: on the next connection the broker
    sends PUBREL again (no PUBLISH), our client reports the release, and PUBCOMP ends it."""
    root = unique_id("pubrel")
    client_id = unique_id("keep-")
    create_session(mosquitto.url, client_id, f"{root}/#", 2, level=level)
    with persistent_client(mosquitto, level, root, client_id) as client:
        client.connect()
        with connected_paho(mosquitto) as pub:
            pub.publish(f"{root}/data", b"once", 2)
        inbox = Inbox(client, ack=False)
        [message] = inbox.receive(1)
        client.acknowledge([message])  # PUBREC only
        inbox.until(lambda: inbox.released == [message.packet_id], "PUBREL")
        assert client.session.export_qos2_pending() == {message.packet_id}
        client.close()

        client.connect()
        resumed = Inbox(client)
        resumed.until(lambda: resumed.released == [message.packet_id], "PUBREL again")
        assert client.session.export_qos2_pending() == set()
        publish_sentinel(mosquitto, root)
        assert resumed.receive_through(f"{root}/end") == [], "delivered twice"
        resumed.sync()
        client.close()

        client.connect()
        final = Inbox(client)
        publish_sentinel(mosquitto, root)
        assert final.receive_through(f"{root}/end") == []
        assert final.released == []


# --------------------------------------------------------------------------------------------
# Broker restarts


@pytest.mark.parametrize("level", VERSIONS)
def test_reconnects_by_itself_after_a_broker_restart(
    broker_factory: Callable[..., MosquittoBroker], level: ProtocolLevel
) -> None:
    broker = broker_factory(persistence=True, max_inflight_messages=3)
    topic = unique_id("restart/")
    events: list[Connected] = []
    with make_client(
        broker, level, [(topic, 1)], clean_session=False, on_connect=events.append
    ) as client:
        client.connect()
        inbox = Inbox(client)
        with connected_paho(broker) as pub:
            pub.publish(topic, b"before", 1)
        inbox.receive(1)
        # Pending when the broker goes down: 3 sit unread and unacknowledged in our socket,
        # 5 stay queued in the broker. SIGTERM saves both.
        pending = [b"pending-%d" % i for i in range(8)]
        with connected_paho(broker) as pub:
            for payload in pending:
                pub.publish(topic, payload, 1)
        broker.restart()
        inbox.until(lambda: client.connections >= 2, "no reconnect after the restart", 5.0)
        with connected_paho(broker) as pub:
            pub.publish(topic, b"after", 1)
        inbox.until(lambda: any(m.payload == b"after" for m in inbox.messages), "'after'")
    copies: dict[bytes, list[Publish]] = {}
    for message in inbox.messages:
        copies.setdefault(message.payload, []).append(message)
    assert set(copies) == {b"before", *pending, b"after"}, "messages were lost"
    assert len(copies[b"before"]) == len(copies[b"after"]) == 1
    for payload, delivered in copies.items():
        assert all(m.dup for m in delivered[1:]), f"a redelivery of {payload!r} lacks DUP"
    if level == V311:
        assert [e.session_present for e in events] == [False, True]
    assert not any(e.session_lost for e in events)


@pytest.mark.parametrize("level", VERSIONS)
def test_reconnects_after_a_hard_kill_with_saved_session(
    broker_factory: Callable[..., MosquittoBroker], level: ProtocolLevel
) -> None:
    broker = broker_factory(persistence=True)
    topic = unique_id("kill/")
    events: list[Connected] = []
    with make_client(
        broker, level, [(topic, 2)], clean_session=False, on_connect=events.append
    ) as client:
        client.connect()
        broker.save_persistence()  # the session and its subscription are on disk
        inbox = Inbox(client)
        with connected_paho(broker) as pub:
            pub.publish(topic, b"before", 2)
        inbox.receive(1)
        # Complete the QoS 2 exchange first: the broker restored from the snapshot knows
        # nothing of "before" and may reuse its packet id.
        inbox.until(lambda: len(inbox.released) == 1, "PUBREL of 'before'")
        broker.restart(hard=True)
        inbox.until(lambda: client.connections >= 2, "no reconnect after kill -9", 5.0)
        with connected_paho(broker) as pub:
            pub.publish(topic, b"after-1", 1)
            pub.publish(topic, b"after-2", 2)
        inbox.until(lambda: len(inbox.messages) >= 3, "messages after the restart")
    assert payloads(inbox.messages) == [b"before", b"after-1", b"after-2"]
    if level == V311:
        assert [e.session_present for e in events] == [False, True]
    assert not any(e.session_lost for e in events)


@pytest.mark.parametrize("level", VERSIONS)
def test_resubscribes_when_a_killed_broker_lost_the_session(
    broker_factory: Callable[..., MosquittoBroker], level: ProtocolLevel
) -> None:
    broker = broker_factory(persistence=False)
    topic = unique_id("lost/")
    events: list[Connected] = []
    with make_client(
        broker, level, [(topic, 1)], clean_session=False, on_connect=events.append
    ) as client:
        client.connect()
        inbox = Inbox(client)
        broker.restart(hard=True)
        inbox.until(lambda: client.connections >= 2, "no reconnect after kill -9", 5.0)
        with connected_paho(broker) as pub:
            pub.publish(topic, b"after", 1)
        inbox.receive(1)
    assert payloads(inbox.messages) == [b"after"]
    assert [e.session_present for e in events] == [False, False]
    # 3.1.1 can tell that the broker forgot the session; a 3.1 CONNACK cannot say.
    assert [e.session_lost for e in events] == [False, level == V311]


def test_poll_returns_within_its_timeout_while_the_broker_is_down(
    mosquitto: MosquittoBroker,
) -> None:
    topic = unique_id("down/")
    with make_client(mosquitto, V311, [(topic, 1)]) as client:
        client.connect()
        mosquitto.stop()
        calls = 0

        def polled_while_down() -> bool:
            nonlocal calls
            start = client.clock()
            assert client.poll(0.2).messages == []
            assert client.clock() - start < 2.0, "poll() outlived its timeout"
            calls += 1
            return calls >= 10

        wait_until(polled_while_down, TIMEOUT, interval=0)
        assert not client.connected
        assert client.reconnect_policy.attempt > 1, "the backoff carries across polls"
        mosquitto.start()
        inbox = Inbox(client)
        inbox.until(lambda: client.connected, "no reconnect once the broker is back")
        with connected_paho(mosquitto) as pub:
            pub.publish(topic, b"back", 1)
        assert payloads(inbox.receive(1)) == [b"back"]
