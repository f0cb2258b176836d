"""ReceiveBuffer: frames split at any byte, many frames per read, large frames, size limits
and failure handling."""

from __future__ import annotations

import pytest

from connector.mqtt.decode import decode_packet
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import MalformedFrame, MalformedPacket, PacketTooLarge
from connector.mqtt.fields import MAX_REMAINING_LENGTH
from connector.mqtt.packets import (
    Connack,
    Disconnect,
    Packet,
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
)
from connector.mqtt.receive_buffer import LARGE_FRAME, ReceiveBuffer

PACKETS: list[Packet] = [
    Connack(True, 0),
    Publish("a/b", b"hello", qos=0),
    Publish("température/ü/日本", b"\x00\xff" * 70, qos=1, packet_id=7),  # 2-byte length
    Publish("x", b"", qos=2, retain=True, dup=True, packet_id=65535),
    Puback(1),
    Pubrec(2),
    Pubrel(3),
    Pubcomp(4),
    Subscribe(5, [("a/+", 1), ("b/#", 2)]),
    Suback(5, [1, 0x80]),
    Unsubscribe(6, ["a/+"]),
    Unsuback(6),
    Pingreq(),
    Pingresp(),
    Publish("t", b"z" * 200, qos=0),
    Disconnect(),
]
STREAM = b"".join(encode(p) for p in PACKETS)


def feed_all(decoder: ReceiveBuffer, chunks: list[bytes]) -> list[Packet]:
    out: list[Packet] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    return out


def test_one_read_with_many_frames() -> None:
    decoder = ReceiveBuffer()
    assert decoder.feed(STREAM) == PACKETS
    assert decoder.buffered == 0


def test_every_two_chunk_split_gives_the_same_packets() -> None:
    for cut in range(len(STREAM) + 1):
        decoder = ReceiveBuffer()
        first = decoder.feed(STREAM[:cut])
        second = decoder.feed(STREAM[cut:])
        assert first + second == PACKETS, cut
        assert decoder.buffered == 0
        # The first chunk yields exactly the frames it holds completely.
        assert first == PACKETS[: len(first)]


def test_byte_by_byte_gives_the_same_packets() -> None:
    decoder = ReceiveBuffer()
    seen: list[Packet] = []
    for index in range(len(STREAM)):
        seen.extend(decoder.feed(STREAM[index : index + 1]))
    assert seen == PACKETS
    assert decoder.buffered == 0


def test_three_chunk_splits_around_a_frame_boundary() -> None:
    # Splits inside the variable-length header of the 2-byte remaining length PUBLISH.
    first_len = len(encode(PACKETS[0])) + len(encode(PACKETS[1]))
    for a in range(first_len - 2, first_len + 5):
        for b in range(a, a + 6):
            decoder = ReceiveBuffer()
            assert feed_all(decoder, [STREAM[:a], STREAM[a:b], STREAM[b:]]) == PACKETS


def test_incomplete_input_asks_for_more() -> None:
    decoder = ReceiveBuffer()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\x30") == []
    assert decoder.buffered == 1
    assert decoder.feed(b"\x04\x00\x01") == []
    assert decoder.buffered == 4
    assert decoder.feed(b"t") == []
    assert decoder.feed(b"!") == [Publish("t", b"!")]
    assert decoder.buffered == 0


def test_empty_feeds_between_bytes_change_nothing() -> None:
    decoder = ReceiveBuffer()
    seen: list[Packet] = []
    for index in range(len(STREAM)):
        seen.extend(decoder.feed(b""))
        seen.extend(decoder.feed(STREAM[index : index + 1]))
    assert seen == PACKETS


def test_a_trailing_partial_frame_waits() -> None:
    frame = encode(Puback(9))
    decoder = ReceiveBuffer()
    assert decoder.feed(STREAM + frame[:3]) == PACKETS
    assert decoder.buffered == 3
    assert decoder.feed(frame[3:]) == [Puback(9)]


# ---------------------------------------------------------------------------------------------
# Large frames


def test_five_megabyte_payload_in_64k_chunks() -> None:
    payload = bytes(range(256)) * (5 * 1024 * 1024 // 256) + b"tail"
    frame = encode_publish("big/one", payload, qos=1, packet_id=42)
    before = encode(Pingresp())
    after = encode(Puback(3))
    data = before + frame + after
    decoder = ReceiveBuffer()
    chunk = 64 * 1024
    results: list[list[Packet]] = [
        decoder.feed(data[i : i + chunk]) for i in range(0, len(data), chunk)
    ]
    packets = [p for r in results for p in r]
    assert packets == [Pingresp(), Publish("big/one", payload, qos=1, packet_id=42), Puback(3)]
    assert results[0] == [Pingresp()]
    # Nothing in between: the big frame comes out with the chunk that completes it.
    assert all(r == [] for r in results[1:-1])
    assert decoder.buffered == 0


def test_large_frame_buffered_counts_bytes_received() -> None:
    frame = encode_publish("t", b"x" * (LARGE_FRAME * 3), qos=0)
    decoder = ReceiveBuffer()
    assert decoder.feed(frame[: LARGE_FRAME // 2]) == []
    assert decoder.feed(frame[LARGE_FRAME // 2 : LARGE_FRAME * 2]) == []
    assert decoder.buffered == LARGE_FRAME * 2
    assert decoder.feed(frame[LARGE_FRAME * 2 :] + encode(Pingresp())) == [
        Publish("t", b"x" * (LARGE_FRAME * 3)),
        Pingresp(),
    ]
    assert decoder.buffered == 0


def test_large_frame_followed_by_a_partial_frame() -> None:
    big = encode_publish("t", b"y" * (LARGE_FRAME + 10), qos=0)
    tail = encode(Puback(77))
    decoder = ReceiveBuffer()
    assert decoder.feed(big[:100]) == []
    assert decoder.feed(big[100:] + tail[:1]) == [Publish("t", b"y" * (LARGE_FRAME + 10))]
    assert decoder.buffered == 1
    assert decoder.feed(tail[1:]) == [Puback(77)]


def test_max_packet_size_allows_a_frame_of_exactly_that_size() -> None:
    frame = encode_publish("t", b"a" * 97, qos=0)  # remaining length 3 + 97 = 100
    assert ReceiveBuffer(max_packet_size=100).feed(frame) == [Publish("t", b"a" * 97)]


def test_max_packet_size_rejects_a_bigger_frame_from_its_header_alone() -> None:
    decoder = ReceiveBuffer(max_packet_size=1024 * 1024)
    frame = encode_publish("t", b"a" * (5 * 1024 * 1024), qos=0)
    header = frame[:5]  # first byte + 4-byte remaining length; no body yet
    with pytest.raises(PacketTooLarge, match=r"remaining length 5242883 exceeds.*1048576") as info:
        decoder.feed(header)
    assert isinstance(info.value, MalformedPacket)
    assert info.value.packets == []


def test_packet_too_large_keeps_the_packets_before_it() -> None:
    decoder = ReceiveBuffer(max_packet_size=10)
    with pytest.raises(PacketTooLarge) as info:
        decoder.feed(encode(Puback(1)) + encode(Pubrec(2)) + b"\x30\x0b")
    assert list(info.value.packets) == [Puback(1), Pubrec(2)]


@pytest.mark.parametrize("size", [0, -1, MAX_REMAINING_LENGTH + 1])
def test_max_packet_size_must_be_in_range(size: int) -> None:
    with pytest.raises(ValueError):
        ReceiveBuffer(max_packet_size=size)


# ---------------------------------------------------------------------------------------------
# Failure


def test_packets_before_a_malformed_frame_are_on_the_exception() -> None:
    good = encode(Puback(1)) + encode(Publish("a", b"b")) + encode(Pingresp())
    bad = bytes.fromhex("40 02 00 00")  # packet id 0
    decoder = ReceiveBuffer()
    with pytest.raises(MalformedPacket, match=r"2\.3\.1") as info:
        decoder.feed(good + bad + encode(Puback(2)))
    assert isinstance(info.value, MalformedFrame)  # the decoder's error, with its packets
    assert list(info.value.packets) == [Puback(1), Publish("a", b"b"), Pingresp()]


def test_packets_from_earlier_reads_are_not_on_the_exception() -> None:
    decoder = ReceiveBuffer()
    assert decoder.feed(encode(Puback(1))) == [Puback(1)]
    with pytest.raises(MalformedPacket) as info:
        decoder.feed(encode(Puback(2)) + b"\xf0\x00")
    assert isinstance(info.value, MalformedFrame)  # the decoder's error, with its packets
    assert list(info.value.packets) == [Puback(2)]


def test_malformed_frame_completed_across_reads() -> None:
    decoder = ReceiveBuffer()
    assert decoder.feed(encode(Puback(5)) + b"\x40\x02\x00") == [Puback(5)]
    with pytest.raises(MalformedPacket, match=r"2\.3\.1") as info:
        decoder.feed(b"\x00")
    assert isinstance(info.value, MalformedFrame)  # the decoder's error, with its packets
    assert list(info.value.packets) == []


def test_after_failure_further_feeds_raise() -> None:
    decoder = ReceiveBuffer()
    with pytest.raises(MalformedPacket):
        decoder.feed(b"\x00\x00")
    for data in (encode(Pingresp()), b"", STREAM):
        with pytest.raises(MalformedPacket, match="already failed"):
            decoder.feed(data)


def test_after_packet_too_large_further_feeds_raise() -> None:
    decoder = ReceiveBuffer(max_packet_size=4)
    with pytest.raises(PacketTooLarge):
        decoder.feed(b"\x30\x05")
    with pytest.raises(MalformedPacket, match="already failed"):
        decoder.feed(encode(Pingresp()))


def test_bad_flags_detected_before_a_large_body() -> None:
    decoder = ReceiveBuffer()
    with pytest.raises(MalformedPacket, match=r"2\.2\.2"):
        decoder.feed(b"\x80\xff\xff\x03" + b"\x00" * 10)  # SUBSCRIBE with flags 0


@pytest.mark.parametrize("level", [ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1])
def test_level_decides_connack_and_flag_rules(level: ProtocolLevel) -> None:
    decoder = ReceiveBuffer(level)
    assert decoder.level == level
    packets = decoder.feed(bytes.fromhex("20 02 01 00"))
    assert packets == [Connack(level == ProtocolLevel.MQTT_3_1_1, 0)]


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_bytearray_and_memoryview_reads(kind: type) -> None:
    big = encode_publish("t", b"q" * (LARGE_FRAME + 5), qos=0)
    data = STREAM + big + STREAM
    expected = [*PACKETS, Publish("t", b"q" * (LARGE_FRAME + 5)), *PACKETS]
    decoder = ReceiveBuffer()
    out: list[Packet] = []
    for start in range(0, len(data), 1000):
        buffer = bytearray(data[start : start + 1000])
        out.extend(decoder.feed(buffer if kind is bytearray else memoryview(buffer)))
        buffer[:] = b"\xee" * len(buffer)  # the caller reuses its receive buffer
    assert out == expected


@pytest.mark.parametrize("level", [ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1])
@pytest.mark.parametrize(
    "frame",
    [
        "62 02 00 01",
        "62 02 01 00",
        "62 02 12 34",
        "62 02 FF FF",
        "62 02 00 00",  # packet id 0 (section 2.3.1)
        "62 01 01",  # remaining length 1
        "62 03 00 01 00",  # remaining length 3
        "62 82 00 00 07",  # remaining length 2 in two bytes
        "60 02 00 01",  # flags of 3.1.1 section 3.6.1 broken
        "6A 02 00 01",  # 3.1 QoS 1 + DUP flags
        "68 02 00 01",
    ],
)
def test_pubrel_frames_decode_as_decode_packet_does(level: ProtocolLevel, frame: str) -> None:
    """The PUBREL fast path gives decode_packet's packet, or its error, at either level."""
    data = bytes.fromhex(frame)
    before = encode(Puback(9))
    start = 3 if data[1] & 0x80 else 2
    try:
        expected: object = [Puback(9), decode_packet(data[0], data[start:], level)]
    except MalformedPacket as exc:
        expected = (type(exc), str(exc), [Puback(9)])
    for chunks in ([before + data], [before, data[:3], data[3:]], [before + data[:1], data[1:]]):
        decoder = ReceiveBuffer(level)
        packets: list[Packet] = []
        try:
            for chunk in chunks:
                packets += decoder.feed(chunk)
            got: object = packets
        except MalformedPacket as exc:
            assert isinstance(exc, MalformedFrame)  # the decoder's error, with its packets
            got = (type(exc), str(exc), packets + list(exc.packets))
        assert got == expected
