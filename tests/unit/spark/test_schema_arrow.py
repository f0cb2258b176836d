"""The column-wise WAL -> Arrow conversion equals a record-by-record conversion.

``to_arrow`` uses the decoder's buffers as Arrow buffers and computes qos, flags and message
ids with Arrow kernels; the reference below builds every row from ``WalRecord`` values. Both
paths read the same records: appended to a real WAL, read back with ``WalReader`` and shipped
through an inline blob.
"""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connector.spark.schema import ARROW_SCHEMA, to_arrow, to_record_batches
from connector.wal import NewRecord, WalColumns, WalReader, WalWriter, decode_blob, encode_range

TOPICS = st.sampled_from(["a", "plant/line-3/sensor-17", "ünï/温度", "", "a/b/c/d/e/f/g"])


@st.composite
def new_records(draw: st.DrawFn) -> NewRecord:
    qos = draw(st.sampled_from([0, 1, 2]))
    pid = draw(st.integers(1, 0xFFFF)) if qos else draw(st.sampled_from([None, None, 5]))
    return NewRecord(
        draw(TOPICS),
        draw(st.binary(max_size=64)),
        qos,
        draw(st.booleans()),
        draw(st.booleans()) if qos else False,
        pid,
        draw(st.integers(-(2**62), 2**62)),
    )


def reference(columns: WalColumns) -> pa.Table:
    """Row by row from the records, as the conversion worked before it went column-wise."""
    rows = list(columns.records())
    return pa.Table.from_pylist(
        [
            {
                "topic": r.topic,
                "payload": r.payload,
                "qos": r.qos,
                "retained": r.retain,
                "duplicate": r.dup,
                "messageId": r.packet_id,
                "timestamp": r.timestamp_us,
                "offset": r.offset,
                "receiver": 0,
            }
            for r in rows
        ],
        schema=pa.schema(
            [f.with_type(pa.int64()) if f.name == "timestamp" else f for f in ARROW_SCHEMA]
        ),
    ).cast(ARROW_SCHEMA)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(new_records(), max_size=40), st.integers(0, 5), st.integers(0, 3))
def test_bulk_conversion_equals_row_by_row(
    records: list[NewRecord], skip: int, batch_rows: int
) -> None:
    with TemporaryDirectory() as folder:
        path = Path(folder) / "wal"
        with WalWriter.open(path, segment_max_bytes=512, fsync=False) as writer:
            writer.append(records)
        start = min(skip, len(records))
        columns = WalReader(path).read(start, len(records))
        blob_columns = decode_blob(encode_range(path, start, len(records)))
    assert blob_columns == columns
    expected = reference(columns)
    assert pa.Table.from_batches([to_arrow(columns)], ARROW_SCHEMA).equals(expected)
    assert expected.column("offset").to_pylist() == list(range(start, len(records)))
    rows = batch_rows + 1
    batches = list(to_record_batches(columns, rows))
    assert [b.num_rows for b in batches] == [
        min(rows, len(columns) - at) for at in range(0, len(columns), rows)
    ]
    assert pa.Table.from_batches(batches, ARROW_SCHEMA).equals(expected)


def test_message_ids_are_null_exactly_without_an_id() -> None:
    records = [
        NewRecord("t", b"0", 0, False, False, None, 1),
        NewRecord("t", b"1", 1, False, False, 9, 1),
        NewRecord("t", b"2", 0, False, False, 3, 1),
    ]
    batch = to_arrow(WalColumns.from_records(10, records))
    assert batch.column("messageId").to_pylist() == [None, 9, 3]
    assert batch.column("offset").to_pylist() == [10, 11, 12]
    assert batch.column("receiver").to_pylist() == [0, 0, 0]
    assert batch.schema == ARROW_SCHEMA
    third = to_arrow(WalColumns.from_records(0, records), receiver=3)
    assert third.column("receiver").to_pylist() == [3, 3, 3]


def test_columns_from_records_match_a_wal_read(tmp_path: Path) -> None:
    records = [
        NewRecord(f"t/{i % 3}", b"%d" % i, i % 3, i % 2 == 0, False, i or None, i) for i in range(9)
    ]
    records[0] = NewRecord("t/0", b"0", 0, True, False, None, 0)
    with WalWriter.open(tmp_path / "wal", fsync=False) as writer:
        writer.append(records)
    assert WalReader(tmp_path / "wal").read(0, 9) == WalColumns.from_records(0, records)
