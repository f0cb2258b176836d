"""The hot decoding loop: turn a buffer of records into columns (or raw data frames).

Used by the reader for segment files and by the blob codec. Every record is CRC-checked and
every data record's offset (a data block's first offset) must be the next expected one, so
gaps or reordering are caught. A data block (kind 5, or 6 with properties) whose rows reach
into [start, end) is kept whole (raw) or as a piece of only those rows; rows outside are never
looked at.
"""

from __future__ import annotations

import zlib
from array import array

from .block import decode_block
from .columns import ColumnPiece, WalColumns
from .errors import WalCorruptError
from .records import (
    BLOCK_HEAD,
    BLOCK_HEAD_LENGTH,
    DATA_FIELDS,
    DATA_FIELDS_AT,
    DATA_HEAD_SIZE,
    FRAME_KIND,
    FRAME_SIZE,
    KIND_BLOCK,
    KIND_DATA,
    KIND_PROPERTIES_BLOCK,
    KIND_RELEASE,
    KIND_SEAL,
    KIND_STATE,
    MAX_RECORD_LENGTH,
    OFFSET_AT,
    SEAL_BODY,
    TOPIC_AT,
)

NEED_MORE = 0  # the buffer ends before the next needed record is complete
DONE = 1  # every offset below ``end`` has been consumed
SEALED = 2  # a seal record ended the segment; ``pos`` is the seal's position

_RUN_PAYLOAD_LIMIT = 1 << 30  # payload bytes of version 1 rows gathered into one piece


class DataSink:
    """Collects data rows: as column pieces, or (``raw=True``) as undecoded frames for a blob.

    Rows of a data block become one piece that shares the block's buffer. Rows of version 1
    data records are gathered into machine arrays (topics as indexes into a per-sink
    dictionary of distinct topics) and become a piece when a block or the end interrupts them.
    """

    __slots__ = (
        "flags",
        "packet_ids",
        "payload_data",
        "payload_ends",
        "pieces",
        "raw",
        "timestamps",
        "topic_ids",
        "topic_index",
        "topic_names",
    )

    def __init__(self, *, raw: bool = False) -> None:
        self.topic_names: list[str] = []
        self.topic_index: dict[bytes, int] = {}
        self.topic_ids = array("i")
        self.flags = bytearray()
        self.packet_ids = array("H")
        self.timestamps = array("q")
        self.payload_ends = array("i", [0])
        self.payload_data = bytearray()
        self.pieces: list[ColumnPiece] = []
        self.raw: list[memoryview] | None = [] if raw else None

    def __len__(self) -> int:
        if self.raw is not None:
            return len(self.raw)
        return sum(len(piece) for piece in self.pieces) + len(self.flags)

    def flush(self) -> None:
        """Turn the gathered version 1 rows into a piece (copies), and start gathering anew."""
        if not self.flags:
            return
        self.pieces.append(
            ColumnPiece(
                self.topic_names,  # only grows, so the indexes stay valid
                array("i", self.topic_ids),
                bytes(self.flags),
                array("H", self.packet_ids),
                array("q", self.timestamps),
                array("i", self.payload_ends),
                bytes(self.payload_data),
            )
        )
        del self.topic_ids[:], self.packet_ids[:], self.timestamps[:], self.payload_ends[1:]
        self.flags.clear()
        self.payload_data.clear()

    def add_block(self, piece: ColumnPiece) -> None:
        """Append the rows in use of a decoded data block."""
        self.flush()
        self.pieces.append(piece)

    def columns(self, first_offset: int) -> WalColumns:
        """The collected rows as columns; their offsets start at ``first_offset``."""
        self.flush()
        return WalColumns(first_offset, self.pieces)


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
    index = sink.topic_index
    topic_ids = sink.topic_ids.append
    payload_data = sink.payload_data
    payload_ends = sink.payload_ends.append
    flags_out = sink.flags.append
    pids = sink.packet_ids.append
    stamps = sink.timestamps.append
    startswith = buf.startswith
    # The topic of the previous record: a run of records on one topic is matched in place.
    last_raw, last_len, last_id = b"", -1, -1
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
            offset, stamp, flags, pid, topic_len = unpack_fields(buf, pos + DATA_FIELDS_AT)
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
                    if topic_len != last_len or not startswith(last_raw, at):
                        last_raw, last_len = buf[at:topic_end], topic_len
                        last_id = index.get(last_raw, -1)
                        if last_id < 0:
                            last_id = _add_topic(last_raw, sink, where, base + pos)
                    topic_ids(last_id)
                    payload_data += view[topic_end:stop]
                    payload_ends(len(payload_data))
                    flags_out(flags)
                    pids(pid)
                    stamps(stamp)
                    if len(payload_data) > _RUN_PAYLOAD_LIMIT:
                        sink.flush()
            expected = offset + 1
        elif kind in (KIND_BLOCK, KIND_PROPERTIES_BLOCK):
            if length < BLOCK_HEAD_LENGTH:
                raise WalCorruptError(where, base + pos, f"data block too short ({length})")
            first, count, _ = BLOCK_HEAD.unpack_from(buf, pos + OFFSET_AT)
            if first != expected:
                raise WalCorruptError(
                    where, base + pos, f"expected offset {expected}, found offset {first}"
                )
            expected = first + count
            if expected > start:
                if raw is not None:
                    raw.append(view[pos:stop])
                else:
                    body = bytes(view[pos + OFFSET_AT : stop])
                    piece = decode_block(body, where, base + pos, kind)
                    sink.add_block(piece.rows(max(start - first, 0), min(end, expected) - first))
            pos = stop
            continue
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


def _add_topic(raw: bytes, sink: DataSink, where: str, position: int) -> int:
    """UTF-8 decode a topic new to ``sink`` and give it the next index."""
    try:
        topic = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WalCorruptError(where, position, f"topic is not UTF-8: {exc}") from exc
    topic_id = sink.topic_index[raw] = len(sink.topic_names)
    sink.topic_names.append(topic)
    return topic_id
