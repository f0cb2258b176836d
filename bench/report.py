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
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

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
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
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


SECTIONS: tuple[tuple[str, str, str, Callable[[Mapping[str, Any], Charts], Lines]], ...] = (
    ("codec", "Codec", "python -m bench.codec", section_codec),
    ("drain", "Drain", "python -m bench.drain", section_drain),
    ("drain_qos2", "Drain, QoS 2", "python -m bench.drain --qos 2", section_drain),
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
    ("backlog_rss", "Backlog memory", "python -m bench.backlog_rss", section_backlog_rss),
    ("latency", "Latency", "python -m bench.latency", section_latency),
    ("scale", "Scale of cost", "python -m bench.scale", section_scale),
    ("chaos", "Chaos", "the chaos tests", section_chaos),
    ("reconnect", "Reconnect", "python -m bench.reconnect", section_reconnect),
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
    for name, title, command, render in SECTIONS:
        out += [f"## {title}", "", f"`{command}` → `bench/results/{name}.json`", ""]
        data = results.get(name)
        if data is None:
            out += ["*Not run: no results file.*", ""]
            continue
        if not isinstance(data, Mapping):
            out += [f"*The results file {data}.*", ""]
            continue
        try:
            body = render(data, charts)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            log.warning("%s.json: unexpected shape (%r)", name, exc)
            body = [f"*The results file has an unexpected shape ({type(exc).__name__}: {exc}).*"]
        out += [*run_note(data), *body, ""]
    return "\n".join(out).rstrip() + "\n"


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
