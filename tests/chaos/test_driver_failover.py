"""Failover of the ingest job's whole driver with its WAL on object storage: nothing lost.

The job (a subprocess, local[2]) keeps its WAL on an S3-compatible server
(``--source-option walPath=s3://...``) and its checkpoint and table on a local disk that
outlives the driver. While two publishers send at a steady rate, QoS 1 on one topic and QoS 2
on another (the job subscribes at QoS 2), the job is killed with SIGKILL, its whole process
tree, at moments drawn from the test's seed (:func:`tests.chaos.driver_kills.wait_for_moment`).
Every run is on a new node: after a kill, every other local file of the dead driver (its
temporary files, working directory, home and ``$MQTT_WAL_ROOT``) is checked to hold no WAL and
deleted. The next driver finds the dead one's lease in the store and takes it over, deleting
its claim (at once: its process is gone from this host, docs/wal-storage.md). Then publishing
stops and a last ``--trigger available-now`` run drains the WAL and the broker's queue, and
releases the lease: no claim is left in the store.

Every message the broker acknowledged to a publisher must be in the table: QoS 2 exactly once;
QoS 1 at least once, every extra copy a broker resend (DUP=1) of a message whose
acknowledgement was in flight at a kill (docs/delivery.md). No run reports data loss.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pytest

from devtools.backlog import create_session
from tests.chaos.driver_kills import (
    Node,
    job_args,
    kill_at_a_moment,
    lease_claims,
    newest_part,
    no_data_loss_reported,
    table_rows,
    wait_exit,
)
from tests.chaos.harness import sized
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ingest_job import Job
from tests.support.ledger import Ledger, Tally, describe, payload_id, settle_per_qos
from tests.support.publishing import SteadyPublisher

log = logging.getLogger(__name__)

TOPIC = "failover/#"
RATE = 40.0
"""Messages per second of each publisher."""
DRAIN_TIMEOUT = 300.0
DRAIN_OPTIONS = ("--trigger", "available-now", "--source-option", "availableNowMaxWait=240")
"""The last run drains the whole queue, however long the killed runs left it."""
TAKEOVER = "removing the stale lease of pid="
TAKEOVER_AT_ONCE = "its process no longer runs"


@pytest.mark.timeout(1800)
def test_drivers_killed_and_restarted_on_new_nodes_lose_nothing_with_the_wal_on_s3(
    broker_factory: BrokerFactory,
    s3_wal: str,
    tmp_path: Path,
    tally: Tally,
    rng: random.Random,
) -> None:
    kills = sized(ci=2, long=10)
    broker = broker_factory()
    client_id = unique_id("failover-")
    create_session(broker.url, client_id, TOPIC, 2)
    args = [
        *job_args(broker.url, TOPIC, client_id, tmp_path),
        "--source-option",
        f"walPath={s3_wal}",
    ]
    checkpoint, table = tmp_path / "checkpoint", tmp_path / "table"
    publishers = {
        qos: SteadyPublisher(broker.host, broker.port, f"failover/q{qos}", qos, RATE)
        for qos in (1, 2)
    }
    ledgers = {qos: Ledger() for qos in publishers}
    jobs: list[Job] = []
    moments: list[str] = []
    try:
        for publisher in publishers.values():
            publisher.start()
        for number in range(kills):
            node = Node.fresh(tmp_path / f"node-{number}")
            job = node.start(args, tmp_path, f"run-{number}")
            jobs.append(job)
            moment = kill_at_a_moment(job, checkpoint, rng, lambda: newest_part(s3_wal), tally)
            moments.append(moment)
            log.info(
                "killed driver %d (%s) after %d QoS 1 and %d QoS 2 messages acknowledged",
                number + 1,
                moment,
                publishers[1].acknowledged(),
                publishers[2].acknowledged(),
            )
            node.wipe(job)
        for qos, publisher in publishers.items():
            ledgers[qos].record(payload_id(p) for p in publisher.finish())
        node = Node.fresh(tmp_path / "node-last")
        job = node.start([*args, *DRAIN_OPTIONS], tmp_path, "last")
        jobs.append(job)
        code = wait_exit(job, "the available-now run", DRAIN_TIMEOUT)
        assert code == 0, f"the available-now run failed ({code}):\n{job.logs()}"
        node.wipe(job)
    finally:
        for publisher in publishers.values():
            publisher.close()
        for job in jobs:
            job.cleanup()

    assert not (checkpoint / "mqtt-wal").exists(), "a WAL beside the checkpoint"
    no_data_loss_reported(jobs)
    for number, job in enumerate(jobs[1:], start=1):
        takeovers = [line for line in job.stderr.splitlines() if TAKEOVER in line]
        assert takeovers, f"run {number} took over no dead driver's lease:\n{job.logs()}"
        assert all(TAKEOVER_AT_ONCE in line for line in takeovers), takeovers
    assert lease_claims(s3_wal) == [], "a claim on the WAL outlived its driver"
    verdicts = settle_per_qos(tally, ledgers, table_rows(table))
    figures = (
        f"driver failover on S3: {len(moments)} kills ({', '.join(moments)}), "
        f"{len(jobs) - 1} restarts; {describe(verdicts)}"
    )
    log.info(figures)
    print(figures)
