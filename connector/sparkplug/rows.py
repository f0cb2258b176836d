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
from .payload import (
    METRIC_FIELD_NUMBERS,
    DataSet,
    Metric,
    Payload,
    PropertySet,
    PropertyValue,
    Template,
    optional,
    value_of,
)
from .state import SEQ_MODULO, Context, Members, Resolved, resolve
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

MESSAGE_COLUMNS = (
    *("group_id", "edge_node_id", "device_id", "message_type", "seq", "bd_seq"),
    *("payload_timestamp", "seq_gap", "missing_seqs", "death_matched", "host_id"),
    *("host_online", "topic", "qos", "timestamp", "offset", "receiver"),
)
"""The columns all rows of one message share."""
_METRIC_COLUMNS = tuple(c for c in COLUMNS if c not in MESSAGE_COLUMNS)
"""The columns of each row's own."""

_SIGNED_LONG = 1 << 63
_INT32 = -(1 << 31)

DENSE_COLUMNS = (
    *("metric_index", "metric_name", "alias", "datatype", "metric_timestamp", "is_null"),
    *("is_historical", "is_transient", "event"),
)
"""The columns of a row's own that every row sets."""
SPARSE_COLUMNS = tuple(c for c in _METRIC_COLUMNS if c not in DENSE_COLUMNS)
"""The columns of a row's own that most rows leave null: the value columns (one per row),
properties and what they promote, the reason, the payload of a message that did not decode."""

_DATATYPE_NAMES: dict[int, str] = {int(kind): kind.name for kind in DataType}

_LONG_FIELDS = frozenset({"int_value", "long_value"})


def _fast_values() -> dict[tuple[int | None, str | None], tuple[str, int, int]]:
    """(datatype, value field) -> (column, bits, sign bit) for the scalar datatypes whose value
    lands as it came, integers masked to ``bits`` and sign-extended from ``sign`` (0: unsigned,
    no mask: bits 0); what :func:`connector.sparkplug.datatypes.metric_value` gives them."""
    out: dict[tuple[int | None, str | None], tuple[str, int, int]] = {}
    for kind, (bits, signed) in INT_WIDTHS.items():
        if kind is DataType.DateTime:
            continue
        for field in _LONG_FIELDS:
            out[int(kind), field] = (VALUE_COLUMN[kind], bits, 1 << (bits - 1) if signed else 0)
    for kind, field in (
        (DataType.Float, "float_value"),
        (DataType.Double, "double_value"),
        (DataType.Boolean, "boolean_value"),
        (DataType.String, "string_value"),
        (DataType.Text, "string_value"),
        (DataType.UUID, "string_value"),
        (DataType.Bytes, "bytes_value"),
        (DataType.File, "bytes_value"),
    ):
        out[int(kind), field] = (VALUE_COLUMN[kind], 0, 0)
    return out


_FAST_VALUES = _fast_values()

_EXPECTED_FIELD: dict[int | None, str] = {
    **{
        int(kind): "long_value" if bits == 64 else "int_value"
        for kind, (bits, _) in INT_WIDTHS.items()
        if kind is not DataType.DateTime
    },
    **{kind: field for kind, field in _FAST_VALUES if field not in _LONG_FIELDS and field},
}
"""The value field each scalar datatype travels in (integers: ``int_value`` up to 32 bits,
``long_value`` above), for :meth:`Rows._metrics`' first read."""

_BY_DATATYPE: dict[int | None, tuple[str | None, str | None, tuple[str, int, int] | None]] = {
    kind: (name, _EXPECTED_FIELD.get(kind), _FAST_VALUES.get((kind, _EXPECTED_FIELD.get(kind))))
    for kind, name in _DATATYPE_NAMES.items()
}
"""Per datatype code: its name, the field its value travels in, how that value lands."""
_NO_DATATYPE: tuple[str | None, str | None, tuple[str, int, int] | None] = (None, None, None)

_SCALAR_FIELDS = frozenset(
    {"int_value", "long_value", "float_value", "double_value", "boolean_value", "string_value"}
    | {"bytes_value", None}
)
"""The metric value fields (None: no value) the per-metric loop of :meth:`Rows.add` takes on
its own; a data set, template or extension goes through :func:`_metric_columns`."""


class Rows:
    """Rows collected column by column (:data:`COLUMNS`), in three kinds of store that the
    Arrow conversion (``connector.spark.reader.sparkplug_schema``) turns into arrays in bulk:
    the columns all rows of a message share hold one value per message (``shared``, with
    ``row_message`` the message of each row); :data:`DENSE_COLUMNS` one value per row;
    :data:`SPARSE_COLUMNS` only the rows that have a value (``sparse``: row -> value).
    :attr:`columns` gives every column as a list, a value per row."""

    def __init__(self) -> None:
        self.messages: list[tuple[Any, ...]] = []
        """A tuple per message: its value of each column of :data:`MESSAGE_COLUMNS`."""
        self.row_message: list[int] = []
        self.dense: dict[str, list[Any]] = {name: [] for name in DENSE_COLUMNS}
        self.sparse: dict[str, dict[int, Any]] = {name: {} for name in SPARSE_COLUMNS}
        self._columns: dict[str, list[Any]] | None = None

    def __len__(self) -> int:
        return len(self.row_message)

    @property
    def shared(self) -> dict[str, list[Any]]:
        """Each column of :data:`MESSAGE_COLUMNS`: its value per message."""
        if not self.messages:
            return {name: [] for name in MESSAGE_COLUMNS}
        return dict(zip(MESSAGE_COLUMNS, map(list, zip(*self.messages, strict=True)), strict=True))

    @property
    def columns(self) -> dict[str, list[Any]]:
        """Every column, in :data:`COLUMNS` order, a value per row."""
        if self._columns is None:
            count = len(self.row_message)
            shared = self.shared
            out: dict[str, list[Any]] = {}
            for name in COLUMNS:
                if name in self.dense:
                    out[name] = self.dense[name]
                elif name in self.sparse:
                    column: list[Any] = [None] * count
                    for row, value in self.sparse[name].items():
                        column[row] = value
                    out[name] = column
                else:
                    per_message = shared[name]
                    out[name] = [per_message[m] for m in self.row_message]
            self._columns = out
        return self._columns

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
        plain: bool = False,
        properties: bool = True,
        flags: bool = True,
    ) -> None:
        """The rows of one message. ``mqtt``: its ``topic``, ``qos``, ``timestamp`` (receive
        time, microseconds), ``offset`` and ``receiver``. Without a ``payload`` (STATE, or
        one that did not decode: ``reason`` and its ``raw`` bytes) one row for the message.
        ``plain``: the decoder found no field set to its default on the wire, so an absent
        field reads as its default and needs no presence check; ``properties`` False: no
        metric has properties; ``flags`` False: no metric has ``is_null``, ``is_historical``
        or ``is_transient`` true (:func:`connector.sparkplug.payload.read_message` says all
        three)."""
        self._columns = None
        message = len(self.messages)
        bd_seq: int | None = None
        matched: bool | None = None
        gap: bool | None = None
        missing: list[int] | None = None
        if context is not None:
            bd_seq, matched = context.bd_seq, context.death_matched
            gap, missing = context.seq_gap, context.missing_seqs or None
        why = reason or (context.reason if context is not None else None)
        seq = stamp = None
        if payload is not None:
            seq = payload.seq if plain else optional(payload, "seq")
            ms = payload.timestamp if plain else optional(payload, "timestamp")
            if plain and not seq:
                seq = None
            if plain and not ms:
                ms = None
            stamp = _ms_to_us(ms)
            if seq is not None and not 0 <= seq < SEQ_MODULO:
                why = _join(
                    why,
                    f"seq {seq} is outside 0-255 ([tck-id-payloads-sequence-num-incrementing])",
                )
                seq = None
            if ms is not None and stamp is None:
                why = _join(why, f"payload timestamp {ms} ms is out of range")
        get = mqtt.get
        if topic is not None:
            self.messages.append(
                (topic.group_id or None, topic.edge_node_id or None, topic.device_id,
                 topic.message_type.value, seq, bd_seq, stamp, gap, missing, matched,
                 topic.host_id, host_online, get("topic"), get("qos"), get("timestamp"),
                 get("offset"), get("receiver"))
            )  # fmt: skip
        else:
            self.messages.append(
                (None, None, None, None, seq, bd_seq, stamp, gap, missing, matched, None,
                 host_online, get("topic"), get("qos"), get("timestamp"), get("offset"),
                 get("receiver"))
            )  # fmt: skip
        event = topic is not None and topic.message_type in EVENT_TYPES
        dense, sparse = self.dense, self.sparse
        first = len(self.row_message)
        if payload is None or not payload.metrics:
            self.row_message.append(message)
            for name in DENSE_COLUMNS:
                dense[name].append(event if name == "event" else None)
            if why is not None:
                sparse["reason"][first] = why
            if reason and raw is not None:
                sparse["payload"][first] = raw
            return
        assert context is not None
        self._metrics(payload, context, why, event, first, plain, properties, flags)
        self.row_message.extend([message] * (len(dense["metric_index"]) - first))

    def _metrics(
        self,
        payload: Payload,
        context: Context,
        why: str | None,
        event: bool,
        row: int,
        plain: bool,
        properties: bool,
        flags: bool,
    ) -> None:
        """A row per metric, from ``row`` on: scalar values in this loop, anything else
        through :func:`_metric_columns`."""
        dense, sparse = self.dense, self.sparse
        name_column, alias_column = dense["metric_name"], dense["alias"]
        datatype_column, stamp_column = dense["datatype"], dense["metric_timestamp"]
        null_column = dense["is_null"]
        historical_column, transient_column = dense["is_historical"], dense["is_transient"]
        reasons_column = sparse["reason"]
        lookup = context.lookup
        resolved = context.metrics
        scope = context.scope
        aliases = scope.aliases if scope is not None else None
        datatypes = scope.datatypes if scope is not None else None
        fast_values, by_datatype = _FAST_VALUES, _BY_DATATYPE
        scalar_fields = _SCALAR_FIELDS
        first = row
        index = -1
        for metric in payload.metrics:
            index += 1
            if plain:
                name = metric.name or None
                alias = metric.alias or None
                own = metric.datatype or None
                ms = metric.timestamp or None
            else:
                name = optional(metric, "name")
                alias = optional(metric, "alias")
                own = optional(metric, "datatype")
                ms = optional(metric, "timestamp")
            problem = None
            if not lookup:
                meta = resolved[index] if index < len(resolved) else Resolved(name, own)
                name, datatype, problem = meta.name, meta.datatype, meta.reason
            elif name is not None:
                datatype = own
                if datatype is None and datatypes is not None:
                    datatype = datatypes.get(name)
                if datatype is None:
                    problem = f"no datatype for metric {name!r}"
            elif alias is None:
                datatype, problem = own, "a metric with neither name nor alias"
            else:
                found = aliases.get(alias) if aliases is not None else None
                if found is None:
                    datatype, problem = own, f"alias {alias} is in no birth of this session"
                else:
                    name, datatype = found
                    if own is not None:
                        datatype = own
            # The value: in the field its datatype travels in when that field holds other than
            # its default (a oneof holds one field); else whichever field the metric set.
            dtname, expected, fast = by_datatype.get(datatype, _NO_DATATYPE)
            value: Any = getattr(metric, expected) if expected is not None else None
            if value:
                which = expected
            else:
                fast = None
                which = metric.WhichOneof("value")
                if which is not None:
                    value = getattr(metric, which)
            if which not in scalar_fields or (properties and metric.HasField("properties")):
                if lookup:
                    meta = resolve(scope, metric, context.node)
                self._put_row(row, _metric_columns(metric, meta), why, meta)
                row += 1
                continue
            reasons = None if why is None and problem is None else [why, problem]
            if alias is not None and alias >= _SIGNED_LONG:
                reasons = [*(reasons or ()), f"alias {alias} is above a signed 64-bit integer"]
                alias = None
            if ms is None:
                stamp = None
            elif MIN_MS <= ms <= MAX_MS:
                stamp = ms * 1000
            else:
                stamp = None
                reasons = [*(reasons or ()), f"metric timestamp {ms} ms is out of range"]
            name_column.append(name)
            alias_column.append(alias)
            datatype_column.append(dtname if datatype is None or dtname else name_of(datatype))
            stamp_column.append(stamp)
            if flags:
                is_null = metric.is_null
                null_column.append(is_null or which is None)
                historical_column.append(metric.is_historical)
                transient_column.append(metric.is_transient)
            else:
                is_null = False
                null_column.append(which is None)
                historical_column.append(False)
                transient_column.append(False)
            if not is_null and which is not None:
                if fast is None:
                    fast = fast_values.get((datatype, which))
                if fast is not None:
                    column, bits, sign = fast
                    if bits:
                        value &= (1 << bits) - 1
                        if sign and value & sign:
                            value -= 1 << bits
                    sparse[column][row] = value
                else:
                    cells: dict[str, Any] = {}
                    extra: list[str] = []
                    try:
                        _put_value(cells, datatype, which, value, None, extra)
                    except DatatypeError as exc:
                        extra.append(str(exc))
                        _put_raw(cells, which, value)
                    for column, cell in cells.items():
                        sparse[column][row] = cell
                    if extra:
                        reasons = [*(reasons or ()), *extra]
            if reasons is not None:
                text = _join(*reasons)
                if text is not None:
                    reasons_column[row] = text
            row += 1
        count = row - first
        dense["metric_index"].extend(range(count))
        event_column = dense["event"]
        event_column.append(event)
        event_column.extend([False] * (count - 1))

    def _put_row(self, row: int, cells: dict[str, Any], why: str | None, meta: Resolved) -> None:
        """A row from the columns :func:`_metric_columns` gives (not its index and event)."""
        dense, sparse = self.dense, self.sparse
        cells["reason"] = _join(why, meta.reason, *cells.pop("_reasons"))
        for name in _ROW_DENSE:
            dense[name].append(cells.get(name))
        for name in SPARSE_COLUMNS:
            value = cells.get(name)
            if value is not None:
                sparse[name][row] = value


_ROW_DENSE = tuple(c for c in DENSE_COLUMNS if c not in ("metric_index", "event"))
"""The dense columns a metric's row sets itself (its index and event come per message)."""


def _metric_columns(metric: Metric, meta: Resolved) -> dict[str, Any]:
    """The row of any metric (a data set, template, extension, properties): its columns by
    name, and ``_reasons``."""
    reasons: list[str] = []
    alias = optional(metric, "alias")
    timestamp = optional(metric, "timestamp")
    which = metric.WhichOneof("value")
    row: dict[str, Any] = {
        "metric_name": meta.name,
        "alias": alias,
        "datatype": name_of(meta.datatype),
        "metric_timestamp": _ms_to_us(timestamp),
        "is_null": metric.is_null or which is None,
        "is_historical": metric.is_historical,
        "is_transient": metric.is_transient,
        "_reasons": reasons,
    }
    if alias is not None and alias >= _SIGNED_LONG:
        row["alias"] = None
        reasons.append(f"alias {alias} is above a signed 64-bit integer")
    if timestamp is not None and row["metric_timestamp"] is None:
        reasons.append(f"metric timestamp {timestamp} ms is out of range")
    if metric.HasField("properties"):
        props = properties_json(metric.properties)
        row["properties"] = to_json(props, sort_keys=True)
        quality = props.get(QUALITY)
        row["quality"] = (
            quality
            if isinstance(quality, int)
            and not isinstance(quality, bool)  # a Boolean property is no quality code
            and _INT32 <= quality < -_INT32
            else None
        )
        unit = props.get(ENG_UNIT)
        row["eng_unit"] = unit if isinstance(unit, str) else None
    if metric.is_null or which is None:
        return row
    raw = getattr(metric, which)
    try:
        _put_value(row, meta.datatype, which, raw, meta.members, reasons)
    except DatatypeError as exc:
        reasons.append(str(exc))
        _put_raw(row, which, raw)
    return row


def _put_value(
    row: dict[str, Any],
    datatype: int | None,
    which: str,
    raw: Any,
    members: Members | None = None,
    reasons: list[str] | None = None,
) -> None:
    if datatype is None:
        _put_raw(row, which, raw)
        return
    typed = metric_value(datatype, METRIC_FIELD_NUMBERS[which], raw)
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


def _put_raw(row: dict[str, Any], which: str, raw: Any) -> None:
    """A value whose datatype is unknown or does not fit: in the column of its field."""
    column = _FIELD_COLUMN.get(METRIC_FIELD_NUMBERS[which])
    if column is None:
        return
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


def typed_scalar(datatype: int | None, message: Any) -> Any:
    """The value of a property, parameter or data set cell (``message``, its ``oneof value``)
    of ``datatype``, for JSON: integers with their sign (as a metric's), floats as floats,
    DateTime as milliseconds."""
    raw = value_of(message)
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
    which = prop.WhichOneof("value")
    if which == "propertyset_value":
        return properties_json(prop.propertyset_value)
    if which == "propertysets_value":
        return [properties_json(p) for p in prop.propertysets_value.propertyset]
    return typed_scalar(optional(prop, "type"), prop)


def dataset_json(dataset: DataSet) -> dict[str, Any]:
    """A DataSet: ``{"columns": [...], "types": ["Int32", ...], "rows": [[...], ...]}``,
    each cell typed by its column's type."""
    types = list(dataset.types)
    return {
        "columns": list(dataset.columns),
        "types": [name_of(t) for t in types],
        "rows": [
            [
                typed_scalar(types[i] if i < len(types) else None, cell)
                for i, cell in enumerate(row.elements)
            ]
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
        "version": optional(template, "version"),
        "template_ref": optional(template, "template_ref"),
        "is_definition": template.is_definition,
        "parameters": [
            {
                "name": optional(p, "name"),
                "type": name_of(optional(p, "type")),
                "value": typed_scalar(optional(p, "type"), p),
            }
            for p in template.parameters
        ],
        "metrics": [_template_metric(m, members or {}, reasons) for m in template.metrics],
    }


def _template_metric(metric: Metric, members: Members, reasons: list[str] | None) -> dict[str, Any]:
    name = optional(metric, "name")
    known = members.get(name, (None, None)) if name is not None else (None, None)
    datatype = optional(metric, "datatype")
    if datatype is None:
        datatype = known[0]
    value: Any = None
    which = metric.WhichOneof("value")
    if not metric.is_null and which is not None:
        value = getattr(metric, which)
        if datatype is None:
            if reasons is not None:
                reasons.append(f"template member {name!r} has no datatype here or in a birth")
        else:
            try:
                value = metric_value(datatype, METRIC_FIELD_NUMBERS[which], value)
            except DatatypeError as exc:
                if reasons is not None:
                    reasons.append(f"template member {name!r}: {exc}")
        if isinstance(value, DataSet):
            value = dataset_json(value)
        elif isinstance(value, Template):
            value = template_json(value, known[1], reasons)
    return {
        "name": name,
        "alias": optional(metric, "alias"),
        "datatype": name_of(datatype),
        "timestamp": optional(metric, "timestamp"),
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
