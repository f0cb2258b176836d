"""Repeated ``kill -9`` of the query's streaming source process at random moments while
messages flow, each followed by a restart of the query: nothing lost, QoS 2 exactly once.

The source process (Spark's Python streaming source runner on the driver) holds the MQTT
connection, the receiver thread and the WAL writer; killing it loses its unacknowledged
deliveries, may tear a WAL append, and fails the query, which is started again on the same
checkpoint in the same Spark session. The moments are drawn from the test's seed: while the
WAL grows, inside a batch (planned, not committed), right after a commit, or after a random
delay. Traffic alternates QoS 1 and QoS 2 on a QoS 2 subscription. Every message the broker
acknowledged to the publisher must be in the table: QoS 2 exactly once; QoS 1 at least once,
every extra copy a broker resend (DUP=1) of a message whose acknowledgement was in flight at a
kill (docs/delivery.md). Whole-driver kills (the JVM too) are in ``test_job_faults.py`` and
``test_driver_failover.py``.
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from tests.chaos.driver_kills import table_rows
from tests.chaos.harness import sized
from tests.chaos.streams import kill_wal_holder, wait_failed, wait_for_every_message
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ingest_job import batch_files
from tests.support.ledger import (
    BackgroundTraffic,
    Ledger,
    LedgerPublisher,
    Tally,
    describe,
    ledgers_per_qos,
    settle_per_qos,
)
from tests.support.spark_streams import StreamDirs, start_stream, wait_wal_released
from tests.support.waiting import wait_subscribed, wait_until

log = logging.getLogger(__name__)

TOPIC = "chaos/kill/#"
MOMENTS = ("wal-growing", "mid-batch", "after-commit", "random-delay")
MOMENT_TIMEOUT = 90.0


def wal_size(wal: Path) -> int:
    try:
        return sum(e.stat().st_size for e in os.scandir(wal) if e.name.endswith(".seg"))
    except FileNotFoundError:
        return 0


def wait_for_moment(
    moment: str, rng: random.Random, dirs: StreamDirs, query: StreamingQuery
) -> None:
    """Return at the kind of moment named (the query must stay healthy meanwhile)."""

    def healthy() -> None:
        assert query.isActive, f"query died before the kill: {query.exception()}"

    def healthy_until(condition: Callable[[], bool]) -> Callable[[], bool]:
        """A predicate for ``wait_until``: ``healthy()``, then ``condition()``."""

        def check() -> bool:
            healthy()
            return condition()

        return check

    if moment == "wal-growing":
        size = wal_size(dirs.wal)
        wait_until(healthy_until(lambda: wal_size(dirs.wal) > size), MOMENT_TIMEOUT, interval=0.002)
    elif moment == "mid-batch":
        wait_until(
            healthy_until(
                lambda: (
                    len(batch_files(dirs.checkpoint, "offsets"))
                    > len(batch_files(dirs.checkpoint, "commits"))
                )
            ),
            MOMENT_TIMEOUT,
            interval=0.002,
        )
    elif moment == "after-commit":
        before = len(batch_files(dirs.checkpoint, "commits"))
        wait_until(
            healthy_until(lambda: len(batch_files(dirs.checkpoint, "commits")) > before),
            MOMENT_TIMEOUT,
            interval=0.002,
        )
    else:
        delay = rng.uniform(0.1, 3.0)
        wait_until(healthy_until(lambda: wal_size(dirs.wal) > 0), MOMENT_TIMEOUT)
        # returns after `delay` while the query runs (pyspark types awaitTermination's timeout
        # int; it takes seconds as a float)
        query.awaitTermination(delay)  # type: ignore[arg-type]
        healthy()


@pytest.mark.timeout(1800)
def test_repeated_kill_9_of_the_source_process_during_ingest(
    spark: SparkSession,
    broker_factory: BrokerFactory,
    dirs: StreamDirs,
    tally: Tally,
    ledger: Ledger,
    rng: random.Random,
) -> None:
    kills = sized(ci=3, long=12)
    broker = broker_factory()
    client_id = unique_id("kill-")
    options: dict[str, str | int] = {"topic": TOPIC, "qos": 2, "clientId": client_id}
    query = start_stream(spark, broker.url, dirs, **options)
    publisher = LedgerPublisher(broker.host, broker.port, "chaos/kill/t", ledger)
    traffic = BackgroundTraffic(publisher, count=10**6, rate=60.0)
    moments: list[str] = []
    try:
        wait_subscribed(broker, client_id, TOPIC, 2)
        traffic.start()
        for _ in range(kills):
            moment = rng.choice(MOMENTS)
            wait_for_moment(moment, rng, dirs, query)
            pid = kill_wal_holder(dirs.wal)
            moments.append(moment)
            tally.add("source_process_kills")
            log.info("killed source process %d (%s), %d sent", pid, moment, traffic.sent)
            error = wait_failed(query)
            assert error, "the query must fail when its source process dies"
            query.stop()
            wait_wal_released(dirs.wal)
            query = start_stream(spark, broker.url, dirs, **options)
            tally.add("kills_survived")
        traffic.stop()
        traffic.finish()
        wait_for_every_message(spark, dirs.table, ledger, [query], timeout=180)
    finally:
        traffic.stop()
        query.stop()
        publisher.close()
    verdicts = settle_per_qos(tally, ledgers_per_qos(ledger), table_rows(dirs.table))
    print(f"kill moments: {moments}; {describe(verdicts)}")
