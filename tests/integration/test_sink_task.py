"""The MQTT writer's task publisher against real brokers, without Spark: every message reaches
a subscriber at each QoS (Mosquitto and mochi-mqtt), a broker restart in the middle of a task
loses nothing (the unacknowledged messages go again), a broker that refuses a topic fails the
task with the reason, and a broker that never answers fails it after ``publishTimeout``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from connector.mqtt.errors import BrokerUnreachable
from connector.spark.writer.options import SinkOptions
from connector.spark.writer.rows import OutMessage, RowError
from connector.spark.writer.task import (
    IDEMPOTENCY_KEY,
    PublishRefused,
    PublishTimeout,
    TaskIdentity,
    TaskPublisher,
)
from devtools.interop_brokers import ExternalBroker, MochiBroker, MochiTls
from tests.support.brokers import LOOPBACK, BrokerFactory, Pki, free_port
from tests.support.paho_client import PahoClient, Received
from tests.support.waiting import wait_until

IDENTITY = TaskIdentity("write", 0, 3, 0, 11)


def options(url: str, **extra: str) -> SinkOptions:
    return SinkOptions.parse({"brokerUrl": url, **extra})


def numbered(count: int, topic: str, qos_of: int | None = None) -> list[OutMessage]:
    """``count`` messages with payloads ``000000``, ``000001``...; QoS cycles 0-1-2 unless
    ``qos_of`` fixes it."""
    return [
        OutMessage(topic, b"%06d" % i, i % 3 if qos_of is None else qos_of, False, None)
        for i in range(count)
    ]


def subscriber(host: str, port: int, topic: str, **kwargs: object) -> PahoClient:
    client = PahoClient(f"sub-{free_port()}", **kwargs)  # type: ignore[arg-type]
    assert client.connect(host, port).accepted
    client.subscribe(topic, 2)
    return client


def check_all_arrived(received: list[Received], sent: list[OutMessage]) -> None:
    """Every sent payload arrived, each at its QoS; repeats allowed only above QoS 0."""
    by_payload = {m.payload: m for m in sent}
    got = [r.payload for r in received]
    assert set(got) == set(by_payload), f"missing: {sorted(set(by_payload) - set(got))[:10]}"
    for message in received:
        assert message.qos == by_payload[message.payload].qos


@pytest.mark.parametrize("version", ["3.1.1", "5"])
def test_every_message_reaches_a_subscriber_at_each_qos(
    broker_factory: BrokerFactory, version: str
) -> None:
    broker = broker_factory()
    protocol = mqtt.MQTTv5 if version == "5" else mqtt.MQTTv311
    sent = numbered(600, "sink/all")
    with subscriber(broker.host, broker.port, "sink/#", protocol=protocol) as sub:
        tally = TaskPublisher(options(broker.url, mqttVersion=version), IDENTITY).run([sent])
        received = sub.wait_for_messages(len(sent), timeout=30)
    assert tally.rows == 600 and tally.by_qos == (200, 200, 200) and tally.connections == 1
    check_all_arrived(received, sent)
    assert len(received) == len(sent)  # no connection was lost: nothing went twice
    if version == "5":
        keys = [dict(r.properties.UserProperty)[IDEMPOTENCY_KEY] for r in received]
        assert sorted(keys) == sorted(IDENTITY.key(i) for i in range(600))
    else:
        assert all(r.properties is None for r in received)


def test_mochi_takes_every_message(mochi: ExternalBroker) -> None:
    sent = numbered(300, "sink/mochi")
    with subscriber(mochi.host, mochi.port, "sink/#", protocol=mqtt.MQTTv5) as sub:
        tally = TaskPublisher(options(mochi.url, mqttVersion="5"), IDENTITY).run([sent])
        received = sub.wait_for_messages(len(sent), timeout=30)
    assert tally.rows == 300
    check_all_arrived(received, sent)


def test_tls_and_mutual_tls_over_websocket(
    broker_factory: BrokerFactory, mochi_factory: Callable[..., MochiBroker], pki: Pki
) -> None:
    """The writer takes the reader's transport options: ``ssl://`` with ``tls.caFile`` to
    Mosquitto, and ``wss://`` with a client certificate to mochi-mqtt."""
    broker = broker_factory(tls=pki.server_tls())
    sent = numbered(30, "sink/tls", 1)
    with subscriber(broker.host, broker.port, "sink/#") as sub:
        publisher = TaskPublisher(
            options(broker.tls_url, **{"tls.caFile": str(pki.ca_cert)}), IDENTITY
        )
        assert publisher.run([sent]).rows == 30
        check_all_arrived(sub.wait_for_messages(30), sent)
    mochi = mochi_factory(
        listeners=("wss",), tls=MochiTls(pki.server_cert, pki.server_key, client_ca=pki.ca_cert)
    )
    tls = {
        "tls.caFile": str(pki.ca_cert),
        "tls.certFile": str(pki.client_cert),
        "tls.keyFile": str(pki.client_key),
    }
    with subscriber(mochi.host, mochi.port, "sink/#") as sub:
        publisher = TaskPublisher(options(mochi.listener_url("wss"), **tls), IDENTITY)
        assert publisher.run([sent]).rows == 30
        check_all_arrived(sub.wait_for_messages(30), sent)


def test_a_batch_is_sent_before_the_next_is_asked_for_and_spark_s_time_is_not_the_broker_s(
    broker_factory: BrokerFactory,
) -> None:
    """Between Arrow batches the task waits for Spark: what the first batch queued has reached
    the subscriber meanwhile, and a wait longer than ``publishTimeout`` is no timeout."""
    broker = broker_factory()
    first, second = numbered(30, "sink/a", 1), numbered(30, "sink/b", 1)
    with subscriber(broker.host, broker.port, "sink/#") as sub:

        def batches() -> Iterator[list[OutMessage]]:
            yield first
            wait_until(lambda: len(sub.messages) >= len(first), 10, message="batch 1 unsent")
            time.sleep(1.5)  # Spark making the next batch, longer than publishTimeout
            yield second

        publisher = TaskPublisher(options(broker.url, publishTimeout="1"), IDENTITY)
        assert publisher.run(batches()).rows == 60
        check_all_arrived(sub.wait_for_messages(60), first + second)


def test_a_broker_restart_mid_task_loses_nothing(broker_factory: BrokerFactory) -> None:
    """The broker restarts (its sessions saved) after 400 of 800 QoS 1 and 2 messages were
    handed to the session, some of them unacknowledged: the task reconnects, sends those
    again, and a persistent subscriber ends with every one (at least once)."""
    broker = broker_factory(persistence=True)
    sent = [m._replace(qos=1 + i % 2) for i, m in enumerate(numbered(800, "sink/restart"))]
    restarted = threading.Event()

    def with_a_restart() -> Iterator[OutMessage]:
        for i, message in enumerate(sent):
            if i == 400:
                broker.restart()
                restarted.set()
            yield message

    with subscriber(broker.host, broker.port, "sink/#", clean_session=False) as sub:
        tally = TaskPublisher(options(broker.url, publishTimeout="30"), IDENTITY).run(
            [with_a_restart()]
        )
        assert restarted.is_set()
        # Repeats count towards a number, so wait for every payload, not for 800 messages.
        received = sub.wait_for_payloads({m.payload for m in sent}, timeout=60)
    assert tally.connections >= 2, "the task never reconnected"
    check_all_arrived(received, sent)


def test_mqtt5_keeps_to_the_broker_s_receive_maximum_and_maximum_packet_size(
    broker_factory: BrokerFactory,
) -> None:
    """Mosquitto announces Receive Maximum 20 (its ``max_inflight_messages``) and, with
    ``max_packet_size``, a Maximum Packet Size: a window of 1,000 asked for still loses no
    QoS 2 message, and a row too large for the broker fails the task naming it before it is
    sent."""
    broker = broker_factory(extra_config=["max_packet_size 300"])
    sent = numbered(600, "sink/window", 2)
    with subscriber(broker.host, broker.port, "sink/#", protocol=mqtt.MQTTv5) as sub:
        publisher = TaskPublisher(
            options(broker.url, mqttVersion="5", maxInflight="1000"), IDENTITY
        )
        assert publisher.run([sent]).rows == 600
        assert publisher.client.session.limits.receive_maximum == 20
        check_all_arrived(sub.wait_for_messages(600, timeout=30), sent)
    big = OutMessage("sink/big", b"x" * 400, 1, False, None)
    with pytest.raises(
        RowError, match=r"row 2 of partition 3 \(topic 'sink/big'\).*Maximum Packet Size of 300"
    ):
        TaskPublisher(options(broker.url, mqttVersion="5"), IDENTITY).run(
            [[*numbered(2, "sink/small", 1), big]]
        )


def test_a_refused_topic_fails_the_task_with_the_reason(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite open/#\n")
    broker = broker_factory(extra_config=[f"acl_file {acl}"])
    sent = [*numbered(5, "open/a", 1), OutMessage("closed/b", b"x", 1, False, None)]
    with pytest.raises(PublishRefused) as refused:
        TaskPublisher(options(broker.url, mqttVersion="5"), IDENTITY).run([sent])
    assert "0x87 Not authorized" in str(refused.value)
    assert "'closed/b'" in str(refused.value)


def test_an_unreachable_broker_fails_at_once() -> None:
    with pytest.raises(BrokerUnreachable):
        publisher = TaskPublisher(options(f"tcp://{LOOPBACK}:{free_port()}"), IDENTITY)
        publisher.run([numbered(1, "t", 1)])


def test_a_broker_that_never_acknowledges_fails_after_the_publish_timeout() -> None:
    """A listener that answers CONNECT and then stays silent: the task gives up after
    ``publishTimeout`` naming what is in flight."""
    server = socket.create_server((LOOPBACK, 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def silent_broker() -> None:
        conn, _ = server.accept()
        conn.recv(1024)
        conn.sendall(bytes([0x20, 2, 0, 0]))  # CONNACK, accepted
        while not stop.is_set() and conn.recv(4096):
            pass
        conn.close()

    thread = threading.Thread(target=silent_broker, daemon=True)
    thread.start()
    try:
        publisher = TaskPublisher(
            options(f"tcp://{LOOPBACK}:{port}", publishTimeout="1", keepAlive="0"), IDENTITY
        )
        with pytest.raises(PublishTimeout, match=r"took no message for 1 s \(3 in flight"):
            publisher.run([numbered(3, "t", 1)])
    finally:
        stop.set()
        server.close()
