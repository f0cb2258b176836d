"""Helpers for end-to-end tests of ``format("mqtt")`` (tests/spark, tests/chaos and the other
directories that run queries): where a query keeps its files, starting ``mqtt`` -> Delta
queries, waiting on the Delta table, and the delivery assertions.

Waits are conditions with deadlines: the Delta table for a row count, the WAL's lock for a
stopped writer. The fixtures (the Spark session, ``dirs``) are in
:mod:`tests.support.spark_fixtures`; publishing is :mod:`tests.support.publishing`, a
receiver's subscription :func:`tests.support.waiting.wait_subscribed`.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from connector.wal import WalDataLossError, WalReader
from devtools.delta_log import delta_version
from tests.support.publishing import Message
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.streaming import DataStreamReader, StreamingQuery

TRIGGER = "300 milliseconds"
LAND_TIMEOUT = 120.0
"""Deadline for messages to reach the table (the first Delta commit of a run takes seconds)."""
COLUMNS = (
    "topic", "payload", "qos", "retained", "duplicate", "messageId", "timestamp", "offset",
    "receiver",
)  # fmt: skip


@dataclass(frozen=True)
class StreamDirs:
    """Where one query keeps its WAL, checkpoint and Delta table."""

    wal: Path
    checkpoint: Path
    table: Path

    @classmethod
    def under(cls, base: Path) -> StreamDirs:
        return cls(base / "wal", base / "checkpoint", base / "table")


# ---------------------------------------------------------------------------- queries


def mqtt_reader(
    spark: SparkSession, broker_url: str, wal: Path, **options: str | int
) -> DataStreamReader:
    """``spark.readStream.format("mqtt")`` with ``brokerUrl``, ``walPath`` and ``options``."""
    reader = spark.readStream.format("mqtt").option("brokerUrl", broker_url)
    reader = reader.option("walPath", str(wal))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader


def to_delta(
    frame: DataFrame,
    dirs: StreamDirs,
    *,
    trigger: str | None = TRIGGER,
    available_now: bool = False,
) -> StreamingQuery:
    """Start writing ``frame`` to ``dirs.table`` with checkpoint ``dirs.checkpoint``."""
    writer = frame.writeStream.format("delta").option("checkpointLocation", str(dirs.checkpoint))
    if available_now:
        writer = writer.trigger(availableNow=True)
    elif trigger is not None:
        writer = writer.trigger(processingTime=trigger)
    return writer.start(str(dirs.table))


def start_stream(
    spark: SparkSession, broker_url: str, dirs: StreamDirs, **options: str | int
) -> StreamingQuery:
    """An ``mqtt`` -> Delta query with a short processing-time trigger."""
    return to_delta(mqtt_reader(spark, broker_url, dirs.wal, **options).load(), dirs)


def stop_all(queries: Iterable[StreamingQuery]) -> None:
    """Stop every query, even when one of them fails to stop."""
    errors = []
    for query in queries:
        try:
            query.stop()
        except Exception as exc:  # stop the others first
            errors.append(exc)
    if errors:
        raise errors[0]


def read_table(spark: SparkSession, table: Path) -> list[Row]:
    """Every row of the Delta table (empty before its first commit), ordered by offset."""
    if delta_version(table) < 0:
        return []
    return spark.read.format("delta").load(str(table)).orderBy("offset").collect()


def ensure_healthy(queries: Iterable[StreamingQuery]) -> None:
    """Fail at once, with the query's error, when a query died."""
    for query in queries:
        error = query.exception()
        if error is not None:
            raise AssertionError(f"query {query.id} failed: {error}")
        if not query.isActive:
            raise AssertionError(f"query {query.id} stopped unexpectedly")


def wait_for_rows(
    spark: SparkSession,
    table: Path,
    count: int,
    queries: Sequence[StreamingQuery] = (),
    timeout: float = LAND_TIMEOUT,
) -> list[Row]:
    """Wait until the table holds at least ``count`` rows; return them ordered by offset.

    The table is counted only when a new Delta commit appeared; ``queries`` must stay healthy.
    """
    seen = {"version": -2, "rows": 0}

    def landed() -> bool:
        ensure_healthy(queries)
        version = delta_version(table)
        if version != seen["version"]:
            seen["version"] = version
            seen["rows"] = 0 if version < 0 else spark.read.format("delta").load(str(table)).count()
        return seen["rows"] >= count

    wait_until(
        landed,
        timeout,
        interval=0.1,
        message=lambda: f"{table} holds {seen['rows']} rows, expected {count}",
    )
    return read_table(spark, table)


def wal_holds(wal: Path, count: int) -> bool:
    """Whether the WAL stores offsets [0, count) (read lock-free, like Spark tasks do)."""
    try:
        return len(WalReader(wal).read(0, count)) == count
    except (WalDataLossError, FileNotFoundError):
        return False


def wait_wal_released(wal: Path, timeout: float = 30.0) -> None:
    """Wait until no process holds the WAL's writer lock (a stopped query's runner exited)."""

    def free() -> bool:
        fd = os.open(wal / "LOCK", os.O_RDWR | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)  # closing the descriptor releases a lock taken on it
        return True

    wait_until(free, timeout, interval=0.05, message=f"WAL {wal} is still locked")


def payloads(rows: Iterable[Row]) -> list[bytes]:
    """The payloads of ``rows`` as bytes, in row order."""
    return [bytes(row["payload"]) for row in rows]


def assert_exactly_once(rows: Sequence[Row], messages: Sequence[Message]) -> None:
    """Every message appears exactly once (by payload) and nothing else does."""
    got = sorted(payloads(rows))
    want = sorted(m.payload for m in messages)
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    duplicated = sorted({p for p in got if got.count(p) > 1})
    assert not (missing or extra or duplicated), (
        f"{len(got)} rows for {len(want)} messages: missing {missing[:10]}, "
        f"unexpected {extra[:10]}, duplicated {duplicated[:10]}"
    )


def assert_at_least_once(rows: Sequence[Row], messages: Sequence[Message]) -> int:
    """Every message appears (by payload), nothing else does, and a message appears more
    than once only as broker resends (DUP=1 rows): QoS 1 after a dropped connection
    (docs/delivery.md). Returns the number of extra rows."""
    got = payloads(rows)
    want = {m.payload for m in messages}
    assert set(got) == want, (
        f"{len(got)} rows for {len(want)} messages: missing {sorted(want - set(got))[:10]}, "
        f"unexpected {sorted(set(got) - want)[:10]}"
    )
    first = [bytes(row["payload"]) for row in rows if not row["duplicate"]]
    repeated = sorted({p for p in first if first.count(p) > 1})
    assert not repeated, f"first deliveries stored twice: {repeated[:10]}"
    return len(got) - len(want)


def reported_delivery(query: StreamingQuery) -> dict:
    """The receivers' delivery counters in the query's last progress (docs/delivery.md)."""
    progress = query.lastProgress
    assert progress is not None, "the query reported no progress"
    return json.loads(progress["sources"][0]["latestOffset"])["delivery"]


def assert_gap_free(rows: Sequence[Row], start: int = 0) -> None:
    """The rows' offsets are exactly start, start + 1, ... with no gap or repeat."""
    offsets = sorted(row["offset"] for row in rows)
    assert offsets == list(range(start, start + len(rows))), f"offsets {offsets}"
