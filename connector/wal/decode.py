"""The hot decoding loop: turn a buffer of records into columns (or raw data frames).

Used by the reader for segment files and by the blob codec. Every record is CRC-checked and
every data record's offset must be the next expected one, so gaps or reordering are caught.
"""

from __future__ import annotations

import zlib

from .errors import WalCorruptError
from .records import (
    DATA_FIELDS,
    DATA_FIELDS_AT,
    DATA_HEAD_SIZE,
    DUPLICATE_OF,
    FLAG_HAS_ID,
    FRAME_KIND,
    FRAME_SIZE,
    KIND_DATA,
    KIND_RELEASE,
    KIND_SEAL,
    KIND_STATE,
    MAX_RECORD_LENGTH,
    QOS_OF,
    RETAINED_OF,
    SEAL_BODY,
    TOPIC_AT,
    WalColumns,
)

NEED_MORE = 0  # the buffer ends before the next needed record is complete
DONE = 1  # every offset below ``end`` has been consumed
SEALED = 2  # a seal record ended the segment; ``pos`` is the seal's position

_TOPIC_CACHE_LIMIT = 4096


class DataSink:
    """Collects data records: as columns, or (``raw=True``) as undecoded frames for a blob."""

    __slots__ = ("_topic_cache", "flags", "message_ids", "payloads", "raw", "timestamps", "topics")

    def __init__(self, *, raw: bool = False) -> None:
        self.topics: list[str] = []
        self.payloads: list[bytes] = []
        self.flags: list[int] = []
        self.message_ids: list[int] = []
        self.timestamps: list[int] = []
        self.raw: list[memoryview] | None = [] if raw else None
        self._topic_cache: dict[bytes, str] = {}

    def __len__(self) -> int:
        return len(self.raw) if self.raw is not None else len(self.flags)

    def columns(self, first_offset: int) -> WalColumns:
        """The collected records as columns; their offsets start at ``first_offset``."""
        flags = self.flags
        return WalColumns(
            offsets=list(range(first_offset, first_offset + len(flags))),
            topics=self.topics,
            payloads=self.payloads,
            qos=list(map(QOS_OF.__getitem__, flags)),
            retained=list(map(RETAINED_OF.__getitem__, flags)),
            duplicate=list(map(DUPLICATE_OF.__getitem__, flags)),
            message_ids=[
                mid if flag & FLAG_HAS_ID else None
                for flag, mid in zip(flags, self.message_ids, strict=True)
            ],
            timestamps_us=self.timestamps,
        )


def scan(
    buf: bytes,
    pos: int,
    expected: int,
    start: int,
    end: int,
    sink: DataSink,
    where: str,
    base: int,
) -> tuple[int, int, int]:
    """Consume records from ``buf[pos:]`` until offset ``end`` is reached.

    ``expected`` is the offset the next data record must carry; data records with offsets in
    [start, end) go to ``sink``. Returns ``(pos, expected, status)`` where status is NEED_MORE,
    DONE or SEALED. Damage raises WalCorruptError naming ``where`` and byte ``base + pos``.
    """
    n = len(buf)
    view = memoryview(buf)
    unpack_frame = FRAME_KIND.unpack_from
    unpack_fields = DATA_FIELDS.unpack_from
    crc32 = zlib.crc32
    raw = sink.raw
    cache = sink._topic_cache
    topics = sink.topics.append
    payloads = sink.payloads.append
    flags_out = sink.flags.append
    mids = sink.message_ids.append
    stamps = sink.timestamps.append
    while expected < end:
        if n - pos < FRAME_SIZE + 1:
            return pos, expected, NEED_MORE
        length, crc, kind = unpack_frame(buf, pos)
        stop = pos + FRAME_SIZE + length
        if stop > n:
            if length > MAX_RECORD_LENGTH or length < 1:
                raise WalCorruptError(where, base + pos, f"invalid record length {length}")
            return pos, expected, NEED_MORE
        if crc32(view[pos + FRAME_SIZE : stop]) != crc:
            raise WalCorruptError(where, base + pos, "record CRC mismatch")
        if kind == KIND_DATA:
            if length < DATA_HEAD_SIZE:
                raise WalCorruptError(where, base + pos, f"data record too short ({length})")
            offset, stamp, flags, mid, topic_len = unpack_fields(buf, pos + DATA_FIELDS_AT)
            if offset != expected:
                raise WalCorruptError(
                    where, base + pos, f"expected offset {expected}, found offset {offset}"
                )
            if offset >= start:
                if raw is not None:
                    raw.append(view[pos:stop])
                else:
                    at = pos + TOPIC_AT
                    topic_end = at + topic_len
                    if topic_end > stop:
                        raise WalCorruptError(where, base + pos, "topic runs past the record")
                    topic_bytes = buf[at:topic_end]
                    topic = cache.get(topic_bytes)
                    if topic is None:
                        topic = _decode_topic(topic_bytes, cache, where, base + pos)
                    topics(topic)
                    payloads(buf[topic_end:stop])
                    flags_out(flags)
                    mids(mid)
                    stamps(stamp)
            expected = offset + 1
        elif kind == KIND_SEAL:
            seal_end = SEAL_BODY.unpack_from(buf, pos + FRAME_SIZE + 1)[0]
            if seal_end != expected:
                raise WalCorruptError(
                    where, base + pos, f"seal says end offset {seal_end}, records end at {expected}"
                )
            return pos, expected, SEALED
        elif kind not in (KIND_RELEASE, KIND_STATE):
            raise WalCorruptError(where, base + pos, f"unknown record kind {kind}")
        pos = stop
    return pos, expected, DONE


def _decode_topic(raw: bytes, cache: dict[bytes, str], where: str, position: int) -> str:
    """UTF-8 decode a topic and remember it."""
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WalCorruptError(where, position, f"topic is not UTF-8: {exc}") from exc
    if len(cache) >= _TOPIC_CACHE_LIMIT:
        cache.clear()
    cache[raw] = topic
    return topic
