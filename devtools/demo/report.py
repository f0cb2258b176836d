"""The demo's report: the checks the exit status depends on (``report.json``) and the text
printed at the end, with the lines of PySpark that read the tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from devtools.demo.fleet import Device
from devtools.demo.paths import DemoPaths
from devtools.demo.tables import TableReport


def build_report(
    paths: DemoPaths,
    fleet: Sequence[Device],
    published: int,
    tables: TableReport,
    timings: dict[str, float],
) -> dict[str, Any]:
    """The machine-readable report, with the checks the exit status depends on."""
    problems: list[str] = []
    for device in fleet:
        got = tables.per_device.get(device.name)
        want = device.valid
        if got is None:
            if want:
                problems.append(f"{device.name}: no rows, {want} published")
            continue
        if got["rows"] != want or got["distinct_seq"] != want:
            problems.append(
                f"{device.name}: {got['rows']} rows with {got['distinct_seq']} distinct seq, "
                f"{want} published"
            )
        elif want and (got["min_seq"], got["max_seq"]) != (0, want - 1):
            problems.append(f"{device.name}: seq {got['min_seq']}..{got['max_seq']}")
    unknown = sorted(set(tables.per_device) - {d.name for d in fleet})
    if unknown:
        problems.append(f"rows from unknown devices: {unknown}")
    valid = sum(d.valid for d in fleet)
    malformed = sum(d.malformed for d in fleet)
    statuses = sum(tables.status.values()) if tables.status is not None else 0
    if tables.status is not None:
        sent = {d.name: len(d.statuses) for d in fleet if d.statuses}
        if tables.status != sent:
            problems.append(f"status rows per device {tables.status}, published {sent}")
    if tables.landed + tables.dead_letter + statuses != published:
        problems.append(
            f"landed {tables.landed} + dead letter {tables.dead_letter} + status {statuses} "
            f"!= published {published}"
        )
    if tables.dead_letter != malformed:
        problems.append(f"{tables.dead_letter} dead-letter rows for {malformed} malformed")
    return {
        "ok": not problems,
        "problems": problems,
        "published": {
            "total": published,
            "planned": sum(len(d.messages()) for d in fleet),
            "valid": valid,
            "malformed": malformed,
            "by_qos": {str(q): sum(len(d.messages()) for d in fleet if d.qos == q) for q in (1, 2)},
            "statuses": sum(len(d.statuses) for d in fleet),
            "devices": {
                d.name: {"site": d.site, "qos": d.qos, "valid": d.valid, "malformed": d.malformed}
                for d in fleet
            },
        },
        "landed": tables.landed,
        "dead_letter": tables.dead_letter,
        "status": statuses if tables.status is not None else None,
        "dead_letter_reasons": tables.reasons,
        "tables": {
            "telemetry": str(paths.table),
            "dead_letter": str(paths.dead_letter),
            "checkpoint": str(paths.checkpoint),
            **({"status": str(paths.status_table)} if tables.status is not None else {}),
        },
        "data_dir": str(paths.root),
        "job_log": str(paths.job_log),
        "sample": {"columns": tables.columns, "rows": tables.sample},
        "timings_s": timings,
    }


def format_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain text table."""
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def read_snippet(table: str, dead_letter: str, status: str | None = None) -> list[str]:
    """Lines of PySpark that read the demo's tables (Delta jars from ``make setup``); the
    status table's VARIANT by a path into it."""
    status_lines = [
        f'spark.read.format("delta").load("{status}").selectExpr('
        '"payload:state::string AS state").groupBy("state").count().show()'
    ]
    return [
        "from streaming_jobs.spark_session import local_spark",
        'spark = local_spark("demo-read")',
        f'rows = spark.read.format("delta").load("{table}")',
        'rows.groupBy("site", "device").count().orderBy("device").show()',
        f'spark.read.format("delta").load("{dead_letter}").groupBy("reason").count()'
        ".show(truncate=False)",
        *(status_lines if status else []),
    ]


HOW_TO_READ = "read them    with .venv/bin/python (this repository's virtualenv):"
"""The line that introduces the PySpark snippet in the printed report."""


def print_report(report: dict[str, Any], kept: bool) -> None:
    """The human-readable report on stdout; when the data is kept, how to read the tables."""
    pub = report["published"]
    status = report.get("status")
    total = report["landed"] + report["dead_letter"] + (status or 0)
    tables = report["tables"]
    lines = [
        "",
        "=== MQTT -> Delta demo report ===",
        f"published    {pub['total']} messages acknowledged by the broker (QoS 1: "
        f"{pub['by_qos']['1']}, QoS 2: {pub['by_qos']['2']}; {pub['valid']} valid, "
        f"{pub['malformed']} malformed)",
        f"landed       {report['landed']} rows in {report['tables']['telemetry']}",
        f"dead letter  {report['dead_letter']} rows in {report['tables']['dead_letter']}",
        *(
            f"             {count:>5} x {reason}"
            for reason, count in sorted(report["dead_letter_reasons"].items())
        ),
        *(
            [f"status       {status} rows in {tables['status']} (route 2: VARIANT)"]
            if status is not None
            else []
        ),
        f"check        landed + dead letter{' + status' if status is not None else ''} = "
        f"{total}, published = {pub['total']}: "
        + ("match" if total == pub["total"] else "MISMATCH"),
        "             every device's readings seq 0..n-1 exactly once: "
        + ("yes" if report["ok"] else "NO"),
        *(f"  problem:   {problem}" for problem in report["problems"]),
        f"job summary  {report.get('job_summary') or '(none logged)'}",
        "sample       the first readings in the typed table:",
        "  "
        + format_table(report["sample"]["columns"], report["sample"]["rows"]).replace("\n", "\n  "),
    ]
    t = report["timings_s"]
    lines.append(
        f"timeline     all published at {t.get('published')} s, all landed at "
        f"{t.get('landed')} s, job stopped at {t.get('job_stopped')} s, "
        f"report at {t.get('report')} s"
    )
    if kept:
        lines += [
            f"data         kept in {report['data_dir']} (report.json, ingest.log, broker/, "
            "checkpoints/; the next run starts fresh, --clean removes it at the end)",
            f"tables       {tables['telemetry']}",
            f"             {tables['dead_letter']}",
            *([f"             {tables['status']}"] if "status" in tables else []),
            HOW_TO_READ,
            *(
                f"  {line}"
                for line in read_snippet(
                    tables["telemetry"], tables["dead_letter"], tables.get("status")
                )
            ),
        ]
    else:
        lines.append(
            f"data         {report['data_dir']} is removed now (--clean); without it the "
            "tables stay there to read"
        )
    print("\n".join(lines))
