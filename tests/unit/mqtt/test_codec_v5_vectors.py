"""Byte vectors for the MQTT 5.0 codec (protocol level 5): one or more exact frames per packet
type, written by hand from the layouts of MQTT 5.0 chapter 3, encoded and decoded (through the
stream decoder and ``decode_packet``); the short forms of the acknowledgements, DISCONNECT and
AUTH; and the property encodings cross-checked against paho-mqtt's MQTT 5.0 implementation for
a packet carrying every property table 2-4 allows on it."""

from __future__ import annotations

from typing import cast

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties

from connector.mqtt.decode import decode_packet
from connector.mqtt.encode import ACK_WORDS, encode, encode_ack, encode_acks, encode_publish
from connector.mqtt.fields import decode_remaining_length
from connector.mqtt.packets import (
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
    subscription_options,
)
from connector.mqtt.properties import (
    PROPERTIES,
    WILL_PROPERTIES,
    Context,
    Properties,
    decode_properties,
    encode_properties,
)
from connector.mqtt.receive_buffer import ReceiveBuffer

V5 = ProtocolLevel.MQTT_5


def h(text: str) -> bytes:
    """Hex with spaces to bytes."""
    return bytes.fromhex(text)


def decode_frame(frame: bytes) -> Packet:
    """Decode exactly one complete level-5 frame through the stream decoder (whole and byte by
    byte) and ``decode_packet``; all three must agree."""
    packets = ReceiveBuffer(V5).feed(frame)
    assert len(packets) == 1, packets
    trickled = ReceiveBuffer(V5)
    one_by_one = [p for i in range(len(frame)) for p in trickled.feed(frame[i : i + 1])]
    assert one_by_one == packets
    parsed = decode_remaining_length(frame, 1)
    assert parsed is not None
    length, start = parsed
    assert start + length == len(frame)
    assert decode_packet(frame[0], frame[start:], V5) == packets[0]
    return packets[0]


# ---------------------------------------------------------------------------------------------
# CONNECT (MQTT 5.0 section 3.1): properties after the keep alive, Will Properties before the
# will topic.

FULL_CONNECT = Connect(
    "id",
    clean_session=False,
    keep_alive=30,
    username="u",
    password=b"pw",
    will=Will(
        "w/t",
        b"bye",
        qos=1,
        retain=True,
        properties=Properties(
            payload_format_indicator=1,
            message_expiry_interval=60,
            content_type="t",
            response_topic="r",
            correlation_data=b"\x01",
            will_delay_interval=5,
            user_properties=[("a", "b")],
        ),
    ),
    protocol_level=V5,
    properties=Properties(
        session_expiry_interval=120,
        authentication_method="SCRAM",
        authentication_data=b"\x00\x01",
        request_problem_information=0,
        request_response_information=1,
        receive_maximum=20,
        topic_alias_maximum=10,
        maximum_packet_size=1024,
        user_properties=[("k", "v")],
    ),
)

CONNECT_CASES = [
    pytest.param(
        Connect("c1", keep_alive=60, protocol_level=V5),
        "10 0F  00 04 4D 51 54 54  05  02  00 3C  00  00 02 63 31",
        id="minimal",
    ),
    pytest.param(
        Connect("c", keep_alive=60, password=b"p", protocol_level=V5),
        "10 11  00 04 4D 51 54 54  05  42  00 3C  00  00 01 63  00 01 70",
        id="password-without-user-name",  # allowed from MQTT 5.0 on (section 3.1.2.9)
    ),
    pytest.param(
        FULL_CONNECT,
        "10 68  00 04 4D 51 54 54  05  EC  00 1E"
        # CONNECT properties, 40 bytes, in identifier order, User Property last
        "  28  11 00 00 00 78  15 00 05 53 43 52 41 4D  16 00 02 00 01  17 00  19 01"
        "  21 00 14  22 00 0A  27 00 00 04 00  26 00 01 6B 00 01 76"
        # client identifier
        "  00 02 69 64"
        # Will Properties, 31 bytes
        "  1F  01 01  02 00 00 00 3C  03 00 01 74  08 00 01 72  09 00 01 01  18 00 00 00 05"
        "  26 00 01 61 00 01 62"
        # will topic, will payload, user name, password
        "  00 03 77 2F 74  00 03 62 79 65  00 01 75  00 02 70 77",
        id="every-property-will-user-password",
    ),
]


@pytest.mark.parametrize(("packet", "frame"), CONNECT_CASES)
def test_connect_v5_bytes(packet: Connect, frame: str) -> None:
    assert encode(packet, V5) == h(frame)
    assert encode(packet) == h(frame)  # a CONNECT is written for its own protocol level
    assert decode_frame(h(frame)) == packet


def test_a_v5_connect_decodes_on_any_stream_level() -> None:
    """The CONNECT names its own level (section 3.1.2.2): a server reads it before it knows."""
    frame = h(cast(str, CONNECT_CASES[2].values[1]))
    assert ReceiveBuffer(ProtocolLevel.MQTT_3_1_1).feed(frame) == [FULL_CONNECT]


# ---------------------------------------------------------------------------------------------
# Every other packet type

CASES = [
    # CONNACK (section 3.2): acknowledge flags, reason code, properties (always present).
    pytest.param(Connack(False, 0), "20 03 00 00 00", id="CONNACK-success"),
    pytest.param(
        Connack(True, 0, Properties(receive_maximum=10, topic_alias_maximum=5, maximum_qos=1)),
        "20 0B 01 00 08  21 00 0A  22 00 05  24 01",
        id="CONNACK-session-present-properties",
    ),
    pytest.param(Connack(False, 0x86), "20 03 00 86 00", id="CONNACK-bad-user-name-password"),
    pytest.param(
        Connack(False, 0x9C, Properties(server_reference="b2")),
        "20 08 00 9C 05  1C 00 02 62 32",
        id="CONNACK-use-another-server",
    ),
    # PUBLISH (section 3.3): properties after the packet identifier.
    pytest.param(Publish("a/b", b"hi"), "30 08 00 03 61 2F 62 00 68 69", id="PUBLISH-qos0"),
    pytest.param(
        Publish("a/b", b"hi", qos=1, packet_id=10),
        "32 0A 00 03 61 2F 62 00 0A 00 68 69",
        id="PUBLISH-qos1",
    ),
    pytest.param(
        Publish(
            "a/b",
            b"hi",
            qos=2,
            retain=True,
            dup=True,
            packet_id=0x1234,
            properties=Properties(
                payload_format_indicator=1,
                message_expiry_interval=3600,
                content_type="text/plain",
                response_topic="r/1",
                correlation_data=b"c",
                subscription_identifiers=[1, 128],
                topic_alias=7,
                user_properties=[("x", "y")],
            ),
        ),
        "3D 37  00 03 61 2F 62  12 34  2D"
        "  01 01  02 00 00 0E 10  03 00 0A 74 65 78 74 2F 70 6C 61 69 6E"
        "  08 00 03 72 2F 31  09 00 01 63  0B 01  0B 80 01  23 00 07"
        "  26 00 01 78 00 01 79  68 69",
        id="PUBLISH-qos2-every-property",
    ),
    pytest.param(
        Publish("", b"hi", properties=Properties(topic_alias=1)),
        "30 08 00 00 03 23 00 01 68 69",
        id="PUBLISH-topic-alias-empty-topic",
    ),
    # PUBACK, PUBREC, PUBREL, PUBCOMP (sections 3.4-3.7): reason code and Property Length
    # left out when they can be.
    pytest.param(Puback(10), "40 02 00 0A", id="PUBACK-success-short"),
    pytest.param(Puback(10, 0x10), "40 03 00 0A 10", id="PUBACK-reason-only"),
    pytest.param(
        Puback(10, 0x87, Properties(reason_string="no", user_properties=[("a", "b")])),
        "40 10 00 0A 87 0C  1F 00 02 6E 6F  26 00 01 61 00 01 62",
        id="PUBACK-reason-properties",
    ),
    pytest.param(
        Puback(10, 0, Properties(reason_string="ok")),
        "40 09 00 0A 00 05  1F 00 02 6F 6B",
        id="PUBACK-success-properties",
    ),
    pytest.param(Pubrec(5), "50 02 00 05", id="PUBREC-success-short"),
    pytest.param(Pubrec(5, 0x91), "50 03 00 05 91", id="PUBREC-id-in-use"),
    pytest.param(Pubrel(5), "62 02 00 05", id="PUBREL-success-short"),
    pytest.param(Pubrel(5, 0x92), "62 03 00 05 92", id="PUBREL-id-not-found"),
    pytest.param(Pubcomp(5), "70 02 00 05", id="PUBCOMP-success-short"),
    pytest.param(
        Pubcomp(5, 0x92, Properties(reason_string="x")),
        "70 08 00 05 92 04  1F 00 01 78",
        id="PUBCOMP-reason-properties",
    ),
    # SUBSCRIBE (section 3.8): properties, then (filter, Subscription Options) pairs.
    pytest.param(Subscribe(2, [("a", 0)]), "82 07 00 02 00  00 01 61 00", id="SUBSCRIBE-minimal"),
    pytest.param(
        Subscribe(
            1,
            [
                ("a/+", subscription_options(1, True, True, 2)),
                ("$share/g/t", subscription_options(2)),
            ],
            Properties(subscription_identifiers=[300], user_properties=[("u", "1")]),
        ),
        "82 20 00 01 0A  0B AC 02  26 00 01 75 00 01 31"
        "  00 03 61 2F 2B 2D  00 0A 24 73 68 61 72 65 2F 67 2F 74 02",
        id="SUBSCRIBE-options-properties-shared",
    ),
    # SUBACK (section 3.9): properties, then one reason code per filter.
    pytest.param(
        Suback(1, [0x01, 0x00, 0x02, 0x80, 0x9E]),
        "90 08 00 01 00  01 00 02 80 9E",
        id="SUBACK-reason-codes",
    ),
    pytest.param(
        Suback(1, [0xA1], Properties(reason_string="r")),
        "90 08 00 01 04  1F 00 01 72  A1",
        id="SUBACK-properties",
    ),
    # UNSUBSCRIBE (section 3.10): properties, then filters.
    pytest.param(
        Unsubscribe(3, ["a/b", "c"]), "A2 0B 00 03 00  00 03 61 2F 62  00 01 63", id="UNSUBSCRIBE"
    ),
    pytest.param(
        Unsubscribe(3, ["a"], Properties(user_properties=[("k", "v")])),
        "A2 0D 00 03 07  26 00 01 6B 00 01 76  00 01 61",
        id="UNSUBSCRIBE-properties",
    ),
    # UNSUBACK (section 3.11): properties, then one reason code per filter.
    pytest.param(Unsuback(3, [0x00, 0x11]), "B0 05 00 03 00  00 11", id="UNSUBACK-reason-codes"),
    pytest.param(
        Unsuback(3, [0x8F], Properties(reason_string="bad")),
        "B0 0A 00 03 06  1F 00 03 62 61 64  8F",
        id="UNSUBACK-properties",
    ),
    # PINGREQ, PINGRESP (sections 3.12, 3.13): unchanged.
    pytest.param(Pingreq(), "C0 00", id="PINGREQ"),
    pytest.param(Pingresp(), "D0 00", id="PINGRESP"),
    # DISCONNECT (section 3.14): remaining length 0 is a normal disconnection.
    pytest.param(Disconnect(), "E0 00", id="DISCONNECT-normal-short"),
    pytest.param(Disconnect(0x04), "E0 01 04", id="DISCONNECT-with-will-reason-only"),
    pytest.param(
        Disconnect(0, Properties(reason_string="bye")),
        "E0 08 00 06  1F 00 03 62 79 65",
        id="DISCONNECT-normal-properties",
    ),
    pytest.param(
        Disconnect(
            0x8E,
            Properties(session_expiry_interval=0, server_reference="s", reason_string="x"),
        ),
        "E0 0F 8E 0D  11 00 00 00 00  1C 00 01 73  1F 00 01 78",
        id="DISCONNECT-session-taken-over-properties",
    ),
    # AUTH (section 3.15): remaining length 0 is success; otherwise reason code and properties.
    pytest.param(Auth(), "F0 00", id="AUTH-success-short"),
    pytest.param(Auth(0x19), "F0 02 19 00", id="AUTH-re-authenticate"),
    pytest.param(
        Auth(
            0x18,
            Properties(authentication_method="SCRAM-SHA-1", authentication_data=b"\x01\x02"),
        ),
        "F0 15 18 13  15 00 0B 53 43 52 41 4D 2D 53 48 41 2D 31  16 00 02 01 02",
        id="AUTH-continue",
    ),
]


@pytest.mark.parametrize(("packet", "frame"), CASES)
def test_packet_v5_bytes(packet: Packet, frame: str) -> None:
    assert encode(packet, V5) == h(frame)
    assert decode_frame(h(frame)) == packet


def test_every_packet_type_has_a_v5_vector() -> None:
    covered = {cast(Packet, case.values[0]).type for case in CASES} | {PacketType.CONNECT}
    assert covered == set(PacketType)


def test_publish_v5_through_encode_publish() -> None:
    props = Properties(content_type="json", user_properties=[("a", "1")])
    frame = encode_publish("t", b"{}", 1, 9, properties=props, level=V5)
    assert frame == h("32 16 00 01 74 00 09 0E  03 00 04 6A 73 6F 6E  26 00 01 61 00 01 31 7B 7D")
    assert decode_frame(frame) == Publish("t", b"{}", 1, packet_id=9, properties=props)
    # Pre-encoded topic bytes, as the publisher CLI sends them.
    assert encode_publish(b"t", b"{}", 1, 9, properties=props, level=V5) == frame
    assert encode_publish("t", b"", level=V5) == h("30 04 00 01 74 00")


# ---------------------------------------------------------------------------------------------
# Short forms read: what a peer may send that the encoder writes shorter

SHORT_FORMS = [
    # Reason code and Property Length 0 written out (sections 3.4.2.1, 3.4.2.2.1).
    ("40 04 00 0A 00 00", Puback(10)),
    ("50 04 00 0A 10 00", Pubrec(10, 0x10)),
    ("62 04 00 0A 92 00", Pubrel(10, 0x92)),
    ("70 04 00 0A 00 00", Pubcomp(10)),
    # DISCONNECT with reason 0x00 and Property Length 0 written out (section 3.14.2.1).
    ("E0 01 00", Disconnect()),
    ("E0 02 00 00", Disconnect()),
    ("E0 02 04 00", Disconnect(0x04)),
    # AUTH likewise (section 3.15.2.1).
    ("F0 02 00 00", Auth()),
]


@pytest.mark.parametrize(("frame", "packet"), SHORT_FORMS, ids=[f for f, _ in SHORT_FORMS])
def test_longer_forms_decode_to_the_same_packet(frame: str, packet: Packet) -> None:
    assert decode_frame(h(frame)) == packet
    assert len(encode(packet, V5)) < len(h(frame))


def test_success_acks_keep_the_four_byte_words_at_level_5() -> None:
    """``encode_ack``/``encode_acks``/``ACK_WORDS`` frames are success acknowledgements at level
    5 too (section 3.4.2.1): the session's hot path writes them unchanged."""
    kinds: dict[PacketType, type[Puback | Pubrec | Pubrel | Pubcomp]] = {
        PacketType.PUBACK: Puback,
        PacketType.PUBREC: Pubrec,
        PacketType.PUBREL: Pubrel,
        PacketType.PUBCOMP: Pubcomp,
    }
    for kind, cls in kinds.items():
        assert encode_ack(kind, 0x1234) == encode(cls(0x1234), V5)
        assert ReceiveBuffer(V5).feed(encode_ack(kind, 7)) == [cls(7)]
    words = [ACK_WORDS[kind] | pid for kind in kinds for pid in (1, 0xFFFF)]
    assert ReceiveBuffer(V5).feed(encode_acks(words)) == [
        cls(pid) for cls in kinds.values() for pid in (1, 0xFFFF)
    ]


def test_publish_without_properties_decodes_to_none_properties() -> None:
    [packet] = ReceiveBuffer(V5).feed(h("30 08 00 03 61 2F 62 00 68 69"))
    assert isinstance(packet, Publish) and packet.properties is None


# ---------------------------------------------------------------------------------------------
# Property encodings against paho-mqtt (paho.mqtt.properties.Properties)

_SAMPLE_VALUES: dict[int, object] = {
    0x01: 1,
    0x02: 0x01020304,
    0x03: "application/json",
    0x08: "reply/here",
    0x09: b"\x00\xffcorr",
    0x11: 0xFFFFFFFF,
    0x12: "assigned-é",
    0x13: 0x0102,
    0x15: "SCRAM-SHA-256",
    0x16: b"\x01\x02\x03",
    0x17: 1,
    0x18: 3600,
    0x19: 1,
    0x1A: "response/info",
    0x1C: "other.example:1883",
    0x1F: "a reason, 日本",
    0x21: 0xFFFF,
    0x22: 300,
    0x23: 0x8001,
    0x24: 1,
    0x25: 0,
    0x27: 1_048_576,
    0x28: 1,
    0x29: 0,
    0x2A: 1,
}
_USER = [("k", "v"), ("k", "v2"), ("ü", "")]
_PAHO_CONTEXT: dict[Context, int] = {WILL_PROPERTIES: PacketTypes.WILLMESSAGE}


def _every_property(context: Context) -> tuple[Properties, PahoProperties]:
    """Properties for ``context`` with every property table 2-4 allows there, ours and paho's."""
    ours = Properties()
    paho = PahoProperties(_PAHO_CONTEXT.get(context, context))
    for spec in PROPERTIES:
        if context not in spec.sections:
            continue
        paho_name = spec.name.replace(" ", "")
        if spec.identifier == 0x26:
            ours.user_properties = list(_USER)
            for pair in _USER:
                setattr(paho, paho_name, pair)
        elif spec.identifier == 0x0B:
            ours.subscription_identifiers = [268_435_455]
            setattr(paho, paho_name, 268_435_455)
        else:
            setattr(ours, spec.attribute, _SAMPLE_VALUES[spec.identifier])
            setattr(paho, paho_name, _SAMPLE_VALUES[spec.identifier])
    return ours, paho


_ALL_CONTEXTS: list[Context] = [
    *(k for k in PacketType if k not in (PacketType.PINGREQ, PacketType.PINGRESP)),
    WILL_PROPERTIES,
]


@pytest.mark.parametrize("context", _ALL_CONTEXTS, ids=lambda c: getattr(c, "name", "WILL"))
def test_property_encoding_matches_paho(context: Context) -> None:
    ours, paho = _every_property(context)
    mine = encode_properties(ours, context)
    theirs = paho.pack()
    if context in (PacketType.CONNECT, PacketType.CONNACK):
        # paho writes User Property at its identifier's place (0x26, before 0x27-0x2A); we
        # write it last: the same bytes once paho's User Properties move to the end.
        without = PahoProperties(paho.packetType)
        for name in paho.names:
            key = name.replace(" ", "")
            if key != "UserProperty" and hasattr(paho, key):
                setattr(without, key, getattr(paho, key))
        tail = b"".join(b"\x26" + _pair(k, v) for k, v in _USER)
        prefix = theirs[: len(theirs) - len(_strip_length(theirs))]
        assert mine == prefix + _strip_length(without.pack()) + tail
    else:
        assert mine == theirs
    # Each side reads the other's bytes to the same values.
    decoded, end = decode_properties(theirs, 0, len(theirs), context)
    assert end == len(theirs)
    assert decoded == ours
    back = PahoProperties(paho.packetType)
    back.unpack(mine)
    assert back.json() == paho.json()


def _pair(name: str, value: str) -> bytes:
    a, b = name.encode(), value.encode()
    return len(a).to_bytes(2, "big") + a + len(b).to_bytes(2, "big") + b


def _strip_length(data: bytes) -> bytes:
    """Drop the Property Length (a Variable Byte Integer) in front of encoded properties."""
    pos = 0
    while data[pos] & 0x80:
        pos += 1
    return data[pos + 1 :]


def test_property_table_matches_paho() -> None:
    """Identifiers, names, data types and where each property may appear (table 2-4)."""
    paho = PahoProperties(PacketTypes.PUBLISH)
    assert len(PROPERTIES) == 27
    assert {spec.name: spec.identifier for spec in PROPERTIES} == paho.names
    type_names = {
        "BYTE": "Byte",
        "TWO_BYTE_INTEGER": "Two Byte Integer",
        "FOUR_BYTE_INTEGER": "Four Byte Integer",
        "VARIABLE_BYTE_INTEGER": "Variable Byte Integer",
        "UTF8_STRING": "UTF-8 Encoded String",
        "BINARY_DATA": "Binary Data",
        "UTF8_STRING_PAIR": "UTF-8 String Pair",
    }
    for spec in PROPERTIES:
        paho_type, paho_packets = paho.properties[spec.identifier]
        assert paho.types[paho_type] == type_names[spec.data_type.name], spec.name
        ours = {_PAHO_CONTEXT.get(c, c) for c in spec.sections}
        assert ours == set(paho_packets), spec.name
