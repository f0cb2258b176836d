"""Fuzz target: the stream decoder and the codec on arbitrary bytes and arbitrary splits.

Input layout: byte 0 picks the protocol level (bit 0), a small maximum packet size (bit 1) and
how the rest is split into reads (bits 2-7 seed the cut points); the rest is the stream.

Invariants:

* only :class:`MalformedPacket` (including :class:`PacketTooLarge`) is raised, never anything
  else, and its message cites a spec section (or names the size limit);
* the packets delivered before an error, and whether there is an error, do not depend on how
  the bytes are split into reads;
* every decoded packet encodes back to bytes that decode to the same packet (round trip).
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import cast

from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import MalformedFrame, MalformedPacket, PacketTooLarge
from connector.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    Pingreq,
    Pingresp,
    ProtocolLevel,
    Puback,
    Pubcomp,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
)
from connector.mqtt.receive_buffer import ReceiveBuffer

SMALL_MAX = 300


def _feed(decoder: ReceiveBuffer, chunks: list[bytes]) -> tuple[list[Packet], str | None]:
    """All packets the chunks produce, and the error message that ended the stream, if any."""
    packets: list[Packet] = []
    for chunk in chunks:
        try:
            packets.extend(decoder.feed(chunk))
        except MalformedPacket as exc:
            assert isinstance(exc, MalformedFrame)  # the decoder's error, with its packets
            packets.extend(cast("Sequence[Packet]", exc.packets))
            _check_message(exc)
            return packets, type(exc).__name__
    return packets, None


_SECTION = re.compile(r"\(.*\b[1-4]\.\d+(\.\d+)*\b.*\)")


def cites_rule(text: str) -> bool:
    """Whether an error message cites a spec section, as ``(section 3.3.1.2)`` or ``(3.8.3)``,
    or names the local packet size limit."""
    return bool(_SECTION.search(text)) or "exceeds the maximum" in text


def _check_message(exc: MalformedPacket) -> None:
    text = str(exc)
    if isinstance(exc, PacketTooLarge):
        assert "exceeds the maximum" in text, text
    else:
        assert cites_rule(text), text


def _cuts(stream: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    chunks = []
    pos = 0
    while pos < len(stream):
        step = rng.choice((1, 1, 2, 3, 5, 8, 64, 1 << 16))
        chunks.append(stream[pos : pos + step])
        pos += step
    return chunks


def one_input(data: bytes) -> None:
    if not data:
        return
    control, stream = data[0], data[1:]
    level = ProtocolLevel.MQTT_3_1 if control & 1 else ProtocolLevel.MQTT_3_1_1
    limit = SMALL_MAX if control & 2 else 268_435_455
    whole, whole_error = _feed(ReceiveBuffer(level, limit), [stream])
    split, split_error = _feed(ReceiveBuffer(level, limit), _cuts(stream, control >> 2))
    assert split == whole, (whole, split)
    assert (split_error is None) == (whole_error is None), (whole_error, split_error)
    for packet in whole:
        frame = encode(packet, level)
        assert ReceiveBuffer(level).feed(frame) == [packet], packet


def seeds() -> list[bytes]:
    """Valid frames of every type and known-bad ones, each behind both control bytes."""
    v4 = ProtocolLevel.MQTT_3_1_1
    frames = [
        encode(Connect("c", clean_session=True, keep_alive=5), v4),
        encode(
            Connect(
                "client",
                username="u",
                password=b"p",
                will=Will("w/t", b"bye", 1, True),
                keep_alive=60,
            ),
            v4,
        ),
        encode(Connack(True, 0)),
        encode(Connack(False, 5)),
        encode_publish("a/b", b"payload", 0, None),
        encode_publish("a/ü/温", b"\x00" * 40, 1, 7, retain=True),
        encode_publish("t", b"x" * 200, 2, 65535, dup=True),
        encode(Puback(1)),
        encode(Pubrec(2)),
        encode(Pubrel(3)),
        encode(Pubcomp(4)),
        encode(Subscribe(5, [("a/+", 1), ("#", 2)]), v4),
        encode(Suback(5, [0, 1, 2, 0x80])),
        encode(Unsubscribe(6, ["a/+"]), v4),
        encode(Unsuback(6)),
        encode(Pingreq()),
        encode(Pingresp()),
        encode(Disconnect()),
        bytes.fromhex("36 05 00 01 61 00 01"),
        bytes.fromhex("30 FF FF FF FF 01"),
        bytes.fromhex("30 04 00 02 C3 28"),
        bytes.fromhex("30 82 80 01"),
        bytes.fromhex("62 02 00 00"),
        # Found by fuzzing: a CONNECT with protocol level 191 decoded but could not be encoded.
        bytes.fromhex("10 0C 00 04 4D 51 54 54 BF 02 00 05 00 00"),
    ]
    out = [bytes([c]) + f for f in frames for c in (0x00, 0x03)]
    out.append(b"\x04" + b"".join(frames[:18]))
    return out
