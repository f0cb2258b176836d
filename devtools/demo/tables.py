"""Reading the demo's two Delta tables after the job stopped, from their Delta logs and Parquet
files (no second JVM): counts per device, dead-letter reasons, a sample of rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from devtools.delta_log import DeltaSnapshot

REASON_COLUMN = "reason"
"""The dead-letter table's column saying why a payload did not parse."""
SAMPLE_ROWS = 5
SAMPLE_COLUMNS = ("site", "device", "ts", "temperature", "humidity", "seq", "qos", "offset")


@dataclass
class TableReport:
    """What reading the two tables found."""

    landed: int
    dead_letter: int
    reasons: dict[str, int]
    per_device: dict[str, dict[str, int]]
    columns: list[str]
    sample: list[list[str]]
    status: dict[str, int] | None = None
    """With ``--routes``: rows of the status table per device."""


def read_tables(table: Path, dead_letter: Path, status: Path | None = None) -> TableReport:
    """Read the tables (after the job stopped): counts per device, reasons, a sample; with
    ``status``, the status table's rows per device."""
    import pyarrow.compute as pc

    rows = DeltaSnapshot.load(table).read()
    per_device: dict[str, dict[str, int]] = {}
    if rows.num_rows:
        grouped = rows.group_by("device").aggregate(
            [("seq", "count"), ("seq", "count_distinct"), ("seq", "min"), ("seq", "max")]
        )
        for r in grouped.to_pylist():
            per_device[r["device"]] = {
                "rows": r["seq_count"],
                "distinct_seq": r["seq_count_distinct"],
                "min_seq": r["seq_min"],
                "max_seq": r["seq_max"],
            }
    shown = [c for c in SAMPLE_COLUMNS if c in rows.column_names]
    sample = []
    if rows.num_rows:
        first = rows.select(shown).sort_by([("ts", "ascending"), ("device", "ascending")])
        sample = [[_cell(r[c]) for c in shown] for r in first.slice(0, SAMPLE_ROWS).to_pylist()]
    dead = DeltaSnapshot.load(dead_letter).read()
    reasons: dict[str, int] = {}
    if REASON_COLUMN in dead.column_names and dead.num_rows:
        counts = pc.value_counts(dead[REASON_COLUMN]).to_pylist()
        reasons = {str(c["values"]): int(c["counts"]) for c in counts}
    statuses = None
    if status is not None:
        devices = DeltaSnapshot.load(status).read().column("device").to_pylist()
        statuses = {str(d): devices.count(d) for d in sorted(set(devices))}
    return TableReport(rows.num_rows, dead.num_rows, reasons, per_device, shown, sample, statuses)


def _cell(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="milliseconds")
    return "null" if value is None else str(value)
