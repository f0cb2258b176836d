"""Spark-side helpers of the chaos tests: the process holding a WAL, waiting for a failed query,
the payloads a Delta table holds, the messages it still lacks, waiting for every published
message to land."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from devtools.delta_log import delta_version
from tests.support.ledger import Ledger
from tests.support.spark_streams import LAND_TIMEOUT, ensure_healthy
from tests.support.waiting import wait_until

FAIL_TIMEOUT = 120.0


def wal_holders(wal: Path) -> list[int]:
    """Processes with the WAL's LOCK file open: the one source process that writes it."""
    lock = str((wal / "LOCK").resolve())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fd_dir = f"/proc/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") == lock:
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


def kill_wal_holder(wal: Path) -> int:
    """SIGKILL the process that holds the WAL (the query's streaming source process: its MQTT
    connection, receiver thread and WAL writer) and wait until it is gone; returns its pid."""
    pids = wait_until(lambda: wal_holders(wal), 60, message=f"no process holds {wal}")
    assert len(pids) == 1, f"several processes hold {wal}: {pids}"
    os.kill(pids[0], signal.SIGKILL)
    wait_until(lambda: not os.path.exists(f"/proc/{pids[0]}/fd"), 30, message="still alive")
    return pids[0]


def wait_failed(query: StreamingQuery, timeout: float = FAIL_TIMEOUT) -> str:
    """Wait until ``query`` stops with an error; returns the error's text."""
    wait_until(lambda: not query.isActive, timeout, interval=0.05, message="query still active")
    error = query.exception()
    assert error is not None, "the query stopped without an error"
    return str(error)


def table_payloads(spark: SparkSession, table: Path) -> list[bytes]:
    """Every payload in the Delta table ([] before its first commit)."""
    if delta_version(table) < 0:
        return []
    rows = spark.read.format("delta").load(str(table)).select("payload").collect()
    return [bytes(row["payload"]) for row in rows]


def unlanded(spark: SparkSession, table: Path, ledger: Ledger) -> int:
    """How many messages of ``ledger`` the table does not hold yet."""
    return len(ledger.check(table_payloads(spark, table)).lost)


def wait_for_every_message(
    spark: SparkSession,
    table: Path,
    ledger: Ledger,
    queries: Sequence[StreamingQuery],
    timeout: float = LAND_TIMEOUT,
) -> None:
    """Wait until every message of ``ledger`` is in the table (a row count does not tell
    when QoS 1 resends may add rows); ``queries`` must stay healthy."""

    def missing() -> int:
        ensure_healthy(queries)
        return unlanded(spark, table, ledger)

    wait_until(lambda: missing() == 0, timeout, message=lambda: f"{missing()} not landed")
