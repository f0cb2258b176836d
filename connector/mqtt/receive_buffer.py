"""The receive buffer: bytes as they arrive in, complete packets out (sans-I/O).

A frame may be split across reads at any byte and one read may hold many frames. Frames
longer than :data:`LARGE_FRAME` that are still incomplete are collected as a list of chunks
and joined once, so a 256 MB payload arriving in 64 KB reads costs linear time.

At protocol level 5 (MQTT 5.0) PUBLISH frames go through ``decode_publish_v5``, chosen once
per decoder, and a Remaining Length not in the fewest bytes is malformed (MQTT 5.0 section
1.5.5); on levels 3 and 4 nothing changes.
"""

from __future__ import annotations

from .decode import (
    PROPERTIES_CACHE_SIZE,
    TOPIC_CACHE_SIZE,
    check_flags,
    decode_packet,
    decode_publish,
    decode_publish_v5,
    trim_cache,
)
from .encode import ACK_FIRST_BYTES
from .errors import InvalidArgument, MalformedFrame, PacketTooLarge
from .fields import MAX_REMAINING_LENGTH, decode_remaining_length
from .packets import Packet, PacketType, ProtocolLevel, Pubrel
from .properties import Properties

LARGE_FRAME = 1 << 16

_PUBREL = ACK_FIRST_BYTES[PacketType.PUBREL]


class ReceiveBuffer:
    """Incremental MQTT frame decoder for one network connection.

    ``feed(data)`` returns every packet completed by ``data``. On a malformed frame it raises
    :class:`MalformedFrame` whose ``packets`` attribute holds the packets decoded before the
    bad frame in the same call; the decoder is then unusable (the connection must close), and
    a later ``feed`` raises that violation again.
    """

    __slots__ = (
        "_block_overflow",
        "_blocks",
        "_failed",
        "_have",
        "_need",
        "_parts",
        "_publish",
        "_rest",
        "_topic_overflow",
        "_topics",
        "level",
        "max_packet_size",
    )

    def __init__(
        self,
        level: int = ProtocolLevel.MQTT_3_1_1,
        max_packet_size: int = MAX_REMAINING_LENGTH,
    ) -> None:
        if not 0 < max_packet_size <= MAX_REMAINING_LENGTH:
            raise InvalidArgument(f"max_packet_size must be in 1..{MAX_REMAINING_LENGTH}")
        self.level = level
        self.max_packet_size = max_packet_size
        self._rest = b""
        self._parts: list[bytes] = []
        self._have = 0
        self._need = 0
        self._failed: MalformedFrame | None = None
        self._topics: dict[bytes, str] = {}
        self._topic_overflow = 0
        self._blocks: dict[bytes, Properties] = {}  # MQTT 5.0 PUBLISH property blocks
        self._block_overflow = 0
        self._publish = decode_publish_v5 if level == ProtocolLevel.MQTT_5 else decode_publish

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete packet."""
        return self._have if self._parts else len(self._rest)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        """Add received bytes; return the packets they complete, in order."""
        if self._failed is not None:
            raise MalformedFrame(f"the stream already failed: {self._failed}")
        if type(data) is not bytes:
            # A memoryview cannot be concatenated, and a bytearray the caller reuses for its
            # next read must not be kept: take an immutable copy.
            data = bytes(data)
        if self._parts:
            self._parts.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            buf = b"".join(self._parts)
            self._parts = []
            self._have = 0
        elif self._rest:
            buf = self._rest + data
        else:
            buf = data
        packets: list[Packet] = []
        pos = 0
        size = len(buf)
        level = self.level
        limit = self.max_packet_size
        topics = self._topics
        blocks = self._blocks
        publish = self._publish
        try:
            while size - pos >= 2:
                first = buf[pos]
                length = buf[pos + 1]
                if length < 0x80:
                    start = pos + 2
                elif size - pos > 2 and 0 < buf[pos + 2] < 0x80:  # two bytes: 128..16383
                    length = (length & 0x7F) | (buf[pos + 2] << 7)
                    start = pos + 3
                else:
                    parsed = decode_remaining_length(buf, pos + 1)
                    if parsed is None:
                        break
                    length, start = parsed
                    if not buf[start - 1] and level == ProtocolLevel.MQTT_5:
                        raise MalformedFrame(
                            "the remaining length is not encoded in the fewest bytes (a "
                            "Variable Byte Integer must use the minimum number of bytes, "
                            "MQTT 5.0 section 1.5.5)"
                        )
                if length > limit:
                    raise PacketTooLarge(
                        f"packet of remaining length {length} exceeds the maximum of {limit} "
                        "bytes this client accepts"
                    )
                end = start + length
                if end > size:
                    self._check_header(first)
                    if end - pos > LARGE_FRAME:
                        self._parts = [buf[pos:]]
                        self._have = size - pos
                        self._need = end - pos
                        self._rest = b""
                        return packets
                    break
                if first & 0xF0 == 0x30:
                    packets.append(publish(first & 0x0F, buf, start, end, topics, blocks))
                elif first == _PUBREL and length == 2 and (buf[start] or buf[start + 1]):
                    # PUBREL with the flags, length and nonzero packet id that section 3.6.1
                    # and 2.3.1 require: what decode_packet would build, without its checks.
                    packets.append(Pubrel(buf[start] << 8 | buf[start + 1]))
                else:
                    packets.append(decode_packet(first, buf[start:end], level))
                pos = end
        except MalformedFrame as exc:
            self._failed = exc
            self._rest = b""
            exc.packets = packets
            raise
        finally:
            if len(topics) > TOPIC_CACHE_SIZE:
                self._topic_overflow = trim_cache(topics, TOPIC_CACHE_SIZE, self._topic_overflow)
            if len(blocks) > PROPERTIES_CACHE_SIZE:
                self._block_overflow = trim_cache(
                    blocks, PROPERTIES_CACHE_SIZE, self._block_overflow
                )
        self._rest = buf[pos:] if pos < size else b""
        return packets

    def _check_header(self, first: int) -> None:
        """Reject a bad first byte before waiting for the rest of its frame."""
        if first & 0xF0 == 0x30:
            if first & 0x06 == 0x06:
                raise MalformedFrame(
                    "PUBLISH with QoS 3: both QoS bits set is not allowed (section 3.3.1.2)"
                )
        else:
            check_flags(first, self.level)
