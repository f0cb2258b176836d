"""``Trigger.AvailableNow`` under steady traffic leaves nothing behind in the WAL.

Rules under test (``MqttStreamReader.prepareForTriggerAvailableNow``, ``Receiver.freeze``,
``connector.receiver.shards.Position``; docs/delivery.md, "Trigger.AvailableNow"): once a run
fixes its targets its receivers store and acknowledge nothing more, so every message a WAL
acknowledged is in the run's batches and the broker keeps the rest for the next run; the last
batch ends at a final position, and a checkpoint at a final position goes on with a new WAL
(a new driver disk) without data loss. A position that is not final under a replaced WAL is
still data loss (``tests/spark/test_source_wal_faults.py``).

Each run: a publisher thread sends all the time; the run's WAL grew by exactly the rows the run
wrote. Runs on the same WAL, then on a wiped WAL twice, then a drain once publishing stopped:
every message lands, QoS 2 exactly once, QoS 1 at least once with the extra rows the receivers
counted as possible duplicates.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from connector.wal import WalWriter
from devtools.delta_log import delta_row_count
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import SteadyPublisher
from tests.support.spark_streams import (
    StreamDirs,
    mqtt_reader,
    payloads,
    read_table,
    reported_delivery,
    to_delta,
    wait_wal_released,
)
from tests.support.waiting import wait_until

RUN_TIMEOUT = 180.0
RATE = 150.0
"""Messages per second the publisher sends while the runs come and go."""
BETWEEN_RUNS = 150
"""Messages the broker takes for the session before each run (queued while no query runs)."""


@dataclass
class Runs:
    """One query's runs against a broker that receives steady traffic."""

    spark: SparkSession
    broker_url: str
    dirs: StreamDirs
    options: dict[str, str | int]
    receivers: int
    duplicates: int = 0
    """Possible duplicates the runs' receivers reported (docs/delivery.md)."""

    @property
    def wals(self) -> list[Path]:
        if self.receivers == 1:
            return [self.dirs.wal]
        return [self.dirs.wal / f"shard-{i}" for i in range(self.receivers)]

    def rows(self) -> int:
        return delta_row_count(self.dirs.table) if self.dirs.table.exists() else 0

    def wal_next(self) -> int:
        """The WALs' next offsets added up (0 for a WAL that does not exist)."""
        total = 0
        for wal in self.wals:
            if not wal.exists():
                continue
            wait_wal_released(wal)
            writer = WalWriter.open(wal)
            try:
                total += writer.next_offset
            finally:
                writer.close()
        return total

    def available_now(self) -> int:
        """One AvailableNow run: it must end by itself without an error. Returns the rows it
        wrote, after checking that its WALs stored exactly those (nothing past the target)."""
        rows_before, wal_before = self.rows(), self.wal_next()
        frame = mqtt_reader(self.spark, self.broker_url, self.dirs.wal, **self.options).load()
        query = to_delta(frame, self.dirs, available_now=True)
        try:
            # pyspark types awaitTermination's timeout int; it takes seconds as a float
            assert query.awaitTermination(RUN_TIMEOUT), "AvailableNow did not stop by itself"  # type: ignore[arg-type]
            assert query.exception() is None, query.exception()
            if query.lastProgress is not None:
                self.duplicates += reported_delivery(query)["possibleDuplicates"]
        finally:
            query.stop()
        written = self.rows() - rows_before
        stored = self.wal_next() - wal_before
        assert stored == written, f"the WALs stored {stored} records, the run wrote {written}"
        return written

    def last_offset(self) -> list[dict]:
        """The per-shard positions of the checkpoint's last planned batch."""
        offsets = self.dirs.checkpoint / "offsets"
        last = max((p for p in offsets.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        offset = json.loads(last.read_text().splitlines()[-1])
        return offset.get("shards", [offset])

    def wipe_wal(self) -> None:
        """A new driver disk: the WALs are gone, the checkpoint stays."""
        for wal in self.wals:
            wait_wal_released(wal)
        shutil.rmtree(self.dirs.wal)


@pytest.mark.parametrize(
    ("qos", "receivers"),
    [pytest.param(1, 2, id="qos1-receivers2"), pytest.param(2, 1, id="qos2-receivers1")],
)
def test_available_now_leaves_nothing_behind_and_a_new_wal_goes_on(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs, qos: int, receivers: int
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    runs = Runs(
        spark,
        broker.url,
        dirs,
        {
            "topic": "avn/#",
            "qos": qos,
            "clientId": client_id,
            "receivers": receivers,
            "availableNowIdleTimeout": "0.5",
            # With steady traffic there is no quiet moment: each run takes what came by then.
            "availableNowMaxWait": "2",
        },
        receivers,
    )
    assert runs.available_now() == 0  # makes the broker session(s); nothing to read yet
    publisher = SteadyPublisher(broker.host, broker.port, "avn/t", qos, RATE)
    try:
        publisher.start()
        for step in ("same WAL", "same WAL", "wiped", "wiped"):
            if step == "wiped":
                runs.wipe_wal()
            publisher.wait_acknowledged(publisher.acknowledged() + BETWEEN_RUNS)
            assert runs.available_now() > 0, f"a run on the {step} took nothing"
            positions = runs.last_offset()
            assert all(p.get("final") is True for p in positions), positions
        published = publisher.finish()
    finally:
        publisher.close()

    # Publishing stopped: the broker holds what no run took, and the next run gets it (one
    # more when a pause in the broker's queue ended a run's wait early).
    assert runs.rows() < len(published), "the runs left nothing at the broker"

    def missing() -> int:
        return len(set(published) - set(payloads(read_table(spark, dirs.table))))

    def drained() -> bool:
        runs.available_now()
        return missing() == 0

    wait_until(drained, 3 * RUN_TIMEOUT, interval=0, message=lambda: f"{missing()} missing")
    landed = payloads(read_table(spark, dirs.table))
    assert set(landed) == set(published)
    extra = len(landed) - len(published)
    if qos == 2:
        assert extra == 0, f"{extra} rows stored twice"
    else:
        assert extra == runs.duplicates, f"{extra} extra rows, {runs.duplicates} counted"
