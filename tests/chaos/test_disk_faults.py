"""The WAL's filesystem fills up, or turns read-only, while the query runs.

The receiver must not acknowledge what it could not make durable: the broker keeps those
messages for the persistent session. The query fails with an error naming the WAL directory
and the cause (no space left / read-only file system) instead of dropping data, and a restart
once the disk is usable again lands everything exactly once.

The filesystems are real: a tmpfs of a few pages (grown back with ``mount -o remount``) and
an ext4 image with ``errors=remount-ro`` whose error trigger turns it read-only under the
open WAL (see ``tests/chaos/disk.py``). Both need root; elsewhere the tests are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.chaos.disk import FailingExt4, TinyTmpfs, mount_fault_unavailable
from tests.chaos.streams import table_payloads, wait_failed, wait_for_every_message
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ledger import Ledger, LedgerPublisher, Tally, settle
from tests.support.spark_streams import (
    StreamDirs,
    reported_delivery,
    start_stream,
    wait_for_rows,
    wait_wal_released,
    wal_holds,
)
from tests.support.waiting import wait_subscribed

TOPIC = "chaos/disk/#"


def stored(wal: Path, most: int) -> int:
    """How many records [0, n) the WAL holds (n <= most)."""
    low, high = 0, most
    while low < high:
        mid = (low + high + 1) // 2
        if wal_holds(wal, mid):
            low = mid
        else:
            high = mid - 1
    return low


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[TinyTmpfs]:
    reason = mount_fault_unavailable()
    if reason:
        pytest.skip(reason)
    fs = TinyTmpfs(tmp_path / "walfs", 96 * 1024)
    try:
        yield fs
    finally:
        fs.close()


@pytest.fixture
def failing_ext4(tmp_path: Path) -> Iterator[FailingExt4]:
    reason = mount_fault_unavailable()
    if reason:
        pytest.skip(reason)
    try:
        fs = FailingExt4(tmp_path / "wal.img", tmp_path / "walfs")
    except OSError as exc:
        pytest.skip(f"cannot mount an ext4 image here: {exc}")
    try:
        yield fs
    finally:
        fs.close()


def test_a_full_wal_disk_stops_the_acks_fails_the_query_and_a_restart_loses_nothing(
    spark: SparkSession,
    broker_factory: BrokerFactory,
    tiny_fs: TinyTmpfs,
    tmp_path: Path,
    tally: Tally,
    ledger: Ledger,
) -> None:
    broker = broker_factory()
    dirs = StreamDirs(tiny_fs.path / "wal", tmp_path / "checkpoint", tmp_path / "table")
    client_id = unique_id("full-")
    options: dict[str, str | int] = {"topic": TOPIC, "qos": 2, "clientId": client_id}
    count = 2000  # far more than 96 KiB hold
    query = start_stream(spark, broker.url, dirs, **options)
    publisher = LedgerPublisher(broker.host, broker.port, "chaos/disk/t", ledger)
    try:
        wait_subscribed(broker, client_id, TOPIC, 2)
        publisher.publish(count)
        error = wait_failed(query)
    finally:
        query.stop()
        publisher.close()
    tally.add("disk_full_faults")
    assert "No space left on device" in error, error
    assert str(dirs.wal) in error, error
    wait_wal_released(dirs.wal)
    in_wal = stored(dirs.wal, count)
    assert in_wal < count, "the WAL was meant to fill up"

    tiny_fs.grow(64 << 20)  # space comes back
    query = start_stream(spark, broker.url, dirs, **options)
    try:
        # The rest can only come from the broker: the receiver never acknowledged it.
        wait_for_every_message(spark, dirs.table, ledger, [query], timeout=180)
    finally:
        query.stop()
    print(f"the full WAL held {in_wal} of {count} messages")
    # QoS 1 messages whose PUBACK the broker had not read when the query failed come again.
    resent = reported_delivery(query)["possibleDuplicates"]
    settle(tally, ledger, table_payloads(spark, dirs.table), resent)


def test_a_wal_disk_turning_read_only_fails_the_query_and_a_restart_loses_nothing(
    spark: SparkSession,
    broker_factory: BrokerFactory,
    failing_ext4: FailingExt4,
    tmp_path: Path,
    tally: Tally,
    ledger: Ledger,
) -> None:
    broker = broker_factory()
    dirs = StreamDirs(failing_ext4.path / "wal", tmp_path / "checkpoint", tmp_path / "table")
    client_id = unique_id("ro-")
    options: dict[str, str | int] = {"topic": TOPIC, "qos": 2, "clientId": client_id}
    query = start_stream(spark, broker.url, dirs, **options)
    publisher = LedgerPublisher(broker.host, broker.port, "chaos/disk/t", ledger)
    try:
        wait_subscribed(broker, client_id, TOPIC, 2)
        publisher.publish(100)
        wait_for_rows(spark, dirs.table, 100, [query])
        failing_ext4.go_read_only()
        publisher.publish(100)
        error = wait_failed(query)
    finally:
        query.stop()
        publisher.close()
    tally.add("read_only_faults")
    assert "Read-only file system" in error, error
    assert str(dirs.wal) in error, error
    assert stored(dirs.wal, 200) == 100, "nothing may be stored on a read-only disk"

    failing_ext4.repair()  # unmount once the query's source process let go, fsck, mount
    query = start_stream(spark, broker.url, dirs, **options)
    try:
        wait_for_every_message(spark, dirs.table, ledger, [query], timeout=180)
    finally:
        query.stop()
    resent = reported_delivery(query)["possibleDuplicates"]
    settle(tally, ledger, table_payloads(spark, dirs.table), resent)
