"""The source's figures over a query's progress reports as a pandas DataFrame, one row per
progress report and receiver (docs/operations.md, "Metrics in the query progress").

:func:`source_reports` is the one reader of the source's report in a progress (the JSON object
a source's ``latestOffset`` carries, :mod:`connector.spark.reader.progress_report`);
:func:`progress_frame` lays the reports out as a frame. pandas is imported on first use: the
connector does not depend on it (PySpark's ``sql`` extra and Databricks Runtime bring it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from connector.receiver.shard_handles import ShardStatus
from connector.spark.reader.progress_report import REPORT_VERSION, receiver_report

PROGRESS_COLUMNS = (
    "timestamp",
    "batchId",
    "source",
    "numInputRows",
    "inputRowsPerSecond",
    "processedRowsPerSecond",
)
"""The columns taken from the progress itself, first in every frame; ``source`` is the index of
the source in the progress's ``sources``."""


def source_reports(progress: Mapping[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The source's reports in one query progress, each with the index of its source: every
    source whose ``latestOffset`` is a JSON object with an integer ``version``: a string, as
    ``query.lastProgress`` has it, or already parsed, as in the progress's own JSON (a
    listener's ``event.progress.json``, Spark's event log). Other sources (another format, a
    latest offset not known yet) have none."""
    found = []
    for index, source in enumerate(progress.get("sources") or ()):
        text = source.get("latestOffset") if isinstance(source, Mapping) else None
        if isinstance(text, Mapping):
            value: Any = dict(text)
        elif not isinstance(text, str) or not text:
            continue
        else:
            try:
                value = json.loads(text)
            except ValueError:
                continue
        version = value.get("version") if isinstance(value, dict) else None
        if isinstance(version, int) and not isinstance(version, bool):
            found.append((index, value))
    return found


def source_receivers(progress: Mapping[str, Any]) -> list[Any]:
    """The ``receivers`` entries of the first source report in one query progress
    (:func:`source_reports`); empty without one."""
    reports = source_reports(progress)
    receivers = reports[0][1].get("receivers") if reports else None
    return receivers if isinstance(receivers, list) else []


def progress_frame(progress: Any) -> Any:
    """The source's figures as a ``pandas.DataFrame``, one row per progress report and
    receiver, in the order of the reports.

    ``progress`` is a ``StreamingQuery`` (its ``recentProgress``: the last
    ``spark.sql.streaming.numRecentProgressUpdates`` reports), one progress or an iterable of
    them; a progress is a ``StreamingQueryProgress``, a dict or its JSON text. Columns:
    :data:`PROGRESS_COLUMNS` (``timestamp`` as a UTC datetime), ``receiver``, then every
    scalar field of the receiver's entry. A field that counts by name (``brokerFaults``)
    becomes its total under its own name plus one ``<field>.<name>`` column per name seen (0
    where a receiver has none); other nested values are left out. Progress without the
    source's report gives no row; a report of another ``version`` than
    :data:`~connector.spark.reader.progress_report.REPORT_VERSION` raises ``ValueError``, as its
    fields may mean something else. With no row the frame has the columns of the current
    report's shape.
    """
    try:
        import pandas as pd
    except ImportError as missing:
        raise ImportError(
            "progress_frame needs pandas, which the connector does not install: "
            "pip install pandas (or PySpark's 'sql' extra, pyspark[sql])"
        ) from missing
    rows: list[dict[str, Any]] = []
    counted: set[str] = set()
    for item in _progresses(progress):
        for index, report in source_reports(item):
            if report["version"] != REPORT_VERSION:
                raise ValueError(
                    f"the source's report in the progress of batch {item.get('batchId')} has "
                    f"version {report['version']}; this connector reads version "
                    f"{REPORT_VERSION} (docs/operations.md, 'Metrics in the query progress')"
                )
            head = {
                "timestamp": item.get("timestamp"),
                "batchId": item.get("batchId"),
                "source": index,
                "numInputRows": item.get("numInputRows"),
                "inputRowsPerSecond": item.get("inputRowsPerSecond"),
                "processedRowsPerSecond": item.get("processedRowsPerSecond"),
            }
            for entry in report.get("receivers") or ():
                if isinstance(entry, Mapping):
                    rows.append({**head, **_flat(entry, counted)})
    shape = _flat(receiver_report(0, ShardStatus("", 0, 0, 0)), counted)
    columns = _ordered([*PROGRESS_COLUMNS, *shape, *(key for row in rows for key in row)], counted)
    frame = pd.DataFrame(rows, columns=columns)
    frame["timestamp"] = pd.to_datetime(frame["timestamp"], utc=True)
    for name in ("inputRowsPerSecond", "processedRowsPerSecond"):
        frame[name] = frame[name].astype("float64")
    for name in columns:
        if "." in name and name.split(".", 1)[0] in counted:
            frame[name] = frame[name].fillna(0).astype("int64")
    return frame


def _progresses(progress: Any) -> list[Mapping[str, Any]]:
    """The progress reports ``progress`` stands for (see :func:`progress_frame`)."""
    if progress is None:
        return []
    if not isinstance(progress, Mapping | str) and hasattr(progress, "recentProgress"):
        progress = progress.recentProgress
    if isinstance(progress, Mapping | str):
        progress = [progress]
    if not isinstance(progress, Iterable):
        raise TypeError(f"not a query or progress reports: {type(progress).__name__}")
    found: list[Mapping[str, Any]] = []
    for item in progress:
        value = json.loads(item) if isinstance(item, str) else item
        if not isinstance(value, Mapping):
            raise TypeError(f"not a progress report: {type(item).__name__}")
        found.append(value)
    return found


def _is_count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _flat(entry: Mapping[str, Any], counted: set[str]) -> dict[str, Any]:
    """A receiver's entry as columns: scalars as they are, counts by name as their total and
    ``<field>.<name>`` (the field's name goes into ``counted``), other nested values left out."""
    flat: dict[str, Any] = {}
    for key, value in entry.items():
        if value is None or isinstance(value, bool | int | float | str):
            flat[key] = value
        elif isinstance(value, Mapping) and all(_is_count(n) for n in value.values()):
            counted.add(key)
            flat[key] = sum(value.values())
            flat.update({f"{key}.{name}": n for name, n in value.items()})
    return flat


def _ordered(names: Iterable[str], counted: set[str]) -> list[str]:
    """``names`` once each in order of first appearance, the ``<field>.<name>`` columns sorted
    right after their field's total."""
    unique = list(dict.fromkeys(names))
    parts = [n for n in unique if not ("." in n and n.split(".", 1)[0] in counted)]
    columns: list[str] = []
    for name in parts:
        columns.append(name)
        if name in counted:
            columns += sorted(n for n in unique if n.startswith(f"{name}.") and n not in parts)
    return columns
