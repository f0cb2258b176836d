"""WAL directories in format version 1 (one kind 1 data record per message), as the product
wrote them before data blocks: for tests that read and upgrade them.

``V1_SEGMENT`` is a segment written by version 1 of the product; ``write_v1_wal`` builds
larger version 1 directories with the same encoding (a test checks that it reproduces
``V1_SEGMENT``).
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

from connector.wal import NewRecord, record_digest
from connector.wal.records import (
    DATA_FIELDS,
    FLAGS,
    KIND_DATA,
    KIND_STATE,
    encode_record,
    encode_release,
    encode_seal,
)
from connector.wal.segment import HEADER, INDEX_ENTRY, MAGIC, index_name, segment_name
from connector.wal.state import QosState

V1_IDENTITY = "a683a48995e54e7e91a8fa088d6bc105"
V1_RECORDS = [
    NewRecord("a/b", b"one", 0, False, False, None, 1),
    NewRecord("a/b", b"two", 1, True, False, 7, 2),
    NewRecord("ü/c", b"\x00three", 2, False, True, 9, -3),
    NewRecord("a/b", b"", 1, False, False, 7, 4),
]
"""The records of V1_SEGMENT: appended as [0, 1], [2], a release of packet id 9, [3]."""
V1_RELEASED = {3: [9]}  # before offset 3: release of packet id 9
V1_SEGMENT = bytes.fromhex(
    "4d51545457414c0001000000a683a48995e54e7e91a8fa088d6bc1050000000000000000"
    "a456853b090000006b2884df0300000000000000001c0000000e09934c01000000000000"
    "000001000000000000000000000300612f626f6e651c00000081eb92d701010000000000"
    "000002000000000000001507000300612f6274776f2000000040162b1901020000000000"
    "0000fdffffffffffffff1a09000400c3bc2f6300746872656507000000bba66d10020100"
    "0000090019000000cb97c80a01030000000000000004000000000000001107000300612f"
    "62"
)


def v1_header(identity: bytes, first_offset: int) -> bytes:
    """A version 1 segment header."""
    head = HEADER.pack(MAGIC, 1, 0, identity, first_offset, 0)[:-4]
    return head + struct.pack("<I", zlib.crc32(head))


def v1_data_record(offset: int, record: NewRecord) -> bytes:
    """One kind 1 data record."""
    topic, payload, qos, retained, duplicate, pid, stamp = record[:7]
    flags = FLAGS[(qos, retained, duplicate, pid is not None)]
    raw = topic.encode("utf-8")
    fields = DATA_FIELDS.pack(offset, stamp, flags, pid or 0, len(raw))
    return encode_record(KIND_DATA, fields + raw + payload)


def write_v1_wal(
    path: Path,
    segments: Sequence[Sequence[NewRecord]],
    *,
    identity: str = V1_IDENTITY,
    released: dict[int, list[int]] | None = None,
    index_every: int = 0,
) -> list[int]:
    """Write a version 1 WAL whose segments hold ``segments`` (all but the last sealed).

    ``released`` maps an offset to QoS 2 packet ids released just before that offset's record;
    ``index_every`` > 0 writes an index hint for every that many records. Returns the first
    offsets of the segments.
    """
    path.mkdir(parents=True, exist_ok=True)
    (path / "wal.json").write_text(
        json.dumps({"format": "connector-mqtt-wal", "version": 1, "identity": identity})
    )
    raw_identity = bytes.fromhex(identity)
    state, offset, firsts = QosState(), 0, []
    for number, records in enumerate(segments):
        firsts.append(offset)
        data = bytearray(v1_header(raw_identity, offset))
        data += encode_record(KIND_STATE, state.encode())
        hints = []
        for record in records:
            ids = [pid for pid in (released or {}).get(offset, []) if pid in state.pending_qos2]
            if ids:
                data += encode_release(ids)
                state.apply_release(ids)
            if index_every and offset % index_every == 0:
                hints.append(INDEX_ENTRY.pack(offset, len(data)))
            data += v1_data_record(offset, record)
            pid = record.packet_id
            if pid is not None:
                digest = {pid: record_digest(record.topic, record.payload)}
                state.merge(digest, [pid] if record.qos == 2 else [])
            offset += 1
        if number < len(segments) - 1:
            data += encode_seal(offset, zlib.crc32(data))
        (path / segment_name(firsts[-1])).write_bytes(bytes(data))
        (path / index_name(firsts[-1])).write_bytes(b"".join(hints))
    return firsts
