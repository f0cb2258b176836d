"""MQTT 5.0 properties (MQTT 5.0 section 2.2.2): the rules of table 2-4 and of each property's
section, on both sides. Every refusal is checked for its exception type and for the section
its message cites; the reader's verdicts are MalformedFrame (the peer's fault), the writer's
InvalidArgument (the caller's)."""

from __future__ import annotations

import dataclasses
import re
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connector.mqtt.errors import InvalidArgument, InvalidTopic, LocalProtocolError, MalformedFrame
from connector.mqtt.packets import PacketType
from connector.mqtt.properties import (
    BY_IDENTIFIER,
    PROPERTIES,
    WILL_PROPERTIES,
    Context,
    DataType,
    Properties,
    context_name,
    decode_properties,
    encode_properties,
)

PUBLISH = PacketType.PUBLISH
CONNECT = PacketType.CONNECT
CONNACK = PacketType.CONNACK
SUBSCRIBE = PacketType.SUBSCRIBE


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def block(body: str) -> bytes:
    """A Property Length (one byte) followed by ``body``."""
    data = h(body)
    assert len(data) < 0x80
    return bytes((len(data),)) + data


def read(data: bytes, context: Context = PUBLISH) -> Properties | None:
    props, end = decode_properties(data, 0, len(data), context)
    assert end == len(data)
    return props


def refused(data: bytes, context: Context, pattern: str, section: str) -> None:
    """Reading ``data`` raises MalformedFrame matching ``pattern`` and citing ``section``."""
    with pytest.raises(MalformedFrame) as info:
        decode_properties(data, 0, len(data), context)
    text = str(info.value)
    assert re.search(pattern, text), text
    assert f"section {section}" in text, text


def refused_to_write(props: Properties, context: Context, pattern: str, section: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        encode_properties(props, context)
    assert isinstance(info.value, LocalProtocolError) and isinstance(info.value, ValueError)
    text = str(info.value)
    assert re.search(pattern, text), text
    assert f"section {section}" in text, text


# ---------------------------------------------------------------------------------------------
# The table


def test_27_properties_with_unique_identifiers_and_attributes() -> None:
    assert len(PROPERTIES) == 27
    assert len({s.identifier for s in PROPERTIES}) == 27
    assert [s.identifier for s in PROPERTIES] == sorted(s.identifier for s in PROPERTIES)
    fields = [f.name for f in dataclasses.fields(Properties)]
    assert fields == [s.attribute for s in PROPERTIES]
    assert all(s.identifier < 0x80 for s in PROPERTIES)  # one-byte identifiers on the wire


def test_data_types_of_a_few_properties() -> None:
    assert BY_IDENTIFIER[0x0B].data_type is DataType.VARIABLE_BYTE_INTEGER
    assert BY_IDENTIFIER[0x26].data_type is DataType.UTF8_STRING_PAIR
    assert BY_IDENTIFIER[0x09].data_type is DataType.BINARY_DATA
    assert BY_IDENTIFIER[0x27].data_type is DataType.FOUR_BYTE_INTEGER
    assert BY_IDENTIFIER[0x23].data_type is DataType.TWO_BYTE_INTEGER


def test_will_properties_context() -> None:
    allowed = {s.identifier for s in PROPERTIES if WILL_PROPERTIES in s.sections}
    assert allowed == {0x01, 0x02, 0x03, 0x08, 0x09, 0x18, 0x26}
    assert context_name(WILL_PROPERTIES) == "Will Properties"
    assert context_name(PUBLISH) == "PUBLISH"


# ---------------------------------------------------------------------------------------------
# Reading


def test_property_length_zero_reads_as_none() -> None:
    assert decode_properties(b"\x00rest", 0, 5, PUBLISH) == (None, 1)


def test_properties_read_in_wire_order_with_repeats() -> None:
    data = block(
        "26 00 01 62 00 01 32  03 00 01 74  26 00 01 61 00 01 31  26 00 01 62 00 01 32"
        "  0B 05  0B 81 01"
    )
    props = read(data)
    assert props == Properties(
        content_type="t",
        user_properties=[("b", "2"), ("a", "1"), ("b", "2")],
        subscription_identifiers=[5, 129],
    )


def test_a_property_length_in_two_bytes() -> None:
    body = b"\x1f\x00\x80" + b"r" * 128
    data = b"\x83\x01" + body  # 131 in two bytes
    assert read(data, PacketType.PUBACK) == Properties(reason_string="r" * 128)


def test_read_properties_unset_attributes_read_as_absent() -> None:
    props = read(block("03 00 01 74"))
    assert props is not None
    assert props.reason_string is None  # not a PUBLISH property: left to __getattr__
    assert props.subscription_identifiers == []
    assert props.user_properties == []
    unknown = "no_such_property"
    with pytest.raises(AttributeError):
        getattr(props, unknown)
    assert repr(props) == "Properties(content_type='t')"
    assert dataclasses.replace(props, topic_alias=3) == Properties(content_type="t", topic_alias=3)


@pytest.mark.parametrize(
    ("context", "body", "name"),
    [
        (PUBLISH, "1F 00 01 78", "Reason String"),
        (PUBLISH, "11 00 00 00 01", "Session Expiry Interval"),
        (SUBSCRIBE, "03 00 01 74", "Content Type"),
        (PacketType.PUBACK, "0B 01", "Subscription Identifier"),
        (CONNECT, "18 00 00 00 01", "Will Delay Interval"),
        (WILL_PROPERTIES, "11 00 00 00 01", "Session Expiry Interval"),
        (PacketType.UNSUBSCRIBE, "1F 00 01 78", "Reason String"),
        (PacketType.AUTH, "11 00 00 00 01", "Session Expiry Interval"),
    ],
)
def test_a_property_not_allowed_on_the_packet(context: Context, body: str, name: str) -> None:
    refused(block(body), context, f"{name} .* is not allowed in {context_name(context)}", "2.2.2.2")


@pytest.mark.parametrize(
    ("context", "body", "name"),
    [
        (PUBLISH, "03 00 01 74  03 00 01 75", "Content Type"),
        (PUBLISH, "23 00 01  23 00 01", "Topic Alias"),
        (SUBSCRIBE, "0B 01  0B 02", "Subscription Identifier"),
        (CONNACK, "24 00  24 01", "Maximum QoS"),
        (CONNECT, "11 00 00 00 01  21 00 05  11 00 00 00 01", "Session Expiry Interval"),
    ],
)
def test_a_property_given_twice(context: Context, body: str, name: str) -> None:
    refused(block(body), context, f"{name} appears more than once", "2.2.2.2")


def test_only_user_property_and_publish_subscription_identifier_repeat() -> None:
    assert read(block("0B 01 0B 02")) == Properties(subscription_identifiers=[1, 2])
    assert read(block("26 00 00 00 00  26 00 00 00 00"), CONNECT) == Properties(
        user_properties=[("", ""), ("", "")]
    )


def test_property_length_past_the_packet() -> None:
    data = h("05 03 00 01 74")  # says 5, holds 4
    refused(data, PUBLISH, r"property length 5 runs past the end of the packet", "2.2.2.1")
    refused(b"", PUBLISH, r"property length runs past the end of the packet", "2.2.2.1")


@pytest.mark.parametrize(
    "body",
    [
        "03 00 05 74",  # string longer than the properties
        "03 00",  # string length cut
        "02 00 00 00",  # Four Byte Integer cut
        "23 00",  # Two Byte Integer cut
        "01",  # Byte missing
        "09 00 02 01",  # Binary Data cut
        "26 00 01 61 00 02 62",  # second string of the pair cut
        "26 00 01 61",  # second string of the pair missing
    ],
)
def test_a_property_running_past_the_property_length(body: str) -> None:
    refused(block(body), PUBLISH, r"runs past the end of the properties", "2.2.2.1")


def test_a_variable_byte_integer_property_cut_short() -> None:
    refused(block("0B 81"), PUBLISH, r"runs past the end of the packet", "1.5.5")


@pytest.mark.parametrize(
    ("body", "shown"),
    [("04 00", "0x04"), ("00", "0x00"), ("7F", "0x7F"), ("2B 00", "0x2B"), ("80 01 00", "0x80")],
)
def test_unknown_property_identifier(body: str, shown: str) -> None:
    refused(block(body), PUBLISH, f"unknown property identifier {shown}", "2.2.2.2")


def test_identifier_not_in_the_fewest_bytes() -> None:
    refused(block("83 00 00 01 74"), PUBLISH, r"fewest bytes", "1.5.5")


@pytest.mark.parametrize(
    ("context", "body", "name", "section"),
    [
        (PUBLISH, "01 02", "Payload Format Indicator 2", "3.3.2.3.2"),
        (WILL_PROPERTIES, "01 FF", "Payload Format Indicator 255", "3.1.3.2.3"),
        (CONNECT, "17 02", "Request Problem Information 2", "3.1.2.11.7"),
        (CONNECT, "19 02", "Request Response Information 2", "3.1.2.11.6"),
        (CONNACK, "24 02", "Maximum QoS 2", "3.2.2.3.4"),
        (CONNACK, "25 02", "Retain Available 2", "3.2.2.3.5"),
        (CONNACK, "28 02", "Wildcard Subscription Available 2", "3.2.2.3.11"),
        (CONNACK, "29 02", "Subscription Identifier Available 2", "3.2.2.3.12"),
        (CONNACK, "2A 02", "Shared Subscription Available 2", "3.2.2.3.13"),
    ],
)
def test_byte_properties_must_be_0_or_1(
    context: Context, body: str, name: str, section: str
) -> None:
    refused(block(body), context, f"{name} is a Protocol Error: it must be 0 or 1", section)


@pytest.mark.parametrize(
    ("context", "body", "name", "section"),
    [
        (CONNECT, "21 00 00", "Receive Maximum", "3.1.2.11.3"),
        (CONNACK, "21 00 00", "Receive Maximum", "3.2.2.3.3"),
        (CONNECT, "27 00 00 00 00", "Maximum Packet Size", "3.1.2.11.4"),
        (CONNACK, "27 00 00 00 00", "Maximum Packet Size", "3.2.2.3.6"),
        (PUBLISH, "23 00 00", "Topic Alias", "3.3.2.3.4"),
        (PUBLISH, "0B 00", "Subscription Identifier", "3.3.2.3.8"),
        (SUBSCRIBE, "0B 00", "Subscription Identifier", "3.8.2.1.2"),
    ],
)
def test_zero_is_refused(context: Context, body: str, name: str, section: str) -> None:
    refused(block(body), context, f"{name} 0 is a Protocol Error: 0 is not allowed", section)


def test_subscription_identifier_above_268435455_does_not_fit() -> None:
    refused(block("0B FF FF FF FF 01"), PUBLISH, r"more than 4 bytes", "1.5.5")
    assert read(block("0B FF FF FF 7F")) == Properties(subscription_identifiers=[268_435_455])


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("03 00 02 C3 28", "Content Type is not well-formed UTF-8"),
        ("03 00 03 ED A0 80", "Content Type is not well-formed UTF-8"),  # a surrogate
        ("03 00 02 C0 AF", "Content Type is not well-formed UTF-8"),  # overlong
        ("03 00 02 61 00", "Content Type contains U\\+0000"),
        ("26 00 01 00 00 00", "User Property contains U\\+0000"),
        ("26 00 01 61 00 01 FF", "User Property is not well-formed UTF-8"),
        ("08 00 02 61 00", "Response Topic contains U\\+0000"),
    ],
)
def test_malformed_strings(body: str, what: str) -> None:
    refused(block(body), PUBLISH, what, "1.5.4")


@pytest.mark.parametrize("topic", ["a/+", "#", ""])
def test_response_topic_must_be_a_topic_name(topic: str) -> None:
    raw = topic.encode()
    data = block("08" + len(raw).to_bytes(2, "big").hex() + raw.hex())
    refused(data, PUBLISH, r"Response Topic", "3.3.2.3.5")
    refused(data, WILL_PROPERTIES, r"Response Topic", "3.1.3.2.6")
    with pytest.raises(InvalidTopic, match=r"3\.3\.2\.3\.5"):
        encode_properties(Properties(response_topic=topic), PUBLISH)


# ---------------------------------------------------------------------------------------------
# Writing


def test_none_writes_an_empty_property_length() -> None:
    assert encode_properties(None, PUBLISH) == b"\x00"
    assert encode_properties(Properties(), PacketType.AUTH) == b"\x00"


def test_written_in_identifier_order_user_properties_last() -> None:
    props = Properties(
        user_properties=[("z", "1"), ("a", "2")],
        topic_alias=2,
        content_type="t",
        subscription_identifiers=[7, 3],
    )
    assert encode_properties(props, PUBLISH) == block(
        "03 00 01 74  0B 07  0B 03  23 00 02  26 00 01 7A 00 01 31  26 00 01 61 00 01 32"
    )


def test_a_long_property_block_has_a_two_byte_length() -> None:
    data = encode_properties(Properties(reason_string="x" * 200), PacketType.PUBACK)
    assert data[:2] == h("CB 01")  # 203 = 0x4B + 1 * 128
    assert read(data, PacketType.PUBACK) == Properties(reason_string="x" * 200)


@pytest.mark.parametrize(
    ("context", "props", "name"),
    [
        (PUBLISH, Properties(reason_string="x"), "Reason String"),
        (CONNACK, Properties(topic_alias=1), "Topic Alias"),
        (PacketType.PUBACK, Properties(subscription_identifiers=[1]), "Subscription Identifier"),
        (PacketType.UNSUBSCRIBE, Properties(reason_string="x"), "Reason String"),
        (WILL_PROPERTIES, Properties(session_expiry_interval=1), "Session Expiry Interval"),
        (CONNECT, Properties(will_delay_interval=1), "Will Delay Interval"),
        (PacketType.PINGREQ, Properties(user_properties=[("a", "b")]), "User Property"),
    ],
)
def test_writing_a_property_not_allowed(context: Context, props: Properties, name: str) -> None:
    refused_to_write(props, context, f"{name} .* is not allowed in", "2.2.2.2")


def test_one_subscription_identifier_outside_publish() -> None:
    refused_to_write(
        Properties(subscription_identifiers=[1, 2]), SUBSCRIBE, r"only once", "2.2.2.2"
    )
    assert encode_properties(Properties(subscription_identifiers=[1]), SUBSCRIBE) == block("0B 01")


@pytest.mark.parametrize(
    ("context", "props", "pattern", "section"),
    [
        (PUBLISH, Properties(payload_format_indicator=2), "must be 0 or 1", "3.3.2.3.2"),
        (CONNECT, Properties(request_problem_information=3), "must be 0 or 1", "3.1.2.11.7"),
        (CONNECT, Properties(request_response_information=-1), "must be 0 or 1", "3.1.2.11.6"),
        (CONNACK, Properties(maximum_qos=2), "must be 0 or 1", "3.2.2.3.4"),
        (CONNACK, Properties(retain_available=2), "must be 0 or 1", "3.2.2.3.5"),
        (CONNACK, Properties(shared_subscription_available=2), "must be 0 or 1", "3.2.2.3.13"),
        (CONNECT, Properties(receive_maximum=0), "0 is not allowed", "3.1.2.11.3"),
        (CONNACK, Properties(maximum_packet_size=0), "0 is not allowed", "3.2.2.3.6"),
        (PUBLISH, Properties(topic_alias=0), "0 is not allowed", "3.3.2.3.4"),
        (PUBLISH, Properties(subscription_identifiers=[0]), "0 is not allowed", "3.3.2.3.8"),
        (
            PUBLISH,
            Properties(subscription_identifiers=[268_435_456]),
            "0 is not allowed, it must be in 1..268435455",
            "3.3.2.3.8",
        ),
        (PUBLISH, Properties(topic_alias=0x10000), "1..65535", "3.3.2.3.4"),
        (PUBLISH, Properties(message_expiry_interval=1 << 32), "0..4294967295", "3.3.2.3.3"),
        (CONNACK, Properties(server_keep_alive=-1), "0..65535", "3.2.2.3.14"),
        (
            PUBLISH,
            Properties(message_expiry_interval=cast(int, "60")),
            "must be an integer",
            "3.3.2.3.3",
        ),
    ],
)
def test_writing_a_value_its_section_refuses(
    context: Context, props: Properties, pattern: str, section: str
) -> None:
    refused_to_write(props, context, pattern, section)


@pytest.mark.parametrize(
    ("props", "pattern", "section"),
    [
        (Properties(content_type="a\x00b"), r"Content Type .* contains U\+0000", "1.5.4"),
        (Properties(content_type="\ud800"), r"surrogate", "1.5.4"),
        (Properties(content_type="é" * 40000), r"more than 65535", "1.5.4"),
        (Properties(user_properties=[("a", "\x00")]), r"User Property value", "1.5.4"),
        (
            Properties(user_properties=[cast(tuple[str, str], ("a",))]),
            r"a \(name, value\) pair",
            "1.5.7",
        ),
        (Properties(correlation_data=b"x" * 65536), r"more than 65535", "1.5.6"),
        (Properties(correlation_data=cast(bytes, "text")), r"must be bytes", "1.5.6"),
    ],
)
def test_writing_malformed_strings_and_binary(
    props: Properties, pattern: str, section: str
) -> None:
    refused_to_write(props, PUBLISH, pattern, section)


# ---------------------------------------------------------------------------------------------
# Round trip (Hypothesis)

_CONTEXTS: list[Context] = [*PacketType, WILL_PROPERTIES]
_text = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20)
_topic = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00+#"), min_size=1, max_size=20
)


def _values(spec_id: int) -> st.SearchStrategy[object]:
    spec = BY_IDENTIFIER[spec_id]
    if spec_id == 0x08:
        return _topic
    if spec.data_type is DataType.UTF8_STRING:
        return _text
    if spec.data_type is DataType.BINARY_DATA:
        return st.binary(max_size=40)
    return st.integers(spec.minimum, spec.maximum)


@st.composite
def properties_for(draw: st.DrawFn) -> tuple[Context, Properties]:
    context = draw(st.sampled_from(_CONTEXTS))
    props = Properties()
    for spec in PROPERTIES:
        if context not in spec.sections or not draw(st.booleans()):
            continue
        if spec.identifier == 0x26:
            props.user_properties = draw(st.lists(st.tuples(_text, _text), max_size=4))
        elif spec.identifier == 0x0B:
            count = 3 if context is PUBLISH else 1
            props.subscription_identifiers = draw(
                st.lists(st.integers(1, 268_435_455), min_size=1, max_size=count)
            )
        else:
            setattr(props, spec.attribute, draw(_values(spec.identifier)))
    return context, props


@given(properties_for())
def test_properties_round_trip(case: tuple[Context, Properties]) -> None:
    context, props = case
    data = encode_properties(props, context)
    decoded, end = decode_properties(b"\xaa" + data + b"\xbb", 1, len(data) + 1, context)
    assert end == len(data) + 1
    if props == Properties():
        assert decoded is None and data == b"\x00"
    else:
        assert decoded == props
        assert encode_properties(decoded, context) == data
