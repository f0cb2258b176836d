"""Lock-free reads of offset ranges, usable from any process while a writer appends.

The reader keeps no state between calls and never takes the writer's lock: it lists segment
files, seeks with the (validated) index hint, and decodes complete records only. Callers must
ask only for offsets below a ``next_offset`` the writer reported, i.e. durable ones.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from bisect import bisect_left, bisect_right
from pathlib import Path

from connector.wal.scan import NEED_MORE, SEALED, DataSink, scan

from .errors import WalCorruptError, WalDataLossError
from .identity import read_identity
from .records import (
    BLOCK_HEAD_LENGTH,
    FRAME,
    FRAME_SIZE,
    KIND_BLOCK,
    KIND_PROPERTIES_BLOCK,
    MAX_RECORD_LENGTH,
)
from .segment import HEADER_SIZE, decode_header, index_lookup, list_segments, segment_name
from .views import RangeReader

log = logging.getLogger(__name__)

_READ_SIZE = 1024 * 1024
_HINT_HEAD = struct.Struct("<IIBQ")  # length, crc32, kind, first offset
_SMALLEST_LENGTH = {KIND_BLOCK: BLOCK_HEAD_LENGTH, KIND_PROPERTIES_BLOCK: BLOCK_HEAD_LENGTH}


class WalReader(RangeReader):
    """Reads records of a WAL directory by offset range."""

    __slots__ = ("_identity", "_root")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._root = Path(path)
        self._identity: str | None = None

    @property
    def path(self) -> Path:
        """The WAL directory."""
        return self._root

    @property
    def identity(self) -> str | None:
        """The WAL's identity from ``wal.json``; None while the WAL does not exist."""
        if self._identity is None:
            self._identity = read_identity(self._root)
        return self._identity

    def first_offset(self) -> int | None:
        """Lowest offset that may still be stored (first segment), None without segments."""
        firsts = list_segments(self._root)
        return firsts[0] if firsts else None

    def _collect(self, start: int, end: int, sink: DataSink) -> None:
        """Feed every record of [start, end) to ``sink``, segment after segment."""
        identity = self.identity
        identity_bytes = bytes.fromhex(identity) if identity is not None else None
        firsts = list_segments(self._root)
        at = bisect_right(firsts, start) - 1
        if at < 0:
            if not firsts:
                raise WalDataLossError(self._root, start, end, "the WAL has no segment files")
            raise WalDataLossError(
                self._root,
                start,
                min(end, firsts[0]),
                f"deleted by truncation; the oldest stored offset is {firsts[0]}",
            )
        expected = start
        for_first = True
        while True:
            first = firsts[at]
            if not for_first and first != expected:
                raise WalCorruptError(
                    self._root / segment_name(first),
                    0,
                    f"gap between segments: records end at offset {expected} "
                    f"but the next segment starts at offset {first}",
                )
            expected, sealed = self._scan_segment(
                first, expected, start, end, sink, identity_bytes, use_index=for_first
            )
            if expected >= end:
                return
            if sealed:
                at += 1
                if at >= len(firsts):  # the writer rolled over after we listed
                    firsts = list_segments(self._root)
                    at = bisect_left(firsts, expected)
            if not sealed or at >= len(firsts):
                raise WalDataLossError(
                    self._root, expected, end, f"the log ends at offset {expected}"
                )
            for_first = False

    def _scan_segment(
        self,
        first: int,
        expected: int,
        start: int,
        end: int,
        sink: DataSink,
        identity: bytes | None,
        *,
        use_index: bool,
    ) -> tuple[int, bool]:
        """Scan one segment from ``expected`` (or its start); returns (next offset, sealed)."""
        file = self._root / segment_name(first)
        try:
            fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise WalDataLossError(
                self._root, expected, end, f"segment {file.name} was deleted by truncation"
            ) from None
        try:
            decode_header(os.pread(fd, HEADER_SIZE, 0), file, first, identity)
            pos, expected = HEADER_SIZE, first
            if use_index and start > first:
                hint = index_lookup(self._root, first, start)
                if hint is not None and _hint_is_valid(fd, *hint):
                    expected, pos = hint
            return self._scan_from(fd, file, first, pos, expected, start, end, sink)
        finally:
            os.close(fd)

    def _scan_from(
        self,
        fd: int,
        file: Path,
        first: int,
        pos: int,
        expected: int,
        start: int,
        end: int,
        sink: DataSink,
    ) -> tuple[int, bool]:
        """Read and decode from byte ``pos`` in bounded chunks until ``end``, a seal or EOF."""
        where = str(file)
        base, buf, at = pos, b"", 0
        rechecked = False
        while True:
            rest = len(buf) - at
            size = _READ_SIZE
            if rest >= FRAME_SIZE:  # make sure one read completes a large record
                length = FRAME.unpack_from(buf, at)[0]
                if length <= MAX_RECORD_LENGTH:
                    size = max(size, FRAME_SIZE + length - rest)
            data = os.pread(fd, size, base + len(buf))
            if not data:
                if rechecked:
                    raise WalCorruptError(
                        file, base + at, "segment is not sealed but a later segment exists"
                    )
                if not self._segment_after(file, first):
                    return expected, False
                rechecked = True  # sealed meanwhile: the seal is in the file now
                continue
            if at:
                buf, base, at = buf[at:] + data, base + at, 0
            else:
                buf = buf + data if buf else data
            at, expected, status = scan(buf, at, expected, start, end, sink, where, base)
            if status != NEED_MORE:
                return expected, status == SEALED

    def _segment_after(self, file: Path, first: int) -> bool:
        """Whether a segment newer than ``file`` exists (so ``file`` must end with a seal)."""
        later = [other for other in list_segments(self._root) if other > first]
        if later:
            log.debug("WAL %s: %s was sealed while being read", self._root, file.name)
        return bool(later)


def encode_range(path: str | os.PathLike[str], start: int, end: int) -> bytes:
    """Shorthand for ``WalReader(path).encode_range(start, end)``."""
    return WalReader(path).encode_range(start, end)


def _hint_is_valid(fd: int, offset: int, position: int) -> bool:
    """Whether an index hint points at an intact data block whose first offset is
    ``offset``."""
    head = os.pread(fd, _HINT_HEAD.size, position)
    if len(head) < _HINT_HEAD.size:
        return False
    length: int
    crc: int
    length, crc, kind, stored = _HINT_HEAD.unpack(head)
    smallest = _SMALLEST_LENGTH.get(kind)
    if smallest is None or not smallest <= length <= MAX_RECORD_LENGTH or stored != offset:
        return False
    body = os.pread(fd, length, position + FRAME_SIZE)
    return len(body) == length and zlib.crc32(body) == crc
