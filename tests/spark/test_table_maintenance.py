"""Table maintenance for the DataFrame API user (docs/operations.md, "Table maintenance"):
``format("mqtt")`` into ``writeStream.format("delta")`` with a :class:`TableMaintenance`
following the query compacts the table while it streams; ``VACUUM`` with a short retention
(Delta's safety check off for the maintenance's own session, as a test may) deletes the
replaced files and the stream goes on; every message lands once."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pytest
from pyspark.sql import SparkSession

from devtools.delta_log import DeltaSnapshot, delta_commits
from streaming_jobs.compaction_policy import FANOUT, CompactionPolicy
from streaming_jobs.table_maintenance import TableMaintenance
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import numbered, publish
from tests.support.spark_streams import (
    StreamDirs,
    assert_exactly_once,
    read_table,
    start_stream,
    wait_for_rows,
)
from tests.support.waiting import wait_subscribed, wait_until

RETENTION_SECONDS = 10.0
"""The stream is idle while VACUUM is awaited: no batch has a file written and not committed."""
BURSTS = FANOUT + 2
"""Bursts published one batch apart: enough batch files for a compaction."""
PER_BURST = 5


@pytest.mark.timeout(600)
def test_a_followed_query_is_compacted_while_it_streams(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("tm-")
    query = start_stream(spark, broker.url, dirs, topic="tm/#", qos=1, clientId=client_id)
    maintenance = TableMaintenance(
        spark,
        [str(dirs.table)],
        CompactionPolicy(64 * 1024, 23),
        check_every=1,
        vacuum_every=RETENTION_SECONDS,
        vacuum_retention_hours=RETENTION_SECONDS / 3600,
        retention_check=False,
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
        wait_until(lambda: maintenance.stats.compactions >= 1, 120, message="a compaction")
        # The files the compaction replaced stay until VACUUM finds them past the retention.
        wait_until(
            lambda: on_disk(dirs.table) == live(dirs.table),
            RETENTION_SECONDS * 3 + 120,
            message="VACUUM deleting the replaced files",
        )
        after = numbered("tm/a", PER_BURST, start=len(sent))
        publish(broker, after)
        sent += after
        wait_for_rows(spark, dirs.table, len(sent), [query])  # the stream goes on
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
    assert operations.count("OPTIMIZE") == maintenance.stats.compactions >= 1
    assert len(DeltaSnapshot.load(dirs.table).files) < appends / 2, operations
    assert maintenance.stats.vacuums >= 1
    assert maintenance.stats.failures == 0


def on_disk(table: Path) -> set[str]:
    return {p.name for p in table.glob("*.parquet")}


def live(table: Path) -> set[str]:
    return {Path(unquote(path)).name for path in DeltaSnapshot.load(table).files}
