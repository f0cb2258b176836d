"""Segment files: names, the fixed header, the sparse offset index, and atomic creation.

A segment is ``<first offset, 20 digits>.seg``; it is created complete (header plus state
snapshot) under a ``.tmp`` name, fsynced and renamed, so a segment name never points at a
half-written header. ``<first offset>.idx`` is an unsynced hint file of ``u64 offset |
u64 byte position`` pairs; readers validate every entry they use and fall back to scanning.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from .errors import WalCorruptError

SEGMENT_SUFFIX = ".seg"
INDEX_SUFFIX = ".idx"
TEMP_SUFFIX = ".tmp"
_NAME_DIGITS = 20

MAGIC = b"MQTTWAL\0"
FORMAT_VERSION = 2  # what a new WAL's wal.json and segments say; see connector.wal
PROPERTIES_VERSION = 3  # what wal.json says once a block with properties (kind 6) may be stored
READABLE_VERSIONS = (2, 3)
RETIRED_VERSION = 1  # written only before the first release; refused with its own message
HEADER = struct.Struct("<8sHH16sQI")  # magic, version, reserved, identity, first offset, crc32
HEADER_SIZE = HEADER.size
INDEX_ENTRY = struct.Struct("<QQ")  # offset, byte position of that data record
INDEX_INTERVAL = 64 * 1024  # bytes of records between index entries


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """The decoded fixed header of a segment."""

    identity: bytes
    first_offset: int


def segment_name(first_offset: int) -> str:
    """File name of the segment whose first data record has ``first_offset``."""
    return f"{first_offset:0{_NAME_DIGITS}d}{SEGMENT_SUFFIX}"


def index_name(first_offset: int) -> str:
    """File name of the index hint of that segment."""
    return f"{first_offset:0{_NAME_DIGITS}d}{INDEX_SUFFIX}"


def parse_name(name: str, suffix: str) -> int | None:
    """First offset encoded in a segment or index file name, None for any other name."""
    stem = name[: -len(suffix)] if name.endswith(suffix) else ""
    if len(stem) != _NAME_DIGITS or not stem.isdigit():
        return None
    return int(stem)


def list_segments(root: Path) -> list[int]:
    """First offsets of the segment files in ``root``, ascending; [] when it does not exist."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    firsts = [parse_name(name, SEGMENT_SUFFIX) for name in names]
    return sorted(first for first in firsts if first is not None)


def encode_header(identity: bytes, first_offset: int, version: int = FORMAT_VERSION) -> bytes:
    """The 40-byte segment header of a segment created while the WAL is at ``version``."""
    head = HEADER.pack(MAGIC, version, 0, identity, first_offset, 0)[:-4]
    return head + struct.pack("<I", zlib.crc32(head))


def decode_header(raw: bytes, file: str | Path, first_offset: int, identity: bytes | None) -> None:
    """Validate a segment header against its file name and the WAL identity.

    Raises WalCorruptError naming the file when anything disagrees.
    """
    if len(raw) < HEADER_SIZE:
        raise WalCorruptError(file, len(raw), f"segment header is short ({len(raw)} bytes)")
    magic, version, _, stored_identity, stored_first, crc = HEADER.unpack_from(raw, 0)
    if magic != MAGIC:
        raise WalCorruptError(file, 0, f"bad segment magic {magic!r}")
    if zlib.crc32(raw[: HEADER_SIZE - 4]) != crc:
        raise WalCorruptError(file, 0, "segment header CRC mismatch")
    if version not in READABLE_VERSIONS:
        raise WalCorruptError(file, 8, version_refusal("segment", version))
    if stored_first != first_offset:
        raise WalCorruptError(
            file, 28, f"header says first offset {stored_first}, file name says {first_offset}"
        )
    if identity is not None and stored_identity != identity:
        raise WalCorruptError(
            file, 12, f"segment belongs to WAL {stored_identity.hex()}, not {identity.hex()}"
        )


def version_refusal(what: str, version: int) -> str:
    """Why a ``what`` ("WAL" or "segment") of format ``version``, not a readable one, is
    refused."""
    if type(version) is int and version == RETIRED_VERSION:
        return (
            f"{what} format version {version} (written only before the first release) "
            "is no longer read"
        )
    return f"unsupported {what} format version {version}"


def refuse_retired_header(raw: bytes, where: str | Path) -> None:
    """WalCorruptError naming ``where`` when ``raw`` starts with an intact segment header of
    the retired format version: a refusal, which recovery must not take for a torn write."""
    if len(raw) < HEADER_SIZE:
        return
    magic, version, _, _, _, crc = HEADER.unpack_from(raw, 0)
    intact = magic == MAGIC and zlib.crc32(raw[: HEADER_SIZE - 4]) == crc
    if intact and version == RETIRED_VERSION:
        raise WalCorruptError(where, 8, version_refusal("segment", version))


def read_header(file: Path) -> SegmentHeader:
    """Read and CRC-check a header without knowing what it should contain."""
    with open(file, "rb") as handle:
        raw = handle.read(HEADER_SIZE)
    first = parse_name(file.name, SEGMENT_SUFFIX)
    stored_first = HEADER.unpack_from(raw, 0)[4] if len(raw) >= HEADER_SIZE else -1
    decode_header(raw, file, stored_first if first is None else first, None)
    return SegmentHeader(raw[12:28], stored_first)


def read_header_bytes(raw: bytes, where: str) -> bytes:
    """The identity in a segment's first bytes, CRC-checked; WalCorruptError naming
    ``where`` when they are no segment header."""
    stored_first = HEADER.unpack_from(raw, 0)[4] if len(raw) >= HEADER_SIZE else -1
    decode_header(raw[:HEADER_SIZE], where, stored_first, None)
    return raw[12:28]


def fsync_dir(root: Path) -> None:
    """Make renames, creations and deletions in ``root`` durable."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is written (short writes happen on full disks)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def create_segment(root: Path, first_offset: int, data: bytes, *, fsync: bool) -> int:
    """Atomically create segment ``first_offset`` holding ``data``; returns a write fd at its end.

    ``data`` starts with the header and the state snapshot. The file is written and fsynced
    under a temporary name, renamed, and the directory fsynced; on error the temporary file
    is removed and the error propagates.
    """
    final = root / segment_name(first_offset)
    temp = final.with_name(final.name + TEMP_SUFFIX)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
        os.rename(temp, final)
        if fsync:
            fsync_dir(root)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return fd


def open_index(root: Path, first_offset: int, entries: list[tuple[int, int]]) -> int:
    """(Re)create the index hint of a segment with ``entries``; returns an append fd."""
    fd = os.open(
        root / index_name(first_offset),
        os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC,
        0o600,
    )
    try:
        if entries:
            write_all(fd, encode_index(entries))
    except BaseException:
        os.close(fd)
        raise
    return fd


def encode_index(entries: list[tuple[int, int]]) -> bytes:
    """Serialized index entries."""
    pack = INDEX_ENTRY.pack
    return b"".join([pack(offset, position) for offset, position in entries])


def index_lookup(root: Path, first_offset: int, offset: int) -> tuple[int, int] | None:
    """The index entry with the greatest offset <= ``offset`` (unvalidated), or None."""
    try:
        with open(root / index_name(first_offset), "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    usable = len(raw) - len(raw) % INDEX_ENTRY.size
    entries = list(INDEX_ENTRY.iter_unpack(raw[:usable]))
    at = bisect_right(entries, (offset, 1 << 64)) - 1
    return entries[at] if at >= 0 else None
