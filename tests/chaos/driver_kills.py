"""The ingest job's whole driver killed at chosen moments, each run as on a new node, with the
WAL on object storage; and its Delta table read per row without Spark.

* :func:`wait_for_moment` waits, in one run, for the kind of moment a kill lands on: while
  the WAL grows, inside a batch (planned, not committed), right after a commit, or after a
  random delay.
* :class:`Node` is the local disk of one driver: the job runs with its temporary files
  (``TMPDIR``, ``java.io.tmpdir``, ``spark.local.dir``), working directory, home and
  ``$MQTT_WAL_ROOT`` in a folder of its own, which :meth:`Node.wipe` deletes after the run,
  as a driver restarted on another machine finds none of them.
* :func:`newest_part` follows a WAL in a store (its newest part object changes with every
  append), :func:`lease_claims` lists the claims on its lease.
* :func:`table_rows` reads a Delta table without Spark, for the check per QoS against what
  each publisher had acknowledged (:func:`tests.support.ledger.settle_per_qos`).
"""

from __future__ import annotations

import random
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from connector.wal.lease import LEASE_DIR
from connector.wal.location import parse_location
from connector.wal.objects import ObjectStore
from devtools.delta_log import DeltaSnapshot
from devtools.process_tree import alive_in
from tests.support.ingest_job import START_TIMEOUT, TRIGGER, Job, batch_files
from tests.support.ledger import Tally
from tests.support.waiting import wait_until

MOMENTS = ("wal-growing", "mid-batch", "after-commit", "random-delay")
MOMENT_TIMEOUT = 60.0
WAL_NAMES = ("wal.json", "LOCK", "subscriptions.json")
WAL_SUFFIXES = (".seg", ".part")
NODE_FOLDERS = ("tmp", "cwd", "home", "wal-root")
ENDED_TIMEOUT = 60.0


def job_args(broker_url: str, topic: str, client_id: str, base: Path) -> list[str]:
    """The job's flags: a QoS 2 subscription to ``topic``, its table and checkpoint under
    ``base``, a short processing-time trigger, progress lines."""
    return [
        "--broker", broker_url, "--topic", topic, "--qos", "2", "--client-id", client_id,
        "--table", str(base / "table"), "--checkpoint", str(base / "checkpoint"),
        "--trigger", TRIGGER, "--log-level", "INFO",
    ]  # fmt: skip


def wait_for_moment(
    job: Job,
    checkpoint: Path,
    moment: str,
    rng: random.Random,
    wal_mark: Callable[[], Any],
) -> None:
    """Wait (failing if the job dies) for a moment of the kind named, in this run, after its
    first commit. ``wal_mark`` returns a value that grows with every append to the WAL."""
    commits = len(batch_files(checkpoint, "commits"))
    job.wait_for(
        "a first commit in this run",
        lambda: len(batch_files(checkpoint, "commits")) > commits,
        START_TIMEOUT,
    )
    if moment == "wal-growing":
        mark = wal_mark()
        job.wait_for("the WAL growing", lambda: wal_mark() > mark, MOMENT_TIMEOUT)
    elif moment == "mid-batch":
        job.wait_for(
            "a batch in flight",
            lambda: (
                len(batch_files(checkpoint, "offsets")) > len(batch_files(checkpoint, "commits"))
            ),
            MOMENT_TIMEOUT,
        )
    elif moment == "after-commit":
        now = len(batch_files(checkpoint, "commits"))
        job.wait_for(
            "a commit", lambda: len(batch_files(checkpoint, "commits")) > now, MOMENT_TIMEOUT
        )
    else:
        try:
            job.proc.wait(timeout=rng.uniform(0.1, 5.0))
        except Exception:  # still running after the random delay: the moment has come
            return
        job.alive_or_fail()


def kill_at_a_moment(
    job: Job, checkpoint: Path, rng: random.Random, wal_mark: Callable[[], Any], tally: Tally
) -> str:
    """Kill the whole job (SIGKILL to its process tree) at a moment drawn from ``rng``, after
    :func:`wait_for_moment`; counted in the tally. Returns the moment's kind."""
    moment = rng.choice(MOMENTS)
    wait_for_moment(job, checkpoint, moment, rng, wal_mark)
    job.kill_9()
    tally.add("driver_kills")
    tally.add("kills_survived")
    return moment


STOP_TIMEOUT = 120.0
"""How long the source's runner may take to finish its stop once the job's JVM is gone."""


def wait_exit(job: Job, what: str, timeout: float) -> int:
    """The job's exit status, once every process of the job has ended; fails the test with
    its output unless it exits in time. The source's runner finishes its orderly stop (the
    WAL closed, its lease released) after the JVM that sent it SIGTERM may have exited
    (docs/architecture.md, decision 32): a test that killed the job's processes right away
    would cut that stop short."""
    try:
        code = job.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what} did not end in {timeout:g} s:\n{job.logs()}", pytrace=False)
    wait_until(
        lambda: not alive_in({job.proc.pid}),
        STOP_TIMEOUT,
        interval=0.1,
        message=lambda: f"{what}: processes {alive_in({job.proc.pid})} outlived the job",
    )
    return code


def newest_part(wal_path: str) -> str:
    """The name of the newest part object of the WAL at ``wal_path`` in its store ('' when
    there is none): segment and byte position are zero-padded, so later parts sort higher."""
    import pyarrow.fs as pafs

    filesystem, root = parse_location(wal_path).filesystem()
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    parts = [
        info.path for info in filesystem.get_file_info(selector) if info.path.endswith(".part")
    ]
    return max(parts, default="")


def lease_claims(wal_path: str) -> list[str]:
    """The claims on the lease of the WAL at ``wal_path`` (none once its last writer closed)."""
    store = ObjectStore(parse_location(wal_path))
    return sorted(name for name, _, _ in store.entries(LEASE_DIR))


@dataclass(frozen=True)
class Node:
    """The local files of one driver run, all under ``root``: ``tmp`` (Python's, the JVM's
    and Spark's scratch space), ``cwd``, ``home`` and ``wal-root`` (``$MQTT_WAL_ROOT``)."""

    root: Path

    @classmethod
    def fresh(cls, root: Path) -> Node:
        for name in NODE_FOLDERS:
            (root / name).mkdir(parents=True)
        return cls(root)

    def env(self) -> dict[str, str]:
        """The job's environment on this node."""
        tmp = self.root / "tmp"
        submit = (
            f"--driver-java-options '-XX:TieredStopAtLevel=1 -Djava.io.tmpdir={tmp}' "
            f"--conf spark.local.dir={tmp} --conf spark.ui.enabled=false pyspark-shell"
        )
        return {
            "TMPDIR": str(tmp),
            "HOME": str(self.root / "home"),
            "MQTT_WAL_ROOT": str(self.root / "wal-root"),
            "PYSPARK_SUBMIT_ARGS": submit,
        }

    def start(self, args: Sequence[str], logs: Path, name: str) -> Job:
        """Start the job on this node; its output goes to ``logs``, which outlives the node."""
        return Job.start(args, logs, name, cwd=self.root / "cwd", **self.env())

    def wal_files(self) -> list[Path]:
        """Files under the node that belong to a WAL (none should: the WAL is in the store)."""
        return sorted(
            path
            for path in self.root.rglob("*")
            if path.name in WAL_NAMES or path.name.endswith(WAL_SUFFIXES)
        )

    def wipe(self, job: Job) -> None:
        """Delete every local file of the run once ``job``'s process group has ended (its JVM
        outlives the Python driver a little, deleting its scratch files); fails when any file
        belongs to a WAL, or unless Spark wrote its scratch files here (the run used the node).
        """
        wait_until(
            lambda: not alive_in({job.proc.pid}),
            ENDED_TIMEOUT,
            message=lambda: f"the job's processes still run: {alive_in({job.proc.pid})}",
        )
        assert self.wal_files() == [], f"a WAL on the node's disk: {self.wal_files()}"
        tmp = self.root / "tmp"
        assert any(tmp.iterdir()), f"the job wrote nothing into {tmp}"
        shutil.rmtree(self.root)


def table_rows(table: Path) -> list[dict[str, Any]]:
    """``payload``, ``qos`` and ``duplicate`` of every row of the Delta table at ``table``."""
    data = DeltaSnapshot.load(table).read()
    return data.select(["payload", "qos", "duplicate"]).to_pylist()


def no_data_loss_reported(jobs: Sequence[Job]) -> None:
    """Fail when any run's output reports WAL data loss (``DataLossError``)."""
    for job in jobs:
        text = job.stdout + job.stderr
        for marker in ("DataLoss", "are not stored"):
            assert marker not in text, f"a run reported data loss ({marker!r}):\n{job.logs()}"
