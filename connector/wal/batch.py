"""Encoding one append into per-segment writes, updating the QoS state on the way.

Encoding happens before any byte is written, so an invalid record (bad QoS, missing packet
id, field out of range) raises ValueError with the QoS state restored and nothing written.
Releases are applied before the append's records. The records become data blocks (kind 5, see
:mod:`connector.wal.block`): one per append, split where the segment rolls over and where an
index hint is due (every 64 KiB of segment), so a block stays small enough to seek into and
every hint points at a block start. A segment rolls over before a data record when it already
holds data and would be at least ``segment_max_bytes`` long with the rows before that record;
the new segment starts with a snapshot of the state as of that record.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from .block import BLOCK_SLACK, ROW_BYTES, body_size, encode_block
from .records import (
    FLAGS,
    FRAME_SIZE,
    KIND_STATE,
    MAX_PAYLOAD_BYTES,
    MAX_TOPIC_BYTES,
    RecordTuple,
    digest_seed,
    encode_record,
    encode_release,
)
from .segment import INDEX_INTERVAL, encode_header
from .state import QosState

_TOPIC_CACHE_LIMIT = 4096

_Appenders: TypeAlias = tuple[
    Callable[[str], int | None],  # the block's topic index of a topic (None: not in its table)
    list[int],  # the digest seed of each topic index
    Callable[[int], None],  # topic index
    Callable[[int], None],  # flags
    Callable[[int], None],  # message id (0 without one)
    Callable[[int], None],  # timestamp
    Callable[[int], None],  # payload end
    Callable[[bytes], None],  # payload
]


@dataclass(slots=True)
class SegmentWrite:
    """The encoded bytes of one append destined for one segment file, and what follows them."""

    first_offset: int
    parts: list[bytes]
    new_segment: bool  # parts start with a header + state snapshot: create the file
    index: list[tuple[int, int]] = field(default_factory=list)  # (offset, byte position)
    end_offset: int = 0
    seal: bool = False  # seal (and fsync) the segment after writing the parts


@dataclass(slots=True)
class EncodedAppend:
    """One encoded append: its per-segment writes and where the next index hint is due after."""

    writes: list[SegmentWrite]
    index_next: int

    @property
    def end_offset(self) -> int:
        """The next_offset once the append is durable."""
        return self.writes[-1].end_offset


def segment_prefix(identity: bytes, first_offset: int, state: QosState) -> bytes:
    """Header plus state snapshot: the first bytes of every segment."""
    return encode_header(identity, first_offset) + encode_record(KIND_STATE, state.encode())


class AppendEncoder:
    """Encodes appends for one WAL; keeps a cache of encoded topics."""

    __slots__ = ("_identity", "_limit", "_topics")

    def __init__(self, identity: bytes, segment_max_bytes: int) -> None:
        self._identity = identity
        self._limit = segment_max_bytes
        self._topics: dict[str, tuple[bytes, int]] = {}

    def encode(
        self,
        records: Sequence[RecordTuple],
        released_qos2: Iterable[int],
        state: QosState,
        *,
        next_offset: int,
        segment_first: int,
        segment_size: int,
        index_next: int,
    ) -> EncodedAppend | None:
        """Encode an append at ``next_offset`` to a segment of ``segment_size`` bytes.

        Updates ``state``; returns None when there is nothing to write (no records, no
        release of a pending id). On any error ``state`` is restored and the error raised.
        """
        pending = state.pending_qos2
        released = [mid for mid in dict.fromkeys(released_qos2) if mid in pending]
        if not records and not released:
            return None
        added: list[int] = []
        old_digests: dict[int, int | None] = {}
        state.apply_release(released)
        try:
            return self._encode(
                records,
                released,
                state,
                added,
                old_digests,
                (next_offset, segment_first, segment_size, index_next),
            )
        except BaseException:
            state.revert(added, released, old_digests)
            raise

    def _encode(
        self,
        records: Sequence[RecordTuple],
        released: list[int],
        state: QosState,
        added: list[int],
        old_digests: dict[int, int | None],
        position: tuple[int, int, int, int],
    ) -> EncodedAppend:
        """The hot loop of :meth:`encode`; records undo information in the two collections.

        Rows go into the open data block's columns. Message digests of the append are collected
        in a dict of their own and merged into the state at the end (or before a segment
        snapshot), so only those merges need undo information. ``estimate`` bounds from above
        where the segment would end with the open block closed; rollover and index hints are
        checked exactly only once it reaches the nearer of the two thresholds. A block is
        closed where the segment rolls over and where an index hint is due, so every hint
        points at a block start."""
        offset, segment_first, pos, index_next = position
        write = SegmentWrite(offset, [], new_segment=False)
        writes = [write]
        if released:
            release = encode_release(released)
            write.parts.append(release)
            pos += len(release)
        has_data = offset > segment_first
        limit = self._limit
        # 0: check again at the next record, once this segment holds data.
        watch = min(limit, index_next) if has_data else 0
        pending = state.pending_qos2
        append_digests: dict[int, int] = {}
        cache, flags_of, crc32 = self._topics, FLAGS, zlib.crc32
        block = _OpenBlock(offset, pos)
        block_topic, seeds, ids, flags_out, mids, stamps, ends, payloads = block.appenders()
        estimate, total = pos + BLOCK_SLACK, 0
        try:
            for topic, payload, qos, retained, duplicate, mid, stamp in records:
                if estimate >= watch:
                    here = block.end_position(total)
                    if here >= watch:
                        closed = False
                        if here >= limit and has_data:
                            if len(block.flags):
                                write.parts.extend(block.encode())
                            write.end_offset, write.seal = offset, True
                            state.merge(append_digests, undo=old_digests)
                            append_digests.clear()
                            prefix = segment_prefix(self._identity, offset, state)
                            write = SegmentWrite(offset, [prefix], new_segment=True)
                            writes.append(write)
                            here, has_data, closed = len(prefix), False, True
                            index_next = here + INDEX_INTERVAL
                        if here >= index_next:
                            if not closed and len(block.flags):
                                write.parts.extend(block.encode())
                                closed = True
                            write.index.append((offset, here))
                            index_next = here + INDEX_INTERVAL
                        if closed:
                            block = _OpenBlock(offset, here)
                            appenders = block.appenders()
                            block_topic, seeds, ids, flags_out, mids, stamps, ends, payloads = (
                                appenders
                            )
                            estimate, total = here + BLOCK_SLACK, 0
                        watch = min(limit, index_next) if has_data else 0
                tid = block_topic(topic)
                if tid is None:
                    entry = cache.get(topic)
                    if entry is None:
                        entry = self._cache_topic(topic)
                    tid = block.add_topic(topic, entry)
                    estimate += 2 + len(entry[0])
                flags = flags_of.get((qos, retained, duplicate, mid is not None))
                if flags is None:
                    raise ValueError(f"invalid record at offset {offset}: qos={qos!r}")
                if qos:
                    if not mid:
                        raise ValueError(f"QoS {qos} record at offset {offset} needs a message id")
                    append_digests[mid] = crc32(payload, seeds[tid])
                    if qos == 2 and mid not in pending:
                        pending.add(mid)
                        added.append(mid)
                size = len(payload)
                if size > MAX_PAYLOAD_BYTES:
                    raise ValueError(f"record at offset {offset} is too large ({size} bytes)")
                ids(tid)
                flags_out(flags)
                mids(mid or 0)
                stamps(stamp)
                total += size
                ends(total)
                payloads(payload)
                estimate += ROW_BYTES + size
                offset += 1
                has_data = True
        except (OverflowError, struct.error) as exc:
            raise ValueError(f"record at offset {offset} has a field out of range: {exc}") from exc
        if len(block.flags):
            write.parts.extend(block.encode())
        state.merge(append_digests, undo=old_digests)
        write.end_offset = offset
        return EncodedAppend(writes, index_next)

    def _cache_topic(self, topic: str) -> tuple[bytes, int]:
        """A topic's UTF-8 bytes and the crc32 seed of its digest; cached."""
        raw = topic.encode("utf-8")
        if len(raw) > MAX_TOPIC_BYTES:
            raise ValueError(f"topic is {len(raw)} bytes, the limit is {MAX_TOPIC_BYTES}")
        if len(self._topics) >= _TOPIC_CACHE_LIMIT:
            self._topics.clear()
        entry = self._topics[topic] = (raw, digest_seed(raw))
        return entry


class _OpenBlock:
    """The columns of the data block being encoded, starting at segment byte ``start``."""

    __slots__ = (
        "ends",
        "first",
        "flags",
        "message_ids",
        "names",
        "payloads",
        "seeds",
        "start",
        "table_bytes",
        "timestamps",
        "topic_ids",
        "topics",
    )

    def __init__(self, first: int, start: int) -> None:
        self.first = first
        self.start = start
        self.topics: dict[str, int] = {}
        self.names: list[bytes] = []
        self.seeds: list[int] = []
        self.table_bytes = 0
        self.topic_ids = array("i")
        self.flags = bytearray()
        self.message_ids = array("H")
        self.timestamps = array("q")
        self.ends = array("i", [0])
        self.payloads: list[bytes] = []

    def appenders(self) -> _Appenders:
        """The bound methods the hot loop calls per row (and the seeds list)."""
        return (
            self.topics.get,
            self.seeds,
            self.topic_ids.append,
            self.flags.append,
            self.message_ids.append,
            self.timestamps.append,
            self.ends.append,
            self.payloads.append,
        )

    def add_topic(self, topic: str, entry: tuple[bytes, int]) -> int:
        """Add a topic to the block's table; returns its index."""
        tid = self.topics[topic] = len(self.names)
        self.names.append(entry[0])
        self.seeds.append(entry[1])
        self.table_bytes += 2 + len(entry[0])
        return tid

    def end_position(self, payload_bytes: int) -> int:
        """The segment size once this block (holding ``payload_bytes``) is written."""
        count = len(self.flags)
        if not count:
            return self.start
        return self.start + FRAME_SIZE + 1 + body_size(count, self.table_bytes, payload_bytes)

    def encode(self) -> list[bytes]:
        """The framed block record as parts."""
        return encode_block(
            self.first,
            self.names,
            self.timestamps,
            self.message_ids,
            self.flags,
            self.topic_ids,
            self.ends,
            self.payloads,
        )
