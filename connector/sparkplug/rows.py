"""Sparkplug messages as rows: one per metric, and one for a message that carries none (STATE,
a DDEATH, a payload that did not decode). :class:`Rows` collects them column by column, in
:data:`COLUMNS` order; the Spark source gives them Arrow types (``connector.source``).

The value of a metric lands in the column of its datatype (:data:`VALUE_COLUMN`): integers up to
UInt32 in ``long_value``, UInt64 in ``ulong_value`` (decimal(20,0) in Spark), Float and Double
in ``double_value``, String, Text and UUID in ``string_value``, Bytes and File in
``bytes_value``, DateTime in ``datetime_value`` (microseconds here), the array types in the array
column of their item, DataSet and Template as JSON text (the form is in docs/sparkplug.md). A
metric whose datatype is unknown keeps its value in the column of the field it came in, and a
``reason``. Properties are JSON text; the ``Quality`` property (section 6.4.10) and ``engUnit``
are promoted to columns of their own.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

from .datatypes import (
    INT_WIDTHS,
    DataType,
    DatatypeError,
    integer,
    kind_of,
    metric_value,
    name_of,
)
from .payload import DataSet, Metric, Payload, PropertySet, PropertyValue, Template, Value
from .state import SEQ_MODULO, Context, Members, Resolved
from .topics import MessageType, SparkplugTopic

COLUMNS: tuple[str, ...] = (
    "group_id",
    "edge_node_id",
    "device_id",
    "message_type",
    "seq",
    "bd_seq",
    "payload_timestamp",
    "metric_index",
    "metric_name",
    "alias",
    "datatype",
    "metric_timestamp",
    "is_null",
    "is_historical",
    "is_transient",
    "long_value",
    "ulong_value",
    "double_value",
    "boolean_value",
    "string_value",
    "bytes_value",
    "datetime_value",
    "long_array",
    "ulong_array",
    "double_array",
    "boolean_array",
    "string_array",
    "datetime_array",
    "dataset_value",
    "template_value",
    "properties",
    "quality",
    "eng_unit",
    "reason",
    "seq_gap",
    "missing_seqs",
    "event",
    "death_matched",
    "host_id",
    "host_online",
    "payload",
    "topic",
    "qos",
    "timestamp",
    "offset",
    "receiver",
)
"""The columns of a Sparkplug row, in order (docs/sparkplug.md says what each holds)."""

VALUE_COLUMNS = COLUMNS[COLUMNS.index("long_value") : COLUMNS.index("template_value") + 1]
"""The columns a metric's value may land in (one of them per row)."""

VALUE_COLUMN: dict[int, str] = {
    **{t: "long_value" for t in INT_WIDTHS if t not in (DataType.UInt64, DataType.DateTime)},
    DataType.UInt64: "ulong_value",
    DataType.DateTime: "datetime_value",
    DataType.Float: "double_value",
    DataType.Double: "double_value",
    DataType.Boolean: "boolean_value",
    DataType.String: "string_value",
    DataType.Text: "string_value",
    DataType.UUID: "string_value",
    DataType.Bytes: "bytes_value",
    DataType.File: "bytes_value",
    DataType.DataSet: "dataset_value",
    DataType.Template: "template_value",
    DataType.Int8Array: "long_array",
    DataType.Int16Array: "long_array",
    DataType.Int32Array: "long_array",
    DataType.Int64Array: "long_array",
    DataType.UInt8Array: "long_array",
    DataType.UInt16Array: "long_array",
    DataType.UInt32Array: "long_array",
    DataType.UInt64Array: "ulong_array",
    DataType.FloatArray: "double_array",
    DataType.DoubleArray: "double_array",
    DataType.BooleanArray: "boolean_array",
    DataType.StringArray: "string_array",
    DataType.DateTimeArray: "datetime_array",
}
"""The column each datatype's value lands in."""

_FIELD_COLUMN = {
    10: "long_value",
    11: "long_value",
    12: "double_value",
    13: "double_value",
    14: "boolean_value",
    15: "string_value",
    16: "bytes_value",
}
"""Where a value of an unknown datatype lands, by the field it came in."""

QUALITY = "Quality"
ENG_UNIT = "engUnit"
EVENT_TYPES = frozenset(
    {
        MessageType.NBIRTH,
        MessageType.DBIRTH,
        MessageType.NDEATH,
        MessageType.DDEATH,
        MessageType.STATE,
    }
)
"""The messages the events table holds, one row each (the row of their first metric)."""

_MESSAGE_COLUMNS = (
    *("group_id", "edge_node_id", "device_id", "message_type", "seq", "bd_seq"),
    *("payload_timestamp", "seq_gap", "missing_seqs", "death_matched", "host_id"),
    *("host_online", "topic", "qos", "timestamp", "offset", "receiver"),
)
"""The columns all rows of one message share."""
_METRIC_COLUMNS = tuple(c for c in COLUMNS if c not in _MESSAGE_COLUMNS)
"""The columns of each row's own."""

_SIGNED_LONG = 1 << 63
_INT32 = -(1 << 31)


class Rows:
    """Rows collected column by column (:data:`COLUMNS`): the columns every row of a message
    shares are extended once per message, the others once per row."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
        self._shared = [(name, self.columns[name]) for name in _MESSAGE_COLUMNS]
        self._own = [(name, self.columns[name]) for name in _METRIC_COLUMNS]

    def __len__(self) -> int:
        return len(self.columns["offset"])

    def add(
        self,
        mqtt: dict[str, Any],
        topic: SparkplugTopic | None,
        payload: Payload | None,
        context: Context | None,
        *,
        reason: str | None = None,
        raw: bytes | None = None,
        host_online: bool | None = None,
    ) -> None:
        """The rows of one message. ``mqtt``: its ``topic``, ``qos``, ``timestamp`` (receive
        time, microseconds), ``offset`` and ``receiver``. Without a ``payload`` (STATE, or
        one that did not decode: ``reason`` and its ``raw`` bytes) one row for the message."""
        head = {
            "group_id": topic.group_id or None if topic else None,
            "edge_node_id": topic.edge_node_id or None if topic else None,
            "device_id": topic.device_id if topic else None,
            "message_type": topic.message_type.value if topic else None,
            "host_id": topic.host_id if topic else None,
            "host_online": host_online,
            **mqtt,
        }
        if context is not None:
            head.update(
                bd_seq=context.bd_seq,
                death_matched=context.death_matched,
                seq_gap=context.seq_gap,
                missing_seqs=context.missing_seqs or None,
            )
        why = reason or (context.reason if context is not None else None)
        if payload is not None:
            head.update(seq=payload.seq, payload_timestamp=_ms_to_us(payload.timestamp))
            if payload.seq is not None and not 0 <= payload.seq < SEQ_MODULO:
                head["seq"] = None
                why = _join(
                    why,
                    f"seq {payload.seq} is outside 0-255 "
                    "([tck-id-payloads-sequence-num-incrementing])",
                )
            if payload.timestamp is not None and head["payload_timestamp"] is None:
                why = _join(why, f"payload timestamp {payload.timestamp} ms is out of range")
        event = topic is not None and topic.message_type in EVENT_TYPES
        if payload is None or not payload.metrics:
            own = [{"reason": why, "payload": raw if reason else None, "event": event}]
        else:
            assert context is not None
            resolved = context.metrics
            own = []
            for index, metric in enumerate(payload.metrics):
                meta = (
                    resolved[index]
                    if index < len(resolved)
                    else Resolved(metric.name, metric.datatype)
                )
                row = _metric_columns(metric, meta)
                row["metric_index"] = index
                row["event"] = event and not index
                row["reason"] = _join(why, meta.reason, *row.pop("_reasons"))
                own.append(row)
        count = len(own)
        for name, column in self._shared:
            column.extend([head.get(name)] * count)
        for name, column in self._own:
            column.extend([row.get(name) for row in own])


def _metric_columns(metric: Metric, meta: Resolved) -> dict[str, Any]:
    reasons: list[str] = []
    row: dict[str, Any] = {
        "metric_name": meta.name,
        "alias": metric.alias,
        "datatype": name_of(meta.datatype),
        "metric_timestamp": _ms_to_us(metric.timestamp),
        "is_null": metric.is_null or metric.value.field is None,
        "is_historical": metric.is_historical,
        "is_transient": metric.is_transient,
        "_reasons": reasons,
    }
    if metric.alias is not None and metric.alias >= _SIGNED_LONG:
        row["alias"] = None
        reasons.append(f"alias {metric.alias} is above a signed 64-bit integer")
    if metric.timestamp is not None and row["metric_timestamp"] is None:
        reasons.append(f"metric timestamp {metric.timestamp} ms is out of range")
    if metric.properties is not None:
        props = properties_json(metric.properties)
        row["properties"] = to_json(props, sort_keys=True)
        quality = props.get(QUALITY)
        row["quality"] = (
            quality if isinstance(quality, int) and _INT32 <= quality < -_INT32 else None
        )
        unit = props.get(ENG_UNIT)
        row["eng_unit"] = unit if isinstance(unit, str) else None
    if metric.is_null or metric.value.field is None:
        return row
    try:
        _put_value(row, meta.datatype, metric.value, meta.members, reasons)
    except DatatypeError as exc:
        reasons.append(str(exc))
        _put_raw(row, metric.value)
    return row


def _put_value(
    row: dict[str, Any],
    datatype: int | None,
    value: Value,
    members: Members | None = None,
    reasons: list[str] | None = None,
) -> None:
    if datatype is None:
        _put_raw(row, value)
        return
    typed = metric_value(datatype, value.field, value.raw)
    column = VALUE_COLUMN.get(datatype)
    if column is None:
        raise DatatypeError(f"a {name_of(datatype)} metric has no value column")
    if column == "datetime_value":
        typed = _datetime(typed)
    elif column == "datetime_array":
        typed = [_datetime(v) for v in typed]
    elif column == "dataset_value":
        typed = to_json(dataset_json(typed))
    elif column == "template_value":
        typed = to_json(template_json(typed, members, reasons))
    row[column] = typed


def _put_raw(row: dict[str, Any], value: Value) -> None:
    """A value whose datatype is unknown or does not fit: in the column of its field."""
    column = _FIELD_COLUMN.get(value.field or 0)
    if column is None:
        return
    raw = value.raw
    if column == "long_value" and isinstance(raw, int) and raw >= _SIGNED_LONG:
        column = "ulong_value"  # above a signed 64-bit integer
    row[column] = raw


MIN_MS = -62_135_596_800_000
"""0001-01-01T00:00:00Z in milliseconds since the epoch: the first instant Spark's TIMESTAMP
holds."""
MAX_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z: the last."""


def _ms_to_us(ms: int | None) -> int | None:
    """Milliseconds since the epoch as microseconds; None when Spark cannot hold the instant."""
    if ms is None or not MIN_MS <= ms <= MAX_MS:
        return None
    return ms * 1000


def _datetime(ms: int) -> int:
    """A DateTime value as microseconds; DatatypeError when Spark cannot hold it (the row keeps
    the milliseconds in ``long_value`` and says why)."""
    us = _ms_to_us(ms)
    if us is None:
        raise DatatypeError(f"DateTime {ms} ms is outside 0001-01-01 to 9999-12-31")
    return us


def _join(*reasons: str | None) -> str | None:
    return "; ".join(r for r in reasons if r) or None


# -------------------------------------------------------------------------- JSON forms


def typed_scalar(datatype: int | None, value: Value) -> Any:
    """A property, parameter or data set value of ``datatype``, for JSON: integers with
    their sign (as a metric's), floats as floats, DateTime as milliseconds."""
    if value.field is None:
        return None
    raw = value.raw
    if datatype is not None and isinstance(raw, int) and not isinstance(raw, bool):
        kind = kind_of(datatype)
        if kind in INT_WIDTHS:
            return integer(kind, raw)
    return raw


def properties_json(props: PropertySet) -> dict[str, Any]:
    """A property set as a JSON object: key -> typed value (a nested set as an object, a set
    list as a list of objects, null for ``is_null``)."""
    return {key: _property_json(value) for key, value in zip(props.keys, props.values, strict=True)}


def _property_json(prop: PropertyValue) -> Any:
    if prop.is_null:
        return None
    raw = prop.value.raw
    if isinstance(raw, PropertySet):
        return properties_json(raw)
    if isinstance(raw, list):
        return [properties_json(p) for p in raw]
    return typed_scalar(prop.type, prop.value)


def dataset_json(dataset: DataSet) -> dict[str, Any]:
    """A DataSet: ``{"columns": [...], "types": ["Int32", ...], "rows": [[...], ...]}``,
    each cell typed by its column's type."""
    types = list(dataset.types)
    return {
        "columns": list(dataset.columns),
        "types": [name_of(t) for t in types],
        "rows": [
            [typed_scalar(types[i] if i < len(types) else None, cell) for i, cell in enumerate(row)]
            for row in dataset.rows
        ],
    }


def template_json(
    template: Template, members: Members | None = None, reasons: list[str] | None = None
) -> dict[str, Any]:
    """A Template: its version, reference, whether a definition, its parameters and its
    metrics (each with name, alias, datatype and value, recursively). A member without a
    datatype takes the one ``members`` (from the birth) gives; one that has none keeps the
    value as it came, and ``reasons`` gets why."""
    return {
        "version": template.version,
        "template_ref": template.template_ref,
        "is_definition": template.is_definition,
        "parameters": [
            {"name": p.name, "type": name_of(p.type), "value": typed_scalar(p.type, p.value)}
            for p in template.parameters
        ],
        "metrics": [_template_metric(m, members or {}, reasons) for m in template.metrics],
    }


def _template_metric(metric: Metric, members: Members, reasons: list[str] | None) -> dict[str, Any]:
    known = members.get(metric.name, (None, None)) if metric.name is not None else (None, None)
    datatype = metric.datatype if metric.datatype is not None else known[0]
    value: Any = None
    if not metric.is_null and metric.value.field is not None:
        value = metric.value.raw
        if datatype is None:
            if reasons is not None:
                reasons.append(
                    f"template member {metric.name!r} has no datatype here or in a birth"
                )
        else:
            try:
                value = metric_value(datatype, metric.value.field, value)
            except DatatypeError as exc:
                if reasons is not None:
                    reasons.append(f"template member {metric.name!r}: {exc}")
        if isinstance(value, DataSet):
            value = dataset_json(value)
        elif isinstance(value, Template):
            value = template_json(value, known[1], reasons)
    return {
        "name": metric.name,
        "alias": metric.alias,
        "datatype": name_of(datatype),
        "timestamp": metric.timestamp,
        "is_null": metric.is_null,
        "value": value,
    }


def to_json(value: Any, *, sort_keys: bool = False) -> str:
    """``value`` as JSON text: bytes as base64, NaN and infinities as the strings ``"nan"``,
    ``"inf"`` and ``"-inf"`` (JSON has no such numbers)."""
    return json.dumps(_finite(value), sort_keys=sort_keys, default=_json_default, allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON")
