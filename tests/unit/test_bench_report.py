"""The benchmark report generator on small results files made here: tables, charts, and the
sections of missing, malformed and optional (chaos) results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import report
from bench.latency import parse_payload, payload, quantile

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MACHINE = {
    "cpu_model": "Test CPU",
    "cores": 2,
    "platform": "Linux",
    "python": "CPython 3.11",
    "mosquitto": "2.0.11",
    "paho_mqtt": "2.2.0",
    "git_revision": "abc1234",
    "date": "2026-01-01T00:00:00+00:00",
    "load_average_at_start": [0.5, 0.25, 0.125],
}


def _stats(median: float) -> dict:
    return {"median": median, "min": median * 0.9, "max": median * 1.1, "runs": [median]}


def _latency() -> dict:
    run = {
        "rate": 10_000,
        "trigger": "500 milliseconds",
        "publisher": {"achieved_rate": 9_990.0},
        "measured_rows": 550_000,
        "latency_seconds": {"p50": 0.61, "p95": 1.2, "p99": 1.734, "max": 2.1, "min": 0.2},
        "cdf": [[0, 0.2], [50, 0.61], [99, 1.734], [100, 2.1]],
        "rows_per_commit_median": 5_000,
        "batch_duration_ms": {"p50": 420, "max": 900, "batches": 120},
        "table_checkpoint_interval": 1000,
    }
    return {
        "machine": MACHINE,
        "parameters": {"duration_seconds": 60, "warmup_seconds": 5, "payload_bytes": 100},
        "clock": "send -> commit seen",
        "runs": [
            run,
            {
                **run,
                "table_checkpoint_interval": 10,
                "latency_seconds": {"p50": 0.6, "p95": 1.9, "p99": 2.5, "max": 3.0, "min": 0.2},
            },
        ],
        "goal": {
            "rate": 10_000,
            "trigger": "500 milliseconds",
            "p99_seconds": 2.0,
            "p99_measured_seconds": 1.734,
            "met": True,
            "with_other_checkpoint_interval": {
                "table_checkpoint_interval": 10,
                "p99_measured_seconds": 2.5,
                "met": False,
            },
        },
    }


def _sweep_row(rate: float, rss: int) -> dict:
    return {
        "messages": 1000,
        "rate": _stats(rate),
        "mb_per_s": rate / 10_000,
        "peak_rss_kib": rss,
    }


def _scale() -> dict:
    by_size = {
        str(size): {
            "ours": {**_sweep_row(200_000 / (i + 1), 26_000), "in_process_rate": 250_000.0},
            "paho": _sweep_row(40_000 / (i + 1), 25_000),
            "mosquitto_sub": _sweep_row(90_000 / (i + 1), 3_600),
            "ours/paho": 5.0,
            "ours/mosquitto_sub": 2.22,
        }
        for i, size in enumerate((10, 100, 65_536))
    }
    by_topics = {
        str(k): {"ours": _sweep_row(150_000, 26_000), "ours/paho": 3.5} for k in (1, 100_000)
    }
    backlog = [
        {
            "backlog": n,
            "waiting": where,
            "stored_in_wal": n if where == "wal" else 10_000,
            "waiting_at_broker": 0 if where == "wal" else n - 10_000,
            "store_rate": 100_000 if where == "wal" else None,
            "baseline_rss_kib": 64_000,
            "peak_rss_kib": 66_000,
            "rss_growth_kib": 2_000,
        }
        for n in (10_000, 1_000_000)
        for where in ("broker", "wal")
    ]
    return {
        "machine": MACHINE,
        "payload": {"by_payload_bytes": by_size},
        "topics": {"by_topics": by_topics},
        "backlog": {
            "parameters": {"bound_when_waiting_at_broker": 10_000},
            "points": backlog,
            "skipped": [{"backlog": 10_000_000, "reason": "estimated 900 s > 300 s left"}],
            "largest_reached": 1_000_000,
        },
    }


def _write(directory: Path, name: str, data: object) -> None:
    (directory / f"{name}.json").write_text(json.dumps(data))


def _generate(tmp_path: Path, files: dict[str, object]) -> tuple[str, Path]:
    results = tmp_path / "results"
    results.mkdir()
    for name, data in files.items():
        _write(results, name, data)
    output = tmp_path / "out" / "REPORT.md"
    assert report.main(["--results", str(results), "--output", str(output)]) == 0
    return output.read_text(), output.parent


def _section(text: str, title: str) -> str:
    body = text.split(f"\n## {title}\n", 1)[1]
    return body.split("\n## ", 1)[0]


def test_report_tables_charts_and_chaos(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    text, out = _generate(
        tmp_path,
        {
            "latency": _latency(),
            "scale": _scale(),
            "drain": {"machine": MACHINE, "peers": "not a dict of peers"},
            "chaos": {"machine": MACHINE, "runs": 12, "faults": {"broker_killed": 4, "lost": 0}},
        },
    )
    assert "Test CPU, 2 cores" in _section(text, "Machine")
    latency = _section(text, "Latency")
    row = "| 10,000 | 500 milliseconds | {} | 9,990 | 550,000 | {} |"
    assert row.format("1,000", "0.610 | 1.200 | 1.734 | 2.100") in latency
    assert row.format(10, "0.600 | 1.900 | 2.500 | 3.000") in latency
    assert "trigger 500 milliseconds | ≤ 2.0 s | 1.734 s | met |" in latency
    assert "trigger 500 milliseconds, table interval 10 | ≤ 2.0 s | 2.500 s | **not met** |" in (
        latency
    )
    scale = _section(text, "Scale of cost")
    assert "| 65,536 | ours | 1,000 | 66,667 | 250,000 |" in scale
    assert "| 1,000,000 | wal | 1,000,000 | 0 | 100,000 | 62.5 | 64.5 | 2.0 |" in scale
    assert "Skipped 10,000,000: estimated 900 s > 300 s left." in scale
    chaos = _section(text, "Chaos")
    assert "| `faults.broker_killed` | 4 |" in chaos and "| `runs` | 12 |" in chaos
    assert "unexpected shape" in _section(text, "Drain")
    assert "Not run" in _section(text, "Codec")
    charts = ("latency_cdf", "throughput_vs_payload", "topics_scale", "rss_vs_backlog")
    for name in charts:
        png = out / "charts" / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC, name
        assert f"](charts/{name}.png)" in text


def test_report_without_chaos_or_any_results(tmp_path: Path) -> None:
    text, out = _generate(tmp_path, {})
    for title in ("Codec", "Drain", "Latency", "Scale of cost", "Chaos"):
        assert "*Not run: no results file.*" in _section(text, title)
    assert not (out / "charts").exists()


def test_latency_payload_and_percentiles() -> None:
    data = payload(42, 1_700_000_000_123_456_789, 100)
    assert len(data) == 100
    assert parse_payload(data) == (42, 1_700_000_000_123_456_789)
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0) == 1.0
    assert quantile(values, 50) == pytest.approx(50.5)
    assert quantile(values, 99) == pytest.approx(99.01)
    assert quantile(values, 100) == 100.0


def test_the_latency_bench_names_the_job_s_table_interval() -> None:
    """bench.latency keeps a copy of the job's interval for created tables (decision 23)."""
    from bench.latency import JOB_CHECKPOINT_INTERVAL, run_label
    from streaming_jobs.batch_writer import CREATED_TABLE_CHECKPOINT_INTERVAL

    assert JOB_CHECKPOINT_INTERVAL == CREATED_TABLE_CHECKPOINT_INTERVAL
    run = {"rate": 10_000, "trigger": "500 milliseconds"}
    assert run_label({**run, "table_checkpoint_interval": JOB_CHECKPOINT_INTERVAL}) == (
        "10,000 msg/s, 500 milliseconds"
    )
    assert run_label({**run, "table_checkpoint_interval": 10}).endswith(", table interval 10")


def test_the_qos_2_drain_has_its_own_table(tmp_path: Path) -> None:
    complete, process = "connect -> exchanges complete", "process start -> exit"
    qos2 = {
        "machine": MACHINE,
        "parameters": {"messages": 60_000, "qos": 2, "payload_bytes": 100, "repeat": 3},
        "clocks": {complete: "until every PUBCOMP", process: "wall time"},
        "peers": {
            "ours": {"rates": {complete: _stats(30_000), process: _stats(20_000)}},
            "mosquitto_sub": {"rates": {process: _stats(10_000)}},
        },
        "ratios": {"ours/mosquitto_sub, process start -> exit": _stats(2.0)},
        "goals": {},
        "goals_note": "no goals at QoS 2",
    }
    text, _ = _generate(tmp_path, {"drain_qos2": qos2})
    section = _section(text, "Drain, QoS 2")
    assert "until every exchange was complete" in section
    assert f"| ours | {complete} | 30,000 | 27,000 | 33,000 |" in section
    assert f"| ours | {process} | 20,000 | 18,000 | 22,000 |" in section
    assert f"| mosquitto_sub | {process} | 10,000 | 9,000 | 11,000 |" in section
    assert f"| mosquitto_sub | {complete} |" not in section
    assert "| ours/mosquitto_sub, process start -> exit | 2.00x |" in section
    assert "*no goals at QoS 2.*" in section
    assert "Not run" in _section(text, "Drain")  # the QoS 1 drain keeps its own section


def test_the_ingest_section_states_the_warm_up_and_its_rates(tmp_path: Path) -> None:
    peer = {"rates": {"first batch -> last commit": _stats(65_000.0)}, "runs": []}
    ingest = {
        "machine": MACHINE,
        "parameters": {
            "qos": [2],
            "messages_per_qos": {"2": 60_000},
            "warmup": "10 unmeasured rounds, every Spark peer once at the measured size",
        },
        "peers": {"ours-wal-qos2": {**peer, "warmup_rates": [35_357, 60_852]}, "paho": peer},
    }
    text, _ = _generate(tmp_path, {"ingest": ingest})
    section = _section(text, "Ingest into Delta")
    assert (
        "Warm-up: 10 unmeasured rounds, every Spark peer once at the measured size; their "
        "rates, msg/s, the first being the JVM's first query: ours-wal-qos2 35,357, 60,852."
    ) in section


def _reconnect_setting(qos: int, inflight: int, duplicates: int, withheld: int) -> dict:
    """A setting of ``reconnect.json``; its runs are listed out of order (repetition 1 first)."""
    name = f"qos{qos}-inflight{inflight or '-unbounded'}"
    run = {
        "setting": name, "qos": qos, "max_inflight_messages": inflight,
        "stored_at_cut": 6_000, "stored_on_first_connection": 14_525,
        "stored_total": 20_000 + duplicates, "duplicates": duplicates,
        "possible_duplicates": duplicates, "duplicates_dropped": withheld,
    }  # fmt: skip
    order = 2 * (inflight == 0)
    return {
        "qos": qos,
        "max_inflight_messages": inflight,
        "summary": {
            "runs": 2,
            "lost": 0,
            "counted_exactly": 2,
            "duplicates": {"median": duplicates, "min": duplicates * 0.5, "max": duplicates * 2},
            "stored_at_cut": {"median": 6_000, "min": 5_004, "max": 9_372},
            "stored_on_first_connection": {"median": 14_525, "min": 14_525, "max": 14_525},
            "possible_duplicates": {"median": duplicates, "min": duplicates, "max": duplicates},
            "duplicates_dropped": {"median": withheld, "min": withheld, "max": withheld},
        },
        "runs": [
            {**run, "repetition": 1, "sequence": 3 - order},
            {**run, "repetition": 0, "sequence": order},
        ],
    }


def test_the_reconnect_section_shows_duplicates_per_setting(tmp_path: Path) -> None:
    reconnect = {
        "machine": MACHINE,
        "parameters": {"messages": 20_000, "cut_at": 5_000, "payload_bytes": 100, "repeat": 2},
        "settings": {
            "qos1-inflight20": _reconnect_setting(1, 20, 8_000, 0),
            "qos2-inflight-unbounded": _reconnect_setting(2, 0, 0, 14_525),
        },
    }
    text, _ = _generate(tmp_path, {"reconnect": reconnect})
    section = _section(text, "Reconnect")
    assert "backlog of 20,000 numbered messages" in section
    assert "once 5,000 messages are stored" in section
    assert (
        "| 1 | 20 | 2 | 8,000 | 4,000 | 16,000 | 6,000 (5,004-9,372) | 14,525 | 8,000 | 0 | 0 |"
    ) in section
    assert (
        "| 2 | unbounded (0) | 2 | 0 | 0 | 0 | 6,000 (5,004-9,372) | 14,525 | 0 | 14,525 | 0 |"
    ) in section
    assert "count equalled the duplicates in 2 of 2 runs" in section
    per_run = section.split("Per run, in the order measured:", 1)[1]
    rows = [line for line in per_run.splitlines() if line[:4] in ("| 0 ", "| 1 ")]
    assert [row.split(" | ")[1:3] for row in rows] == [
        ["1", "20"], ["2", "unbounded (0)"], ["2", "unbounded (0)"], ["1", "20"],
    ]  # fmt: skip
    assert "| 0 | 1 | 20 | 6,000 | 14,525 | 28,000 | 8,000 | 8,000 | 0 |" in per_run


def test_the_reconnect_section_without_results_or_of_another_shape(tmp_path: Path) -> None:
    text, _ = _generate(tmp_path, {"reconnect": {"machine": MACHINE, "settings": "not a dict"}})
    assert "unexpected shape" in _section(text, "Reconnect")
    (tmp_path / "none").mkdir()
    text, _ = _generate(tmp_path / "none", {})
    assert "*Not run: no results file.*" in _section(text, "Reconnect")
