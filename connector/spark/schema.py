"""The output schema of the ``mqtt`` source and the WAL-columns -> Arrow conversion.

With ``mqttVersion`` 5 the rows have one more column, ``properties``: the PUBLISH properties a
consumer sees (MQTT 5.0 section 3.3.2.3, named and shaped by
:func:`connector.mqtt.message_properties.message_properties`). For an MQTT 5 row the struct is
never null: a property the message lacks is a null field, and ``userProperties`` and
``subscriptionIdentifiers`` are empty arrays, never null (a message without any property has
all of that). MQTT 3.1 and 3.1.1 streams keep the schema without the column.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from connector.mqtt.message_properties import FIELDS, message_properties
from connector.receiver.wal_properties import decode_from_wal
from connector.wal import WalColumns
from connector.wal.columns import ColumnPiece
from connector.wal.records import FLAG_DUP, FLAG_HAS_ID, FLAG_QOS_MASK, FLAG_RETAIN

SCHEMA_DDL = (
    "topic STRING NOT NULL, payload BINARY NOT NULL, qos INT NOT NULL, "
    "retained BOOLEAN NOT NULL, duplicate BOOLEAN NOT NULL, messageId INT, "
    "timestamp TIMESTAMP NOT NULL, offset BIGINT NOT NULL, receiver INT NOT NULL"
)
"""Spark DDL of the rows: one per MQTT message; ``offset`` is the sequence number in the WAL of
``receiver`` (0 with one receiver): (receiver, offset) is unique, like Kafka's (partition,
offset)."""

ARROW_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("payload", pa.binary(), nullable=False),
        pa.field("qos", pa.int32(), nullable=False),
        pa.field("retained", pa.bool_(), nullable=False),
        pa.field("duplicate", pa.bool_(), nullable=False),
        pa.field("messageId", pa.int32()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("receiver", pa.int32(), nullable=False),
    ]
)

COLUMNS: tuple[str, ...] = tuple(ARROW_SCHEMA.names)
"""The row's columns in order: the only place the Spark names of the MQTT fields are written
(the MQTT and WAL layers say ``retain``, ``dup`` and ``packet_id``)."""

_USER_PROPERTY = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.string())])
_PROPERTY_TYPES: dict[str, tuple[str, pa.DataType]] = {
    "payloadFormatIndicator": ("INT", pa.int32()),
    "messageExpiryInterval": ("BIGINT", pa.int64()),
    "contentType": ("STRING", pa.string()),
    "responseTopic": ("STRING", pa.string()),
    "correlationData": ("BINARY", pa.binary()),
    "userProperties": ("ARRAY<STRUCT<key: STRING, value: STRING>>", pa.list_(_USER_PROPERTY)),
    "subscriptionIdentifiers": ("ARRAY<INT>", pa.list_(pa.int32())),
}
"""Spark and Arrow type of each field of ``properties``, by its name in FIELDS (whose order
the struct keeps)."""

PROPERTIES_TYPE = pa.struct([pa.field(name, _PROPERTY_TYPES[name][1]) for name in FIELDS])
PROPERTIES_DDL = "STRUCT<" + ", ".join(f"{name}: {_PROPERTY_TYPES[name][0]}" for name in FIELDS)
PROPERTIES_DDL += ">"
PROPERTIES_COLUMN = "properties"

SCHEMA_DDL_MQTT5 = f"{SCHEMA_DDL}, {PROPERTIES_COLUMN} {PROPERTIES_DDL}"
"""Spark DDL of the rows of an MQTT 5 stream: :data:`SCHEMA_DDL` and ``properties``."""

ARROW_SCHEMA_MQTT5 = ARROW_SCHEMA.append(pa.field(PROPERTIES_COLUMN, PROPERTIES_TYPE))


def schema_ddl(mqtt5: bool) -> str:
    """The source's Spark DDL: with ``properties`` for an MQTT 5 stream."""
    return SCHEMA_DDL_MQTT5 if mqtt5 else SCHEMA_DDL


_TIMESTAMP = pa.timestamp("us", tz="UTC")

ARROW_BATCH_ROWS = 65_536

_NULL_ID = pa.nulls(1, pa.int32())[0]  # pa.scalar(None, ...) would import pandas
_NO_BYTES = pa.py_buffer(b"")


def to_arrow(columns: WalColumns, receiver: int = 0, *, mqtt5: bool = False) -> pa.RecordBatch:
    """All of ``columns`` as one Arrow record batch, built column-wise without a Python object
    per row. Each piece's buffers (a data block's bytes) are used as Arrow buffers: fixed-width
    columns as they are (one piece) or joined, payloads as one binary array per piece,
    concatenated; topics index each piece's topic dictionary; qos, flags and null message ids
    come from Arrow kernels on the flags, offsets from a range. With ``mqtt5`` the batch has
    the ``properties`` column too (:func:`_properties`)."""
    n = len(columns)
    pieces = columns.pieces
    flags = _fixed(pieces, "flags", pa.uint8(), n)
    pids = _fixed(pieces, "packet_ids", pa.uint16(), n).cast(pa.int32())
    has_id = pc.not_equal(pc.bit_wise_and(flags, FLAG_HAS_ID), 0)
    if not pc.all(has_id).as_py() or n == 0:
        pids = pc.if_else(has_id, pids, _NULL_ID)
    payloads = []
    for piece in pieces:
        payload = pa.Array.from_buffers(
            pa.binary(),
            piece.hi - piece.lo,
            [None, pa.py_buffer(piece.payload_ends), pa.py_buffer(piece.payload_data)],
            0,
            piece.lo,
        )
        payload.validate(full=True)  # positions stay inside the piece's bytes
        payloads.append(payload)
    first = columns.first_offset
    arrays = [
        _topics(pieces),
        _concat(payloads, pa.binary()),
        pc.bit_wise_and(flags, FLAG_QOS_MASK).cast(pa.int32()),
        pc.not_equal(pc.bit_wise_and(flags, FLAG_RETAIN), 0),
        pc.not_equal(pc.bit_wise_and(flags, FLAG_DUP), 0),
        pids,
        _fixed(pieces, "timestamps", _TIMESTAMP, n),
        _range(first, first + n),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array("i", [receiver]) * n)]),
    ]
    if not mqtt5:
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
    arrays.append(_properties(pieces, first))
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA_MQTT5)


def _properties(pieces: tuple[ColumnPiece, ...], first: int) -> pa.Array:
    """The ``properties`` column: each distinct stored value is decoded once and the column is
    a take of those structs (publishers repeat their properties, and most rows of a block
    without properties share the empty value). Pieces without property columns (blocks of
    kind 5) are rows without properties."""
    parts = []
    for piece in pieces:
        count = piece.hi - piece.lo
        if piece.property_ends is None:
            zeros = pa.py_buffer(bytes(4 * (count + 1)))
            parts.append(pa.Array.from_buffers(pa.binary(), count, [None, zeros, _NO_BYTES]))
            continue
        stored = pa.Array.from_buffers(
            pa.binary(),
            count,
            [None, pa.py_buffer(piece.property_ends), pa.py_buffer(piece.property_data)],
            0,
            piece.lo,
        )
        stored.validate(full=True)  # positions stay inside the piece's bytes
        parts.append(stored)
    encoded = pc.dictionary_encode(_concat(parts, pa.binary()))
    distinct = []
    for value in encoded.dictionary.to_pylist():
        try:
            view = message_properties(decode_from_wal(value))
        except ValueError as exc:
            row = pc.index(encoded.dictionary, value).as_py()
            at = pc.index(encoded.indices, row).as_py()
            raise ValueError(f"WAL offset {first + at}: {exc}") from None
        view["userProperties"] = [{"key": k, "value": v} for k, v in view["userProperties"]]
        distinct.append(view)
    return pa.array(distinct, PROPERTIES_TYPE).take(encoded.indices)


def _fixed(pieces: tuple[ColumnPiece, ...], name: str, arrow_type: pa.DataType, n: int) -> pa.Array:
    """A fixed-width column of every piece: the piece's buffer itself when there is one piece,
    else the rows in use joined into one buffer."""
    if len(pieces) == 1:
        piece = pieces[0]
        buffer = pa.py_buffer(getattr(piece, name))
        return pa.Array.from_buffers(arrow_type, n, [None, buffer], 0, piece.lo)
    joined = b"".join([piece.column(name) for piece in pieces])
    return pa.Array.from_buffers(arrow_type, n, [None, pa.py_buffer(joined)])


def _topics(pieces: tuple[ColumnPiece, ...]) -> pa.Array:
    """The topic column: each piece's topic indexes into its dictionary of names. One take when
    every piece has the same dictionary, else dictionary arrays concatenated (Arrow unifies the
    dictionaries) and decoded."""
    dictionaries: dict[tuple[str, ...], pa.Array] = {}
    parts = []
    for piece in pieces:
        names = tuple(piece.topic_names)
        dictionary = dictionaries.get(names)
        if dictionary is None:
            dictionary = dictionaries[names] = pa.array(names, pa.string())
        ids = pa.Array.from_buffers(
            pa.int32(), piece.hi - piece.lo, [None, pa.py_buffer(piece.topic_ids)], 0, piece.lo
        )
        parts.append((ids, dictionary))
    if len(dictionaries) <= 1:
        ids = _concat([ids for ids, _ in parts], pa.int32())
        return next(iter(dictionaries.values()), pa.array([], pa.string())).take(ids)
    encoded = [pa.DictionaryArray.from_arrays(ids, dictionary) for ids, dictionary in parts]
    return pa.concat_arrays(encoded).cast(pa.string())


def _concat(arrays: list[pa.Array], arrow_type: pa.DataType) -> pa.Array:
    """One array of ``arrays`` (no copy for a single one)."""
    if len(arrays) == 1:
        return arrays[0]
    if not arrays:
        return pa.array([], arrow_type)
    return pa.concat_arrays(arrays)


def _range(start: int, stop: int) -> pa.Array:
    """int64 values ``start, ..., stop - 1``."""
    arange = getattr(pa, "arange", None)  # pyarrow >= 21
    if arange is not None:
        return arange(start, stop)
    return pa.Array.from_buffers(
        pa.int64(), stop - start, [None, pa.py_buffer(array("q", range(start, stop)))]
    )


def to_record_batches(
    columns: WalColumns,
    batch_rows: int = ARROW_BATCH_ROWS,
    receiver: int = 0,
    *,
    mqtt5: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Yield the columns as Arrow record batches of at most ``batch_rows`` rows (zero-copy
    slices of one batch); with ``mqtt5`` they have the ``properties`` column."""
    total = len(columns)
    if not total:
        return
    whole = to_arrow(columns, receiver, mqtt5=mqtt5)
    for start in range(0, total, batch_rows):
        yield whole.slice(start, batch_rows)
