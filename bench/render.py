"""What the sections of bench/REPORT.md are made of: Markdown tables, figures, ratios, goals,
the machine of a run, and PNG charts (matplotlib, Agg). A benchmark renders its own section,
``section(data, charts)``; ``bench.report`` collects them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from connector.options.table import markdown_cell

Lines = list[str]


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


def inflight_label(inflight: object) -> str:
    """A broker's ``max_inflight_messages`` as shown: 0 is unbounded."""
    return "unbounded (0)" if inflight == 0 else str(inflight)


def stats_cells(stats: Mapping[str, Any], digits: int = 0) -> list[str]:
    return [num(stats.get(k), digits) for k in ("median", "min", "max")]


def per_repetition(stats: Mapping[str, Any]) -> str:
    return ", ".join(times(v) for v in stats.get("runs", []))


def median_range(stats: Any) -> str:
    """``median (min-max)`` of a Stats dict; the median alone when all runs agree."""
    if not isinstance(stats, Mapping):
        return "—"
    median, low, high = (stats.get(k) for k in ("median", "min", "max"))
    if low == high:
        return num(median)
    return f"{num(median)} ({num(low)}-{num(high)})"


def goal_rows(goal: Any) -> list[list[str]]:
    """Rows (goal, target, measured, met) from a goal dict or a dict of goal dicts."""
    if not isinstance(goal, Mapping):
        return []
    goal = {str(goal.get("ratio", "goal")): goal} if "met" in goal else goal
    return [
        [
            str(item.get("ratio", name)),
            str(item.get("target")),
            str(item.get("measured")),
            "met" if item["met"] else "**not met**",
        ]
        for name, item in goal.items()
        if isinstance(item, Mapping) and "met" in item
    ]


def goals_table(goal: Any) -> Lines:
    return md_table(["goal", "target", "measured", "verdict"], goal_rows(goal))


def ratio_rows(ratios: Any) -> list[list[str]]:
    if not isinstance(ratios, Mapping):
        return []
    return [
        [name, *(times(r.get(k)) for k in ("median", "min", "max"))]
        for name, r in ratios.items()
        if isinstance(r, Mapping)
    ]


def ratios_table(ratios: Any, first: str = "ratio") -> Lines:
    return md_table([first, "median", "min", "max"], ratio_rows(ratios))


def clock_notes(data: Mapping[str, Any]) -> Lines:
    clocks = data.get("clocks")
    if not isinstance(clocks, Mapping):
        return []
    return ["Clocks:", "", *(f"* **{k}**: {v}" for k, v in clocks.items()), ""]


def peer_clock_table(data: Mapping[str, Any]) -> Lines:
    """Every peer's median, min and max msg/s on each of its clocks."""
    rows = [
        [peer, clock, *stats_cells(st)]
        for peer, item in data["peers"].items()
        for clock, st in item.get("rates", {}).items()
    ]
    return md_table(["peer", "clock", "msg/s median", "min", "max"], rows)


def warmup_notes(warmup: object, peers: object) -> Lines:
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


def cpu_components_table(data: Mapping[str, Any]) -> Lines:
    """The run's ``cpu_seconds_per_100k_messages`` (peer -> component -> CPU seconds) as a
    table of the pipeline's components, a column per peer; nothing when the run has none."""
    from .cpu_sampler import NOT_THE_PIPELINE

    cpu = data.get("cpu_seconds_per_100k_messages")
    if not isinstance(cpu, Mapping) or not cpu:
        return []
    components = [
        c
        for c in next(iter(cpu.values()))
        if c not in NOT_THE_PIPELINE and any(p.get(c, 0) >= 0.005 for p in cpu.values())
    ]
    totals = [
        num(sum(v for c, v in p.items() if c not in NOT_THE_PIPELINE), 2) for p in cpu.values()
    ]
    return [
        "CPU seconds per 100,000 messages while the measured batches ran (median over the "
        "repetitions, sampled from /proc):",
        "",
        *md_table(
            ["component", *cpu],
            [*([c, *(num(p.get(c), 2) for p in cpu.values())] for c in components),
             ["total of the pipeline", *totals]],
        ),
        "",
    ]  # fmt: skip


def cpu_share_note(data: Mapping[str, Any], when: str) -> Lines:
    """The share of the machine's CPU other processes took ``when``, if the run measured it."""
    share = data.get("other_processes_cpu_share")
    text = f"Other processes and hypervisor steal took {share:.0%} of the machine's CPU {when}."
    return [] if share is None else [text]


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


class Charts:
    """PNG charts in ``directory`` (none without one), linked relative to the report."""

    def __init__(self, directory: Path | None, report_dir: Path | None = None) -> None:
        self.directory = directory
        self.report_dir = report_dir or directory
        self.written: list[Path] = []

    def draw(self, name: str, title: str, paint: Callable[[Any], None]) -> Lines:
        """Paint a figure with ``paint(plt)`` and return the Markdown image line."""
        if self.directory is None:
            return []
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return [f"*(chart {name}.png not drawn: matplotlib is not installed)*", ""]
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{name}.png"
        figure = plt.figure(figsize=(8, 4.5), dpi=100)
        try:
            paint(plt)
            figure.suptitle(title)
            figure.tight_layout()
            figure.savefig(path)
        finally:
            plt.close(figure)
        self.written.append(path)
        try:
            link = path.relative_to(self.report_dir or self.directory)
        except ValueError:
            link = path
        return [f"![{title}]({link.as_posix()})", ""]


Renderer = Callable[[Mapping[str, Any], Charts], Lines]


def print_section(data: Mapping[str, Any], render: Renderer) -> None:
    """A benchmark's section of the report, on stdout."""
    print("\n".join([*run_note(data), *render(data, Charts(None))]))
