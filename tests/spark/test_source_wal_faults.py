"""The source over a damaged, wiped or shared write-ahead log.

* A torn tail of the last segment (what a crash mid-append leaves) is cut on restart: no
  garbage row lands and every complete record, processed or not, is delivered once.
* A wiped WAL under a checkpoint that saw records is data loss: the query fails naming
  ``failOnDataLoss`` unless that option is false, in which case it carries on.
* A second query on a WAL in use fails naming the WAL and its lock; the first carries on.
"""

from __future__ import annotations

import os
import shutil
import time
from array import array
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from connector.wal.block import encode_block
from connector.wal.records import FLAGS
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import numbered, publish
from tests.support.spark_streams import (
    StreamDirs,
    assert_exactly_once,
    assert_gap_free,
    mqtt_reader,
    payloads,
    read_table,
    start_stream,
    to_delta,
    wait_for_rows,
    wait_wal_released,
    wal_holds,
)
from tests.support.waiting import wait_subscribed, wait_until

FAIL_TIMEOUT = 120.0
WAL_TIMEOUT = 30.0
NEVER = "1 hour"
"""A trigger interval no test outlives: after its first trigger the query reads nothing more,
so messages the receiver stores stay unprocessed in the WAL."""


def last_segment(wal: Path) -> Path:
    segments = sorted(wal.glob("*.seg"))
    assert segments, f"no segment in {wal}"
    return segments[-1]


def torn_record(offset: int) -> bytes:
    """The first bytes of a data block of one row at ``offset``: a write cut short by a
    crash."""
    payload = b"GARBAGE-never-acknowledged" * 4
    parts = encode_block(
        offset,
        [b"torn/t"],
        array("q", [time.time_ns() // 1000]),
        array("H", [0]),
        bytearray([FLAGS[(0, False, False, False)]]),
        array("i", [0]),
        array("i", [0, len(payload)]),
        [payload],
    )
    record = b"".join(parts)
    return record[: len(record) - 17]


@pytest.mark.parametrize("damage", ["torn-record", "random-bytes"])
def test_torn_wal_tail_is_cut_without_losing_records(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs, damage: str
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    options: dict[str, str | int] = {"topic": "torn/#", "qos": 1, "clientId": client_id}
    landed = numbered("torn/t", 10, tag="landed")
    stored = numbered("torn/t", 40, tag="stored")
    after = numbered("torn/t", 20, tag="after")

    query = start_stream(spark, broker.url, dirs, **options)
    try:
        wait_subscribed(broker, client_id, "torn/#", 1)
        publish(broker, landed)
        wait_for_rows(spark, dirs.table, len(landed), [query])
    finally:
        query.stop()

    # Second run: stores messages in the WAL but never gets to process them.
    query = to_delta(
        mqtt_reader(spark, broker.url, dirs.wal, **options).load(), dirs, trigger=NEVER
    )
    try:
        wait_until(lambda: query.lastProgress is not None, FAIL_TIMEOUT, message="no first trigger")
        publish(broker, stored)
        total = len(landed) + len(stored)
        wait_until(lambda: wal_holds(dirs.wal, total), WAL_TIMEOUT, message="WAL not written")
    finally:
        query.stop()
    assert len(read_table(spark, dirs.table)) == len(landed)

    wait_wal_released(dirs.wal)
    segment = last_segment(dirs.wal)
    intact = segment.read_bytes()
    tail = torn_record(total) if damage == "torn-record" else os.urandom(333)
    with segment.open("ab") as handle:
        handle.write(tail)

    query = start_stream(spark, broker.url, dirs, **options)
    try:
        wait_until(lambda: segment.stat().st_size == len(intact), 60.0, message="torn tail not cut")
        publish(broker, after)
        wait_for_rows(spark, dirs.table, total + len(after), [query])
    finally:
        query.stop()
    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, landed + stored + after)
    assert_gap_free(rows)
    assert payloads(rows) == [m.payload for m in landed + stored + after]
    assert all(b"GARBAGE" not in p for p in payloads(rows))
    assert segment.read_bytes().startswith(intact)
    assert tail not in segment.read_bytes()


def test_wiped_wal_fails_the_query_unless_data_loss_is_allowed(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    options = {"topic": "wipe/#", "clientId": client_id}
    first = numbered("wipe/t", 20, tag="first")
    later = numbered("wipe/t", 20, tag="later")
    query = start_stream(spark, broker.url, dirs, **options)
    try:
        wait_subscribed(broker, client_id, "wipe/#", 1)
        publish(broker, first)
        wait_for_rows(spark, dirs.table, len(first), [query])
    finally:
        query.stop()
    wait_wal_released(dirs.wal)
    shutil.rmtree(dirs.wal)

    query = start_stream(spark, broker.url, dirs, **options)
    try:
        with pytest.raises(StreamingQueryException) as failure:
            # pyspark types awaitTermination's timeout int; it takes seconds as a float
            query.awaitTermination(FAIL_TIMEOUT)  # type: ignore[arg-type]
    finally:
        query.stop()
    text = str(failure.value)
    assert "DataLossError" in text, text
    assert "failOnDataLoss" in text, text
    assert "wiped or replaced" in text, text
    assert len(read_table(spark, dirs.table)) == len(first), "the failed run wrote rows"

    query = start_stream(spark, broker.url, dirs, failOnDataLoss="false", **options)
    try:
        publish(broker, later)
        wait_for_rows(spark, dirs.table, len(first) + len(later), [query])
    finally:
        query.stop()
    rows = read_table(spark, dirs.table)
    assert_exactly_once(rows, first + later)
    # The new WAL numbers its records from 0 again.
    assert_gap_free([r for r in rows if bytes(r["payload"]).startswith(b"later")])


def test_second_query_on_a_wal_in_use_fails_and_the_first_goes_on(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    options = {"topic": "lock/#", "clientId": client_id}
    owner = StreamDirs.under(tmp_path / "owner")
    # Same WAL and client id, its own checkpoint and table.
    intruder = StreamDirs(owner.wal, tmp_path / "intruder" / "ck", tmp_path / "intruder" / "t")
    first = numbered("lock/t", 15, tag="first")
    second = numbered("lock/t", 15, tag="second")
    query = start_stream(spark, broker.url, owner, **options)
    try:
        wait_subscribed(broker, client_id, "lock/#", 1)
        publish(broker, first)
        wait_for_rows(spark, owner.table, len(first), [query])

        other = start_stream(spark, broker.url, intruder, **options)
        try:
            with pytest.raises(StreamingQueryException) as failure:
                # pyspark types awaitTermination's timeout int; it takes seconds as a float
                other.awaitTermination(FAIL_TIMEOUT)  # type: ignore[arg-type]
        finally:
            other.stop()
        text = str(failure.value)
        assert "WalLockedError" in text, text
        assert f"WAL directory {owner.wal} is locked" in text, text

        assert query.isActive and query.exception() is None
        publish(broker, second)
        wait_for_rows(spark, owner.table, len(first) + len(second), [query])
    finally:
        query.stop()
    rows = read_table(spark, owner.table)
    assert_exactly_once(rows, first + second)
    assert_gap_free(rows)
    assert read_table(spark, intruder.table) == []
    # The refused query never connected: it would have taken over the owner's session.
    assert broker.log_text().count(f" as {client_id} (") == 1
