"""``kill -9`` of the ingest job at several moments, then restart: exactly once into Delta.

The job (``streaming_jobs/ingest.py`` under plain ``python``, local[2]) runs as a subprocess in
its own process group; every kill is SIGKILL to that whole group and to the groups PySpark's
worker daemons make for themselves, so the JVM, the Python streaming source runner (which holds
the receiver, its MQTT connection and the WAL) and the Python task workers die at once, with no
goodbye to the broker and no WAL close.

Publishers (``python -m connector.mqtt pub``, at most 20 in flight) send numbered payloads into a
persistent session pre-created for the job's client id, two per stage, one at QoS 1 and one at
QoS 2, each on a topic of its own (``crash/<stage>/q<qos>``) so that each topic's sequence
numbers 0..count-1 can be checked separately:

a. ``crash/a/*`` is queued before the first run, which is killed as soon as its first batch is
   planned (``offsets/0`` written): during the first batch, before any commit;
b. ``crash/b/*`` starts once the second run has committed a batch, and the run is killed the
   moment its receiver appends to the WAL, while those publishers are still sending;
c. the third run starts while the tail of ``crash/b/*`` is still published and is killed the
   moment a new file appears in ``<checkpoint>/commits`` (right after a commit, before or while
   the next batch is planned, with later records in the WAL or not yet acknowledged);

then ``crash/c/*`` is queued while no job runs and a last run with ``--trigger available-now``
drains the broker's queue (and whatever the WAL still holds) and exits. The Delta table is
read back from its log and Parquet files without Spark (``devtools.delta_log``); every
published number must be there: exactly once at QoS 2; at QoS 1 at least once, every extra
copy a broker resend (DUP=1) of a message whose acknowledgement was in flight when the job was
killed (docs/delivery.md: a new process cannot tell those from new messages).

The job subscribes at QoS 2 with MQTT 5 (``--mqtt-version 5``; the publishers send MQTT 5
messages with a Content Type and a User Property, and every row must carry them in
``properties``: the WAL's data blocks with properties survive the kills as the rest does), so
each message keeps its publisher's QoS. At MQTT 3.1.1 kill -9 is run at QoS 2 by
``test_job_crash``, ``test_job_compaction`` and ``test_job_routes``, and at QoS 1 and 2 by
``tests/chaos/test_driver_failover.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from connector.mqtt.cli import SEQUENCE_DIGITS
from connector.mqtt.packets import ProtocolLevel
from devtools.backlog import create_session, pub_command
from devtools.delta_log import DeltaSnapshot
from devtools.process_tree import alive_in, process_groups
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.spark_processes import tail
from tests.support.waiting import wait_until

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
INGEST = REPO_ROOT / "streaming_jobs" / "ingest.py"
TOPIC_FILTER = "crash/#"
TRIGGER = "processing-time=300 milliseconds"
PAYLOAD_BYTES = 64
PUBLISH_INFLIGHT = 20  # Mosquitto drops QoS 2 PUBLISHes beyond max_inflight_messages (20)
CONTENT_TYPE = "application/json"  # of the MQTT 5 publishers' messages (not parsed here)

QOS = (1, 2)
"""Each stage has a publisher at each QoS, to a job subscribed at QoS 2."""
MQTT = "5"
STAGE_A = ("crash/a", 1_500, None)  # topic prefix, count per QoS, rate (None: as fast as it goes)
STAGE_B = ("crash/b", 3_000, 200.0)  # ~15 s: on into the next run
STAGE_C = ("crash/c", 1_500, None)

START_TIMEOUT = 120.0  # a run's Spark session, query start and first batch on a busy machine
COMMIT_TIMEOUT = 60.0
PUBLISH_TIMEOUT = 120.0
DRAIN_TIMEOUT = 240.0
LOG_TAIL = 6_000

# Spark settings for the job's JVM (plain ``python`` reads PYSPARK_SUBMIT_ARGS), to make each
# of the test's short-lived runs quicker: the C1 JIT compiler only (about halves the session
# start), fewer tasks for Delta's snapshot reconstruction, no web UI.
SUBMIT_ARGS = (
    "--driver-java-options -XX:TieredStopAtLevel=1 "
    "--conf spark.databricks.delta.snapshotPartitions=2 --conf spark.ui.enabled=false "
    "--conf spark.sql.shuffle.partitions=2 pyspark-shell"
)


def _batch_files(directory: Path) -> list[int]:
    """Batch ids with a file in a checkpoint's ``offsets`` or ``commits`` directory."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(name) for name in names if name.isdigit())


@dataclass
class StagePublisher:
    """A background ``python -m connector.mqtt pub`` subprocess for one stage's topic."""

    topic: str
    count: int
    proc: subprocess.Popen[str]
    log: Path
    finished: bool = False

    @classmethod
    def start(
        cls,
        broker: MosquittoBroker,
        stage: tuple[str, int, float | None],
        qos: int,
        workdir: Path,
        mqtt: str = "3.1.1",
    ) -> StagePublisher:
        prefix, count, rate = stage
        topic = f"{prefix}/q{qos}"
        log = workdir / f"pub-{topic.replace('/', '-')}.log"
        command = pub_command(broker.url, topic, qos, count, PAYLOAD_BYTES)
        command += ["--inflight", str(PUBLISH_INFLIGHT)]
        if rate is not None:
            command += ["--rate", str(rate)]
        if mqtt == "5":
            command += ["--mqtt-version", "5", "--content-type", CONTENT_TYPE]
            command += ["--user-property", f"stage={topic}"]
        with log.open("w") as err:
            proc = subprocess.Popen(
                command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=err, text=True
            )
        return cls(topic, count, proc, log)

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self, timeout: float = PUBLISH_TIMEOUT) -> None:
        """Wait for the publisher's exit and check that every message was acknowledged."""
        if self.finished:
            return
        out, _ = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, (
            f"publisher of {self.topic} failed ({self.proc.returncode}):\n{tail(self.log)}"
        )
        report = json.loads(out.strip().splitlines()[-1])
        assert report["published"] == self.count, report
        self.finished = True

    def kill(self) -> None:
        if self.running:
            self.proc.kill()
        self.proc.wait()


@dataclass
class Job:
    """One run of the ingest job, in its own process group."""

    proc: subprocess.Popen[bytes]
    log: Path
    checkpoint: Path
    started: float = field(default_factory=time.monotonic)

    @property
    def commits(self) -> list[int]:
        return _batch_files(self.checkpoint / "commits")

    @property
    def offsets(self) -> list[int]:
        return _batch_files(self.checkpoint / "offsets")

    def alive_or_fail(self) -> None:
        """Fail the test (with the job's log) when the job exited on its own."""
        code = self.proc.poll()
        if code is not None:
            pytest.fail(f"the ingest job exited with {code}:\n{tail(self.log)}", pytrace=False)

    def wait_for(self, what: str, predicate: Callable[[], object], timeout: float) -> None:
        """Poll ``predicate`` until it is true, failing early if the job dies."""

        def check() -> bool:
            self.alive_or_fail()
            return bool(predicate())

        wait_until(
            check,
            timeout,
            interval=0.005,
            message=lambda: (
                f"{what}: offsets {self.offsets}, commits {self.commits}\n" + tail(self.log)
            ),
        )

    def wait_new_commits(self, count: int, timeout: float = COMMIT_TIMEOUT) -> list[int]:
        before = len(self.commits)
        self.wait_for(
            f"{count} new commit(s)", lambda: len(self.commits) >= before + count, timeout
        )
        return self.commits

    def wal_position(self) -> tuple[str, int] | None:
        """(newest segment, its size) of the WAL: changes whenever the receiver appends."""
        wal = self.checkpoint / "mqtt-wal"
        try:
            newest = max(name for name in os.listdir(wal) if name.endswith(".seg"))
            return newest, (wal / newest).stat().st_size
        except (FileNotFoundError, ValueError):
            return None

    def kill(self, *, quiet: bool = False) -> None:
        """SIGKILL the job's process groups (its own: the driver, the JVM, the streaming source
        runner; the worker daemons': the task workers) and wait until none of them is left."""
        groups = process_groups(self.proc.pid)
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        self.proc.wait(timeout=30)
        wait_until(
            lambda: not alive_in(groups),
            30,
            message=lambda: f"processes of the killed job still alive: {alive_in(groups)}",
        )
        if quiet:
            return
        log.info(
            "killed the job (%d process groups) after %.1f s: offsets %s, commits %s",
            len(groups),
            time.monotonic() - self.started,
            self.offsets,
            self.commits,
        )

    def leftovers(self) -> bool:
        """Whether the job or anything in its process groups is still running."""
        return self.proc.poll() is None or bool(alive_in(process_groups(self.proc.pid)))


@dataclass
class Scenario:
    broker: MosquittoBroker
    workdir: Path
    client_id: str
    mqtt: str = "3.1.1"
    runs: int = 0
    jobs: list[Job] = field(default_factory=list)

    @property
    def table(self) -> Path:
        return self.workdir / "table"

    @property
    def checkpoint(self) -> Path:
        return self.workdir / "checkpoint"

    def start_job(self, trigger: str = TRIGGER) -> Job:
        self.runs += 1
        log = self.workdir / f"job-{self.runs}.log"
        command = [
            sys.executable, str(INGEST), "--broker", self.broker.url, "--topic", TOPIC_FILTER,
            "--qos", "2", "--table", str(self.table),
            "--checkpoint", str(self.checkpoint), "--client-id", self.client_id,
            "--trigger", trigger, "--log-level", "INFO", "--mqtt-version", self.mqtt,
        ]  # fmt: skip
        env = {**os.environ, "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS}
        with log.open("wb") as out:
            proc = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        job = Job(proc, log, self.checkpoint)
        self.jobs.append(job)
        return job

    def cleanup(self) -> None:
        """Kill what is left of every run (an exited job's JVM may still be shutting down)."""
        for job in self.jobs:
            if job.leftovers():
                job.kill(quiet=True)


@contextlib.contextmanager
def scenario(broker: MosquittoBroker, workdir: Path, mqtt: str) -> Iterator[Scenario]:
    client_id = f"crash-recovery-v{mqtt}"
    run = Scenario(broker, workdir, client_id=client_id, mqtt=mqtt)
    try:
        yield run
    finally:
        run.cleanup()


def read_table(table: Path) -> dict:
    """(topic -> sequence numbers) of every row of the Delta table, read from its log and
    Parquet files without Spark (devtools.delta_log)."""
    rows = DeltaSnapshot.load(table).read().to_pylist()
    out: dict = {"rows": len(rows), "topics": {}, "first": {}, "qos": {}}
    for r in rows:
        out["qos"].setdefault(r["topic"], set()).add(r["qos"])
        seq = int(r["payload"][:SEQUENCE_DIGITS])
        out["topics"].setdefault(r["topic"], []).append(seq)
        if not r["duplicate"]:
            out["first"].setdefault(r["topic"], []).append(seq)
    if rows and "properties" in rows[0]:
        compact = (",", ":")  # as Spark's to_json writes
        groups = Counter(
            (
                r["topic"],
                r["properties"]["contentType"],
                json.dumps(r["properties"]["userProperties"], separators=compact),
            )
            for r in rows
        )
        out["properties"] = [[*key, count] for key, count in groups.items()]
    return out


def exactly_once_problems(
    seqs: list[int | None], count: int, first: list[int | None] | None = None
) -> list[str]:
    """What is wrong with ``seqs`` as a delivery of 0..count-1 exactly once; with ``first``
    (the sequence numbers of the rows with DUP=0), at least once where only resends repeat."""
    seen = Counter(seqs)
    missing = sorted(set(range(count)) - set(seen))
    repeated = Counter(first) if first is not None else seen
    duplicated = sorted((s, n) for s, n in repeated.items() if n > 1)
    foreign = sorted(str(s) for s in seen if s is None or not 0 <= s < count)
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing, e.g. {missing[:10]}")
    if duplicated:
        problems.append(f"{len(duplicated)} duplicated, e.g. {duplicated[:10]}")
    if foreign:
        problems.append(f"unexpected sequence values {foreign[:10]}")
    return problems


@pytest.mark.timeout(600)
def test_kill_9_and_restart_delivers_exactly_once(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(max_queued_messages=1_000_000)
    publishers: list[StagePublisher] = []

    def stage(spec: tuple[str, int, float | None]) -> list[StagePublisher]:
        started = [StagePublisher.start(broker, spec, qos, tmp_path, MQTT) for qos in QOS]
        publishers.extend(started)
        return started

    with scenario(broker, tmp_path, MQTT) as run:
        # The job's session exists before anything is published (at the job's MQTT version:
        # at 5 its Session Expiry Interval is the job's, never).
        create_session(broker.url, run.client_id, TOPIC_FILTER, 2, level=ProtocolLevel.parse(MQTT))
        try:
            # (a) a backlog, a run killed while its first batch is in flight (planned, not
            # committed).
            for publisher in stage(STAGE_A):
                publisher.finish()
            job = run.start_job()
            job.wait_for("the first batch planned", lambda: job.offsets, START_TIMEOUT)
            job.kill()
            assert len(job.offsets) > len(job.commits), (
                f"kill (a) was meant to land inside a batch: offsets {job.offsets}, "
                f"commits {job.commits}"
            )

            # (b) killed mid-stream while the publishers are sending, not aligned with batches.
            job = run.start_job()
            job.wait_new_commits(1, START_TIMEOUT)
            stage_b = stage(STAGE_B)
            wal = job.wal_position()
            job.wait_for("the receiver appending", lambda: job.wal_position() != wal, 30)
            assert any(p.running for p in stage_b), "kill (b) was meant to land while messages flow"
            job.kill()

            # (c) killed right after a commit: a new file in <checkpoint>/commits. The run
            # starts while the tail of stage b is still being published.
            job = run.start_job()
            assert any(p.running for p in stage_b), "stage b was meant to go on into the third run"
            committed = job.wait_new_commits(1, START_TIMEOUT)
            job.kill()
            assert job.commits == committed, "kill (c) was meant to land right after a commit"

            # Last run: stage c is queued by the broker while no job runs; with every
            # publisher done, the available-now run drains the session's queue and exits.
            stage(STAGE_C)
            for publisher in publishers:
                publisher.finish()
            job = run.start_job("available-now")
            try:
                code = job.proc.wait(timeout=DRAIN_TIMEOUT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the available-now run did not finish:\n{tail(job.log)}")
            assert code == 0, f"the available-now run failed ({code}):\n{tail(job.log)}"
            log.info("the available-now run took %.1f s", time.monotonic() - job.started)
        finally:
            for publisher in publishers:
                publisher.kill()

    began = time.monotonic()
    table = read_table(run.table)
    log.info("reading the table took %.1f s", time.monotonic() - began)
    expected = {p.topic: p.count for p in publishers}
    qos_of = {p.topic: int(p.topic[-1]) for p in publishers}
    assert set(table["topics"]) == set(expected), sorted(table["topics"])
    problems = {
        topic: found
        for topic, count in expected.items()
        if (
            found := exactly_once_problems(
                table["topics"][topic],
                count,
                table["first"].get(topic, []) if qos_of[topic] == 1 else None,
            )
        )
    }
    assert not problems, f"not delivered as promised: {problems}"
    for topic, count in expected.items():
        assert table["qos"][topic] == {qos_of[topic]}, (topic, table["qos"][topic])
        resent = len(table["topics"][topic]) - count
        log.info("%s: %d rows beyond the messages published (broker resends)", topic, resent)
        if qos_of[topic] == 2:
            assert resent == 0, topic
    # Every row, resends included, with its message's properties.
    rows_per_topic = {topic: len(seqs) for topic, seqs in table["topics"].items()}
    compact = (",", ":")  # as Spark's to_json writes
    user = {t: json.dumps([{"key": "stage", "value": t}], separators=compact) for t in expected}
    assert sorted(table["properties"]) == sorted(
        [topic, CONTENT_TYPE, user[topic], rows_per_topic[topic]] for topic in expected
    )
