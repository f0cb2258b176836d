"""The acknowledgement frames (PUBACK, PUBREC, PUBREL, PUBCOMP, UNSUBACK: sections 3.4 to 3.7
and 3.11) have one encoder, the codec's: ``encode_ack`` for one frame, ``encode_acks`` for the
words the session collects. Both round-trip through the decoders, for every kind and the edges
of the packet identifier."""

from __future__ import annotations

import pytest

from connector.mqtt.encode import ACK_WORDS, encode, encode_ack, encode_acks
from connector.mqtt.errors import InvalidArgument, LocalProtocolError
from connector.mqtt.packets import (
    PacketType,
    ProtocolLevel,
    Puback,
    Pubcomp,
    Pubrec,
    Pubrel,
    Unsuback,
)
from connector.mqtt.receive_buffer import ReceiveBuffer

PACKETS = {
    PacketType.PUBACK: Puback,
    PacketType.PUBREC: Pubrec,
    PacketType.PUBREL: Pubrel,
    PacketType.PUBCOMP: Pubcomp,
    PacketType.UNSUBACK: Unsuback,
}
FIRST_BYTES = {  # section 2.2.2, table 2.2: PUBREL's flags are 0010
    PacketType.PUBACK: 0x40,
    PacketType.PUBREC: 0x50,
    PacketType.PUBREL: 0x62,
    PacketType.PUBCOMP: 0x70,
    PacketType.UNSUBACK: 0xB0,
}
EDGE_IDS = [1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFE, 0xFFFF]


def test_every_acknowledgement_kind_has_a_word() -> None:
    assert set(ACK_WORDS) == set(PACKETS)


@pytest.mark.parametrize("level", [ProtocolLevel.MQTT_3_1, ProtocolLevel.MQTT_3_1_1])
@pytest.mark.parametrize("kind", list(PACKETS), ids=lambda k: k.name)
def test_encode_ack_round_trips_for_every_id_edge(kind: PacketType, level: int) -> None:
    for pid in EDGE_IDS:
        frame = encode_ack(kind, pid)
        assert frame == bytes((FIRST_BYTES[kind], 2, pid >> 8, pid & 0xFF))
        assert frame == encode(PACKETS[kind](pid), level)
        assert ReceiveBuffer(level).feed(frame) == [PACKETS[kind](pid)]


def test_encode_acks_writes_the_words_as_consecutive_frames_in_order() -> None:
    pairs = [(kind, pid) for pid in EDGE_IDS for kind in PACKETS]
    words = [ACK_WORDS[kind] | pid for kind, pid in pairs]
    data = encode_acks(words)
    assert data == b"".join(encode_ack(kind, pid) for kind, pid in pairs)
    assert ReceiveBuffer().feed(data) == [PACKETS[kind](pid) for kind, pid in pairs]
    assert encode_acks([]) == b""


@pytest.mark.parametrize("bad", [0, 0x10000, -1, None])
def test_encode_ack_refuses_an_id_outside_1_to_65535(bad: int | None) -> None:
    with pytest.raises(InvalidArgument, match=r"packet identifier in 1\.\.65535") as info:
        encode_ack(PacketType.PUBACK, bad)
    assert isinstance(info.value, LocalProtocolError) and isinstance(info.value, ValueError)
