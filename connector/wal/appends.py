"""Encoding one append into per-segment writes, updating the QoS state on the way.

Encoding happens before any byte is written, so an invalid record (bad QoS, missing packet
id, field out of range) raises ValueError with the QoS state restored and nothing written.
Releases are applied before the append's records. The records become data blocks (kind 5, or
kind 6 when a row has properties, see :mod:`connector.wal.block`): one per append, split where
the segment rolls over and where an index hint is due (every 64 KiB of segment), so a block
stays small enough to seek into and every hint points at a block start. A segment rolls over
before a data record when it already holds data and would be at least ``segment_max_bytes``
long with the rows before that record; the new segment starts with a snapshot of the state as
of that record.

An append of seven-field records (:data:`~connector.wal.records.PlainRecordTuple`, what the
receiver builds for MQTT 3.1 and 3.1.1) runs a loop that never looks at properties; eight
fields (a :class:`~connector.wal.records.NewRecord`, or what the receiver builds for MQTT 5)
run its twin that also keeps each row's property bytes.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias, cast

from .block import BLOCK_SLACK, PROPERTIES_ROW_BYTES, ROW_BYTES, body_size, encode_block
from .records import (
    FLAGS,
    FRAME_SIZE,
    KIND_STATE,
    MAX_PAYLOAD_BYTES,
    MAX_TOPIC_BYTES,
    PlainRecordTuple,
    PropertiesRecordTuple,
    RecordTuple,
    digest_seed,
    encode_record,
    encode_release,
)
from .segment import FORMAT_VERSION, INDEX_INTERVAL, encode_header
from .state import QosState

_TOPIC_CACHE_LIMIT = 4096

_Appenders: TypeAlias = tuple[
    Callable[[str], int | None],  # the block's topic index of a topic (None: not in its table)
    list[int],  # the digest seed of each topic index
    Callable[[int], None],  # topic index
    Callable[[int], None],  # flags
    Callable[[int], None],  # packet id (0 without one)
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
    """One encoded append: its per-segment writes, where the next index hint is due after, and
    whether it holds a block with properties (kind 6: the WAL must be format version 3)."""

    writes: list[SegmentWrite]
    index_next: int
    properties: bool = False

    @property
    def end_offset(self) -> int:
        """The next_offset once the append is durable."""
        return self.writes[-1].end_offset


def segment_prefix(
    identity: bytes, first_offset: int, state: QosState, version: int = FORMAT_VERSION
) -> bytes:
    """Header (saying format ``version``) plus state snapshot: the first bytes of every
    segment."""
    header = encode_header(identity, first_offset, version)
    return header + encode_record(KIND_STATE, state.encode())


class AppendEncoder:
    """Encodes appends for one WAL; keeps a cache of encoded topics. ``version`` is the format
    version the headers of the segments it starts say (the WAL's, see :mod:`connector.wal`)."""

    __slots__ = ("_identity", "_limit", "_topics", "version")

    def __init__(
        self, identity: bytes, segment_max_bytes: int, version: int = FORMAT_VERSION
    ) -> None:
        self._identity = identity
        self._limit = segment_max_bytes
        self._topics: dict[str, tuple[bytes, int]] = {}
        self.version = version

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
        released = [pid for pid in dict.fromkeys(released_qos2) if pid in pending]
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
        """Encode the release and the records with the loop their length calls for."""
        offset, segment_first, pos, index_next = position
        write = SegmentWrite(offset, [], new_segment=False)
        if released:
            release = encode_release(released)
            write.parts.append(release)
            pos += len(release)
        cursor = _Cursor(
            (self._identity, self._limit, self.version),
            state,
            old_digests,
            write,
            segment_first,
            pos,
            index_next,
        )
        if records and len(records[0]) > 7:
            rows = cast("Sequence[PropertiesRecordTuple]", records)
            offset = self._rows_with_properties(rows, cursor, offset, added)
        else:
            plain = cast("Sequence[PlainRecordTuple]", records)
            offset = self._rows(plain, cursor, offset, added)
        write = cursor.write
        if len(cursor.block.flags):
            write.parts.extend(cursor.close_block())
        state.merge(cursor.digests, undo=old_digests)
        write.end_offset = offset
        return EncodedAppend(cursor.writes, cursor.index_next, cursor.properties)

    def _rows(
        self,
        records: Sequence[PlainRecordTuple],
        cursor: _Cursor,
        offset: int,
        added: list[int],
    ) -> int:
        """The hot loop for records without properties; returns the next offset.

        Rows go into the open data block's columns. Message digests of the append are collected
        in a dict of their own and merged into the state at the end (or before a segment
        snapshot), so only those merges need undo information. ``estimate`` bounds from above
        where the segment would end with the open block closed; rollover and index hints are
        checked exactly (``_Cursor.check``) only once it reaches the nearer of the two
        thresholds. A block is closed where the segment rolls over and where an index hint is
        due, so every hint points at a block start."""
        pending = cursor.state.pending_qos2
        append_digests = cursor.digests
        cache, flags_of, crc32 = self._topics, FLAGS, zlib.crc32
        block = cursor.block
        block_topic, seeds, ids, flags_out, pids, stamps, ends, payloads = block.appenders()
        estimate, total, watch = block.start + BLOCK_SLACK, 0, cursor.watch
        try:
            for topic, payload, qos, retain, dup, pid, stamp in records:
                if estimate >= watch:
                    cursor.offset = offset
                    watch = cursor.check(total, 0)
                    if cursor.block is not block:
                        block = cursor.block
                        block_topic, seeds, ids, flags_out, pids, stamps, ends, payloads = (
                            block.appenders()
                        )
                        estimate, total = block.start + BLOCK_SLACK, 0
                tid = block_topic(topic)
                if tid is None:
                    entry = cache.get(topic)
                    if entry is None:
                        entry = self._cache_topic(topic)
                    tid = block.add_topic(topic, entry)
                    estimate += 2 + len(entry[0])
                flags = flags_of.get((qos, retain, dup, pid is not None))
                if flags is None:
                    raise ValueError(f"invalid record at offset {offset}: qos={qos!r}")
                if qos:
                    if not pid:
                        raise ValueError(f"QoS {qos} record at offset {offset} needs a packet id")
                    append_digests[pid] = crc32(payload, seeds[tid])
                    if qos == 2 and pid not in pending:
                        pending.add(pid)
                        added.append(pid)
                size = len(payload)
                if size > MAX_PAYLOAD_BYTES:
                    raise ValueError(f"record at offset {offset} is too large ({size} bytes)")
                ids(tid)
                flags_out(flags)
                pids(pid or 0)
                stamps(stamp)
                total += size
                ends(total)
                payloads(payload)
                estimate += ROW_BYTES + size
                offset += 1
        except (OverflowError, struct.error) as exc:
            raise ValueError(f"record at offset {offset} has a field out of range: {exc}") from exc
        cursor.offset = offset
        return offset

    def _rows_with_properties(
        self,
        records: Sequence[PropertiesRecordTuple],
        cursor: _Cursor,
        offset: int,
        added: list[int],
    ) -> int:
        """:meth:`_rows` for records with a ``properties`` field: the same loop, which also
        keeps each row's property bytes (a row's payload and properties together are held to
        the payload limit, as one PUBLISH holds both). The two loops stay apart on purpose: a
        shared per-row helper or a properties check in ``_rows`` would cost every 3.1.1 row."""
        pending = cursor.state.pending_qos2
        append_digests = cursor.digests
        cache, flags_of, crc32 = self._topics, FLAGS, zlib.crc32
        block = cursor.block
        block_topic, seeds, ids, flags_out, pids, stamps, ends, payloads = block.appenders()
        property_ends, properties_out = block.property_appenders()
        estimate, total, property_total = block.start + BLOCK_SLACK, 0, 0
        watch = cursor.watch
        try:
            for topic, payload, qos, retain, dup, pid, stamp, properties in records:
                if estimate >= watch:
                    cursor.offset = offset
                    watch = cursor.check(total, property_total)
                    if cursor.block is not block:
                        block = cursor.block
                        block_topic, seeds, ids, flags_out, pids, stamps, ends, payloads = (
                            block.appenders()
                        )
                        property_ends, properties_out = block.property_appenders()
                        estimate, total, property_total = block.start + BLOCK_SLACK, 0, 0
                tid = block_topic(topic)
                if tid is None:
                    entry = cache.get(topic)
                    if entry is None:
                        entry = self._cache_topic(topic)
                    tid = block.add_topic(topic, entry)
                    estimate += 2 + len(entry[0])
                flags = flags_of.get((qos, retain, dup, pid is not None))
                if flags is None:
                    raise ValueError(f"invalid record at offset {offset}: qos={qos!r}")
                if qos:
                    if not pid:
                        raise ValueError(f"QoS {qos} record at offset {offset} needs a packet id")
                    append_digests[pid] = crc32(payload, seeds[tid])
                    if qos == 2 and pid not in pending:
                        pending.add(pid)
                        added.append(pid)
                size = len(payload)
                extra = len(properties)
                if size + extra > MAX_PAYLOAD_BYTES:
                    raise ValueError(
                        f"record at offset {offset} is too large ({size} payload and {extra} "
                        "property bytes)"
                    )
                ids(tid)
                flags_out(flags)
                pids(pid or 0)
                stamps(stamp)
                total += size
                ends(total)
                payloads(payload)
                property_total += extra
                property_ends(property_total)
                properties_out(properties)
                estimate += PROPERTIES_ROW_BYTES + size + extra
                offset += 1
        except (OverflowError, struct.error) as exc:
            raise ValueError(f"record at offset {offset} has a field out of range: {exc}") from exc
        cursor.offset = offset
        return offset

    def _cache_topic(self, topic: str) -> tuple[bytes, int]:
        """A topic's UTF-8 bytes and the crc32 seed of its digest; cached."""
        raw = topic.encode("utf-8")
        if len(raw) > MAX_TOPIC_BYTES:
            raise ValueError(f"topic is {len(raw)} bytes, the limit is {MAX_TOPIC_BYTES}")
        if len(self._topics) >= _TOPIC_CACHE_LIMIT:
            self._topics.clear()
        entry = self._topics[topic] = (raw, digest_seed(raw))
        return entry


class _Cursor:
    """Where one append stands: the segment writes so far, the open block, the digests
    collected since the last snapshot, and the thresholds of the next rollover and index
    hint. The hot loops call :meth:`check` only when their estimate reaches ``watch``."""

    __slots__ = (
        "block",
        "digests",
        "identity",
        "index_next",
        "limit",
        "offset",
        "old_digests",
        "properties",
        "segment_first",
        "state",
        "version",
        "watch",
        "write",
        "writes",
    )

    def __init__(
        self,
        encoder: tuple[bytes, int, int],
        state: QosState,
        old_digests: dict[int, int | None],
        write: SegmentWrite,
        segment_first: int,
        pos: int,
        index_next: int,
    ) -> None:
        self.identity, self.limit, self.version = encoder  # the encoder's identity, limit, version
        self.state = state
        self.old_digests = old_digests
        self.write = write
        self.writes = [write]
        self.segment_first = segment_first
        self.offset = write.first_offset
        self.index_next = index_next
        self.digests: dict[int, int] = {}
        self.block = _OpenBlock(write.first_offset, pos)
        self.properties = False
        # 0: check again at the next record, once this segment holds data.
        self.watch = min(self.limit, index_next) if self.offset > segment_first else 0

    def close_block(self) -> list[bytes]:
        """The open block's record, noting whether it is one with properties (kind 6)."""
        if self.block.property_ends[-1]:
            self.properties = True
        return self.block.encode()

    def check(self, payload_bytes: int, property_bytes: int) -> int:
        """Before the record at ``self.offset``, with the open block holding these bytes: roll
        the segment over or add an index hint where due (closing the block: the caller then
        starts filling ``self.block`` anew); returns the next ``watch``."""
        offset, block, limit = self.offset, self.block, self.limit
        has_data = offset > self.segment_first
        here = block.end_position(payload_bytes, property_bytes)
        if here < self.watch:
            return self.watch
        write = self.write
        closed = False
        if here >= limit and has_data:
            if len(block.flags):
                write.parts.extend(self.close_block())
            write.end_offset, write.seal = offset, True
            self.state.merge(self.digests, undo=self.old_digests)
            self.digests.clear()
            prefix = segment_prefix(self.identity, offset, self.state, self.version)
            write = self.write = SegmentWrite(offset, [prefix], new_segment=True)
            self.writes.append(write)
            self.segment_first = offset
            here, has_data, closed = len(prefix), False, True
            self.index_next = here + INDEX_INTERVAL
        if here >= self.index_next:
            if not closed and len(block.flags):
                write.parts.extend(self.close_block())
                closed = True
            write.index.append((offset, here))
            self.index_next = here + INDEX_INTERVAL
        if closed:
            self.block = _OpenBlock(offset, here)
        self.watch = min(limit, self.index_next) if has_data else 0
        return self.watch


class _OpenBlock:
    """The columns of the data block being encoded, starting at segment byte ``start``.
    ``property_ends`` and ``properties`` are filled by the loop for records with properties
    only; the block is kind 6 when they hold a byte."""

    __slots__ = (
        "ends",
        "first",
        "flags",
        "names",
        "packet_ids",
        "payloads",
        "properties",
        "property_ends",
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
        self.packet_ids = array("H")
        self.timestamps = array("q")
        self.ends = array("i", [0])
        self.payloads: list[bytes] = []
        self.property_ends = array("i", [0])
        self.properties: list[bytes] = []

    def appenders(self) -> _Appenders:
        """The bound methods the hot loop calls per row (and the seeds list)."""
        return (
            self.topics.get,
            self.seeds,
            self.topic_ids.append,
            self.flags.append,
            self.packet_ids.append,
            self.timestamps.append,
            self.ends.append,
            self.payloads.append,
        )

    def property_appenders(self) -> tuple[Callable[[int], None], Callable[[bytes], None]]:
        """The bound methods the loop for records with properties calls per row as well:
        property end, property bytes."""
        return self.property_ends.append, self.properties.append

    def add_topic(self, topic: str, entry: tuple[bytes, int]) -> int:
        """Add a topic to the block's table; returns its index."""
        tid = self.topics[topic] = len(self.names)
        self.names.append(entry[0])
        self.seeds.append(entry[1])
        self.table_bytes += 2 + len(entry[0])
        return tid

    def end_position(self, payload_bytes: int, property_bytes: int = 0) -> int:
        """The segment size once this block (holding ``payload_bytes`` and ``property_bytes``)
        is written."""
        count = len(self.flags)
        if not count:
            return self.start
        size = body_size(count, self.table_bytes, payload_bytes, property_bytes)
        return self.start + FRAME_SIZE + 1 + size

    def encode(self) -> list[bytes]:
        """The framed block record as parts: kind 6 when a row has property bytes."""
        with_properties = self.property_ends[-1] > 0
        return encode_block(
            self.first,
            self.names,
            self.timestamps,
            self.packet_ids,
            self.flags,
            self.topic_ids,
            self.ends,
            self.payloads,
            self.property_ends if with_properties else None,
            self.properties if with_properties else None,
        )
