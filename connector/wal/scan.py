"""The hot decoding loop: turn a buffer of records into columns (or raw data frames).

Used by the reader for segment files and by the blob codec. Every record is CRC-checked and
every data block's first offset must be the next expected one, so gaps or reordering are
caught. A data block (kind 5, or 6 with properties) whose rows reach
into [start, end) is kept whole (raw) or as a piece of only those rows; rows outside are never
looked at.
"""

from __future__ import annotations

import zlib

from .block import decode_block
from .columns import ColumnPiece, WalColumns
from .errors import WalCorruptError
from .records import (
    BLOCK_HEAD,
    BLOCK_HEAD_LENGTH,
    FRAME_KIND,
    FRAME_SIZE,
    KIND_BLOCK,
    KIND_PROPERTIES_BLOCK,
    KIND_RELEASE,
    KIND_SEAL,
    KIND_STATE,
    MAX_RECORD_LENGTH,
    OFFSET_AT,
    SEAL_BODY,
)

NEED_MORE = 0  # the buffer ends before the next needed record is complete
DONE = 1  # every offset below ``end`` has been consumed
SEALED = 2  # a seal record ended the segment; ``pos`` is the seal's position


class DataSink:
    """Collects data rows: as column pieces, or (``raw=True``) as undecoded frames for a blob.

    The rows in use of each data block become one piece that shares the block's buffer.
    """

    __slots__ = ("pieces", "raw")

    def __init__(self, *, raw: bool = False) -> None:
        self.pieces: list[ColumnPiece] = []
        self.raw: list[memoryview] | None = [] if raw else None

    def __len__(self) -> int:
        if self.raw is not None:
            return len(self.raw)
        return sum(len(piece) for piece in self.pieces)

    def columns(self, first_offset: int) -> WalColumns:
        """The collected rows as columns; their offsets start at ``first_offset``."""
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

    ``expected`` is the offset the next data block must start at; rows with offsets in
    [start, end) go to ``sink``. Returns ``(pos, expected, status)`` where status is NEED_MORE,
    DONE or SEALED. Damage raises WalCorruptError naming ``where`` and byte ``base + pos``.
    """
    n = len(buf)
    view = memoryview(buf)
    unpack_frame = FRAME_KIND.unpack_from
    crc32 = zlib.crc32
    raw, pieces = sink.raw, sink.pieces
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
        if kind in (KIND_BLOCK, KIND_PROPERTIES_BLOCK):
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
                    pieces.append(piece.rows(max(start - first, 0), min(end, expected) - first))
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
