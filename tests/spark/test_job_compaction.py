"""Compaction while the ingest job streams (docs/operations.md, "Table maintenance"): at QoS 2
with a tiny target size, compactions happen between batches; a ``kill -9`` the moment the first
one starts and a restart lose and duplicate nothing, and the restarted job compacts; a
downstream ``readStream`` of the table sees each row once (compaction commits with
``dataChange=false``); the table ends with fewer files than the stream committed.

With a 16 KiB target every batch file (a few KiB) is in the class below half the target, so
the eighth makes a compaction due, and the job looks after every commit (the smallest tail)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devtools.delta_log import DeltaSnapshot, delta_commits, delta_row_count, txn_versions
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import LAND_TIMEOUT, Job
from tests.support.publishing import PacedPublisher, as_messages, publish
from tests.support.waiting import wait_subscribed

BURST = 200
PACED = 1600  # at RATE per second (40 s), from before the kill to after the restart
RATE = 40.0
HOLD_AT = PACED - 200
"""Where the publisher waits for the kill, so that it is still sending then."""
COMPACTING = " INFO compacting "
COMPACTED = " INFO compacted "
COMPACTION_TIMEOUT = 300.0
"""Eight batches and a compaction after the job's start, on a busy two-core machine."""


def message(seq: int) -> tuple[str, bytes]:
    return f"compact/dev{seq % 3}", json.dumps({"seq": seq}).encode()


def operations(table: Path) -> Counter[str]:
    return Counter(
        action["commitInfo"]["operation"]
        for commit in delta_commits(table)
        for action in commit["actions"]
        if "commitInfo" in action
    )


@pytest.mark.timeout(900)
def test_compaction_while_streaming_survives_kill_9_and_keeps_rows_once(
    broker_factory: BrokerFactory, spark: SparkSession, tmp_path: Path
) -> None:
    broker = broker_factory(max_queued_messages=100_000)
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    client_id = f"compact-{uuid.uuid4().hex[:12]}"
    args = [
        "--broker", broker.url, "--topic", "compact/#", "--client-id", client_id, "--qos", "2",
        "--table", str(table), "--checkpoint", str(checkpoint),
        "--trigger", "processing-time=200 milliseconds",
        "--payload-format", "json", "--schema", "seq BIGINT NOT NULL",
        "--target-file-size", "16KiB", "--small-files", "23",
    ]  # fmt: skip
    total = BURST + PACED
    jobs: list[Job] = []
    publisher = PacedPublisher(
        broker, as_messages([message(s) for s in range(BURST, total)], qos=2), RATE, HOLD_AT
    )
    try:
        jobs.append(Job.start(args, tmp_path, "run-1"))
        wait_subscribed(broker, client_id, "compact/#", 2, jobs[0])
        publish(broker, as_messages([message(s) for s in range(BURST)], qos=2))
        publisher.start()
        jobs[0].wait_for(
            "a compaction starting",
            lambda: COMPACTING in jobs[0].stdout,
            COMPACTION_TIMEOUT,
        )
        jobs[0].kill_9()
        sent_at_kill = publisher.sent
        publisher.release()
        killed_rows = DeltaSnapshot.load(table).rows  # the table reads whole after the kill

        jobs.append(Job.start(args, tmp_path, "run-2"))
        publisher.finish()
        jobs[1].wait_for(
            f"{total} rows in the table",
            lambda: delta_row_count(table) >= total,
            LAND_TIMEOUT,
        )
        jobs[1].wait_for(
            "a compaction after the restart",
            lambda: COMPACTED in jobs[1].stdout,
            COMPACTION_TIMEOUT,
        )
        assert jobs[1].terminate() == 0, jobs[1].logs()
    finally:
        for job in jobs:
            job.cleanup()
        publisher.join(5)

    assert sent_at_kill < PACED, "the publisher was meant to be sending during the kill"
    assert killed_rows <= total
    rows = [r.seq for r in spark.read.format("delta").load(str(table)).select("seq").collect()]
    counts = Counter(rows)
    duplicated = sorted(s for s, n in counts.items() if n > 1)
    missing = sorted(set(range(total)) - set(counts))
    assert not duplicated and not missing, f"duplicated {duplicated[:10]}, missing {missing[:10]}"

    done = operations(table)
    assert done["OPTIMIZE"] >= 1, done
    live = len(DeltaSnapshot.load(table).files)
    batches = len(txn_versions(table))
    # each batch commit added at least one file: fewer live files than commits means merged
    # (a loaded machine makes few, large batches, so no tighter ratio holds for every run)
    assert live < batches, f"{live} files for {batches} batch commits"
    assert "compaction: " in jobs[1].stdout  # the summary line

    # A downstream stream of the table sees each row once: compactions change no data.
    seen: list[int] = []
    query = (
        spark.readStream.format("delta")
        .load(str(table))
        .writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "downstream"))
        .foreachBatch(lambda batch, _: seen.extend(r.seq for r in batch.select("seq").collect()))
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted(seen) == list(range(total))
