"""MQTT 5.0 packets that break a rule: each malformed frame raises MalformedFrame citing its
section, through the stream decoder and ``decode_packet``; each packet the caller asks for that
breaks one raises InvalidArgument (or InvalidTopic). On 3.1 / 3.1.1 AUTH and every MQTT 5.0
field are refused. Also: the protocol level parser, the Subscription Options helper, the
decoder's caches, and a bounded fuzz of the level-5 decoder."""

from __future__ import annotations

import random
import re
from typing import cast

import pytest

from connector.mqtt.decode import PROPERTIES_CACHE_SIZE, TOPIC_CACHE_SIZE, decode_packet, trim_cache
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import (
    InvalidArgument,
    InvalidTopic,
    LocalProtocolError,
    MalformedFrame,
    MalformedPacket,
)
from connector.mqtt.fields import decode_remaining_length
from connector.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
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
from connector.mqtt.properties import Properties
from connector.mqtt.reasons import reason_allowed
from connector.mqtt.receive_buffer import ReceiveBuffer
from tests.fuzz.decoder_target import cites_rule
from tests.fuzz.test_fuzz_targets import mutations

V3 = ProtocolLevel.MQTT_3_1
V4 = ProtocolLevel.MQTT_3_1_1
V5 = ProtocolLevel.MQTT_5


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def frame(first: int, body: str) -> bytes:
    data = h(body)
    assert len(data) < 128
    return bytes((first, len(data))) + data


def assert_malformed(data: bytes, pattern: str, section: str, level: int = V5) -> None:
    """``data`` (one frame) is refused by both decoding paths, the message matching
    ``pattern`` and citing ``section``."""
    with pytest.raises(MalformedFrame) as stream_info:
        ReceiveBuffer(level).feed(data)
    texts = [str(stream_info.value)]
    parsed = decode_remaining_length(data, 1)
    if parsed is not None and parsed[0] + parsed[1] == len(data):
        with pytest.raises(MalformedFrame) as direct_info:
            decode_packet(data[0], data[parsed[1] :], level)
        texts.append(str(direct_info.value))
    for text in texts:
        assert re.search(pattern, text), text
        assert f"section {section}" in text, text


def assert_refused(packet: Packet, pattern: str, section: str, level: int = V5) -> None:
    with pytest.raises(InvalidArgument) as info:
        encode(packet, level)
    assert isinstance(info.value, LocalProtocolError)
    text = str(info.value)
    assert re.search(pattern, text), text
    assert f"section {section}" in text, text


# ---------------------------------------------------------------------------------------------
# Malformed at level 5

MALFORMED = [
    # PUBLISH (section 3.3)
    (frame(0x30, "00 00 00 68 69"), r"zero-length topic name needs a Topic Alias", "3.3.2.1"),
    (frame(0x30, "00 00 03 03 00 00 68"), r"zero-length topic name needs a Topic Alias", "3.3.2.1"),
    (frame(0x30, "00 01 74"), r"property length runs past the end", "2.2.2.1"),
    (frame(0x32, "00 01 74 00 01 05 03 00 01"), r"runs past the end of the packet", "2.2.2.1"),
    (frame(0x30, "00 01 74 02 1F 00"), r"Reason String .* not allowed in PUBLISH", "2.2.2.2"),
    (frame(0x30, "00 01 74 03 23 00 00"), r"Topic Alias 0 is a Protocol Error", "3.3.2.3.4"),
    (frame(0x30, "00 01 74 02 01 02"), r"Payload Format Indicator 2", "3.3.2.3.2"),
    (frame(0x30, "00 01 74 02 0B 00"), r"Subscription Identifier 0", "3.3.2.3.8"),
    (frame(0x30, "00 01 74 04 03 00 01 00"), r"Content Type contains U\+0000", "1.5.4"),
    (frame(0x30, "00 01 74 80 00 68"), r"property length is not encoded in the fewest", "1.5.5"),
    (frame(0x30, "00 01 74 02 80 00"), r"identifier is not encoded in the fewest", "1.5.5"),
    (frame(0x36, "00 01 74 00 01 00"), r"QoS 3", "3.3.1.2"),
    (frame(0x32, "00 01 74 00 00 00"), r"packet identifier 0", "2.3.1"),
    # PUBACK, PUBREC, PUBREL, PUBCOMP (sections 3.4-3.7)
    (frame(0x40, "00"), r"remaining length 2 or more, got 1", "3.4.2"),
    (frame(0x40, "00 00"), r"packet identifier 0", "2.3.1"),
    (frame(0x40, "00 01 92"), r"PUBACK reason code 0x92", "3.4.2.1"),
    (frame(0x50, "00 01 92"), r"PUBREC reason code 0x92", "3.5.2.1"),
    (frame(0x62, "00 01 10"), r"PUBREL reason code 0x10", "3.6.2.1"),
    (frame(0x70, "00 01 80"), r"PUBCOMP reason code 0x80", "3.7.2.1"),
    (frame(0x40, "00 01 00 03 1F 00"), r"property length 3 runs past the end of the", "2.2.2.1"),
    (frame(0x40, "00 01 00 02 1F 00 05"), r"runs past the end of the properties", "2.2.2.1"),
    (frame(0x40, "00 01 00 02 03 00"), r"Content Type .* not allowed in PUBACK", "2.2.2.2"),
    (frame(0x40, "00 01 00 00 FF"), r"unexpected bytes", "2.2.3"),
    (frame(0x60, "00 01"), r"flags 0b0000", "2.2.2"),
    # CONNACK (section 3.2)
    (frame(0x20, "00 00"), r"property length runs past the end", "2.2.2.1"),
    (frame(0x20, "02 00 00"), r"bits 7-1 are reserved", "3.2.2.1"),
    (frame(0x20, "01 80 00"), r"non-zero reason code must have session present 0", "3.2.2.1.1"),
    (frame(0x20, "00 05 00"), r"CONNACK reason code 0x05", "3.2.2.2"),
    (frame(0x20, "00 8B 00"), r"CONNACK reason code 0x8B", "3.2.2.2"),
    (frame(0x20, "00 00 02 24 02"), r"Maximum QoS 2", "3.2.2.3.4"),
    (frame(0x20, "00 00 03 21 00 00"), r"Receive Maximum 0", "3.2.2.3.3"),
    (frame(0x20, "00 00 05 27 00 00 00 00"), r"Maximum Packet Size 0", "3.2.2.3.6"),
    (frame(0x20, "00 00 02 25 07"), r"Retain Available 7", "3.2.2.3.5"),
    # SUBSCRIBE (section 3.8)
    (frame(0x82, "00 01 00 00 01 61 40"), r"bits 6 and 7 are reserved", "3.8.3.1"),
    (frame(0x82, "00 01 00 00 01 61 80"), r"bits 6 and 7 are reserved", "3.8.3.1"),
    (frame(0x82, "00 01 00 00 01 61 03"), r"maximum QoS 3", "3.8.3.1"),
    (frame(0x82, "00 01 00 00 01 61 30"), r"Retain Handling 3", "3.8.3.1"),
    (
        frame(0x82, "00 01 00 00 0A 24 73 68 61 72 65 2F 67 2F 74 04"),
        r"No Local set on the shared subscription",
        "3.8.3.1",
    ),
    (
        frame(0x82, "00 01 00 00 08 24 73 68 61 72 65 2F 67 00"),
        r"shared subscription .* must be \$share/<ShareName>/<filter>",
        "4.8.2",
    ),
    (
        frame(0x82, "00 01 00 00 0A 24 73 68 61 72 65 2F 2B 2F 74 00"),
        r"ShareName",
        "4.8.2",
    ),
    (frame(0x82, "00 01 00"), r"at least one topic filter", "3.8.3"),
    (
        frame(0x82, "00 01 04 0B 01 0B 02 00 01 61 00"),
        r"Subscription Identifier appears",
        "2.2.2.2",
    ),
    (frame(0x82, "00 01 02 0B 00 00 01 61 00"), r"Subscription Identifier 0", "3.8.2.1.2"),
    (frame(0x82, "00 01 00 00 01 61"), r"subscription options runs past", "2.2.3"),
    # SUBACK (section 3.9)
    (frame(0x90, "00 01 00"), r"at least one reason code", "3.9.3"),
    (frame(0x90, "00 01 00 03"), r"SUBACK reason code 0x03", "3.9.3"),
    (frame(0x90, "00 01 00 11"), r"SUBACK reason code 0x11", "3.9.3"),
    # UNSUBSCRIBE (section 3.10)
    (frame(0xA2, "00 01 00"), r"at least one topic filter", "3.10.3"),
    (frame(0xA2, "00 01 00 00 07 24 73 68 61 72 65 2F"), r"ShareName", "4.8.2"),
    # UNSUBACK (section 3.11)
    (frame(0xB0, "00 01"), r"property length runs past the end", "2.2.2.1"),
    (frame(0xB0, "00 01 00"), r"at least one reason code", "3.11.3"),
    (frame(0xB0, "00 01 00 01"), r"UNSUBACK reason code 0x01", "3.11.3"),
    # DISCONNECT (section 3.14)
    (frame(0xE0, "84"), r"DISCONNECT reason code 0x84", "3.14.2.1"),
    (frame(0xE0, "00 02 1F 00"), r"runs past the end of the properties", "2.2.2.1"),
    (frame(0xE0, "00 02 13 00"), r"Server Keep Alive .* not allowed in DISCONNECT", "2.2.2.2"),
    (frame(0xE2, ""), r"flags 0b0010", "2.2.2"),
    # AUTH (section 3.15)
    (frame(0xF0, "18"), r"property length runs past the end", "2.2.2.1"),
    (frame(0xF0, "01 00"), r"AUTH reason code 0x01", "3.15.2.1"),
    (frame(0xF0, "80 00"), r"AUTH reason code 0x80", "3.15.2.1"),
    (frame(0xF0, "18 02 23 01"), r"Topic Alias .* not allowed in AUTH", "2.2.2.2"),
    (frame(0xF1, ""), r"AUTH has flags 0b0001", "2.2.2"),
    # PINGREQ, PINGRESP (sections 3.12, 3.13)
    (frame(0xC0, "00"), r"remaining length 0", "3.12.1"),
    # CONNECT (section 3.1): properties and Will Properties
    (
        frame(0x10, "00 06 4D 51 49 73 64 70 05 02 00 3C 00 00 01 63"),
        r"MQTT 5\.0 uses 'MQTT'",
        "3.1.2.1",
    ),
    (
        frame(0x10, "00 04 4D 51 54 54 05 02 00 3C 02 18 00 00 01 63"),
        r"Will Delay Interval .* not allowed in CONNECT",
        "2.2.2.2",
    ),
    (
        frame(0x10, "00 04 4D 51 54 54 05 06 00 3C 00 00 01 63 02 11 00 00 01 74 00 00"),
        r"Session Expiry Interval .* not allowed in Will Properties",
        "2.2.2.2",
    ),
    (
        frame(0x10, "00 04 4D 51 54 54 05 02 00 3C 02 17 05 00 01 63"),
        r"Request Problem Information 5",
        "3.1.2.11.7",
    ),
    (
        frame(0x10, "00 04 4D 51 54 54 06 02 00 3C 00 00 01 63"),
        r"protocol level 6",
        "3.1.2.2",
    ),
]


@pytest.mark.parametrize(("data", "pattern", "section"), MALFORMED)
def test_malformed_v5_frames(data: bytes, pattern: str, section: str) -> None:
    assert_malformed(data, pattern, section)


def test_every_v5_message_cites_a_rule_as_the_fuzzer_expects() -> None:
    for data, _, _ in MALFORMED:
        with pytest.raises(MalformedPacket) as info:
            ReceiveBuffer(V5).feed(data)
        assert cites_rule(str(info.value)), str(info.value)


@pytest.mark.parametrize(
    "data",
    ["30 85 00  00 01 74 00 68", "40 82 00  00 01", "40 82 80 00  00 01", "E0 80 00"],
)
def test_remaining_length_in_more_bytes_than_needed(data: str) -> None:
    """MQTT 5.0 section 1.5.5: a Variable Byte Integer uses the fewest bytes; the Remaining
    Length is one (section 2.1.4). Only the stream decoder sees it: ``decode_packet`` gets the
    body alone."""
    with pytest.raises(MalformedFrame) as info:
        ReceiveBuffer(V5).feed(h(data))
    assert "remaining length is not encoded in the fewest bytes" in str(info.value)
    assert "MQTT 5.0 section 1.5.5" in str(info.value)
    # In pieces: the length is complete before the body.
    decoder = ReceiveBuffer(V5)
    with pytest.raises(MalformedFrame, match=r"fewest bytes"):
        for i in range(len(h(data))):
            decoder.feed(h(data)[i : i + 1])


def test_non_minimal_remaining_length_is_accepted_below_level_5() -> None:
    """3.1.1 (section 2.2.3) does not require the fewest bytes: unchanged there."""
    assert ReceiveBuffer(V4).feed(h("40 82 00 00 01")) == [Puback(1)]
    assert ReceiveBuffer(V4).feed(h("30 85 00 00 01 74 68 69")) == [Publish("t", b"hi")]


def test_a_bad_first_byte_is_refused_before_the_frame_is_complete() -> None:
    with pytest.raises(MalformedFrame, match=r"AUTH has flags"):
        ReceiveBuffer(V5).feed(h("F1 05 00"))
    assert ReceiveBuffer(V5).feed(h("F0 05 18")) == []  # AUTH waits for the rest at level 5


# ---------------------------------------------------------------------------------------------
# Refused to send at level 5


@pytest.mark.parametrize(
    ("packet", "pattern", "section"),
    [
        (Puback(1, 0x92), r"PUBACK reason code 0x92", "3.4.2.1"),
        (Pubrec(1, 0x04), r"PUBREC reason code 0x04", "3.5.2.1"),
        (Pubrel(1, 0x80), r"PUBREL reason code 0x80", "3.6.2.1"),
        (Pubcomp(1, 0x10), r"PUBCOMP reason code 0x10", "3.7.2.1"),
        (Connack(False, 5), r"CONNACK reason code 0x05", "3.2.2.2"),
        (Connack(True, 0x80), r"session present 0", "3.2.2.1.1"),
        (Suback(1, [0x03]), r"SUBACK reason code 0x03", "3.9.3"),
        (Suback(1, []), r"at least one reason code", "3.9.3"),
        (Unsuback(1, []), r"at least one reason code", "3.11.3"),
        (Unsuback(1, [0x10]), r"UNSUBACK reason code 0x10", "3.11.3"),
        (Disconnect(0x88), r"DISCONNECT reason code 0x88", "3.14.2.1"),
        (Auth(0x80), r"AUTH reason code 0x80", "3.15.2.1"),
        (Auth(0x18, Properties(topic_alias=1)), r"Topic Alias .* not allowed in AUTH", "2.2.2.2"),
        (Subscribe(1, [("a", 0x40)]), r"bits 6 and 7 are reserved", "3.8.3.1"),
        (Subscribe(1, [("a", 0x03)]), r"maximum QoS 3", "3.8.3.1"),
        (Subscribe(1, [("a", 0x30)]), r"Retain Handling 3", "3.8.3.1"),
        (Subscribe(1, [("a", 0x100)]), r"not a byte", "3.8.3.1"),
        (Subscribe(1, [("$share/g/a", 0x04)]), r"No Local set on the shared", "3.8.3.1"),
        (
            Subscribe(1, [("a", 0)], Properties(subscription_identifiers=[1, 2])),
            r"only once",
            "2.2.2.2",
        ),
        (
            Publish("t", b"", properties=Properties(reason_string="x")),
            r"Reason String .* not allowed in PUBLISH",
            "2.2.2.2",
        ),
        (
            Connect(
                "c", protocol_level=V5, will=Will("w", b"", properties=Properties(topic_alias=1))
            ),
            r"Topic Alias .* not allowed in Will Properties",
            "2.2.2.2",
        ),
    ],
)
def test_refused_to_send_at_level_5(packet: Packet, pattern: str, section: str) -> None:
    assert_refused(packet, pattern, section)


@pytest.mark.parametrize(
    ("packet", "pattern"),
    [
        (Publish("", b"x"), r"zero-length topic name needs a Topic Alias"),
        (Publish("", b"x", properties=Properties(content_type="t")), r"needs a Topic Alias"),
        (Subscribe(1, [("$share//a", 0)]), r"ShareName"),
        (Subscribe(1, [("$share/g", 0)]), r"ShareName"),
        (Unsubscribe(1, ["$share//a"]), r"ShareName"),
        (Subscribe(1, [("a/#/b", 0)]), r"'#' must be the whole last level"),
    ],
)
def test_refused_topics_at_level_5(packet: Packet, pattern: str) -> None:
    with pytest.raises(InvalidTopic, match=pattern) as info:
        encode(packet, V5)
    assert cites_rule(str(info.value)), str(info.value)


def test_encode_publish_refuses_an_empty_topic_without_alias() -> None:
    with pytest.raises(InvalidTopic, match=r"MQTT 5\.0 section 3\.3\.2\.1"):
        encode_publish(b"", b"x", level=V5)


# ---------------------------------------------------------------------------------------------
# 3.1 and 3.1.1 refuse AUTH and the MQTT 5.0 fields


@pytest.mark.parametrize("level", [V3, V4])
@pytest.mark.parametrize(
    ("packet", "what", "section"),
    [
        (Auth(), "AUTH packets", "3.15"),
        (Auth(0x18), "AUTH packets", "3.15"),
        (Publish("t", b"", properties=Properties()), "PUBLISH properties", "3.3.2.3"),
        (Puback(1, 0x10), "PUBACK reason codes", "2.4"),
        (Pubrec(1, properties=Properties()), "PUBREC properties", "2.2.2"),
        (Pubrel(1, 0x92), "PUBREL reason codes", "2.4"),
        (Pubcomp(1, properties=Properties(reason_string="x")), "PUBCOMP properties", "2.2.2"),
        (Connack(False, 0, Properties()), "CONNACK properties", "2.2.2"),
        (Subscribe(1, [("a", 0)], Properties()), "SUBSCRIBE properties", "2.2.2"),
        (Suback(1, [0], Properties()), "SUBACK properties", "2.2.2"),
        (Unsubscribe(1, ["a"], Properties()), "UNSUBSCRIBE properties", "2.2.2"),
        (Unsuback(1, [0]), "UNSUBACK reason codes", "3.11.3"),
        (Unsuback(1, properties=Properties()), "UNSUBACK properties", "2.2.2"),
        (Disconnect(0x04), "DISCONNECT reason codes", "2.4"),
        (Disconnect(properties=Properties()), "DISCONNECT properties", "2.2.2"),
    ],
)
def test_v5_fields_refused_below_level_5(
    packet: Packet, what: str, section: str, level: int
) -> None:
    version = "3.1" if level == V3 else "3.1.1"
    assert_refused(
        packet, f"{what} exist only in MQTT 5.0 .* uses MQTT {re.escape(version)}$", section, level
    )


@pytest.mark.parametrize("level", [V3, V4])
def test_connect_v5_fields_refused_below_level_5(level: int) -> None:
    with pytest.raises(InvalidArgument, match=r"CONNECT properties exist only in MQTT 5\.0"):
        encode(Connect("c", protocol_level=level, properties=Properties()))
    will = Will("w", b"", properties=Properties())
    with pytest.raises(InvalidArgument, match=r"Will Properties exist only in MQTT 5\.0"):
        encode(Connect("c", protocol_level=level, will=will))
    with pytest.raises(InvalidArgument, match=r"password needs a user name"):
        encode(Connect("c", protocol_level=level, password=b"p"))


def test_encode_publish_refuses_properties_below_level_5() -> None:
    with pytest.raises(InvalidArgument, match=r"PUBLISH properties exist only in MQTT 5\.0"):
        encode_publish("t", b"", properties=Properties(content_type="x"))


@pytest.mark.parametrize("level", [V3, V4])
@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        (h("F0 00"), r"packet type 15 is reserved \(section 2\.2\.1\)"),
        (h("F0 02 18 00"), r"packet type 15 is reserved \(section 2\.2\.1\)"),
        (h("40 03 00 01 10"), r"PUBACK must have remaining length 2, got 3"),
        (h("40 04 00 01 00 00"), r"PUBACK must have remaining length 2, got 4"),
        (h("20 03 00 00 00"), r"CONNACK must have remaining length 2, got 3"),
        (h("E0 01 04"), r"DISCONNECT must have remaining length 0, got 1"),
        (h("B0 03 00 01 00"), r"UNSUBACK must have remaining length 2, got 3"),
        (h("30 06 00 01 74 00 68 69"), r"ZZZ"),  # no properties: the 0x00 is payload
    ],
)
def test_v5_frames_refused_below_level_5(data: bytes, pattern: str, level: int) -> None:
    if pattern == "ZZZ":
        assert ReceiveBuffer(level).feed(data) == [Publish("t", b"\x00hi")]
        return
    with pytest.raises(MalformedFrame, match=pattern):
        ReceiveBuffer(level).feed(data)
    with pytest.raises(MalformedFrame, match=pattern):
        decode_packet(data[0], data[2:], level)


# ---------------------------------------------------------------------------------------------
# ProtocolLevel and Subscription Options


def test_protocol_level_5() -> None:
    assert ProtocolLevel.MQTT_5 == 5
    assert ProtocolLevel.MQTT_5.protocol_name == "MQTT"
    assert str(ProtocolLevel.MQTT_5) == "5"
    assert ProtocolLevel.parse("5") is ProtocolLevel.MQTT_5
    assert ProtocolLevel.parse(" 5.0 ") is ProtocolLevel.MQTT_5
    assert ProtocolLevel.parse("3.1.1") is ProtocolLevel.MQTT_3_1_1
    assert ProtocolLevel.parse("3") is ProtocolLevel.MQTT_3_1
    with pytest.raises(InvalidArgument, match=r"'6': use 3\.1, 3\.1\.1 or 5$"):
        ProtocolLevel.parse("6")


def test_subscription_options() -> None:
    assert subscription_options(0) == 0x00
    assert subscription_options(2) == 0x02
    assert subscription_options(1, no_local=True) == 0x05
    assert subscription_options(0, retain_as_published=True) == 0x08
    assert subscription_options(1, retain_handling=1) == 0x11
    assert subscription_options(2, True, True, 2) == 0x2E


def test_subscription_options_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"subscription QoS.*MQTT 5\.0 section 3\.8\.3\.1"):
        subscription_options(3)
    with pytest.raises(InvalidArgument, match=r"Retain Handling.*MQTT 5\.0 section 3\.8\.3\.1"):
        subscription_options(0, retain_handling=3)


def test_options_byte_at_level_4_is_still_only_a_qos() -> None:
    with pytest.raises(InvalidArgument, match=r"requested QoS must be 0\.\.2"):
        encode(Subscribe(1, [("a", subscription_options(1, no_local=True))]), V4)


# ---------------------------------------------------------------------------------------------
# The decoder's caches


def _publishes(topics: list[str], level: int = V4, props: Properties | None = None) -> bytes:
    return b"".join(
        encode_publish(t, b"p", 1, i % 0xFFFF + 1, properties=props, level=level)
        for i, t in enumerate(topics)
    )


def _feed_in_reads(decoder: ReceiveBuffer, data: bytes, size: int = 4096) -> list[Packet]:
    out: list[Packet] = []
    for i in range(0, len(data), size):
        out += decoder.feed(data[i : i + size])
    return out


@pytest.mark.parametrize("count", [TOPIC_CACHE_SIZE, TOPIC_CACHE_SIZE + 1, 10_000])
def test_cycling_topics_keep_the_cache_full_not_empty(count: int) -> None:
    names = [f"t/{i}" for i in range(count)]
    decoder = ReceiveBuffer()
    packets = _feed_in_reads(decoder, _publishes(names * 2))
    assert [p.topic for p in packets if isinstance(p, Publish)] == names * 2
    cache = decoder._topics
    assert len(cache) == min(count, TOPIC_CACHE_SIZE)  # full, never emptied
    if count == TOPIC_CACHE_SIZE + 1:
        # One topic too many: the ones cached in the first round are all still there.
        assert all(f"t/{i}".encode() in cache for i in range(TOPIC_CACHE_SIZE))


def test_a_stream_whose_topics_change_gets_the_new_ones_cached() -> None:
    decoder = ReceiveBuffer()
    old = [f"old/{i}" for i in range(TOPIC_CACHE_SIZE)]
    new = [f"new/{i}" for i in range(TOPIC_CACHE_SIZE // 2)]
    _feed_in_reads(decoder, _publishes(old))
    _feed_in_reads(decoder, _publishes(new * 40))
    cached_new = sum(1 for key in decoder._topics if key.startswith(b"new/"))
    assert cached_new == len(new)
    assert len(decoder._topics) <= TOPIC_CACHE_SIZE


def test_trim_cache_drops_the_newest_then_rotates_the_oldest() -> None:
    cache = {bytes([i]): i for i in range(42)}
    assert trim_cache(cache, 40, 0) == 2  # two newcomers turned away, counted
    assert list(cache) == [bytes([i]) for i in range(40)]
    cache.update({b"x": 0, b"y": 0})
    # A quarter of the size turned away since the last rotation: the oldest eighth goes, with
    # the overflow, and the newcomers stay.
    assert trim_cache(cache, 40, 8) == 0
    assert list(cache) == [bytes([i]) for i in range(7, 40)] + [b"x", b"y"]
    assert trim_cache(cache, 40, 5) == 5  # not over the size: nothing to do


def test_equal_property_blocks_share_one_decoded_properties() -> None:
    props = Properties(content_type="application/json", user_properties=[("k", "v")])
    decoder = ReceiveBuffer(V5)
    packets = decoder.feed(_publishes(["a", "b", "a"], V5, props))
    assert [p.properties for p in packets if isinstance(p, Publish)] == [props] * 3
    first, second, _ = (p for p in packets if isinstance(p, Publish))
    assert first.properties is second.properties  # one decode, shared (read-only)
    [alone] = [decode_packet(f[0], f[2:], V5) for f in [_publishes(["a"], V5, props)]]
    assert isinstance(alone, Publish) and alone.properties == props
    assert alone.properties is not first.properties  # decode_packet keeps no cache


def test_property_block_cache_is_bounded() -> None:
    decoder = ReceiveBuffer(V5)
    count = PROPERTIES_CACHE_SIZE + 500
    data = b"".join(
        encode_publish(
            "t", b"", 1, i % 0xFFFF + 1, properties=Properties(topic_alias=i + 1), level=V5
        )
        for i in range(count)
    )
    packets = _feed_in_reads(decoder, data)
    aliases = [p.properties.topic_alias for p in packets if isinstance(p, Publish) and p.properties]
    assert aliases == list(range(1, count + 1))
    assert len(decoder._blocks) == PROPERTIES_CACHE_SIZE


def test_large_property_blocks_are_decoded_each_time() -> None:
    props = Properties(content_type="x" * 200)
    packets = ReceiveBuffer(V5).feed(_publishes(["a", "a"], V5, props))
    one, two = (p for p in packets if isinstance(p, Publish))
    assert one.properties == two.properties == props
    assert one.properties is not two.properties


# ---------------------------------------------------------------------------------------------
# Fuzz: mutated level-5 frames


def _seeds() -> list[bytes]:
    every = Properties(
        payload_format_indicator=1,
        message_expiry_interval=60,
        content_type="c",
        response_topic="r",
        correlation_data=b"\x00",
        subscription_identifiers=[1, 200],
        topic_alias=3,
        user_properties=[("k", "v")],
    )
    packets: list[Packet] = [
        Connect(
            "c",
            username="u",
            password=b"p",
            will=Will("w", b"x", 1, True, Properties(will_delay_interval=1)),
            protocol_level=V5,
            properties=Properties(session_expiry_interval=9, receive_maximum=5),
        ),
        Connack(True, 0, Properties(maximum_qos=1, retain_available=0, reason_string="ok")),
        Connack(False, 0x9C, Properties(server_reference="s")),
        Publish("a/b", b"payload", 1, packet_id=7, properties=every),
        Publish("", b"", 0, properties=Properties(topic_alias=1)),
        Publish("t", b"x" * 150, 2, dup=True, packet_id=0xFFFF),
        Puback(1),
        Puback(2, 0x10),
        Pubrec(3, 0x80, Properties(reason_string="r")),
        Pubrel(4, 0x92),
        Pubcomp(5),
        Subscribe(6, [("a/+", 0x2D), ("$share/g/#", 2)], Properties(subscription_identifiers=[9])),
        Suback(6, [1, 0x80], Properties(user_properties=[("a", "b")])),
        Unsubscribe(7, ["a/+"]),
        Unsuback(7, [0, 0x11]),
        Disconnect(),
        Disconnect(0x04, Properties(reason_string="bye")),
        Auth(0x18, Properties(authentication_method="m", authentication_data=b"d")),
    ]
    frames = [encode(packet, V5) for packet in packets]
    return [*frames, b"".join(frames), *(data for data, _, _ in MALFORMED[:20])]


def _decode_all(data: bytes, cuts: int) -> tuple[list[Packet], str | None]:
    decoder = ReceiveBuffer(V5)
    rng = random.Random(cuts)
    out: list[Packet] = []
    pos = 0
    try:
        while pos < len(data):
            step = rng.choice((1, 2, 3, 7, 64, 1 << 16)) if cuts else len(data)
            out += decoder.feed(data[pos : pos + step])
            pos += step
    except MalformedFrame as exc:
        out += cast("list[Packet]", list(exc.packets))
        assert cites_rule(str(exc)), str(exc)
        return out, type(exc).__name__
    return out, None


def tolerated_ack_code(packet: object) -> bool:
    """A PUBACK or PUBREC the decoder takes with a success code its table lacks."""
    return isinstance(packet, Puback | Pubrec) and not reason_allowed(
        packet.reason_code, packet.type
    )


def test_mutated_v5_frames_raise_only_malformed_packets_and_round_trip() -> None:
    seeds = _seeds()
    for data in [*seeds, *mutations(seeds, 3000, seed=5)]:
        whole, whole_error = _decode_all(data, 0)
        split, split_error = _decode_all(data, len(data))
        assert split == whole, data.hex()
        assert (whole_error is None) == (split_error is None), data.hex()
        for packet in whole:
            if tolerated_ack_code(packet):
                continue  # taken from a broker, never sent (decode._TOLERATED_ACK_CODES)
            assert ReceiveBuffer(V5).feed(encode(packet, V5)) == [packet], (data.hex(), packet)
