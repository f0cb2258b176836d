"""Property-based tests: encode/decode round trips of arbitrary valid packets for both protocol
levels, and fuzzing of the stream decoder with random and mutated input.

The fuzz tests take their example budget from the ``FUZZ_EXAMPLES`` environment variable
(``make fuzz`` sets a large one); the round-trip properties use Hypothesis' default budget.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import cast

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from connector.mqtt.decode import decode_packet
from connector.mqtt.encode import encode
from connector.mqtt.errors import MalformedFrame, MalformedPacket
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

FUZZ_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "2000"))
fuzz_settings = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

LEVELS = st.sampled_from([ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1])

# ---------------------------------------------------------------------------------------------
# Strategies

# Any character UTF-8 can encode except U+0000 (section 1.5.3).
chars = st.characters(exclude_categories=["Cs"], exclude_characters="\x00")
level_chars = st.characters(exclude_categories=["Cs"], exclude_characters="\x00+#/")

ids = st.integers(1, 0xFFFF)
qos_values = st.integers(0, 2)
payloads = st.binary(max_size=300)
strings = st.text(chars, max_size=30)

topic_names = st.one_of(
    st.text(
        st.characters(exclude_categories=["Cs"], exclude_characters="\x00+#"),
        min_size=1,
        max_size=40,
    ),
    st.lists(st.text(level_chars, max_size=8), min_size=1, max_size=6).map(
        lambda levels: "/".join(levels) or "x"
    ),
    st.sampled_from(["/", "a//b", "$SYS/x", "température/ü/日本", "😀/𝄞"]),
)

_filter_level = st.one_of(st.just("+"), st.text(level_chars, max_size=8))
topic_filters = st.one_of(
    st.tuples(st.lists(_filter_level, min_size=1, max_size=6), st.booleans()).map(
        lambda t: "/".join(t[0] + (["#"] if t[1] else []))
    ),
    st.sampled_from(["#", "+", "+/+", "/#", "a/+/#", "$SYS/#"]),
).map(lambda topic_filter: topic_filter or "x")


@st.composite
def publishes(draw: st.DrawFn) -> Publish:
    qos = draw(qos_values)
    return Publish(
        topic=draw(topic_names),
        payload=draw(payloads),
        qos=qos,
        retain=draw(st.booleans()),
        dup=draw(st.booleans()) if qos else False,
        packet_id=draw(ids) if qos else None,
    )


@st.composite
def connects(draw: st.DrawFn, level: int) -> Connect:
    if level == ProtocolLevel.MQTT_3_1:
        client_id = draw(st.text(chars, min_size=1, max_size=23))
    else:
        client_id = draw(strings)
    username = draw(st.none() | strings)
    password = draw(st.none() | st.binary(max_size=40)) if username is not None else None
    will = draw(
        st.none() | st.builds(Will, topic_names, st.binary(max_size=40), qos_values, st.booleans())
    )
    return Connect(
        client_id=client_id,
        clean_session=draw(st.booleans()),
        keep_alive=draw(st.integers(0, 0xFFFF)),
        username=username,
        password=password,
        will=will,
        protocol_level=ProtocolLevel(level),
    )


@st.composite
def connacks(draw: st.DrawFn, level: int) -> Connack:
    code = draw(st.integers(0, 5))
    present = draw(st.booleans()) if code == 0 and level == ProtocolLevel.MQTT_3_1_1 else False
    return Connack(present, code)


@functools.cache
def strategies_for(level: int) -> dict[PacketType, st.SearchStrategy[Packet]]:
    """One strategy per packet type, for protocol ``level``."""
    return {
        PacketType.CONNECT: connects(level),
        PacketType.CONNACK: connacks(level),
        PacketType.PUBLISH: publishes(),
        PacketType.PUBACK: st.builds(Puback, ids),
        PacketType.PUBREC: st.builds(Pubrec, ids),
        PacketType.PUBREL: st.builds(Pubrel, ids),
        PacketType.PUBCOMP: st.builds(Pubcomp, ids),
        PacketType.SUBSCRIBE: st.builds(
            Subscribe, ids, st.lists(st.tuples(topic_filters, qos_values), min_size=1, max_size=5)
        ),
        PacketType.SUBACK: st.builds(
            Suback, ids, st.lists(st.sampled_from([0, 1, 2, 0x80]), min_size=1, max_size=8)
        ),
        PacketType.UNSUBSCRIBE: st.builds(
            Unsubscribe, ids, st.lists(topic_filters, min_size=1, max_size=5)
        ),
        PacketType.UNSUBACK: st.builds(Unsuback, ids),
        PacketType.PINGREQ: st.builds(Pingreq),
        PacketType.PINGRESP: st.builds(Pingresp),
        PacketType.DISCONNECT: st.builds(Disconnect),
    }


@functools.cache
def packets_for(level: int) -> st.SearchStrategy[Packet]:
    return st.one_of(*strategies_for(level).values())


@st.composite
def level_and_packets(draw: st.DrawFn, max_size: int = 8) -> tuple[int, list[Packet]]:
    level = draw(LEVELS)
    return level, draw(st.lists(packets_for(level), max_size=max_size))


# ---------------------------------------------------------------------------------------------
# Round trips


@given(st.integers(0, MAX_REMAINING_LENGTH))
@example(0)
@example(127)
@example(128)
@example(16_383)
@example(16_384)
@example(2_097_151)
@example(2_097_152)
@example(MAX_REMAINING_LENGTH)
def test_remaining_length_round_trip(value: int) -> None:
    encoded = encode_remaining_length(value)
    # Minimal encoding: 1 byte below 128, one more for every 7 bits.
    assert len(encoded) == max(1, (value.bit_length() + 6) // 7)
    assert all(b & 0x80 for b in encoded[:-1]) and not encoded[-1] & 0x80
    assert decode_remaining_length(encoded, 0) == (value, len(encoded))
    assert decode_remaining_length(b"\xaa" + encoded + b"\x01", 1) == (value, 1 + len(encoded))
    assert decode_remaining_length(encoded[:-1], 0) is None


def assert_round_trip(packet: Packet, level: int) -> None:
    frame = encode(packet, level)
    assert frame[0] >> 4 == packet.type
    parsed = decode_remaining_length(frame, 1)
    assert parsed is not None
    length, start = parsed
    assert start + length == len(frame)
    assert decode_packet(frame[0], frame[start:], level) == packet
    assert ReceiveBuffer(level).feed(frame) == [packet]


# AUTH exists only in MQTT 5.0: test_codec_v5_vectors.py and test_codec_v5_validation.py cover it.
@pytest.mark.parametrize(
    "kind", [k for k in PacketType if k is not PacketType.AUTH], ids=lambda k: k.name
)
@given(data=st.data())
def test_every_packet_type_round_trips(kind: PacketType, data: st.DataObject) -> None:
    level = data.draw(LEVELS, label="level")
    packet = data.draw(strategies_for(level)[kind], label="packet")
    assert packet.type is kind
    assert_round_trip(packet, level)


@given(publishes(), LEVELS)
def test_publish_round_trips(packet: Publish, level: int) -> None:
    assert_round_trip(packet, level)


@given(level_and_packets(), st.data())
def test_stream_of_packets_round_trips_in_any_chunking(
    lp: tuple[int, list[Packet]], data: st.DataObject
) -> None:
    level, packets = lp
    stream = b"".join(encode(p, level) for p in packets)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = ReceiveBuffer(level)
    out: list[Packet] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        out.extend(decoder.feed(stream[start:end]))
    assert out == packets
    assert decoder.buffered == 0


# ---------------------------------------------------------------------------------------------
# Fuzzing


def decode_in_chunks(
    data: bytes, cuts: list[int], level: int, max_size: int
) -> tuple[list[Packet], MalformedPacket | None, int]:
    """Feed ``data`` split at ``cuts``. Returns the packets, the error (if any) and how many
    bytes were left buffered. Any exception but MalformedPacket fails the test."""
    decoder = ReceiveBuffer(level, max_size)
    out: list[Packet] = []
    bounds = sorted(set(cuts))
    for start, end in zip([0, *bounds], [*bounds, len(data)], strict=True):
        try:
            result = decoder.feed(data[start:end])
        except MalformedPacket as exc:
            assert isinstance(exc, MalformedFrame)  # the decoder's error, with its packets
            out.extend(cast("Sequence[Packet]", exc.packets))
            # The decoder stays failed.
            try:
                decoder.feed(b"\x00")
            except MalformedPacket:
                pass
            else:
                raise AssertionError("a failed decoder accepted more data") from None
            return out, exc, 0
        assert isinstance(result, list)
        out.extend(result)
    return out, None, decoder.buffered


def check_stream(data: bytes, cuts: list[int], level: int, max_size: int) -> None:
    chunked, chunked_error, chunked_left = decode_in_chunks(data, cuts, level, max_size)
    whole, whole_error, whole_left = decode_in_chunks(data, [], level, max_size)
    # The chunking changes nothing: same packets, same verdict.
    assert chunked == whole
    assert (chunked_error is None) == (whole_error is None)
    assert type(chunked_error) is type(whole_error)
    assert chunked_left == whole_left
    event("no error" if whole_error is None else type(whole_error).__name__)
    event(f"packets decoded: {min(len(whole), 3)}")
    for packet in whole:
        assert isinstance(packet.type, PacketType)
        if isinstance(packet, Connect):
            continue  # a client never receives CONNECT; its level need not match ours
        # Whatever the decoder accepts, the encoder writes back as the same packet.
        assert ReceiveBuffer(level).feed(encode(packet, level)) == [packet]


@st.composite
def mutated_stream(draw: st.DrawFn) -> tuple[int, bytes]:
    level, packets = draw(level_and_packets(max_size=5))
    data = bytearray(b"".join(encode(p, level) for p in packets))
    for _ in range(draw(st.integers(1, 4))):
        action = draw(st.sampled_from(["flip", "set", "truncate", "insert", "delete"]))
        where = draw(st.integers(0, len(data)))
        if action == "flip" and where < len(data):
            data[where] ^= 1 << draw(st.integers(0, 7))
        elif action == "set" and where < len(data):
            data[where] = draw(st.integers(0, 255))
        elif action == "truncate":
            del data[where:]
        elif action == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[where : where + draw(st.integers(1, 8))]
    return level, bytes(data)


VALID_FIRST_BYTES = [
    0x10,
    0x20,
    *range(0x30, 0x3E),
    0x40,
    0x50,
    0x62,
    0x70,
    0x82,
    0x90,
    0xA2,
    0xB0,
    0xC0,
    0xD0,
    0xE0,
]
cut_lists = st.lists(st.integers(0, 2000), max_size=12)
max_sizes = st.sampled_from([MAX_REMAINING_LENGTH, 64, 5])


@fuzz_settings
@given(LEVELS, st.binary(max_size=400), cut_lists, max_sizes)
def test_fuzz_random_bytes(level: int, data: bytes, cuts: list[int], max_size: int) -> None:
    check_stream(data, [c for c in cuts if c <= len(data)], level, max_size)


@fuzz_settings
@given(
    LEVELS,
    st.lists(
        st.tuples(
            st.sampled_from(VALID_FIRST_BYTES) | st.integers(0, 255), st.binary(max_size=12)
        ).map(lambda t: bytes((t[0], len(t[1]))) + t[1]),
        max_size=8,
    ).map(b"".join),
    cut_lists,
)
def test_fuzz_random_well_framed_bytes(level: int, data: bytes, cuts: list[int]) -> None:
    # Correct frame lengths with random first bytes and bodies reach every body parser.
    check_stream(data, [c for c in cuts if c <= len(data)], level, MAX_REMAINING_LENGTH)


@fuzz_settings
@given(mutated_stream(), cut_lists, max_sizes)
def test_fuzz_mutated_valid_frames(
    mutated: tuple[int, bytes], cuts: list[int], max_size: int
) -> None:
    level, data = mutated
    check_stream(data, [c for c in cuts if c <= len(data)], level, max_size)
