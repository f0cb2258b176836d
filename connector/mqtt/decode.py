"""Bytes to packets for MQTT 3.1, 3.1.1 and 5.0, with strict validation.

``decode_packet`` parses one frame body once its fixed header has been read;
``decode_publish`` and ``decode_publish_v5`` read a PUBLISH straight from the receive buffer
(the hot path), with the topic and property caches a stream keeps
(:mod:`connector.mqtt.receive_buffer` is the stream side). A frame that breaks a rule raises
:class:`~connector.mqtt.errors.MalformedFrame` (the peer's fault), naming the rule and its
section of the MQTT 3.1.1 standard (the 3.1 text where the versions differ), or of the MQTT
5.0 standard, saying so. Writing packets: :mod:`connector.mqtt.encode`.

It holds a reader for every packet of the three versions, each next to the rules it checks,
and the rules the 3.1.1 and 5.0 readers share (flags, packet ids, topics, the cursor's bounds).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from struct import Struct
from typing import TypeVar

from .errors import InvalidTopic, MalformedFrame
from .fields import (
    decode_utf8,
)
from .packet_types import FIXED_FLAGS, SECTIONS
from .packets import (
    SUBACK_FAILURE,
    Auth,
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
from .properties import (
    WILL_PROPERTIES,
    Context,
    Properties,
    decode_properties,
    read_properties,
)
from .reasons import FAILURE, check_reason
from .topics import check_shared, check_subscription, validate_topic_filter, validate_topic_name

TOPIC_CACHE_SIZE = 4096
"""Distinct topics a stream decoder keeps decoded between reads (see :func:`trim_cache`)."""

TOPIC_CACHE_LIMIT = TOPIC_CACHE_SIZE + 64
"""Bound on a topic cache within one read: ``decode_publish`` adds no topic beyond it. The few
above ``TOPIC_CACHE_SIZE`` are newcomers that :func:`trim_cache` weighs after the read."""

PROPERTIES_CACHE_SIZE = 1024
"""Distinct MQTT 5.0 PUBLISH property blocks (of at most 127 bytes) a stream decoder keeps
decoded between reads."""

_PROPERTIES_CACHE_LIMIT = PROPERTIES_CACHE_SIZE + 64

_U16 = Struct(">H")
_MQTT_5 = ProtocolLevel.MQTT_5
_PUBLISH = PacketType.PUBLISH  # a module name: faster than the member read through its class
_V = TypeVar("_V")
_PACKET_NAMES = {t.value: t.name for t in PacketType}

# AUTH (15) exists only in MQTT 5.0 (MQTT 5.0 section 3.15.1); check_flags refuses it below.
_QOS1_STYLE = (PacketType.PUBREL, PacketType.SUBSCRIBE, PacketType.UNSUBSCRIBE)


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
            raise MalformedFrame(f"{self.kind}: packet identifier 0 is not allowed (section 2.3.1)")
        return value

    def binary(self, what: str) -> bytes:
        length = self.u16(f"the length of {what}")
        self._need(length, what)
        value = bytes(self.buf[self.pos : self.pos + length])
        self.pos += length
        return value

    def utf8(self, what: str) -> str:
        return decode_utf8(self.binary(what), f"{self.kind} {what}")

    def properties(self, context: Context) -> Properties | None:
        """Property Length and properties (MQTT 5.0 section 2.2.2)."""
        props, self.pos = decode_properties(self.buf, self.pos, self.end, context)
        return props

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


def check_flags(first_byte: int, level: int) -> None:
    """Reserved flag bits of non-PUBLISH packets (section 2.2.2, table 2.2).

    MQTT 3.1 sent PUBREL, SUBSCRIBE and UNSUBSCRIBE with QoS 1 and possibly DUP set, so on 3.1
    connections their flags may be 0x02 or 0x0A.
    """
    kind = first_byte >> 4
    flags = first_byte & 0x0F
    if kind == 0 or (kind == 15 and level != _MQTT_5):  # AUTH: MQTT 5.0 section 3.15
        raise MalformedFrame(f"packet type {kind} is reserved (section 2.2.1)")
    expected = FIXED_FLAGS[kind]
    if flags == expected:
        return
    if level == ProtocolLevel.MQTT_3_1 and kind in _QOS1_STYLE and flags == 0x0A:
        return
    raise MalformedFrame(
        f"{_PACKET_NAMES[kind]} has flags {flags:#06b}; they must be {expected:#06b} "
        "(section 2.2.2, table 2.2)"
    )


def decode_publish(
    flags: int,
    buf: bytes,
    start: int,
    end: int,
    topics: dict[bytes, str] | None = None,
    blocks: dict[bytes, Properties] | None = None,
) -> Publish:
    """PUBLISH variable header and payload held in ``buf[start:end]`` (section 3.3).

    ``topics`` caches raw topic bytes already validated and decoded (the stream decoder keeps
    one per connection: most streams repeat a few topics). ``blocks`` is unused: 3.1 / 3.1.1
    have no properties; it gives this reader the signature of :func:`decode_publish_v5`."""
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
        topic = _read_topic(raw_topic, topics)
    return Publish(
        topic, bytes(buf[payload_start:end]), qos, bool(flags & 1), bool(flags & 8), packet_id
    )


def decode_publish_v5(
    flags: int,
    buf: bytes,
    start: int,
    end: int,
    topics: dict[bytes, str] | None = None,
    blocks: dict[bytes, Properties] | None = None,
) -> Publish:
    """MQTT 5.0 PUBLISH variable header and payload in ``buf[start:end]`` (MQTT 5.0 section
    3.3): :func:`decode_publish` plus the properties after the packet identifier. A Property
    Length of 0 (one byte) costs one comparison and gives ``properties=None``; a zero-length
    topic name needs a Topic Alias property (MQTT 5.0 section 3.3.2.1).

    ``blocks`` caches decoded property blocks of up to 127 bytes by their bytes (the stream
    decoder keeps one per connection: publishers repeat their content type and user
    properties). Packets whose property bytes are equal then share one :class:`Properties`,
    which must be treated as read-only.

    The fixed header checks repeat :func:`decode_publish`'s on purpose: a shared helper would
    cost a call per message on the 3.1.1 hot path."""
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
        pos = topic_end + 2
        if pos > end:
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
        pos = topic_end
        if pos > end:
            raise MalformedFrame(
                "PUBLISH: the topic name runs past the end of the packet (section 3.3.2)"
            )
        packet_id = None
    length = buf[pos] if pos < end else 0x80  # 0x80: decode_properties reports it
    if not length:
        properties = None
        pos += 1
    elif length < 0x80 and blocks is not None and pos + 1 + length <= end:
        stop = pos + 1 + length
        key = buf[pos + 1 : stop]
        properties = blocks.get(key)
        if properties is None:
            properties = read_properties(buf, pos + 1, stop, _PUBLISH)
            if len(blocks) < _PROPERTIES_CACHE_LIMIT:
                blocks[key] = properties
        pos = stop
    else:
        properties, pos = decode_properties(buf, pos, end, _PUBLISH)
    if topic_end == start + 2:
        if properties is None or properties.topic_alias is None:
            raise MalformedFrame(
                "PUBLISH: a zero-length topic name needs a Topic Alias property "
                "(MQTT 5.0 section 3.3.2.1)"
            )
        topic = ""
    else:
        raw_topic = buf[start + 2 : topic_end]
        found = topics.get(raw_topic) if topics is not None else None
        topic = _read_topic(raw_topic, topics) if found is None else found
    return Publish(
        topic,
        bytes(buf[pos:end]),
        qos,
        bool(flags & 1),
        bool(flags & 8),
        packet_id,
        properties,
    )


def _read_topic(raw_topic: bytes, topics: dict[bytes, str] | None) -> str:
    """Validate and decode a PUBLISH topic name not in the cache, and cache it while the cache
    holds fewer than ``TOPIC_CACHE_LIMIT`` topics (sections 3.3.2.1, 4.7.3, 1.5.3)."""
    # Byte values, not one-byte needles: 0x2B '+', 0x23 '#', 0 U+0000 (sections 3.3.2.1, 1.5.3).
    if not raw_topic or 0x2B in raw_topic or 0x23 in raw_topic or 0 in raw_topic:
        _received_topic(validate_topic_name, decode_utf8(bytes(raw_topic), "PUBLISH topic name"))
    try:
        topic = str(raw_topic, "utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFrame(
            f"PUBLISH topic name is not well-formed UTF-8 (section 1.5.3): {exc}"
        ) from None
    if topics is not None and len(topics) < TOPIC_CACHE_LIMIT:
        topics[bytes(raw_topic)] = topic
    return topic


def trim_cache(cache: dict[bytes, _V], size: int, added: int) -> int:
    """Bring a decoder's cache (topics, property blocks) back to ``size`` entries after a read;
    returns the new count of entries that arrived while it was full.

    ``added`` counts such entries since the last rotation. The entries above the size are the
    newest (dicts keep insertion order) and are dropped, keeping those that were already
    there: more distinct keys than the cache holds, cycling, do not empty it every round
    (4,097 topics decode about as fast as 4,096). Once a quarter of the size in new keys has
    been turned away, the oldest eighth goes instead, so a stream whose keys change over time
    gets its new ones cached (a new set of 2,048 topics within some 40,000 messages)."""
    extra = len(cache) - size
    if extra <= 0:
        return added
    added += extra
    if added >= size // 4:
        for key in list(islice(cache, extra + size // 8)):
            del cache[key]
        return 0
    for _ in range(extra):
        cache.popitem()
    return added


def decode_packet(first_byte: int, body: bytes, level: int = ProtocolLevel.MQTT_3_1_1) -> Packet:
    """Decode one frame given its first byte and its body (the Remaining Length bytes)."""
    kind = first_byte >> 4
    if kind == PacketType.PUBLISH:
        if level == _MQTT_5:
            return decode_publish_v5(first_byte & 0x0F, body, 0, len(body))
        return decode_publish(first_byte & 0x0F, body, 0, len(body))
    check_flags(first_byte, level)
    if level == _MQTT_5:
        return _decode_v5(first_byte >> 4, body)
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
                f"{name} must have remaining length 2, got {len(body)} (section {SECTIONS[kind]}.1)"
            )
        packet_id = cursor.packet_id()
        packet = _ACK_TYPES[kind](packet_id)
    elif kind in (PacketType.PINGREQ, PacketType.PINGRESP, PacketType.DISCONNECT):
        if body:
            raise MalformedFrame(
                f"{name} must have remaining length 0, got {len(body)} (section {SECTIONS[kind]}.1)"
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
    """CONNECT of any level: its own protocol level byte says which (section 3.1.2.2)."""
    name = cursor.utf8("protocol name")
    level = cursor.u8("protocol level")
    if name not in ("MQTT", "MQIsdp"):
        raise MalformedFrame(
            f"CONNECT protocol name {name!r} is neither 'MQTT' (3.1.1) nor 'MQIsdp' (3.1) "
            "(section 3.1.2.1)"
        )
    if level not in (ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1, _MQTT_5):
        raise MalformedFrame(
            f"CONNECT protocol level {level} is neither 3 (3.1) nor 4 (3.1.1) nor 5 (5.0) "
            "(section 3.1.2.2)"
        )
    v5 = level == _MQTT_5
    if v5 and name != "MQTT":
        raise MalformedFrame(
            f"CONNECT protocol name {name!r} with protocol level 5: MQTT 5.0 uses 'MQTT' "
            "(MQTT 5.0 section 3.1.2.1)"
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
    if has_password and not has_username and not v5:  # MQTT 5.0 allows it (3.1.2.9)
        raise MalformedFrame("CONNECT flags: a password needs a user name (section 3.1.2.9)")
    keep_alive = cursor.u16("keep alive")
    properties = cursor.properties(PacketType.CONNECT) if v5 else None
    client_id = cursor.utf8("client identifier")
    will = None
    if will_flag:
        will_properties = cursor.properties(WILL_PROPERTIES) if v5 else None
        will_topic = cursor.utf8("will topic")
        _received_topic(validate_topic_name, will_topic)
        will = Will(
            will_topic, cursor.binary("will message"), will_qos, will_retain, will_properties
        )
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
        properties=properties,
    )


# ---------------------------------------------------------------------------------------------
# MQTT 5.0 readers (MQTT 5.0 chapter 3)


def _decode_v5(kind: int, body: bytes) -> Packet:
    """Every packet but PUBLISH at protocol level 5; flags already checked."""
    cursor = _Cursor(body, _PACKET_NAMES[kind])
    size = len(body)
    packet: Packet
    if kind in _V5_ACK_TYPES:
        # MQTT 5.0 section 3.4.2.1 (3.5.2.1, 3.6.2.1, 3.7.2.1): remaining length 2 is reason
        # 0x00 without properties, 3 a reason code without properties (3.4.2.2.1).
        if size < 2:
            raise MalformedFrame(
                f"{cursor.kind} must have remaining length 2 or more, got {size} "
                f"(MQTT 5.0 section {SECTIONS[kind]}.2)"
            )
        packet_id = cursor.packet_id()
        code = 0
        props = None
        if size > 2:
            code = cursor.u8("reason code")
            if not (kind in _TOLERATED_ACK_CODES and code < FAILURE):
                check_reason(code, PacketType(kind), received=True)
            if size > 3:
                props = cursor.properties(PacketType(kind))
        packet = _V5_ACK_TYPES[kind](packet_id, code, props)
    elif kind in (PacketType.PINGREQ, PacketType.PINGRESP):
        if size:
            raise MalformedFrame(
                f"{cursor.kind} must have remaining length 0, got {size} "
                f"(MQTT 5.0 section {SECTIONS[kind]}.1)"
            )
        packet = Pingreq() if kind == PacketType.PINGREQ else Pingresp()
    elif kind == PacketType.DISCONNECT or kind == PacketType.AUTH:
        # MQTT 5.0 sections 3.14.2.1 and 3.15.2.1: remaining length 0 is reason 0x00 without
        # properties. DISCONNECT may leave out the Property Length alone (3.14.2.2.1); AUTH
        # may not (3.15.2.1 omits reason code and Property Length together).
        kind_type = PacketType(kind)
        code = 0
        props = None
        if size:
            code = check_reason(cursor.u8("reason code"), kind_type, received=True)
            if size > 1 or kind == PacketType.AUTH:
                props = cursor.properties(kind_type)
        packet = Disconnect(code, props) if kind == PacketType.DISCONNECT else Auth(code, props)
    elif kind == PacketType.CONNACK:
        ack_flags = cursor.u8("acknowledge flags")
        code = check_reason(cursor.u8("reason code"), PacketType.CONNACK, received=True)
        if ack_flags & 0xFE:
            raise MalformedFrame(
                f"CONNACK acknowledge flags {ack_flags:#04x}: bits 7-1 are reserved and must be "
                "0 (MQTT 5.0 section 3.2.2.1)"
            )
        if ack_flags and code:
            raise MalformedFrame(
                "CONNACK with a non-zero reason code must have session present 0 "
                "(MQTT 5.0 section 3.2.2.1.1)"
            )
        props = cursor.properties(PacketType.CONNACK)
        packet = Connack(bool(ack_flags), code, props)
    elif kind == PacketType.SUBSCRIBE:
        packet_id = cursor.packet_id()
        props = cursor.properties(PacketType.SUBSCRIBE)
        subscriptions = []
        while cursor.remaining():
            topic_filter = cursor.utf8("topic filter")
            _validate_filter(topic_filter)
            options = cursor.u8("subscription options")
            check_subscription(topic_filter, options, MalformedFrame)
            subscriptions.append((topic_filter, options))
        if not subscriptions:
            raise MalformedFrame(
                "SUBSCRIBE must contain at least one topic filter (MQTT 5.0 section 3.8.3)"
            )
        packet = Subscribe(packet_id, subscriptions, props)
    elif kind == PacketType.SUBACK or kind == PacketType.UNSUBACK:
        kind_type = PacketType(kind)
        packet_id = cursor.packet_id()
        props = cursor.properties(kind_type)
        codes = list(cursor.rest())
        if not codes:
            raise MalformedFrame(
                f"{cursor.kind} must contain at least one reason code, one per topic filter "
                f"(MQTT 5.0 section {SECTIONS[kind]}.3)"
            )
        for code in codes:
            check_reason(code, kind_type, received=True)
        if kind == PacketType.SUBACK:
            packet = Suback(packet_id, codes, props)
        else:
            packet = Unsuback(packet_id, codes, props)
    elif kind == PacketType.UNSUBSCRIBE:
        packet_id = cursor.packet_id()
        props = cursor.properties(PacketType.UNSUBSCRIBE)
        topics = []
        while cursor.remaining():
            topic_filter = cursor.utf8("topic filter")
            _validate_filter(topic_filter)
            check_shared(topic_filter, MalformedFrame)
            topics.append(topic_filter)
        if not topics:
            raise MalformedFrame(
                "UNSUBSCRIBE must contain at least one topic filter (MQTT 5.0 section 3.10.3)"
            )
        packet = Unsubscribe(packet_id, topics, props)
    elif kind == PacketType.CONNECT:
        packet = _decode_connect(cursor)
    else:  # pragma: no cover - check_flags rejects type 0
        raise MalformedFrame(f"packet type {kind} is reserved (MQTT 5.0 section 2.1.2)")
    cursor.finish()
    return packet


_TOLERATED_ACK_CODES = frozenset({PacketType.PUBACK, PacketType.PUBREC})
"""Acknowledgements of our PUBLISH whose success-class reason code (below 0x80) is taken even
when the packet may not carry it ([MQTT-3.4.2-1], [MQTT-3.5.2-1]): the broker has the message
either way, and the session counts the fault (``BrokerFault.ACK_REASON_NOT_ALLOWED``) instead
of dropping the connection, which would only make it send the message again."""


_V5_ACK_TYPES: dict[int, type[Puback | Pubrec | Pubrel | Pubcomp]] = {
    PacketType.PUBACK: Puback,
    PacketType.PUBREC: Pubrec,
    PacketType.PUBREL: Pubrel,
    PacketType.PUBCOMP: Pubcomp,
}
