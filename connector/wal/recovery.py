"""Open-time validation and repair of a WAL directory (run by the writer under its lock).

Rules:

* Every non-last segment must be sealed: its seal's CRC of all preceding bytes must match and
  its end offset must equal the next segment's first offset. Anything else is corruption
  (WalCorruptError naming the file and byte position); nothing is repaired.
* The last (active) segment is scanned record by record (a data block, with properties or
  not, is one record; its rows rebuild the QoS state). Its header and leading state snapshot
  must be intact. The first record that is short, has a bad length or a bad CRC starts a
  torn tail: the file is cut there (fsynced, logged as a warning), so a torn or corrupt last
  block goes whole. A record with a valid CRC but wrong content (offset out of sequence,
  misplaced state record, a block whose layout does not add up) is corruption.
* Leftover ``*.tmp`` files and index hints without a segment are deleted.

Cost: one sequential read of every segment still kept (CRC at C speed) plus
a record-by-record Python scan of the active segment. Truncating committed segments keeps
this small.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import NoReturn

from .block import decode_block
from .columns import ColumnPiece
from .errors import WalCorruptError
from .records import (
    BLOCK_HEAD,
    FLAG_HAS_ID,
    FLAG_QOS_MASK,
    FRAME_KIND,
    FRAME_SIZE,
    KIND_BLOCK,
    KIND_PROPERTIES_BLOCK,
    KIND_RELEASE,
    KIND_SEAL,
    KIND_STATE,
    OFFSET_AT,
    SEAL_BODY,
    SEAL_RECORD_SIZE,
    decode_release,
    digest_seed,
    frame_problem,
)
from .segment import (
    HEADER_SIZE,
    INDEX_INTERVAL,
    INDEX_SUFFIX,
    TEMP_SUFFIX,
    decode_header,
    parse_name,
    segment_name,
)
from .state import QosState

log = logging.getLogger(__name__)

_CRC_CHUNK = 8 * 1024 * 1024


@dataclass(slots=True)
class ActiveSegment:
    """What the writer needs to continue appending to the last segment."""

    first_offset: int
    next_offset: int
    size: int
    crc: int
    sealed: bool
    state: QosState
    index: list[tuple[int, int]] = field(default_factory=list)
    index_next: int = 0


@dataclass(slots=True)
class SegmentWalk:
    """Result of walking one segment's records."""

    end: int  # position after the last intact record (or of the seal)
    expected: int  # offset the next data record would get
    state: QosState
    index: list[tuple[int, int]]
    index_next: int
    damage: str | None = None  # why the record at ``end`` is unusable
    sealed: bool = False


def recover_log(root: Path, firsts: list[int], identity: bytes, *, fsync: bool) -> ActiveSegment:
    """Validate all segments (first offsets ``firsts``, non-empty) and repair the last one."""
    for first, next_first in pairwise(firsts):
        verify_sealed_segment(root, first, identity, next_first)
    return recover_active_segment(root, firsts[-1], identity, fsync=fsync)


def remove_leftovers(root: Path, firsts: list[int]) -> None:
    """Delete temporary files and index hints whose segment is gone."""
    live = set(firsts)
    for name in os.listdir(root):
        indexed = parse_name(name, INDEX_SUFFIX)
        if name.endswith(TEMP_SUFFIX) or (indexed is not None and indexed not in live):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(root / name)
                log.info("removed leftover WAL file %s", root / name)


def verify_sealed_segment(root: Path, first: int, identity: bytes, next_first: int) -> None:
    """Check a non-last segment: header, seal, whole-file CRC and continuity with the next."""
    file = root / segment_name(first)
    with open(file, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(HEADER_SIZE)
        handle.seek(max(size - SEAL_RECORD_SIZE, 0))
        seal = handle.read(SEAL_RECORD_SIZE)
        handle.seek(0)
        crc, remaining = 0, max(size - SEAL_RECORD_SIZE, 0)
        while remaining:
            chunk = handle.read(min(remaining, _CRC_CHUNK))
            crc = zlib.crc32(chunk, crc)
            remaining -= len(chunk)
    if _seal_problem(head, seal, size, crc, file, first, identity):
        _raise_located(file.read_bytes(), file, first, identity)
    _check_continuity(seal, file.name, root / segment_name(next_first), next_first)


def verify_sealed_data(
    data: bytes, where: str, first: int, identity: bytes, next_first: int, next_where: str
) -> None:
    """The same checks as :func:`verify_sealed_segment` on a segment's bytes in memory."""
    seal = data[-SEAL_RECORD_SIZE:]
    crc = zlib.crc32(memoryview(data)[: max(len(data) - SEAL_RECORD_SIZE, 0)])
    if _seal_problem(data[:HEADER_SIZE], seal, len(data), crc, where, first, identity):
        _raise_located(data, where, first, identity)
    _check_continuity(seal, where, next_where, next_first)


def _seal_problem(
    head: bytes,
    seal: bytes,
    size: int,
    crc: int,
    where: str | Path,
    first: int,
    identity: bytes,
) -> bool:
    """Whether a sealed segment's seal is missing or does not match its bytes' CRC."""
    decode_header(head, where, first, identity)
    if size < HEADER_SIZE + SEAL_RECORD_SIZE:
        return True
    if frame_problem(seal, 0) is not None or seal[FRAME_SIZE] != KIND_SEAL:
        return True
    return bool(SEAL_BODY.unpack_from(seal, FRAME_SIZE + 1)[1] != crc)


def _check_continuity(seal: bytes, where: str, next_where: str | Path, next_first: int) -> None:
    """A sealed segment's end offset must be the next segment's first offset."""
    end_offset = SEAL_BODY.unpack_from(seal, FRAME_SIZE + 1)[0]
    if end_offset != next_first:
        raise WalCorruptError(
            next_where,
            0,
            f"gap between segments: {where} ends at offset {end_offset} "
            f"but the next segment starts at offset {next_first}",
        )


def recover_active_segment(
    root: Path, first: int, identity: bytes, *, fsync: bool
) -> ActiveSegment:
    """Scan the last segment, cut a torn tail, and rebuild the QoS state and index."""
    file = root / segment_name(first)
    data = file.read_bytes()
    decode_header(data[:HEADER_SIZE], file, first, identity)
    walk = walk_segment(data, file, first)
    size = walk.end + SEAL_RECORD_SIZE if walk.sealed else walk.end
    if size < len(data):
        reason = walk.damage or "bytes after the seal"
        log.warning(
            "WAL %s: cutting %d bytes of torn or corrupt tail at byte %d (%s); "
            "records from offset %d on were never acknowledged",
            file,
            len(data) - size,
            size,
            reason,
            walk.expected,
        )
        _cut(file, size, fsync=fsync)
    return ActiveSegment(
        first_offset=first,
        next_offset=walk.expected,
        size=size,
        crc=zlib.crc32(memoryview(data)[:size]),
        sealed=walk.sealed,
        state=walk.state,
        index=walk.index,
        index_next=walk.index_next,
    )


def _cut(file: Path, size: int, *, fsync: bool) -> None:
    """Truncate ``file`` to ``size`` bytes durably."""
    fd = os.open(file, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.ftruncate(fd, size)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _raise_located(data: bytes, file: str | Path, first: int, identity: bytes) -> NoReturn:
    """Find where a sealed segment that failed its checks is damaged, and raise there."""
    decode_header(data[:HEADER_SIZE], file, first, identity)
    walk = walk_segment(data, file, first)
    if walk.damage is not None:
        raise WalCorruptError(file, walk.end, walk.damage)
    if not walk.sealed:
        raise WalCorruptError(file, walk.end, "segment is not sealed but a later segment exists")
    if walk.end + SEAL_RECORD_SIZE != len(data):
        raise WalCorruptError(file, walk.end + SEAL_RECORD_SIZE, "bytes after the seal")
    raise WalCorruptError(file, walk.end, "segment contents do not match the seal's CRC")


def walk_segment(data: bytes, file: str | Path, first: int) -> SegmentWalk:
    """Walk a segment's records, stopping at the first unusable record or at the seal."""
    view = memoryview(data)
    pos = HEADER_SIZE
    problem = frame_problem(data, pos)
    if problem is None and data[pos + FRAME_SIZE] != KIND_STATE:
        problem = "first record is not a state snapshot"
    if problem is not None:
        raise WalCorruptError(file, pos, f"segment state snapshot is unusable: {problem}")
    stop = pos + FRAME_SIZE + FRAME_KIND.unpack_from(data, pos)[0]
    try:
        state = QosState.decode(view[pos + FRAME_SIZE + 1 : stop])
    except (ValueError, OverflowError) as exc:
        raise WalCorruptError(file, pos, f"segment state snapshot is malformed: {exc}") from exc
    pos = stop
    walk = SegmentWalk(
        end=pos, expected=first, state=state, index=[], index_next=pos + INDEX_INTERVAL
    )
    # QoS state updates of the records since the snapshot or the last release record:
    # merged into ``state`` before a release record is applied and at the end.
    digests: dict[int, int] = {}
    qos2_ids: list[int] = []
    expected, index_next, n = first, walk.index_next, len(data)
    while pos < n:
        problem = frame_problem(data, pos)
        if problem is not None:
            walk.damage = problem
            break
        length, _, kind = FRAME_KIND.unpack_from(data, pos)
        stop = pos + FRAME_SIZE + length
        if kind in (KIND_BLOCK, KIND_PROPERTIES_BLOCK):
            block_first, count, _ = BLOCK_HEAD.unpack_from(data, pos + OFFSET_AT)
            if block_first != expected:
                raise WalCorruptError(file, pos, f"expected offset {expected}, found {block_first}")
            piece = decode_block(bytes(view[pos + OFFSET_AT : stop]), str(file), pos, kind)
            if pos >= index_next:
                walk.index.append((block_first, pos))
                index_next = pos + INDEX_INTERVAL
            _collect_block(piece, digests, qos2_ids, file, pos)
            expected += count
        elif kind == KIND_RELEASE:
            try:
                released = decode_release(view[pos + FRAME_SIZE + 1 : stop])
            except ValueError as exc:
                raise WalCorruptError(file, pos, f"malformed release record: {exc}") from exc
            state.merge(digests, qos2_ids)
            digests.clear()
            qos2_ids.clear()
            state.apply_release(released)
        elif kind == KIND_SEAL:
            seal_end, seal_crc = SEAL_BODY.unpack_from(data, pos + FRAME_SIZE + 1)
            if seal_end != expected or seal_crc != zlib.crc32(view[:pos]):
                raise WalCorruptError(file, pos, "seal does not match the segment's records")
            walk.sealed = True
            break
        else:
            raise WalCorruptError(file, pos, "state snapshot in the middle of a segment")
        pos = stop
    state.merge(digests, qos2_ids)
    walk.end, walk.expected, walk.index_next = pos, expected, index_next
    return walk


def _collect_block(
    piece: ColumnPiece,
    digests: dict[int, int],
    qos2_ids: list[int],
    file: str | Path,
    pos: int,
) -> None:
    """Collect a data block's QoS state updates, as the writer did when encoding: the digest
    of each row with a packet id into ``digests``, the QoS 2 ones' ids into ``qos2_ids``."""
    crc32 = zlib.crc32
    seeds = [digest_seed(name.encode("utf-8")) for name in piece.topic_names]
    ids = piece.topic_ids
    if len(ids) and (min(ids) < 0 or max(ids) >= len(seeds)):
        raise WalCorruptError(file, pos, "data block names a topic its table does not hold")
    add_qos2 = qos2_ids.append
    pids, ends, data = piece.packet_ids, piece.payload_ends, piece.payload_data
    for row, flags in enumerate(piece.flags):
        if flags & FLAG_HAS_ID:
            pid = pids[row]
            digests[pid] = crc32(data[ends[row] : ends[row + 1]], seeds[ids[row]])
            if flags & FLAG_QOS_MASK == 2:
                add_qos2(pid)
