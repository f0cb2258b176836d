"""What every benchmark shares: statistics, the machine, results files, command lines, and the
sessions and publishers that make backlogs."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from connector.mqtt.cli import SEQUENCE_DIGITS
from devtools import REPO_ROOT as REPO_ROOT
from devtools.backlog import MOSQUITTO_INFLIGHT as MOSQUITTO_INFLIGHT
from devtools.backlog import create_session as create_session
from devtools.backlog import pub_command as pub_command
from devtools.backlog import publish_windowed as publish_windowed
from devtools.machine import machine_info as machine_info
from devtools.machine import package_version as package_version

RESULTS_DIR = Path(__file__).resolve().parent / "results"
T = TypeVar("T")


class BenchError(RuntimeError):
    """A benchmark could not prepare its input, a peer failed or a check did not hold."""


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


def turn(items: Sequence[T], repetition: int) -> list[T]:
    """``items`` in the order of a repetition: rotated by one more each time, so that peers
    measured in turns meet a drift in machine load alike."""
    at = repetition % len(items)
    return [*items[at:], *items[:at]]


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> Stats:
    """Ratios of measurements taken in the same repetition (ours[i] / theirs[i])."""
    return Stats.of(a / b for a, b in zip(ours, theirs, strict=True))


def machine(*packages: str) -> dict[str, Any]:
    """:func:`machine_info` with the versions of ``packages`` (``delta-spark`` as
    ``delta_spark``) and the load average at start."""
    info = machine_info()
    for name in packages:
        info[name.replace("-", "_")] = package_version(name)
    info["load_average_at_start"] = [round(v, 2) for v in os.getloadavg()]
    return info


def write_results(name: str, data: Mapping[str, Any], path: Path | None = None) -> Path:
    """Write ``data`` as JSON to ``bench/results/<name>.json`` (atomically) and return the path."""
    target = path if path is not None else RESULTS_DIR / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=2) + "\n")
    temporary.replace(target)
    return target


FAILURES = (BenchError, subprocess.TimeoutExpired, RuntimeError, OSError)
"""What ends a run with a message, not a traceback (RuntimeError: the broker helpers' too)."""


def finish(
    name: str, measure: Callable[[], Mapping[str, Any]], output: Path | None, render: Any
) -> int:
    """Run ``measure``, write its results, then print its section of the report (``render``);
    on a failure its message and exit status 1."""
    from .render import print_section

    try:
        data = measure()
    except FAILURES as exc:
        sys.stderr.write(f"bench.{name}: {exc}\n")
        return 1
    path = write_results(name, data, output)
    print_section(data, render)
    print(f"results: {path}")
    return 0


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low``."""

    def parse(text: str) -> int:
        if int(text) < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        return int(text)

    return parse


SHARED_ARGUMENTS: dict[str, tuple[Callable[[str], Any], str]] = {
    "messages": (at_least(1), "messages per backlog"),
    "repeat": (at_least(1), "repetitions, peers in turns"),
    "size": (at_least(SEQUENCE_DIGITS), "payload bytes"),
    "timeout": (float, "per step, in seconds"),
}


def arguments(name: str, doc: str | None, **defaults: Any) -> argparse.ArgumentParser:
    """The parser of ``python -m bench.<name>``: ``--output`` and the shared arguments given a
    default in ``defaults`` (messages, repeat, size, timeout)."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=doc)
    for key, default in defaults.items():
        kind, text = SHARED_ARGUMENTS[key]
        parser.add_argument(f"--{key}", type=kind, default=default, help=text)
    parser.add_argument("--output", type=Path, help=f"default bench/results/{name}.json")
    return parser


def in_turns(items: Sequence[T], repeat: int) -> Iterator[tuple[int, T]]:
    """(repetition, item) for ``repeat`` repetitions, the items in each one's :func:`turn`."""
    for repetition in range(repeat):
        for item in turn(items, repetition):
            yield repetition, item


def wait_for(
    done: Callable[[], object], timeout: float, failure: Callable[[], str], interval: float = 0.05
) -> float:
    """Poll ``done()`` until it holds; BenchError(``failure()``) after ``timeout`` seconds.
    Returns the seconds waited."""
    began = time.perf_counter()
    while not done():
        if time.perf_counter() - began > timeout:
            raise BenchError(failure())
        time.sleep(interval)
    return time.perf_counter() - began


def goal(
    ratio: str, target: float, measured: float, digits: int | None = 3, **more: Any
) -> dict[str, Any]:
    """A goal of the results: ``measured`` must reach ``target``."""
    return {"ratio": ratio, **more, "target": target, "measured": round(measured, digits),
            "met": measured >= target}  # fmt: skip


def json_line(command: Sequence[str], timeout: float, what: str) -> Any:
    """Run ``command`` in ``REPO_ROOT``: the last line it printed, as JSON; BenchError unless
    it exited 0."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise BenchError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def check_broker(broker: Any) -> None:
    """BenchError with the end of its log when the broker process died."""
    if broker.crashed:
        raise BenchError(f"{broker.name} crashed:\n{broker.log_text()[-4000:]}")


def new_receiver(
    url: str, topic_filter: str, client_id: str, wal: Any, *, qos: int = 1, **more: str
) -> Any:
    """The source's receiver (``connector.receiver``) of ``topic_filter`` into the WAL at
    ``wal``, with more options of ``format("mqtt")``; not started."""
    from connector.options.source import SourceOptions
    from connector.receiver.receiver import Receiver

    options = {"brokerUrl": url, "topic": topic_filter, "qos": str(qos), "clientId": client_id}
    return Receiver(SourceOptions.parse({**options, "walPath": str(wal), **more}))
