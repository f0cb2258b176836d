"""Format version 3: data blocks with properties (record kind 6), the upgrade of ``wal.json``
from version 2, and version 2 WALs, which stay byte for byte what they were."""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from array import array
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
from connector.wal import identity as identity_module
from connector.wal import segment as segment_module
from connector.wal.blob import BLOB_HEAD, BLOB_MAGIC
from connector.wal.block import decode_block, encode_block
from connector.wal.object_reader import ObjectWalReader
from connector.wal.object_writer import ObjectWalWriter
from connector.wal.objects import segment_dir
from connector.wal.opening import open_reader, open_writer
from connector.wal.records import (
    FLAGS,
    FRAME_KIND,
    FRAME_SIZE,
    KIND_BLOCK,
    KIND_PROPERTIES_BLOCK,
    OFFSET_AT,
)
from connector.wal.segment import HEADER, HEADER_SIZE, INDEX_ENTRY, index_name, segment_name

# A block of two rows from offset 5 on topic "a/b": (QoS 1, id 7, stamp 100, "hi", properties
# 01 01) and (QoS 0 retained, stamp 101, "x", no properties). Layout: connector/wal/block.py.
KIND_6_VECTOR = bytes.fromhex(
    "56000000"  # length: the kind byte and the 85-byte body
    "7732bfa9"  # crc32 of those 86 bytes
    "06"  # kind 6: a data block with properties
    "0500000000000000" "02000000" "05000000"  # first offset 5, n = 2, topic table of 5 bytes
    "0300" "612f62" "000000"  # topic 0: "a/b"; zero padding to 24 (a multiple of 8)
    "6400000000000000" "6500000000000000"  # timestamps 100, 101
    "0700" "0000"  # message ids 7, 0 (none)
    "11" "04"  # flags: QoS 1 with an id; QoS 0 retained
    "0000"  # zero padding to 48 (a multiple of 4)
    "00000000" "00000000"  # topic indexes
    "00000000" "02000000" "03000000"  # payload end positions
    "00000000" "02000000" "02000000"  # property end positions
    "6869" "78"  # payloads "hi", "x"
    "0101"  # row 0's properties (row 1 has none)
)  # fmt: skip

IDENTITY = "5f1c0c2a9b3e4d7f8a6b1c2d3e4f5a6b"
V2_RECORDS = [
    NewRecord("a/b", b"one", 0, False, False, None, 1),
    NewRecord("a/b", b"two", 1, True, False, 7, 2),
    NewRecord("ü/c", b"\x00three", 2, False, True, 9, -3),
    NewRecord("a/b", b"", 1, False, False, 7, 4),
]
"""Appended as [0, 1], [2], then a release of packet id 9 with [3]: V2_SEGMENT."""
V2_SEGMENT = bytes.fromhex(
    "4d51545457414c00020000005f1c0c2a9b3e4d7f8a6b1c2d3e4f5a6b0000000000000000"
    "c49672ae090000006b2884df0300000000000000004b000000a635c4bc05000000000000"
    "000002000000050000000300612f62000000010000000000000002000000000000000000"
    "07000015000000000000000000000000000003000000060000006f6e6574776f37000000"
    "e694fdb605020000000000000001000000060000000400c3bc2f630000fdffffffffffff"
    "ff09001a0000000000000000000600000000746872656507000000bba66d100201000000"
    "0900310000000ca25d7805030000000000000001000000050000000300612f6200000004"
    "0000000000000007001100000000000000000000000000"
)
"""Written by the product before format version 3 (version 2, kind 5 blocks only)."""


def with_properties(first: int, count: int, every: int = 2) -> list[NewRecord]:
    """Numbered records; every ``every``-th has property bytes that name its offset."""
    out = []
    for i in range(first, first + count):
        qos = i % 3
        pid = i % 91 + 1 if qos else None
        # A User Property "no" = the offset, as 4 raw bytes: the WAL does not care.
        props = b"\x26\x00\x02no" + struct.pack(">I", i) if i % every == 0 else b""
        out.append(NewRecord(f"p/{i % 3}", b"payload %d" % i, qos, False, False, pid, i, props))
    return out


def expected(first: int, records: list[NewRecord]) -> list[WalRecord]:
    return [WalRecord(first + i, *record) for i, record in enumerate(records)]


def kinds(file: Path) -> list[int]:
    data = file.read_bytes()
    pos, out = HEADER_SIZE, []
    while pos < len(data):
        length, _, kind = FRAME_KIND.unpack_from(data, pos)
        out.append(kind)
        pos += FRAME_SIZE + length
    return out


def meta_version(path: Path) -> int:
    return int(json.loads((path / "wal.json").read_text())["version"])


def fixed_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("connector.wal.file_writer.uuid.uuid4", lambda: uuid.UUID(IDENTITY))


def test_a_kind_6_block_is_these_bytes_and_decodes_back() -> None:
    flags = bytearray([FLAGS[(1, False, False, True)], FLAGS[(0, True, False, False)]])
    parts = encode_block(
        5,
        [b"a/b"],
        array("q", [100, 101]),
        array("H", [7, 0]),
        flags,
        array("i", [0, 0]),
        array("i", [0, 2, 3]),
        [b"hi", b"x"],
        array("i", [0, 2, 2]),
        [b"\x01\x01", b""],
    )
    assert b"".join(parts) == KIND_6_VECTOR
    _, crc, kind = FRAME_KIND.unpack_from(KIND_6_VECTOR)
    assert (kind, zlib.crc32(KIND_6_VECTOR[FRAME_SIZE:])) == (KIND_PROPERTIES_BLOCK, crc)
    piece = decode_block(KIND_6_VECTOR[OFFSET_AT:], "vector", 0, kind)
    assert piece.payloads() == [b"hi", b"x"]
    assert piece.properties() == [b"\x01\x01", b""]
    assert list(piece.topics()) == ["a/b", "a/b"]
    assert list(piece.timestamps) == [100, 101] and list(piece.packet_ids) == [7, 0]
    assert piece.rows(1, 2).properties() == [b""]
    columns = WalColumns(5, [piece])
    assert list(columns.records()) == [
        WalRecord(5, "a/b", b"hi", 1, False, False, 7, 100, b"\x01\x01"),
        WalRecord(6, "a/b", b"x", 0, True, False, None, 101, b""),
    ]


def test_the_same_rows_without_properties_are_a_kind_5_block() -> None:
    flags = bytearray([FLAGS[(1, False, False, True)], FLAGS[(0, True, False, False)]])
    fields = (
        5,
        [b"a/b"],
        array("q", [100, 101]),
        array("H", [7, 0]),
        flags,
        array("i", [0, 0]),
        array("i", [0, 2, 3]),
        [b"hi", b"x"],
    )
    data = b"".join(encode_block(*fields))
    assert data[FRAME_SIZE] == KIND_BLOCK
    assert len(data) == len(KIND_6_VECTOR) - 12 - 2, "no property ends, no property bytes"
    piece = decode_block(data[OFFSET_AT:], "vector", 0, KIND_BLOCK)
    assert piece.property_ends is None and piece.properties() == [b"", b""]


def test_a_version_2_wal_reads_and_is_written_byte_for_byte_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old"
    old.mkdir()
    (old / "wal.json").write_text(
        json.dumps({"format": "connector-mqtt-wal", "version": 2, "identity": IDENTITY})
    )
    (old / segment_name(0)).write_bytes(V2_SEGMENT)
    assert list(WalReader(old).read(0, 4).records()) == expected(0, V2_RECORDS)
    fixed_identity(monkeypatch)
    for plain in (False, True):  # NewRecords, and the seven-field tuples the receiver builds
        new = tmp_path / f"new-{plain}"
        rows = [tuple(r)[:7] for r in V2_RECORDS] if plain else V2_RECORDS
        with WalWriter.open(new) as writer:
            writer.append(rows[:2])  # type: ignore[arg-type]
            writer.append(rows[2:3])  # type: ignore[arg-type]
            writer.append(rows[3:], released_qos2=[9])  # type: ignore[arg-type]
        assert (new / segment_name(0)).read_bytes() == V2_SEGMENT
        assert meta_version(new) == 2
    with WalWriter.open(old) as writer:  # appending records without properties keeps version 2
        assert writer.next_offset == 4 and writer.latest_digest(7) == record_digest("a/b", b"")
        writer.append([NewRecord("a/b", b"more", 0, False, False, None, 5)])
    assert meta_version(old) == 2
    assert set(kinds(old / segment_name(0))) == {3, 2, KIND_BLOCK}


def test_properties_round_trip_through_appends_reads_blobs_and_recovery(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    records = with_properties(0, 120)
    with WalWriter.open(path, segment_max_bytes=2000) as writer:
        for at in range(0, 120, 15):
            writer.append(records[at : at + 15])
        segments = writer.segments
    assert len(segments) > 2
    everything = expected(0, records)
    reader = WalReader(path)
    for start, end in [(0, 120), (3, 4), (14, 16), (17, 95), (119, 120)]:
        columns = reader.read(start, end)
        assert list(columns.records()) == everything[start:end]
        assert columns.properties == [r.properties for r in records[start:end]]
        blob = reader.encode_range(start, end)
        assert BLOB_HEAD.unpack_from(blob)[1] == 3, "a blob with a kind 6 block is version 3"
        assert decode_blob(blob) == columns
    with WalWriter.open(path, segment_max_bytes=2000) as writer:
        assert writer.next_offset == 120
        assert writer.qos2_pending == {r.packet_id for r in records if r.qos == 2}
        for record in records:
            if record.qos:
                latest = [r for r in records if r.packet_id == record.packet_id][-1]
                assert writer.latest_digest(record.packet_id) == record_digest(  # type: ignore[arg-type]
                    latest.topic, latest.payload
                )


def test_only_blocks_holding_properties_are_kind_6(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    plain = [NewRecord("t", b"%d" % i, 1, False, False, i + 1, i) for i in range(4)]
    with WalWriter.open(path) as writer:
        writer.append(plain[:2])  # NewRecords whose properties are all empty: kind 5
        writer.append([(*r[:7], b"") for r in plain[2:]])
        writer.append(with_properties(4, 3, every=4))  # offsets 4 (properties), 5, 6
    assert kinds(path / segment_name(0)) == [3, KIND_BLOCK, KIND_BLOCK, KIND_PROPERTIES_BLOCK]
    reader = WalReader(path)
    assert BLOB_HEAD.unpack_from(reader.encode_range(0, 4))[:2] == (BLOB_MAGIC, 2)
    assert reader.read(0, 4).properties == [b""] * 4
    assert not reader.read(0, 4).has_properties and reader.read(3, 7).has_properties
    assert reader.read(5, 7).properties == [b"", b""]


def test_the_first_block_with_properties_upgrades_wal_json_to_version_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=400) as writer:
        writer.append(with_properties(0, 3, every=99)[1:3])  # no properties
        assert meta_version(path) == 2
        writer.append(with_properties(2, 4))
        assert meta_version(path) == 3
        first_segments = writer.segments
        for at in range(6, 40, 4):
            writer.append(with_properties(at, 4))
        later = [s for s in writer.segments if s not in first_segments]
    assert later
    assert HEADER.unpack_from((path / segment_name(0)).read_bytes())[1] == 2, "header kept"
    for first in later:
        assert HEADER.unpack_from((path / segment_name(first)).read_bytes())[1] == 3
    with WalWriter.open(path) as writer:
        assert meta_version(path) == 3
        writer.append([NewRecord("t", b"x", 0, False, False, None, 0)])
    assert meta_version(path) == 3
    # A reader that knows version 2 only refuses the WAL before any record kind.
    monkeypatch.setattr(identity_module, "READABLE_VERSIONS", (2,))
    monkeypatch.setattr(segment_module, "READABLE_VERSIONS", (2,))
    with pytest.raises(WalCorruptError, match="unsupported WAL format version 3"):
        WalReader(path).read(0, 3)
    with pytest.raises(WalCorruptError, match="unsupported WAL format version 3"):
        read_identity(path)


def test_a_torn_or_corrupt_last_kind_6_block_is_cut_whole(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append(with_properties(0, 3))
        segment = path / segment_name(0)
        at = segment.stat().st_size
        writer.append(with_properties(3, 5))
    data = segment.read_bytes()
    for cut in (at + 1, at + 20, len(data) - 1):
        segment.write_bytes(data[:cut])
        with WalWriter.open(path) as writer:
            assert writer.next_offset == 3 and segment.stat().st_size == at
        segment.write_bytes(data)
    flipped = data[:-1] + bytes([data[-1] ^ 1])  # a property byte: the CRC no longer matches
    segment.write_bytes(flipped)
    with pytest.raises(WalCorruptError, match="record CRC mismatch") as raised:
        WalReader(path).read(0, 8)
    assert raised.value.position == at
    with WalWriter.open(path) as writer:
        assert writer.next_offset == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("last property end", "property positions do not add up"),
        ("first property end", "property positions do not add up"),
        ("last payload end", "payload positions do not add up"),
        ("too short", "data block of 5 rows is only"),
    ],
)
def test_a_kind_6_block_with_a_valid_crc_and_bad_end_positions_is_corruption(
    tmp_path: Path, change: str, message: str
) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append(with_properties(0, 3))
        segment = path / segment_name(0)
        at = segment.stat().st_size
        writer.append(with_properties(3, 5))
    data = segment.read_bytes()
    length = FRAME_KIND.unpack_from(data, at)[0]
    body = bytearray(data[at + FRAME_SIZE : at + FRAME_SIZE + length])
    n, table = struct.unpack_from("<II", body, 1 + 8)
    ends_at = 1 + ((((16 + table + 7) & ~7) + 11 * n + 3) & ~3) + 4 * n
    property_ends_at = ends_at + 4 * (n + 1)
    if change == "last property end":
        struct.pack_into("<i", body, property_ends_at + 4 * n, 1 << 20)
    elif change == "first property end":
        struct.pack_into("<i", body, property_ends_at, 1)
    elif change == "last payload end":
        struct.pack_into("<i", body, ends_at + 4 * n, 1 << 20)
    else:
        body = body[: property_ends_at - 3]
    framed = struct.pack("<II", len(body), zlib.crc32(body)) + bytes(body)
    segment.write_bytes(data[:at] + framed)
    with pytest.raises(WalCorruptError, match=message) as raised:
        WalReader(path).read(0, 8)
    assert raised.value.position == at
    with pytest.raises(WalCorruptError, match=message):
        WalWriter.open(path)


def test_index_hints_point_at_kind_6_blocks_and_are_used(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    records = with_properties(0, 4800, every=1)
    with WalWriter.open(path) as writer:
        for at in range(0, 4800, 1600):
            writer.append(records[at : at + 1600])
    assert set(kinds(path / segment_name(0))) == {3, KIND_PROPERTIES_BLOCK}
    entries = list(INDEX_ENTRY.iter_unpack((path / index_name(0)).read_bytes()))
    assert len(entries) >= 2
    data = (path / segment_name(0)).read_bytes()
    for offset, position in entries:
        assert data[position + FRAME_SIZE] == KIND_PROPERTIES_BLOCK
        assert struct.unpack_from("<Q", data, position + OFFSET_AT)[0] == offset
    start = entries[-1][0] + 3
    assert (
        list(WalReader(path).read(start, start + 40).records())
        == expected(0, records)[start : start + 40]
    )


def test_appends_refuse_mixed_lengths_and_oversized_properties_and_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append(with_properties(0, 2))
        mixed = [tuple(with_properties(2, 1)[0]), tuple(with_properties(3, 1)[0])[:7]]
        with pytest.raises(ValueError):
            writer.append(mixed)  # type: ignore[arg-type]
        monkeypatch.setattr("connector.wal.appends.MAX_PAYLOAD_BYTES", 20)
        big = NewRecord("t", b"p" * 15, 2, False, False, 5, 0, b"q" * 10)
        with pytest.raises(ValueError, match="15 payload and 10 property bytes"):
            writer.append([big])
        assert writer.next_offset == 2 and 5 not in writer.qos2_pending
    assert list(WalReader(path).read(0, 2).records()) == expected(0, with_properties(0, 2))


def test_the_object_layout_stores_properties_and_upgrades_its_wal_json(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    location = f"file://{root}"
    with open_writer(location) as writer:
        assert isinstance(writer, ObjectWalWriter)
        writer.append(with_properties(0, 5, every=99)[1:])  # no properties
        assert meta_version(root) == 2
        writer.append(with_properties(4, 6))
        assert meta_version(root) == 3
        assert not list(root.glob("*.tmp"))
    parts = sorted((root / segment_dir(0)).iterdir())
    assert parts[-1].read_bytes()[FRAME_SIZE] == KIND_PROPERTIES_BLOCK
    reader = open_reader(location)
    assert isinstance(reader, ObjectWalReader)
    records = with_properties(0, 5, every=99)[1:] + with_properties(4, 6)
    columns = reader.read(0, 10)
    assert list(columns.records()) == expected(0, records)
    assert decode_blob(reader.encode_range(2, 9)) == reader.read(2, 9)
    with open_writer(location) as writer:  # recovery walks the kind 6 part
        assert writer.next_offset == 10
        writer.append(with_properties(10, 2))
    assert meta_version(root) == 3
    assert reader.read(10, 12).properties == [r.properties for r in with_properties(10, 2)]
