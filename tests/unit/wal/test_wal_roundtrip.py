"""Appended records read back exactly, offsets stay gap-free across rollovers and reopens."""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.wal import (
    NewRecord,
    WalColumns,
    WalCorruptError,
    WalDataLossError,
    WalError,
    WalReader,
    WalRecord,
    WalWriter,
    decode_blob,
    encode_range,
    read_identity,
)
from connector.wal.segment import INDEX_ENTRY, index_name, segment_name


def varied_records() -> list[NewRecord]:
    """Every field at interesting values."""
    return [
        NewRecord("plain/topic", b"hello", 0, False, False, None, 1),
        NewRecord("plain/topic", b"", 1, True, False, 7, 2),
        NewRecord("ünïcødé/温度/🌡", b"\x00\xff" * 10, 2, False, True, 65535, -5),
        NewRecord("big", os.urandom(1 << 20), 1, True, True, 1, 2**62),
        NewRecord("q0/with/flags", b"x", 0, True, True, None, 0),
        NewRecord("q2", b"\x00", 2, True, False, 2, 1_700_000_000_000_000),
    ]


def as_records(first: int, records: list[NewRecord]) -> list[WalRecord]:
    return [WalRecord(first + i, *record) for i, record in enumerate(records)]


def numbered(first: int, count: int, size: int = 100) -> list[NewRecord]:
    """Records whose payload starts with their intended offset."""
    return [
        NewRecord(f"n/{i % 7}", struct.pack("<Q", i) + b"p" * (size - 8), 0, False, False, None, i)
        for i in range(first, first + count)
    ]


def test_round_trip_of_all_field_values(tmp_path: Path) -> None:
    records = varied_records()
    with WalWriter.open(tmp_path / "wal") as writer:
        assert (writer.first_offset, writer.next_offset) == (0, 0)
        assert writer.append(records) == len(records)
        identity = writer.identity
    columns = WalReader(tmp_path / "wal").read(0, len(records))
    assert list(columns.records()) == as_records(0, records)
    assert columns.offsets == list(range(len(records)))
    assert columns.packet_ids == [None, 7, 65535, 1, None, 2]
    assert columns.qos == [0, 1, 2, 1, 0, 2]
    assert columns.retain == [False, True, False, True, True, True]
    assert columns.dup == [False, False, True, True, True, False]
    assert all(type(value) is bytes for value in columns.payloads)
    assert read_identity(tmp_path / "wal") == identity
    assert WalReader(tmp_path / "wal").identity == identity
    assert re.fullmatch(r"[0-9a-f]{32}", identity), identity  # uuid4 hex (connector/wal)


def test_sub_ranges_and_empty_range(tmp_path: Path) -> None:
    records = varied_records()
    with WalWriter.open(tmp_path / "wal") as writer:
        writer.append(records[:2])
        writer.append(records[2:])
    reader = WalReader(tmp_path / "wal")
    assert list(reader.read(2, 5).records()) == as_records(0, records)[2:5]
    assert len(reader.read(3, 3)) == 0
    assert reader.read(3, 3) == WalColumns.empty()
    with pytest.raises(ValueError, match="invalid offset range"):
        reader.read(4, 3)
    with pytest.raises(
        WalDataLossError, match=r"offsets \[6, 7\) are not stored.*ends at offset 6"
    ):
        reader.read(5, 7)


def test_offsets_are_gap_free_across_rollovers_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=500) as writer:
        for first in range(0, 60, 12):
            assert writer.append(numbered(first, 12)) == first + 12
        segments = writer.segments
    assert len(segments) > 5, "tiny segments must roll over within batches"
    assert sorted(p.name for p in path.glob("*.seg")) == [segment_name(s) for s in segments]
    with WalWriter.open(path, segment_max_bytes=500) as writer:
        assert writer.next_offset == 60
        assert writer.append(numbered(60, 5)) == 65
        assert writer.segments[: len(segments)] == segments
    columns = WalReader(path).read(0, 65)
    assert columns.offsets == list(range(65))
    assert [struct.unpack_from("<Q", p)[0] for p in columns.payloads] == list(range(65))
    for start, end in [(0, 1), (11, 13), (29, 47), (64, 65)]:
        assert WalReader(path).read(start, end).offsets == list(range(start, end))


def test_a_batch_larger_than_a_segment_is_split(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=1024) as writer:
        assert writer.append(numbered(0, 100)) == 100
        assert len(writer.segments) >= 10
    assert WalReader(path).read(0, 100).offsets == list(range(100))


def test_index_hints_are_written_and_damaged_hints_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        for first in range(0, 6000, 1000):
            writer.append(numbered(first, 1000))
    index = (path / index_name(0)).read_bytes()
    entries = list(INDEX_ENTRY.iter_unpack(index))
    assert len(entries) >= 8, "one hint per 64 KiB of records"
    segment = (path / segment_name(0)).read_bytes()
    for offset, position in entries:
        assert struct.unpack_from("<Q", segment, position + 9)[0] == offset
    expected = list(range(4321, 4400))
    assert WalReader(path).read(4321, 4400).offsets == expected
    (path / index_name(0)).write_bytes(b"".join(INDEX_ENTRY.pack(o, p + 3) for o, p in entries))
    assert WalReader(path).read(4321, 4400).offsets == expected
    (path / index_name(0)).write_bytes(INDEX_ENTRY.pack(4000, 10**9) + b"\x01\x02")
    assert WalReader(path).read(4321, 4400).offsets == expected
    (path / index_name(0)).unlink()
    columns = WalReader(path).read(4321, 4400)
    assert [struct.unpack_from("<Q", p)[0] for p in columns.payloads] == expected


def test_blob_round_trip(tmp_path: Path) -> None:
    records = varied_records()
    with WalWriter.open(tmp_path / "wal", segment_max_bytes=300) as writer:
        writer.append(records)
        writer.append(numbered(len(records), 20))
    reader = WalReader(tmp_path / "wal")
    blob = reader.encode_range(3, 20)
    assert decode_blob(blob) == reader.read(3, 20)
    assert decode_blob(bytearray(blob)) == reader.read(3, 20)
    assert encode_range(tmp_path / "wal", 3, 20) == blob
    empty = reader.encode_range(5, 5)
    assert decode_blob(empty) == WalColumns.empty()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda b: b[:-1], "blob ends after"),
        (lambda b: b + b"\0", "unexpected bytes"),
        (lambda b: b"XXXX" + b[4:], "bad blob magic"),
        (lambda b: b[:60] + bytes([b[60] ^ 0x40]) + b[61:], "CRC mismatch"),
    ],
)
def test_damaged_blob_is_rejected(
    tmp_path: Path, mutate: Callable[[bytes], bytes], message: str
) -> None:
    with WalWriter.open(tmp_path / "wal") as writer:
        writer.append(numbered(0, 5))
    blob = WalReader(tmp_path / "wal").encode_range(0, 5)
    with pytest.raises(WalCorruptError, match=message):
        decode_blob(mutate(blob))


def test_invalid_records_change_nothing(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append(numbered(0, 3))
        size = (path / segment_name(0)).stat().st_size
        bad_batches = [
            [
                NewRecord("t", b"p", 2, False, False, 9, 0),
                NewRecord("t", b"p", 3, False, False, 1, 0),
            ],
            [
                NewRecord("t", b"p", 1, False, False, 4, 0),
                NewRecord("t", b"p", 1, False, False, None, 0),
            ],
            [NewRecord("t", b"p", 1, False, False, 70000, 0)],
            [NewRecord("t" * 70000, b"p", 0, False, False, None, 0)],
        ]
        for batch in bad_batches:
            with pytest.raises(ValueError):
                writer.append(batch)
        assert writer.next_offset == 3
        assert writer.qos2_pending == frozenset()
        assert writer.latest_digest(4) is None
        assert (path / segment_name(0)).stat().st_size == size
        assert writer.append(numbered(3, 1)) == 4
    assert WalReader(path).read(0, 4).offsets == [0, 1, 2, 3]


def test_reader_of_missing_wal(tmp_path: Path) -> None:
    reader = WalReader(tmp_path / "absent")
    assert reader.identity is None
    assert reader.first_offset() is None
    assert read_identity(tmp_path / "absent") is None
    with pytest.raises(WalDataLossError, match="no segment files"):
        reader.read(0, 1)


def test_closed_writer_refuses_work(tmp_path: Path) -> None:
    writer = WalWriter.open(tmp_path / "wal")
    writer.close()
    writer.close()
    with pytest.raises(WalError, match="closed"):
        writer.append(numbered(0, 1))
    with pytest.raises(WalError, match="closed"):
        writer.truncate_before(0)


def test_directory_is_private(tmp_path: Path) -> None:
    with WalWriter.open(tmp_path / "deep" / "wal"):
        pass
    assert (tmp_path / "deep" / "wal").stat().st_mode & 0o077 == 0
