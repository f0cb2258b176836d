"""Shared helpers of the benchmarks: machine description, statistics, tables, JSON results."""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import select
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from devtools import REPO_ROOT as REPO_ROOT
from devtools.backlog import MOSQUITTO_INFLIGHT as MOSQUITTO_INFLIGHT
from devtools.backlog import create_session as create_session
from devtools.backlog import pub_command as pub_command
from devtools.backlog import publish_windowed as publish_windowed
from devtools.machine import machine_info as machine_info
from devtools.machine import package_version as package_version

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True, slots=True)
class Stats:
    """Median, min and max of repeated measurements, plus the raw values."""

    median: float
    min: float
    max: float
    runs: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float]) -> Stats:
        runs = tuple(values)
        if not runs:
            raise ValueError("no measurements")
        return cls(statistics.median(runs), min(runs), max(runs), runs)

    def as_dict(self, digits: int = 3) -> dict[str, Any]:
        data = asdict(self)
        return {
            key: [round(v, digits) for v in value] if key == "runs" else round(value, digits)
            for key, value in data.items()
        }


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> Stats:
    """Ratios of measurements taken in the same repetition (ours[i] / theirs[i])."""
    return Stats.of(a / b for a, b in zip(ours, theirs, strict=True))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: first column left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def rate(value: float) -> str:
    """Messages per second with thousands separators."""
    return f"{value:,.0f}"


def ratio(value: float) -> str:
    return f"{value:.2f}x"


def describe_machine(info: Mapping[str, Any]) -> str:
    """One line naming the machine, for the top of a printed report."""
    return (
        f"{info['cpu_model']}, {info['cores']} cores, {info['python']}, "
        f"mosquitto {info['mosquitto']}, paho-mqtt {info['paho_mqtt']}, {info['date']}"
    )


def write_results(name: str, data: Mapping[str, Any], path: Path | None = None) -> Path:
    """Write ``data`` as JSON to ``bench/results/<name>.json`` (atomically) and return the path."""
    target = path if path is not None else RESULTS_DIR / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n")
    temporary.replace(target)
    return target


def profile_report(profile: cProfile.Profile | str, limit: int = 20) -> str:
    """The ``limit`` functions with the most own time in a profile (or a saved profile file)."""
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(limit)
    return out.getvalue()


def paho_loop(
    client: Any,
    done: Callable[[], bool],
    last: Callable[[], float | None],
    start: float,
    timeout: float,
    stall: float,
) -> None:
    """Drive a connected paho-mqtt client until ``done()``, ``timeout`` seconds after ``start``,
    or ``stall`` seconds without a message (``last()`` is the newest message's time).

    It is loop_forever's cycle through paho's external-loop API, so the caller can stop right
    after the PUBACK of the last message was written (before DISCONNECT)."""
    import paho.mqtt.client as paho

    sock = client.socket()
    deadline = start + timeout
    while not done():
        now = time.perf_counter()
        if now > deadline or now - (last() or start) > stall:
            break
        writable = [sock] if client.want_write() else []
        readable, _, _ = select.select([sock], writable, [], 1.0)
        if readable and client.loop_read() != paho.MQTT_ERR_SUCCESS:
            break
        if client.want_write() and client.loop_write() != paho.MQTT_ERR_SUCCESS:
            break
        client.loop_misc()


# ------------------------------------------------------------------------- backlogs


class BenchError(RuntimeError):
    """A benchmark could not prepare its input, a peer failed or a check did not hold."""


def wait_stored(receiver: Any, count: int, deadline: float, stall: float) -> float:
    """Watch a started receiver's WAL until it holds ``count`` records, ``deadline`` (a
    ``time.perf_counter()`` time) passes, nothing new is stored for ``stall`` seconds, or the
    receiver fails; returns the time it stopped watching."""
    last, stored = time.perf_counter(), 0
    while receiver.wal.next_offset < count:
        now = time.perf_counter()
        if now > deadline or now - last > stall or receiver.error is not None:
            break
        if receiver.wal.next_offset != stored:
            stored, last = receiver.wal.next_offset, now
        time.sleep(0.0005)
    return time.perf_counter()


def spawn_worker(
    command: Sequence[str], timeout: float, name: str
) -> tuple[float, dict[str, Any], subprocess.CompletedProcess[str]]:
    """Run a benchmark worker process in ``REPO_ROOT``; return its wall time, the JSON object
    on its last stdout line, and the finished process (BenchError when it printed nothing)."""
    start = time.perf_counter()
    done = subprocess.run(
        list(command), capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT
    )
    wall = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise BenchError(f"{name} worker printed nothing ({done.returncode}): {done.stderr}")
    return wall, json.loads(lines[-1]), done
