"""Benchmark report: ``python -m bench.report [--results DIR] [--output FILE] [--charts DIR]``.

Reads the ``bench/results/*.json`` files the benchmarks wrote and writes ``bench/REPORT.md``:
the machine each run was measured on, one section per benchmark with its tables, and PNG
charts under ``bench/charts/`` (throughput against payload size for ours, paho-mqtt and
``mosquitto_sub``; the latency distribution; receiver RSS against the backlog; rate and RSS
against the number of topics). Every figure is copied from one results file, so the numbers
in a table and the ratios between them come from the same run. A missing results file leaves
its section saying so; a file of an unexpected shape is reported in its section, never fatal.
``## Chaos`` shows ``chaos.json`` (any dict of counters, nested dicts allowed) when present;
``## Reconnect`` the duplicates one dropped connection produced (``reconnect.json``).
``## WAL on object storage`` reads several files (``ingest_s3*.json``, ``wal_throughput.json``):
a subsection per run, then one that puts their figures side by side (what limits the S3 peer);
``## Shared subscription`` one ingest job against several sharing a subscription
(``shared_subscription.json``); ``## Flow control over a long round trip`` a backlog drained
over MQTT 3.1.1 and 5 through a delay proxy (``flow_control.json``); ``## Sparkplug B into
Delta`` metrics per second against raw rows of the same messages (``sparkplug.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector.options.table import markdown_cell

from .common import rate, ratio
from .cpu_sampler import NOT_THE_PIPELINE
from .latency import DELTA_CHECKPOINT_INTERVAL, run_label

log = logging.getLogger("bench.report")

BENCH_DIR = Path(__file__).resolve().parent
PEER_COLOURS = {"ours": "tab:blue", "paho": "tab:orange", "mosquitto_sub": "tab:green"}

Lines = list[str]


# ------------------------------------------------------------------------------ formatting


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> Lines:
    """A GitHub-flavoured Markdown table; columns after the first are right-aligned."""
    if not rows:
        return ["(no rows)"]
    align = ["---", *["---:"] * (len(headers) - 1)]
    out = ["| " + " | ".join(str(h) for h in headers) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(markdown_cell(str(c)) for c in row) + " |" for row in rows]
    return out


def num(value: float | None, digits: int = 0) -> str:
    """Thousands separators, ``digits`` decimals; an em dash for no value."""
    if value is None:
        return "—"
    return f"{value:,.{digits}f}"


def times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def mib(kib: float | None) -> str:
    return "—" if kib is None else f"{kib / 1024:,.1f}"


def machine_line(machine: Mapping[str, Any]) -> str:
    """One line naming the machine and software of a run."""
    parts = [
        f"{machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores",
        str(machine.get("platform", "")),
        str(machine.get("python", "")),
        f"mosquitto {machine.get('mosquitto')}",
        f"paho-mqtt {machine.get('paho_mqtt')}",
    ]
    if machine.get("pyspark"):
        parts.append(f"pyspark {machine['pyspark']}, delta-spark {machine.get('delta_spark')}")
    if machine.get("pyarrow"):
        parts.append(f"pyarrow {machine['pyarrow']}")
    if machine.get("s3_server"):
        parts.append(str(machine["s3_server"]).replace("-", " ", 1))
    parts.append(f"git {machine.get('git_revision')}, {machine.get('date')}")
    load = machine.get("load_average_at_start")
    if load:
        parts.append("load average at start " + ", ".join(f"{v:.2f}" for v in load))
    return "; ".join(p for p in parts if p)


def run_note(data: Mapping[str, Any]) -> Lines:
    machine = data.get("machine")
    return [f"*Run:* {machine_line(machine)}", ""] if isinstance(machine, Mapping) else []


def stats_cells(stats: Mapping[str, Any], digits: int = 0) -> list[str]:
    return [num(stats.get(k), digits) for k in ("median", "min", "max")]


def goal_rows(goal: Any) -> list[list[str]]:
    """Rows (goal, target, measured, met) from a goal dict or a dict of goal dicts."""
    if not isinstance(goal, Mapping):
        return []
    if "met" in goal:
        goal = {str(goal.get("ratio", "goal")): goal}
    rows = []
    for name, item in goal.items():
        if isinstance(item, Mapping) and "met" in item:
            rows.append(
                [
                    str(item.get("ratio", name)),
                    str(item.get("target")),
                    str(item.get("measured")),
                    "met" if item["met"] else "**not met**",
                ]
            )
    return rows


def ratio_rows(ratios: Any) -> list[list[str]]:
    if not isinstance(ratios, Mapping):
        return []
    return [
        [name, *(times(r.get(k)) for k in ("median", "min", "max"))]
        for name, r in ratios.items()
        if isinstance(r, Mapping)
    ]


# ------------------------------------------------------------------------------ charts


class Charts:
    """Writes PNG charts with matplotlib (Agg) into ``directory``; links relative to the
    report. Without matplotlib, charts are skipped and the report says so."""

    def __init__(self, directory: Path, report_dir: Path) -> None:
        self.directory = directory
        self.report_dir = report_dir
        self.written: list[Path] = []
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.plt = None
        else:
            self.plt = plt

    def draw(self, name: str, title: str, paint: Callable[[Any], None]) -> Lines:
        """Paint a figure with ``paint(plt)`` and return the Markdown image line."""
        if self.plt is None:
            return [f"*(chart {name}.png not drawn: matplotlib is not installed)*", ""]
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{name}.png"
        figure = self.plt.figure(figsize=(8, 4.5), dpi=100)
        try:
            paint(self.plt)
            figure.suptitle(title)
            figure.tight_layout()
            figure.savefig(path)
        finally:
            self.plt.close(figure)
        self.written.append(path)
        try:
            link = path.relative_to(self.report_dir)
        except ValueError:
            link = path
        return [f"![{title}]({link.as_posix()})", ""]


# ------------------------------------------------------------------------------ sections


def section_machine(results: Mapping[str, Any]) -> Lines:
    rows = []
    for name, data in results.items():
        machine = data.get("machine") if isinstance(data, Mapping) else None
        if not isinstance(machine, Mapping):
            continue
        load = machine.get("load_average_at_start")
        rows.append(
            [
                f"`{name}.json`",
                str(machine.get("date", "?")),
                str(machine.get("git_revision", "?")),
                f"{machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores",
                ", ".join(f"{v:.2f}" for v in load) if load else "—",
            ]
        )
    first = next(
        (d["machine"] for d in results.values() if isinstance(d, Mapping) and "machine" in d),
        None,
    )
    out = ["## Machine", ""]
    if first is not None:
        out += [f"Measured on: {machine_line(first)}.", ""]
    out += [
        "Each benchmark records the machine it ran on; every figure below is copied from one "
        "results file, and every ratio compares peers measured in that same run. The machine "
        "is shared: a high load average means noisy absolute figures (the ratios cancel much "
        "of it).",
        "",
    ]
    out += md_table(["results", "date", "git", "CPU", "load average at start"], rows)
    return [*out, ""]


def section_codec(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    out = [
        f"PUBLISH decoding in process: {num(params.get('messages'))} QoS {params.get('qos')} "
        f"frames of {params.get('payload_bytes')}-byte payloads, the same bytes for every "
        "parser; median of "
        f"{params.get('repeat')} runs.",
        "",
    ]
    rows = [
        [peer, *stats_cells(st), num(st.get("us_per_message"), 3)]
        for peer, st in data["peers"].items()
    ]
    out += [*md_table(["parser", "msg/s median", "min", "max", "µs/msg"], rows), ""]
    out += md_table(
        ["ratio vs paho-mqtt", "median", "min", "max"], ratio_rows(data.get("ratios_vs_paho"))
    )
    out += ["", *md_table(["goal", "target", "measured", "verdict"], goal_rows(data.get("goal")))]
    return out


def _peer_clock_table(data: Mapping[str, Any]) -> Lines:
    rows = []
    for peer, item in data["peers"].items():
        for clock, st in item.get("rates", {}).items():
            rows.append([peer, clock, *stats_cells(st)])
    return md_table(["peer", "clock", "msg/s median", "min", "max"], rows)


def _clock_notes(data: Mapping[str, Any]) -> Lines:
    clocks = data.get("clocks")
    if not isinstance(clocks, Mapping):
        return []
    return ["Clocks:", "", *(f"* **{k}**: {v}" for k, v in clocks.items()), ""]


def section_drain(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.drain``, QoS 1 or (``--qos 2``, finished once every exchange is complete) 2."""
    params = data.get("parameters", {})
    finish = (
        "drained by each peer until every exchange was complete (PUBREL received, PUBCOMP sent)"
        if params.get("qos") == 2
        else "drained and acknowledged by each peer"
    )
    out = [
        f"A persistent session's backlog of {num(params.get('messages'))} QoS "
        f"{params.get('qos')} messages ({params.get('payload_bytes')}-byte payloads) {finish} "
        f"on a fresh Mosquitto; median of {params.get('repeat')}.",
        "",
        *_clock_notes(data),
    ]
    out += [*_peer_clock_table(data), ""]
    out += [*md_table(["ratio", "median", "min", "max"], ratio_rows(data.get("ratios"))), ""]
    if data.get("goals_note"):
        return [*out, f"*{data['goals_note']}.*"]
    out += md_table(["goal", "target", "measured", "verdict"], goal_rows(data.get("goals")))
    return out


def section_flow_control(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.flow_control``: a backlog drained over MQTT 3.1.1 and 5, on loopback and
    through the delay proxy, from a broker that keeps an in-flight window."""
    params = data.get("parameters", {})
    rtt = params.get("rtt_ms")
    out = [
        f"A persistent session's backlog of {num(params.get('messages'))} QoS 1 messages "
        f"({params.get('payload_bytes')}-byte payloads), drained into a write-ahead log (one "
        "append with one fsync per socket read, then that read's acknowledgements; drainer "
        f"`{params.get('drainer')}`) from {params.get('broker')}: at most "
        f"{params.get('window_v311')} unacknowledged messages to a 3.1.1 client, at most its "
        f"Receive Maximum ({num(params.get('receive_maximum'))} here) to an MQTT 5 client. "
        "Straight on loopback, or through `devtools.delay_proxy` (a separate process) adding "
        f"{params.get('delay_ms_each_way'):g} ms each way ({rtt:g} ms round trip). The four "
        "arms alternate within each repetition, each with a fresh broker and backlog; median "
        f"of {params.get('repeat')}.",
        "",
        *_clock_notes(data),
    ]
    arms = list(data["arms"].values())
    # Messages per WAL append: counted by the client-wal drainer only.
    per_append = any(item.get("messages_per_append_median") for item in arms)
    rows = [
        [
            item["title"],
            *stats_cells(item["rates"]),
            num(item.get("rates_after_connack", {}).get("median")),
            *([num(item.get("messages_per_append_median"), 1)] if per_append else []),
            num(item.get("broker_peak_in_flight")),
        ]
        for item in arms
    ]
    headers = ["arm", "msg/s median", "min", "max", "from CONNACK, median"]
    headers += ["messages per append"] if per_append else []
    out += md_table([*headers, "broker's peak in flight"], rows)
    meanings = data.get("ratio_meanings", {})
    ratio_lines = [[*row, str(meanings.get(row[0], ""))] for row in ratio_rows(data.get("ratios"))]
    out += ["", *md_table(["ratio", "median", "min", "max", "what it compares"], ratio_lines)]
    cap = data.get("v311_cap", {})
    if cap.get("measured_rtt_ms") is not None:
        out += [
            "",
            f"The 3.1.1 window over the proxy allows at most {params.get('window_v311')} "
            f"messages per round trip: {num(cap.get('nominal'))} msg/s at {rtt:g} ms, "
            f"{num(cap.get('at_measured_rtt'))} msg/s at the {cap['measured_rtt_ms']:.2f} ms "
            "measured (median CONNECT -> CONNACK through the proxy before each drain).",
        ]
    out += [
        "",
        *md_table(["goal", "target", "measured", "verdict"], goal_rows(data.get("goals"))),
    ]
    return out


def section_ingest(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    levels = params.get("qos", [])
    sizes = params.get("messages_per_qos") or {
        str(q): params.get("messages") for q in (levels if isinstance(levels, list) else [levels])
    }
    backlogs = " and ".join(f"{num(n)} QoS {q}" for q, n in sizes.items())
    options = ", ".join(f"`{o}`" for o in params.get("source_options", []))
    out = [
        f"A backlog of {backlogs} messages "
        f"({params.get('payload_bytes')}-byte JSON) landed in Delta by the ingest job's query "
        f"on {params.get('master')}, trigger {params.get('trigger')}, written by "
        f"{params.get('sink')}"
        + (f", source options {options}" if options else "")
        + f"; median of {params.get('repeat')}.",
        "",
        *_warmup_notes(params.get("warmup"), data.get("peers")),
        *_clock_notes(data),
    ]
    out += [*_peer_clock_table(data), ""]
    out += [*md_table(["ratio", "median", "min", "max"], ratio_rows(data.get("ratios"))), ""]
    out += md_table(["goal", "target", "measured", "verdict"], goal_rows(data.get("goal")))
    share = data.get("other_processes_cpu_share")
    if share is not None:
        out += [
            "",
            f"Other processes and hypervisor steal took {share:.0%} of the machine's CPU "
            "during the run.",
        ]
    return out


def section_sparkplug(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.sparkplug``: a Sparkplug B backlog into Delta, a row per metric, against raw
    rows of the same messages, and the decoder alone."""
    params, peers = data.get("parameters", {}), data["peers"]
    payload = params.get("ndata_payload_bytes", {})
    kinds = ", ".join(dict.fromkeys(params.get("metric_datatypes", [])))
    options = ", ".join(f"`{o}`" for o in params.get("source_options", []))
    out = [
        f"{num(params.get('births'))} NBIRTH and {num(params.get('ndata_messages'))} "
        f"alias-only NDATA messages of {params.get('metrics')} metrics ({kinds}; "
        f"{num(payload.get('median'))}-byte payloads), queued at QoS {params.get('qos')} for "
        "the ingest job's persistent session (Sparkplug's own DATA is QoS 0, which a broker "
        f"does not queue), landed in Delta on {params.get('master')}, trigger "
        f"{params.get('trigger')}, written by {params.get('sink')}"
        + (f", source options {options}" if options else "")
        + f"; peers in turns, median of {params.get('repeat')}. `sparkplug`: "
        "`--payload-format sparkplug`, a row per metric; `raw`: the default, a row per message "
        "with the payload's bytes.",
        "",
        *_warmup_notes(params.get("warmup"), peers),
        *_clock_notes(data),
    ]
    rows = [
        [
            peer,
            *stats_cells(item["messages_per_second"]),
            num(item["rows_per_second"].get("median")),
            num(item.get("rows_per_message"), 2),
        ]
        for peer, item in peers.items()
    ]
    headers = ["peer", "msg/s median", "min", "max", "rows/s median", "rows/msg"]
    out += [*md_table(headers, rows), ""]
    reps = [
        [
            str(r["repetition"]),
            " then ".join(r["order"]),
            num(r["sparkplug"]),
            num(r["raw"]),
            times(r["ratio"]),
        ]
        for r in data.get("repetitions", [])
    ]
    out += [
        *md_table(["repetition", "order", "sparkplug msg/s", "raw msg/s", "sparkplug/raw"], reps),
        "",
        *md_table(["ratio (msg/s)", "median", "min", "max"], ratio_rows(data.get("ratios"))),
        "",
    ]
    decoder = data.get("decoder")
    if isinstance(decoder, Mapping):
        out += [
            "The decoder alone (no Spark, one Python thread) on the same "
            f"{num(decoder['messages'])} messages ({num(decoder['rows'])} rows); median of "
            f"{decoder['repeat']}: "
            "`decode_messages` is a task's decoding of its partition, `to_record_batch` its "
            "conversion to Arrow, `fold` the planner's pass over the same records.",
            "",
            *md_table(
                ["stage", "seconds", "msg/s", "metrics/s"],
                [
                    [
                        f"`{stage}`",
                        num(s["seconds"], 3),
                        num(s["messages_per_second"]),
                        num(s.get("rows_per_second")),
                    ]
                    for stage, s in decoder["stages"].items()
                ],
            ),
            "",
        ]
    cpu = data.get("cpu_seconds_per_100k_messages")
    if isinstance(cpu, Mapping) and cpu:
        components = [
            c
            for c in next(iter(cpu.values()))
            if c not in NOT_THE_PIPELINE and any(p.get(c, 0) >= 0.005 for p in cpu.values())
        ]
        out += [
            "CPU seconds per 100,000 messages while the measured batches ran (median over the "
            "repetitions, sampled from /proc):",
            "",
            *md_table(
                ["component", *cpu],
                [
                    *([c, *(num(p.get(c), 2) for p in cpu.values())] for c in components),
                    [
                        "total of the pipeline",
                        *(
                            num(sum(v for c, v in p.items() if c not in NOT_THE_PIPELINE), 2)
                            for p in cpu.values()
                        ),
                    ],
                ],
            ),
            "",
        ]
    profile = data.get("decoder_profile")
    if profile:
        out += [
            "cProfile of `decode_messages` + `to_record_batch` on the same messages, the top "
            "functions by cumulative time (seconds under the profiler):",
            "",
            *md_table(
                ["function", "calls", "own s", "cumulative s"],
                [
                    [f"`{p['function']}`", p["ncalls"], num(p["tottime"], 3), num(p["cumtime"], 3)]
                    for p in profile
                ],
            ),
            "",
        ]
    share = data.get("other_processes_cpu_share")
    if share is not None:
        out += [
            f"Other processes and hypervisor steal took {share:.0%} of the machine's CPU "
            "during the measured batches.",
        ]
    return out


def _warmup_notes(warmup: object, peers: object) -> Lines:
    """The warm-up before the measured runs and the rates of its (unmeasured) runs."""
    if not warmup:
        return []
    rates = [
        f"{peer} " + ", ".join(num(r) for r in found)
        for peer, p in (peers.items() if isinstance(peers, Mapping) else [])
        if isinstance(p, Mapping) and (found := p.get("warmup_rates"))
    ]
    listed = (
        "; their rates, msg/s, the first being the JVM's first query: " + "; ".join(rates)
        if rates
        else ""
    )
    return [f"Warm-up: {warmup}{listed}.", ""]


def section_backlog_rss(data: Mapping[str, Any], charts: Charts) -> Lines:
    return [
        f"{num(data['messages_published'])} QoS 1 messages published to a receiver bounded "
        f"by `maxBacklogMessages` {num(data['max_backlog_messages'])}.",
        "",
        *md_table(
            ["stored in the WAL", "waiting at the broker", "RSS after start MiB", "peak MiB",
             "growth MiB"],
            [[
                num(data["records_in_wal_at_end"]),
                num(data["waiting_at_broker_at_end"]),
                mib(data["rss_kib_after_start"]),
                mib(data["rss_kib_peak"]),
                mib(data["rss_growth_kib"]),
            ]],
        ),
    ]  # fmt: skip


def section_latency(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    runs = data["runs"]
    warm_up = ""
    if params.get("warmup_run_seconds"):
        reached = params.get("warmup_run_reached_a_delta_checkpoint")
        warm_up = (
            f" A throwaway {params['warmup_run_seconds']:g}-second run warmed the JVM up first"
            + (" (it reached Delta's first checkpoint)." if reached else ".")
        )
    out = [
        f"A publisher ({params.get('publisher')}) sends {params.get('payload_bytes')}-byte "
        f"QoS {params.get('qos')} messages at a fixed rate for {params.get('duration_seconds')} "
        f"s into the ingest job's query ({params.get('master')}, {params.get('sink')}); the "
        f"first {params.get('warmup_seconds')} s of each run are left out of the percentiles."
        + warm_up,
        "",
        f"Clock: {data.get('clock')}.",
        "",
    ]
    rows = []
    for r in runs:
        lat = r["latency_seconds"]
        batch = r.get("batch_duration_ms") or {}
        rows.append(
            [
                num(r["rate"]),
                r["trigger"],
                num(r.get("table_checkpoint_interval", DELTA_CHECKPOINT_INTERVAL)),
                num(r["publisher"].get("achieved_rate")),
                num(r["measured_rows"]),
                *(num(lat[k], 3) for k in ("p50", "p95", "p99", "max")),
                num(r.get("rows_per_commit_median")),
                num(batch.get("p50")),
            ]
        )
    out += md_table(
        ["msg/s", "trigger", "table's checkpoint interval", "achieved msg/s", "rows measured",
         "p50 s", "p95 s", "p99 s", "max s", "rows/commit", "batch ms p50"],
        rows,
    )  # fmt: skip
    goal = data.get("goal") or {}
    verdicts = [(goal, "")]
    other = goal.get("with_other_checkpoint_interval") or {}
    other = other or goal.get("with_long_checkpoint_interval") or {}  # results before decision 23
    if other:
        verdicts.append((other, f", table interval {other['table_checkpoint_interval']}"))
    goal_rows = [
        [
            f"p99 at {num(goal['rate'])} msg/s, trigger {goal['trigger']}{table}",
            f"≤ {goal['p99_seconds']} s",
            f"{verdict['p99_measured_seconds']:.3f} s",
            "met" if verdict["met"] else "**not met**",
        ]
        for verdict, table in verdicts
        if "met" in verdict
    ]
    if goal_rows:
        out += ["", *md_table(["goal", "target", "measured", "verdict"], goal_rows)]

    def paint(plt: Any) -> None:
        axes = plt.gca()
        for r in runs:
            cdf = r["cdf"]
            axes.plot(
                [v for _, v in cdf],
                [q / 100 for q, _ in cdf],
                label=run_label(r),
            )
        axes.set_xlabel("send → visible in Delta (s)")
        axes.set_ylabel("fraction of messages")
        axes.set_ylim(0, 1.01)
        axes.grid(True, alpha=0.3)
        axes.legend()

    return [*out, "", *charts.draw("latency_cdf", "Latency distribution (CDF)", paint)]


def _sweep_table(sweep: Mapping[str, Any], key: str, label: str) -> Lines:
    rows = []
    for x, row in sweep[key].items():
        for peer in PEER_COLOURS:
            cell = row.get(peer)
            if not isinstance(cell, Mapping):
                continue
            rows.append(
                [
                    num(int(x)),
                    peer,
                    num(cell.get("messages")),
                    num(cell["rate"]["median"]),
                    num(cell.get("in_process_rate")),
                    num(cell.get("mb_per_s"), 1),
                    mib(cell.get("peak_rss_kib")),
                    times(row.get("ours/paho")) if peer == "ours" else "",
                    times(row.get("ours/mosquitto_sub")) if peer == "ours" else "",
                ]
            )
    return md_table(
        [label, "peer", "messages", "msg/s (wall)", "msg/s (in process)", "MB/s",
         "peak RSS MiB", "ours/paho", "ours/mosquitto_sub"],
        rows,
    )  # fmt: skip


def _sweep_chart(
    charts: Charts, sweep: Mapping[str, Any], key: str, name: str, title: str, xlabel: str
) -> Lines:
    by_x = sweep[key]
    xs = sorted(int(x) for x in by_x)

    def paint(plt: Any) -> None:
        left = plt.subplot(1, 2, 1)
        right = plt.subplot(1, 2, 2)
        for peer, colour in PEER_COLOURS.items():
            pts = [(x, by_x[str(x)][peer]) for x in xs if peer in by_x[str(x)]]
            if not pts:
                continue
            left.plot(
                [x for x, _ in pts], [c["rate"]["median"] for _, c in pts], "o-",
                color=colour, label=peer,
            )  # fmt: skip
            if key == "by_payload_bytes":
                right.plot(
                    [x for x, _ in pts], [c["mb_per_s"] for _, c in pts], "o-",
                    color=colour, label=peer,
                )  # fmt: skip
            else:
                right.plot(
                    [x for x, _ in pts], [c["peak_rss_kib"] / 1024 for _, c in pts], "o-",
                    color=colour, label=peer,
                )  # fmt: skip
        for axes in (left, right):
            axes.set_xscale("log")
            axes.set_xlabel(xlabel)
            axes.grid(True, alpha=0.3)
        left.set_yscale("log")
        left.set_ylabel("messages/s (drain process wall time)")
        right.set_ylabel("MB/s" if key == "by_payload_bytes" else "peak RSS (MiB)")
        right.set_ylim(bottom=0)
        left.legend()

    return charts.draw(name, title, paint)


def section_scale(data: Mapping[str, Any], charts: Charts) -> Lines:
    out: Lines = []
    payload = data.get("payload")
    if isinstance(payload, Mapping):
        out += [
            "### Payload size",
            "",
            "A persistent session's backlog (QoS 1, one topic) drained by each peer; rates "
            "over the drain process's wall time (start → exit, the same clock for the three "
            "peers); in-process: connect → last message; peak RSS of the drain process.",
            "",
            *_sweep_table(payload, "by_payload_bytes", "payload bytes"),
            "",
            *_sweep_chart(
                charts, payload, "by_payload_bytes", "throughput_vs_payload",
                "Drain throughput vs payload size", "payload size (bytes)",
            ),
        ]  # fmt: skip
    topics = data.get("topics")
    if isinstance(topics, Mapping):
        out += [
            "### Distinct topics",
            "",
            "100-byte payloads spread round-robin over N distinct topic names, drained as above.",
            "",
            *_sweep_table(topics, "by_topics", "topics"),
            "",
            *_sweep_chart(
                charts, topics, "by_topics", "topics_scale",
                "Drain rate and memory vs distinct topics", "distinct topics",
            ),
        ]  # fmt: skip
    backlog = data.get("backlog")
    if isinstance(backlog, Mapping):
        out += _backlog_section(backlog, charts)
    return out


def _backlog_section(backlog: Mapping[str, Any], charts: Charts) -> Lines:
    points = backlog["points"]
    params = backlog.get("parameters", {})
    out = [
        "### Backlog",
        "",
        "The source's receiver in its own process while N 100-byte QoS 1 messages wait: *at "
        f"the broker* (`maxBacklogMessages` {num(params.get('bound_when_waiting_at_broker'))}: "
        "the receiver stops reading and TCP pushes back) or *in the WAL* (the receiver stores "
        "every message; nothing consumes them). The backlog is queued for the receiver's "
        "session before it connects; store msg/s is its first → last WAL append. Largest "
        "backlog reached: "
        f"**{num(backlog.get('largest_reached'))}** messages.",
        "",
    ]
    rows = [
        [
            num(p["backlog"]),
            p["waiting"],
            num(p["stored_in_wal"]),
            num(p["waiting_at_broker"]),
            num(p.get("store_rate")),
            mib(p["baseline_rss_kib"]),
            mib(p["peak_rss_kib"]),
            mib(p["rss_growth_kib"]),
        ]
        for p in points
    ]
    out += md_table(
        ["backlog", "waiting", "in WAL", "at broker", "store msg/s", "RSS before connect MiB",
         "peak MiB", "growth MiB"],
        rows,
    )  # fmt: skip
    for where, label in (("broker", "at the broker"), ("wal", "in the WAL")):
        mine = sorted((p["backlog"], p["peak_rss_kib"]) for p in points if p["waiting"] == where)
        if len(mine) > 1:
            (low, low_kib), (high, high_kib) = mine[0], mine[-1]
            out += [
                "",
                f"Peak RSS with {num(high)} rather than {num(low)} messages waiting {label}: "
                f"{(high_kib - low_kib) / 1024:+,.1f} MiB ({high / low:,.0f} times the backlog).",
            ]
    for skip in backlog.get("skipped", []):
        out += ["", f"Skipped {num(skip['backlog'])}: {skip['reason']}."]

    def paint(plt: Any) -> None:
        axes = plt.gca()
        for where, colour, label in (
            ("broker", "tab:blue", "peak RSS, waiting at the broker"),
            ("wal", "tab:red", "peak RSS, waiting in the WAL"),
        ):
            pts = sorted((p["backlog"], p["peak_rss_kib"] / 1024) for p in points
                         if p["waiting"] == where)  # fmt: skip
            if pts:
                axes.plot(
                    [x for x, _ in pts], [y for _, y in pts], "o-", color=colour,
                    label=label,
                )  # fmt: skip
        base = sorted((p["backlog"], p["baseline_rss_kib"] / 1024) for p in points)
        if base:
            axes.plot([x for x, _ in base], [y for _, y in base], "k:", label="RSS before connect")
        axes.set_xscale("log")
        axes.set_ylim(bottom=0)
        axes.set_xlabel("messages waiting")
        axes.set_ylabel("receiver process RSS (MiB)")
        axes.grid(True, alpha=0.3)
        axes.legend()

    return [*out, "", *charts.draw("rss_vs_backlog", "Receiver RSS vs backlog", paint)]


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested dicts as (dotted key, value) pairs."""
    if isinstance(data, Mapping):
        items: list[tuple[str, Any]] = []
        for key, value in data.items():
            items += _flatten(value, f"{prefix}{key}.")
        return items
    return [(prefix.rstrip("."), data)]


def section_chaos(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Whatever counters the chaos run recorded (any dict, nested dicts flattened)."""
    counters = _flatten({k: v for k, v in data.items() if k != "machine"})
    rows = [
        [f"`{k}`", json.dumps(v) if isinstance(v, list | dict) else str(v)] for k, v in counters
    ]
    return md_table(["counter", "value"], rows)


def section_micro(data: Mapping[str, Any], charts: Charts) -> Lines:
    """The small costs the code's comments refer to, each beside its alternative."""
    enum, record, crc = data["enum member"], data["record build"], data["crc32"]
    rows = [
        [
            "an enum member read through its class / as a module name (per-message paths of "
            "`connector.mqtt.decode`, `properties`)",
            f"{enum['through the class']['median']} ns / {enum['module name']['median']} ns",
        ],
        [
            "a WAL record built as `NewRecord` (NamedTuple) / as a plain tuple "
            "(`connector.receiver.receiver`, per message)",
            f"{record['NewRecord (NamedTuple)']['median']} ns / "
            f"{record['plain tuple']['median']} ns ({record['ratio']}x)",
        ],
        [
            "CRC32 over segment bytes, what bounds WAL recovery's read (`connector.wal.recovery`)",
            f"{crc['GB/s']['median']} GB/s",
        ],
    ]
    figures = data.get("append figures")
    if figures is not None:
        rows.append(
            [
                "the receiver's figures kept per WAL append (`connector.receiver.figures`) "
                "/ the append of 64 messages of 100 bytes without fsync",
                f"{figures['figures']['median']} ns / {figures['append']['median']} ns "
                f"({figures['share'] * 100:.2f}%)",
            ]
        )
    if "py4j column" in data:
        rows.append(
            [
                "one PySpark `Column` built (`F.col(...).alias(...)`, Py4J round trips), why "
                "the job builds its projections once (`streaming_jobs.projections`)",
                f"{data['py4j column']['ms per column']['median']} ms",
            ]
        )
    return md_table(["what", "median"], rows)


def section_sink(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Writing to MQTT: messages/s per peer and QoS, and the paired ratios against paho."""
    params = data["params"]
    peers = ("spark", "task", "paho")
    rows = [
        [
            qos,
            *(rate(result["rates"][peer]["median"]) for peer in peers),
            ratio(result["spark/paho"]["median"]),
            ratio(result["task/paho"]["median"]),
        ]
        for qos, result in data["qos"].items()
    ]
    return [
        f"{params['messages']:,} messages of {params['size']} bytes per run, medians of "
        f"{params['repeat']} repetitions (peers in turns, each on a fresh Mosquitto); `spark` is "
        f'`df.write.format("mqtt")` in {params["partitions"]} partitions (local[2]), `task` '
        "the writer's task publisher alone (one connection, no Spark), `paho` paho-mqtt with "
        "its window of 20. Done when the broker acknowledged every message.",
        "",
        *md_table(
            ["QoS", "spark msg/s", "task msg/s", "paho msg/s", "spark/paho", "task/paho"], rows
        ),
    ]


SOAK_FAULTS = (
    ("connection_cuts", "cuts"),
    ("stalls", "stalls"),
    ("malformed_frames_sent", "malformed frames"),
    ("no_connack_connections", "no-CONNACK connections"),
    ("source_process_kills", "source kill -9"),
    ("driver_kills", "driver kills"),
    ("broker_restarts", "broker restarts"),
)


def section_chaos_soak(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Chaos tests looped (bench/chaos_soak.py): per test, runs, messages per QoS, faults,
    lost and extra rows (QoS 2 must have none; QoS 1 extra rows are counted resends)."""
    rows = []
    for test, entry in data["tests"].items():
        c = entry["counters"]
        faults = ", ".join(f"{c[k]:,} {label}" for k, label in SOAK_FAULTS if c.get(k))
        rows.append(
            [
                f"`{test.split('::')[-1]}`",
                f"{entry['passed']}/{entry['runs']}",
                f"{c.get('qos1_published', 0):,} / {c.get('qos2_published', 0):,}",
                faults or "—",
                f"{c.get('qos1_lost', 0) + c.get('qos2_lost', 0):,}",
                f"{c.get('qos2_extra_rows', 0):,}",
                f"{c.get('qos1_extra_rows', 0):,}",
            ]
        )
    out = md_table(
        [
            "test",
            "runs passed",
            "published QoS 1 / 2",
            "faults",
            "lost",
            "QoS 2 extra rows",
            "QoS 1 extra rows",
        ],
        rows,
    )
    failed = {t: e["failed_seeds"] for t, e in data["tests"].items() if e["failed_seeds"]}
    notes = [
        f"{data.get('loops', 1)} loop(s) side by side. QoS 1 extra rows are broker resends "
        "(DUP=1) of messages whose PUBACK a fault kept from the broker: at least once, each "
        "counted by the receiver (docs/delivery.md); QoS 2 must have none.",
    ]
    if failed:
        notes.append(f"Failed runs (replay with CHAOS_SEED): {json.dumps(failed)}")
    return [*out, "", *notes]


def _inflight_label(inflight: object) -> str:
    return "unbounded (0)" if inflight == 0 else str(inflight)


def _median_range(stats: Any) -> str:
    """``median (min-max)`` of a Stats dict; the median alone when all runs agree."""
    if not isinstance(stats, Mapping):
        return "—"
    median, low, high = (stats.get(k) for k in ("median", "min", "max"))
    if low == high:
        return num(median)
    return f"{num(median)} ({num(low)}-{num(high)})"


def section_reconnect(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.reconnect``: duplicates from one dropped connection, per QoS and
    ``max_inflight_messages``."""
    params = data.get("parameters", {})
    settings = data["settings"]
    out = [
        f"A persistent session's backlog of {num(params.get('messages'))} numbered messages "
        f"({params.get('payload_bytes')}-byte payloads) drained by the source's receiver "
        "through a TCP proxy on a fresh Mosquitto per run; the proxy cuts the link (reset both "
        f"ways) once {num(params.get('cut_at'))} messages are stored, the receiver reconnects "
        "and drains the rest. *Stored at the cut*: the WAL's end right after the cut; "
        "*on connection 1*: every message the first connection delivered (the read in "
        "progress at the cut, up to 1 MiB, and what was already in the receiver's socket "
        "buffer are stored after it); *duplicates*: rows stored minus N, every number "
        "0..N-1 checked present; *counted*: the receiver's `possibleDuplicates`; "
        "*withheld*: resends the session answered without storing (`duplicatesDropped`). "
        f"{params.get('repeat')} runs per setting, settings alternating.",
        "",
    ]
    rows = []
    for name, item in settings.items():
        summary = item["summary"]
        duplicates = summary["duplicates"]
        rows.append(
            [
                str(item.get("qos", name)),
                _inflight_label(item.get("max_inflight_messages")),
                num(summary.get("runs")),
                *stats_cells(duplicates),
                _median_range(summary.get("stored_at_cut")),
                _median_range(summary.get("stored_on_first_connection")),
                _median_range(summary.get("possible_duplicates")),
                _median_range(summary.get("duplicates_dropped")),
                num(summary.get("lost")),
            ]
        )
    out += md_table(
        ["QoS", "max_inflight_messages", "runs", "duplicates median", "min", "max",
         "stored at the cut", "stored on connection 1", "counted", "withheld", "lost"],
        rows,
    )  # fmt: skip
    exact = [
        (item["summary"].get("counted_exactly"), item["summary"].get("runs"))
        for item in settings.values()
        if item.get("qos") == 1
    ]
    if exact and all(isinstance(c, int) for c, _ in exact):
        counted, runs = sum(c for c, _ in exact), sum(r for _, r in exact)
        out += [
            "",
            f"At QoS 1 the receiver's count equalled the duplicates in {counted} of {runs} "
            "runs (no packet id is reused below 65,536 messages).",
        ]
    runs = sorted(
        (r for item in settings.values() for r in item.get("runs", [])),
        key=lambda r: (r.get("repetition", 0), r.get("sequence", 0), str(r.get("setting"))),
    )
    if runs:
        out += [
            "",
            "Per run, in the order measured:",
            "",
            *md_table(
                ["repetition", "QoS", "max_inflight_messages", "stored at the cut",
                 "on connection 1", "stored in total", "duplicates", "counted", "withheld"],
                [
                    [
                        str(r.get("repetition")),
                        str(r.get("qos")),
                        _inflight_label(r.get("max_inflight_messages")),
                        num(r.get("stored_at_cut")),
                        num(r.get("stored_on_first_connection")),
                        num(r.get("stored_total")),
                        num(r.get("duplicates")),
                        num(r.get("possible_duplicates")),
                        num(r.get("duplicates_dropped")),
                    ]
                    for r in runs
                ],
            ),
        ]  # fmt: skip
    return out


# ------------------------------------------------------------------------ WAL on object storage

HEADLINE_CLOCK = "first batch -> last commit"
RECEIVER_CLOCK = "receiver: first -> last WAL append"
S3_CPU_COMPONENTS = (
    ("other descendants", "s3proxy (other descendants)"),
    ("python: source runner (receiver, offsets, partitions)", "source runner"),
    ("python: task workers (read)", "task workers (read)"),
)
INGEST_S3_FILES = ("ingest_s3", "ingest_s3_inline", "ingest_s3_qos2", "ingest_s3_long")


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _per_repetition(stats: Mapping[str, Any]) -> str:
    return ", ".join(times(v) for v in stats.get("runs", []))


def _ratio_verdict(goal: Any) -> str:
    """``0.568 ≥ 0.5: met`` from a ratio goal: three decimals, so that a miss never shows as
    the target rounded."""
    if not isinstance(goal, Mapping) or "met" not in goal:
        return "—"
    measured, target = float(goal["measured"]), float(goal["target"])
    if goal["met"]:
        return f"{measured:.3f} ≥ {target:g}: met"
    return f"{measured:.3f} < {target:g}: **not met**"


def _s3_pairs(data: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Each S3 peer of an ingest run: its local-WAL peer and their paired ratio."""
    pairs: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for name, stats in data.get("ratios", {}).items():
        s3, _, local = name.partition("/")
        if local and isinstance(stats, Mapping):
            pairs[s3] = (local, stats)
    return pairs


def _peer_rate(data: Mapping[str, Any], peer: str, clock: str = HEADLINE_CLOCK) -> float:
    return float(data["peers"][peer]["rates"][clock]["median"])


def _pipeline_cpu(peer: Mapping[str, Any]) -> float | None:
    """CPU seconds per 100,000 messages of the pipeline (every component but the sampler and
    other processes), median over the runs."""
    values = [
        sum(v for c, v in run["cpu_seconds"].items() if c not in NOT_THE_PIPELINE)
        / run["rows"]
        * 100_000
        for run in peer.get("runs", [])
        if run.get("cpu_seconds") and run.get("rows")
    ]
    return _median(values) if values else None


def _batch_rows(run: Mapping[str, Any]) -> list[int]:
    return [int(b["rows"]) for b in run.get("batches", []) if b.get("rows")]


def _ingest_s3_lines(data: Mapping[str, Any], *, detail: bool) -> Lines:
    """An ingest run with S3 peers: rates, paired ratios and, with ``detail``, rows per
    micro-batch and CPU per component."""
    params = data.get("parameters", {})
    sizes = params.get("messages_per_qos") or {}
    backlogs = " and ".join(f"{num(n)} QoS {q}" for q, n in sizes.items())
    windows = " and ".join(_inflight_label(w) for w in params.get("max_inflight_messages", []))
    modes = " and ".join(f"`{m}`" for m in params.get("s3_modes", []))
    out = [
        f"Backlogs of {backlogs} messages ({params.get('payload_bytes')}-byte JSON) drained into "
        f"Delta by the ingest job's query on {params.get('master')}, trigger "
        f"{params.get('trigger')}; Mosquitto's `max_inflight_messages` {windows}; the S3 peers "
        f"with `partitionData` {modes}; median of {params.get('repeat')}.",
        "",
    ]
    share = data.get("other_processes_cpu_share")
    if share is not None:
        out += [
            f"Other processes and hypervisor steal took {share:.0%} of the machine's CPU in the "
            "measured windows (median over the runs).",
            "",
        ]
    out += _warmup_notes(params.get("warmup"), None)
    clocks = data.get("clocks", {})
    if HEADLINE_CLOCK in clocks:
        line = f"Clocks: msg/s is {HEADLINE_CLOCK}, {clocks[HEADLINE_CLOCK]}"
        if RECEIVER_CLOCK in clocks:
            line += f"; receiver msg/s is {clocks[RECEIVER_CLOCK]}"
        out += [line + ".", ""]
    pairs = _s3_pairs(data)
    goals = data.get("goal", {})
    rows = []
    for peer, item in data["peers"].items():
        rates = item.get("rates", {})
        cells = [
            peer,
            *stats_cells(rates[HEADLINE_CLOCK]),
            num(rates.get(RECEIVER_CLOCK, {}).get("median")),
        ]
        if peer in pairs:
            local, stats = pairs[peer]
            cells += [
                _per_repetition(stats),
                times(stats.get("median")),
                _ratio_verdict(goals.get(f"{peer}/{local}")),
            ]
        else:
            cells += ["", "", ""]
        rows.append(cells)
    out += md_table(
        ["peer", "msg/s median", "min", "max", "receiver msg/s median",
         "ratio to the local WAL (same QoS, window), per repetition", "median", "goal"],
        rows,
    )  # fmt: skip
    if not detail:
        return out
    return [*out, *_batches_lines(data), *_s3_cpu_lines(data)]


def _batches_lines(data: Mapping[str, Any]) -> Lines:
    """Rows per micro-batch per run, or the number of batches when runs took many."""
    per_peer = {
        peer: [_batch_rows(run) for run in item.get("runs", [])]
        for peer, item in data["peers"].items()
    }
    most = max((len(rows) for runs in per_peer.values() for rows in runs), default=0)
    if not most:
        return []
    if most > 3:
        counts = "; ".join(
            f"{peer} {', '.join(str(len(rows)) for rows in runs)}"
            for peer, runs in per_peer.items()
        )
        return ["", f"Micro-batches per run, in the order of the repetitions: {counts}."]
    whole = ", ".join(
        f"{peer} {sum(len(rows) == 1 for rows in runs)} of {len(runs)}"
        for peer, runs in per_peer.items()
    )
    lead = (
        "Without `maxMessagesPerTrigger` a micro-batch takes what the receiver has stored when "
        "it is planned, so a backlog not yet stored in full takes a second batch. "
        if not data.get("parameters", {}).get("source_options")
        else ""
    )
    table = [
        [peer, "; ".join(" + ".join(num(n) for n in rows) for rows in runs)]
        for peer, runs in per_peer.items()
    ]
    return [
        "",
        f"{lead}Runs whose backlog landed in one micro-batch: {whole}.",
        "",
        *md_table(["peer", "rows per micro-batch, in the order of the repetitions"], table),
    ]


def _s3_cpu_lines(data: Mapping[str, Any]) -> Lines:
    cpu = data.get("cpu_seconds_per_100k_messages")
    if not isinstance(cpu, Mapping):
        return []
    rows = [
        [
            peer,
            *(f"{cpu[peer].get(component, 0.0):.2f}" for component, _ in S3_CPU_COMPONENTS),
            num(_pipeline_cpu(item), 2),
        ]
        for peer, item in data["peers"].items()
        if isinstance(cpu.get(peer), Mapping)
    ]
    return [
        "",
        "CPU seconds per 100,000 messages while the measured batches ran, median of the runs "
        "(sampled from /proc by `bench.cpu_sampler`; the S3 server is the benchmark's *other "
        "descendants*; the pipeline is every component but the sampler and other processes):",
        "",
        *md_table(
            ["peer", *(label for _, label in S3_CPU_COMPONENTS), "total of the pipeline"], rows
        ),
    ]


def section_ingest_s3(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.ingest --s3-modes ...``: the WAL on an S3 server against a local WAL."""
    return _ingest_s3_lines(data, detail=True)


def section_ingest_s3_brief(data: Mapping[str, Any], charts: Charts) -> Lines:
    """As :func:`section_ingest_s3`, rates and ratios only."""
    return _ingest_s3_lines(data, detail=False)


def _spark_windows(data: Mapping[str, Any]) -> dict[str, Any]:
    """Each Spark peer's broker window (``max_inflight_messages`` of its runs)."""
    return {
        peer: item["runs"][0].get("max_inflight_messages")
        for peer, item in data["peers"].items()
        if item.get("runs")
    }


def section_receiver_appends(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.ingest --append-profile``: the receiver alone, every WAL append timed."""
    appends = data.get("receiver_appends")
    if not isinstance(appends, Mapping):
        return ["*No append profile in this run (`--append-profile`).*"]
    params = data.get("parameters", {})
    live = [run for item in appends.values() for run in item["runs"] if run.get("live")]
    live_text = (
        f", and {num(live[0]['messages'])} messages sent by a publisher (`connector.mqtt pub`, "
        f"{params.get('publish_inflight')} in flight) while it is connected (*live*)"
        if live
        else ""
    )
    out = [
        "After the Spark runs, the source's receiver alone (no Spark, in the benchmark's process) "
        f"stores the same backlogs{live_text}, into a local WAL and into one on the S3 server, "
        "in turns; every append is timed. An append is one socket read (QoS 2: or a read of "
        "PUBRELs alone, *of releases only*). Medians of the per-run figures over "
        f"{params.get('repeat')} repetitions; msg/s is connect → last message durable (live: "
        "first append → last).",
        "",
    ]
    windows = _spark_windows(data)
    mosquitto = data.get("machine", {}).get("mosquitto")
    for window in sorted({w for w in windows.values() if isinstance(w, int) and w > 0}):
        held = {False: 0, True: 0}
        for peer, item in appends.items():
            if windows.get(peer.removesuffix(" (live)")) == window:
                for run in item["runs"]:
                    most = int(run["messages_per_append"]["max"])
                    held[bool(run.get("live"))] = max(held[bool(run.get("live"))], most)
        if max(held.values()) <= window:
            continue
        out += [
            f"Mosquitto {mosquitto} did not hold `max_inflight_messages` {window} here "
            "(docs/brokers.md, eclipse-mosquitto/mosquitto#2306): with that window one socket "
            f"read held up to {num(held[False])} messages of a backlog"
            + (f" and up to {num(held[True])} of a live stream" if live else "")
            + f". So window {window} and unbounded are two broker settings, not {window} "
            f"messages per append; what a broker that holds a window of {window} would cost is "
            f"the {window}-record row of [One append per layout](#one-append-per-layout).",
            "",
        ]
    rows = []
    for peer, item in appends.items():
        runs = item["runs"]

        def med(*path: str, runs: Sequence[Mapping[str, Any]] = runs) -> float:
            values = []
            for run in runs:
                value: Any = run
                for key in path:
                    value = value[key]
                values.append(float(value))
            return _median(values)

        rows.append(
            [
                peer,
                num(item["rate"]["median"]),
                num(med("appends")),
                num(med("appends_of_releases_only")),
                num(med("messages_per_append", "median")),
                num(med("messages_per_append", "p90")),
                num(med("append_ms", "median"), 2),
                num(med("append_ms", "p90"), 2),
                f"{med('share_of_time_in_appends'):.0%}",
            ]
        )
    return out + md_table(
        ["receiver alone", "msg/s", "appends", "of releases only", "msgs/append p50", "p90",
         "ms/append p50", "p90", "time in appends"],
        rows,
    )  # fmt: skip


def section_wal_throughput(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.wal_throughput``: one append's cost per WAL layout."""
    params = data.get("parameters", {})
    fsync = ", fsync per append" if params.get("files_fsync") else ", no fsync"
    out = [
        f"Appends of N records ({params.get('payload_bytes')}-byte payloads) to a fresh WAL per "
        f"layout: `files` (a local directory{fsync}), `objects-file` (a `file://` URI on the "
        "same disk, one part file per append), `objects-s3` (one PUT per append to the S3 "
        f"server on loopback); at most {num(params.get('max_appends'))} appends per "
        f"measurement; {params.get('order')}; ratio to `files` in the same repetition at the "
        "same N.",
        "",
    ]
    ratios = data.get("ratios", {})
    rows = []
    for row in data["rows"]:
        layout, batch = row["layout"], int(row["batch"])
        stats = ratios.get(f"{layout}/files, {batch:,} records per append")
        rows.append(
            [
                num(batch),
                layout,
                num(row["append_ms_median"], 2),
                num(row["append_ms_p90"], 2),
                *stats_cells(row["records_per_s"]),
                num(row.get("cpu_ms_per_append"), 2),
                _per_repetition(stats) if isinstance(stats, Mapping) else "",
                times(stats.get("median")) if isinstance(stats, Mapping) else "",
            ]
        )
    return out + md_table(
        ["records per append", "layout", "ms/append p50", "p90", "records/s median", "min",
         "max", "CPU ms/append", "ratio to files, per repetition", "median"],
        rows,
    )  # fmt: skip


def _appends_median(data: Mapping[str, Any], peer: str, *path: str) -> float:
    values = []
    for run in data["receiver_appends"][peer]["runs"]:
        value: Any = run
        for key in path:
            value = value[key]
        values.append(float(value))
    return _median(values)


def _pairs_by_qos(data: Mapping[str, Any], qos: int) -> list[tuple[str, str, Any]]:
    """(S3 peer, local peer, window) of the ratio goals at ``qos``, in the file's order."""
    windows = _spark_windows(data)
    return [
        (s3, local, windows.get(s3))
        for s3, (local, _) in _s3_pairs(data).items()
        if data.get("goal", {}).get(f"{s3}/{local}", {}).get("qos") == qos
    ]


def _window_text(window: Any) -> str:
    return "unbounded" if window == 0 else f"at window {window}"


def _synchronous_append(results: Mapping[str, Any]) -> str | None:
    """The first limit: an append waits for its PUT."""
    found = []
    wal = results.get("wal_throughput")
    row_of: dict[tuple[str, int], Mapping[str, Any]] = {}
    if isinstance(wal, Mapping):
        row_of = {(r["layout"], int(r["batch"])): r for r in wal["rows"]}
        sizes = sorted(
            b for layout, b in row_of if layout == "objects-s3" and ("files", b) in row_of
        )
        if sizes:
            small, large = sizes[0], sizes[-1]
            fsync = " with fsync" if wal.get("parameters", {}).get("files_fsync") else ""
            found.append(
                f"One PUT to the server on loopback took "
                f"{row_of['objects-s3', small]['append_ms_median']:.2f} ms for {num(small)} "
                f"records and {row_of['objects-s3', large]['append_ms_median']:.2f} ms for "
                f"{num(large)}, against {row_of['files', small]['append_ms_median']:.2f} and "
                f"{row_of['files', large]['append_ms_median']:.2f} ms for a local append{fsync}."
            )
    data = results.get("ingest_s3")
    pairs = _pairs_by_qos(data, 1) if isinstance(data, Mapping) else []
    if pairs and isinstance(data, Mapping) and isinstance(data.get("receiver_appends"), Mapping):
        s3, local, _ = pairs[0]
        s3_size = _appends_median(data, s3, "messages_per_append", "median")
        local_size = _appends_median(data, local, "messages_per_append", "median")
        grow = ", the reads grow to fill the time" if s3_size > local_size else ""
        alone = ", ".join(
            f"{num(data['receiver_appends'][s]['rate']['median'])} against "
            f"{num(data['receiver_appends'][loc]['rate']['median'])} msg/s {_window_text(w)}"
            for s, loc, w in pairs
        )
        found.append(
            f"Draining a backlog{grow}: the S3 receiver stored {num(s3_size)} messages per "
            f"append (median) where the local one stored {num(local_size)}; the receiver alone "
            f"stored {alone}."
        )
    if pairs and isinstance(data, Mapping) and row_of:
        window = pairs[0][2]
        row = row_of.get(("objects-s3", window)) if isinstance(window, int) else None
        name = f"objects-s3/files, {window:,} records per append" if row is not None else ""
        ratio = wal.get("ratios", {}).get(name) if isinstance(wal, Mapping) else None
        if row is not None and isinstance(ratio, Mapping):
            found.append(
                f"A broker that holds a window of {window} would cap it at {window} messages "
                f"per PUT: at most {num(row['records_per_s']['median'])} records/s on loopback, "
                f"the rate of {window}-record appends ({times(ratio['median'])} a local WAL); "
                "with a remote store's longer PUTs, lower again."
            )
    if not found:
        return None
    return "**The append is synchronous: read → PUT → acknowledge → read.** " + " ".join(found)


def _first_batch(results: Mapping[str, Any]) -> str | None:
    """The second limit: a short backlog not stored in full when the first batch is planned."""
    found = []
    data = results.get("ingest_s3")
    if isinstance(data, Mapping) and (pairs := _pairs_by_qos(data, 1)):
        s3, local, _ = pairs[0]
        runs = data["peers"][s3]["runs"]
        split = [_batch_rows(run) for run in runs if len(_batch_rows(run)) > 1]
        text = (
            f"Inside the query the S3 receiver stored {num(runs[0]['rows'])} messages at "
            f"{num(_peer_rate(data, s3, RECEIVER_CLOCK))} msg/s against "
            f"{num(_peer_rate(data, local, RECEIVER_CLOCK))}"
        )
        if split:
            low, high = min(rows[0] for rows in split), max(rows[0] for rows in split)
            took = num(low) if low == high else f"{num(low)}-{num(high)}"
            text += (
                f", so in {len(split)} of {len(runs)} runs the first micro-batch took {took} "
                "of them instead of all and another batch followed (rows per micro-batch above)"
            )
        found.append(text + ".")
    long = results.get("ingest_s3_long")
    if isinstance(long, Mapping):
        counts = [len(_batch_rows(run)) for item in long["peers"].values() for run in item["runs"]]
        for s3, (_, stats) in _s3_pairs(long).items():
            found.append(
                f"With {num(long['peers'][s3]['runs'][0]['rows'])} messages "
                f"({min(counts)}-{max(counts)} micro-batches per run either way) the ratio was "
                f"{times(stats['median'])}."
            )
    if not found:
        return None
    return "**Short backlogs: the first batch.** " + " ".join(found)


def _qos2_releases(results: Mapping[str, Any]) -> str | None:
    """The third limit: at QoS 2 a read of PUBRELs alone is an append, so a PUT."""
    data = results.get("ingest_s3")
    if not isinstance(data, Mapping) or not (pairs := _pairs_by_qos(data, 2)):
        return None
    s3, local, _ = pairs[0]
    found = []
    if isinstance(data.get("receiver_appends"), Mapping):
        runs = data["receiver_appends"][s3]["runs"]
        found.append(
            f"{num(_appends_median(data, s3, 'appends_of_releases_only'))} of the "
            f"{num(_appends_median(data, s3, 'appends'))} appends of a "
            f"{num(runs[0]['messages'])}-message QoS 2 drain held releases only (median "
            f"{_appends_median(data, s3, 'append_ms', 'median'):.1f} ms per append);"
        )
    cpu_s3 = _pipeline_cpu(data["peers"][s3])
    cpu_local = _pipeline_cpu(data["peers"][local])
    components = data.get("cpu_seconds_per_100k_messages", {})
    if cpu_s3 and cpu_local and isinstance(components, Mapping):
        runner = S3_CPU_COMPONENTS[1][0]
        found.append(
            f"the pipeline's CPU per 100,000 messages went from {cpu_local:.2f} to "
            f"{cpu_s3:.2f} s (s3proxy {components[s3]['other descendants']:.2f} s, the source "
            f"runner {components[s3][runner] - components[local][runner]:+.2f} s)."
        )
        measured = float(data["ratios"][f"{s3}/{local}"]["median"])
        cpu_ratio = cpu_local / cpu_s3
        cores = data.get("machine", {}).get("cores")
        followed = abs(measured - cpu_ratio) <= 0.1
        found.append(
            f"On {cores} cores the rate ratio "
            + ("followed" if followed else "did not follow")
            + f" the CPU ratio ({times(measured)} measured, {cpu_local:.2f}/{cpu_s3:.2f} = "
            f"{cpu_ratio:.2f})" + (": the pipeline is CPU-bound." if followed else ".")
        )
    if not found:
        return None
    return "**QoS 2: one PUT per read of PUBRELs.** " + " ".join(found)


def _server_cost(results: Mapping[str, Any]) -> str | None:
    """The fourth limit: the S3 server's own CPU on the same cores."""
    costs = []
    cores = None
    for name in INGEST_S3_FILES:
        data = results.get(name)
        if not isinstance(data, Mapping):
            continue
        cores = data.get("machine", {}).get("cores", cores)
        cpu = data.get("cpu_seconds_per_100k_messages", {})
        for s3 in _s3_pairs(data):
            if isinstance(cpu.get(s3), Mapping):
                costs.append((float(cpu[s3]["other descendants"]), f"{s3}, `{name}.json`"))
    if not costs:
        return None
    low, high = min(costs), max(costs)
    return (
        f"**s3proxy's own cost.** The server runs on the same {cores} cores: {low[0]:.2f} "
        f"({low[1]}) to {high[0]:.2f} ({high[1]}) CPU seconds per 100,000 messages, taken from "
        "Spark. A remote store costs no CPU here but longer PUTs."
    )


def _tasks_reads(results: Mapping[str, Any]) -> str | None:
    """Whether shipping records inline (no reads from the store in the tasks) helped."""
    data = results.get("ingest_s3_inline")
    if not isinstance(data, Mapping):
        return None
    goals = data.get("goal", {})
    compared = []
    for s3, (local, stats) in _s3_pairs(data).items():
        if "-inline" not in s3:
            continue
        other = data["ratios"].get(f"{s3.replace('-inline', '', 1)}/{local}")
        if isinstance(other, Mapping):
            qos = goals.get(f"{s3}/{local}", {}).get("qos")
            compared.append((float(stats["median"]), float(other["median"]), qos))
    if not compared:
        return None
    gains = [inline - wal for inline, wal, _ in compared]
    if max(gains) <= 0.05:
        lead, verdict = "**Not the tasks' reads.**", "was no faster"
    elif min(gains) > 0.05:
        lead, verdict = "**The tasks' reads.**", "was faster"
    else:
        lead, verdict = "**The tasks' reads, in part.**", "was faster at one QoS only"
    figures = ", ".join(
        f"{times(inline)} against {times(wal)} at QoS {qos}" for inline, wal, qos in compared
    )
    return (
        f"{lead} Shipping records inline instead of letting the tasks read the parts from the "
        f"store {verdict} ({figures}; `ingest_s3_inline.json`)."
    )


def _busy_machine(results: Mapping[str, Any]) -> str | None:
    """What the ratio says when other processes take most of the CPU."""
    busy, base = results.get("ingest_s3_busy"), results.get("ingest_s3")
    if not isinstance(busy, Mapping) or busy.get("other_processes_cpu_share") is None:
        return None
    share = float(busy["other_processes_cpu_share"])
    same = isinstance(base, Mapping) and busy.get("parameters") == base.get("parameters")
    load = busy.get("machine", {}).get("load_average_at_start") or []
    ratios = ", ".join(times(r.get("median")) for r in busy.get("ratios", {}).values())
    return (
        "**CPU share of other processes.** "
        + ("The same parameters as *Into Delta*" if same else "Another run")
        + " on a busier machine (`ingest_s3_busy.json`: load average at start "
        + ", ".join(f"{v:.2f}" for v in load)
        + f"; other processes took {share:.0%} of the CPU) gave {ratios}"
        + (
            ": both peers were starved alike, so the ratio there says little about the store."
            if share >= 0.3
            else "."
        )
    )


def wal_on_object_storage_intro(results: Mapping[str, Any]) -> Lines:
    data: Mapping[str, Any] = next(
        (results[n] for n in INGEST_S3_FILES if isinstance(results.get(n), Mapping)), {}
    )
    server = str(data.get("machine", {}).get("s3_server", "s3proxy")).replace("-", " ", 1)
    target = next(
        (
            g["target"]
            for g in data.get("goal", {}).values()
            if isinstance(g, Mapping) and "ratio" in g
        ),
        None,
    )
    goal = (
        f" Goal: a drain into Delta with the WAL on the server at ≥ {target:g}x the rate of the "
        "same query with a local WAL (`ours-wal`), same QoS and broker window, ratio per "
        "repetition."
        if target is not None
        else ""
    )
    return [
        "The source's WAL on an S3-compatible server on loopback (`walPath=s3://…?"
        f"endpoint_override=127.0.0.1:PORT&scheme=http&region=us-east-1`, {server} from "
        "`devtools/s3_server.py`, started by the benchmark on a free 127.0.0.1 port, a fresh "
        "prefix per run) against a local WAL, measured in the same process, the peers taking "
        f"turns within every repetition.{goal} `ours-s3` ships records with "
        "`partitionData=wal`, the source's default for a WAL on shared storage, so the tasks "
        "read the parts from the store; `ours-s3-inline` ships them from the driver.",
        "",
        "The machine is shared: each run states its load average at start and the share of the "
        "machine's CPU that other processes took while its measured batches ran.",
        "",
    ]


def what_limits_the_s3_peer(results: Mapping[str, Any]) -> Lines:
    """Bullets that put figures of the ``ingest_s3*`` and ``wal_throughput`` results side by
    side; a bullet whose results are missing is left out."""
    bullets = [
        found
        for make in (
            _synchronous_append, _first_batch, _qos2_releases, _server_cost, _tasks_reads,
            _busy_machine,
        )
        if (found := make(results))
    ]  # fmt: skip
    if not bullets:
        return ["*Not rendered: no results of the WAL on object storage.*"]
    return [f"* {b}" for b in bullets]


# ------------------------------------------------------------------------- shared subscription


def section_shared_subscription(data: Mapping[str, Any], charts: Charts) -> Lines:
    """``bench.shared_subscription``: one ingest job against several on one shared
    subscription, into one Delta table."""
    jobs = data["jobs"]
    machine = data.get("machine", {})
    ratio = data["ratio"]
    out = [
        f"{num(data.get('messages'))} QoS {data.get('qos')} messages of "
        f"{data.get('payload_bytes')} bytes published (our client, Mosquitto's window of 20 "
        f"unacknowledged) once the ingest jobs (`spark-submit streaming_jobs/ingest.py`, "
        "`local[2]` each, each with its own client id, checkpoint and WAL, trigger "
        f"{data.get('trigger')}) have subscribed to `$share/<group>/<filter>`, all writing one "
        "Delta table; a fresh Mosquitto per run. Clock: the first publish → the Delta commit "
        f"that completes the table. One job and {jobs} jobs alternate for "
        f"{len(ratio.get('runs', []))} rounds; the ratio is paired per round.",
        "",
        f"Every job ran on this one machine, so all of them shared its "
        f"{machine.get('cores', '?')} cores: the ratio is what running {jobs} jobs side by side "
        "costs or gains here, not how they scale over machines of their own. Load average "
        "(1 min) at each round's start: "
        + ", ".join(f"{v:.2f}" for v in data.get("load_average_1min", []))
        + ".",
        "",
    ]
    rows = [
        [str(n), *stats_cells(data[rates]), num(data.get(publish, {}).get("median"))]
        for n, rates, publish in (
            (1, "rate_one", "publish_rate_one"),
            (jobs, "rate_many", "publish_rate_many"),
        )
    ]
    out += md_table(
        ["jobs", "msg/s into Delta median", "min", "max", "publisher msg/s median"], rows
    )
    out += [
        "",
        f"{jobs} jobs / 1 job: {times(ratio['median'])} (per round {_per_repetition(ratio)}).",
    ]
    headrooms = [
        data[publish]["median"] / data[rates]["median"]
        for rates, publish in (("rate_one", "publish_rate_one"), ("rate_many", "publish_rate_many"))
        if isinstance(data.get(publish), Mapping)
    ]
    if headrooms:
        headroom = min(headrooms)
        out[-1] += (
            f" The publisher sent at least {headroom:.1f} times as fast as the rows landed, so it "
            "was not the limit."
            if headroom >= 2
            else f" The publisher sent only {headroom:.1f} times as fast as the rows landed: it "
            "may be the limit."
        )
    per_round = data.get("rows_per_job_many")
    if per_round:
        out += [
            "",
            *md_table(
                ["round", *(f"rows, job {i}" for i in range(jobs)), "total"],
                [
                    [
                        str(r),
                        *(num(n) if n >= 0 else "—" for n in counts),
                        num(sum(counts)) if min(counts) >= 0 else "—",
                    ]
                    for r, counts in enumerate(per_round)
                ],
            ),
        ]
    return out


Renderer = Callable[[Mapping[str, Any], Charts], Lines]


@dataclass(frozen=True)
class Part:
    """A subsection of a :class:`Group`: one results file. Without a command, a further view
    of the previous part's run (no command line, no run note)."""

    name: str
    title: str
    command: str | None
    render: Renderer


@dataclass(frozen=True)
class Group:
    """A section over several results files: an introduction, a subsection per part, then a
    closing subsection that reads all of them (figures of different runs side by side)."""

    title: str
    intro: Callable[[Mapping[str, Any]], Lines]
    parts: tuple[Part, ...]
    closing_title: str
    closing: Callable[[Mapping[str, Any]], Lines]


INGEST_S3_COMMAND = (
    "python -m bench.ingest --messages 100000 --repeat 3 --qos 1 2 --modes wal --s3-modes wal "
    "--inflight 20 0 --no-paho --no-synthetic --append-profile --output "
)
WAL_ON_OBJECT_STORAGE = Group(
    "WAL on object storage",
    wal_on_object_storage_intro,
    (
        Part(
            "ingest_s3",
            "Into Delta: QoS 1 and 2, broker windows 20 and unbounded",
            INGEST_S3_COMMAND + "bench/results/ingest_s3.json",
            section_ingest_s3,
        ),
        Part(
            "ingest_s3",
            "The receiver alone: messages and milliseconds per append",
            None,
            section_receiver_appends,
        ),
        Part(
            "ingest_s3_inline",
            "partitionData wal and inline, window 20",
            "python -m bench.ingest --messages 100000 --repeat 3 --qos 1 2 --modes wal "
            "--s3-modes wal inline --no-paho --no-synthetic --warmup-rows 400000 --output "
            "bench/results/ingest_s3_inline.json",
            section_ingest_s3,
        ),
        Part(
            "ingest_s3_qos2",
            "QoS 2, window 20, on a quiet machine",
            "python -m bench.ingest --messages 100000 --repeat 3 --qos 2 --modes wal "
            "--s3-modes wal --inflight 20 --no-paho --no-synthetic --append-profile --output "
            "bench/results/ingest_s3_qos2.json",
            section_ingest_s3,
        ),
        Part(
            "ingest_s3_long",
            "A long QoS 1 backlog",
            "python -m bench.ingest --messages 1000000 --repeat 3 --qos 1 --modes wal "
            "--s3-modes wal --no-paho --no-synthetic --output bench/results/ingest_s3_long.json",
            section_ingest_s3,
        ),
        Part(
            "ingest_s3_busy",
            "On a busy machine",
            INGEST_S3_COMMAND + "bench/results/ingest_s3_busy.json",
            section_ingest_s3_brief,
        ),
        Part(
            "wal_throughput",
            "One append per layout",
            "python -m bench.wal_throughput --repeat 3",
            section_wal_throughput,
        ),
    ),
    "What limits the S3 peer",
    what_limits_the_s3_peer,
)

SECTIONS: tuple[tuple[str, str, str, Renderer] | Group, ...] = (
    ("codec", "Codec", "python -m bench.codec", section_codec),
    ("drain", "Drain", "python -m bench.drain", section_drain),
    ("drain_qos2", "Drain, QoS 2", "python -m bench.drain --qos 2", section_drain),
    (
        "flow_control",
        "Flow control over a long round trip",
        "python -m bench.flow_control",
        section_flow_control,
    ),
    ("ingest", "Ingest into Delta", "python -m bench.ingest", section_ingest),
    (
        "ingest_receivers",
        "Ingest into Delta with two receivers",
        "python -m bench.ingest --source-option receivers=2 --output "
        "bench/results/ingest_receivers.json",
        section_ingest,
    ),
    (
        "ingest_long",
        "Ingest into Delta, a long QoS 1 backlog",
        "python -m bench.ingest --qos 1 --modes wal --messages 1000000 --no-paho --output "
        "bench/results/ingest_long.json",
        section_ingest,
    ),
    ("sparkplug", "Sparkplug B into Delta", "python -m bench.sparkplug", section_sparkplug),
    ("sink", "Writing to MQTT", "python -m bench.sink", section_sink),
    ("backlog_rss", "Backlog memory", "python -m bench.backlog_rss", section_backlog_rss),
    ("latency", "Latency", "python -m bench.latency", section_latency),
    ("scale", "Scale of cost", "python -m bench.scale", section_scale),
    ("micro", "Costs behind code choices", "python -m bench.micro", section_micro),
    ("chaos", "Chaos", "the chaos tests", section_chaos),
    (
        "chaos_soak",
        "Chaos soak",
        "python -m bench.chaos_soak --runs 20 (the network-faults, kill -9 and failover tests)",
        section_chaos_soak,
    ),
    ("reconnect", "Reconnect", "python -m bench.reconnect", section_reconnect),
    WAL_ON_OBJECT_STORAGE,
    (
        "shared_subscription",
        "Shared subscription",
        "python -m bench.shared_subscription --messages 20000 --rounds 3",
        section_shared_subscription,
    ),
)


# ------------------------------------------------------------------------------ main


def load_results(directory: Path) -> dict[str, Any]:
    """Every ``*.json`` file in ``directory`` by name; unreadable ones as their error text."""
    results: dict[str, Any] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            results[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            results[path.stem] = f"could not be read: {exc}"
    return results


def build_report(results: Mapping[str, Any], charts: Charts) -> str:
    out: Lines = [
        "# Benchmark report",
        "",
        "Generated by `python -m bench.report` (`make bench` runs every benchmark, then this) "
        "from `bench/results/*.json`.",
        "",
    ]
    readable = {k: v for k, v in results.items() if isinstance(v, Mapping)}
    out += section_machine(readable)
    for section in SECTIONS:
        if isinstance(section, Group):
            out += _group_lines(section, results, readable, charts)
            continue
        name, title, command, render = section
        out += [f"## {title}", "", f"`{command}` → `bench/results/{name}.json`", ""]
        out += _file_lines(name, results.get(name), render, charts, note=True)
    return "\n".join(out).rstrip() + "\n"


SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError)


def _file_lines(name: str, data: Any, render: Renderer, charts: Charts, *, note: bool) -> Lines:
    """One results file rendered, after its run note; or why it is not."""
    if data is None:
        return ["*Not run: no results file.*", ""]
    if not isinstance(data, Mapping):
        return [f"*The results file {data}.*", ""]
    try:
        body = render(data, charts)
    except SHAPE_ERRORS as exc:
        log.warning("%s.json: unexpected shape (%r)", name, exc)
        body = [f"*The results file has an unexpected shape ({type(exc).__name__}: {exc}).*"]
    return [*(run_note(data) if note else []), *body, ""]


def _group_lines(
    group: Group, results: Mapping[str, Any], readable: Mapping[str, Any], charts: Charts
) -> Lines:
    out = [f"## {group.title}", ""]
    try:
        out += group.intro(readable)
    except SHAPE_ERRORS as exc:
        log.warning("%s: unexpected shape (%r)", group.title, exc)
    for part in group.parts:
        out += [f"### {part.title}", ""]
        if part.command is not None:
            out += [f"`{part.command}` → `bench/results/{part.name}.json`", ""]
        data = results.get(part.name)
        if part.command is None and not isinstance(data, Mapping):
            out += ["*Not run: no results file.*", ""]
            continue
        out += _file_lines(part.name, data, part.render, charts, note=part.command is not None)
    out += [f"### {group.closing_title}", ""]
    try:
        out += group.closing(readable)
    except SHAPE_ERRORS as exc:
        log.warning("%s: unexpected shape (%r)", group.closing_title, exc)
        out += [f"*The results have an unexpected shape ({type(exc).__name__}: {exc}).*"]
    return [*out, ""]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    parser.add_argument("--results", type=Path, default=BENCH_DIR / "results")
    parser.add_argument("--output", type=Path, default=BENCH_DIR / "REPORT.md")
    parser.add_argument("--charts", type=Path, default=None, help="default: <output dir>/charts")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    charts_dir = args.charts or args.output.parent / "charts"
    charts = Charts(charts_dir, args.output.parent)
    text = build_report(load_results(args.results), charts)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    log.info("wrote %s and %d chart(s) in %s", args.output, len(charts.written), charts_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
