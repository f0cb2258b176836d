"""Record types and the record framing shared by the writer, the reader and the blob codec.

A record on disk is ``u32 length | u32 crc32 | u8 kind | body`` (little endian). ``length``
counts the kind byte plus the body; ``crc32`` (zlib) covers exactly those ``length`` bytes.
See :mod:`connector.wal` for the body of each kind.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

KIND_RELEASE = 2
KIND_STATE = 3
KIND_SEAL = 4
KIND_BLOCK = 5
KIND_PROPERTIES_BLOCK = 6
BLOCK_KINDS = frozenset((KIND_BLOCK, KIND_PROPERTIES_BLOCK))
KNOWN_KINDS = frozenset((KIND_RELEASE, KIND_STATE, KIND_SEAL, *BLOCK_KINDS))

FLAG_QOS_MASK = 0x03
FLAG_RETAIN = 0x04
FLAG_DUP = 0x08
FLAG_HAS_ID = 0x10

FRAME = struct.Struct("<II")  # length, crc32
FRAME_SIZE = FRAME.size
FRAME_KIND = struct.Struct("<IIB")  # length, crc32, kind
OFFSET_AT = FRAME_SIZE + 1  # where a data block's first offset starts
SEAL_BODY = struct.Struct("<QI")  # end offset, crc32 of every segment byte before the seal
SEAL_RECORD_SIZE = FRAME_SIZE + 1 + SEAL_BODY.size
COUNT = struct.Struct("<I")
BLOCK_HEAD = struct.Struct("<QII")  # a data block's first offset, row count, topic table bytes
BLOCK_HEAD_LENGTH = 1 + BLOCK_HEAD.size  # smallest valid ``length`` of a data block (5 or 6)

MAX_TOPIC_BYTES = 0xFFFF
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024  # MQTT's largest packet is 256 MiB
"""The most payload bytes of a row, its property bytes included (both travel in one PUBLISH)."""
MAX_RECORD_LENGTH = MAX_TOPIC_BYTES + MAX_PAYLOAD_BYTES + 22 + (1 << 20)
"""The largest valid ``length`` of a record (a constant of the format; longer is damage). A
block holds less than one index interval (64 KiB) of rows before its last row, whose topic,
payload and properties fit MAX_TOPIC_BYTES + MAX_PAYLOAD_BYTES; 1 MiB and 22 bytes cover the
block's head and the rest of its per-row columns."""

# (qos, retain, dup, has packet id) -> flags byte; a missing key is an invalid record.
FLAGS: dict[tuple[int, bool, bool, bool], int] = {
    (qos, retain, dup, has_id): (
        qos
        | (FLAG_RETAIN if retain else 0)
        | (FLAG_DUP if dup else 0)
        | (FLAG_HAS_ID if has_id else 0)
    )
    for qos in (0, 1, 2)
    for retain in (False, True)
    for dup in (False, True)
    for has_id in (False, True)
}
QOS_OF: tuple[int, ...] = tuple(f & FLAG_QOS_MASK for f in range(256))
RETAIN_OF: tuple[bool, ...] = tuple(bool(f & FLAG_RETAIN) for f in range(256))
DUP_OF: tuple[bool, ...] = tuple(bool(f & FLAG_DUP) for f in range(256))


class NewRecord(NamedTuple):
    """A message to append; the WAL assigns its offset. ``packet_id`` is None for QoS 0.

    ``properties`` are opaque bytes the WAL stores beside the payload and never parses (the
    source puts an MQTT 5 PUBLISH's property encoding there); ``b""`` for none."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int | None
    timestamp_us: int
    properties: bytes = b""


PlainRecordTuple = tuple[str, bytes, int, bool, bool, int | None, int]
"""A message without properties as a plain tuple in :class:`NewRecord`'s field order, the
first seven (cheaper to build than a NewRecord)."""

PropertiesRecordTuple = tuple[str, bytes, int, bool, bool, int | None, int, bytes]
"""A message with its ``properties`` bytes (``b""`` for none) as a plain tuple: all eight of
:class:`NewRecord`'s fields."""

RecordTuple = PlainRecordTuple | PropertiesRecordTuple
"""A message to append. Every record of one append has the same length: seven fields (the
encoder's loop then never looks at properties) or eight (a NewRecord is eight)."""


class WalRecord(NamedTuple):
    """A stored message with its offset; ``properties`` ``b""`` when it has none."""

    offset: int
    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int | None
    timestamp_us: int
    properties: bytes = b""


def record_digest(topic: str, payload: bytes) -> int:
    """The 32-bit digest kept per QoS 1 packet id: crc32 of UTF-8 topic, a NUL, the payload."""
    return zlib.crc32(payload, digest_seed(topic.encode("utf-8")))


def digest_seed(topic: bytes | memoryview) -> int:
    """crc32 of a UTF-8 topic and a NUL: continued over the payload, it is the record digest."""
    return zlib.crc32(b"\0", zlib.crc32(topic))


def encode_record(kind: int, body: bytes) -> bytes:
    """Frame one record of any kind."""
    framed = bytes((kind,)) + body
    return FRAME.pack(len(framed), zlib.crc32(framed)) + framed


def encode_release(packet_ids: list[int]) -> bytes:
    """A QoS 2 release record: the listed packet ids are no longer pending."""
    body = COUNT.pack(len(packet_ids)) + struct.pack(f"<{len(packet_ids)}H", *packet_ids)
    return encode_record(KIND_RELEASE, body)


def decode_release(body: bytes | memoryview) -> list[int]:
    """Packet ids of a release record body; ValueError when the body is malformed."""
    (count,) = COUNT.unpack_from(body, 0)
    if len(body) != COUNT.size + 2 * count:
        raise ValueError(f"release record holds {len(body)} bytes for {count} ids")
    return list(struct.unpack_from(f"<{count}H", body, COUNT.size))


def encode_seal(end_offset: int, segment_crc: int) -> bytes:
    """The last record of a full segment: its end offset and the crc32 of all bytes before it."""
    return encode_record(KIND_SEAL, SEAL_BODY.pack(end_offset, segment_crc))


def frame_problem(buf: bytes | memoryview, pos: int) -> str | None:
    """Why the record at ``pos`` is not a complete, intact frame of a known kind (None if it is)."""
    available = len(buf) - pos
    if available < FRAME_SIZE + 1:
        return f"short record header ({available} bytes)"
    length, crc, kind = FRAME_KIND.unpack_from(buf, pos)
    if length < 1 or length > MAX_RECORD_LENGTH:
        return f"invalid record length {length}"
    if FRAME_SIZE + length > available:
        return f"short record (needs {FRAME_SIZE + length} bytes, {available} present)"
    if zlib.crc32(memoryview(buf)[pos + FRAME_SIZE : pos + FRAME_SIZE + length]) != crc:
        return "record CRC mismatch"
    if kind not in KNOWN_KINDS:
        return f"unknown record kind {kind}"
    if kind in BLOCK_KINDS and length < BLOCK_HEAD_LENGTH:
        return f"data block too short ({length} bytes)"
    if kind == KIND_SEAL and length != 1 + SEAL_BODY.size:
        return f"seal record has length {length}"
    return None
