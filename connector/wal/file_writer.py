"""The single writer: group-committed appends, segment rollover, truncation, QoS state.

Durability rule: :meth:`WalWriter.append` returns only after the append's bytes are fsynced
(one fsync per append, plus the directory when a segment file is created), so anything below
the returned ``next_offset`` survives a crash and may be acknowledged to the broker.
After a write or fsync error the writer cuts the failed bytes off (best effort), refuses
all further appends and must be reopened; reopen recovers the last fsynced state. When an
append spans a segment rollover, the part before the rollover may survive such a failure:
those messages were never acknowledged, so the broker redelivers them and the QoS state
lets the receiver drop the redeliveries.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

from .appends import AppendEncoder, SegmentWrite, segment_prefix
from .errors import WalCorruptError, WalWriteError
from .identity import read_meta, write_identity
from .lock import WalLock
from .records import RecordTuple, encode_seal
from .recovery import ActiveSegment, recover_log, remove_leftovers
from .segment import (
    FORMAT_VERSION,
    INDEX_INTERVAL,
    PROPERTIES_VERSION,
    create_segment,
    encode_index,
    fsync_dir,
    index_name,
    list_segments,
    open_index,
    read_header,
    segment_name,
    write_all,
)
from .state import QosState
from .views import WriterState

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_MAX_BYTES = 64 * 1024 * 1024


class WalWriter(WriterState):
    """Appends records durably to a WAL directory; one writer per directory (see WalLock)."""

    def __init__(
        self,
        root: Path,
        identity: str,
        lock: WalLock,
        segments: list[int],
        active: ActiveSegment,
        *,
        segment_max_bytes: int,
        fsync: bool,
        version: int = FORMAT_VERSION,
    ) -> None:
        """Use :meth:`open`; this adopts an already recovered, locked directory whose
        ``wal.json`` says format ``version``."""
        self._root = root
        self._identity = identity
        self._version = version
        self._lock = lock
        self._mutex = threading.Lock()
        self._fsync = fsync
        self._segments = segments
        self._next_offset = active.next_offset
        self._state = active.state
        self._encoder = AppendEncoder(bytes.fromhex(identity), segment_max_bytes, version)
        self._failure: BaseException | None = None
        self._closed = False
        self._seg_first = active.first_offset
        self._seg_size = active.size
        self._seg_crc = active.crc
        self._durable_size = active.size
        self._index_next = active.index_next
        self._init_sealed({f: os.stat(root / segment_name(f)).st_size for f in segments[:-1]})
        self._fd = os.open(root / segment_name(active.first_offset), os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.lseek(self._fd, active.size, os.SEEK_SET)
            self._index_fd = open_index(root, active.first_offset, active.index)
        except BaseException:
            os.close(self._fd)
            raise

    # ----------------------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES,
        fsync: bool = True,
    ) -> WalWriter:
        """Lock, create or recover the WAL at ``path`` and return a writer positioned at its end.

        Raises WalLockedError when another writer holds the directory and WalCorruptError
        when durable data is damaged (a torn tail of the last segment is cut, not an error).
        """
        if segment_max_bytes <= 0:
            raise ValueError(f"segment_max_bytes must be positive, got {segment_max_bytes}")
        root = Path(path)
        make_directory(root, fsync=fsync)
        lock = WalLock.acquire(root)
        try:
            writer = cls._recover(root, lock, segment_max_bytes=segment_max_bytes, fsync=fsync)
        except BaseException:
            lock.release()
            raise
        writer._log_opened(root, "")
        return writer

    @classmethod
    def _recover(
        cls, root: Path, lock: WalLock, *, segment_max_bytes: int, fsync: bool
    ) -> WalWriter:
        """Establish the identity, validate and repair segments, and build the writer."""
        remove_leftovers(root, list_segments(root))
        meta = read_meta(root)
        identity = None if meta is None else meta[0]
        version = FORMAT_VERSION if meta is None else meta[1]
        firsts = list_segments(root)
        if identity is None:
            if firsts:  # crashed between creating segment 0 and wal.json
                identity = read_header(root / segment_name(firsts[0])).identity.hex()
            else:
                identity = uuid.uuid4().hex
                prefix = segment_prefix(bytes.fromhex(identity), 0, QosState())
                os.close(create_segment(root, 0, prefix, fsync=fsync))
                firsts = [0]
            write_identity(root, identity, fsync=fsync)
        elif not firsts:
            raise WalCorruptError(
                root / "wal.json", 0, "the WAL has an identity but no segment files"
            )
        active = recover_log(root, firsts, bytes.fromhex(identity), fsync=fsync)
        remove_leftovers(root, firsts)
        if active.sealed:  # crashed between sealing a segment and creating the next one
            prefix = segment_prefix(
                bytes.fromhex(identity), active.next_offset, active.state, version
            )
            os.close(create_segment(root, active.next_offset, prefix, fsync=fsync))
            firsts.append(active.next_offset)
            active = ActiveSegment(
                first_offset=active.next_offset,
                next_offset=active.next_offset,
                size=len(prefix),
                crc=zlib.crc32(prefix),
                sealed=False,
                state=active.state,
                index_next=len(prefix) + INDEX_INTERVAL,
            )
        return cls(
            root,
            identity,
            lock,
            firsts,
            active,
            segment_max_bytes=segment_max_bytes,
            fsync=fsync,
            version=version,
        )

    # ----------------------------------------------------------------------------- properties

    @property
    def path(self) -> Path:
        """The WAL directory."""
        return self._root

    # ----------------------------------------------------------------------------- appending

    def append(self, records: Sequence[RecordTuple], *, released_qos2: Iterable[int] = ()) -> int:
        """Durably append ``records`` (offsets assigned in order) and QoS 2 releases.

        Releases are applied before the records. Returns the new next_offset after ONE fsync.
        Invalid records raise ValueError/TypeError and change nothing; I/O errors raise
        WalWriteError and poison the writer.
        """
        with self._mutex:
            self._check_usable()
            encoded = self._encoder.encode(
                records,
                released_qos2,
                self._state,
                next_offset=self._next_offset,
                segment_first=self._seg_first,
                segment_size=self._seg_size,
                index_next=self._index_next,
            )
            if encoded is None:
                return self._next_offset
            try:
                if encoded.properties and self._version < PROPERTIES_VERSION:
                    self._upgrade_for_properties()
                self._write(encoded.writes)
            except OSError as exc:
                self._fail(exc)
                raise WalWriteError(
                    f"could not append {len(records)} records to WAL {self._root} at offset "
                    f"{self._next_offset}: {exc}; the append is not durable, reopen the WAL"
                ) from exc
            self._index_next = encoded.index_next
            self._next_offset = encoded.end_offset
            return self._next_offset

    def _upgrade_for_properties(self) -> None:
        """Before the first data block with properties (kind 6): ``wal.json`` says format
        version 3, so a reader that knows only version 2 refuses the WAL instead of meeting a
        record kind it does not know. Segments started from now on say version 3 as well."""
        write_identity(self._root, self._identity, fsync=self._fsync, version=PROPERTIES_VERSION)
        log.info(
            "WAL %s: format version %d upgraded to %d (data blocks with MQTT 5 properties)",
            self._root,
            self._version,
            PROPERTIES_VERSION,
        )
        self._version = self._encoder.version = PROPERTIES_VERSION

    def _write(self, writes: list[SegmentWrite]) -> None:
        """Write the encoded segment writes, rolling segments over; ends with the append's fsync."""
        unsynced = False
        for write in writes:
            data = b"".join(write.parts)
            if write.new_segment:
                self._start_segment(write.first_offset, data)
                unsynced = False
            elif data:
                write_all(self._fd, data)
                self._seg_size += len(data)
                self._seg_crc = zlib.crc32(data, self._seg_crc)
                unsynced = True
            if write.index:
                write_all(self._index_fd, encode_index(write.index))
            if write.seal:
                seal = encode_seal(write.end_offset, self._seg_crc)
                write_all(self._fd, seal)
                self._seg_size += len(seal)
                self._sync()
                unsynced = False
                log.debug(
                    "WAL %s: sealed segment %d at offset %d",
                    self._root,
                    self._seg_first,
                    write.end_offset,
                )
        if unsynced:
            self._sync()

    def _sync(self) -> None:
        """fsync the active segment; everything written to it so far is now durable."""
        if self._fsync:
            os.fsync(self._fd)
        self._durable_size = self._seg_size

    def _start_segment(self, first_offset: int, data: bytes) -> None:
        """Create the next segment holding ``data`` and make it the active one."""
        fd = create_segment(self._root, first_offset, data, fsync=self._fsync)
        self._note_sealed(self._seg_first, self._seg_size)
        old_fd, old_index_fd = self._fd, self._index_fd
        self._fd = fd
        self._segments.append(first_offset)
        self._seg_first, self._seg_size = first_offset, len(data)
        self._seg_crc = zlib.crc32(data)
        self._durable_size = len(data)
        os.close(old_fd)
        os.close(old_index_fd)
        self._index_fd = -1
        self._index_fd = open_index(self._root, first_offset, [])

    def _fail(self, exc: OSError) -> None:
        """Poison the writer and cut unsynced bytes of the failed append off the active segment."""
        self._failure = exc
        log.error("WAL %s: append failed, writer disabled until reopened: %s", self._root, exc)
        try:
            os.ftruncate(self._fd, self._durable_size)
            if self._fsync:
                os.fsync(self._fd)
        except OSError as cleanup_exc:
            log.warning(
                "WAL %s: could not cut the failed append off %s: %s (reopen will recover)",
                self._root,
                segment_name(self._seg_first),
                cleanup_exc,
            )

    # ----------------------------------------------------------------------------- truncating

    def truncate_before(self, offset: int) -> int:
        """Delete whole segments all of whose records are below ``offset``; returns how many.

        The active segment is never deleted. Deletion goes oldest first, so the stored
        offsets always stay one gap-free range.
        """
        with self._mutex:
            self._check_usable()
            deleted = 0
            try:
                while len(self._segments) > 1 and self._segments[1] <= offset:
                    first = self._segments[0]
                    os.unlink(self._root / segment_name(first))
                    self._segments.pop(0)
                    self._forget_sealed(first)
                    deleted += 1
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self._root / index_name(first))
                if deleted and self._fsync:
                    fsync_dir(self._root)
            except OSError as exc:
                raise WalWriteError(
                    f"could not delete old segments of WAL {self._root}: {exc}"
                ) from exc
            if deleted:
                log.debug(
                    "WAL %s: deleted %d segment(s) below offset %d, first offset now %d",
                    self._root,
                    deleted,
                    offset,
                    self._segments[0],
                )
            return deleted

    # ----------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Close files and release the lock; later calls do nothing."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            for fd in (self._fd, self._index_fd):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._lock.release()

    def __repr__(self) -> str:
        return (
            f"WalWriter({str(self._root)!r}, offsets=[{self.first_offset}, {self._next_offset}), "
            f"segments={len(self._segments)})"
        )


def make_directory(root: Path, *, fsync: bool) -> None:
    """Create ``root`` and its missing parents (mode 0o700: a shard's WAL sits under the
    query's ``walPath``) and make the new directory entries durable. An existing ``root`` that
    group or others may enter is made owner-only: the WAL holds the payloads."""
    created: list[Path] = []
    missing = root
    while not missing.exists():
        created.append(missing)
        missing = missing.parent
    for directory in reversed(created):
        directory.mkdir(mode=0o700, exist_ok=True)
    if not created and root.stat().st_mode & 0o077:
        os.chmod(root, 0o700)
    if fsync:
        for directory in reversed(created):
            fsync_dir(directory.parent)
