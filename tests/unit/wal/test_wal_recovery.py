"""Reopen cuts a torn tail of the last segment and refuses damage anywhere else."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from connector.wal import (
    NewRecord,
    WalCorruptError,
    WalDataLossError,
    WalReader,
    WalRecord,
    WalWriteError,
    WalWriter,
)
from connector.wal import file_writer as writer_module
from connector.wal.segment import HEADER_SIZE, TEMP_SUFFIX, segment_name

RECORDS = [
    NewRecord("a/b", b"first", 0, False, False, None, 10),
    NewRecord("a/c", b"second", 1, True, False, 3, 11),
    NewRecord("a/d", b"third", 2, False, True, 4, 12),
    NewRecord("a/e", b"fourth", 0, False, False, None, 13),
]
FINAL = NewRecord("torn/ü", b"final payload", 1, True, True, 9, 14)
REPLACEMENT = NewRecord("after/cut", b"new", 0, False, False, None, 15)


def records(first: int, count: int) -> list[NewRecord]:
    return [
        NewRecord(f"s/{i}", b"%08d" % i, 0, False, False, None, i)
        for i in range(first, first + count)
    ]


def write_with_final_record(path: Path) -> tuple[Path, int, bytes]:
    """Four records, then FINAL in its own batch; returns (segment, FINAL's position, bytes)."""
    with WalWriter.open(path) as writer:
        writer.append(RECORDS)
        segment = path / segment_name(0)
        final_at = segment.stat().st_size
        writer.append([FINAL])
    return segment, final_at, segment.read_bytes()


def assert_recovered_without_final(path: Path, segment: Path, final_at: int) -> None:
    """Only the intact records remain, and the cut offset is reused by the next append."""
    with WalWriter.open(path) as writer:
        assert writer.next_offset == 4
        assert segment.stat().st_size == final_at
        reader = WalReader(path)
        assert list(reader.read(0, 4).records()) == [
            WalRecord(i, *r) for i, r in enumerate(RECORDS)
        ]
        with pytest.raises(WalDataLossError, match="ends at offset 4"):
            reader.read(0, 5)
        assert writer.append([REPLACEMENT]) == 5
        assert writer.latest_digest(9) is None, "the cut record's QoS state must be gone too"
    assert list(WalReader(path).read(4, 5).records()) == [WalRecord(4, *REPLACEMENT)]


def test_torn_tail_at_every_byte_of_the_last_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "wal"
    segment, final_at, data = write_with_final_record(path)
    assert len(data) > final_at + 30
    for cut in range(final_at, len(data)):
        segment.write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="connector.wal"):
            assert_recovered_without_final(path, segment, final_at)
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        if cut == final_at:
            assert warnings == []
        else:
            assert len(warnings) == 1 and f"cutting {cut - final_at} bytes" in warnings[0]


def test_flipped_byte_in_the_last_record_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    segment, final_at, data = write_with_final_record(path)
    for at in range(final_at, len(data)):
        segment.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
        assert_recovered_without_final(path, segment, final_at)


def make_segments(path: Path, count: int = 40) -> list[int]:
    with WalWriter.open(path, segment_max_bytes=200) as writer:
        writer.append(records(0, count))
        assert len(writer.segments) >= 4
        return list(writer.segments)


def test_damage_inside_a_sealed_segment_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    segments = make_segments(path)
    first = path / segment_name(segments[0])
    data = bytearray(first.read_bytes())
    flip_at = len(data) - 40  # inside the last data record, before the seal
    data[flip_at] ^= 0x01
    first.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError) as raised:
        WalWriter.open(path, segment_max_bytes=200)
    assert raised.value.file == str(first)
    assert HEADER_SIZE < raised.value.position <= flip_at
    assert f"{first} is corrupt at byte {raised.value.position}" in str(raised.value)
    with pytest.raises(WalCorruptError, match="CRC mismatch") as read_error:
        WalReader(path).read(0, segments[1])
    assert read_error.value.file == str(first)


def test_damaged_header_of_a_sealed_segment(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    segments = make_segments(path)
    second = path / segment_name(segments[1])
    data = bytearray(second.read_bytes())
    data[30] ^= 0x01  # first offset field
    second.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError, match="header CRC mismatch") as raised:
        WalWriter.open(path)
    assert raised.value.file == str(second)


def test_missing_middle_segment_is_a_gap(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    segments = make_segments(path)
    (path / segment_name(segments[2])).unlink()
    with pytest.raises(
        WalCorruptError, match=f"gap between segments.*starts at offset {segments[3]}"
    ):
        WalWriter.open(path)
    with pytest.raises(WalCorruptError, match="gap between segments"):
        WalReader(path).read(0, segments[3] + 1)


def test_unsealed_middle_segment_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    segments = make_segments(path)
    first = path / segment_name(segments[0])
    first.write_bytes(first.read_bytes()[:-21])  # drop the seal record
    with pytest.raises(WalCorruptError, match="not sealed") as raised:
        WalWriter.open(path)
    assert raised.value.file == str(first)


def test_segment_from_another_wal_is_rejected(tmp_path: Path) -> None:
    make_segments(tmp_path / "one")
    make_segments(tmp_path / "two")
    shutil.copy(tmp_path / "one" / segment_name(0), tmp_path / "two" / segment_name(0))
    with pytest.raises(WalCorruptError, match="belongs to WAL"):
        WalWriter.open(tmp_path / "two")


def test_crash_between_seal_and_next_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=200) as writer:
        writer.append(records(0, 3))
        first_segment_end = len(writer.segments)

        def no_new_segment(*args: object, **kwargs: object) -> int:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(writer_module, "create_segment", no_new_segment)
        with pytest.raises(WalWriteError, match="No space left"):
            writer.append(records(3, 20))
        monkeypatch.undo()
        assert len(writer.segments) == first_segment_end
    with WalWriter.open(path, segment_max_bytes=200) as writer:
        durable = writer.next_offset
        assert 3 <= durable < 23, "the sealed part of the failed batch may survive"
        assert writer.segments[-1] == durable
        assert writer.append(records(durable, 2)) == durable + 2
    columns = WalReader(path).read(0, durable + 2)
    assert columns.payloads == [b"%08d" % i for i in range(durable + 2)]


def test_leftovers_are_removed_and_identity_survives_missing_metadata(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append(records(0, 2))
        identity = writer.identity
    junk = path / (segment_name(99) + TEMP_SUFFIX)
    junk.write_bytes(b"half a segment")
    (path / "wal.json").unlink()
    with WalWriter.open(path) as writer:
        assert writer.identity == identity
        assert writer.next_offset == 2
    assert not junk.exists()
    assert (path / "wal.json").exists()


def test_metadata_without_segments_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path):
        pass
    (path / segment_name(0)).unlink()
    with pytest.raises(WalCorruptError, match="no segment files"):
        WalWriter.open(path)
