"""The ingest job (``streaming_jobs/ingest.py``) as the demo runs it: its command line, and the
subprocess with its log."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from devtools.demo.paths import DemoPaths
from devtools.process_tree import alive_in, process_groups

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
INGEST_SCRIPT = REPO_ROOT / "streaming_jobs" / "ingest.py"

TOPIC_FILTER = "plant/+/+/telemetry"
STATUS_FILTER = "plant/+/+/status"
TOPIC_COLUMNS = "_,site,device"
# ``device`` comes from the topic (``--topic-columns``), so the payload's copy is not parsed.
SCHEMA = "ts TIMESTAMP, temperature DOUBLE, humidity DOUBLE, seq BIGINT"
JOB_CLIENT_ID = "demo-ingest"
TRIGGER = "processing-time=2 seconds"
JOB_READY_TIMEOUT = 60.0
"""How long the job may take to make its MQTT session (before its Spark starts)."""
JOB_STOP_TIMEOUT = 90.0
"""SIGTERM lets the job finish the batch in flight (its ``--stop-timeout`` is 60 s)."""
ABORT_STOP_TIMEOUT = 20.0
"""When the demo fails or is interrupted: how long the job gets before it is killed."""
LONG_SUBMIT_ARGS = (
    "--conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false pyspark-shell"
)
"""For a run of an hour or more: no web UI, both JIT compilers, as the job runs in production
(C1 alone starts quicker but leaves hot code slower for the whole run)."""
JOB_SUBMIT_ARGS = f"--driver-java-options -XX:TieredStopAtLevel=1 {LONG_SUBMIT_ARGS}"
"""A quicker JVM start for the job's short run: the C1 compiler only."""
PROGRESS_RE = re.compile(r" INFO (batch \d+: .*)$")
READY = "the broker now queues for this job"
"""The job's line once its persistent session exists: the publishers start at it."""
SUMMARY_RE = re.compile(r"\b((?:stopped|finished|failed): \d+ batch(?:es)?, .*)$")


class IngestJob:
    """``streaming_jobs/ingest.py`` as a subprocess in its own process group.

    Its own session keeps Ctrl-C in the terminal away from it: the demo stops it with SIGTERM
    (the query stops after the batch in flight) and kills what is left when it does not exit in
    time, including the process group PySpark's worker daemon makes for itself.
    """

    def __init__(
        self, command: Sequence[str], log_path: Path, submit_args: str = JOB_SUBMIT_ARGS
    ) -> None:
        self.command = list(command)
        self.log_path = log_path
        self.submit_args = submit_args
        """``PYSPARK_SUBMIT_ARGS`` unless the environment sets it."""
        self.proc: subprocess.Popen[bytes] | None = None
        self._read_up_to = 0

    def start(self) -> None:
        env = dict(os.environ)
        env.setdefault("PYSPARK_SUBMIT_ARGS", self.submit_args)
        with self.log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                self.command,
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def exit_code(self) -> int | None:
        """The exit status once the job ended, else None."""
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float) -> int | None:
        """SIGTERM, wait up to ``timeout``, then SIGKILL; returns the exit status."""
        proc = self.proc
        if proc is None:
            return None
        groups = process_groups(proc.pid)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("the ingest job ignored SIGTERM for %.0f s: killing it", timeout)
                proc.kill()
                proc.wait()
        # The JVM and the Python workers follow the job out; kill whatever lingers.
        deadline = time.monotonic() + 10.0
        while alive_in(groups) and time.monotonic() < deadline:
            time.sleep(0.1)
        for group in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)
        return proc.returncode

    def said(self, text: str) -> bool:
        """Whether the job's output holds ``text``."""
        return any(text in line for line in self._log_lines())

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of the job's output."""
        return "\n".join(self._log_lines()[-lines:])

    def summary(self) -> str | None:
        """The job's summary line ("stopped: N batches, R rows, ..."), once it logged it."""
        found = [m.group(1) for m in map(SUMMARY_RE.search, self._log_lines()) if m]
        return found[-1] if found else None

    def new_progress_lines(self) -> list[str]:
        """The job's per-batch progress lines logged since the last call."""
        try:
            with self.log_path.open("rb") as out:
                out.seek(self._read_up_to)
                data = out.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self._read_up_to += len(complete)
        lines = complete.decode(errors="replace").splitlines()
        return [m.group(1) for m in map(PROGRESS_RE.search, lines) if m]

    def _log_lines(self) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return []


def ingest_command(broker_url: str, paths: DemoPaths, routes: bool = False) -> list[str]:
    """The ingest job's command line for this demo; with ``routes``, a config file with two
    routes (written to ``paths.config``): the readings as typed columns, the status messages
    as VARIANT, one subscription and one dead-letter table."""
    if routes:
        paths.config.write_text(routes_config(broker_url, paths))
        return [sys.executable, str(INGEST_SCRIPT), "--config", str(paths.config)]
    return [
        sys.executable,
        str(INGEST_SCRIPT),
        "--broker", broker_url,
        "--topic", TOPIC_FILTER,
        "--qos", "2",
        "--client-id", JOB_CLIENT_ID,
        "--table", str(paths.table),
        "--checkpoint", str(paths.checkpoint),
        "--payload-format", "json",
        "--schema", SCHEMA,
        "--topic-columns", TOPIC_COLUMNS,
        "--dead-letter-table", str(paths.dead_letter),
        "--trigger", TRIGGER,
        "--master", "local[2]",
    ]  # fmt: skip


def routes_config(broker_url: str, paths: DemoPaths) -> str:
    """The job's TOML with two routes (docs/ingest-job.md, "Routes")."""
    columns = ", ".join(f'"{c}"' for c in TOPIC_COLUMNS.split(","))
    return f"""\
broker = "{broker_url}"
qos = 2
client_id = "{JOB_CLIENT_ID}"
checkpoint = "{paths.checkpoint}"
trigger = "{TRIGGER}"
master = "local[2]"
dead_letter_table = "{paths.dead_letter}"

[[routes]]
topic = "{TOPIC_FILTER}"
table = "{paths.table}"
payload_format = "json"
schema = "{SCHEMA}"
topic_columns = [{columns}]

[[routes]]
topic = "{STATUS_FILTER}"
table = "{paths.status_table}"
payload_format = "variant"
topic_columns = [{columns}]
"""
