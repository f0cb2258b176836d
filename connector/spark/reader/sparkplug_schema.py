"""The rows of ``payloadFormat`` ``sparkplug``: their Spark and Arrow types, and the conversion
of :class:`connector.sparkplug.rows.Rows` to Arrow record batches, in bulk. What each column holds:
docs/sparkplug.md; (``receiver``, ``offset``, ``metric_index``) is unique."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa

from connector.sparkplug.rows import COLUMNS, Rows

_TIMESTAMP = pa.timestamp("us", tz="UTC")
_ULONG = pa.decimal128(20, 0)

FIELDS: tuple[tuple[str, str, pa.DataType, bool], ...] = (
    ("group_id", "STRING", pa.string(), True),
    ("edge_node_id", "STRING", pa.string(), True),
    ("device_id", "STRING", pa.string(), True),
    ("message_type", "STRING", pa.string(), True),
    ("seq", "INT", pa.int32(), True),
    ("bd_seq", "BIGINT", pa.int64(), True),
    ("payload_timestamp", "TIMESTAMP", _TIMESTAMP, True),
    ("metric_index", "INT", pa.int32(), True),
    ("metric_name", "STRING", pa.string(), True),
    ("alias", "BIGINT", pa.int64(), True),
    ("datatype", "STRING", pa.string(), True),
    ("metric_timestamp", "TIMESTAMP", _TIMESTAMP, True),
    ("is_null", "BOOLEAN", pa.bool_(), True),
    ("is_historical", "BOOLEAN", pa.bool_(), True),
    ("is_transient", "BOOLEAN", pa.bool_(), True),
    ("long_value", "BIGINT", pa.int64(), True),
    ("ulong_value", "DECIMAL(20,0)", _ULONG, True),
    ("double_value", "DOUBLE", pa.float64(), True),
    ("boolean_value", "BOOLEAN", pa.bool_(), True),
    ("string_value", "STRING", pa.string(), True),
    ("bytes_value", "BINARY", pa.binary(), True),
    ("datetime_value", "TIMESTAMP", _TIMESTAMP, True),
    ("long_array", "ARRAY<BIGINT>", pa.list_(pa.int64()), True),
    ("ulong_array", "ARRAY<DECIMAL(20,0)>", pa.list_(_ULONG), True),
    ("double_array", "ARRAY<DOUBLE>", pa.list_(pa.float64()), True),
    ("boolean_array", "ARRAY<BOOLEAN>", pa.list_(pa.bool_()), True),
    ("string_array", "ARRAY<STRING>", pa.list_(pa.string()), True),
    ("datetime_array", "ARRAY<TIMESTAMP>", pa.list_(_TIMESTAMP), True),
    ("dataset_value", "STRING", pa.string(), True),
    ("template_value", "STRING", pa.string(), True),
    ("properties", "STRING", pa.string(), True),
    ("quality", "INT", pa.int32(), True),
    ("eng_unit", "STRING", pa.string(), True),
    ("reason", "STRING", pa.string(), True),
    ("seq_gap", "BOOLEAN", pa.bool_(), True),
    ("missing_seqs", "ARRAY<INT>", pa.list_(pa.int32()), True),
    ("event", "BOOLEAN", pa.bool_(), False),
    ("death_matched", "BOOLEAN", pa.bool_(), True),
    ("host_id", "STRING", pa.string(), True),
    ("host_online", "BOOLEAN", pa.bool_(), True),
    ("payload", "BINARY", pa.binary(), True),
    ("topic", "STRING", pa.string(), False),
    ("qos", "INT", pa.int32(), False),
    ("timestamp", "TIMESTAMP", _TIMESTAMP, False),
    ("offset", "BIGINT", pa.int64(), False),
    ("receiver", "INT", pa.int32(), False),
)
"""Each column: name, Spark type, Arrow type, nullable."""

assert tuple(f[0] for f in FIELDS) == COLUMNS, "the Sparkplug columns and their types differ"

SCHEMA_DDL = ", ".join(
    f"{name} {spark}{'' if nullable else ' NOT NULL'}" for name, spark, _, nullable in FIELDS
)
"""Spark DDL of the Sparkplug rows."""

ARROW_SCHEMA = pa.schema([pa.field(name, kind, nullable) for name, _, kind, nullable in FIELDS])


def to_record_batch(rows: Rows) -> pa.RecordBatch:
    """The rows as one Arrow record batch of :data:`ARROW_SCHEMA`, a column at a time: a
    column all rows of a message share is one value per message taken along the rows'
    messages, a column most rows leave null is filled where set."""
    count = len(rows)
    message_of_row = pa.array(rows.row_message, type=pa.int32())
    shared = rows.shared
    arrays = []
    for name, _, kind, _ in FIELDS:
        if name in shared:
            per_message = pa.array(shared[name], type=kind)
            arrays.append(per_message.take(message_of_row))
        elif name in rows.dense:
            arrays.append(pa.array(rows.dense[name], type=kind))
        else:
            arrays.append(_sparse(rows.sparse[name], count, name, kind))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _sparse(cells: dict[int, Any], count: int, name: str, kind: pa.DataType) -> pa.Array:
    """A column null but in ``cells`` (row -> value)."""
    if not cells:
        return pa.nulls(count, type=kind)
    values: Any = cells.values()
    if name == "ulong_value":
        values = [Decimal(v) for v in values]
    elif name == "ulong_array":
        values = [[Decimal(x) for x in v] for v in values]
    if len(cells) == count:
        return pa.array(list(values), type=kind)
    column: list[Any] = [None] * count
    for row, value in zip(cells, values, strict=True):
        column[row] = value
    return pa.array(column, type=kind)


def to_record_batches(rows: Rows, batch_rows: int = 10_000) -> Iterator[pa.RecordBatch]:
    """The rows as Arrow record batches of at most ``batch_rows`` rows (slices of one)."""
    batch = to_record_batch(rows)
    for start in range(0, batch.num_rows, batch_rows):
        yield batch.slice(start, batch_rows)
