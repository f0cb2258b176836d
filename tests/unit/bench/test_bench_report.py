"""The benchmark report generator on small results files made here: tables, charts, and the
sections of missing, malformed and optional (chaos) results."""

from __future__ import annotations

import json
from collections.abc import Mapping
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


def _generate(tmp_path: Path, files: Mapping[str, object]) -> tuple[str, Path]:
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


HEADLINE = "first batch -> last commit"
RECEIVER = "receiver: first -> last WAL append"


def _ingest_peer(rate: float, receiver: float, batches: list[int], cpu: dict) -> dict:
    """A Spark peer of an ingest run with S3 peers: one run of ``sum(batches)`` rows."""
    run = {
        "rows": sum(batches),
        "batches": [{"id": i, "rows": n} for i, n in enumerate(batches)],
        "cpu_seconds": {**cpu, "bench: this CPU sampler": 0.1, "not ours (other processes)": 3.0},
        "max_inflight_messages": 20,
    }
    return {"rates": {HEADLINE: _stats(rate), RECEIVER: _stats(receiver)}, "runs": [run]}


def _ratio_goal(name: str, qos: int, measured: float, target: float = 0.5) -> dict:
    met = measured >= target
    return {"ratio": name, "qos": qos, "max_inflight_messages": 20, "target": target,
            "measured": measured, "met": met}  # fmt: skip


def _appends(rate: float, per_append: float, most: int, *, live: bool = False) -> dict:
    run = {
        "live": live, "messages": 20_000 if live else 100_000, "rate": rate, "appends": 30,
        "appends_of_releases_only": 0, "share_of_time_in_appends": 0.5,
        "messages_per_append": {"median": per_append, "p90": most, "max": most},
        "append_ms": {"median": 2.5, "p90": 6.25},
    }  # fmt: skip
    return {"rate": _stats(rate), "runs": [run]}


def _ingest_s3(share: float = 0.2) -> dict:
    """``ingest_s3.json``: QoS 1 (100,000) and QoS 2 (60,000), window 20, an append profile.
    CPU per 100,000 messages of the pipeline: 1.0 and 2.0 (QoS 1), 2.0 and 4.0 (QoS 2)."""
    runner, jvm = "python: source runner (receiver, offsets, partitions)", "jvm: task threads"
    qos2_s3 = _appends(20_000, 872, 4_471)
    qos2_s3["runs"][0].update(appends=623, appends_of_releases_only=547)
    return {
        "machine": {**MACHINE, "s3_server": "s3proxy-4.1.0"},
        "parameters": {
            "messages_per_qos": {"1": 100_000, "2": 60_000},
            "payload_bytes": 100,
            "repeat": 1,
            "master": "local[2]",
            "trigger": "processingTime=0 seconds",
            "max_inflight_messages": [20],
            "s3_modes": ["wal"],
            "source_options": [],
            "publish_inflight": 20,
        },
        "other_processes_cpu_share": share,
        "peers": {
            "ours-wal": _ingest_peer(100_000, 300_000, [100_000], {runner: 0.5, jvm: 0.5}),
            "ours-s3": _ingest_peer(
                60_000,
                100_000,
                [80_000, 20_000],
                {runner: 0.6, jvm: 0.5, "other descendants": 0.9},
            ),
            "ours-wal-qos2": _ingest_peer(60_000, 200_000, [60_000], {runner: 0.6, jvm: 0.6}),
            "ours-s3-qos2": _ingest_peer(
                30_000, 150_000, [60_000], {runner: 0.9, jvm: 0.6, "other descendants": 0.9}
            ),
        },
        "ratios": {
            "ours-s3/ours-wal": {
                "median": 0.6,
                "min": 0.55,
                "max": 1.19,
                "runs": [0.55, 0.6, 1.19],
            },
            "ours-s3-qos2/ours-wal-qos2": {
                "median": 0.498,
                "min": 0.455,
                "max": 0.59,
                "runs": [0.59, 0.455, 0.498],
            },
        },
        "goal": {
            "ours-s3/ours-wal": _ratio_goal("ours-s3/ours-wal", 1, 0.6),
            "ours-s3-qos2/ours-wal-qos2": _ratio_goal("ours-s3-qos2/ours-wal-qos2", 2, 0.498),
        },
        "cpu_seconds_per_100k_messages": {
            "ours-wal": {runner: 0.5, "other descendants": 0.0},
            "ours-s3": {runner: 0.6, "other descendants": 0.9, "python: task workers (read)": 0.2},
            "ours-wal-qos2": {runner: 1.0, "other descendants": 0.0},
            "ours-s3-qos2": {runner: 1.5, "other descendants": 1.5},
        },
        "receiver_appends": {
            "ours-wal": _appends(117_403, 3_025, 7_544),
            "ours-s3": _appends(126_894, 7_543, 7_544),
            "ours-s3-qos2": qos2_s3,
            "ours-wal (live)": _appends(16_814, 45, 1_803, live=True),
        },
    }


def _wal_throughput() -> dict:
    def row(batch: int, layout: str, ms: float, rate: float) -> dict:
        return {"batch": batch, "layout": layout, "append_ms_median": ms,
                "append_ms_p90": ms * 2, "records_per_s": _stats(rate),
                "cpu_ms_per_append": ms / 2}  # fmt: skip

    return {
        "machine": {**MACHINE, "pyarrow": "26.0.1"},
        "parameters": {
            "payload_bytes": 100,
            "max_appends": 200,
            "files_fsync": True,
            "order": "layouts in turns",
        },
        "rows": [
            row(20, "files", 0.28, 70_000),
            row(20, "objects-s3", 2.18, 5_000),
            row(7_000, "files", 7.36, 785_000),
            row(7_000, "objects-s3", 19.63, 300_000),
        ],
        "ratios": {
            "objects-s3/files, 20 records per append": {
                "median": 0.07,
                "min": 0.07,
                "max": 0.08,
                "runs": [0.07, 0.08],
            },
            "objects-s3/files, 7,000 records per append": _stats(0.4),
        },
    }


def _subsection(section: str, title: str) -> str:
    return section.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0]


def test_the_wal_on_object_storage_section_renders_each_run(tmp_path: Path) -> None:
    text, _ = _generate(tmp_path, {"ingest_s3": _ingest_s3(), "wal_throughput": _wal_throughput()})
    section = _section(text, "WAL on object storage")
    assert "s3proxy 4.1.0 from `devtools/s3_server.py`" in section
    assert "at ≥ 0.5x the rate of the same query with a local WAL" in section
    into = _subsection(section, "Into Delta: QoS 1 and 2, broker windows 20 and unbounded")
    assert "--append-profile --output bench/results/ingest_s3.json" in into
    assert "*Run:* Test CPU, 2 cores" in into and "s3proxy 4.1.0" in into
    assert "Backlogs of 100,000 QoS 1 and 60,000 QoS 2 messages" in into
    assert "took 20% of the machine's CPU" in into
    assert (
        "| ours-s3 | 60,000 | 54,000 | 66,000 | 100,000 | 0.55x, 0.60x, 1.19x | 0.60x | "
        "0.600 ≥ 0.5: met |"
    ) in into
    assert "| 0.59x, 0.46x, 0.50x | 0.50x | 0.498 < 0.5: **not met** |" in into
    assert "| ours-wal | 100,000 | 90,000 | 110,000 | 300,000 |  |  |  |" in into
    assert "landed in one micro-batch: ours-wal 1 of 1, ours-s3 0 of 1" in into
    assert "| ours-s3 | 80,000 + 20,000 |" in into
    # components from cpu_seconds_per_100k_messages; the total summed from the run, without
    # the sampler and other processes
    assert "| ours-s3 | 0.90 | 0.60 | 0.20 | 2.00 |" in into
    assert "| ours-s3-qos2 | 1.50 | 1.50 | 0.00 | 4.00 |" in into
    alone = _subsection(section, "The receiver alone: messages and milliseconds per append")
    assert "*Run:*" not in alone and "→ `bench/results" not in alone
    assert "and 20,000 messages sent by a publisher" in alone
    assert "one socket read held up to 7,544 messages of a backlog and up to 1,803 of a live" in (
        alone
    )
    assert "| ours-s3 | 126,894 | 30 | 0 | 7,543 | 7,544 | 2.50 | 6.25 | 50% |" in alone
    assert "| ours-s3-qos2 | 20,000 | 623 | 547 | 872 |" in alone
    layouts = _subsection(section, "One append per layout")
    assert "pyarrow 26.0.1" in layouts and "`files` (a local directory, fsync per append)" in (
        layouts
    )
    assert (
        "| 20 | objects-s3 | 2.18 | 4.36 | 5,000 | 4,500 | 5,500 | 1.09 | 0.07x, 0.08x | 0.07x |"
    ) in layouts
    assert "| 20 | files | 0.28 | 0.56 | 70,000 |" in layouts
    for missing in ("partitionData wal and inline, window 20", "A long QoS 1 backlog"):
        assert "*Not run: no results file.*" in _subsection(section, missing)


def test_what_limits_the_s3_peer_reads_every_run(tmp_path: Path) -> None:
    inline = _ingest_s3(share=0.0)
    inline["ratios"] = {
        "ours-s3/ours-wal": _stats(0.84), "ours-s3-inline/ours-wal": _stats(0.73),
        "ours-s3-qos2/ours-wal-qos2": _stats(0.61),
        "ours-s3-inline-qos2/ours-wal-qos2": _stats(0.64),
    }  # fmt: skip
    inline["goal"] = {name: _ratio_goal(name, 2 if "qos2" in name else 1, r["median"])
                      for name, r in inline["ratios"].items()}  # fmt: skip
    inline["cpu_seconds_per_100k_messages"]["ours-s3"]["other descendants"] = 0.46
    inline["cpu_seconds_per_100k_messages"]["ours-s3-qos2"]["other descendants"] = 1.38
    files = {
        "ingest_s3": _ingest_s3(),
        "ingest_s3_inline": inline,
        "ingest_s3_busy": {**_ingest_s3(share=0.65), "receiver_appends": None},
        "wal_throughput": _wal_throughput(),
    }
    text, _ = _generate(tmp_path, files)
    limits = _subsection(_section(text, "WAL on object storage"), "What limits the S3 peer")
    assert (
        "One PUT to the server on loopback took 2.18 ms for 20 records and 19.63 ms for 7,000, "
        "against 0.28 and 7.36 ms for a local append with fsync."
    ) in limits
    assert "the reads grow to fill the time: the S3 receiver stored 7,543 messages per" in limits
    assert "stored 126,894 against 117,403 msg/s at window 20." in limits
    assert "at most 5,000 records/s on loopback, the rate of 20-record appends (0.07x" in limits
    assert "stored 100,000 messages at 100,000 msg/s against 300,000, so in 1 of 1 runs the " in (
        limits
    )
    assert "first micro-batch took 80,000 of them instead of all" in limits
    assert "547 of the 623 appends of a 100,000-message QoS 2 drain" in limits
    assert "went from 2.00 to 4.00 s (s3proxy 1.50 s, the source runner +0.50 s)" in limits
    assert "the rate ratio followed the CPU ratio (0.50x measured, 2.00/4.00 = 0.50)" in limits
    # the S3 server's CPU over the S3 peers of every run (the local peers' 0.00 left out)
    assert "0.46 (ours-s3, `ingest_s3_inline.json`) to 1.50 (ours-s3-qos2, `ingest_s3.json`)" in (
        limits
    )
    assert "**Not the tasks' reads.**" in limits and "was no faster" in limits
    assert "0.73x against 0.84x at QoS 1, 0.64x against 0.61x at QoS 2" in limits
    assert "The same parameters as *Into Delta* on a busier machine" in limits
    assert "took 65% of the CPU) gave 0.60x, 0.50x: both peers were starved alike" in limits
    busy = _subsection(_section(text, "WAL on object storage"), "On a busy machine")
    assert "| ours-s3 | 60,000 |" in busy and "CPU seconds per 100,000" not in busy


def test_the_wal_on_object_storage_section_without_results(tmp_path: Path) -> None:
    text, _ = _generate(tmp_path, {})
    section = _section(text, "WAL on object storage")
    alone = _subsection(section, "The receiver alone: messages and milliseconds per append")
    assert "*Not run: no results file.*" in alone
    assert "*Not rendered: no results of the WAL on object storage.*" in section
    ingest = _ingest_s3()
    ingest["peers"]["ours-s3"]["rates"] = {}
    (tmp_path / "odd").mkdir()
    text, _ = _generate(tmp_path / "odd", {"ingest_s3": ingest})
    into = _section(text, "WAL on object storage").split("### The receiver alone", 1)[0]
    assert "unexpected shape" in into


def _shared_subscription(rows_per_job: list[list[int]]) -> dict:
    return {
        "machine": MACHINE,
        "load_average_1min": [2.0, 3.25],
        "messages": 20_000, "payload_bytes": 100, "qos": 1, "jobs": 2,
        "trigger": "processing-time=500 milliseconds",
        "rate_one": _stats(4_600.0), "rate_many": _stats(3_200.0),
        "publish_rate_one": _stats(34_000.0), "publish_rate_many": _stats(5_000.0),
        "rows_per_job_many": rows_per_job,
        "ratio": {"median": 0.696, "min": 0.441, "max": 0.883, "runs": [0.696, 0.441]},
    }  # fmt: skip


def test_the_shared_subscription_section(tmp_path: Path) -> None:
    data = _shared_subscription([[10_000, 10_000], [12_500, -1]])
    text, _ = _generate(tmp_path, {"shared_subscription": data})
    section = _section(text, "Shared subscription")
    assert "`python -m bench.shared_subscription --messages 20000 --rounds 3`" in section
    assert "20,000 QoS 1 messages of 100 bytes" in section
    assert "alternate for 2 rounds" in section
    assert "shared its 2 cores" in section and "not how they scale over machines" in section
    assert "at each round's start: 2.00, 3.25." in section
    assert "| 1 | 4,600 | 4,140 | 5,060 | 34,000 |" in section
    assert "| 2 | 3,200 | 2,880 | 3,520 | 5,000 |" in section
    assert "2 jobs / 1 job: 0.70x (per round 0.70x, 0.44x)." in section
    assert "only 1.6 times as fast as the rows landed: it may be the limit." in section
    assert "| 0 | 10,000 | 10,000 | 20,000 |" in section
    assert "| 1 | 12,500 | — | — |" in section  # a job whose summary line was not found
