"""Reads of offset ranges from a WAL in the object layout, from any process or machine.

Like :class:`connector.wal.file_reader.WalReader` it keeps no state between calls and takes no
lease: it lists the segments, picks the part from which ``start`` is found by the parts'
names (:func:`connector.wal.objects.part_for`) and decodes whole parts. Callers ask only for
offsets below a ``next_offset`` the writer reported, i.e. stored ones.
"""

from __future__ import annotations

from bisect import bisect_right

from connector.wal.scan import DONE, NEED_MORE, SEALED, DataSink, scan

from .errors import WalCorruptError, WalDataLossError, WalStoreError
from .location import WalLocation
from .object_writer import read_object_identity
from .objects import ObjectStore, Part, part_for, part_name, segment_dir
from .segment import HEADER_SIZE, decode_header
from .views import RangeReader


class ObjectWalReader(RangeReader):
    """Reads records of a WAL in a store by offset range."""

    __slots__ = ("_identity", "_store")

    def __init__(self, location: WalLocation) -> None:
        self._store = ObjectStore(location)
        self._identity: str | None = None

    @property
    def path(self) -> str:
        return self._store.location.text

    @property
    def identity(self) -> str | None:
        """The WAL's identity from ``wal.json``; None while the WAL does not exist."""
        if self._identity is None:
            try:
                self._identity = read_object_identity(self._store)
            except OSError as exc:
                raise WalStoreError(self.path, "read wal.json", str(exc)) from exc
        return self._identity

    def first_offset(self) -> int | None:
        """Lowest offset that may still be stored, None without segments."""
        try:
            firsts = self._store.segments()
        except OSError as exc:
            raise WalStoreError(self.path, "list segments", str(exc)) from exc
        return firsts[0] if firsts else None

    def _collect(self, start: int, end: int, sink: DataSink) -> None:
        try:
            self._collect_from_store(start, end, sink)
        except FileNotFoundError as exc:  # deleted between listing and reading: truncated
            raise WalDataLossError(self.path, start, end, f"deleted while read: {exc}") from exc
        except OSError as exc:
            raise WalStoreError(self.path, f"read offsets [{start}, {end})", str(exc)) from exc

    def _collect_from_store(self, start: int, end: int, sink: DataSink) -> None:
        identity = self.identity
        ident = bytes.fromhex(identity) if identity is not None else None
        firsts = self._store.segments()
        at = bisect_right(firsts, start) - 1
        if at < 0:
            reason = (
                "the WAL has no segments"
                if not firsts
                else f"deleted by truncation; the oldest stored offset is {firsts[0]}"
            )
            raise WalDataLossError(self.path, start, min(end, firsts[0]) if firsts else end, reason)
        expected: int | None = None
        while True:
            first = firsts[at]
            if expected is not None and first != expected:
                raise WalCorruptError(
                    self._store.where(segment_dir(first)),
                    0,
                    f"gap between segments: records end at offset {expected} "
                    f"but the next segment starts at offset {first}",
                )
            expected, sealed = self._scan_segment(first, expected, start, end, sink, ident)
            if expected >= end:
                return
            at += 1
            if at >= len(firsts):
                firsts = self._store.segments()
            if not sealed or at >= len(firsts):
                raise WalDataLossError(
                    self.path, expected, end, f"the log ends at offset {expected}"
                )

    def _scan_segment(
        self,
        first: int,
        expected: int | None,
        start: int,
        end: int,
        sink: DataSink,
        identity: bytes | None,
    ) -> tuple[int, bool]:
        """Scan segment ``first`` (from the part holding ``start`` when ``expected`` is None);
        returns (next offset, sealed)."""
        parts = self._store.stored_parts(first)
        index = part_for(parts, start) if expected is None else 0
        if expected is None:
            expected = parts[index].offset if parts else first
        seen = 0
        while True:
            for part in parts[index:]:
                expected, status = self._scan_part(
                    first, part, expected, start, end, sink, identity
                )
                seen = part.position + part.size
                if status == DONE:
                    return expected, False
                if status == SEALED:
                    return expected, True
            # The writer may have added parts (or sealed the segment) since the listing; the
            # caller asked for stored offsets only, so the segment goes on past byte ``seen``.
            parts = self._store.stored_parts(first, past=seen)
            index = next((i for i, p in enumerate(parts) if p.position >= seen), len(parts))
            if index >= len(parts):
                return expected, False

    def _scan_part(
        self,
        first: int,
        part: Part,
        expected: int,
        start: int,
        end: int,
        sink: DataSink,
        identity: bytes | None,
    ) -> tuple[int, int]:
        data = self._store.read_part(first, part)
        where = self._store.where(segment_dir(first), part_name(part.position, part.offset))
        pos = 0
        if part.position == 0:
            decode_header(data[:HEADER_SIZE], where, first, identity)
            pos = HEADER_SIZE
        pos, expected, status = scan(data, pos, expected, start, end, sink, where, part.position)
        if status == NEED_MORE and pos != len(data):
            raise WalCorruptError(where, part.position + pos, "part ends inside a record")
        return expected, status
