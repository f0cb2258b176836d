"""The WAL's store goes away while messages flow, and comes back: nothing acknowledged is lost.

The ingest job (a subprocess, local[2]) keeps its WAL on an S3-compatible server of this test's
own. While a QoS 1 and a QoS 2 publisher send at a steady rate (the job subscribes at QoS 2),
the server is killed. The receiver's next append fails, so nothing of it is acknowledged and
the broker keeps those messages and every one published after them; the query stops and the
job exits 1 with an error naming the ``walPath`` and the store's own message, and the server's
secret key is nowhere in the job's output or checkpoint (docs/wal-storage.md, "When the store
is away"). Publishing goes on for a while with no job; then the server starts again (same port,
same objects), publishing stops and an ``available-now`` run drains the WAL and the broker's
queue. Every message the broker acknowledged to a publisher must be in the table: QoS 2
exactly once, QoS 1 at least once with every extra copy a broker resend (DUP=1).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from devtools.backlog import create_session
from devtools.delta_log import delta_row_count
from devtools.s3_server import TEST_SECRET_KEY, S3Server
from tests.chaos.driver_kills import (
    job_args,
    lease_claims,
    no_data_loss_reported,
    table_rows,
    wait_exit,
)
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ingest_job import START_TIMEOUT, Job
from tests.support.ledger import Ledger, Tally, describe, payload_id, settle_per_qos
from tests.support.publishing import SteadyPublisher

log = logging.getLogger(__name__)

TOPIC = "outage/#"
RATE = 40.0
"""Messages per second of each publisher."""
FAIL_TIMEOUT = 180.0
"""The S3 client retries a failing request for several seconds; Spark then stops the query."""
DRAIN_TIMEOUT = 300.0
OUTAGE_MESSAGES = 200
"""Messages each publisher gets acknowledged by the broker after the job stopped."""


def job_output(job: Job) -> str:
    return job.stdout + job.stderr


def files_holding(folder: Path, secret: str) -> list[Path]:
    """Files under ``folder`` whose bytes hold ``secret``."""
    needle = secret.encode()
    return [p for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes()]


def outage_and_drain(
    broker_factory: BrokerFactory,
    server: S3Server,
    wal: str,
    base: Path,
    ledgers: dict[int, Ledger],
) -> list[Job]:
    """Run the job on ``wal`` while messages flow, kill the store, keep publishing once the job
    has exited, start the store again and drain with ``available-now``; the two runs."""
    broker = broker_factory()
    client_id = unique_id("outage-")
    create_session(broker.url, client_id, TOPIC, 2)
    args = [*job_args(broker.url, TOPIC, client_id, base), "--source-option", f"walPath={wal}"]
    table = base / "table"
    publishers = {
        qos: SteadyPublisher(broker.host, broker.port, f"outage/q{qos}", qos, RATE)
        for qos in ledgers
    }
    jobs: list[Job] = []
    try:
        for publisher in publishers.values():
            publisher.start()
        job = Job.start(args, base, "run")
        jobs.append(job)
        job.wait_for("rows in the table", lambda: delta_row_count(table) > 0, START_TIMEOUT)

        server.kill()
        log.info("killed the store with %d rows in the table", delta_row_count(table))
        code = wait_exit(job, "the run without its store", FAIL_TIMEOUT)
        assert code == 1, f"the job exited with {code} when its store went away:\n{job.logs()}"
        for publisher in publishers.values():
            publisher.wait_acknowledged(publisher.acknowledged() + OUTAGE_MESSAGES)

        server.start()
        for qos, publisher in publishers.items():
            ledgers[qos].record(payload_id(p) for p in publisher.finish())
        drain = Job.start([*args, "--trigger", "available-now"], base, "drain")
        jobs.append(drain)
        code = wait_exit(drain, "the available-now run", DRAIN_TIMEOUT)
        assert code == 0, f"the available-now run failed ({code}):\n{drain.logs()}"
    finally:
        for publisher in publishers.values():
            publisher.close()
        for job in jobs:
            job.cleanup()
    return jobs


@pytest.mark.timeout(900)
def test_a_store_outage_stops_the_job_and_the_broker_keeps_what_was_not_stored(
    broker_factory: BrokerFactory, tmp_path: Path, tally: Tally
) -> None:
    ledgers = {qos: Ledger() for qos in (1, 2)}
    with S3Server(tmp_path / "s3").start() as server:
        server.make_bucket("wal")
        wal = server.uri("wal", "outage")
        jobs = outage_and_drain(broker_factory, server, wal, tmp_path, ledgers)
        assert lease_claims(wal) == [], "the failed run's claim outlived the drain"

    errors = [line for line in jobs[0].stderr.splitlines() if line.startswith("error:")]
    assert errors, f"the job gave no error line:\n{jobs[0].logs()}"
    error = errors[-1]
    log.info("the job's error: %s", error)
    assert wal.split("?", 1)[0] in error, f"the error does not name the walPath: {error}"
    assert "AWS Error" in error, f"the error does not give the store's message: {error}"
    for job in jobs:
        assert TEST_SECRET_KEY not in job_output(job), f"the secret key in {job.out} or {job.err}"
    assert files_holding(tmp_path / "checkpoint", TEST_SECRET_KEY) == []
    no_data_loss_reported(jobs)
    verdicts = settle_per_qos(tally, ledgers, table_rows(tmp_path / "table"))
    figures = f"store outage: the job exited 1 ({error}); {describe(verdicts)}"
    log.info(figures)
    print(figures)
