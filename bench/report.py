"""``bench/REPORT.md`` (``python -m bench.report``): the machine of each run, then a section per
``bench/results/*.json`` rendered by its benchmark; a missing or malformed file is said so."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import (
    backlog_rss,
    chaos_soak,
    codec,
    drain,
    flow_control,
    ingest,
    ingest_s3,
    latency,
    long_run,
    micro,
    reconnect,
    routes,
    scale,
    shared_subscription,
    sink,
    sparkplug,
    wal_throughput,
)
from .render import Charts, Lines, Renderer, machine_line, md_table, run_note

log = logging.getLogger("bench.report")
BENCH_DIR = Path(__file__).resolve().parent
SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError)


@dataclass(frozen=True)
class Part:
    """A section (``##``, in a Group ``###``) of one results file; no command: another view."""

    name: str
    title: str
    command: str | None
    render: Renderer


@dataclass(frozen=True)
class Group:
    """A section over several results files: intro, a subsection per part, a closing one."""

    title: str
    intro: Callable[[Mapping[str, Any]], Lines]
    parts: tuple[Part, ...]
    closing_title: str
    closing: Callable[[Mapping[str, Any]], Lines]


INGEST = "python -m bench.ingest --messages 100000 --repeat 3 --qos"
INGEST_S3 = (
    f"{INGEST} 1 2 --modes wal --s3-modes wal --inflight 20 0 --no-paho --no-synthetic "
    "--append-profile --output bench/results/"
)
SECTIONS: tuple[Part | Group, ...] = (
    Part("codec", "Codec", "python -m bench.codec", codec.section),
    Part("drain", "Drain", "python -m bench.drain", drain.section),
    Part("drain_qos2", "Drain, QoS 2", "python -m bench.drain --qos 2", drain.section),
    Part("flow_control", "Flow control over a long round trip", "python -m bench.flow_control",
         flow_control.section),
    Part("ingest", "Ingest into Delta", "python -m bench.ingest", ingest.section),
    Part("ingest_receivers", "Ingest into Delta with two receivers",
         "python -m bench.ingest --source-option receivers=2 --output "
         "bench/results/ingest_receivers.json", ingest.section),
    Part("ingest_long", "Ingest into Delta, a long QoS 1 backlog",
         "python -m bench.ingest --qos 1 --modes wal --messages 1000000 --no-paho --output "
         "bench/results/ingest_long.json", ingest.section),
    Part("sparkplug", "Sparkplug B into Delta", "python -m bench.sparkplug", sparkplug.section),
    Part("routes", "Routes: one subscription, four tables", "python -m bench.routes",
         routes.section),
    Part("sink", "Writing to MQTT", "python -m bench.sink", sink.section),
    Part("backlog_rss", "Backlog memory", "python -m bench.backlog_rss", backlog_rss.section),
    Part("latency", "Latency", "python -m bench.latency", latency.section),
    Part("scale", "Scale of cost", "python -m bench.scale", scale.section),
    Part("micro", "Costs behind code choices", "python -m bench.micro", micro.section),
    Part("chaos", "Chaos", "the chaos tests", chaos_soak.section_chaos),
    Part("chaos_soak", "Chaos soak",
         "python -m bench.chaos_soak --runs 20 (the network-faults, kill -9 and failover tests)",
         chaos_soak.section),
    Part("reconnect", "Reconnect", "python -m bench.reconnect", reconnect.section),
    Part("long_run", "A week in an hour: tables over a long run", "python -m bench.long_run",
         long_run.section),
    Part("long_run_default", "A week in an hour: the default job alone",
         "python -m bench.long_run --configs default --trigger-ms 100 --minutes 30 "
         "--log-retention 0.1 --output bench/results/long_run_default.json", long_run.section),
    Group("WAL on object storage", ingest_s3.intro, (
        Part("ingest_s3", "Into Delta: QoS 1 and 2, broker windows 20 and unbounded",
             INGEST_S3 + "ingest_s3.json", ingest_s3.section),
        Part("ingest_s3", "The receiver alone: messages and milliseconds per append", None,
             ingest_s3.section_appends),
        Part("ingest_s3_inline", "partitionData wal and inline, window 20",
             f"{INGEST} 1 2 --modes wal --s3-modes wal inline --no-paho --no-synthetic "
             "--warmup-rows 400000 --output bench/results/ingest_s3_inline.json",
             ingest_s3.section),
        Part("ingest_s3_qos2", "QoS 2, window 20, on a quiet machine",
             f"{INGEST} 2 --modes wal --s3-modes wal --inflight 20 --no-paho --no-synthetic "
             "--append-profile --output bench/results/ingest_s3_qos2.json", ingest_s3.section),
        Part("ingest_s3_long", "A long QoS 1 backlog",
             "python -m bench.ingest --messages 1000000 --repeat 3 --qos 1 --modes wal "
             "--s3-modes wal --no-paho --no-synthetic --output bench/results/ingest_s3_long.json",
             ingest_s3.section),
        Part("ingest_s3_busy", "On a busy machine", INGEST_S3 + "ingest_s3_busy.json",
             ingest_s3.section_brief),
        Part("wal_throughput", "One append per layout", "python -m bench.wal_throughput --repeat 3",
             wal_throughput.section),
    ), "What limits the S3 peer", ingest_s3.what_limits),
    Part("shared_subscription", "Shared subscription",
         "python -m bench.shared_subscription --messages 20000 --rounds 3",
         shared_subscription.section),
)  # fmt: skip


def section_machine(results: Mapping[str, Any]) -> Lines:
    rows = [
        [f"`{name}.json`", str(machine.get("date", "?")), str(machine.get("git_revision", "?")),
         f"{machine.get('cpu_model', '?')}, {machine.get('cores', '?')} cores",
         ", ".join(f"{v:.2f}" for v in load) if (load := machine.get("load_average_at_start"))
         else "—"]
        for name, data in results.items()
        if isinstance(machine := data.get("machine"), Mapping)
    ]  # fmt: skip
    first = next((d["machine"] for d in results.values() if "machine" in d), None)
    out = ["## Machine", ""]
    if first is not None:
        out += [f"Measured on: {machine_line(first)}.", ""]
    out += [
        "Each benchmark records the machine it ran on; every figure below is copied from one "
        "results file, and every ratio compares peers measured in that same run. The machine "
        "is shared: a high load average means noisy absolute figures (the ratios cancel much "
        "of it).",
        "",
        *md_table(["results", "date", "git", "CPU", "load average at start"], rows),
    ]
    return [*out, ""]


def load_results(directory: Path) -> dict[str, Any]:
    """Every ``*.json`` file in ``directory`` by name; unreadable ones as their error text."""
    results: dict[str, Any] = {}
    for path in sorted(directory.glob("*.json")):
        try:
            results[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            results[path.stem] = f"could not be read: {exc}"
    return results


def _guarded(what: str, render: Callable[[], Lines], said: str | None) -> Lines:
    """``render()``, or on results of an unexpected shape a line saying so (with ``said``)."""
    try:
        return render()
    except SHAPE_ERRORS as exc:
        log.warning("%s: unexpected shape (%r)", what, exc)
        return (
            [] if said is None else [f"*{said} an unexpected shape ({type(exc).__name__}: {exc}).*"]
        )


def _part_lines(part: Part, results: Mapping[str, Any], charts: Charts, level: str) -> Lines:
    out = [f"{level} {part.title}", ""]
    if part.command is not None:
        out += [f"`{part.command}` → `bench/results/{part.name}.json`", ""]
    data = results.get(part.name)
    if data is None or (part.command is None and not isinstance(data, Mapping)):
        return [*out, "*Not run: no results file.*", ""]
    if not isinstance(data, Mapping):
        return [*out, f"*The results file {data}.*", ""]
    body = _guarded(f"{part.name}.json", lambda: part.render(data, charts), "The results file has")
    return [*out, *(run_note(data) if part.command is not None else []), *body, ""]


def _group_lines(group: Group, results: Mapping[str, Any], charts: Charts) -> Lines:
    readable = {k: v for k, v in results.items() if isinstance(v, Mapping)}
    out = [f"## {group.title}", ""]
    out += _guarded(group.title, lambda: group.intro(readable), None)
    for part in group.parts:
        out += _part_lines(part, results, charts, "###")
    closing = _guarded(group.closing_title, lambda: group.closing(readable), "The results have")
    return [*out, f"### {group.closing_title}", "", *closing, ""]


def build_report(results: Mapping[str, Any], charts: Charts) -> str:
    out: Lines = [
        "# Benchmark report",
        "",
        "Generated by `python -m bench.report` (`make bench` runs every benchmark, then this) "
        "from `bench/results/*.json`.",
        "",
        *section_machine({k: v for k, v in results.items() if isinstance(v, Mapping)}),
    ]
    for section in SECTIONS:
        if isinstance(section, Group):
            out += _group_lines(section, results, charts)
        else:
            out += _part_lines(section, results, charts, "##")
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
