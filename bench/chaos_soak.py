"""Loop the chaos tests (``python -m bench.chaos_soak``): each run a pytest process of its own
with a fresh seed, ``--loops`` side by side; per test the runs passed, the seeds that failed and
every counter summed (``chaos_soak.json``). Also renders the chaos tests' ``chaos.json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .common import REPO_ROOT, arguments, machine_info, write_results
from .render import Charts, Lines, md_table

DEFAULT_TESTS = (
    "tests/chaos/test_network_faults.py::test_cuts_stalls_fragments_and_malformed_frames_during_ingest",
    "tests/chaos/test_source_kills.py@3",
    "tests/chaos/test_driver_failover.py@3",
)
"""``@RUNS`` after a test sets its own number of runs (else ``--runs``)."""


def run_once(test: str, results: Path) -> dict[str, Any]:
    """One pytest process on ``test``: whether it passed, and its tally (with its seed)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        cwd=REPO_ROOT, env={**os.environ, "CHAOS_RESULTS": str(results)}, capture_output=True,
        text=True, timeout=1800.0, check=False,
    )  # fmt: skip
    tally = json.loads(results.read_text()) if results.exists() else {}
    return {"passed": done.returncode == 0, "tally": tally, "tail": done.stdout[-2000:]}


def add_up(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one test, added up: counters summed, failed runs' seeds listed."""
    counters: dict[str, int] = {}
    for run in runs:
        for key, value in run["tally"].items():
            if isinstance(value, int) and not isinstance(value, bool) and key != "seed":
                counters[key] = counters.get(key, 0) + value
    return {
        "runs": len(runs),
        "passed": sum(1 for run in runs if run["passed"]),
        "failed_seeds": [run["tally"].get("seed") for run in runs if not run["passed"]],
        "counters": counters,
    }


def soak_one(test: str, runs: int, loops: int, workdir: Path) -> list[dict[str, Any]]:
    """``runs`` runs of ``test``, ``loops`` at a time."""
    results: list[dict[str, Any]] = []
    lock = threading.Lock()
    numbers = iter(range(runs))

    def loop() -> None:
        while True:
            with lock:
                number = next(numbers, None)
            if number is None:
                return
            result = run_once(test, workdir / f"run-{number}.json")
            with lock:
                results.append(result)
                done = len(results)
            state = "passed" if result["passed"] else "FAILED"
            print(f"{test}: run {done}/{runs} {state}", flush=True)

    threads = [threading.Thread(target=loop) for _ in range(loops)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments("chaos_soak", __doc__)
    parser.add_argument("--runs", type=int, default=20, help="runs per test (unless @RUNS)")
    parser.add_argument("--loops", type=int, default=1, help="runs side by side")
    parser.add_argument("--test", action="append", help="a chaos test[@RUNS] (repeatable)")
    args = parser.parse_args(argv)
    tests: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="chaos-soak-") as tmp:
        for index, spec in enumerate(args.test or DEFAULT_TESTS):
            test, _, own = spec.partition("@")
            (Path(tmp) / str(index)).mkdir()
            runs = soak_one(
                test, int(own) if own else args.runs, args.loops, Path(tmp) / str(index)
            )
            tests[test] = add_up(runs)
    data = {"tests": tests, "loops": args.loops, "machine": machine_info()}
    path = write_results("chaos_soak", data, args.output)
    failed = sum(t["runs"] - t["passed"] for t in data["tests"].values())
    print(f"wrote {path}; {failed} run(s) failed")
    return 1 if failed else 0


SOAK_FAULTS = (
    ("connection_cuts", "cuts"), ("stalls", "stalls"),
    ("malformed_frames_sent", "malformed frames"),
    ("no_connack_connections", "no-CONNACK connections"),
    ("source_process_kills", "source kill -9"), ("driver_kills", "driver kills"),
    ("broker_restarts", "broker restarts"),
)  # fmt: skip


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Per test: runs, messages per QoS, faults, lost and extra rows."""
    rows = []
    for test, entry in data["tests"].items():
        c = entry["counters"]
        faults = ", ".join(f"{c[k]:,} {label}" for k, label in SOAK_FAULTS if c.get(k))
        rows.append([
            f"`{test.split('::')[-1]}`", f"{entry['passed']}/{entry['runs']}",
            f"{c.get('qos1_published', 0):,} / {c.get('qos2_published', 0):,}", faults or "—",
            f"{c.get('qos1_lost', 0) + c.get('qos2_lost', 0):,}",
            f"{c.get('qos2_extra_rows', 0):,}", f"{c.get('qos1_extra_rows', 0):,}",
        ])  # fmt: skip
    out = md_table(
        ["test", "runs passed", "published QoS 1 / 2", "faults", "lost", "QoS 2 extra rows",
         "QoS 1 extra rows"],
        rows,
    )  # fmt: skip
    failed = {t: e["failed_seeds"] for t, e in data["tests"].items() if e["failed_seeds"]}
    notes = [
        f"{data.get('loops', 1)} loop(s) side by side. QoS 1 extra rows are broker resends "
        "(DUP=1) of messages whose PUBACK a fault kept from the broker: at least once, each "
        "counted by the receiver (docs/delivery.md); QoS 2 must have none.",
    ]
    if failed:
        notes.append(f"Failed runs (replay with CHAOS_SEED): {json.dumps(failed)}")
    return [*out, "", *notes]


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts as (dotted key, value) pairs."""
    if isinstance(data, Mapping):
        items: list[tuple[str, Any]] = []
        for key, value in data.items():
            items += _flatten(value, f"{prefix}{key}.")
        return items
    return [(prefix.rstrip("."), data)]


def section_chaos(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Whatever counters the chaos tests wrote to ``chaos.json``, nested dicts flattened."""
    counters = _flatten({k: v for k, v in data.items() if k != "machine"})
    rows = [
        [f"`{k}`", json.dumps(v) if isinstance(v, list | dict) else str(v)] for k, v in counters
    ]
    return md_table(["counter", "value"], rows)


if __name__ == "__main__":
    raise SystemExit(main())
