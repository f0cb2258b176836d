"""``format("mqtt")`` into Delta through Spark Connect: a client session on a local Spark
Connect server reads a real Mosquitto with ``Trigger.AvailableNow`` and writes a Delta table.

The source reaches the server in one of two ways, each tested: the server's Python has the
connector installed and PySpark finds the top-level ``pyspark_mqtt`` module by itself, or the
client registers a data source class with ``spark.dataSource.register``. A class registered
from the client is pickled there and unpickled by the server's Python, which imports
``connector.source`` for it: a server without the connector installed fails both ways, with
the errors the last tests pin down.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Row
from pyspark.sql.connect.session import SparkSession as ConnectSession

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.source import MqttDataSource
from tests.connect.server import ConnectServer
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.ids import unique_id
from tests.support.paho_client import PahoClient
from tests.support.publishing import Message, publish
from tests.support.spark_streams import StreamDirs, assert_exactly_once, assert_gap_free

pytestmark = pytest.mark.spark

TOPIC_FILTER = "conn/+/reading"
COUNT = 120
RUN_TIMEOUT = 240.0
"""An ``AvailableNow`` run: the server starts the source's Python runner, drains the broker's
queue into the WAL and commits one or more batches to Delta."""


def messages(count: int = COUNT) -> list[Message]:
    """``count`` QoS 1 messages over two topics the filter matches, distinct payloads."""
    return [
        Message(f"conn/dev-{n % 2}/reading", f"reading-{n}".encode(), qos=1) for n in range(count)
    ]


def queue_for(broker: MosquittoBroker, client_id: str, batch: list[Message]) -> None:
    """Make the query's persistent session exist with its subscription, then publish: the
    broker queues every message for the query that has not started yet."""
    client = MqttClient(
        broker.url, SessionConfig(client_id, clean_session=False), [(TOPIC_FILTER, 1)]
    )
    assert not client.connect().session_present
    client.disconnect()
    publish(broker, batch)


def ingest(
    spark: ConnectSession, source: str, broker: MosquittoBroker, client_id: str, dirs: StreamDirs
) -> None:
    """Run ``format(source)`` -> Delta with ``Trigger.AvailableNow`` until it ends by itself."""
    frame = (
        spark.readStream.format(source)
        .option("brokerUrl", broker.url)
        .option("topic", TOPIC_FILTER)
        .option("qos", "1")
        .option("clientId", client_id)
        .option("walPath", str(dirs.wal))
        .option("availableNowIdleTimeout", "0.5")
        .load()
    )
    query = (
        frame.writeStream.format("delta")
        .option("checkpointLocation", str(dirs.checkpoint))
        .trigger(availableNow=True)
        .start(str(dirs.table))
    )
    try:
        # pyspark types awaitTermination's timeout int; it takes seconds as a float
        ended = query.awaitTermination(RUN_TIMEOUT)  # type: ignore[arg-type]
    finally:
        if query.isActive:
            query.stop()
    assert ended, f"the AvailableNow query still ran after {RUN_TIMEOUT} s"
    assert query.exception() is None, query.exception()


def table_rows(spark: ConnectSession, table: Path) -> list[Row]:
    """The table's rows, read back through the Connect session."""
    return spark.read.format("delta").load(str(table)).collect()


def assert_landed(rows: list[Row], sent: list[Message]) -> None:
    """Every message once, with its own topic and QoS, and offsets without a gap."""
    assert_exactly_once(rows, sent)
    assert_gap_free(rows)
    topics = {m.payload: m.topic for m in sent}
    for row in rows:
        assert row["topic"] == topics[bytes(row["payload"])], row
        assert (row["qos"], row["duplicate"]) == (1, False), row


def test_format_mqtt_is_found_by_a_server_with_the_connector_installed(
    server_with_connector: ConnectServer, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    client_id = unique_id("conn-")
    sent = messages()
    queue_for(broker, client_id, sent)
    spark = server_with_connector.session()
    try:
        dirs = StreamDirs.under(tmp_path / "stream")
        ingest(spark, "mqtt", broker, client_id, dirs)
        assert_landed(table_rows(spark, dirs.table), sent)
    finally:
        spark.stop()


def test_a_connect_client_writes_to_mqtt(
    server_with_connector: ConnectServer, broker_factory: BrokerFactory
) -> None:
    """``df.write.format("mqtt")`` from a Spark Connect client: the server's tasks publish
    every row, each to its topic."""
    broker = broker_factory()
    sub = PahoClient(unique_id("sub-"))
    assert sub.connect(broker.host, broker.port).accepted
    sub.subscribe("connw/#", 1)
    spark = server_with_connector.session()
    try:
        frame = spark.range(COUNT).selectExpr(
            "concat('connw/', cast(id % 3 as string)) AS topic", "cast(id as string) AS payload"
        )
        frame.write.format("mqtt").mode("append").option("brokerUrl", broker.url).save()
        received = sub.wait_for_messages(COUNT, timeout=60)
    finally:
        spark.stop()
        sub.close()
    assert sorted(int(m.payload) for m in received) == list(range(COUNT))
    assert all(m.topic == f"connw/{int(m.payload) % 3}" for m in received)


def test_a_client_registers_a_source_class_of_its_own(
    server_with_connector: ConnectServer, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    class ClientMqtt(MqttDataSource):
        """Defined here, so pickled by value: only this client's registration names it."""

        @classmethod
        def name(cls) -> str:
            return "mqtt_from_client"

    broker = broker_factory()
    client_id = unique_id("conn-")
    sent = messages()
    queue_for(broker, client_id, sent)
    spark = server_with_connector.session()
    try:
        unknown = spark.read.format("mqtt_from_client").option("topic", "x")
        with pytest.raises(PySparkException, match="DATA_SOURCE_NOT_FOUND"):
            unknown.load().schema  # noqa: B018 (the schema is what asks the server)
        spark.dataSource.register(ClientMqtt)
        dirs = StreamDirs.under(tmp_path / "stream")
        ingest(spark, "mqtt_from_client", broker, client_id, dirs)
        assert_landed(table_rows(spark, dirs.table), sent)
    finally:
        spark.stop()


def test_a_server_without_the_connector_finds_no_mqtt_source(
    server_without_connector: ConnectServer, tmp_path: Path
) -> None:
    spark = server_without_connector.session()
    try:
        frame = unreachable_mqtt(spark, tmp_path)
        with pytest.raises(PySparkException, match="DATA_SOURCE_NOT_FOUND"):
            frame.load().schema  # noqa: B018
    finally:
        spark.stop()


def test_a_registered_class_still_needs_the_connector_on_the_server(
    server_without_connector: ConnectServer, tmp_path: Path
) -> None:
    spark = server_without_connector.session()
    try:
        spark.dataSource.register(MqttDataSource)  # pickled by reference: connector.source
        frame = unreachable_mqtt(spark, tmp_path)
        with pytest.raises(PySparkException, match="No module named 'connector'"):
            frame.load().schema  # noqa: B018
    finally:
        spark.stop()


def unreachable_mqtt(spark: Any, tmp_path: Path) -> Any:
    """A ``format("mqtt")`` reader whose options parse (no broker is contacted before
    ``start``)."""
    return (
        spark.readStream.format("mqtt")
        .option("brokerUrl", "tcp://127.0.0.1:1")
        .option("topic", TOPIC_FILTER)
        .option("walPath", str(tmp_path / "wal"))
    )
