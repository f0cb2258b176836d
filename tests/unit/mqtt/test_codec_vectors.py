"""Byte vectors for the codec: the examples of the MQTT 3.1 text and one exact frame per packet
type, encoded and decoded for protocol levels 3 (MQTT 3.1) and 4 (MQTT 3.1.1)."""

from __future__ import annotations

from typing import cast

import pytest

from connector.mqtt.decode import decode_packet
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import MalformedPacket
from connector.mqtt.fields import (
    MAX_REMAINING_LENGTH,
    decode_remaining_length,
    encode_remaining_length,
)
from connector.mqtt.packets import (
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
from connector.mqtt.receive_buffer import ReceiveBuffer

LEVELS = [ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1]


def h(text: str) -> bytes:
    """Hex with spaces to bytes."""
    return bytes.fromhex(text)


def decode_frame(frame: bytes, level: int = ProtocolLevel.MQTT_3_1_1) -> Packet:
    """Decode exactly one complete frame through the stream decoder and ``decode_packet``."""
    packets = ReceiveBuffer(level).feed(frame)
    assert len(packets) == 1, packets
    parsed = decode_remaining_length(frame, 1)
    assert parsed is not None
    length, start = parsed
    assert start + length == len(frame)
    direct = decode_packet(frame[0], frame[start:], level)
    assert direct == packets[0]
    return packets[0]


# ---------------------------------------------------------------------------------------------
# The MQTT 3.1 text's examples


REMAINING_LENGTH_VECTORS = [
    (0, "00"),
    (64, "40"),
    (127, "7F"),
    (128, "80 01"),
    (321, "C1 02"),
    (16_383, "FF 7F"),
    (16_384, "80 80 01"),
    (2_097_151, "FF FF 7F"),
    (2_097_152, "80 80 80 01"),
    (268_435_455, "FF FF FF 7F"),
]


@pytest.mark.parametrize(("value", "encoded"), REMAINING_LENGTH_VECTORS)
def test_remaining_length_encodes_to_spec_bytes(value: int, encoded: str) -> None:
    assert encode_remaining_length(value) == h(encoded)


@pytest.mark.parametrize(("value", "encoded"), REMAINING_LENGTH_VECTORS)
def test_remaining_length_decodes_from_spec_bytes(value: int, encoded: str) -> None:
    data = h(encoded)
    assert decode_remaining_length(data, 0) == (value, len(data))
    # At an offset and followed by other bytes: only the field is consumed.
    assert decode_remaining_length(b"\x30" + data + b"\xff\xff", 1) == (value, 1 + len(data))


@pytest.mark.parametrize(("value", "encoded"), REMAINING_LENGTH_VECTORS)
def test_remaining_length_incomplete_asks_for_more(value: int, encoded: str) -> None:
    data = h(encoded)
    for cut in range(len(data)):
        assert decode_remaining_length(data[:cut], 0) is None


def test_remaining_length_max_is_268435455() -> None:
    assert MAX_REMAINING_LENGTH == 268_435_455
    with pytest.raises(ValueError, match="268435455"):
        encode_remaining_length(MAX_REMAINING_LENGTH + 1)
    with pytest.raises(ValueError):
        encode_remaining_length(-1)


@pytest.mark.parametrize("encoded", ["FF FF FF FF 7F", "80 80 80 80 01", "80 80 80 80"])
def test_remaining_length_of_five_bytes_is_malformed(encoded: str) -> None:
    with pytest.raises(MalformedPacket, match=r"more than 4 bytes.*2\.2\.3"):
        decode_remaining_length(h(encoded), 0)
    with pytest.raises(MalformedPacket, match=r"2\.2\.3"):
        ReceiveBuffer().feed(b"\x30" + h(encoded))


def test_publish_qos1_fixed_header_byte_is_0x32() -> None:
    frame = encode_publish("a/b", b"", qos=1, packet_id=10)
    assert frame[0] == 0x32
    assert PacketType(frame[0] >> 4) is PacketType.PUBLISH


def test_publish_variable_header_example_of_the_spec() -> None:
    # MQTT 3.1 "Variable header" example: topic "a/b", QoS 1, message id 10.
    frame = encode_publish("a/b", b"", qos=1, packet_id=10)
    assert frame == h("32 07") + h("00 03 61 2F 62 00 0A")
    assert decode_frame(frame) == Publish("a/b", b"", qos=1, packet_id=10)


# ---------------------------------------------------------------------------------------------
# One exact frame per packet type


CONNECT_CASES = [
    pytest.param(
        Connect("c1", clean_session=True, keep_alive=60),
        "10 0E  00 04 4D 51 54 54  04  02  00 3C  00 02 63 31",
        id="3.1.1-minimal",
    ),
    pytest.param(
        Connect("c1", clean_session=True, keep_alive=60, protocol_level=ProtocolLevel.MQTT_3_1),
        "10 10  00 06 4D 51 49 73 64 70  03  02  00 3C  00 02 63 31",
        id="3.1-minimal",
    ),
    pytest.param(
        Connect(
            "id",
            clean_session=False,
            keep_alive=30,
            username="u",
            password=b"pw",
            will=Will("w/t", b"bye", qos=1, retain=True),
        ),
        "10 1F  00 04 4D 51 54 54  04  EC  00 1E"
        "  00 02 69 64  00 03 77 2F 74  00 03 62 79 65  00 01 75  00 02 70 77",
        id="3.1.1-will-user-password",
    ),
    pytest.param(
        Connect(
            "id",
            clean_session=True,
            keep_alive=0,
            username="u",
            password=b"pw",
            will=Will("w/t", b"bye", qos=2, retain=False),
            protocol_level=ProtocolLevel.MQTT_3_1,
        ),
        "10 21  00 06 4D 51 49 73 64 70  03  D6  00 00"
        "  00 02 69 64  00 03 77 2F 74  00 03 62 79 65  00 01 75  00 02 70 77",
        id="3.1-will-user-password",
    ),
    pytest.param(
        Connect("", clean_session=True, keep_alive=0xFFFF, username="user"),
        "10 12  00 04 4D 51 54 54  04  82  FF FF  00 00  00 04 75 73 65 72",
        id="3.1.1-username-only-empty-client-id",
    ),
    pytest.param(
        Connect("c", clean_session=False, keep_alive=5, will=Will("t", b"", qos=0)),
        "10 12  00 04 4D 51 54 54  04  04  00 05  00 01 63  00 01 74  00 00",
        id="3.1.1-will-qos0-empty-message",
    ),
]


@pytest.mark.parametrize(("packet", "frame"), CONNECT_CASES)
def test_connect_bytes(packet: Connect, frame: str) -> None:
    assert encode(packet) == h(frame)
    assert decode_frame(h(frame)) == packet


# (packet, level-independent frame) for every other type.
COMMON_CASES = [
    pytest.param(Connack(False, 0), "20 02 00 00", id="CONNACK-accepted"),
    pytest.param(Connack(False, 5), "20 02 00 05", id="CONNACK-not-authorized"),
    pytest.param(Publish("a/b", b"hi"), "30 07 00 03 61 2F 62 68 69", id="PUBLISH-qos0"),
    pytest.param(
        Publish("a/b", b"hi", retain=True), "31 07 00 03 61 2F 62 68 69", id="PUBLISH-qos0-retain"
    ),
    pytest.param(
        Publish("a/b", b"hi", qos=1, packet_id=10),
        "32 09 00 03 61 2F 62 00 0A 68 69",
        id="PUBLISH-qos1",
    ),
    pytest.param(
        Publish("a/b", b"hi", qos=1, retain=True, dup=True, packet_id=10),
        "3B 09 00 03 61 2F 62 00 0A 68 69",
        id="PUBLISH-qos1-dup-retain",
    ),
    pytest.param(
        Publish("a/b", b"hi", qos=2, packet_id=0x1234),
        "34 09 00 03 61 2F 62 12 34 68 69",
        id="PUBLISH-qos2",
    ),
    pytest.param(
        Publish("a/b", b"", qos=2, dup=True, retain=True, packet_id=0xFFFF),
        "3D 07 00 03 61 2F 62 FF FF",
        id="PUBLISH-qos2-dup-retain-empty-payload",
    ),
    pytest.param(Puback(10), "40 02 00 0A", id="PUBACK"),
    pytest.param(Pubrec(0x1234), "50 02 12 34", id="PUBREC"),
    pytest.param(Pubrel(0x1234), "62 02 12 34", id="PUBREL"),
    pytest.param(Pubcomp(0xFFFF), "70 02 FF FF", id="PUBCOMP"),
    pytest.param(
        Subscribe(1, [("a/b", 1), ("c/#", 2)]),
        "82 0E 00 01  00 03 61 2F 62 01  00 03 63 2F 23 02",
        id="SUBSCRIBE",
    ),
    pytest.param(
        Subscribe(0x0102, [("+", 0)]), "82 06 01 02  00 01 2B 00", id="SUBSCRIBE-plus-only"
    ),
    pytest.param(Suback(1, [1, 0x80, 0, 2]), "90 06 00 01 01 80 00 02", id="SUBACK-with-failure"),
    pytest.param(Suback(7, [0x80]), "90 03 00 07 80", id="SUBACK-only-failure"),
    pytest.param(
        Unsubscribe(2, ["a/b", "c/+"]),
        "A2 0C 00 02  00 03 61 2F 62  00 03 63 2F 2B",
        id="UNSUBSCRIBE",
    ),
    pytest.param(Unsuback(2), "B0 02 00 02", id="UNSUBACK"),
    pytest.param(Pingreq(), "C0 00", id="PINGREQ"),
    pytest.param(Pingresp(), "D0 00", id="PINGRESP"),
    pytest.param(Disconnect(), "E0 00", id="DISCONNECT"),
]


@pytest.mark.parametrize("level", LEVELS, ids=str)
@pytest.mark.parametrize(("packet", "frame"), COMMON_CASES)
def test_packet_bytes_both_levels(packet: Packet, frame: str, level: ProtocolLevel) -> None:
    assert encode(packet, level) == h(frame)
    assert decode_frame(h(frame), level) == packet


def test_every_packet_type_has_a_vector() -> None:
    covered = {cast(Packet, case.values[0]).type for case in COMMON_CASES} | {PacketType.CONNECT}
    # AUTH (type 15) is MQTT 5.0 only: test_codec_v5_vectors.py has its vectors.
    assert covered == set(PacketType) - {PacketType.AUTH}
    assert len(PacketType) == 15


def test_connack_session_present_on_3_1_1() -> None:
    assert encode(Connack(True, 0), ProtocolLevel.MQTT_3_1_1) == h("20 02 01 00")
    assert decode_frame(h("20 02 01 00"), ProtocolLevel.MQTT_3_1_1) == Connack(True, 0)


def test_connack_on_3_1_has_no_session_present_flag() -> None:
    # MQTT 3.1: the first variable header byte of CONNACK is reserved and unused.
    assert encode(Connack(True, 0), ProtocolLevel.MQTT_3_1) == h("20 02 00 00")
    assert decode_frame(h("20 02 01 00"), ProtocolLevel.MQTT_3_1) == Connack(False, 0)


@pytest.mark.parametrize("code", range(6))
def test_connack_return_codes_0_to_5(code: int) -> None:
    frame = bytes((0x20, 2, 0, code))
    for level in LEVELS:
        assert encode(Connack(False, code), level) == frame
        assert decode_frame(frame, level) == Connack(False, code)


@pytest.mark.parametrize("first", [0x62, 0x6A])
def test_mqtt_3_1_pubrel_with_qos1_and_dup_flags(first: int) -> None:
    assert decode_frame(bytes((first, 2, 0, 9)), ProtocolLevel.MQTT_3_1) == Pubrel(9)


@pytest.mark.parametrize("first", [0x82, 0x8A])
def test_mqtt_3_1_subscribe_with_qos1_and_dup_flags(first: int) -> None:
    frame = bytes((first,)) + h("06 00 05 00 01 74 01")
    assert decode_frame(frame, ProtocolLevel.MQTT_3_1) == Subscribe(5, [("t", 1)])


@pytest.mark.parametrize("first", [0xA2, 0xAA])
def test_mqtt_3_1_unsubscribe_with_qos1_and_dup_flags(first: int) -> None:
    frame = bytes((first,)) + h("05 00 05 00 01 74")
    assert decode_frame(frame, ProtocolLevel.MQTT_3_1) == Unsubscribe(5, ["t"])


def test_multibyte_utf8_topic_lengths_count_bytes() -> None:
    topic = "température/ü/日本"
    encoded = topic.encode("utf-8")
    assert len(encoded) == 22 and len(topic) == 16
    frame = encode_publish(topic, b"x", qos=1, packet_id=1)
    assert frame[2:4] == (22).to_bytes(2, "big")
    assert frame[4 : 4 + 22] == encoded
    assert frame[1] == 2 + 22 + 2 + 1
    assert decode_frame(frame) == Publish(topic, b"x", qos=1, packet_id=1)


def test_multibyte_utf8_in_subscribe_and_connect_strings() -> None:
    sub = Subscribe(3, [("température/+/日本", 1)])
    frame = encode(sub)
    assert frame[4:6] == len("température/+/日本".encode()).to_bytes(2, "big")
    assert decode_frame(frame) == sub
    connect = Connect("clïent", username="ユーザー", password="пароль".encode())
    frame = encode(connect)
    assert h("00 07") + "clïent".encode() in frame
    assert h("00 0C") + "ユーザー".encode() in frame
    assert decode_frame(frame) == connect


def test_publish_payload_is_everything_after_the_variable_header() -> None:
    payload = bytes(range(256)) * 3
    frame = encode_publish("t", payload, qos=0)
    assert frame[:4] == h("30 83 06 00") and frame[4:6] == h("01 74")
    assert decode_frame(frame) == Publish("t", payload)


def test_publish_topic_as_preencoded_bytes() -> None:
    assert encode_publish(b"a/b", b"hi") == encode_publish("a/b", b"hi")
