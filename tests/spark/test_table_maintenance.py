"""Table maintenance for the DataFrame API user (docs/operations.md, "Table maintenance"):
``format("mqtt")`` into ``writeStream.format("delta")`` with a :class:`TableMaintenance`
following the query compacts the table while it streams, and every message lands once."""

from __future__ import annotations

from pyspark.sql import SparkSession

from devtools.delta_log import DeltaSnapshot, delta_commits
from streaming_jobs.compaction_policy import FANOUT, CompactionPolicy
from streaming_jobs.table_maintenance import TableMaintenance
from tests.brokers import BrokerFactory
from tests.spark.streams import (
    StreamDirs,
    assert_exactly_once,
    numbered,
    publish,
    read_table,
    start_stream,
    unique_id,
    wait_for_rows,
    wait_subscribed,
)
from tests.waiting import wait_until

BURSTS = 2 * FANOUT + 2
"""Bursts published one batch apart: enough batch files for two compactions."""
PER_BURST = 5


def test_a_followed_query_is_compacted_while_it_streams(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id()
    query = start_stream(spark, broker.url, dirs, topic="tm/#", qos=1, clientId=client_id)
    maintenance = TableMaintenance(
        spark, [str(dirs.table)], CompactionPolicy(64 * 1024, 23), check_every=1
    )
    maintenance.follow(query)
    sent = []
    try:
        wait_subscribed(broker, client_id, "tm/#", 1)
        for burst in range(BURSTS):
            messages = numbered("tm/a", PER_BURST, start=burst * PER_BURST)
            publish(broker, messages)
            sent += messages
            wait_for_rows(spark, dirs.table, len(sent), [query])
        wait_until(lambda: maintenance.stats.compactions >= 2, 120, message="two compactions")
    finally:
        query.stop()
        assert maintenance.close(120)

    assert_exactly_once(read_table(spark, dirs.table), sent)
    operations = [
        action["commitInfo"]["operation"]
        for commit in delta_commits(dirs.table)
        for action in commit["actions"]
        if "commitInfo" in action
    ]
    appends = operations.count("STREAMING UPDATE")
    assert operations.count("OPTIMIZE") == maintenance.stats.compactions >= 2
    assert len(DeltaSnapshot.load(dirs.table).files) < appends / 2, operations
