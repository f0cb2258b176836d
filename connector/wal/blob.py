"""A self-contained bytes blob of one offset range, for shipping records to executors.

Layout: ``4s magic "MQWB" | u16 version | u16 reserved | u64 first offset | u64 count``
followed by the data blocks that hold offsets ``[first, first + count)``, whole, in the
segment framing (CRC-checked on decode). A block may begin before ``first`` or end after
``first + count``; the decoder keeps only the range's rows. A version 2 blob holds blocks
without properties (kind 5), a version 3 blob at least one with properties (kind 6); any other
version is refused.
"""

from __future__ import annotations

import struct

from connector.wal.scan import DONE, DataSink, scan

from .columns import WalColumns
from .errors import WalCorruptError
from .records import FRAME_SIZE, KIND_PROPERTIES_BLOCK, OFFSET_AT

BLOB_MAGIC = b"MQWB"
BLOB_VERSION = 2
PROPERTIES_BLOB_VERSION = 3
READABLE_BLOB_VERSIONS = (2, 3)
BLOB_HEAD = struct.Struct("<4sHHQQ")
_OFFSET = struct.Struct("<Q")
_WHERE = "<WAL blob>"


def pack_blob(first_offset: int, count: int, frames: list[memoryview] | list[bytes]) -> bytes:
    """A blob of offsets ``[first_offset, first_offset + count)`` held by ``frames``; version 3
    when a frame is a data block with properties (one look per frame, not per row)."""
    properties = any(frame[FRAME_SIZE] == KIND_PROPERTIES_BLOCK for frame in frames)
    version = PROPERTIES_BLOB_VERSION if properties else BLOB_VERSION
    head = BLOB_HEAD.pack(BLOB_MAGIC, version, 0, first_offset, count)
    return b"".join([head, *frames])


def decode_blob(blob: bytes | bytearray | memoryview) -> WalColumns:
    """Decode a blob made by ``WalReader.encode_range``; WalCorruptError when it is damaged."""
    data = blob if isinstance(blob, bytes) else bytes(blob)
    if len(data) < BLOB_HEAD.size:
        raise WalCorruptError(_WHERE, 0, f"blob is {len(data)} bytes, shorter than its header")
    magic, version, _, first, count = BLOB_HEAD.unpack_from(data, 0)
    if magic != BLOB_MAGIC:
        raise WalCorruptError(_WHERE, 0, f"bad blob magic {magic!r}")
    if version not in READABLE_BLOB_VERSIONS:
        raise WalCorruptError(_WHERE, 4, f"unsupported blob version {version}")
    sink = DataSink()
    pos = BLOB_HEAD.size
    if count:
        # The first block's first offset; the scan checks every following one, and that the
        # range is covered.
        if len(data) < pos + OFFSET_AT + _OFFSET.size:
            raise WalCorruptError(_WHERE, pos, f"blob ends after 0 of {count} records")
        stored = _OFFSET.unpack_from(data, pos + OFFSET_AT)[0]
        if stored > first:
            raise WalCorruptError(_WHERE, pos, f"blob starts at offset {stored}, not {first}")
        pos, _, status = scan(data, pos, stored, first, first + count, sink, _WHERE, 0)
        if status != DONE:
            raise WalCorruptError(_WHERE, pos, f"blob ends after {len(sink)} of {count} records")
    if pos != len(data):
        raise WalCorruptError(_WHERE, pos, f"{len(data) - pos} unexpected bytes after the records")
    return sink.columns(first)
