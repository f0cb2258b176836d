"""End-to-end demo: a simulated sensor fleet -> Mosquitto -> the ingest job -> Delta.

    python -m streaming_jobs.demo [--messages N] [--devices N] [--data-dir DIR] [--clean]

Starts a local Mosquitto (persistence on, a large ``max_queued_messages``), creates the ingest
job's persistent session, lets a fleet of sensors publish JSON telemetry on
``plant/<site>/<device>/telemetry`` (half of them QoS 1, half QoS 2, at most 20 messages in
flight each, a few malformed payloads among them) while ``streaming_jobs/ingest.py`` runs as a
subprocess and lands the typed rows in a Delta table and the malformed ones in a dead-letter
table. When the tables hold as many rows as the broker acknowledged, the job gets SIGTERM and
the demo reads both tables from their Delta logs and Parquet files (no second JVM) for the
report: stdout, plus ``report.json``.

Everything lives under ``<data-dir>/demo`` (default ``./data/demo``) and is kept: the report
ends with where the tables are and a few lines of PySpark that read them. ``--clean`` removes
the directory after a successful run (a failed run always keeps it for a look). Each run starts
by removing the previous run's ``<data-dir>/demo``: the sensors' plan is the same every time
(same devices, ``seq`` 0..n-1), so the exactly-once check needs tables holding this run alone.
Exit status: 0 when every published message is in exactly one of the two tables exactly once,
1 otherwise, 130 on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from connector.mqtt.driver import MqttClient
from connector.mqtt.errors import MqttError
from connector.mqtt.session import SessionConfig
from streaming_jobs.delta_log import DeltaSnapshot, UnreadableTable, delta_row_count
from streaming_jobs.local_broker import BrokerError, MosquittoBroker
from streaming_jobs.process_tree import alive_in, process_groups

log = logging.getLogger("streaming_jobs.demo")

REPO_ROOT = Path(__file__).resolve().parent.parent
INGEST_SCRIPT = REPO_ROOT / "streaming_jobs" / "ingest.py"

SITES = ("north", "south", "east", "west")
TOPIC_FILTER = "plant/+/+/telemetry"
TOPIC_COLUMNS = "_,site,device"
# ``device`` comes from the topic (``--topic-columns``), so the payload's copy is not parsed.
SCHEMA = "ts TIMESTAMP, temperature DOUBLE, humidity DOUBLE, seq BIGINT"
JOB_CLIENT_ID = "demo-ingest"
TRIGGER = "processing-time=2 seconds"
INFLIGHT = 20
"""Mosquitto's default ``max_inflight_messages``: it drops incoming QoS 2 messages beyond it."""
MAX_QUEUED = 1_000_000
MALFORMED: tuple[bytes, ...] = (
    b"temperature=21.5;humidity=40",  # not JSON
    b'{"device": "x", "ts": "2025-01-01T00:00:00Z", "temperat',  # truncated JSON
    b"\xff\xfe\x00\x80garbage",  # not UTF-8
)
REASON_COLUMN = "reason"
"""The dead-letter table's column saying why a payload did not parse."""
SAMPLE_ROWS = 5
SAMPLE_COLUMNS = ("site", "device", "ts", "temperature", "humidity", "seq", "qos", "offset")
JOB_STOP_TIMEOUT = 90.0
"""SIGTERM lets the job finish the batch in flight (its ``--stop-timeout`` is 60 s)."""
ABORT_STOP_TIMEOUT = 20.0
"""When the demo fails or is interrupted: how long the job gets before it is killed."""
# A quicker JVM start for the job's short run: the C1 compiler only, no web UI.
JOB_SUBMIT_ARGS = (
    "--driver-java-options -XX:TieredStopAtLevel=1 --conf spark.ui.enabled=false "
    "--conf spark.ui.showConsoleProgress=false pyspark-shell"
)
PROGRESS_RE = re.compile(r" INFO (batch \d+: .*)$")
SUMMARY_RE = re.compile(r"\b((?:stopped|finished|failed): \d+ batch(?:es)?, .*)$")


class DemoFailed(Exception):
    """The demo could not complete; the message says what went wrong and where to look."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM reached the demo."""


# ---------------------------------------------------------------------------- the fleet


@dataclass
class Device:
    """One simulated sensor: where it publishes, at which QoS, and its payloads in order."""

    name: str
    site: str
    qos: int
    payloads: list[bytes] = field(default_factory=list)
    valid: int = 0
    malformed: int = 0

    @property
    def topic(self) -> str:
        return f"plant/{self.site}/{self.name}/telemetry"


def malformed_count(messages: int) -> int:
    """How many of ``messages`` are malformed: about 1 %, and at least a few in small runs."""
    return max(min(3, messages // 10), messages // 100)


def plan_fleet(messages: int, devices: int, seed: int = 7) -> list[Device]:
    """Deal ``messages`` round-robin to ``devices`` sensors; a few random ones are malformed.

    Valid readings carry ``seq`` 0, 1, 2, ... per device, so the table can be checked for gaps
    and duplicates. Even-numbered devices publish with QoS 1, odd-numbered ones with QoS 2.
    The plan is the same for the same arguments.
    """
    rng = random.Random(seed)
    fleet = [
        Device(f"sensor-{i + 1:02d}", SITES[i % len(SITES)], 1 if i % 2 == 0 else 2)
        for i in range(devices)
    ]
    bad_at = set(rng.sample(range(messages), malformed_count(messages)))
    base = {d.name: 20.0 + rng.uniform(-3, 3) for d in fleet}
    for index in range(messages):
        device = fleet[index % devices]
        if index in bad_at:
            device.payloads.append(MALFORMED[index % len(MALFORMED)])
            device.malformed += 1
            continue
        reading = {
            "device": device.name,
            "ts": "",  # filled in when published
            "temperature": round(base[device.name] + rng.gauss(0, 0.5), 2),
            "humidity": round(rng.uniform(30, 60), 1),
            "seq": device.valid,
        }
        device.payloads.append(json.dumps(reading).encode())
        device.valid += 1
    return fleet


def stamp(payload: bytes) -> bytes:
    """Put the publication time into a planned reading; malformed payloads stay as they are."""
    marker = b'"ts": ""'
    if marker not in payload:
        return payload
    now = datetime.now(UTC).isoformat(timespec="milliseconds")
    return payload.replace(marker, f'"ts": "{now}"'.encode(), 1)


class Publisher(threading.Thread):
    """Publishes one device's payloads, paced over ``duration`` seconds, <= INFLIGHT in flight.

    ``acked`` counts the messages the broker acknowledged (PUBACK for QoS 1, PUBCOMP for
    QoS 2): the demo's "published" figure.
    """

    def __init__(
        self, device: Device, broker_url: str, duration: float, stop: threading.Event
    ) -> None:
        super().__init__(name=f"publisher-{device.name}", daemon=True)
        self.device = device
        self.broker_url = broker_url
        self.duration = duration
        self.stop_event = stop
        self.acked = 0
        self.error: str | None = None

    def run(self) -> None:
        try:
            self._publish_all()
        except Exception as exc:  # reported by the demo, which fails the run
            self.error = f"{self.device.name}: {exc}"
            log.debug("publisher failed", exc_info=True)

    def _publish_all(self) -> None:
        config = SessionConfig(client_id=f"demo-{self.device.name}", clean_session=True)
        client = MqttClient(self.broker_url, config, connect_timeout=10.0)
        client.connect()
        try:
            session = client.session
            payloads = self.device.payloads
            interval = self.duration / max(1, len(payloads))
            start = time.monotonic()
            sent = 0
            while sent < len(payloads):
                if self.stop_event.is_set():
                    return
                if session.outbound_in_flight >= INFLIGHT:
                    self.acked += client.pump(0.2)
                    continue
                wait = start + sent * interval - time.monotonic()
                if wait > 0:  # pacing: read acknowledgements until the next reading is due
                    self.acked += client.pump(min(wait, 0.2))
                    continue
                client.publish(self.device.topic, stamp(payloads[sent]), self.device.qos)
                sent += 1
            deadline = time.monotonic() + 30.0
            while session.outbound_in_flight and time.monotonic() < deadline:
                if self.stop_event.is_set():
                    return
                self.acked += client.pump(0.2)
            if session.outbound_in_flight:
                raise DemoFailed(f"{session.outbound_in_flight} message(s) never acknowledged")
            if client.connections != 1:
                raise DemoFailed("the connection dropped while publishing: messages may be lost")
        finally:
            client.disconnect()


def create_job_session(broker_url: str) -> None:
    """Make the broker keep a persistent session for the job, so it queues from now on."""
    config = SessionConfig(client_id=JOB_CLIENT_ID, clean_session=False)
    client = MqttClient(broker_url, config, [(TOPIC_FILTER, 2)], connect_timeout=10.0)
    client.connect()
    client.disconnect()


# ---------------------------------------------------------------------------- Delta tables


@dataclass
class TableReport:
    """What reading the two tables found."""

    landed: int
    dead_letter: int
    reasons: dict[str, int]
    per_device: dict[str, dict[str, int]]
    columns: list[str]
    sample: list[list[str]]


def read_tables(table: Path, dead_letter: Path) -> TableReport:
    """Read both tables (after the job stopped): counts per device, reasons, a sample."""
    import pyarrow.compute as pc

    rows = DeltaSnapshot.load(table).read()
    per_device: dict[str, dict[str, int]] = {}
    if rows.num_rows:
        grouped = rows.group_by("device").aggregate(
            [("seq", "count"), ("seq", "count_distinct"), ("seq", "min"), ("seq", "max")]
        )
        for r in grouped.to_pylist():
            per_device[r["device"]] = {
                "rows": r["seq_count"],
                "distinct_seq": r["seq_count_distinct"],
                "min_seq": r["seq_min"],
                "max_seq": r["seq_max"],
            }
    shown = [c for c in SAMPLE_COLUMNS if c in rows.column_names]
    sample = []
    if rows.num_rows:
        first = rows.select(shown).sort_by([("ts", "ascending"), ("device", "ascending")])
        sample = [[_cell(r[c]) for c in shown] for r in first.slice(0, SAMPLE_ROWS).to_pylist()]
    dead = DeltaSnapshot.load(dead_letter).read()
    reasons: dict[str, int] = {}
    if REASON_COLUMN in dead.column_names and dead.num_rows:
        counts = pc.value_counts(dead[REASON_COLUMN]).to_pylist()
        reasons = {str(c["values"]): int(c["counts"]) for c in counts}
    return TableReport(rows.num_rows, dead.num_rows, reasons, per_device, shown, sample)


def _cell(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="milliseconds")
    return "null" if value is None else str(value)


# ---------------------------------------------------------------------------- the job


class IngestJob:
    """``streaming_jobs/ingest.py`` as a subprocess in its own process group.

    Its own session keeps Ctrl-C in the terminal away from it: the demo stops it with SIGTERM
    (the query stops after the batch in flight) and kills what is left when it does not exit in
    time, including the process group PySpark's worker daemon makes for itself.
    """

    def __init__(self, command: Sequence[str], log_path: Path) -> None:
        self.command = list(command)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._read_up_to = 0

    def start(self) -> None:
        env = dict(os.environ)
        env.setdefault("PYSPARK_SUBMIT_ARGS", JOB_SUBMIT_ARGS)
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


def ingest_command(broker_url: str, paths: DemoPaths) -> list[str]:
    """The ingest job's command line for this demo."""
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


# ---------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class DemoPaths:
    """Where one demo run keeps everything: ``<data-dir>/demo/...``."""

    root: Path

    @property
    def table(self) -> Path:
        return self.root / "tables" / "telemetry"

    @property
    def dead_letter(self) -> Path:
        return self.root / "tables" / "telemetry_dead_letter"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoints" / "telemetry"

    @property
    def broker(self) -> Path:
        return self.root / "broker"

    @property
    def job_log(self) -> Path:
        return self.root / "ingest.log"

    @property
    def report(self) -> Path:
        return self.root / "report.json"


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, every: Callable[[], None]
) -> None:
    """Check ``condition`` until it holds, calling ``every`` every 2 s; fail at the deadline.
    ``condition`` raises DemoFailed itself when waiting has become pointless."""
    deadline = time.monotonic() + timeout
    next_tick = 0.0
    while not condition():
        now = time.monotonic()
        if now > deadline:
            raise DemoFailed(f"{what} within {timeout:.0f} s")
        if now >= next_tick:
            every()
            next_tick = now + 2.0
        time.sleep(0.2)


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """Turn SIGTERM (and Ctrl-C) into ``Interrupted`` so every cleanup step runs."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


DEMO_ENTRIES = frozenset({"tables", "checkpoints", "broker", "ingest.log", "report.json"})
"""What a demo run puts directly in its directory; anything else there is not the demo's."""


def clear_previous_run(root: Path) -> bool:
    """Remove a previous run's ``root``; True when there was one.

    Refuses (DemoFailed) when ``root`` holds anything a demo run does not make, so a
    ``--data-dir`` pointing at someone's own ``demo`` folder is never wiped.
    """
    if not root.exists():
        return False
    if not root.is_dir():
        raise DemoFailed(f"{root} is not a directory: choose another --data-dir")
    foreign = sorted(p.name for p in root.iterdir() if p.name not in DEMO_ENTRIES)
    if foreign:
        raise DemoFailed(
            f"{root} holds files the demo did not make ({', '.join(foreign[:5])}): "
            "remove them or choose another --data-dir"
        )
    shutil.rmtree(root)
    return True


def run(args: argparse.Namespace, paths: DemoPaths) -> dict[str, Any]:
    """Run the demo in ``paths.root`` (the previous run's data removed first); return the
    report."""
    if clear_previous_run(paths.root):
        print(f"data        {paths.root}: the previous run's data removed, starting fresh")
    paths.root.mkdir(parents=True)
    fleet = plan_fleet(args.messages, args.devices)
    planned = sum(len(d.payloads) for d in fleet)
    started = time.monotonic()
    timings: dict[str, float] = {}

    def mark(name: str) -> None:
        timings[name] = round(time.monotonic() - started, 1)

    broker = MosquittoBroker(
        paths.broker,
        persistence=True,
        max_queued_messages=MAX_QUEUED,
        max_inflight_messages=INFLIGHT,
    )
    stop_publishers = threading.Event()
    with contextlib.ExitStack() as cleanup:  # in reverse: publishers, job, broker
        cleanup.callback(broker.close)
        broker.start()
        print(
            f"broker      {broker.url} (Mosquitto, persistence on, "
            f"max_queued_messages {MAX_QUEUED}, max_inflight_messages {INFLIGHT})"
        )
        create_job_session(broker.url)

        job = IngestJob(ingest_command(broker.url, paths), paths.job_log)
        cleanup.callback(job.stop, ABORT_STOP_TIMEOUT)
        job.start()
        mark("job_started")
        print(f"ingest job  {INGEST_SCRIPT.relative_to(REPO_ROOT)}, output in {paths.job_log}")

        publishers = [Publisher(d, broker.url, args.duration, stop_publishers) for d in fleet]
        cleanup.callback(join_all, publishers, stop_publishers)
        for publisher in publishers:
            publisher.start()
        by_qos = {q: sum(len(d.payloads) for d in fleet if d.qos == q) for q in (1, 2)}
        print(
            f"publishing  {planned} messages from {len(fleet)} sensors at "
            f"{len({d.site for d in fleet})} sites over ~{args.duration:g} s (QoS 1: "
            f"{by_qos[1]}, QoS 2: {by_qos[2]}; {sum(d.malformed for d in fleet)} malformed)"
        )

        def acked() -> int:
            return sum(p.acked for p in publishers)

        def landed() -> tuple[int, int]:
            return delta_row_count(paths.table), delta_row_count(paths.dead_letter)

        def check_alive() -> None:
            failed = [p.error for p in publishers if p.error]
            if failed:
                raise DemoFailed("publishing failed: " + "; ".join(failed))
            code = job.exit_code()
            if code is not None:
                raise DemoFailed(
                    f"the ingest job exited with status {code}; last lines of "
                    f"{paths.job_log}:\n{job.log_tail()}"
                )

        def progress() -> None:
            for line in job.new_progress_lines():
                print(f"  job: {line}")
            rows, dead = landed()
            print(
                f"  {time.monotonic() - started:5.1f} s  published {acked():>6}/{planned}"
                f"  landed {rows:>6}  dead letter {dead:>4}",
                flush=True,
            )

        def published_all() -> bool:
            check_alive()
            return not any(p.is_alive() for p in publishers)

        wait_for(published_all, args.duration + 60.0, "the publishers did not finish", progress)
        check_alive()
        published = acked()
        mark("published")

        def all_landed() -> bool:
            check_alive()
            return sum(landed()) >= published

        wait_for(all_landed, args.timeout, "the tables did not catch up", progress)
        progress()
        mark("landed")
        print("stopping    the ingest job (SIGTERM)")
        job_code = job.stop(JOB_STOP_TIMEOUT)
        mark("job_stopped")
        for line in job.new_progress_lines():
            print(f"  job: {line}")
    if job_code != 0:
        raise DemoFailed(
            f"the ingest job exited with status {job_code} after SIGTERM; "
            f"last lines of {paths.job_log}:\n{job.log_tail()}"
        )
    tables = read_tables(paths.table, paths.dead_letter)
    mark("report")
    report = build_report(paths, fleet, published, tables, timings)
    report["job_summary"] = job.summary()
    return report


def join_all(publishers: Sequence[Publisher], stop: threading.Event) -> None:
    """Stop the publishers still running and wait for them to disconnect."""
    stop.set()
    for publisher in publishers:
        publisher.join(10.0)


def build_report(
    paths: DemoPaths,
    fleet: Sequence[Device],
    published: int,
    tables: TableReport,
    timings: dict[str, float],
) -> dict[str, Any]:
    """The machine-readable report, with the checks the exit status depends on."""
    problems: list[str] = []
    for device in fleet:
        got = tables.per_device.get(device.name)
        want = device.valid
        if got is None:
            if want:
                problems.append(f"{device.name}: no rows, {want} published")
            continue
        if got["rows"] != want or got["distinct_seq"] != want:
            problems.append(
                f"{device.name}: {got['rows']} rows with {got['distinct_seq']} distinct seq, "
                f"{want} published"
            )
        elif want and (got["min_seq"], got["max_seq"]) != (0, want - 1):
            problems.append(f"{device.name}: seq {got['min_seq']}..{got['max_seq']}")
    unknown = sorted(set(tables.per_device) - {d.name for d in fleet})
    if unknown:
        problems.append(f"rows from unknown devices: {unknown}")
    valid = sum(d.valid for d in fleet)
    malformed = sum(d.malformed for d in fleet)
    if tables.landed + tables.dead_letter != published:
        problems.append(
            f"landed {tables.landed} + dead letter {tables.dead_letter} != published {published}"
        )
    if tables.dead_letter != malformed:
        problems.append(f"{tables.dead_letter} dead-letter rows for {malformed} malformed")
    return {
        "ok": not problems,
        "problems": problems,
        "published": {
            "total": published,
            "planned": sum(len(d.payloads) for d in fleet),
            "valid": valid,
            "malformed": malformed,
            "by_qos": {str(q): sum(len(d.payloads) for d in fleet if d.qos == q) for q in (1, 2)},
            "devices": {
                d.name: {"site": d.site, "qos": d.qos, "valid": d.valid, "malformed": d.malformed}
                for d in fleet
            },
        },
        "landed": tables.landed,
        "dead_letter": tables.dead_letter,
        "dead_letter_reasons": tables.reasons,
        "tables": {
            "telemetry": str(paths.table),
            "dead_letter": str(paths.dead_letter),
            "checkpoint": str(paths.checkpoint),
        },
        "data_dir": str(paths.root),
        "job_log": str(paths.job_log),
        "sample": {"columns": tables.columns, "rows": tables.sample},
        "timings_s": timings,
    }


def format_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def read_snippet(table: str, dead_letter: str) -> list[str]:
    """Lines of PySpark that read the demo's two tables (Delta jars from ``make setup``)."""
    return [
        "from streaming_jobs.spark_session import local_spark",
        'spark = local_spark("demo-read")',
        f'rows = spark.read.format("delta").load("{table}")',
        'rows.groupBy("site", "device").count().orderBy("device").show()',
        f'spark.read.format("delta").load("{dead_letter}").groupBy("reason").count()'
        ".show(truncate=False)",
    ]


HOW_TO_READ = "read them    with .venv/bin/python (this repository's virtualenv):"
"""The line that introduces the PySpark snippet in the printed report."""


def print_report(report: dict[str, Any], kept: bool) -> None:
    """The human-readable report on stdout; when the data is kept, how to read the tables."""
    pub = report["published"]
    total = report["landed"] + report["dead_letter"]
    lines = [
        "",
        "=== MQTT -> Delta demo report ===",
        f"published    {pub['total']} messages acknowledged by the broker (QoS 1: "
        f"{pub['by_qos']['1']}, QoS 2: {pub['by_qos']['2']}; {pub['valid']} valid, "
        f"{pub['malformed']} malformed)",
        f"landed       {report['landed']} rows in {report['tables']['telemetry']}",
        f"dead letter  {report['dead_letter']} rows in {report['tables']['dead_letter']}",
        *(
            f"             {count:>5} x {reason}"
            for reason, count in sorted(report["dead_letter_reasons"].items())
        ),
        f"check        landed + dead letter = {total}, published = {pub['total']}: "
        + ("match" if total == pub["total"] else "MISMATCH"),
        "             every device's readings seq 0..n-1 exactly once: "
        + ("yes" if report["ok"] else "NO"),
        *(f"  problem:   {problem}" for problem in report["problems"]),
        f"job summary  {report.get('job_summary') or '(none logged)'}",
        "sample       the first readings in the typed table:",
        "  "
        + format_table(report["sample"]["columns"], report["sample"]["rows"]).replace("\n", "\n  "),
    ]
    t = report["timings_s"]
    lines.append(
        f"timeline     all published at {t.get('published')} s, all landed at "
        f"{t.get('landed')} s, job stopped at {t.get('job_stopped')} s, "
        f"report at {t.get('report')} s"
    )
    tables = report["tables"]
    if kept:
        lines += [
            f"data         kept in {report['data_dir']} (report.json, ingest.log, broker/, "
            "checkpoints/; the next run starts fresh, --clean removes it at the end)",
            f"tables       {tables['telemetry']}",
            f"             {tables['dead_letter']}",
            HOW_TO_READ,
            *(f"  {line}" for line in read_snippet(tables["telemetry"], tables["dead_letter"])),
        ]
    else:
        lines.append(
            f"data         {report['data_dir']} is removed now (--clean); without it the "
            "tables stay there to read"
        )
    print("\n".join(lines))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m streaming_jobs.demo",
        description="Sensors -> Mosquitto -> the ingest job -> Delta, with a report.",
    )
    parser.add_argument(
        "--messages",
        type=_positive,
        default=2000,
        help="messages to publish, malformed ones included (default 2000)",
    )
    parser.add_argument(
        "--devices",
        type=_positive,
        default=6,
        help="simulated sensors, half QoS 1, half QoS 2 (default 6)",
    )
    parser.add_argument(
        "--data-dir",
        default="data",
        help="the demo works in DATA_DIR/demo, the previous run's removed first (default ./data)",
    )
    cleanup = parser.add_mutually_exclusive_group()
    cleanup.add_argument(
        "--clean",
        "--remove-data",
        dest="clean",
        action="store_true",
        help="remove DATA_DIR/demo at the end of a successful run (by default the tables, "
        "checkpoint, logs and report.json are kept)",
    )
    cleanup.add_argument(
        "--keep-data",
        action="store_true",
        help="keep DATA_DIR/demo: the default, accepted for older command lines",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=8.0,
        help="seconds over which the sensors spread their messages (default 8)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        help="seconds to wait for the tables to catch up (default 90)",
    )
    parser.add_argument("--log-level", default="WARNING")
    return parser  # fmt: skip


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    paths = DemoPaths(Path(args.data_dir).resolve() / "demo")
    try:
        with interrupts_raise():
            report = run(args, paths)
    except Interrupted as exc:
        sys.stderr.write(
            f"demo interrupted ({exc}); processes stopped, data left in {paths.root}\n"
        )
        return 130
    except (DemoFailed, UnreadableTable, BrokerError, MqttError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\ndata left in {paths.root} for a look\n")
        return 1
    paths.report.write_text(json.dumps(report, indent=2) + "\n")
    keep = not args.clean or not report["ok"]
    print_report(report, keep)
    if not keep:
        shutil.rmtree(paths.root, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
