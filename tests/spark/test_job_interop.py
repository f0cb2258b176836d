"""The ingest job against mochi-mqtt: identical messages queued for its persistent session
while no job runs all land, and the job's exit summary counts them as possible duplicates.

The original report: `--trigger available-now` runs with a fixed `--client-id`, topic `x/a`,
10 messages with payload `ON` published between runs. mochi-mqtt 2.7 sends messages queued
for an offline session with DUP=1 and numbers every connection's deliveries from 1, so the
second batch of 10 arrives with the same packet ids 1..10, topic and payload as the first:
by the standard these are new messages (each id's acknowledgement was written), and all 20
must land. The receiver counts each one that equals the message stored before with its id
as a possible duplicate (docs/delivery.md); the second run's exit summary says so.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devtools.backlog import create_session
from devtools.interop_brokers import ExternalBroker
from tests.support.ingest_job import EXIT_TIMEOUT, START_TIMEOUT, Job
from tests.support.publishing import Message, publish

pytestmark = pytest.mark.interop

TOPIC = "x/a"
PAYLOAD = b"ON"
BURST = 10
RUN_TIMEOUT = START_TIMEOUT + EXIT_TIMEOUT
"""One available-now run: Spark session, query start, the drain (idle timeout), the exit."""
SUMMARY = re.compile(r"^\S+ \S+ INFO (finished: .*)$", re.MULTILINE)


def _run_available_now(args: list[str], workdir: Path, name: str) -> Job:
    """One `--trigger available-now` run of the job, to its exit."""
    job = Job.start([*args, "--trigger", "available-now"], workdir, name)
    try:
        job.proc.wait(timeout=RUN_TIMEOUT)
    except Exception:
        job.cleanup()
        raise AssertionError(f"{name} did not exit within {RUN_TIMEOUT} s:\n{job.logs()}") from None
    job.cleanup()  # a JVM still shutting down
    return job


def _summary(job: Job) -> str:
    """The run's exit summary line (the message after "INFO ")."""
    lines = SUMMARY.findall(job.stdout)
    assert len(lines) == 1, f"expected one 'finished:' summary line:\n{job.logs()}"
    return lines[0]


@pytest.mark.parametrize("qos", [pytest.param(1, id="qos1"), pytest.param(2, id="qos2")])
def test_identical_messages_queued_between_available_now_runs_all_land(
    mochi: ExternalBroker, spark: SparkSession, tmp_path: Path, qos: int
) -> None:
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    client_id = f"job-{uuid.uuid4().hex[:12]}"
    args = [
        "--broker", mochi.url, "--topic", TOPIC, "--qos", str(qos), "--client-id", client_id,
        "--table", str(table), "--checkpoint", str(checkpoint),
    ]  # fmt: skip
    runs: list[Job] = []

    # The job's persistent session, made as its first run would make it (no JVM needed).
    create_session(mochi.url, client_id, TOPIC, qos)
    for n in (1, 2):
        publish(mochi, [Message(TOPIC, PAYLOAD, qos)] * BURST)  # while no job runs
        runs.append(_run_available_now(args, tmp_path, f"run{n}"))
        assert runs[-1].proc.returncode == 0, runs[-1].logs()

    summaries = [_summary(job) for job in runs]
    rows = spark.read.format("delta").load(str(table)).orderBy("offset").collect()
    detail = f"{len(rows)} rows; summaries: {summaries}"
    assert len(rows) == 2 * BURST, detail
    assert {(r.topic, bytes(r.payload), r.qos) for r in rows} == {(TOPIC, PAYLOAD, qos)}, detail
    assert [r.offset for r in rows] == list(range(2 * BURST)), detail
    for summary in summaries:
        assert re.match(rf"finished: \d+ batch(es)?, {BURST} rows, ", summary), detail
    # Nothing to count in the first run; in the second, mochi reuses ids 1..10 for the second
    # burst, and each message equals the one stored before with its id.
    assert summaries[0].endswith(" rows/s on average"), detail
    assert summaries[1].endswith(f" rows/s on average, {BURST} possible duplicates"), detail
