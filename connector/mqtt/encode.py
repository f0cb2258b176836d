"""Packets to bytes for MQTT 3.1, 3.1.1 and 5.0, with strict validation.

``encode`` builds one frame of any packet; ``encode_publish`` one PUBLISH without building a
packet first (the hot path of a publisher); the layout of the four-byte acknowledgement frames
is written once, here (``ACK_FIRST_BYTES``, ``ACK_WORDS``, ``encode_ack``, ``encode_acks``). A
packet the caller asks for that would break a rule raises
:class:`~connector.mqtt.errors.InvalidArgument` or ``InvalidTopic``, naming the rule and its
section of the MQTT 3.1.1 standard (the 3.1 text where the versions differ), or of the MQTT
5.0 standard, saying so. At levels 3 and 4 an AUTH packet or a set MQTT 5.0 field is refused.
Reading frames: :mod:`connector.mqtt.decode`; the wire primitives: :mod:`.fields`.
"""

from __future__ import annotations

import sys
from array import array
from struct import Struct

from .errors import InvalidArgument, InvalidTopic
from .fields import encode_binary as _binary
from .fields import (
    encode_remaining_length,
)
from .fields import encode_utf8 as _utf8
from .packet_types import FIXED_FLAGS, SECTIONS
from .packets import (
    SUBACK_FAILURE,
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
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
)
from .properties import (
    WILL_PROPERTIES,
    Context,
    Properties,
    encode_properties,
)
from .reasons import check_reason
from .topics import check_shared, check_subscription, validate_topic_filter, validate_topic_name

_U16 = Struct(">H")  # module-local: faster to encode with than an imported one
_MQTT_5 = ProtocolLevel.MQTT_5
_PUBLISH = PacketType.PUBLISH  # a module name: faster than the member read through its class


# ---------------------------------------------------------------------------------------------
# Field writers


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
    properties: Properties | None = None,
    level: int = ProtocolLevel.MQTT_3_1_1,
) -> bytes:
    """One PUBLISH frame (section 3.3). ``topic`` may be pre-encoded UTF-8 bytes.

    At ``level`` 5 the frame carries ``properties`` after the packet identifier (MQTT 5.0
    section 3.3.2.3), and the topic may be empty when they hold a Topic Alias (section
    3.3.2.1); on 3.1 / 3.1.1 ``properties`` must be None."""
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
    if level == _MQTT_5:
        if not topic_bytes and (properties is None or properties.topic_alias is None):
            raise InvalidTopic(
                "a PUBLISH with a zero-length topic name needs a Topic Alias property "
                "(MQTT 5.0 section 3.3.2.1)"
            )
        variable += encode_properties(properties, _PUBLISH)
    elif properties is not None:
        _refuse_v5("PUBLISH properties", level, "3.3.2.3")
    length = len(variable) + len(payload)
    return bytes((header,)) + encode_remaining_length(length) + variable + payload


def _refuse_v5(what: str, level: int, section: str) -> None:
    """A field of MQTT 5.0 asked for on a 3.1 / 3.1.1 connection."""
    version = "3.1" if level == ProtocolLevel.MQTT_3_1 else "3.1.1"
    raise InvalidArgument(
        f"{what} exist only in MQTT 5.0 (MQTT 5.0 section {section}); this connection uses "
        f"MQTT {version}"
    )


# ---------------------------------------------------------------------------------------------
# Acknowledgements: PUBACK, PUBREC, PUBREL, PUBCOMP and UNSUBACK (sections 3.4-3.7, 3.11)

ACK_FIRST_BYTES: dict[PacketType, int] = {
    kind: kind << 4 | FIXED_FLAGS[kind]  # PUBREL's flags are 0010 (section 3.6.1)
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
    """One acknowledgement frame of ``kind`` (a key of ``ACK_WORDS``) for ``packet_id``.

    On MQTT 5.0 the same four bytes are a PUBACK, PUBREC, PUBREL or PUBCOMP with reason code
    0x00 and no properties (MQTT 5.0 section 3.4.2.1); an MQTT 5.0 UNSUBACK has no such short
    form (section 3.11)."""
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
    """Encode ``packet`` into one frame for protocol ``level`` (3 = MQTT 3.1, 4 = 3.1.1, 5 =
    MQTT 5.0). A CONNECT is written for its own ``protocol_level``."""
    kind = packet.type
    if isinstance(packet, Publish):
        if packet.topic or level != _MQTT_5:  # encode_publish checks a v5 empty topic
            validate_topic_name(packet.topic)
        return encode_publish(
            packet.topic,
            packet.payload,
            packet.qos,
            packet.packet_id,
            packet.retain,
            packet.dup,
            packet.properties,
            level,
        )
    if isinstance(packet, Connect):
        return _encode_connect(packet)
    if level == _MQTT_5:
        return _encode_v5(packet)
    _refuse_v5_fields(packet, level)
    if isinstance(packet, Puback | Pubrec | Pubrel | Pubcomp | Unsuback):
        return encode_ack(kind, packet.packet_id)
    if kind is PacketType.PINGREQ:
        return b"\xc0\x00"
    if kind is PacketType.PINGRESP:
        return b"\xd0\x00"
    if kind is PacketType.DISCONNECT:
        return b"\xe0\x00"
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


def _refuse_v5_fields(packet: Packet, level: int) -> None:
    """AUTH, or a set MQTT 5.0 field, asked for on a 3.1 / 3.1.1 connection."""
    if isinstance(packet, Auth):
        _refuse_v5("AUTH packets", level, "3.15")
    if getattr(packet, "properties", None) is not None:
        _refuse_v5(f"{packet.type.name} properties", level, "2.2.2")
    if getattr(packet, "reason_code", 0):
        _refuse_v5(f"{packet.type.name} reason codes", level, "2.4")
    if isinstance(packet, Unsuback) and packet.reason_codes:
        _refuse_v5("UNSUBACK reason codes", level, "3.11.3")


def _encode_connect(packet: Connect) -> bytes:
    level = ProtocolLevel(packet.protocol_level)
    if level is ProtocolLevel.MQTT_3_1 and not 1 <= len(packet.client_id) <= 23:
        raise InvalidArgument(
            f"MQTT 3.1 client ids must be 1 to 23 characters, got {len(packet.client_id)} "
            "(3.1 CONNECT payload)"
        )
    if not 0 <= packet.keep_alive <= 0xFFFF:
        raise InvalidArgument(f"keep alive must be 0..65535 seconds, got {packet.keep_alive}")
    v5 = level is _MQTT_5
    if not v5:
        if packet.properties is not None:
            _refuse_v5("CONNECT properties", level, "3.1.2.11")
        if packet.will is not None and packet.will.properties is not None:
            _refuse_v5("Will Properties", level, "3.1.3.2")
        if packet.password is not None and packet.username is None:
            raise InvalidArgument("a password needs a user name (section 3.1.2.9)")
    flags = 0x02 if packet.clean_session else 0
    payload = _utf8(packet.client_id)
    if packet.will is not None:
        will = packet.will
        if will.qos not in (0, 1, 2):
            raise InvalidArgument(f"will QoS must be 0..2, got {will.qos!r}")
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        if v5:  # MQTT 5.0 section 3.1.3.2: the Will Properties come before the will topic
            payload += encode_properties(will.properties, WILL_PROPERTIES)
        payload += _utf8(validate_topic_name(will.topic)) + _binary(will.payload)
    if packet.username is not None:
        flags |= 0x80
        payload += _utf8(packet.username)
    if packet.password is not None:  # MQTT 5.0 allows one without a user name (3.1.2.9)
        flags |= 0x40
        payload += _binary(packet.password)
    variable = _utf8(level.protocol_name) + bytes((level, flags)) + _U16.pack(packet.keep_alive)
    if v5:  # MQTT 5.0 section 3.1.2.11: the properties follow the keep alive
        variable += encode_properties(packet.properties, PacketType.CONNECT)
    return _frame(0x10, variable + payload)


# ---------------------------------------------------------------------------------------------
# MQTT 5.0 writers (MQTT 5.0 chapter 3)


def _encode_v5(packet: Packet) -> bytes:
    """Every packet but PUBLISH and CONNECT at protocol level 5."""
    kind = packet.type
    if isinstance(packet, Puback | Pubrec | Pubrel | Pubcomp):
        # MQTT 5.0 section 3.4.2.1 (and 3.5, 3.6, 3.7): without properties the Property Length
        # is left out, and with reason code 0x00 too (the four-byte frame of 3.1.1).
        code = check_reason(packet.reason_code, kind, received=False)
        pid = _check_packet_id(packet.packet_id, kind.name)
        props = _properties_or_nothing(packet.properties, kind)
        if not props:
            if not code:
                return encode_ack(kind, pid)
            return bytes((ACK_FIRST_BYTES[kind], 3)) + _U16.pack(pid) + bytes((code,))
        return _frame(ACK_FIRST_BYTES[kind], _U16.pack(pid) + bytes((code,)) + props)
    if isinstance(packet, Disconnect | Auth):
        # MQTT 5.0 sections 3.14.2.1 and 3.15.2.1: remaining length 0 is reason 0x00 without
        # properties; DISCONNECT may also leave out only the Property Length (3.14.2.2.1).
        code = check_reason(packet.reason_code, kind, received=False)
        props = _properties_or_nothing(packet.properties, kind)
        first = kind << 4
        if not props:
            if not code:
                return bytes((first, 0))
            if kind is PacketType.DISCONNECT:
                return bytes((first, 1, code))
            props = b"\x00"
        return _frame(first, bytes((code,)) + props)
    if kind is PacketType.PINGREQ:
        return b"\xc0\x00"
    if kind is PacketType.PINGRESP:
        return b"\xd0\x00"
    if isinstance(packet, Connack):
        code = check_reason(packet.return_code, kind, received=False)
        if packet.session_present and code:
            raise InvalidArgument(
                "a CONNACK with a non-zero reason code must have session present 0 "
                "(MQTT 5.0 section 3.2.2.1.1)"
            )
        flags = 1 if packet.session_present else 0
        return _frame(0x20, bytes((flags, code)) + encode_properties(packet.properties, kind))
    if isinstance(packet, Subscribe):
        if not packet.subscriptions:
            raise InvalidArgument("SUBSCRIBE needs at least one topic filter (section 3.8.3)")
        body = bytearray(_U16.pack(_check_packet_id(packet.packet_id, "SUBSCRIBE")))
        body += encode_properties(packet.properties, kind)
        for topic_filter, options in packet.subscriptions:
            check_subscription(topic_filter, options, InvalidArgument)
            body += _utf8(topic_filter) + bytes((options,))
        return _frame(0x82, bytes(body))
    if isinstance(packet, Suback | Unsuback):
        codes = packet.return_codes if isinstance(packet, Suback) else packet.reason_codes
        if not codes:
            raise InvalidArgument(
                f"{kind.name} needs at least one reason code, one per topic filter "
                f"(MQTT 5.0 section {SECTIONS[kind]}.3)"
            )
        for code in codes:
            check_reason(code, kind, received=False)
        pid = _check_packet_id(packet.packet_id, kind.name)
        props = encode_properties(packet.properties, kind)
        return _frame(kind << 4, _U16.pack(pid) + props + bytes(codes))
    if isinstance(packet, Unsubscribe):
        if not packet.topics:
            raise InvalidArgument("UNSUBSCRIBE needs at least one topic filter (section 3.10.3)")
        body = bytearray(_U16.pack(_check_packet_id(packet.packet_id, "UNSUBSCRIBE")))
        body += encode_properties(packet.properties, kind)
        for topic_filter in packet.topics:
            check_shared(validate_topic_filter(topic_filter), InvalidTopic)
            body += _utf8(topic_filter)
        return _frame(0xA2, bytes(body))
    raise TypeError(f"cannot encode {packet!r}")


def _properties_or_nothing(props: Properties | None, context: Context) -> bytes:
    """The encoded properties, or ``b""`` for none (None or all absent)."""
    if props is None:
        return b""
    data = encode_properties(props, context)
    return b"" if data == b"\x00" else data
