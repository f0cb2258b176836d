"""The protocol buffers wire format (https://protobuf.dev/programming-guides/encoding/) in pure
Python, sans-I/O: a strict walk over a message's fields, for what the upb parser does not say
(which field, at which byte, broke which rule: :mod:`.payload` walks a payload that upb refused
or did not give back byte for byte), and for readers that need a field or two of a message
without decoding it (a DATA message's seq); and the few a host needs to write (:func:`key`,
:func:`varint`, :func:`length_delimited`).

A message is a run of fields, each a key (a varint: field number << 3 | wire type) and a value:
a varint (wire type 0), 8 little-endian bytes (1), a length-delimited run of bytes (2: strings,
bytes, nested messages, packed repeated scalars) or 4 little-endian bytes (5). Groups (3, 4)
are long deprecated and not used by Sparkplug: they are refused. :func:`fields` walks one
message and yields each field as it is; a reader of a message type keeps the fields it knows
and skips the others (protocol buffers' rule for unknown fields and extensions). Every error is
a :class:`WireError` that says what was wrong and at which byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

VARINT = 0
FIXED64 = 1
LENGTH = 2
FIXED32 = 5

MAX_VARINT_BYTES = 10
"""A varint holds at most 64 bits: 10 bytes of 7 bits."""

MAX_FIELD_NUMBER = (1 << 29) - 1
"""The largest field number protocol buffers allows (a parser refuses a larger one)."""

_FIXED32 = struct.Struct("<I")
_FIXED64 = struct.Struct("<Q")


class WireError(ValueError):
    """Bytes that are not a well-formed protocol buffers message (or not the one expected)."""


def read_varint(data: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` (before ``end``) and the position after it."""
    result = shift = 0
    start = pos
    while pos < end:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if pos - start > MAX_VARINT_BYTES or result >> 64:
                raise WireError(f"varint at byte {start} is longer than 64 bits")
            return result, pos
        shift += 7
        if pos - start >= MAX_VARINT_BYTES:
            raise WireError(f"varint at byte {start} runs past {MAX_VARINT_BYTES} bytes")
    raise WireError(f"varint at byte {start} is cut short by the end of its message ({end})")


Field = tuple[int, int, int | bytes | memoryview]
"""One field: (field number, wire type, value). A varint or fixed value as an unsigned int; a
length-delimited value as a slice of the message's bytes."""


def fields(
    data: bytes | memoryview, start: int = 0, end: int | None = None, where: str = ""
) -> Iterator[Field]:
    """The fields of the message in ``data[start:end]``, in order. A WireError names ``where``
    (the message's path in its payload) and the byte offset inside the bytes given."""
    view = data if isinstance(data, memoryview) else memoryview(data)
    stop = len(view) if end is None else end
    pos = start
    try:
        while pos < stop:
            at = pos
            key = view[pos]  # one byte for field numbers below 16: read it inline
            if key < 0x80:
                pos += 1
            else:
                key, pos = read_varint(view, pos, stop)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise WireError(f"field number 0 at byte {at} (field numbers start at 1)")

            if wire == VARINT:
                if pos < stop and view[pos] < 0x80:
                    value = view[pos]
                    pos += 1
                else:
                    value, pos = read_varint(view, pos, stop)
                yield number, wire, value
            elif wire == LENGTH:
                if pos < stop and view[pos] < 0x80:
                    length = view[pos]
                    pos += 1
                else:
                    length, pos = read_varint(view, pos, stop)
                if length > stop - pos:
                    raise WireError(
                        f"field {number} at byte {at}: length {length} runs past the end of "
                        f"its message ({stop - pos} bytes left)"
                    )
                yield number, wire, view[pos : pos + length]
                pos += length
            elif wire in (FIXED64, FIXED32):
                fixed = _FIXED64 if wire == FIXED64 else _FIXED32
                if stop - pos < fixed.size:
                    raise WireError(
                        f"field {number} at byte {at}: {fixed.size} bytes cut short "
                        f"({stop - pos} left)"
                    )
                yield number, wire, fixed.unpack_from(view, pos)[0]
                pos += fixed.size
            else:
                raise WireError(
                    f"field {number} at byte {at} has wire type {wire}: "
                    + ("groups are not supported" if wire in (3, 4) else "no such wire type")
                )
    except WireError as exc:
        if not where:
            raise
        raise WireError(f"{where}: {exc}") from None


def optional(message: Any, name: str) -> Any:
    """Field ``name`` of a decoded message (the generated classes of :mod:`.payload`), None when
    absent: protobuf reads an absent field as its default, and an absent alias is not alias 0.
    Here, beside the wire, so that what only reads decoded messages (the state, the host's live
    view) imports no protobuf until a payload is decoded."""
    value = getattr(message, name)
    if value or message.HasField(name):
        return value
    return None


# -------------------------------------------------------------------------- writing


def varint(value: int) -> bytes:
    """``value`` (0 to 2**64 - 1) as a varint."""
    if not 0 <= value < 1 << 64:
        raise ValueError(f"{value} does not fit an unsigned 64-bit varint")
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(number: int, wire: int) -> bytes:
    """The key of field ``number`` with wire type ``wire``."""
    return varint(number << 3 | wire)


def length_delimited(number: int, value: bytes) -> bytes:
    """Field ``number`` holding ``value`` (a string's UTF-8, bytes, a nested message)."""
    return key(number, LENGTH) + varint(len(value)) + value
