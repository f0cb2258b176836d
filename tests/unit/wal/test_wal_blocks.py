"""Format version 2: data blocks, partial reads of blocks, rollover, torn and corrupt blocks,
index hints, blobs, and format versions a reader does not know."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest

from connector.wal import (
    NewRecord,
    WalColumns,
    WalCorruptError,
    WalReader,
    WalRecord,
    WalWriter,
    decode_blob,
    read_identity,
    record_digest,
)
from connector.wal.blob import BLOB_HEAD, BLOB_MAGIC
from connector.wal.records import BLOCK_HEAD, FRAME_KIND, FRAME_SIZE, KIND_BLOCK, KIND_SEAL
from connector.wal.segment import (
    HEADER_SIZE,
    INDEX_ENTRY,
    encode_header,
    index_name,
    segment_name,
)


def numbered(first: int, count: int, size: int = 40) -> list[NewRecord]:
    """Records on a few topics whose payload starts with their offset; every third is QoS 1,
    every fifth QoS 2 (packet ids repeat, so digests get replaced)."""
    records = []
    for i in range(first, first + count):
        qos = 2 if i % 5 == 0 else 1 if i % 3 == 0 else 0
        pid = i % 97 + 1 if qos else None
        payload = struct.pack("<Q", i) + bytes([i % 251]) * (size - 8 + i % 7)
        records.append(NewRecord(f"n/{i % 4}/ü", payload, qos, i % 2 == 0, False, pid, i * 10))
    return records


def expected(first: int, records: list[NewRecord]) -> list[WalRecord]:
    return [WalRecord(first + i, *record) for i, record in enumerate(records)]


def record_kinds(file: Path) -> list[tuple[int, int, int]]:
    """(position, kind, first offset or -1) of every record of a segment file."""
    data = file.read_bytes()
    pos, out = HEADER_SIZE, []
    while pos < len(data):
        length, _, kind = FRAME_KIND.unpack_from(data, pos)
        first = -1
        if kind == KIND_BLOCK:
            first = struct.unpack_from("<Q", data, pos + FRAME_SIZE + 1)[0]
        out.append((pos, kind, first))
        pos += FRAME_SIZE + length
    return out


def test_ranges_starting_and_ending_inside_blocks(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    records = numbered(0, 60)
    with WalWriter.open(path) as writer:
        writer.append(records[:25])
        writer.append(records[25:])
    assert [first for _, kind, first in record_kinds(path / segment_name(0)) if first >= 0] == [
        0,
        25,
    ]
    reader = WalReader(path)
    every = expected(0, records)
    for start in range(0, 60, 3):
        for end in range(start, 61, 7):
            columns = reader.read(start, end)
            assert list(columns.records()) == every[start:end]
            assert columns.first_offset == start
    inside = reader.read(5, 20)
    assert len(inside.pieces) == 1
    assert (inside.pieces[0].lo, inside.pieces[0].hi) == (5, 20), "rows sliced, not copied"
    assert len(inside.pieces[0].flags) == 25
    across = reader.read(20, 30)
    assert [(p.lo, p.hi) for p in across.pieces] == [(20, 25), (0, 5)]


def test_a_batch_spanning_rollovers_is_one_block_per_segment(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    limit = 1000
    records = numbered(0, 100, size=60)
    with WalWriter.open(path, segment_max_bytes=limit) as writer:
        writer.append(records[:3])
        assert writer.append(records[3:]) == 100
        segments = writer.segments
    assert len(segments) >= 6
    for number, first in enumerate(segments):
        kinds = record_kinds(path / segment_name(first))
        blocks = [(pos, f) for pos, kind, f in kinds if kind == KIND_BLOCK]
        if number == 0:
            assert [f for _, f in blocks] == [0, 3], "one block per append"
        else:
            assert [f for _, f in blocks] == [first], "one block per segment"
        if number < len(segments) - 1:
            seal_at = kinds[-1][0]
            assert kinds[-1][1] == KIND_SEAL
            assert seal_at >= limit > blocks[-1][0], "rolled over once the segment was full"
    assert list(WalReader(path).read(0, 100).records()) == expected(0, records)
    with WalWriter.open(path, segment_max_bytes=limit) as writer:
        assert writer.next_offset == 100


def write_two_blocks(path: Path) -> tuple[Path, int, list[NewRecord]]:
    """A block of 3 records, then one of 6 QoS 1/2 records; returns (segment, second block's
    position, its records)."""
    last = [
        NewRecord(f"t/{i % 2}", b"last %d" % i, 1 + i % 2, False, False, 40 + i, i)
        for i in range(6)
    ]
    with WalWriter.open(path) as writer:
        writer.append(numbered(0, 3))
        segment = path / segment_name(0)
        at = segment.stat().st_size
        writer.append(last)
        assert writer.qos2_pending == {1, 41, 43, 45}
    return segment, at, last


def assert_last_block_gone(path: Path, segment: Path, at: int) -> None:
    with WalWriter.open(path) as writer:
        assert segment.stat().st_size == at
        assert writer.next_offset == 3
        assert writer.qos2_pending == {1}, "the cut block's QoS state is gone too"
        assert all(writer.latest_digest(40 + i) is None for i in range(6))
        assert writer.append(numbered(3, 2)) == 5
    assert list(WalReader(path).read(0, 5).records()) == expected(0, numbered(0, 5))


def test_torn_last_block_is_cut_whole(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    segment, at, _ = write_two_blocks(path)
    data = segment.read_bytes()
    for cut in range(at, len(data), 3):
        segment.write_bytes(data[:cut])
        assert_last_block_gone(path, segment, at)


def test_corrupt_last_block_is_cut_whole(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    segment, at, _ = write_two_blocks(path)
    data = segment.read_bytes()
    for flip in range(at, len(data), 5):
        segment.write_bytes(data[:flip] + bytes([data[flip] ^ 0x10]) + data[flip + 1 :])
        assert_last_block_gone(path, segment, at)


def test_recovery_rebuilds_the_qos_state_from_blocks(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    _, _, last = write_two_blocks(path)
    with WalWriter.open(path) as writer:
        assert writer.qos2_pending == {1, 41, 43, 45}
        for record in last:
            assert writer.latest_digest(record.packet_id) == record_digest(  # type: ignore[arg-type]
                record.topic, record.payload
            )


def reframe(data: bytes, at: int, body: bytes) -> bytes:
    """Replace the record at ``at`` by a record with ``body`` (kind included), CRC fixed."""
    length = FRAME_KIND.unpack_from(data, at)[0]
    framed = struct.pack("<II", len(body), zlib.crc32(body)) + body
    return data[:at] + framed + data[at + FRAME_SIZE + length :]


def test_a_block_with_a_valid_crc_and_a_wrong_layout_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    segment, at, _ = write_two_blocks(path)
    data = segment.read_bytes()
    body = bytearray(data[at + FRAME_SIZE : at + FRAME_SIZE + FRAME_KIND.unpack_from(data, at)[0]])
    body[-1:] = b""  # one payload byte short of the last end position
    segment.write_bytes(reframe(data, at, bytes(body)))
    with pytest.raises(WalCorruptError, match="payload positions do not add up") as raised:
        WalReader(path).read(0, 9)
    assert raised.value.position == at
    with pytest.raises(WalCorruptError, match="payload positions do not add up"):
        WalWriter.open(path)
    wrong_first = bytearray(body + b"\0")
    BLOCK_HEAD.pack_into(wrong_first, 1, 4, 6, BLOCK_HEAD.unpack_from(wrong_first, 1)[2])
    segment.write_bytes(reframe(data, at, bytes(wrong_first)))
    with pytest.raises(WalCorruptError, match="expected offset 3, found offset 4"):
        WalReader(path).read(0, 9)


def test_index_hints_point_at_block_starts(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    records = numbered(0, 3000, size=100)
    with WalWriter.open(path) as writer:
        for at in range(0, 3000, 1000):
            writer.append(records[at : at + 1000])
    blocks = {
        pos: first
        for pos, kind, first in record_kinds(path / segment_name(0))
        if kind == KIND_BLOCK
    }
    entries = list(INDEX_ENTRY.iter_unpack((path / index_name(0)).read_bytes()))
    assert len(entries) >= 4
    assert all(blocks.get(position) == offset for offset, position in entries)
    every = expected(0, records)
    start = entries[2][0] + 17  # inside the block of the third hint
    assert list(WalReader(path).read(start, start + 50).records()) == every[start : start + 50]
    # Hints with the wrong offset, or into a block's middle, are ignored.
    (path / index_name(0)).write_bytes(
        b"".join(INDEX_ENTRY.pack(offset + 1, position) for offset, position in entries)
        + b"".join(INDEX_ENTRY.pack(offset, position + 40) for offset, position in entries)
    )
    assert list(WalReader(path).read(start, start + 50).records()) == every[start : start + 50]
    with WalWriter.open(path) as writer:  # recovery rewrites the same hints
        writer.append(numbered(3000, 1))
    assert list(INDEX_ENTRY.iter_unpack((path / index_name(0)).read_bytes())) == entries


def test_blob_of_partial_blocks_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    records = numbered(0, 84)
    with WalWriter.open(path, segment_max_bytes=1500) as writer:
        writer.append(records[:4])
        for at in range(4, 84, 20):
            writer.append(records[at : at + 20])
    reader = WalReader(path)
    for start, end in [(2, 7), (5, 6), (9, 71), (30, 84), (83, 84), (10, 10)]:
        blob = reader.encode_range(start, end)
        assert BLOB_HEAD.unpack_from(blob)[:2] == (BLOB_MAGIC, 2)
        columns = decode_blob(blob)
        assert columns == reader.read(start, end)
        assert columns.first_offset == start
    with pytest.raises(WalCorruptError, match="blob ends after"):
        decode_blob(reader.encode_range(9, 71)[:-1])


def test_a_blob_version_a_reader_does_not_know_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append(numbered(0, 4))
    blob = WalReader(path).encode_range(0, 4)
    assert list(decode_blob(blob).records()) == expected(0, numbered(0, 4))
    unknown = BLOB_HEAD.pack(BLOB_MAGIC, 4, 0, 0, 4) + blob[BLOB_HEAD.size :]
    with pytest.raises(WalCorruptError, match="unsupported blob version 4"):
        decode_blob(unknown)


def write_version(path: Path, version: int) -> None:
    """Make ``wal.json`` and segment 0's header of the WAL at ``path`` say format ``version``."""
    meta = json.loads((path / "wal.json").read_text())
    (path / "wal.json").write_text(json.dumps({**meta, "version": version}))
    segment = path / segment_name(0)
    data = segment.read_bytes()
    header = encode_header(bytes.fromhex(meta["identity"]), 0, version)
    segment.write_bytes(header + data[HEADER_SIZE:])


def test_versions_a_reader_does_not_know_are_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append(numbered(0, 5))
    write_version(path, 4)
    with pytest.raises(WalCorruptError, match="unsupported WAL format version 4"):
        WalReader(path).read(0, 5)
    with pytest.raises(WalCorruptError, match="unsupported WAL format version 4"):
        WalWriter.open(path)
    with pytest.raises(WalCorruptError, match="unsupported WAL format version 4"):
        read_identity(path)
    (path / "wal.json").unlink()
    with pytest.raises(WalCorruptError, match="unsupported segment format version 4"):
        WalReader(path).read(0, 5)
    with pytest.raises(WalCorruptError, match="unsupported segment format version 4"):
        WalWriter.open(path)
    assert not (path / "wal.json").exists(), "a refused WAL is left as it was"


def test_columns_from_records_equal_block_reads(tmp_path: Path) -> None:
    records = numbered(0, 12)
    with WalWriter.open(tmp_path / "wal") as writer:
        writer.append(records[:5])
        writer.append(records[5:])
    columns = WalReader(tmp_path / "wal").read(2, 11)
    built = WalColumns.from_records(2, records[2:11])
    assert columns == built
    assert columns.flags == built.flags and columns.timestamps == built.timestamps
    assert columns.packet_id_values == built.packet_id_values
