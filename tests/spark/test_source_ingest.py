"""``format("mqtt")`` into Delta: every QoS, the row contents, and how the source is found.

A real Mosquitto broker, the real Spark session of the run and a real Delta table per test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from connector.source import MqttDataSource
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import Message, numbered, publish
from tests.support.spark_streams import (
    COLUMNS,
    StreamDirs,
    assert_exactly_once,
    assert_gap_free,
    mqtt_reader,
    read_table,
    start_stream,
    to_delta,
    wait_for_rows,
)
from tests.support.waiting import wait_subscribed

COUNT = 150
TOPICS = ("plant/a/temp", "plant/b/temp", "plant/c")
BINARY_TAIL = b"\x00\xff\xfe\x80"


@pytest.mark.parametrize("sub_qos", [0, 1, 2], ids=["sub-qos0", "sub-qos1", "sub-qos2"])
def test_every_message_lands_once_with_its_metadata(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs, sub_qos: int
) -> None:
    broker = broker_factory()
    # Retained before the subscription: delivered on subscribing, with the retain flag.
    retained = Message("plant/status", b"retained-before" + BINARY_TAIL, qos=1, retain=True)
    publish(broker, [retained])
    client_id = unique_id("spark-")
    query = start_stream(spark, broker.url, dirs, topic="plant/#", qos=sub_qos, clientId=client_id)
    try:
        wait_subscribed(broker, client_id, "plant/#", sub_qos)
        # Publish QoS cycles 0, 1, 2 over three topics; payloads are distinct and not UTF-8.
        live = [
            Message(TOPICS[n % 3], f"msg-{n}-".encode() + BINARY_TAIL, qos=n % 3)
            for n in range(COUNT)
        ]
        # Retained while subscribed: an established subscription gets the retain flag 0.
        live.append(Message("plant/status", b"retained-live", qos=1, retain=True))
        outside = Message("other/topic", b"not-subscribed", qos=1)
        publish(broker, [outside, *live])
        expected = [retained, *live]
        wait_for_rows(spark, dirs.table, len(expected), [query])
    finally:
        query.stop()

    rows = read_table(spark, dirs.table)
    assert tuple(spark.read.format("delta").load(str(dirs.table)).columns) == COLUMNS
    assert_exactly_once(rows, expected)
    assert_gap_free(rows)
    by_payload = {bytes(row["payload"]): row for row in rows}
    for message in expected:
        row = by_payload[message.payload]
        delivered_qos = min(message.qos, sub_qos)
        assert row["topic"] == message.topic
        assert row["qos"] == delivered_qos, (message, row)
        assert row["retained"] is (message is retained), (message, row)
        assert row["duplicate"] is False
        if delivered_qos == 0:
            assert row["messageId"] is None, row
        else:
            assert row["messageId"] is not None and 1 <= row["messageId"] <= 65535, row
        assert row["timestamp"] is not None
    # The retained message came with the subscription, before anything published after it.
    assert by_payload[retained.payload]["offset"] == 0


def _land_a_few(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path, session: SparkSession
) -> None:
    """Run an mqtt -> Delta query built from ``session`` and check messages land."""
    broker = broker_factory()
    dirs = StreamDirs.under(tmp_path / "stream")
    client_id = unique_id("spark-")
    frame = mqtt_reader(session, broker.url, dirs.wal, topic="reg/#", clientId=client_id).load()
    query = to_delta(frame, dirs)
    try:
        wait_subscribed(broker, client_id, "reg/#", 1)
        messages = numbered("reg/x", 20)
        publish(broker, messages)
        rows = wait_for_rows(spark, dirs.table, len(messages), [query])
    finally:
        query.stop()
    assert_exactly_once(rows, messages)


def test_format_mqtt_is_found_without_registration(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    # A new session of the same Spark context: nothing was registered in it by hand, so
    # format("mqtt") can only come from PySpark's discovery of the pyspark_mqtt module.
    _land_a_few(spark, broker_factory, tmp_path, spark.newSession())


def test_registering_by_hand_also_works(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    session = spark.newSession()
    session.dataSource.register(MqttDataSource)
    _land_a_few(spark, broker_factory, tmp_path, session)
