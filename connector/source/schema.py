"""The output schema of the ``mqtt`` source and the WAL-columns -> Arrow conversion."""

from __future__ import annotations

from array import array
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from connector.wal import WalColumns
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

_TIMESTAMP = pa.timestamp("us", tz="UTC")

ARROW_BATCH_ROWS = 65_536

_NULL_ID = pa.scalar(None, pa.int32())


def to_arrow(columns: WalColumns, receiver: int = 0) -> pa.RecordBatch:
    """All of ``columns`` as one Arrow record batch, built column-wise: the flags, message ids
    and timestamps arrays are used as Arrow buffers as they are, offsets come from a range,
    topics from their dictionary; only the payloads go through a Python list."""
    n = len(columns)
    flags = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(columns.flags)])
    mids = pa.Array.from_buffers(
        pa.uint16(), n, [None, pa.py_buffer(columns.message_id_values)]
    ).cast(pa.int32())
    has_id = pc.not_equal(pc.bit_wise_and(flags, FLAG_HAS_ID), 0)
    if not pc.all(has_id).as_py() or n == 0:
        mids = pc.if_else(has_id, mids, _NULL_ID)
    topic_ids = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(columns.topic_ids)])
    first = columns.first_offset
    offsets = array("q", range(first, first + n))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(columns.topic_names, pa.string()).take(topic_ids),
            pa.array(columns.payloads, pa.binary()),
            pc.bit_wise_and(flags, FLAG_QOS_MASK).cast(pa.int32()),
            pc.not_equal(pc.bit_wise_and(flags, FLAG_RETAIN), 0),
            pc.not_equal(pc.bit_wise_and(flags, FLAG_DUP), 0),
            mids,
            pa.Array.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(columns.timestamps)]),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(array("i", [receiver]) * n)]),
        ],
        schema=ARROW_SCHEMA,
    )


def to_record_batches(
    columns: WalColumns, batch_rows: int = ARROW_BATCH_ROWS, receiver: int = 0
) -> Iterator[pa.RecordBatch]:
    """Yield the columns as Arrow record batches of at most ``batch_rows`` rows (zero-copy
    slices of one batch)."""
    total = len(columns)
    if not total:
        return
    whole = to_arrow(columns, receiver)
    for start in range(0, total, batch_rows):
        yield whole.slice(start, batch_rows)
