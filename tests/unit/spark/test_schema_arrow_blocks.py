"""Arrow rows of WAL data blocks are those of the records appended, however the blocks cut them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from connector.spark.schema import ARROW_SCHEMA, to_arrow, to_record_batches
from connector.wal import NewRecord, WalColumns, WalReader, WalWriter, decode_blob, encode_range

TOPICS = ["a", "plant/line-3/sensor-17", "ünï/温度", "", "a/b/c"]


def records(first: int, count: int) -> list[NewRecord]:
    """Varied fields; the topic order changes along the way, so blocks get different topic
    dictionaries."""
    out = []
    for i in range(first, first + count):
        qos = i % 3
        mid = (i % 700) + 1 if qos else (5 if i % 11 == 0 else None)
        topic = TOPICS[(i * 7 + i // 40) % len(TOPICS)]
        out.append(
            NewRecord(
                topic, b"%d" % i * (i % 5), qos, i % 2 == 1, qos > 0 and i % 4 == 0, mid, i - 50
            )
        )
    return out


def table(columns: WalColumns) -> pa.Table:
    return pa.Table.from_batches([to_arrow(columns, receiver=2)], ARROW_SCHEMA)


@pytest.fixture(scope="module")
def wals(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The same 400 records as data blocks, in appends of 37 rows."""
    root = tmp_path_factory.mktemp("arrow")
    data = records(0, 400)
    with WalWriter.open(root / "v2", segment_max_bytes=2000, fsync=False) as writer:
        for at in range(0, 400, 37):
            writer.append(data[at : at + 37])
    return root / "v2", len(data)


@pytest.mark.parametrize(("start", "end"), [(0, 400), (3, 4), (17, 150), (149, 171), (365, 400)])
def test_arrow_rows_are_those_of_the_records(wals: tuple[Path, int], start: int, end: int) -> None:
    path, _ = wals
    expected = table(WalColumns.from_records(start, records(0, 400)[start:end]))
    columns = WalReader(path).read(start, end)
    assert table(columns).equals(expected)
    assert table(decode_blob(encode_range(path, start, end))).equals(expected)
    batches = list(to_record_batches(columns, 64, receiver=2))
    assert pa.Table.from_batches(batches, ARROW_SCHEMA).equals(expected)
    assert expected.column("receiver").to_pylist() == [2] * (end - start)


def test_many_blocks_with_different_topic_dictionaries(wals: tuple[Path, int]) -> None:
    v2, count = wals
    columns = WalReader(v2).read(0, count)
    dictionaries = {tuple(piece.topic_names) for piece in columns.pieces}
    assert len(columns.pieces) > 10 and len(dictionaries) > 1
    assert to_arrow(columns).column("topic").to_pylist() == [r.topic for r in records(0, count)]


def test_an_empty_range_converts_to_an_empty_batch(wals: tuple[Path, int]) -> None:
    v2, _ = wals
    batch = to_arrow(WalReader(v2).read(7, 7))
    assert batch.num_rows == 0 and batch.schema == ARROW_SCHEMA
