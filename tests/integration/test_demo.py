"""``python -m devtools.demo`` end to end, as ``make demo`` runs it (with fewer messages).

The demo starts its own Mosquitto, publishers and ingest job (a Spark JVM), waits until the
tables hold what was published, stops the job and writes ``report.json``. The test checks the
report against what it asked for (``--messages``, ``--devices``), and the report's counts
against the Delta tables as ``devtools.delta_log`` reads them (their log and Parquet files,
without Spark), so that neither the demo's bookkeeping nor its own reading of the tables is
taken on trust. No Spark session runs in the pytest process. The second run shows two routes
(``--routes``).

By default the demo keeps its data and ends with a few lines of PySpark that read the tables: the
test runs those lines as printed. A second run over the same data directory, with ``--clean``,
must start fresh (the check is exactly-once again, not doubled) and remove the directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from devtools.delta_log import DeltaSnapshot
from devtools.demo.fleet import STATUS_EVERY

REPO_ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 150
DEVICES = 4
DEMO_TIMEOUT = 480.0  # seconds: the demo's own deadlines (publishing, --timeout, stop) come first
READ_TIMEOUT = 180.0
LOG_TAIL = 6_000
SUBMIT_ARGS = (
    "--driver-java-options -XX:TieredStopAtLevel=1 --conf spark.ui.enabled=false "
    "--conf spark.ui.showConsoleProgress=false pyspark-shell"
)

HOW_TO_READ = "read them    with .venv/bin/python (this repository's virtualenv):"


def printed_snippet(stdout: str) -> str:
    """The PySpark lines the demo printed under HOW_TO_READ (indented by two spaces)."""
    lines = stdout.splitlines()
    assert HOW_TO_READ in lines, stdout
    snippet = []
    for line in lines[lines.index(HOW_TO_READ) + 1 :]:
        if not line.startswith("  "):
            break
        snippet.append(line[2:])
    assert 3 <= len(snippet) <= 5, snippet
    return "\n".join(snippet)


def run_demo(data_dir: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "devtools.demo",
        "--messages", str(MESSAGES), "--devices", str(DEVICES),
        "--data-dir", str(data_dir), *flags,
        "--duration", "3", "--timeout", "300",
    ]  # fmt: skip
    return subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=DEMO_TIMEOUT
    )


def tail(text: str) -> str:
    return text if len(text) <= LOG_TAIL else "[...]\n" + text[-LOG_TAIL:]


def read_tables(table: str, dead_letter: str) -> dict[str, Any]:
    """Counts from the two Delta tables, read from their logs and Parquet files by
    ``devtools.delta_log`` (neither the demo's code nor its Spark)."""
    rows = DeltaSnapshot.load(Path(table)).read().to_pylist()
    dead = DeltaSnapshot.load(Path(dead_letter)).read().to_pylist()
    typed = ("ts", "temperature", "humidity", "seq", "site", "device")
    return {
        "rows": len(rows),
        "distinct_readings": len({(r["device"], r["seq"]) for r in rows}),
        "incomplete": sum(1 for r in rows if any(r[c] is None for c in typed)),
        "per_device": dict(Counter(r["device"] for r in rows)),
        "sites": {r["device"]: r["site"] for r in rows},
        "qos": {r["device"]: r["qos"] for r in rows},
        "dead": len(dead),
        "reasons": dict(Counter(r["reason"] for r in dead)),
    }


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (the demo's data directory)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


@pytest.mark.timeout(2 * DEMO_TIMEOUT + 2 * READ_TIMEOUT + 60)
def test_demo_lands_every_published_message_once_and_reports_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = run_demo(data_dir)  # the default: the data is kept
    output = f"stdout:\n{tail(result.stdout)}\nstderr:\n{tail(result.stderr)}"
    assert result.returncode == 0, output
    assert not processes_mentioning(str(data_dir)), "the demo left its broker or job running"

    report = json.loads((data_dir / "demo" / "report.json").read_text())
    assert report["ok"] and report["problems"] == [], report["problems"]

    # What was published, against what the test asked for: every message acknowledged,
    # dealt round-robin over the devices, half of them QoS 1 and half QoS 2.
    published = report["published"]
    devices = published["devices"]
    assert published["total"] == MESSAGES
    assert sorted(devices) == [f"sensor-{i:02d}" for i in range(1, DEVICES + 1)]
    for index, name in enumerate(sorted(devices)):
        device = devices[name]
        assert device["valid"] + device["malformed"] == len(range(index, MESSAGES, DEVICES))
        assert device["qos"] == 1 + index % 2
    malformed = sum(d["malformed"] for d in devices.values())
    assert malformed == published["malformed"] >= 1
    assert published["by_qos"] == {"1": MESSAGES // 2, "2": MESSAGES // 2}

    # The demo's counts add up to what was published.
    assert report["landed"] == MESSAGES - malformed
    assert report["dead_letter"] == malformed
    assert sum(report["dead_letter_reasons"].values()) == malformed

    # The tables, read by Spark, hold exactly that: each reading once, typed, nothing lost.
    counts = read_tables(report["tables"]["telemetry"], report["tables"]["dead_letter"])
    assert counts["rows"] == report["landed"]
    assert counts["distinct_readings"] == report["landed"]
    assert counts["incomplete"] == 0
    assert counts["per_device"] == {n: d["valid"] for n, d in devices.items() if d["valid"]}
    assert counts["sites"] == {n: d["site"] for n, d in devices.items() if d["valid"]}
    assert counts["qos"] == {n: d["qos"] for n, d in devices.items() if d["valid"]}
    assert counts["dead"] == report["dead_letter"]
    assert counts["reasons"] == report["dead_letter_reasons"]

    # The printed report says the same.
    printed = dict(re.findall(r"^(published|landed|dead letter)\s+(\d+)", result.stdout, re.M))
    assert printed == {
        "published": str(MESSAGES),
        "landed": str(report["landed"]),
        "dead letter": str(report["dead_letter"]),
    }, result.stdout
    assert "match" in result.stdout and "MISMATCH" not in result.stdout

    # Kept by default, with where the tables are and PySpark that reads them, which works as
    # printed (from outside the repository, too).
    for path in (report["tables"]["telemetry"], report["tables"]["dead_letter"]):
        assert (Path(path) / "_delta_log").is_dir(), path
        assert re.search(rf"^(tables)?\s+{re.escape(path)}$", result.stdout, re.M), result.stdout
    assert "is removed now" not in result.stdout
    snippet = printed_snippet(result.stdout)
    read = subprocess.run(
        [sys.executable, "-c", snippet],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=READ_TIMEOUT,
        env={**os.environ, "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS},
    )
    assert read.returncode == 0, f"the printed snippet failed:\n{snippet}\n{tail(read.stderr)}"
    for name, count in counts["per_device"].items():
        assert re.search(rf"\b{name}\s*\|\s*{count}\s*\|", read.stdout), read.stdout
    for reason, count in counts["reasons"].items():
        assert re.search(rf"{re.escape(reason)}\s*\|\s*{count}\s*\|", read.stdout), read.stdout

    # A second run over the kept data starts fresh (each reading once again, not twice) and,
    # with --clean, removes its directory at the end. It shows two routes: the sensors'
    # status messages land as VARIANT in a table of their own, through the same job.
    again = run_demo(data_dir, "--clean", "--routes")
    output = f"stdout:\n{tail(again.stdout)}\nstderr:\n{tail(again.stderr)}"
    assert again.returncode == 0, output
    assert "previous run's data removed" in again.stdout, output
    assert "every device's readings seq 0..n-1 exactly once: yes" in again.stdout, output
    assert re.search(rf"^landed\s+{report['landed']} rows", again.stdout, re.M), output
    statuses = sum(-(-len(range(i, MESSAGES, DEVICES)) // STATUS_EVERY) for i in range(DEVICES))
    assert re.search(rf"^status\s+{statuses} rows .*VARIANT", again.stdout, re.M), output
    assert re.search(rf"^published\s+{MESSAGES + statuses} messages", again.stdout, re.M), output
    assert "is removed now" in again.stdout and HOW_TO_READ not in again.stdout, output
    assert not (data_dir / "demo").exists(), list((data_dir / "demo").rglob("*"))[:20]
    assert not processes_mentioning(str(data_dir)), "the demo left its broker or job running"
