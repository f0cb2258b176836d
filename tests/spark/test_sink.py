"""``df.write.format("mqtt")`` and ``writeStream.format("mqtt")`` in the run's Spark session
against real brokers: per-row topics, QoS and retain; MQTT 5 properties from our own reader
through a query to the broker again (MQTT -> transform -> MQTT) with the idempotency key; a
file source written as a stream whose restart on its checkpoint does not publish a committed
batch again; bad options and columns refused before a connection; a refused topic failing the
write with the broker's reason."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from connector.spark.writer.task import IDEMPOTENCY_KEY
from devtools.interop_brokers import ExternalBroker
from tests.support.brokers import LOOPBACK, BrokerFactory, free_port
from tests.support.ids import unique_id
from tests.support.paho_client import PahoClient, Received
from tests.support.publishing import Message, publish
from tests.support.spark_streams import TRIGGER, StreamDirs, mqtt_reader
from tests.support.waiting import wait_subscribed

ARRIVE_TIMEOUT = 60.0


def subscriber(host: str, port: int, topic: str, *, v5: bool = False) -> PahoClient:
    client = PahoClient(unique_id("sub-"), protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311)
    assert client.connect(host, port).accepted
    client.subscribe(topic, 2)
    return client


def arrived(sub: PahoClient, payloads: set[bytes]) -> list[Received]:
    """Wait until every payload of ``payloads`` arrived; every message received so far."""
    return sub.wait_for_payloads(payloads, timeout=ARRIVE_TIMEOUT)


def write(frame: DataFrame, url: str, **options: str) -> None:
    writer = frame.write.format("mqtt").mode("append").option("brokerUrl", url)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_a_batch_write_publishes_each_row_to_its_topic_at_its_qos(
    spark: SparkSession, broker_factory: BrokerFactory
) -> None:
    broker = broker_factory()
    frame = spark.range(300).selectExpr(
        "concat('w/site', cast(id % 3 as string)) AS topic",
        "cast(id as string) AS payload",
        "cast(id % 3 as int) AS qos",
    )
    with subscriber(broker.host, broker.port, "w/#") as sub:
        write(frame.repartition(3), broker.url)
        received = arrived(sub, {str(i).encode() for i in range(300)})
    assert len(received) == 300
    for message in received:
        number = int(message.payload)
        assert message.topic == f"w/site{number % 3}"
        assert message.qos == number % 3


def test_the_topic_option_a_string_payload_and_retain(
    spark: SparkSession, broker_factory: BrokerFactory
) -> None:
    broker = broker_factory()
    frame = spark.createDataFrame([("on", True)], "payload STRING, retain BOOLEAN")
    write(frame, broker.url, topic="plant/lamp/state", qos="1")
    with subscriber(broker.host, broker.port, "plant/#") as late:  # subscribes afterwards
        (retained,) = arrived(late, {b"on"})
    assert retained.topic == "plant/lamp/state" and retained.retain and retained.qos == 1


def test_mochi_takes_a_batch_write_at_mqtt_5(spark: SparkSession, mochi: ExternalBroker) -> None:
    frame = spark.range(60).selectExpr(
        "'m/t' AS topic", "encode(cast(id as string), 'UTF-8') AS payload"
    )
    with subscriber(mochi.host, mochi.port, "m/#", v5=True) as sub:
        write(frame, mochi.url, mqttVersion="5", qos="2")
        received = arrived(sub, {str(i).encode() for i in range(60)})
    assert len(received) == 60 and {m.qos for m in received} == {2}


def test_a_broker_restart_in_the_middle_of_a_write_loses_nothing(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """One task writes 30,000 rows; a gate in the plan holds row 20,000 until the first Arrow
    batch (10,000 rows) is at the subscriber and the broker (its sessions saved) has
    restarted, so the task's connection dies between its batches. The task connects again,
    the write succeeds, and a persistent subscriber gets every row."""
    broker = broker_factory(persistence=True)
    waiting, go = tmp_path / "waiting", tmp_path / "go"
    gate_row = 20_000

    @F.udf("bigint")
    def gate(i):  # no hints: they would make PySpark guess a UDF type
        if i == gate_row:
            waiting.touch()
            deadline = time.monotonic() + 120
            while not go.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return i

    frame = spark.range(30_000, numPartitions=1).select(gate("id").alias("id"))
    frame = frame.selectExpr("'r/all' AS topic", "cast(id as string) AS payload")
    sub = PahoClient(unique_id("sub-"), clean_session=False)
    assert sub.connect(broker.host, broker.port).accepted
    sub.subscribe("r/#", 1)
    restarted: list[bool] = []

    def restart_at_the_gate() -> None:
        """In a thread of its own: the write runs in the test's thread, where Spark finds
        the data source (a Python data source is looked up through the thread's session)."""
        try:
            deadline = time.monotonic() + 120
            while not (waiting.exists() and len(sub.messages) >= 10_000):
                if time.monotonic() > deadline:
                    return  # the test fails on ``restarted``
                time.sleep(0.01)
            broker.restart()
            restarted.append(True)
        finally:
            go.touch()

    restarter = threading.Thread(target=restart_at_the_gate)
    restarter.start()
    try:
        write(frame, broker.url)
        restarter.join(60)
        assert restarted, f"no restart: gate {waiting.exists()}, {len(sub.messages)} arrived"
        arrived(sub, {str(i).encode() for i in range(30_000)})
    finally:
        go.touch()
        restarter.join(60)
        sub.close()
    connects = broker.log_text().count(" as spark-mqtt-w-")
    assert connects >= 2, "the task never connected again"


def with_every_property(topic: str, count: int) -> list[Message]:
    """``count`` MQTT 5 messages with every property a consumer sees."""
    messages = []
    for i in range(count):
        props = PahoProperties(PacketTypes.PUBLISH)
        props.ContentType = "application/json"
        props.ResponseTopic = "reply/here"
        props.CorrelationData = b"corr-%d" % i
        props.MessageExpiryInterval = 3600
        props.PayloadFormatIndicator = 1
        props.UserProperty = [("site", "s1"), ("n", str(i))]
        messages.append(Message(topic, json.dumps({"n": i}).encode(), properties=props))
    return messages


def test_mqtt_to_mqtt_keeps_the_properties_and_adds_the_idempotency_key(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("relay-")
    source = mqtt_reader(
        spark, broker.url, dirs.wal, topic="in/#", qos=1, clientId=client_id, mqttVersion=5
    ).load()
    relayed = source.select(
        F.concat(F.lit("out/"), F.col("topic")).alias("topic"), "payload", "qos", "properties"
    )
    query = (
        relayed.writeStream.format("mqtt")
        .option("brokerUrl", broker.url)
        .option("mqttVersion", "5")
        .option("checkpointLocation", str(dirs.checkpoint))
        .trigger(processingTime=TRIGGER)
        .start()
    )
    try:
        with subscriber(broker.host, broker.port, "out/#", v5=True) as sub:
            wait_subscribed(broker, client_id, "in/#", 1)
            publish(broker, with_every_property("in/dev1", 20), protocol=mqtt.MQTTv5)
            received = arrived(sub, {json.dumps({"n": i}).encode() for i in range(20)})
    finally:
        query.stop()
    assert query.exception() is None
    keys = set()
    for message in received:
        n = json.loads(message.payload)["n"]
        props = message.properties
        assert message.topic == "out/in/dev1"
        assert props.ContentType == "application/json"
        assert props.ResponseTopic == "reply/here"
        assert props.CorrelationData == b"corr-%d" % n
        assert props.PayloadFormatIndicator == 1
        assert 0 < props.MessageExpiryInterval <= 3600
        user = props.UserProperty
        assert user[:2] == [("site", "s1"), ("n", str(n))]
        (key,) = [value for name, value in user if name == IDEMPOTENCY_KEY]
        keys.add(key)
        assert not hasattr(props, "SubscriptionIdentifier")
    assert len(keys) == 20
    query_id, batch, partition, row = next(iter(keys)).split(":")
    assert query_id == query.id and int(batch) >= 0 and int(partition) >= 0 and int(row) >= 0


def write_file(folder: Path, name: str, rows: range) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"id": i, "site": f"s{i % 2}"}) for i in rows]
    (folder / f".{name}").write_text("\n".join(lines) + "\n")
    (folder / f".{name}").rename(folder / name)  # the file source never sees half a file


def test_a_restart_on_the_checkpoint_publishes_no_committed_batch_again(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """A file source written to MQTT with ``availableNow``: the second run on the same
    checkpoint finds nothing new and publishes nothing; a third, after a new file, publishes
    that file's rows alone."""
    broker = broker_factory()
    files = tmp_path / "in"
    checkpoint = tmp_path / "checkpoint"

    def run() -> int:
        frame = spark.readStream.schema("id BIGINT, site STRING").json(str(files))
        query = (
            frame.selectExpr(
                "concat('f/', site) AS topic", "to_json(struct(*)) AS payload", "1 AS qos"
            )
            .writeStream.format("mqtt")
            .option("brokerUrl", broker.url)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        return sum(p["numInputRows"] for p in query.recentProgress)

    def payloads(rows: range) -> set[bytes]:
        return {json.dumps({"id": i, "site": f"s{i % 2}"}, separators=(",", ":")).encode()
                for i in rows}  # fmt: skip

    with subscriber(broker.host, broker.port, "f/#") as sub:
        write_file(files, "a.json", range(0, 50))
        assert run() == 50
        arrived(sub, payloads(range(50)))
        assert run() == 0
        write_file(files, "b.json", range(50, 80))
        assert run() == 30
        received = arrived(sub, payloads(range(80)))
    assert sorted(m.payload for m in received) == sorted(payloads(range(80)))


@pytest.mark.parametrize(
    ("options", "columns", "message"),
    [
        ({"qos": "3"}, "'t' AS topic, 'x' AS payload", "'qos' must be"),
        ({"walPath": "/tmp/w"}, "'t' AS topic, 'x' AS payload", "'walPath' is an option of"),
        ({}, "'x' AS payload", "needs a 'topic' column"),
        ({}, "'t' AS topic, 'x' AS payload, 1 AS id", "columns 'id' are not the MQTT writer's"),
        ({"topic": "a/#"}, "'x' AS payload", "needs a topic name, not a filter"),
    ],
)
def test_bad_options_and_columns_fail_before_a_connection(
    spark: SparkSession, options: dict[str, str], columns: str, message: str
) -> None:
    url = f"tcp://{LOOPBACK}:{free_port()}"  # nothing listens: a connection would fail
    frame = spark.range(1).selectExpr(*[c.strip() for c in columns.split(", ")])
    with pytest.raises(Exception, match=message):
        write(frame, url, **options)


def test_a_bad_row_fails_the_write_naming_it(
    spark: SparkSession, broker_factory: BrokerFactory
) -> None:
    broker = broker_factory()
    rows = [("t/a", "1", 1), ("t/b", "2", 7)]
    frame = spark.createDataFrame(rows, "topic STRING, payload STRING, qos INT").coalesce(1)
    with pytest.raises(Exception, match="row 1: qos must be 0, 1 or 2, got 7"):
        write(frame, broker.url)
    bad_topic = [("t/a", "1"), ("t/#", "2")]
    frame = spark.createDataFrame(bad_topic, "topic STRING, payload STRING").coalesce(1)
    with pytest.raises(Exception, match=r"row 1 of partition 0 \(topic 't/#'\) cannot be"):
        write(frame, broker.url)


def test_overwrite_is_refused(spark: SparkSession) -> None:
    frame = spark.range(1).selectExpr("'t' AS topic", "'x' AS payload")
    writer = frame.write.format("mqtt").mode("overwrite").option("brokerUrl", "tcp://h:1")
    with pytest.raises(Exception, match="MQTT cannot overwrite"):
        writer.save()


def test_a_refused_topic_fails_the_write_with_the_reason(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    acl = tmp_path / "acl"
    acl.write_text("topic readwrite open/#\n")
    broker = broker_factory(extra_config=[f"acl_file {acl}"])
    frame = spark.createDataFrame(
        [("open/a", "1"), ("closed/b", "2")], "topic STRING, payload STRING"
    )
    started = time.monotonic()
    with pytest.raises(Exception, match=r"0x87 Not authorized for a PUBLISH to 'closed/b'"):
        write(frame.coalesce(1), broker.url, mqttVersion="5")
    assert time.monotonic() - started < 60  # refused, not timed out
