"""A self-contained bytes blob of one offset range, for shipping records to executors.

Layout: ``4s magic "MQWB" | u16 version | u16 reserved | u64 first offset | u64 count``
followed by exactly ``count`` data records in the segment framing (CRC-checked on decode).
"""

from __future__ import annotations

import struct

from .decode import DONE, DataSink, scan
from .errors import WalCorruptError
from .records import WalColumns

BLOB_MAGIC = b"MQWB"
BLOB_VERSION = 1
BLOB_HEAD = struct.Struct("<4sHHQQ")
_WHERE = "<WAL blob>"


def pack_blob(first_offset: int, frames: list[memoryview] | list[bytes]) -> bytes:
    """A blob holding ``frames``: consecutive data records starting at ``first_offset``."""
    head = BLOB_HEAD.pack(BLOB_MAGIC, BLOB_VERSION, 0, first_offset, len(frames))
    return b"".join([head, *frames])


def decode_blob(blob: bytes | bytearray | memoryview) -> WalColumns:
    """Decode a blob made by ``WalReader.encode_range``; WalCorruptError when it is damaged."""
    data = blob if isinstance(blob, bytes) else bytes(blob)
    if len(data) < BLOB_HEAD.size:
        raise WalCorruptError(_WHERE, 0, f"blob is {len(data)} bytes, shorter than its header")
    magic, version, _, first, count = BLOB_HEAD.unpack_from(data, 0)
    if magic != BLOB_MAGIC:
        raise WalCorruptError(_WHERE, 0, f"bad blob magic {magic!r}")
    if version != BLOB_VERSION:
        raise WalCorruptError(_WHERE, 4, f"unsupported blob version {version}")
    sink = DataSink()
    pos, _, status = scan(data, BLOB_HEAD.size, first, first, first + count, sink, _WHERE, 0)
    if status != DONE:
        raise WalCorruptError(_WHERE, pos, f"blob ends after {len(sink)} of {count} records")
    if pos != len(data):
        raise WalCorruptError(_WHERE, pos, f"{len(data) - pos} unexpected bytes after the records")
    return sink.columns(first)
