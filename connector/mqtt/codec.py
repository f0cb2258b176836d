"""Packet <-> bytes for MQTT 3.1 and 3.1.1, with strict validation.

Writers (``encode``) build one frame; ``decode_packet`` parses one frame body once its fixed
header has been read (see :mod:`connector.mqtt.decoder` for the stream side). The layout of
the four-byte acknowledgement frames is written once, here (``encode_ack``, ``encode_acks``).
A frame read that breaks a rule raises :class:`~connector.mqtt.errors.MalformedFrame` (the
peer's fault), a packet the caller asks for that would break one raises
:class:`~connector.mqtt.errors.InvalidArgument` or ``InvalidTopic``; each message names the
rule and its section of the MQTT 3.1.1 standard (the 3.1 text where the versions differ).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable
from struct import Struct

from .errors import InvalidArgument, InvalidTopic, MalformedFrame
from .packets import (
    SUBACK_FAILURE,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    ProtocolLevel,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
)
from .topics import validate_topic_filter, validate_topic_name

MAX_REMAINING_LENGTH = 268_435_455
"""Largest value four Remaining Length bytes can hold (section 2.2.3)."""

TOPIC_CACHE_SIZE = 4096
"""Distinct topics a stream decoder remembers before it starts its cache afresh."""

_U16 = Struct(">H")
_PACKET_NAMES = {t.value: t.name for t in PacketType}

# Required flag nibble per packet type (section 2.2.2, table 2.2); PUBLISH is checked apart.
_FLAGS_3_1_1 = {t: 0 for t in range(1, 15)}
_FLAGS_3_1_1.update({PacketType.PUBREL: 2, PacketType.SUBSCRIBE: 2, PacketType.UNSUBSCRIBE: 2})
_QOS1_STYLE = (PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE)


# ---------------------------------------------------------------------------------------------
# Remaining Length (section 2.2.3)


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


# ---------------------------------------------------------------------------------------------
# Field writers


def _utf8(text: str) -> bytes:
    """UTF-8 string with a two-byte big-endian length prefix (section 1.5.3)."""
    if "\x00" in text:
        raise InvalidArgument(f"string {text!r} contains U+0000 (section 1.5.3)")
    data = text.encode("utf-8")
    if len(data) > 0xFFFF:
        raise InvalidArgument(f"string of {len(data)} bytes exceeds 65535 bytes (section 1.5.3)")
    return _U16.pack(len(data)) + data


def _binary(data: bytes) -> bytes:
    if len(data) > 0xFFFF:
        raise InvalidArgument(f"binary field of {len(data)} bytes exceeds 65535 bytes")
    return _U16.pack(len(data)) + bytes(data)


def _frame(first_byte: int, body: bytes) -> bytes:
    return bytes((first_byte,)) + encode_remaining_length(len(body)) + body


def _check_packet_id(packet_id: int | None, what: str) -> int:
    if packet_id is None or not 1 <= packet_id <= 0xFFFF:
        raise InvalidArgument(f"{what} needs a packet identifier in 1..65535, got {packet_id!r}")
    return packet_id


def encode_publish(
    topic: str | bytes,
    payload: bytes,
    qos: int = 0,
    packet_id: int | None = None,
    retain: bool = False,
    dup: bool = False,
) -> bytes:
    """One PUBLISH frame (section 3.3). ``topic`` may be pre-encoded UTF-8 bytes."""
    if qos not in (0, 1, 2):
        raise InvalidArgument(f"QoS must be 0, 1 or 2, got {qos!r} (section 3.3.1.2)")
    topic_bytes = topic.encode("utf-8") if isinstance(topic, str) else topic
    header = 0x30 | (qos << 1) | (1 if retain else 0)
    if qos:
        pid = _check_packet_id(packet_id, "a QoS 1/2 PUBLISH")
        if dup:
            header |= 0x08
        variable = _U16.pack(len(topic_bytes)) + topic_bytes + _U16.pack(pid)
    else:
        if dup:
            raise InvalidArgument("DUP must be 0 on a QoS 0 PUBLISH (section 3.3.1.1)")
        variable = _U16.pack(len(topic_bytes)) + topic_bytes
    length = len(variable) + len(payload)
    return bytes((header,)) + encode_remaining_length(length) + variable + payload


# ---------------------------------------------------------------------------------------------
# Acknowledgements: PUBACK, PUBREC, PUBREL, PUBCOMP and UNSUBACK (sections 3.4-3.7, 3.11)

ACK_FIRST_BYTES: dict[PacketType, int] = {
    kind: kind << 4 | _FLAGS_3_1_1[kind]  # PUBREL's flags are 0010 (section 3.6.1)
    for kind in (
        PacketType.PUBACK,
        PacketType.PUBREC,
        PacketType.PUBREL,
        PacketType.PUBCOMP,
        PacketType.UNSUBACK,
    )
}

ACK_WORDS: dict[PacketType, int] = {
    kind: first << 24 | 2 << 16 for kind, first in ACK_FIRST_BYTES.items()
}
"""An acknowledgement frame is four bytes: the first byte (type and flags), remaining length 2,
the packet identifier (big-endian). Read as one big-endian 32-bit number it is
``ACK_WORDS[kind] | packet_id``: writers that answer many packets at once collect such words
and write them with one ``encode_acks`` call."""

_ACK = Struct(">I")
_SWAP_WORDS = sys.byteorder == "little"
_WORDS_IN_ARRAY = array("I").itemsize == 4


def encode_ack(kind: PacketType, packet_id: int | None) -> bytes:
    """One acknowledgement frame of ``kind`` (a key of ``ACK_WORDS``) for ``packet_id``."""
    return _ACK.pack(ACK_WORDS[kind] | _check_packet_id(packet_id, kind.name))


def encode_acks(words: list[int]) -> bytes:
    """Consecutive acknowledgement frames, one per word ``ACK_WORDS[kind] | packet_id``, in
    order. The packet ids are not checked: they come from decoded packets or the session."""
    if _WORDS_IN_ARRAY:  # one C loop: faster than a struct format of len(words) items
        frames = array("I", words)
        if _SWAP_WORDS:
            frames.byteswap()
        return frames.tobytes()
    return Struct(f">{len(words)}I").pack(*words)  # pragma: no cover - a 2-byte C int


def encode(packet: Packet, level: int = ProtocolLevel.MQTT_3_1_1) -> bytes:
    """Encode ``packet`` into one frame for protocol ``level`` (3 = MQTT 3.1, 4 = 3.1.1)."""
    kind = packet.type
    if isinstance(packet, Publish):
        validate_topic_name(packet.topic)
        return encode_publish(
            packet.topic, packet.payload, packet.qos, packet.packet_id, packet.retain, packet.dup
        )
    if isinstance(packet, Puback | Pubrec | Pubrel | Pubcomp | Unsuback):
        return encode_ack(kind, packet.packet_id)
    if kind is PacketType.PINGREQ:
        return b"\xc0\x00"
    if kind is PacketType.PINGRESP:
        return b"\xd0\x00"
    if kind is PacketType.DISCONNECT:
        return b"\xe0\x00"
    if isinstance(packet, Connect):
        return _encode_connect(packet)
    if isinstance(packet, Connack):
        if not 0 <= packet.return_code <= 5:
            raise InvalidArgument(f"CONNACK return code {packet.return_code} is not 0..5")
        flags = 1 if packet.session_present and level >= 4 else 0
        return bytes((0x20, 2, flags, packet.return_code))
    if isinstance(packet, Subscribe):
        if not packet.subscriptions:
            raise InvalidArgument("SUBSCRIBE needs at least one topic filter (section 3.8.3)")
        body = bytearray(_U16.pack(_check_packet_id(packet.packet_id, "SUBSCRIBE")))
        for topic_filter, qos in packet.subscriptions:
            if qos not in (0, 1, 2):
                raise InvalidArgument(f"requested QoS must be 0..2, got {qos!r} (section 3.8.3.1)")
            body += _utf8(validate_topic_filter(topic_filter)) + bytes((qos,))
        return _frame(0x82, bytes(body))
    if isinstance(packet, Suback):
        if not packet.return_codes:
            raise InvalidArgument("SUBACK needs at least one return code (section 3.9.3)")
        for code in packet.return_codes:
            if code not in (0, 1, 2, SUBACK_FAILURE):
                raise InvalidArgument(f"SUBACK return code {code:#x} is not 0, 1, 2 or 0x80")
        pid = _check_packet_id(packet.packet_id, "SUBACK")
        return _frame(0x90, _U16.pack(pid) + bytes(packet.return_codes))
    if isinstance(packet, Unsubscribe):
        if not packet.topics:
            raise InvalidArgument("UNSUBSCRIBE needs at least one topic filter (section 3.10.3)")
        body = bytearray(_U16.pack(_check_packet_id(packet.packet_id, "UNSUBSCRIBE")))
        for topic_filter in packet.topics:
            body += _utf8(validate_topic_filter(topic_filter))
        return _frame(0xA2, bytes(body))
    raise TypeError(f"cannot encode {packet!r}")


def _encode_connect(packet: Connect) -> bytes:
    level = ProtocolLevel(packet.protocol_level)
    if level is ProtocolLevel.MQTT_3_1 and not 1 <= len(packet.client_id) <= 23:
        raise InvalidArgument(
            f"MQTT 3.1 client ids must be 1 to 23 characters, got {len(packet.client_id)} "
            "(3.1 CONNECT payload)"
        )
    if not 0 <= packet.keep_alive <= 0xFFFF:
        raise InvalidArgument(f"keep alive must be 0..65535 seconds, got {packet.keep_alive}")
    if packet.password is not None and packet.username is None:
        raise InvalidArgument("a password needs a user name (section 3.1.2.9)")
    flags = 0x02 if packet.clean_session else 0
    payload = _utf8(packet.client_id)
    if packet.will is not None:
        will = packet.will
        if will.qos not in (0, 1, 2):
            raise InvalidArgument(f"will QoS must be 0..2, got {will.qos!r}")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        payload += _utf8(validate_topic_name(will.topic)) + _binary(will.payload)
    if packet.username is not None:
        flags |= 0x80
        payload += _utf8(packet.username)
    if packet.password is not None:
        flags |= 0x40
        payload += _binary(packet.password)
    variable = _utf8(level.protocol_name) + bytes((level, flags)) + _U16.pack(packet.keep_alive)
    return _frame(0x10, variable + payload)


# ---------------------------------------------------------------------------------------------
# Readers


class _Cursor:
    """Reads fields from one frame body, raising MalformedFrame when one is cut short."""

    __slots__ = ("buf", "end", "kind", "pos")

    def __init__(self, buf: bytes, kind: str) -> None:
        self.buf = buf
        self.pos = 0
        self.end = len(buf)
        self.kind = kind

    def _need(self, count: int, what: str) -> None:
        if self.pos + count > self.end:
            raise MalformedFrame(
                f"{self.kind}: {what} runs past the end of the packet "
                "(truncated field, section 2.2.3)"
            )

    def u8(self, what: str) -> int:
        self._need(1, what)
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def u16(self, what: str) -> int:
        self._need(2, what)
        value = (self.buf[self.pos] << 8) | self.buf[self.pos + 1]
        self.pos += 2
        return value

    def packet_id(self) -> int:
        value = self.u16("the packet identifier")
        if value == 0:
            raise MalformedFrame(
                f"{self.kind}: packet identifier 0 is not allowed (section 2.3.1)"
            )
        return value

    def binary(self, what: str) -> bytes:
        length = self.u16(f"the length of {what}")
        self._need(length, what)
        value = bytes(self.buf[self.pos : self.pos + length])
        self.pos += length
        return value

    def utf8(self, what: str) -> str:
        return decode_utf8(self.binary(what), f"{self.kind} {what}")

    def rest(self) -> bytes:
        value = bytes(self.buf[self.pos : self.end])
        self.pos = self.end
        return value

    def remaining(self) -> int:
        return self.end - self.pos

    def finish(self) -> None:
        if self.pos != self.end:
            raise MalformedFrame(
                f"{self.kind}: {self.end - self.pos} unexpected bytes after the last field "
                "(the remaining length must equal the length of the fields, section 2.2.3)"
            )


def decode_utf8(data: bytes, what: str) -> str:
    """Decode a UTF-8 string field: well-formed, no surrogates, no U+0000 (section 1.5.3)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFrame(f"{what} is not well-formed UTF-8 (section 1.5.3): {exc}") from None
    if "\x00" in text:
        raise MalformedFrame(f"{what} contains U+0000 (section 1.5.3)")
    return text


def check_flags(first_byte: int, level: int) -> None:
    """Reserved flag bits of non-PUBLISH packets (section 2.2.2, table 2.2).

    MQTT 3.1 sent PUBREL, SUBSCRIBE and UNSUBSCRIBE with QoS 1 and possibly DUP set, so on 3.1
    connections their flags may be 0x02 or 0x0A.
    """
    kind = first_byte >> 4
    flags = first_byte & 0x0F
    if kind == 0 or kind == 15:
        raise MalformedFrame(f"packet type {kind} is reserved (section 2.2.1)")
    expected = _FLAGS_3_1_1[kind]
    if flags == expected:
        return
    if level == ProtocolLevel.MQTT_3_1 and kind in _QOS1_STYLE and flags == 0x0A:
        return
    raise MalformedFrame(
        f"{_PACKET_NAMES[kind]} has flags {flags:#06b}; they must be {expected:#06b} "
        "(section 2.2.2, table 2.2)"
    )


def decode_publish(
    flags: int, buf: bytes, start: int, end: int, topics: dict[bytes, str] | None = None
) -> Publish:
    """PUBLISH variable header and payload held in ``buf[start:end]`` (section 3.3).

    ``topics`` caches raw topic bytes already validated and decoded (the stream decoder keeps
    one per connection: most streams repeat a few topics)."""
    qos = (flags >> 1) & 0x03
    if qos == 3:
        raise MalformedFrame(
            "PUBLISH with QoS 3: both QoS bits set is not allowed (section 3.3.1.2)"
        )
    if end - start < 2:
        raise MalformedFrame(
            "PUBLISH: the topic name length runs past the end of the packet (section 3.3.2)"
        )
    topic_end = start + 2 + ((buf[start] << 8) | buf[start + 1])
    if qos:
        payload_start = topic_end + 2
        if payload_start > end:
            raise MalformedFrame(
                "PUBLISH: the topic name or packet identifier runs past the end of the packet "
                "(section 3.3.2)"
            )
        packet_id = (buf[topic_end] << 8) | buf[topic_end + 1]
        if packet_id == 0:
            raise MalformedFrame("PUBLISH: packet identifier 0 is not allowed (section 2.3.1)")
    else:
        if flags & 0x08:
            raise MalformedFrame("PUBLISH: DUP must be 0 when QoS is 0 (section 3.3.1.1)")
        payload_start = topic_end
        if payload_start > end:
            raise MalformedFrame(
                "PUBLISH: the topic name runs past the end of the packet (section 3.3.2)"
            )
        packet_id = None
    raw_topic = buf[start + 2 : topic_end]
    topic = topics.get(raw_topic) if topics is not None else None
    if topic is None:
        # Byte values, not one-byte needles: 0x2B '+', 0x23 '#', 0 U+0000 (sections 3.3.2.1, 1.5.3).
        if not raw_topic or 0x2B in raw_topic or 0x23 in raw_topic or 0 in raw_topic:
            _received_topic(
                validate_topic_name, decode_utf8(bytes(raw_topic), "PUBLISH topic name")
            )
        try:
            topic = str(raw_topic, "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedFrame(
                f"PUBLISH topic name is not well-formed UTF-8 (section 1.5.3): {exc}"
            ) from None
        if topics is not None:
            if len(topics) >= TOPIC_CACHE_SIZE:
                topics.clear()
            topics[bytes(raw_topic)] = topic
    return Publish(
        topic, bytes(buf[payload_start:end]), qos, bool(flags & 1), bool(flags & 8), packet_id
    )


def decode_packet(first_byte: int, body: bytes, level: int = ProtocolLevel.MQTT_3_1_1) -> Packet:
    """Decode one frame given its first byte and its body (the Remaining Length bytes)."""
    kind = first_byte >> 4
    if kind == PacketType.PUBLISH:
        return decode_publish(first_byte & 0x0F, body, 0, len(body))
    check_flags(first_byte, level)
    name = _PACKET_NAMES[kind]
    cursor = _Cursor(body, name)
    packet: Packet
    if kind in (
        PacketType.PUBACK,
        PacketType.PUBREC,
        PacketType.PUBREL,
        PacketType.PUBCOMP,
        PacketType.UNSUBACK,
    ):
        if len(body) != 2:
            raise MalformedFrame(
                f"{name} must have remaining length 2, got {len(body)} "
                f"(section {_SECTIONS[kind]}.1)"
            )
        packet_id = cursor.packet_id()
        packet = _ACK_TYPES[kind](packet_id)
    elif kind in (PacketType.PINGREQ, PacketType.PINGRESP, PacketType.DISCONNECT):
        if body:
            raise MalformedFrame(
                f"{name} must have remaining length 0, got {len(body)} "
                f"(section {_SECTIONS[kind]}.1)"
            )
        packet = _EMPTY_TYPES[kind]()
    elif kind == PacketType.CONNACK:
        packet = _decode_connack(cursor, level)
    elif kind == PacketType.SUBSCRIBE:
        packet_id = cursor.packet_id()
        subscriptions = []
        while cursor.remaining():
            topic_filter = cursor.utf8("topic filter")
            _validate_filter(topic_filter)
            requested = cursor.u8("requested QoS")
            if requested > 2:
                raise MalformedFrame(
                    f"SUBSCRIBE requested QoS byte {requested:#04x} is not 0, 1 or 2 "
                    "(section 3.8.3.1)"
                )
            subscriptions.append((topic_filter, requested))
        if not subscriptions:
            raise MalformedFrame("SUBSCRIBE must contain at least one topic filter (3.8.3)")
        packet = Subscribe(packet_id, subscriptions)
    elif kind == PacketType.SUBACK:
        packet_id = cursor.packet_id()
        codes = list(cursor.rest())
        if not codes:
            raise MalformedFrame("SUBACK must contain at least one return code (section 3.9.3)")
        for code in codes:
            if code not in (0, 1, 2, SUBACK_FAILURE):
                raise MalformedFrame(
                    f"SUBACK return code {code:#04x} is not 0x00, 0x01, 0x02 or 0x80 "
                    "(section 3.9.3)"
                )
        packet = Suback(packet_id, codes)
    elif kind == PacketType.UNSUBSCRIBE:
        packet_id = cursor.packet_id()
        topics = []
        while cursor.remaining():
            topic_filter = cursor.utf8("topic filter")
            _validate_filter(topic_filter)
            topics.append(topic_filter)
        if not topics:
            raise MalformedFrame("UNSUBSCRIBE must contain at least one topic filter (3.10.3)")
        packet = Unsubscribe(packet_id, topics)
    elif kind == PacketType.CONNECT:
        packet = _decode_connect(cursor)
    else:  # pragma: no cover - check_flags rejects types 0 and 15
        raise MalformedFrame(f"packet type {kind} is reserved (section 2.2.1)")
    cursor.finish()
    return packet


_ACK_TYPES: dict[int, type] = {
    PacketType.PUBACK: Puback,
    PacketType.PUBREC: Pubrec,
    PacketType.PUBREL: Pubrel,
    PacketType.PUBCOMP: Pubcomp,
    PacketType.UNSUBACK: Unsuback,
}
# Spec section of each packet type (3.1.1 chapter 3), for error messages.
_SECTIONS = {t.value: f"3.{t.value}" for t in PacketType}

_EMPTY_TYPES: dict[int, type] = {
    PacketType.PINGREQ: Pingreq,
    PacketType.PINGRESP: Pingresp,
    PacketType.DISCONNECT: Disconnect,
}


def _received_topic(validate: Callable[[str], str], topic: str, prefix: str = "") -> None:
    """Check a topic read from the peer with a validator of :mod:`.topics`: its verdict on the
    peer's bytes is a :class:`MalformedFrame`, with the same message."""
    try:
        validate(topic)
    except InvalidTopic as exc:
        raise MalformedFrame(f"{prefix}{exc}") from None


def _validate_filter(topic_filter: str) -> None:
    _received_topic(validate_topic_filter, topic_filter, "SUBSCRIBE/UNSUBSCRIBE: ")


def _decode_connack(cursor: _Cursor, level: int) -> Connack:
    if cursor.end != 2:
        raise MalformedFrame(
            f"CONNACK must have remaining length 2, got {cursor.end} (section 3.2.1)"
        )
    ack_flags = cursor.u8("acknowledge flags")
    return_code = cursor.u8("return code")
    if return_code > 5:
        raise MalformedFrame(
            f"CONNACK return code {return_code} is not one of 0-5 (section 3.2.2.3, table 3.1)"
        )
    if level == ProtocolLevel.MQTT_3_1:
        return Connack(False, return_code)  # 3.1: the first byte is reserved and unused
    if ack_flags & 0xFE:
        raise MalformedFrame(
            f"CONNACK acknowledge flags {ack_flags:#04x}: bits 7-1 are reserved and must be 0 "
            "(section 3.2.2.1)"
        )
    session_present = bool(ack_flags & 1)
    if session_present and return_code:
        raise MalformedFrame(
            "CONNACK with a non-zero return code must have session present 0 (section 3.2.2.2)"
        )
    return Connack(session_present, return_code)


def _decode_connect(cursor: _Cursor) -> Connect:
    name = cursor.utf8("protocol name")
    level = cursor.u8("protocol level")
    if name not in ("MQTT", "MQIsdp"):
        raise MalformedFrame(
            f"CONNECT protocol name {name!r} is neither 'MQTT' (3.1.1) nor 'MQIsdp' (3.1) "
            "(section 3.1.2.1)"
        )
    if level not in (ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1):
        raise MalformedFrame(
            f"CONNECT protocol level {level} is neither 3 (3.1) nor 4 (3.1.1) (section 3.1.2.2)"
        )
    flags = cursor.u8("connect flags")
    if flags & 0x01:
        raise MalformedFrame("CONNECT flags: the reserved bit 0 must be 0 (section 3.1.2.3)")
    will_flag = bool(flags & 0x04)
    will_qos = (flags >> 3) & 0x03
    will_retain = bool(flags & 0x20)
    if will_qos == 3:
        raise MalformedFrame("CONNECT flags: will QoS 3 is not allowed (section 3.1.2.6)")
    if not will_flag and (will_qos or will_retain):
        raise MalformedFrame(
            "CONNECT flags: will QoS and will retain must be 0 without a will (section 3.1.2.6)"
        )
    has_password = bool(flags & 0x40)
    has_username = bool(flags & 0x80)
    if has_password and not has_username:
        raise MalformedFrame("CONNECT flags: a password needs a user name (section 3.1.2.9)")
    keep_alive = cursor.u16("keep alive")
    client_id = cursor.utf8("client identifier")
    will = None
    if will_flag:
        will_topic = cursor.utf8("will topic")
        _received_topic(validate_topic_name, will_topic)
        will = Will(will_topic, cursor.binary("will message"), will_qos, will_retain)
    username = cursor.utf8("user name") if has_username else None
    password = cursor.binary("password") if has_password else None
    return Connect(
        client_id=client_id,
        clean_session=bool(flags & 0x02),
        keep_alive=keep_alive,
        username=username,
        password=password,
        will=will,
        protocol_level=level,
    )
