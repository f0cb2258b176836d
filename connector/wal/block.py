"""Data blocks (record kinds 5 and 6): consecutive data records stored column by column.

Body after the kind byte; positions are relative to the body's first byte, integers little
endian, padding bytes zero (``n`` rows, topic table of ``t`` bytes)::

    0               u64 first offset | u32 n | u32 t
    16              topic table: per distinct topic, u16 length | UTF-8 (index = position)
    a = 16 + t, rounded up to a multiple of 8
    a               n x i64 timestamp_us
    a + 8n          n x u16 packet id (0 without one)
    a + 10n         n x u8 flags (bits 0-1 QoS, 2 retain, 3 dup, 4 packet id present)
    b = a + 11n, rounded up to a multiple of 4
    b               n x u32 topic index
    b + 4n          (n + 1) x u32 payload end position (the first is 0; all below 2^31)
    kind 5:
    c = b + 8n + 4  payload bytes: row i's payload is [end_i, end_(i+1)) from c
    kind 6 (a block with properties):
    b + 8n + 4      (n + 1) x u32 property end position (the first is 0; all below 2^31)
    c = b + 12n + 8 payload bytes, as in kind 5
    d = c + end_n   property bytes: row i's properties are [pend_i, pend_(i+1)) from d

A kind 5 body is exactly ``c + end_n`` bytes, a kind 6 body ``d + pend_n``. A row's properties
are opaque bytes (the source stores an MQTT 5 PUBLISH's property encoding; the WAL never parses
them); a row without any has an empty range. The writer makes a kind 6 block only when at least
one of its rows has properties, so a WAL of messages without properties holds kind 5 blocks
only. Columns are aligned to their width within the body, so a reader that copies the body
into its own buffer can hand the columns to Arrow as they are (``pyarrow.Array.from_buffers``)
without touching a row. Blocks are written and read on little-endian hosts only (the columns
are machine arrays).
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array

from .columns import ColumnPiece
from .errors import WalCorruptError
from .records import BLOCK_HEAD, FRAME, KIND_BLOCK, KIND_PROPERTIES_BLOCK

_U16 = struct.Struct("<H")
_KIND_BYTE = bytes((KIND_BLOCK,))
_PROPERTIES_KIND_BYTE = bytes((KIND_PROPERTIES_BLOCK,))
ROW_BYTES = 8 + 2 + 1 + 4 + 4  # timestamp, packet id, flags, topic index, payload end
PROPERTIES_ROW_BYTES = ROW_BYTES + 4  # and a property end (kind 6)
BLOCK_SLACK = FRAME.size + 1 + BLOCK_HEAD.size + 7 + 3 + 4 + 4
"""Upper bound of a block's on-disk size minus its topic table, rows, payload and property
bytes (either kind)."""


def _check_host() -> None:
    if sys.byteorder != "little":
        raise NotImplementedError("WAL data blocks need a little-endian host")


def body_size(count: int, table_bytes: int, payload_bytes: int, property_bytes: int = 0) -> int:
    """Bytes of a block body (after the kind byte) with these contents: kind 6 when
    ``property_bytes`` is not 0, else kind 5."""
    at = (16 + table_bytes + 7) & ~7
    at = (at + 11 * count + 3) & ~3
    if property_bytes:
        return at + 12 * count + 8 + payload_bytes + property_bytes
    return at + 8 * count + 4 + payload_bytes


def encode_block(
    first_offset: int,
    topics: list[bytes],
    timestamps: array[int],
    packet_ids: array[int],
    flags: bytearray,
    topic_ids: array[int],
    payload_ends: array[int],
    payloads: list[bytes],
    property_ends: array[int] | None = None,
    properties: list[bytes] | None = None,
) -> list[bytes]:
    """The framed block record as parts to write in order (frame head, columns, payloads and
    for kind 6 the property bytes).

    ``topics`` are the UTF-8 names indexed by ``topic_ids`` (``array('i')``); the arrays
    hold one value per row (``payload_ends`` one more, starting with 0). With
    ``property_ends`` (as ``payload_ends``) and ``properties`` the block is kind 6; the caller
    passes them only when some row has properties.
    """
    _check_host()
    count = len(flags)
    pack = _U16.pack
    table = b"".join([pack(len(raw)) + raw for raw in topics])
    at = 16 + len(table)
    columns = (at + 7) & ~7
    ids_at = (columns + 11 * count + 3) & ~3
    fixed = b"".join(
        (
            _KIND_BYTE if property_ends is None else _PROPERTIES_KIND_BYTE,
            BLOCK_HEAD.pack(first_offset, count, len(table)),
            table,
            bytes(columns - at),
            timestamps.tobytes(),
            packet_ids.tobytes(),
            flags,
            bytes(ids_at - columns - 11 * count),
            topic_ids.tobytes(),
            payload_ends.tobytes(),
            b"" if property_ends is None else property_ends.tobytes(),
        )
    )
    payload = b"".join(payloads)
    crc = zlib.crc32(payload, zlib.crc32(fixed))
    if property_ends is None:
        return [FRAME.pack(len(fixed) + len(payload), crc), fixed, payload]
    extra = b"".join(properties or ())
    crc = zlib.crc32(extra, crc)
    return [FRAME.pack(len(fixed) + len(payload) + len(extra), crc), fixed, payload, extra]


def decode_block(body: bytes, where: str, position: int, kind: int = KIND_BLOCK) -> ColumnPiece:
    """The columns of a block body of record ``kind`` 5 or 6 (the bytes after its kind byte;
    CRC already checked).

    ``body`` should be a buffer of its own (so its columns are aligned); the piece's columns
    are zero-copy views of it. Raises WalCorruptError naming ``where`` and byte ``position``
    (the record's start) when the layout does not add up.
    """
    _check_host()
    size = len(body)
    _, count, table_bytes = BLOCK_HEAD.unpack_from(body, 0)
    columns = (16 + table_bytes + 7) & ~7
    ids_at = (columns + 11 * count + 3) & ~3
    ends_at = ids_at + 4 * count
    with_properties = kind == KIND_PROPERTIES_BLOCK
    data_at = ends_at + (8 * count + 8 if with_properties else 4 * count + 4)
    if data_at > size:
        raise WalCorruptError(where, position, f"data block of {count} rows is only {size} bytes")
    view = memoryview(body)
    ends = view[ends_at : ends_at + 4 * count + 4].cast("i")
    payload_end = data_at + ends[count]
    if ends[0] != 0 or ends[count] < 0 or payload_end > size:
        raise WalCorruptError(where, position, "data block payload positions do not add up")
    property_ends = property_data = None
    if with_properties:
        property_ends = view[ends_at + 4 * count + 4 : data_at].cast("i")
        if property_ends[0] != 0 or property_ends[count] != size - payload_end:
            raise WalCorruptError(where, position, "data block property positions do not add up")
        property_data = view[payload_end:]
    elif payload_end != size:
        raise WalCorruptError(where, position, "data block payload positions do not add up")
    names = _topic_table(view[16 : 16 + table_bytes], where, position)
    return ColumnPiece(
        names,
        view[ids_at : ids_at + 4 * count].cast("i"),
        view[columns + 10 * count : columns + 11 * count],
        view[columns + 8 * count : columns + 10 * count].cast("H"),
        view[columns : columns + 8 * count].cast("q"),
        ends,
        view[data_at:payload_end],
        property_ends=property_ends,
        property_data=property_data,
    )


def _topic_table(table: memoryview, where: str, position: int) -> list[str]:
    """The topic names of a block's topic table."""
    names: list[str] = []
    at, size = 0, len(table)
    try:
        while at < size:
            (length,) = _U16.unpack_from(table, at)
            at += 2 + length
            if at > size:
                raise ValueError("a topic runs past the topic table")
            names.append(str(table[at - length : at], "utf-8"))
    except (ValueError, struct.error) as exc:
        raise WalCorruptError(where, position, f"data block topic table: {exc}") from exc
    return names
