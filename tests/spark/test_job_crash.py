"""``kill -9`` of the ingest job between its two writes of a batch, then a restart: both the
table and the dead-letter table still hold every message exactly once.

The job writes a micro-batch's good rows to the table, then its dead letters to the
dead-letter table, then Spark records the batch in ``<checkpoint>/commits``. The test kills
the job's process groups the moment the table has a commit for a batch whose checkpoint commit
is missing: the restarted job replays that batch; Delta skips the table's write (same
``txnAppId`` and ``txnVersion``) and performs the dead-letter write. Meanwhile a publisher keeps
sending, so messages also wait in the WAL and in the broker's queue for the persistent session.
Every payload carries a sequence number; each must appear exactly once across the two tables.
The job subscribes at QoS 2, which is exactly once through a kill -9 (at QoS 1 a resend whose
PUBACK may have left is stored again: docs/delivery.md), so only the replay is under test.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devtools.delta_log import delta_commits, delta_row_count, txn_versions
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import LAND_TIMEOUT, START_TIMEOUT, TRIGGER, Job, batch_files
from tests.support.publishing import PacedPublisher, as_messages, publish
from tests.support.waiting import wait_subscribed

SCHEMA = "seq BIGINT NOT NULL, temp DOUBLE"
BURST = 150  # before the kill
PACED = 600  # from just before the kill on, at RATE per second (30 s)
RATE = 20.0


def message(seq: int) -> tuple[str, bytes]:
    """Every third payload does not parse (bad JSON, a wrong type, an array), in turn."""
    topic = f"crash/dev{seq % 4}"
    if seq % 3 != 2:
        return topic, json.dumps({"seq": seq, "temp": seq / 2}).encode()
    kind = (seq // 3) % 3
    if kind == 0:
        return topic, f'{{"seq": {seq}, "temp": '.encode()
    if kind == 1:
        return topic, f'{{"seq": {seq}, "temp": "warm"}}'.encode()
    return topic, f'[{{"seq": {seq}}}]'.encode()


def _kill_window(table: Path, checkpoint: Path) -> int | None:
    """A batch the table committed (with rows) that the checkpoint has not, if any."""
    committed = set(batch_files(checkpoint, "commits"))
    pending = [v for v in txn_versions(table) if v not in committed]
    return max(pending) if pending else None


@pytest.mark.timeout(600)
def test_kill_9_between_the_two_writes_then_restart_keeps_both_tables_exactly_once(
    broker_factory: BrokerFactory, spark: SparkSession, tmp_path: Path
) -> None:
    broker = broker_factory(max_queued_messages=100_000)
    table, dead, checkpoint = tmp_path / "table", tmp_path / "dead", tmp_path / "checkpoint"
    client_id = f"crash-{uuid.uuid4().hex[:12]}"
    args = [
        "--broker", broker.url, "--topic", "crash/#", "--client-id", client_id, "--qos", "2",
        "--table", str(table), "--checkpoint", str(checkpoint), "--trigger", TRIGGER,
        "--payload-format", "json", "--schema", SCHEMA, "--dead-letter-table", str(dead),
    ]  # fmt: skip
    total = BURST + PACED
    jobs: list[Job] = []
    publisher = PacedPublisher(
        broker,
        as_messages([message(s) for s in range(BURST, total)], qos=2),
        RATE,
        hold_at=PACED // 2,
    )
    try:
        jobs.append(Job.start(args, tmp_path, "run-1"))
        wait_subscribed(broker, client_id, "crash/#", 2, jobs[0])
        publish(broker, as_messages([message(s) for s in range(BURST)], qos=2))
        publisher.start()
        jobs[0].wait_for(
            "a batch in the table but not yet in the checkpoint",
            lambda: _kill_window(table, checkpoint) is not None,
            START_TIMEOUT,
        )
        jobs[0].kill_9()
        killed_in = _kill_window(table, checkpoint)
        assert killed_in is not None, "the kill was meant to land between the two writes"
        assert killed_in not in txn_versions(dead), "the dead letters of that batch were pending"
        sent_at_kill = publisher.sent
        publisher.release()

        jobs.append(Job.start(args, tmp_path, "run-2"))
        publisher.finish()
        jobs[1].wait_for(
            f"{total} rows in the two tables",
            lambda: delta_row_count(table) + delta_row_count(dead) >= total,
            LAND_TIMEOUT,
        )
        assert jobs[1].terminate() == 0, jobs[1].logs()
    finally:
        for job in jobs:
            job.cleanup()
        publisher.join(5)

    assert sent_at_kill < PACED, "the publisher was meant to be sending during the kill"
    good = spark.read.format("delta").load(str(table)).select("seq").collect()
    bad = (
        spark.read.format("delta")
        .load(str(dead))
        .select(F.regexp_extract(F.col("payload").cast("string"), r'"seq": (\d+)', 1).alias("s"))
        .collect()
    )
    seqs = Counter([r.seq for r in good] + [int(r.s) for r in bad])
    duplicated = sorted(s for s, n in seqs.items() if n > 1)
    missing = sorted(set(range(total)) - set(seqs))
    assert not duplicated and not missing, f"duplicated {duplicated[:10]}, missing {missing[:10]}"
    assert sorted(r.seq for r in good) == [s for s in range(total) if s % 3 != 2]
    assert len(bad) == total // 3

    # The replayed batch was written once to each table, by different runs.
    for path in (table, dead):
        versions = txn_versions(path)
        assert len(versions) == len(set(versions)), f"{path}: a batch written twice {versions}"
        assert killed_in in versions
    app_ids = {
        action["txn"]["appId"]
        for path in (table, dead)
        for commit in delta_commits(path)
        for action in commit["actions"]
        if "txn" in action
    }
    assert len(app_ids) == 1, f"one query id across runs: {app_ids}"
    assert re.search(
        r"stopped: \d+ batch(es)?, \d+ messages: \d+ table rows, \d+ dead-letter rows",
        jobs[1].stdout,
    )
