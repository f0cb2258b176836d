"""``firstBatchWait``: the first batch of a run takes what the broker queued for the session
while no query ran, not the few messages stored when Spark first asked for an offset."""

from __future__ import annotations

from pyspark.sql import SparkSession

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import numbered, publish
from tests.support.spark_streams import StreamDirs, start_stream, wait_for_rows


def test_the_first_batch_of_a_run_takes_the_broker_s_queue(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    session = MqttClient(broker.url, SessionConfig(client_id, clean_session=False), [("fb/#", 1)])
    assert not session.connect().session_present
    session.disconnect()
    queued = numbered("fb/t", 500, qos=1)
    publish(broker, queued)  # queued for the persistent session: no query runs

    query = start_stream(
        spark, broker.url, dirs, topic="fb/#", qos=1, clientId=client_id, firstBatchWait=60
    )
    try:
        rows = wait_for_rows(spark, dirs.table, len(queued), [query])
    finally:
        query.stop()
    assert sorted(r.payload for r in rows) == sorted(m.payload for m in queued)
    first = spark.read.format("delta").option("versionAsOf", 0).load(str(dirs.table))
    assert first.count() == len(queued), "the first batch should hold the whole queue"
