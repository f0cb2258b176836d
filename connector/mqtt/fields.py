"""Wire primitives shared by every packet: integers, Variable Byte Integers, UTF-8 strings and
binary data (MQTT 3.1.1 sections 1.5 and 2.2.3; MQTT 5.0 sections 1.5.2 to 1.5.7).

Writers raise :class:`~connector.mqtt.errors.InvalidArgument` for a value the caller gives that
the standard refuses; readers raise :class:`~connector.mqtt.errors.MalformedFrame` for bytes
received that break a rule. Each message names the rule and its section.
"""

from __future__ import annotations

from struct import Struct

from .errors import InvalidArgument, MalformedFrame

MAX_VARIABLE_BYTE_INTEGER = 268_435_455
"""Largest value four Variable Byte Integer bytes can hold (MQTT 5.0 section 1.5.5)."""

MAX_REMAINING_LENGTH = MAX_VARIABLE_BYTE_INTEGER
"""Largest value four Remaining Length bytes can hold (section 2.2.3)."""

U16 = Struct(">H")
U32 = Struct(">I")


# ---------------------------------------------------------------------------------------------
# Remaining Length (3.1.1 section 2.2.3) and Variable Byte Integer (MQTT 5.0 section 1.5.5)


def encode_remaining_length(length: int) -> bytes:
    """Variable-length encoding of ``length``: 7 bits a byte, high bit = more (section 2.2.3)."""
    if not 0 <= length <= MAX_REMAINING_LENGTH:
        raise InvalidArgument(f"remaining length {length} is outside 0..{MAX_REMAINING_LENGTH}")
    if length < 0x80:
        return bytes((length,))
    out = bytearray()
    while True:
        digit = length & 0x7F
        length >>= 7
        if length:
            out.append(digit | 0x80)
        else:
            out.append(digit)
            return bytes(out)


def encode_variable_byte_integer(value: int, what: str = "a Variable Byte Integer") -> bytes:
    """``value`` as a Variable Byte Integer in the fewest bytes, 1 to 4 (MQTT 5.0 section
    1.5.5)."""
    if not 0 <= value <= MAX_VARIABLE_BYTE_INTEGER:
        raise InvalidArgument(
            f"{what} must be in 0..{MAX_VARIABLE_BYTE_INTEGER}, got {value} "
            "(MQTT 5.0 section 1.5.5)"
        )
    return encode_remaining_length(value)


def decode_remaining_length(buf: bytes, pos: int) -> tuple[int, int] | None:
    """Parse a Remaining Length at ``buf[pos:]``: (value, position after it), or None if the
    field is not complete yet. More than four bytes is malformed (section 2.2.3)."""
    value = 0
    shift = 0
    end = len(buf)
    for i in range(4):
        if pos + i >= end:
            return None
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + i + 1
        shift += 7
    raise MalformedFrame(
        "remaining length uses more than 4 bytes (section 2.2.3: at most 4, max 268435455)"
    )


def decode_variable_byte_integer(buf: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """Parse a Variable Byte Integer in ``buf[pos:end]``: (value, position after it).

    At most four bytes, in the fewest bytes that hold the value ([MQTT-1.5.5-1]); one that runs
    past ``end`` is cut short. Each is a MalformedFrame (MQTT 5.0 section 1.5.5)."""
    value = 0
    shift = 0
    for i in range(4):
        if pos + i >= end:
            raise MalformedFrame(
                f"{what} runs past the end of the packet (truncated Variable Byte Integer, "
                "MQTT 5.0 section 1.5.5)"
            )
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if byte == 0 and i:
                raise MalformedFrame(
                    f"{what} is not encoded in the fewest bytes (a Variable Byte Integer must "
                    "use the minimum number of bytes, MQTT 5.0 section 1.5.5)"
                )
            return value, pos + i + 1
        shift += 7
    raise MalformedFrame(
        f"{what} uses more than 4 bytes (a Variable Byte Integer has at most 4, "
        "MQTT 5.0 section 1.5.5)"
    )


# ---------------------------------------------------------------------------------------------
# UTF-8 strings (3.1.1 section 1.5.3, MQTT 5.0 section 1.5.4) and binary data (MQTT 5.0 1.5.6)


def encode_utf8(text: str) -> bytes:
    """UTF-8 string with a two-byte big-endian length prefix (section 1.5.3)."""
    if "\x00" in text:
        raise InvalidArgument(f"string {text!r} contains U+0000 (section 1.5.3)")
    data = text.encode("utf-8")
    if len(data) > 0xFFFF:
        raise InvalidArgument(f"string of {len(data)} bytes exceeds 65535 bytes (section 1.5.3)")
    return U16.pack(len(data)) + data


def encode_binary(data: bytes) -> bytes:
    """Binary data with a two-byte big-endian length prefix, at most 65535 bytes."""
    if len(data) > 0xFFFF:
        raise InvalidArgument(f"binary field of {len(data)} bytes exceeds 65535 bytes")
    return U16.pack(len(data)) + bytes(data)


def decode_utf8(data: bytes, what: str, section: str = "section 1.5.3") -> str:
    """Decode a UTF-8 string field: well-formed, no surrogates, no U+0000 (section 1.5.3; MQTT
    5.0 section 1.5.4 states the same rules)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFrame(f"{what} is not well-formed UTF-8 ({section}): {exc}") from None
    if "\x00" in text:
        raise MalformedFrame(f"{what} contains U+0000 ({section})")
    return text
