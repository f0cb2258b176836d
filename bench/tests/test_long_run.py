"""bench.long_run's bookkeeping: the log tally, store growth and the goals, on made-up figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.long_run import LogTally, goals, growth, quarter_rates, section
from bench.render import Charts


def commit(
    table: Path, version: int, operation: str, adds: dict[str, int], removes: tuple[str, ...] = ()
) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    actions: list[dict[str, Any]] = [{"commitInfo": {"operation": operation}}]
    actions += [{"txn": {"appId": "q", "version": version}}] if operation == "WRITE" else []
    stats = json.dumps({"numRecords": 3})
    actions += [{"add": {"path": p, "size": s, "stats": stats}} for p, s in adds.items()]
    actions += [{"remove": {"path": p}} for p in removes]
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def test_the_tally_splits_stream_bytes_from_maintenance_bytes(tmp_path: Path) -> None:
    tally = LogTally(tmp_path)
    commit(tmp_path, 0, "WRITE", {"a": 10})
    commit(tmp_path, 1, "WRITE", {"b": 20})
    tally.catch_up()
    assert (tally.version, tally.ingested_bytes, len(tally.live), tally.rows) == (1, 30, 2, 6)
    commit(tmp_path, 2, "OPTIMIZE", {"c": 28}, removes=("a", "b"))
    tally.catch_up()
    assert tally.live == {"c": 28} and tally.maintenance_bytes == 28
    assert tally.operations == {"WRITE": 2, "OPTIMIZE": 1} and tally.batches == 2


def test_growth_is_measured_over_the_last_half_by_peaks() -> None:
    flat = [{"t": t, "fds": 100 + (t % 2)} for t in range(10)]
    rising = [{"t": t, "fds": 100 + 10 * t} for t in range(10)]
    grew = growth(flat, "fds")
    assert grew is not None and grew < 0.02
    grew = growth(rising, "fds")
    assert grew is not None and grew > 0.3  # 140 at half time, 190 at the end
    assert growth(flat[:3], "fds") is None and growth(flat, "threads") is None


def result(files: int, amplification: float) -> dict[str, Any]:
    reads = [{"spark_full": 1.0, "spark_filtered": 0.5, "delta_rs_full": 0.2,
              "delta_rs_filtered": 0.1, "rows": 6000}]  # fmt: skip
    samples = [
        {"t": 60.0 * t, "batches": 10 * t, "live_files": files, "disk_files": files,
         "live_bytes": 1 << 20, "ingested_bytes": 1000, "rows": 100 * t, "log_files": t, "fds": 50,
         "maintenance_bytes": int(1000 * amplification), "threads": 40}
        for t in range(1, 6)
    ]  # fmt: skip
    job = {"samples": samples, "reads": reads, "final_reads": reads, "operations": {}}
    return {
        "parameters": {"minutes": 5, "trigger_ms": 200, "rate": 20, "size": 64, "topics": 4,
                       "target_bytes": 128 << 20, "small_files": 50, "configs": {}},
        "seconds": 300.0,
        "jobs": {"none": {**job, "samples": [{**s, "live_files": 500} for s in samples]},
                 "default": job},
        "optimized_reads": reads,
    }  # fmt: skip


def test_goals_hold_for_a_compacted_table_and_fail_for_too_many_files() -> None:
    good = goals(result(files=20, amplification=2.5))
    assert all(goal["met"] for goal in good.values()), good
    assert "default: live data files / (bytes / target + tail)" in good
    bad = goals(result(files=80, amplification=5.0))
    missed = {name for name, goal in bad.items() if not goal["met"]}
    assert missed == {
        "default: live data files / (bytes / target + tail)",
        "default: maintenance bytes / ingested bytes",
    }


def test_the_section_renders_every_job() -> None:
    data = result(files=20, amplification=2.5)
    data["goals"] = goals(data)
    text = "\n".join(section(data, Charts(None)))
    assert "| none |" in text and "| default |" in text and "OPTIMIZEd copy" in text


def test_a_run_of_one_job_has_a_chart_and_a_batch_count_of_its_own() -> None:
    data = result(files=20, amplification=2.5)
    data["jobs"] = {"default": data["jobs"]["default"]}
    data["goals"] = goals(data)
    text = "\n".join(section(data, Charts(None)))
    assert text.startswith("One ingest job (default) alone for 5.0 minutes")
    assert "| default |" in text and "| none |" not in text
    assert "Batches: 50, fewer than the 10,000" in text and "a batch took 6.00 s" in text
    data["jobs"]["default"]["samples"][-1]["batches"] = 12_000
    assert "Batches: 12,000, at least the 10,000" in "\n".join(section(data, Charts(None)))


def test_a_falling_batch_rate_and_a_growing_kept_log_miss_their_goals() -> None:
    data = result(files=20, amplification=2.5)
    job = data["jobs"]["default"]
    batches = [0, 10, 20, 30, 40, 50, 60, 70, 80, 85, 90, 95, 100]  # slower in the last quarter
    job["samples"] = [{**job["samples"][0], "t": 60.0 * t, "batches": b, "log_files": 100 + b}
                      for t, b in enumerate(batches)]  # fmt: skip
    assert quarter_rates(job["samples"]) == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 12])
    assert quarter_rates(job["samples"][:7]) == []
    rate = "default: batches a second, last quarter / second quarter's"
    log = "default: log_files growth, last half"
    found = goals(data)
    assert not found[rate]["met"] and found[rate]["measured"] == 0.5
    assert log not in found  # a week's log is meant to grow through an hour
    data["parameters"]["log_retention_hours"] = 0.1
    assert not goals(data)[log]["met"]  # 150 at half time, 200 at the end
