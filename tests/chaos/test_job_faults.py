"""Faults around the ingest job run as a subprocess (its log is a file the test reads):

* a broker that drops the job's session (a restart without persistence): the receiver
  reconnects, logs the possible gap with the WAL offset it starts at, subscribes again, and
  everything published from then on lands exactly once;
* repeated ``kill -9`` of the whole driver (JVM, streaming source process, task workers) at
  random moments during a long ingest of traffic alternating QoS 1 and QoS 2
  (``CHAOS_SCALE=long``; at CI size the three kills of ``tests/spark/test_crash_recovery.py``
  per QoS cover it), then a last run that drains: every message the broker acknowledged to the
  publisher is in the table, QoS 2 exactly once, QoS 1 at least once with every extra copy a
  broker resend (DUP=1) of a message whose acknowledgement was in flight at a kill
  (docs/delivery.md).
"""

from __future__ import annotations

import logging
import os
import random
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from devtools.delta_log import delta_row_count
from tests.chaos.driver_kills import job_args, kill_at_a_moment, table_rows
from tests.chaos.harness import scale, sized
from tests.chaos.streams import table_payloads, unlanded
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import LAND_TIMEOUT, START_TIMEOUT, Job
from tests.support.ledger import (
    BackgroundTraffic,
    Ledger,
    LedgerPublisher,
    Tally,
    describe,
    ledgers_per_qos,
    settle,
    settle_per_qos,
)
from tests.support.waiting import wait_subscribed

log = logging.getLogger(__name__)


@pytest.mark.timeout(600)
def test_a_dropped_session_is_reported_as_a_possible_gap_and_the_rest_lands(
    broker_factory: BrokerFactory,
    spark: SparkSession,
    tmp_path: Path,
    tally: Tally,
    ledger: Ledger,
) -> None:
    broker = broker_factory()  # no persistence: a restart forgets every session
    topic = "chaos/sess/#"
    client_id = f"sess-{uuid.uuid4().hex[:10]}"
    table = tmp_path / "table"
    job = Job.start(job_args(broker.url, topic, client_id, tmp_path), tmp_path, "run")
    try:
        wait_subscribed(broker, client_id, topic, 2, job)
        publisher = LedgerPublisher(broker.host, broker.port, "chaos/sess/t", ledger)
        try:
            publisher.publish(100)
        finally:
            publisher.close()
        job.wait_for("100 rows", lambda: delta_row_count(table) >= 100, LAND_TIMEOUT)

        broker.restart()
        tally.add("broker_restarts")
        tally.add("sessions_dropped")
        job.wait_for(
            "the gap warning",
            lambda: "had no session for client id" in job.stderr,
            START_TIMEOUT,
        )
        line = f": {client_id} 2 {topic}\n"
        job.wait_for("a new subscription", lambda: broker.log_text().count(line) >= 2, 60)
        publisher = LedgerPublisher(broker.host, broker.port, "chaos/sess/t", ledger)
        try:
            publisher.publish(100)
        finally:
            publisher.close()
        job.wait_for("200 rows", lambda: delta_row_count(table) >= 200, LAND_TIMEOUT)
        assert job.terminate() == 0, job.logs()
    finally:
        job.cleanup()
    warning = next(x for x in job.stderr.splitlines() if "had no session for client id" in x)
    assert f"client id {client_id!r}" in warning, warning
    assert "possible gap before WAL offset 100" in warning, warning
    settle(tally, ledger, table_payloads(spark, table))


def wal_size(checkpoint: Path) -> int:
    try:
        wal = checkpoint / "mqtt-wal"
        return sum(e.stat().st_size for e in os.scandir(wal) if e.name.endswith(".seg"))
    except FileNotFoundError:
        return 0


@pytest.mark.timeout(3600)
def test_repeated_kill_9_of_the_driver_during_a_long_ingest(
    broker_factory: BrokerFactory,
    spark: SparkSession,
    tmp_path: Path,
    tally: Tally,
    ledger: Ledger,
    rng: random.Random,
) -> None:
    if scale() != "long":
        pytest.skip(
            "whole-driver kills take a Spark start each: CHAOS_SCALE=long (make chaos); "
            "at CI size tests/spark/test_crash_recovery.py kills the driver three times per QoS"
        )
    kills = sized(ci=0, long=6)
    broker = broker_factory()
    topic = "chaos/drv/#"
    client_id = f"drv-{uuid.uuid4().hex[:10]}"
    checkpoint, table = tmp_path / "checkpoint", tmp_path / "table"
    # The persistent session exists before anything is published.
    session = MqttClient(broker.url, SessionConfig(client_id, clean_session=False), [(topic, 2)])
    session.connect()
    session.disconnect()
    args = job_args(broker.url, topic, client_id, tmp_path)
    publisher = LedgerPublisher(broker.host, broker.port, "chaos/drv/t", ledger)
    traffic = BackgroundTraffic(publisher, count=10**6, rate=60.0)
    jobs: list[Job] = []
    moments: list[str] = []
    try:
        traffic.start()
        for number in range(kills):
            job = Job.start(args, tmp_path, f"run-{number}")
            jobs.append(job)
            moment = kill_at_a_moment(job, checkpoint, rng, lambda: wal_size(checkpoint), tally)
            moments.append(moment)
            log.info("killed the driver (%s) with %d messages sent", moment, traffic.sent)
        traffic.stop()
        traffic.finish()
        job = Job.start(args, tmp_path, "last")
        jobs.append(job)
        total = len(ledger.published)
        job.wait_for(
            f"all {total} messages",
            lambda: delta_row_count(table) >= total and unlanded(spark, table, ledger) == 0,
            300,
        )
        assert job.terminate() == 0, job.logs()
    finally:
        traffic.stop()
        for job in jobs:
            job.cleanup()
        publisher.close()
    verdicts = settle_per_qos(tally, ledgers_per_qos(ledger), table_rows(table))
    print(f"kill moments: {moments}; {describe(verdicts)}")
