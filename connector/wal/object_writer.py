"""The single writer of a WAL in the object layout (:mod:`connector.wal.objects`).

Durability rule: :meth:`ObjectWalWriter.append` returns only after every part of the append
was written whole by the store (the write call returned), so anything below the returned
``next_offset`` may be acknowledged to the broker. An append is one part per segment it
touches, usually one. After a store error the writer refuses further appends and must be
reopened; reopening recovers what the store holds (a part whose write failed but landed
anyway holds records that were never acknowledged: the broker sends them again, as after an
fsync failure in the file layout). Segments roll over at ``segment_max_bytes`` or after
``segment_max_parts`` parts, so listing a segment stays one request. Deleting committed
segments runs in a background thread.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
import zlib
from collections.abc import Iterable, Sequence
from itertools import pairwise

from .appends import AppendEncoder, SegmentWrite, segment_prefix
from .errors import WalCorruptError, WalWriteError
from .identity import decode_meta, encode_meta
from .lease import DEFAULT_LEASE_SECONDS, Lease
from .location import WalLocation
from .objects import ObjectStore, Part, segment_dir, store_error
from .records import SEAL_RECORD_SIZE, RecordTuple, encode_seal
from .recovery import SegmentWalk, verify_sealed_data, walk_segment
from .segment import (
    FORMAT_VERSION,
    HEADER_SIZE,
    PROPERTIES_VERSION,
    decode_header,
    read_header_bytes,
    refuse_retired_header,
)
from .state import QosState
from .views import WriterState

log = logging.getLogger(__name__)

DEFAULT_OBJECT_SEGMENT_BYTES = 16 * 1024 * 1024
DEFAULT_SEGMENT_MAX_PARTS = 500
META_NAME = "wal.json"


class ObjectWalWriter(WriterState):
    """Appends records durably to a WAL in a store; one writer per WAL (see :mod:`.lease`)."""

    def __init__(
        self,
        store: ObjectStore,
        identity: str,
        lease: Lease,
        segments: list[int],
        state: QosState,
        tail: tuple[int, int, int, int, int],
        *,
        segment_max_bytes: int,
        segment_max_parts: int,
        version: int = FORMAT_VERSION,
        sealed_sizes: dict[int, int] | None = None,
    ) -> None:
        """Use :meth:`open`; ``tail`` is (active segment first offset, next offset, size,
        crc, parts) of a recovered, leased WAL whose ``wal.json`` says format ``version``;
        ``sealed_sizes`` the bytes of its other segments by first offset."""
        self._store = store
        self._identity = identity
        self._version = version
        self._lease = lease
        self._segments = segments
        self._state = state
        self._seg_first, self._next_offset, self._seg_size, self._seg_crc, self._parts = tail
        self._init_sealed(sealed_sizes or {})
        self._encoder = AppendEncoder(bytes.fromhex(identity), segment_max_bytes, version)
        self._limit = segment_max_bytes
        self._max_parts = segment_max_parts
        self._mutex = threading.Lock()
        self._failure: BaseException | None = None
        self._closed = False
        self._deletions: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._deleter = threading.Thread(target=self._delete_loop, name="wal-delete", daemon=True)
        self._deleter.start()

    # ----------------------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        location: WalLocation,
        *,
        segment_max_bytes: int = DEFAULT_OBJECT_SEGMENT_BYTES,
        segment_max_parts: int = DEFAULT_SEGMENT_MAX_PARTS,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        lease_wait: float | None = None,
    ) -> ObjectWalWriter:
        """Lease, create or recover the WAL at ``location`` and return a writer at its end.

        Raises WalLockedError when another writer holds a live lease after ``lease_wait``
        seconds (default: twice the lease time), WalCorruptError when stored data is
        damaged, WalWriteError when the store fails."""
        if segment_max_bytes <= 0 or segment_max_parts <= 0:
            raise ValueError("segment_max_bytes and segment_max_parts must be positive")
        store = ObjectStore(location)
        wait = 2 * lease_seconds if lease_wait is None else lease_wait
        try:
            lease = Lease.acquire(store, ttl=lease_seconds, wait=wait)
        except OSError as exc:
            raise store_error(store, "take the lease", exc) from exc
        try:
            writer = cls._recover(store, lease, segment_max_bytes, segment_max_parts)
        except OSError as exc:
            lease.release()
            raise store_error(store, "recover the WAL", exc) from exc
        except BaseException:
            lease.release()
            raise
        writer._log_opened(location, ", object layout")
        return writer

    @classmethod
    def _recover(
        cls, store: ObjectStore, lease: Lease, segment_max_bytes: int, segment_max_parts: int
    ) -> ObjectWalWriter:
        """Establish the identity, validate the segments, drop a torn last part."""
        meta = read_object_meta(store)
        identity = None if meta is None else meta[0]
        version = FORMAT_VERSION if meta is None else meta[1]
        firsts = store.segments()
        if identity is None:
            if firsts:  # died between writing segment 0 and wal.json
                head = store.read_part(firsts[0], store.parts(firsts[0])[0])
                identity = read_header_bytes(head, store.where(segment_dir(firsts[0]))).hex()
            else:
                identity = uuid.uuid4().hex
                prefix = segment_prefix(bytes.fromhex(identity), 0, QosState())
                store.write_part(0, 0, 0, prefix)
                firsts = [0]
            store.write(META_NAME, encode_meta(identity))
        elif not firsts:
            raise WalCorruptError(
                store.where(META_NAME), 0, "the WAL has an identity but no segments"
            )
        ident = bytes.fromhex(identity)
        sizes: dict[int, int] = {}
        for first, next_first in pairwise(firsts):
            data = b"".join(store.read_part(first, p) for p in store.parts(first))
            sizes[first] = len(data)
            where = store.where(segment_dir(first))
            verify_sealed_data(
                data, where, first, ident, next_first, store.where(segment_dir(next_first))
            )
        first = firsts[-1]
        data, parts, walk = _recover_last(store, first, ident)
        if walk is None and len(firsts) == 1:  # the only segment's first part was torn
            if first != 0:
                raise WalCorruptError(
                    store.where(segment_dir(first)),
                    0,
                    "the only segment's first part is torn and the segments before it, which "
                    "held the QoS state, were deleted by truncation",
                )
            log.warning("WAL %s: its first part was torn: made anew", store.where(segment_dir(0)))
            store.write_part(0, 0, 0, segment_prefix(ident, 0, QosState()))
            data, parts, walk = _recover_last(store, first, ident)
        elif walk is None:  # the last segment's first part was torn: the previous one is sealed
            firsts.pop()
            first = firsts[-1]
            data, parts, walk = _recover_last(store, first, ident)
        if walk is None:  # verified sealed above, so its first part is whole
            raise WalCorruptError(store.where(segment_dir(first)), 0, "segment has no parts")
        tail = (first, walk.expected, len(data), zlib.crc32(data), len(parts))
        writer = cls(
            store,
            identity,
            lease,
            firsts,
            walk.state,
            tail,
            segment_max_bytes=segment_max_bytes,
            segment_max_parts=segment_max_parts,
            version=version,
            sealed_sizes={f: sizes[f] for f in firsts[:-1]},
        )
        if walk.sealed:  # died between sealing a segment and starting the next
            writer._start_segment(walk.expected)
        return writer

    # ----------------------------------------------------------------------------- properties

    @property
    def path(self) -> str:
        """The WAL's location (safe to log)."""
        return self._store.location.text

    # ----------------------------------------------------------------------------- appending

    def append(self, records: Sequence[RecordTuple], *, released_qos2: Iterable[int] = ()) -> int:
        """Durably append ``records`` and QoS 2 releases (releases first); returns the new
        next_offset once the store holds every part. Invalid records raise ValueError or
        TypeError and change nothing; store errors raise WalWriteError and poison the writer.
        """
        with self._mutex:
            self._check_usable()
            self._lease.check()
            size = self._seg_size
            if self._parts >= self._max_parts:
                size = max(size, self._limit)  # roll over before the next data record
            encoded = self._encoder.encode(
                records,
                released_qos2,
                self._state,
                next_offset=self._next_offset,
                segment_first=self._seg_first,
                segment_size=size,
                index_next=1 << 62,  # parts, not index hints, locate offsets here
            )
            if encoded is None:
                return self._next_offset
            try:
                if encoded.properties and self._version < PROPERTIES_VERSION:
                    self._upgrade_for_properties()
                for write in encoded.writes:
                    self._write(write)  # a failure leaves next_offset as it was
            except OSError as exc:
                self._failure = exc
                log.error(
                    "WAL %s: append failed, writer disabled until reopened: %s", self.path, exc
                )
                raise WalWriteError(
                    f"could not append {len(records)} records to WAL {self.path} at offset "
                    f"{self._next_offset}: {exc}; the append is not durable, reopen the WAL"
                ) from exc
            self._next_offset = encoded.end_offset
            return self._next_offset

    def _upgrade_for_properties(self) -> None:
        """Before the first data block with properties (kind 6): ``wal.json`` says format
        version 3 (as :meth:`connector.wal.file_writer.WalWriter._upgrade_for_properties`)."""
        self._store.replace(META_NAME, encode_meta(self._identity, PROPERTIES_VERSION))
        log.info(
            "WAL %s: format version %d upgraded to %d (data blocks with MQTT 5 properties)",
            self.path,
            self._version,
            PROPERTIES_VERSION,
        )
        self._version = self._encoder.version = PROPERTIES_VERSION

    def _write(self, write: SegmentWrite) -> None:
        """Write one segment's share of an append as one part, its seal included."""
        data = b"".join(write.parts)
        if write.new_segment:
            first, position, crc = write.first_offset, 0, 0
        else:
            first, position, crc = self._seg_first, self._seg_size, self._seg_crc
        crc = zlib.crc32(data, crc)
        if write.seal:
            data += encode_seal(write.end_offset, crc)
        self._store.write_part(first, position, write.first_offset, data)
        if write.new_segment:
            self._note_sealed(self._seg_first, self._seg_size)
            self._segments.append(first)
            self._seg_first, self._parts = first, 0
        self._seg_size, self._seg_crc = position + len(data), crc
        self._parts += 1

    def _start_segment(self, first_offset: int) -> None:
        """Start segment ``first_offset`` after a sealed one (recovery)."""
        prefix = segment_prefix(
            bytes.fromhex(self._identity), first_offset, self._state, self._version
        )
        self._store.write_part(first_offset, 0, first_offset, prefix)
        self._note_sealed(self._seg_first, self._seg_size)
        self._segments.append(first_offset)
        self._seg_first, self._seg_size, self._parts = first_offset, len(prefix), 1
        self._seg_crc = zlib.crc32(prefix)

    # ----------------------------------------------------------------------------- truncating

    def truncate_before(self, offset: int) -> int:
        """Forget whole segments all of whose records are below ``offset`` and delete them in
        the background, oldest first; returns how many. The active segment is kept."""
        with self._mutex:
            self._check_usable()
            deleted = 0
            while len(self._segments) > 1 and self._segments[1] <= offset:
                first = self._segments.pop(0)
                self._forget_sealed(first)
                self._deletions.put(first)
                deleted += 1
            return deleted

    def _delete_loop(self) -> None:
        while (first := self._deletions.get()) is not None:
            try:
                self._store.delete_folder(segment_dir(first))
            except OSError as exc:  # left for the next open's recovery to find below first
                log.warning("WAL %s: could not delete segment %d: %s", self.path, first, exc)

    # ----------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Finish pending deletions, release the lease; later calls do nothing."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
        self._deletions.put(None)
        self._deleter.join()
        self._lease.release()

    def __repr__(self) -> str:
        return (
            f"ObjectWalWriter({self.path!r}, offsets=[{self.first_offset}, {self._next_offset}), "
            f"segments={len(self._segments)})"
        )


def read_object_identity(store: ObjectStore) -> str | None:
    """The identity in the store's ``wal.json``, None when absent."""
    meta = read_object_meta(store)
    return None if meta is None else meta[0]


def read_object_meta(store: ObjectStore) -> tuple[str, int] | None:
    """``(identity, format version)`` from the store's ``wal.json``, None when absent."""
    try:
        raw = store.read(META_NAME)
    except FileNotFoundError:
        return None
    return decode_meta(raw, store.where(META_NAME))


def _recover_last(
    store: ObjectStore, first: int, identity: bytes
) -> tuple[bytes, list[Part], SegmentWalk | None]:
    """The last segment's bytes, parts and walk after deleting a torn last part ([] parts and
    no walk when the segment's only part was torn: the segment is deleted)."""
    parts = store.parts(first)
    where = store.where(segment_dir(first))
    if not parts:
        raise WalCorruptError(where, 0, "segment has no parts")
    data = b"".join([store.read_part(first, p) for p in parts])
    refuse_retired_header(data, where)
    try:
        decode_header(data[:HEADER_SIZE], where, first, identity)
        walk = walk_segment(data, where, first)
    except WalCorruptError:
        if len(parts) > 1:
            raise
        torn_at = 0  # the first part's header or snapshot is unusable: torn while written
    else:
        end = walk.end + SEAL_RECORD_SIZE if walk.sealed else walk.end
        if walk.damage is None and end == len(data):
            return data, parts, walk
        torn_at = walk.end
    last = parts[-1]
    if torn_at < last.position:
        raise WalCorruptError(where, torn_at, "damaged before the last part of the last segment")
    log.warning(
        "WAL %s: deleting torn last part at byte %d (offset %d on); it was never acknowledged",
        where,
        last.position,
        last.offset,
    )
    if last.position == 0:
        store.delete_folder(segment_dir(first))
        return b"", [], None
    store.delete_part(first, last)
    parts.pop()
    data = data[: last.position]
    return data, parts, walk_segment(data, where, first)
