"""Malformed frames: each raises MalformedPacket whose message names the rule and its section,
whether decoded with ``decode_packet`` or through the stream decoder. Also the encoder's
refusals and the topic name / filter rules."""

from __future__ import annotations

import re

import pytest

from connector.mqtt.decode import decode_packet
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import MalformedPacket
from connector.mqtt.fields import decode_remaining_length, decode_utf8
from connector.mqtt.packets import (
    Connack,
    Connect,
    ProtocolLevel,
    Puback,
    Publish,
    Pubrel,
    Suback,
    Subscribe,
    Unsubscribe,
    Will,
)
from connector.mqtt.receive_buffer import ReceiveBuffer
from connector.mqtt.topics import topic_matches, validate_topic_filter, validate_topic_name

V3 = ProtocolLevel.MQTT_3_1
V4 = ProtocolLevel.MQTT_3_1_1


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def frame(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes((first, len(body))) + body


def assert_malformed(data: bytes, pattern: str, level: int = V4) -> MalformedPacket:
    """``data`` (one frame) is rejected by both decoding paths with a message matching
    ``pattern``; returns the stream decoder's exception."""
    with pytest.raises(MalformedPacket) as stream_info:
        ReceiveBuffer(level).feed(data)
    assert re.search(pattern, str(stream_info.value)), str(stream_info.value)
    parsed = decode_remaining_length(data, 1)
    if parsed is not None and parsed[0] + parsed[1] == len(data):
        with pytest.raises(MalformedPacket) as direct_info:
            decode_packet(data[0], data[parsed[1] :], level)
        assert re.search(pattern, str(direct_info.value)), str(direct_info.value)
    return stream_info.value


def connect_body(flags: int, payload: bytes, name: bytes = b"MQTT", level: int = 4) -> bytes:
    return len(name).to_bytes(2, "big") + name + bytes((level, flags)) + h("00 3C") + payload


def hex_id(value: object) -> str | None:
    """Test ids: frames as hex, patterns as a fixed word."""
    if isinstance(value, bytes):
        return value.hex(" ")
    return "rule" if isinstance(value, str) else None


def s(text: str | bytes) -> bytes:
    """A length-prefixed string field."""
    data = text.encode() if isinstance(text, str) else text
    return len(data).to_bytes(2, "big") + data


# ---------------------------------------------------------------------------------------------
# Packet identifiers (section 2.3.1)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(h("32 07 00 03 61 2F 62 00 00"), id="PUBLISH-qos1"),
        pytest.param(h("34 08 00 03 61 2F 62 00 00 58"), id="PUBLISH-qos2"),
        pytest.param(h("40 02 00 00"), id="PUBACK"),
        pytest.param(h("50 02 00 00"), id="PUBREC"),
        pytest.param(h("62 02 00 00"), id="PUBREL"),
        pytest.param(h("70 02 00 00"), id="PUBCOMP"),
        pytest.param(h("82 06 00 00 00 01 74 00"), id="SUBSCRIBE"),
        pytest.param(h("90 03 00 00 00"), id="SUBACK"),
        pytest.param(h("A2 05 00 00 00 01 74"), id="UNSUBSCRIBE"),
        pytest.param(h("B0 02 00 00"), id="UNSUBACK"),
    ],
)
def test_packet_identifier_zero(data: bytes) -> None:
    assert_malformed(data, r"packet identifier 0 is not allowed \(section 2\.3\.1\)")


# ---------------------------------------------------------------------------------------------
# PUBLISH fixed header and topic


@pytest.mark.parametrize("first", [0x36, 0x37, 0x3E, 0x3F])
def test_publish_qos_3(first: int) -> None:
    assert_malformed(frame(first, h("00 01 74 00 01")), r"QoS 3.*3\.3\.1\.2")


def test_publish_qos_3_rejected_before_the_body_arrives() -> None:
    decoder = ReceiveBuffer()
    with pytest.raises(MalformedPacket, match=r"QoS 3.*3\.3\.1\.2"):
        decoder.feed(h("36 80 01 00"))  # 128-byte frame, only its first bytes here


@pytest.mark.parametrize("first", [0x38, 0x39])
def test_publish_dup_on_qos_0(first: int) -> None:
    assert_malformed(frame(first, h("00 03 61 2F 62")), r"DUP must be 0.*3\.3\.1\.1")


@pytest.mark.parametrize("topic", ["a/+", "a/#", "+", "#", "a+b", "sport/#/x", "+/x"])
@pytest.mark.parametrize("first", [0x30, 0x32])
def test_publish_topic_with_wildcard(topic: str, first: int) -> None:
    pid = b"\x00\x01" if first & 0x06 else b""
    assert_malformed(frame(first, s(topic) + pid), r"wildcard.*3\.3\.2\.1")


@pytest.mark.parametrize("first", [0x30, 0x32])
def test_publish_empty_topic(first: int) -> None:
    pid = b"\x00\x01" if first & 0x06 else b""
    assert_malformed(frame(first, h("00 00") + pid + b"x"), r"at least one character.*4\.7\.3")


INVALID_UTF8 = [
    pytest.param(h("ED A0 80"), id="utf16-high-surrogate"),
    pytest.param(h("ED BF BF"), id="utf16-low-surrogate"),
    pytest.param(h("61 FF 62"), id="byte-ff"),
    pytest.param(h("C3 28"), id="bad-continuation"),
    pytest.param(h("C0 AF"), id="overlong-slash"),
    pytest.param(h("E0 80 AF"), id="overlong-3-byte"),
    pytest.param(h("F4 90 80 80"), id="above-U+10FFFF"),
    pytest.param(h("E6 97"), id="truncated-sequence"),
    pytest.param(h("80"), id="lone-continuation"),
]


@pytest.mark.parametrize("raw", INVALID_UTF8)
@pytest.mark.parametrize("first", [0x30, 0x34])
def test_publish_topic_invalid_utf8(raw: bytes, first: int) -> None:
    pid = b"\x00\x01" if first & 0x06 else b""
    assert_malformed(frame(first, s(raw) + pid), r"UTF-8 \(section 1\.5\.3\)")


@pytest.mark.parametrize("raw", [h("00"), h("61 00"), h("61 2F 00 2F 62")], ids=hex_id)
def test_publish_topic_with_u0000(raw: bytes) -> None:
    assert_malformed(frame(0x30, s(raw)), r"U\+0000.*1\.5\.3")


def test_decode_utf8_accepts_bom_and_keeps_it() -> None:
    # Section 1.5.3: a U+FEFF sequence is a character and must not be skipped or stripped.
    assert decode_utf8(h("EF BB BF 61"), "x") == "\ufeffa"


@pytest.mark.parametrize("raw", INVALID_UTF8)
def test_invalid_utf8_in_other_strings(raw: bytes) -> None:
    pattern = r"UTF-8 \(section 1\.5\.3\)"
    assert_malformed(frame(0x82, h("00 01") + s(raw) + b"\x00"), r"topic filter.*" + pattern)
    assert_malformed(frame(0xA2, h("00 01") + s(raw)), r"topic filter.*" + pattern)
    assert_malformed(frame(0x10, connect_body(0x02, s(raw))), r"client identifier.*" + pattern)
    assert_malformed(frame(0x10, connect_body(0x82, s("c") + s(raw))), r"user name.*" + pattern)
    assert_malformed(
        frame(0x10, connect_body(0x06, s("c") + s(raw) + s(b""))), r"will topic.*" + pattern
    )


def test_u0000_in_other_strings() -> None:
    pattern = r"U\+0000.*1\.5\.3"
    assert_malformed(frame(0x82, h("00 01") + s("a\x00") + b"\x00"), pattern)
    assert_malformed(frame(0xA2, h("00 01") + s("a\x00")), pattern)
    assert_malformed(frame(0x10, connect_body(0x02, s("c\x00"))), pattern)
    assert_malformed(frame(0x10, connect_body(0x82, s("c") + s("u\x00"))), pattern)


# ---------------------------------------------------------------------------------------------
# Fixed header flags and packet types (sections 2.2.1, 2.2.2)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(h("60 02 00 01"), id="PUBREL-0x60"),
        pytest.param(h("6A 02 00 01"), id="PUBREL-0x6A"),
        pytest.param(h("80 06 00 01 00 01 74 00"), id="SUBSCRIBE-0x80"),
        pytest.param(h("8A 06 00 01 00 01 74 00"), id="SUBSCRIBE-0x8A"),
        pytest.param(h("A0 05 00 01 00 01 74"), id="UNSUBSCRIBE-0xA0"),
        pytest.param(h("AA 05 00 01 00 01 74"), id="UNSUBSCRIBE-0xAA"),
        pytest.param(h("41 02 00 01"), id="PUBACK-0x41"),
        pytest.param(h("42 02 00 01"), id="PUBACK-0x42"),
        pytest.param(h("48 02 00 01"), id="PUBACK-0x48"),
        pytest.param(h("52 02 00 01"), id="PUBREC-0x52"),
        pytest.param(h("72 02 00 01"), id="PUBCOMP-0x72"),
        pytest.param(h("92 03 00 01 00"), id="SUBACK-0x92"),
        pytest.param(h("B2 02 00 01"), id="UNSUBACK-0xB2"),
        pytest.param(h("21 02 00 00"), id="CONNACK-0x21"),
        pytest.param(h("C2 00"), id="PINGREQ-0xC2"),
        pytest.param(h("DF 00"), id="PINGRESP-0xDF"),
        pytest.param(h("E1 00"), id="DISCONNECT-0xE1"),
        pytest.param(h("18 00"), id="CONNECT-0x18"),
    ],
)
def test_reserved_flag_bits_on_3_1_1(data: bytes) -> None:
    assert_malformed(data, r"flags 0b\d{4}; they must be 0b\d{4} \(section 2\.2\.2, table 2\.2\)")


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(h("60 02 00 01"), id="PUBREL-0x60"),
        pytest.param(h("68 02 00 01"), id="PUBREL-0x68"),
        pytest.param(h("64 02 00 01"), id="PUBREL-0x64"),
        pytest.param(h("80 06 00 01 00 01 74 00"), id="SUBSCRIBE-0x80"),
        pytest.param(h("A0 05 00 01 00 01 74"), id="UNSUBSCRIBE-0xA0"),
        pytest.param(h("41 02 00 01"), id="PUBACK-0x41"),
    ],
)
def test_reserved_flag_bits_on_3_1(data: bytes) -> None:
    assert_malformed(data, r"section 2\.2\.2", level=V3)


def test_3_1_1_rejects_what_3_1_accepts() -> None:
    assert ReceiveBuffer(V3).feed(h("6A 02 00 01")) == [Pubrel(1)]
    assert_malformed(h("6A 02 00 01"), r"2\.2\.2", level=V4)


@pytest.mark.parametrize("level", [V3, V4])
@pytest.mark.parametrize("data", [h("00 00"), h("0F 00"), h("F0 00"), h("F0 02 00 01")], ids=hex_id)
def test_reserved_packet_types(data: bytes, level: int) -> None:
    assert_malformed(data, r"packet type (0|15) is reserved \(section 2\.2\.1\)", level)


def test_reserved_packet_type_rejected_before_the_body_arrives() -> None:
    with pytest.raises(MalformedPacket, match=r"2\.2\.1"):
        ReceiveBuffer().feed(h("F0 10 00"))


# ---------------------------------------------------------------------------------------------
# Truncated fields and trailing bytes


@pytest.mark.parametrize(
    ("data", "pattern"),
    ids=hex_id,
    argvalues=[
        (h("30 00"), r"topic name length runs past the end.*3\.3\.2"),
        (h("30 01 00"), r"topic name length runs past the end.*3\.3\.2"),
        (h("30 03 00 05 61"), r"topic name runs past the end.*3\.3\.2"),
        (h("32 05 00 03 61 2F 62"), r"packet identifier runs past the end.*3\.3\.2"),
        (h("32 06 00 03 61 2F 62 00"), r"packet identifier runs past the end.*3\.3\.2"),
        (h("40 01 00"), r"PUBACK must have remaining length 2, got 1 \(section 3\.4\.1\)"),
        (h("50 00"), r"PUBREC must have remaining length 2, got 0 \(section 3\.5\.1\)"),
        (h("62 01 01"), r"PUBREL must have remaining length 2, got 1 \(section 3\.6\.1\)"),
        (h("70 01 01"), r"PUBCOMP must have remaining length 2, got 1 \(section 3\.7\.1\)"),
        (h("B0 01 01"), r"UNSUBACK must have remaining length 2, got 1 \(section 3\.11\.1\)"),
        (h("20 01 00"), r"CONNACK must have remaining length 2, got 1 \(section 3\.2\.1\)"),
        (h("82 01 00"), r"SUBSCRIBE: the packet identifier runs past the end"),
        (h("82 05 00 01 00 01 74"), r"SUBSCRIBE: requested QoS runs past the end"),
        (h("82 05 00 01 00 05 74"), r"SUBSCRIBE: topic filter runs past the end"),
        (h("82 03 00 01 00"), r"SUBSCRIBE: the length of topic filter runs past the end"),
        (h("A2 04 00 01 00 02"), r"UNSUBSCRIBE: topic filter runs past the end"),
        (h("90 01 00"), r"SUBACK: the packet identifier runs past the end"),
        (h("10 03 00 04 4D"), r"CONNECT: protocol name runs past the end"),
        (h("10 06 00 04 4D 51 54 54"), r"CONNECT: protocol level runs past the end"),
        (h("10 07 00 04 4D 51 54 54 04"), r"CONNECT: connect flags runs past the end"),
        (h("10 09 00 04 4D 51 54 54 04 02 00"), r"CONNECT: keep alive runs past the end"),
        (
            h("10 0B 00 04 4D 51 54 54 04 02 00 3C 00"),
            r"CONNECT: the length of client identifier runs past the end",
        ),
    ],
)
def test_truncated_fields(data: bytes, pattern: str) -> None:
    assert_malformed(data, pattern)


def test_truncated_fields_cite_a_section() -> None:
    assert_malformed(h("82 05 00 01 00 01 74"), r"truncated field, section 2\.2\.3")


def test_truncated_connect_payload_fields() -> None:
    will = connect_body(0x06, s("c") + s("w/t"))  # will message missing
    assert_malformed(frame(0x10, will), r"CONNECT: the length of will message runs past")
    user = connect_body(0x82, s("c"))
    assert_malformed(frame(0x10, user), r"CONNECT: the length of user name runs past")
    password = connect_body(0xC2, s("c") + s("u") + h("00 05 70"))
    assert_malformed(frame(0x10, password), r"CONNECT: password runs past")


@pytest.mark.parametrize(
    ("data", "pattern"),
    ids=hex_id,
    argvalues=[
        (h("40 03 00 01 00"), r"PUBACK must have remaining length 2, got 3 \(section 3\.4\.1\)"),
        (h("B0 03 00 01 00"), r"UNSUBACK must have remaining length 2, got 3"),
        (h("C0 01 00"), r"PINGREQ must have remaining length 0, got 1 \(section 3\.12\.1\)"),
        (h("D0 01 00"), r"PINGRESP must have remaining length 0, got 1 \(section 3\.13\.1\)"),
        (h("E0 01 00"), r"DISCONNECT must have remaining length 0, got 1 \(section 3\.14\.1\)"),
        (h("20 03 00 00 00"), r"CONNACK must have remaining length 2, got 3"),
        (
            h("10 0F 00 04 4D 51 54 54 04 02 00 3C 00 01 63 FF FF"),
            r"CONNECT: 2 unexpected bytes after the last field.*section 2\.2\.3",
        ),
        (
            h("A2 06 00 01 00 01 74 00"),
            r"UNSUBSCRIBE: the length of topic filter runs past",
        ),
    ],
)
def test_trailing_bytes(data: bytes, pattern: str) -> None:
    assert_malformed(data, pattern)


# ---------------------------------------------------------------------------------------------
# CONNACK (section 3.2.2)


@pytest.mark.parametrize("level", [V3, V4])
@pytest.mark.parametrize("code", [6, 7, 0x80, 0xFF])
def test_connack_return_code_above_5(code: int, level: int) -> None:
    pattern = r"return code \d+ is not one of 0-5.*3\.2\.2\.3"
    assert_malformed(bytes((0x20, 2, 0, code)), pattern, level)


@pytest.mark.parametrize("flags", [0x02, 0x80, 0xFE, 0xFF])
def test_connack_reserved_flag_bits(flags: int) -> None:
    assert_malformed(bytes((0x20, 2, flags, 0)), r"bits 7-1 are reserved.*3\.2\.2\.1")


def test_connack_reserved_byte_is_ignored_on_3_1() -> None:
    assert ReceiveBuffer(V3).feed(h("20 02 FE 00")) == [Connack(False, 0)]


@pytest.mark.parametrize("code", [1, 2, 3, 4, 5])
def test_connack_session_present_with_nonzero_code(code: int) -> None:
    assert_malformed(bytes((0x20, 2, 1, code)), r"session present 0.*3\.2\.2\.2")


# ---------------------------------------------------------------------------------------------
# SUBSCRIBE, SUBACK, UNSUBSCRIBE


@pytest.mark.parametrize("code", [0x03, 0x04, 0x7F, 0x81, 0xFF])
def test_suback_return_code_not_allowed(code: int) -> None:
    assert_malformed(bytes((0x90, 4, 0, 1, 0, code)), r"SUBACK return code.*3\.9\.3")


def test_suback_without_return_codes() -> None:
    assert_malformed(h("90 02 00 01"), r"at least one return code.*3\.9\.3")


@pytest.mark.parametrize("qos", [0x03, 0x04, 0x41, 0x80, 0xFF])
def test_subscribe_requested_qos_not_allowed(qos: int) -> None:
    data = frame(0x82, h("00 01") + s("t") + bytes((qos,)))
    assert_malformed(data, r"requested QoS byte 0x[0-9a-f]{2} is not 0, 1 or 2.*3\.8\.3\.1")


def test_subscribe_without_filters() -> None:
    assert_malformed(h("82 02 00 01"), r"at least one topic filter.*3\.8\.3")


def test_unsubscribe_without_filters() -> None:
    assert_malformed(h("A2 02 00 01"), r"at least one topic filter.*3\.10\.3")


BAD_FILTERS = [
    pytest.param("a/#/b", r"'#' must be the whole last level.*4\.7\.1\.2", id="hash-not-last"),
    pytest.param("#a", r"'#' must be the whole last level.*4\.7\.1\.2", id="hash-in-level"),
    pytest.param("a/b#", r"'#' must be the whole last level.*4\.7\.1\.2", id="hash-suffix"),
    pytest.param("#/", r"'#' must be the whole last level.*4\.7\.1\.2", id="hash-then-empty"),
    pytest.param("a+", r"'\+' must occupy a whole level.*4\.7\.1\.3", id="plus-suffix"),
    pytest.param("+a/b", r"'\+' must occupy a whole level.*4\.7\.1\.3", id="plus-prefix"),
    pytest.param("a/++", r"'\+' must occupy a whole level.*4\.7\.1\.3", id="double-plus"),
    pytest.param("", r"at least one character.*4\.7\.3", id="empty"),
]


@pytest.mark.parametrize(("topic_filter", "pattern"), BAD_FILTERS)
def test_bad_topic_filters_in_subscribe_and_unsubscribe(topic_filter: str, pattern: str) -> None:
    assert_malformed(frame(0x82, h("00 01") + s(topic_filter) + b"\x01"), pattern)
    assert_malformed(frame(0xA2, h("00 01") + s(topic_filter)), pattern)
    with pytest.raises(MalformedPacket, match=pattern):
        validate_topic_filter(topic_filter)
    with pytest.raises(MalformedPacket, match=pattern):
        encode(Subscribe(1, [(topic_filter, 0)]))
    with pytest.raises(MalformedPacket, match=pattern):
        encode(Unsubscribe(1, [topic_filter]))


def test_one_bad_filter_among_good_ones() -> None:
    body = h("00 01") + s("a/b") + b"\x00" + s("a/#/b") + b"\x01"
    assert_malformed(frame(0x82, body), r"SUBSCRIBE/UNSUBSCRIBE: .*'a/#/b'.*4\.7\.1\.2")


# ---------------------------------------------------------------------------------------------
# CONNECT (section 3.1.2)


def test_connect_reserved_flag_bit() -> None:
    assert_malformed(frame(0x10, connect_body(0x03, s("c"))), r"reserved bit 0.*3\.1\.2\.3")


def test_connect_password_without_username() -> None:
    data = frame(0x10, connect_body(0x42, s("c") + s(b"pw")))
    assert_malformed(data, r"password needs a user name.*3\.1\.2\.9")


def test_connect_will_qos_3() -> None:
    data = frame(0x10, connect_body(0x1E, s("c") + s("w") + s(b"")))
    assert_malformed(data, r"will QoS 3.*3\.1\.2\.6")


@pytest.mark.parametrize("flags", [0x0A, 0x12, 0x22])
def test_connect_will_qos_or_retain_without_will(flags: int) -> None:
    assert_malformed(frame(0x10, connect_body(flags, s("c"))), r"without a will.*3\.1\.2\.6")


def test_connect_will_topic_with_wildcard() -> None:
    data = frame(0x10, connect_body(0x06, s("c") + s("w/#") + s(b"")))
    assert_malformed(data, r"wildcard.*3\.3\.2\.1")


@pytest.mark.parametrize("name", [b"MQTX", b"mqtt", b"MQIsdP", b""])
def test_connect_protocol_name(name: bytes) -> None:
    assert_malformed(frame(0x10, connect_body(0x02, s("c"), name=name)), r"3\.1\.2\.1")


# ---------------------------------------------------------------------------------------------
# Encoder refusals: the writer never produces a frame the reader would reject


@pytest.mark.parametrize(
    "packet",
    [
        Publish("t", b"", qos=1, packet_id=0),
        Publish("t", b"", qos=2, packet_id=None),
        Publish("t", b"", qos=1, packet_id=0x10000),
        Publish("t", b"", qos=3, packet_id=1),
        Publish("t", b"", qos=0, dup=True),
        Puback(0),
        Pubrel(0x10000),
        Subscribe(0, [("t", 0)]),
        Subscribe(1, []),
        Subscribe(1, [("t", 3)]),
        Suback(1, []),
        Suback(1, [3]),
        Suback(0, [0]),
        Unsubscribe(1, []),
        Connack(False, 6),
        Connect("c", username=None, password=b"pw"),
        Connect("c", keep_alive=0x10000),
        Connect("c", keep_alive=-1),
        Connect("c", will=Will("w", b"", qos=3)),
        Connect("c" * 24, protocol_level=V3),
        Connect("", protocol_level=V3),
    ],
    ids=repr,
)
def test_encoder_refuses_invalid_packets(packet: object) -> None:
    with pytest.raises(ValueError):
        encode(packet)  # type: ignore[arg-type]


@pytest.mark.parametrize("topic", ["a/+", "#", "", "a\x00b"])
def test_encoder_refuses_invalid_publish_topic(topic: str) -> None:
    with pytest.raises(MalformedPacket, match=r"section (3\.3\.2\.1|4\.7\.3|1\.5\.3)"):
        encode(Publish(topic, b"x"))


@pytest.mark.parametrize(
    "packet",
    [
        Connect("c\x00"),
        Connect("c", username="u\x00"),
        Connect("\ud800"),
    ],
    ids=repr,
)
def test_encoder_refuses_strings_the_reader_rejects(packet: Connect) -> None:
    with pytest.raises(ValueError, match=r"1\.5\.3|surrogate"):
        encode(packet)


def test_encoder_refuses_too_long_strings() -> None:
    with pytest.raises(ValueError, match="65535"):
        encode(Connect("c" * 65536))
    with pytest.raises(ValueError, match="65535"):
        encode(Connect("c", username="u", password=b"p" * 65536))
    assert len(encode(Connect("c" * 65535))) == 1 + 3 + 10 + 2 + 65535


def test_encode_publish_refuses_qos_3_and_dup_on_qos_0() -> None:
    with pytest.raises(ValueError, match=r"3\.3\.1\.2"):
        encode_publish("t", b"", qos=3, packet_id=1)
    with pytest.raises(ValueError, match=r"3\.3\.1\.1"):
        encode_publish("t", b"", qos=0, dup=True)


# ---------------------------------------------------------------------------------------------
# Topic names and filters (section 4.7)


@pytest.mark.parametrize(
    "topic", ["a", "/", "a//b", "$SYS/x", " ", "température/ü/日本", "a" * 65535]
)
def test_valid_topic_names(topic: str) -> None:
    assert validate_topic_name(topic) == topic


def test_topic_name_length_counts_utf8_bytes() -> None:
    with pytest.raises(MalformedPacket, match=r"65535 bytes.*1\.5\.3"):
        validate_topic_name("é" * 32768)  # 32768 characters, 65536 bytes
    assert validate_topic_name("é" * 32767) == "é" * 32767


@pytest.mark.parametrize("topic_filter", ["#", "+", "+/+", "a/#", "/#", "a/+/b", "+/#", "$SYS/#"])
def test_valid_topic_filters(topic_filter: str) -> None:
    assert validate_topic_filter(topic_filter) == topic_filter


@pytest.mark.parametrize(
    ("topic_filter", "topic", "expected"),
    [
        ("sport/tennis/player1/#", "sport/tennis/player1", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
        ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
        ("sport/#", "sport", True),
        ("sport/tennis/+", "sport/tennis/player1", True),
        ("sport/tennis/+", "sport/tennis/player1/ranking", False),
        ("sport/+", "sport", False),
        ("sport/+", "sport/", True),
        ("+/+", "/finance", True),
        ("/+", "/finance", True),
        ("+", "/finance", False),
        ("#", "$SYS/x", False),
        ("+/monitor/Clients", "$SYS/monitor/Clients", False),
        ("$SYS/#", "$SYS/monitor/Clients", True),
        ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
        ("a/b", "a/b", True),
        ("a/b", "a/B", False),
        ("$share/g/a/+", "a/b", True),
    ],
)
def test_topic_matches_spec_examples(topic_filter: str, topic: str, expected: bool) -> None:
    assert topic_matches(topic_filter, topic) is expected
