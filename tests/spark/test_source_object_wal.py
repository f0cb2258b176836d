"""``format("mqtt")`` with its WAL on an S3-compatible server (s3proxy on loopback): the
object layout end to end, with records shipped inline or read by the tasks from the store,
with one receiver and with two; and a ``walPath`` the source cannot use is refused."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from connector.wal.opening import open_reader, wal_identity
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import numbered, publish
from tests.support.spark_streams import (
    StreamDirs,
    assert_exactly_once,
    mqtt_reader,
    read_table,
    to_delta,
    wait_for_rows,
)
from tests.support.waiting import wait_subscribed

COUNT = 120


@pytest.mark.parametrize(
    ("receivers", "partition_data"),
    [(1, "inline"), (1, "wal"), (2, "wal")],
    ids=["one-inline", "one-wal", "two-wal"],
)
def test_messages_land_once_through_a_wal_on_s3(
    spark: SparkSession,
    broker_factory: BrokerFactory,
    dirs: StreamDirs,
    s3_wal: str,
    receivers: int,
    partition_data: str,
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    topic = f"{client_id}/#"
    reader = mqtt_reader(
        spark, broker.url, dirs.wal, topic=topic, qos=2, clientId=client_id,
        receivers=receivers, partitionData=partition_data, recordsPerPartition=25,
        shareGroup="grp",
    )  # fmt: skip
    reader = reader.option("walPath", s3_wal)
    query = to_delta(reader.load(), dirs)
    try:
        subscribed = (
            [f"{client_id}-{i}" for i in range(receivers)] if receivers > 1 else [client_id]
        )
        for cid in subscribed:
            wanted = f"$share/grp/{topic}" if receivers > 1 else topic
            wait_subscribed(broker, cid, wanted, 2)
        messages = numbered(f"{client_id}/a", COUNT // 2, qos=1) + numbered(
            f"{client_id}/b", COUNT // 2, qos=2, tag="q2"
        )
        publish(broker, messages)
        wait_for_rows(spark, dirs.table, COUNT, [query])
    finally:
        query.stop()
    assert_exactly_once(read_table(spark, dirs.table), messages)
    assert not dirs.wal.exists()  # nothing went to the local disk
    base, query_string = s3_wal.split("?")
    shards = [f"{base}/shard-{i}?{query_string}" for i in range(receivers)]
    for shard in shards if receivers > 1 else [s3_wal]:
        assert wal_identity(shard) is not None
        assert open_reader(shard).first_offset() is not None


def test_an_unsupported_wal_path_is_refused_with_the_reason(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    reader = mqtt_reader(spark, broker.url, dirs.wal, topic="x/#", clientId=unique_id("spark-"))
    with pytest.raises(Exception, match=r"walPath.*s3a:// is not supported.*write it as s3://"):
        reader.option("walPath", "s3a://bucket/wal").load()
