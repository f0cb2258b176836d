"""Exactly once across restarts of the query and of the broker; admission control and
Trigger.AvailableNow; how partitions carry their records (inline or read from the WAL).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import numbered, publish
from tests.support.spark_streams import (
    LAND_TIMEOUT,
    StreamDirs,
    assert_at_least_once,
    assert_exactly_once,
    assert_gap_free,
    mqtt_reader,
    payloads,
    read_table,
    reported_delivery,
    start_stream,
    stop_all,
    to_delta,
    wait_for_rows,
    wal_holds,
)
from tests.support.waiting import wait_subscribed, wait_until

AVAILABLE_NOW_TIMEOUT = 120.0


def test_stop_and_restart_loses_nothing_and_repeats_nothing(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    before, while_down, after = (
        numbered("restart/t", 50, qos=1, tag="before"),
        numbered("restart/t", 50, qos=2, tag="down"),
        numbered("restart/t", 50, qos=1, tag="after"),
    )
    query = start_stream(spark, broker.url, dirs, topic="restart/#", qos=2, clientId=client_id)
    try:
        wait_subscribed(broker, client_id, "restart/#", 2)
        publish(broker, before)
        wait_for_rows(spark, dirs.table, len(before), [query])
    finally:
        query.stop()

    # The broker queues these for the persistent session (cleanSession=false by default).
    publish(broker, while_down)

    query = start_stream(spark, broker.url, dirs, topic="restart/#", qos=2, clientId=client_id)
    try:
        publish(broker, after)
        wait_for_rows(spark, dirs.table, 150, [query])
    finally:
        query.stop()
    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, before + while_down + after)
    assert_gap_free(rows)
    # One topic, publications one after the other: the broker keeps their order.
    assert payloads(rows) == [m.payload for m in before + while_down + after]


@pytest.mark.parametrize("qos", [1, 2])
def test_broker_restart_during_ingest(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs, qos: int
) -> None:
    broker = broker_factory(persistence=True)
    client_id = unique_id("spark-")
    first = numbered("brk/t", 80, qos=qos, tag="first")
    second = numbered("brk/t", 40, qos=qos, tag="second")
    # A small backlog bound pauses the receiver until Spark commits: when the broker goes
    # down, part of `first` is queued in the broker and part in flight (delivered, unread or
    # unacknowledged), so the restarted broker redelivers from its persistence.
    query = start_stream(
        spark, broker.url, dirs, topic="brk/#", qos=qos, clientId=client_id,
        maxBacklogMessages=20,
    )  # fmt: skip
    try:
        wait_subscribed(broker, client_id, "brk/#", qos)
        publish(broker, first)
        assert not wal_holds(dirs.wal, len(first)), "nothing was pending at the restart"
        broker.restart()  # SIGTERM: Mosquitto saves its persistence
        publish(broker, second)
        wanted = {m.payload for m in first + second}
        wait_until(
            lambda: set(payloads(wait_for_rows(spark, dirs.table, len(wanted), [query]))) >= wanted,
            LAND_TIMEOUT,
            message="not every message landed",
        )
    finally:
        query.stop()
    rows = read_table(spark, dirs.table)
    assert_gap_free(rows)
    if qos == 2:
        assert_exactly_once(rows, first + second)
        assert payloads(rows) == [m.payload for m in first + second]
    else:
        # PUBACKs the broker had not read (or saved) when it stopped are resent after the
        # restart: stored again, each counted as a possible duplicate (docs/delivery.md).
        extra = assert_at_least_once(rows, first + second)
        assert extra == reported_delivery(query)["possibleDuplicates"]
    connects = broker.log_text().count(f" as {client_id} (")
    assert connects >= 2, "the receiver did not reconnect after the broker restart"


def test_backlog_bound_pauses_the_receiver_without_stalling_the_query(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    """With maxBacklogMessages below the traffic, the receiver pauses until Spark has
    committed what it read; Spark must release it even when no new batch is pending."""
    broker = broker_factory()
    client_id = unique_id("spark-")
    messages = numbered("bp/t", 45, qos=2, tag="bp")
    query = start_stream(
        spark, broker.url, dirs, topic="bp/#", qos=2, clientId=client_id, maxBacklogMessages=10
    )
    try:
        wait_subscribed(broker, client_id, "bp/#", 2)
        publish(broker, messages)
        wait_for_rows(spark, dirs.table, len(messages), [query])
        progress = list(query.recentProgress)
    finally:
        query.stop()
    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, messages)
    assert_gap_free(rows)
    sizes = [p.numInputRows for p in progress if p.numInputRows]
    assert len(sizes) >= 2, f"the backlog bound did not split the stream: {sizes}"


def _establish_session(
    spark: SparkSession, broker_url: str, dirs: StreamDirs, **options: str | int
) -> None:
    """Run an AvailableNow query once: it creates the broker session and the WAL, finds
    nothing to read and stops by itself."""
    query = to_delta(
        mqtt_reader(spark, broker_url, dirs.wal, **options).load(), dirs, available_now=True
    )
    try:
        # pyspark types awaitTermination's timeout int; it takes seconds as a float
        assert query.awaitTermination(AVAILABLE_NOW_TIMEOUT), "AvailableNow query did not stop"  # type: ignore[arg-type]
        assert query.exception() is None
    finally:
        query.stop()


def test_max_messages_per_trigger_bounds_every_batch(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    limit = 25
    options = {"topic": "adm/#", "clientId": unique_id("spark-"), "availableNowIdleTimeout": "0.5"}
    _establish_session(spark, broker.url, dirs, **options)
    backlog = numbered("adm/t", 130, tag="backlog")
    publish(broker, backlog)  # queued by the broker for the persistent session
    query = start_stream(spark, broker.url, dirs, maxMessagesPerTrigger=limit, **options)
    try:
        wait_for_rows(spark, dirs.table, len(backlog), [query])
        progress = list(query.recentProgress)
    finally:
        query.stop()
    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, backlog)
    assert_gap_free(rows)
    sizes = [p.numInputRows for p in progress if p.numInputRows]
    assert sizes and max(sizes) <= limit, sizes
    assert sum(sizes) == len(backlog), sizes
    assert len(sizes) >= -(-len(backlog) // limit), sizes


def test_available_now_drains_the_backlog_and_stops(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    options = {"topic": "now/#", "clientId": unique_id("spark-"), "availableNowIdleTimeout": "1"}
    _establish_session(spark, broker.url, dirs, **options)
    assert read_table(spark, dirs.table) == []
    backlog = numbered("now/t", 120, qos=2, tag="backlog")
    publish(broker, backlog)  # nothing runs: the broker queues them
    frame = mqtt_reader(spark, broker.url, dirs.wal, maxMessagesPerTrigger=50, **options).load()
    query = to_delta(frame, dirs, available_now=True)
    try:
        # pyspark types awaitTermination's timeout int; it takes seconds as a float
        assert query.awaitTermination(AVAILABLE_NOW_TIMEOUT), "AvailableNow did not stop by itself"  # type: ignore[arg-type]
        assert query.exception() is None, query.exception()
        progress = list(query.recentProgress)
    finally:
        query.stop()
    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, backlog)
    assert_gap_free(rows)
    # AvailableNow honours the read limit too: the backlog took several batches.
    sizes = [p.numInputRows for p in progress if p.numInputRows]
    assert sum(sizes) == len(backlog) and max(sizes) <= 50, sizes


def _file_offsets(spark: SparkSession, table: Path) -> dict[str, list[int]]:
    """The offsets each data file of the table holds, in file order."""
    frame = spark.read.format("delta").load(str(table))
    files: dict[str, list[int]] = {}
    for row in frame.select("offset", "_metadata.file_path").collect():
        files.setdefault(row["file_path"], []).append(row["offset"])
    return files


def test_inline_and_wal_partitions_land_identical_data(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    modes = ("inline", "wal")
    streams = {mode: StreamDirs.under(tmp_path / mode) for mode in modes}
    ids = {mode: unique_id("spark-") for mode in modes}
    per_partition = 7
    for mode in modes:
        _establish_session(
            spark,
            broker.url,
            streams[mode],
            topic="part/#",
            clientId=ids[mode],
            availableNowIdleTimeout="0.5",
        )
    # A backlog, so the first batch is big enough to be split.
    messages = numbered("part/t", 150, qos=1, tag="p")
    publish(broker, messages)
    queries = [
        start_stream(
            spark,
            broker.url,
            streams[mode],
            topic="part/#",
            clientId=ids[mode],
            partitionData=mode,
            recordsPerPartition=per_partition,
        )
        for mode in modes
    ]
    try:
        for mode in modes:
            wait_for_rows(spark, streams[mode].table, len(messages), queries)
    finally:
        stop_all(queries)

    tables = {mode: read_table(spark, streams[mode].table) for mode in modes}
    for mode in modes:
        rows = tables[mode]
        assert_exactly_once(rows, messages)
        assert_gap_free(rows)
        assert payloads(rows) == [m.payload for m in messages], f"{mode}: not in offset order"
        # Each task wrote one file: a batch split into ranges of at most `per_partition`
        # records gives files holding consecutive offsets, and more than one per batch.
        files = _file_offsets(spark, streams[mode].table)
        for offsets in files.values():
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), offsets
            assert len(offsets) <= per_partition, offsets
        assert len(files) >= -(-len(messages) // per_partition), f"{mode}: {len(files)} files"
        history = spark.sql(f"DESCRIBE HISTORY delta.`{streams[mode].table}`").collect()
        added = [int(h["operationMetrics"].get("numAddedFiles", "0")) for h in history]
        assert max(added) > 1, f"{mode}: no batch was split: {added}"

    def content(rows: list) -> list[tuple]:
        return [
            (r["topic"], bytes(r["payload"]), r["qos"], r["retained"], r["offset"]) for r in rows
        ]

    assert content(tables["inline"]) == content(tables["wal"])
