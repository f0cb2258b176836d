"""Helpers for end-to-end tests of ``streaming_jobs/ingest.py`` run as a subprocess
(tests/spark, tests/chaos).

The job runs under plain ``python`` (local[2]) in its own session and process group, with its
stdout and stderr in files. ``kill_9`` sends SIGKILL to the job's process groups, including the
one PySpark's worker daemon makes for itself, so the JVM, the streaming source runner (the MQTT
receiver and its WAL) and the task workers die at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devtools import REPO_ROOT
from devtools.process_tree import alive_in, process_groups
from streaming_jobs.spark_session import delta_jars
from tests.support.spark_processes import tail
from tests.support.waiting import wait_until

INGEST = REPO_ROOT / "streaming_jobs" / "ingest.py"
TRIGGER = "processing-time=300 milliseconds"
START_TIMEOUT = 150.0
"""A job's Spark session, query start and subscription, on a busy two-core machine."""
LAND_TIMEOUT = 150.0
EXIT_TIMEOUT = 90.0
# The job's JVM: C1 JIT only (about halves the start), no web UI.
SUBMIT_ARGS = (
    "--driver-java-options -XX:TieredStopAtLevel=1 --conf spark.ui.enabled=false pyspark-shell"
)


def job_env(**extra: str) -> dict[str, str]:
    """The environment of a job subprocess."""
    env = {k: v for k, v in os.environ.items() if k not in ("MQTT_USERNAME", "MQTT_PASSWORD")}
    return {**env, "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS, **extra}


def spark_submit() -> list[str]:
    """The virtualenv's ``spark-submit`` with Delta's jars, as a user runs the job on a
    cluster: the JVM is the process started, the Python driver its child."""
    jars = ",".join(delta_jars())
    return [
        str(Path(sys.executable).parent / "spark-submit"), "--jars", jars,
        "--driver-java-options", "-XX:TieredStopAtLevel=1", "--conf", "spark.ui.enabled=false",
    ]  # fmt: skip


def run_job(
    args: Sequence[str], timeout: float = 60.0, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the job to completion (for runs that are meant to fail or exit at once)."""
    return subprocess.run(
        [sys.executable, str(INGEST), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=job_env(**env),
        stdin=subprocess.DEVNULL,
    )


@dataclass
class Job:
    """One run of the ingest job."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def start(
        cls,
        args: Sequence[str],
        workdir: Path,
        name: str,
        launcher: Sequence[str] = (sys.executable,),
        cwd: Path = REPO_ROOT,
        **env: str,
    ) -> Job:
        """Start the job with ``launcher`` (plain python, or e.g. ``spark_submit()``) in the
        working directory ``cwd``."""
        out, err = workdir / f"{name}.out", workdir / f"{name}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(
                [*launcher, str(INGEST), *args],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=job_env(**env),
                start_new_session=True,
            )
        return cls(proc, out, err)

    @property
    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def logs(self) -> str:
        return f"--- stdout\n{tail(self.out)}\n--- stderr\n{tail(self.err)}"

    def alive_or_fail(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise AssertionError(f"the ingest job exited with {code}:\n{self.logs()}")

    def wait_for(self, what: str, predicate: Callable[[], object], timeout: float) -> None:
        """Poll ``predicate`` until it is true, failing at once if the job exits."""

        def check() -> bool:
            self.alive_or_fail()
            return bool(predicate())

        wait_until(check, timeout, interval=0.005, message=lambda: f"{what}\n{self.logs()}")

    def terminate(self, timeout: float = EXIT_TIMEOUT) -> int:
        """SIGTERM to the job's main process only (as ``docker stop`` does); its exit status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no exit {timeout} s after SIGTERM:\n{self.logs()}") from None

    def kill_9(self) -> None:
        """SIGKILL every process group of the job and wait until none of them is left."""
        groups = process_groups(self.proc.pid)
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        self.proc.wait(timeout=30)
        wait_until(lambda: not alive_in(groups), 30, message="the killed job's processes live")

    def cleanup(self) -> None:
        """Kill whatever is left of the job (after a failure, or a JVM still shutting down)."""
        if self.proc.poll() is None or alive_in(process_groups(self.proc.pid)):
            self.kill_9()


INGESTING = " INFO ingesting "
"""The job's line once its query's receiver has reported its own subscription (what
:func:`tests.support.waiting.wait_subscribed` waits for, given the job)."""


def batch_files(checkpoint: Path, kind: str) -> list[int]:
    """Batch ids with a file in ``<checkpoint>/offsets`` or ``<checkpoint>/commits``."""
    try:
        return sorted(int(n) for n in os.listdir(checkpoint / kind) if n.isdigit())
    except FileNotFoundError:
        return []
