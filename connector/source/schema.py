"""The output schema of the ``mqtt`` source and the WAL-columns -> Arrow conversion."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from connector.wal import WalColumns

SCHEMA_DDL = (
    "topic STRING NOT NULL, payload BINARY NOT NULL, qos INT NOT NULL, "
    "retained BOOLEAN NOT NULL, duplicate BOOLEAN NOT NULL, messageId INT, "
    "timestamp TIMESTAMP NOT NULL, offset BIGINT NOT NULL"
)
"""Spark DDL of the rows: one per MQTT message; ``offset`` is the WAL sequence number."""

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
    ]
)

ARROW_BATCH_ROWS = 65_536


def to_record_batches(
    columns: WalColumns, batch_rows: int = ARROW_BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """Yield the columns as Arrow record batches of at most ``batch_rows`` rows."""
    total = len(columns)
    for start in range(0, total, batch_rows):
        end = min(total, start + batch_rows)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(columns.topics[start:end], pa.string()),
                pa.array(columns.payloads[start:end], pa.binary()),
                pa.array(columns.qos[start:end], pa.int32()),
                pa.array(columns.retained[start:end], pa.bool_()),
                pa.array(columns.duplicate[start:end], pa.bool_()),
                pa.array(columns.message_ids[start:end], pa.int32()),
                pa.array(columns.timestamps_us[start:end], pa.timestamp("us", tz="UTC")),
                pa.array(columns.offsets[start:end], pa.int64()),
            ],
            schema=ARROW_SCHEMA,
        )
