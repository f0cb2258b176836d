"""Encoding one append batch into per-segment chunks, updating the QoS state on the way.

Encoding happens before any byte is written, so an invalid record (bad QoS, missing packet
id, field out of range) raises ValueError with the QoS state restored and nothing written.
Releases are applied before the batch's records. A segment rolls over before a data record
when it already holds data and is at least ``segment_max_bytes`` long; the new segment starts
with a snapshot of the state as of that record.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .records import (
    DATA_HEAD,
    FLAGS,
    FRAME,
    FRAME_SIZE,
    KIND_DATA,
    KIND_STATE,
    MAX_RECORD_LENGTH,
    MAX_TOPIC_BYTES,
    RecordTuple,
    encode_record,
    encode_release,
)
from .segment import INDEX_INTERVAL, encode_header
from .state import QosState

_TOPIC_CACHE_LIMIT = 4096


@dataclass(slots=True)
class Chunk:
    """Encoded bytes of one batch destined for one segment."""

    first_offset: int
    parts: list[bytes]
    new_segment: bool  # parts start with a header + state snapshot: create the file
    index: list[tuple[int, int]] = field(default_factory=list)  # (offset, byte position)
    end_offset: int = 0
    seal: bool = False  # seal (and fsync) the segment after writing the parts


@dataclass(slots=True)
class Batch:
    """An encoded batch: its chunks and where the next index hint is due afterwards."""

    chunks: list[Chunk]
    index_next: int

    @property
    def end_offset(self) -> int:
        """The next_offset once the batch is durable."""
        return self.chunks[-1].end_offset


def segment_prefix(identity: bytes, first_offset: int, state: QosState) -> bytes:
    """Header plus state snapshot: the first bytes of every segment."""
    return encode_header(identity, first_offset) + encode_record(KIND_STATE, state.encode())


class BatchEncoder:
    """Encodes batches for one WAL; keeps a cache of encoded topics."""

    __slots__ = ("_identity", "_limit", "_topics")

    def __init__(self, identity: bytes, segment_max_bytes: int) -> None:
        self._identity = identity
        self._limit = segment_max_bytes
        self._topics: dict[str, tuple[bytes, int, Callable[..., bytes], int]] = {}

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
    ) -> Batch | None:
        """Encode a batch appended at ``next_offset`` to a segment of ``segment_size`` bytes.

        Updates ``state``; returns None when there is nothing to write (no records, no
        release of a pending id). On any error ``state`` is restored and the error raised.
        """
        pending, digests = state.pending_qos2, state.digests
        released = [mid for mid in dict.fromkeys(released_qos2) if mid in pending]
        if not records and not released:
            return None
        added: list[int] = []
        old_digests: dict[int, int | None] = {}
        pending.difference_update(released)
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
            pending.difference_update(added)
            pending.update(released)
            for mid, digest in old_digests.items():
                if digest is None:
                    digests.pop(mid, None)
                else:
                    digests[mid] = digest
            raise

    def _encode(
        self,
        records: Sequence[RecordTuple],
        released: list[int],
        state: QosState,
        added: list[int],
        old_digests: dict[int, int | None],
        position: tuple[int, int, int, int],
    ) -> Batch:
        """The hot loop of :meth:`encode`; records undo information in the two collections.

        Message digests of the batch are collected in a dict of their own and merged into the
        state at the end (or before a segment snapshot), so only those merges need undo
        information. Rollover and index hints are checked only once ``pos`` reaches the nearer
        of the two thresholds."""
        offset, segment_first, pos, index_next = position
        chunk = Chunk(offset, [], new_segment=False)
        chunks = [chunk]
        parts = chunk.parts
        if released:
            release = encode_release(released)
            parts.append(release)
            pos += len(release)
        has_data = offset > segment_first
        limit = self._limit
        # 0: check again at the next record, once this segment holds data.
        watch = min(limit, index_next) if has_data else 0
        pending, digests = state.pending_qos2, state.digests
        batch_digests: dict[int, int] = {}
        topics, flags_of, crc32 = self._topics, FLAGS, zlib.crc32
        pack_frame = FRAME.pack
        extend = parts.extend
        try:
            for topic, payload, qos, retained, duplicate, mid, stamp in records:
                if pos >= watch:
                    if pos >= limit and has_data:
                        chunk.end_offset, chunk.seal = offset, True
                        _merge_digests(digests, batch_digests, old_digests)
                        prefix = segment_prefix(self._identity, offset, state)
                        chunk = Chunk(offset, [prefix], new_segment=True)
                        chunks.append(chunk)
                        parts, pos, has_data = chunk.parts, len(prefix), False
                        extend = parts.extend
                        index_next = pos + INDEX_INTERVAL
                    if pos >= index_next:
                        chunk.index.append((offset, pos))
                        index_next = pos + INDEX_INTERVAL
                    watch = min(limit, index_next) if has_data else 0
                entry = topics.get(topic)
                if entry is None:
                    entry = self._cache_topic(topic)
                flags = flags_of.get((qos, retained, duplicate, mid is not None))
                if flags is None:
                    raise ValueError(f"invalid record at offset {offset}: qos={qos!r}")
                if qos:
                    if not mid:
                        raise ValueError(f"QoS {qos} record at offset {offset} needs a message id")
                    batch_digests[mid] = crc32(payload, entry[1])
                    if qos == 2 and mid not in pending:
                        pending.add(mid)
                        added.append(mid)
                head = entry[2](KIND_DATA, offset, stamp, flags, mid or 0, entry[3], entry[0])
                length = len(head) + len(payload)
                if length > MAX_RECORD_LENGTH:
                    raise ValueError(f"record at offset {offset} is too large ({length} bytes)")
                extend((pack_frame(length, crc32(payload, crc32(head))), head, payload))
                pos += FRAME_SIZE + length
                offset += 1
                has_data = True
        except struct.error as exc:
            raise ValueError(f"record at offset {offset} has a field out of range: {exc}") from exc
        _merge_digests(digests, batch_digests, old_digests)
        chunk.end_offset = offset
        return Batch(chunks, index_next)

    def _cache_topic(self, topic: str) -> tuple[bytes, int, Callable[..., bytes], int]:
        """A topic's UTF-8 bytes, the crc32 seed of its digest, the packer of a data record
        head ending with that topic, and the topic's length; cached."""
        raw = topic.encode("utf-8")
        if len(raw) > MAX_TOPIC_BYTES:
            raise ValueError(f"topic is {len(raw)} bytes, the limit is {MAX_TOPIC_BYTES}")
        if len(self._topics) >= _TOPIC_CACHE_LIMIT:
            self._topics.clear()
        head = struct.Struct(f"{DATA_HEAD.format}{len(raw)}s")
        entry = self._topics[topic] = (raw, zlib.crc32(raw + b"\0"), head.pack, len(raw))
        return entry


def _merge_digests(
    digests: dict[int, int], batch: dict[int, int], old: dict[int, int | None]
) -> None:
    """Move the batch's QoS 1 digests into the state, keeping the values they replace."""
    if not batch:
        return
    get = digests.get
    for mid in batch.keys() - old.keys():
        old[mid] = get(mid)
    digests.update(batch)
    batch.clear()
