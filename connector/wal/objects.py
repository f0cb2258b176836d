"""The object layout of a WAL, for stores that neither append nor fsync.

Used for object stores (S3, GCS, Azure Blob, HDFS through ``pyarrow.fs``) and for FUSE mounts
of them (``/Volumes``, ``/dbfs``). A segment holds exactly the bytes of the file layout
(:mod:`connector.wal`), stored as immutable *parts*, one per append::

    <root>/wal.json                                  identity and format (as in the file layout)
    <root>/lease/<claim>.json                        the single writer's lease (connector.wal.lease)
    <root>/<first offset, 20 digits>.seg/<byte position, 20 digits>-<offset, 20 digits>.part

A part's byte position is where its bytes start in the segment, its offset the offset of the
next data record at that point; a segment is its parts concatenated in name order. Rules:

* A part is written whole by one call and never changed; an append is durable (and may be
  acknowledged) once that call returned.
* A segment's parts are contiguous (each starts where the previous one ends); the part at
  byte 0 starts with the header and state snapshot.
* A new segment's first part is written only after the previous segment's last part, which
  ends with the seal; so every segment but the last is sealed.
* Only the last part of the last segment can be torn (a writer that died while writing it, on
  a store or mount that shows partial objects); recovery deletes it, since none of its records
  was acknowledged. Damage anywhere else is corruption.
* Committed segments are deleted whole, oldest first.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from bisect import bisect_right
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import WalCorruptError, WalWriteError
from .location import WalLocation

if TYPE_CHECKING:
    from pyarrow.fs import FileSystem

log = logging.getLogger(__name__)

LISTING_ATTEMPTS = 4
LISTING_RETRY_SECONDS = 0.2
SEGMENT_DIR_SUFFIX = ".seg"
PART_SUFFIX = ".part"
_DIGITS = 20


@dataclass(frozen=True, slots=True)
class Part:
    """One part object of a segment."""

    position: int
    offset: int
    size: int


def segment_dir(first_offset: int) -> str:
    """Name of the folder (prefix) of the segment whose first data record is ``first_offset``."""
    return f"{first_offset:0{_DIGITS}d}{SEGMENT_DIR_SUFFIX}"


def part_name(position: int, offset: int) -> str:
    """Name of the part that starts at byte ``position`` of its segment."""
    return f"{position:0{_DIGITS}d}-{offset:0{_DIGITS}d}{PART_SUFFIX}"


def _parse_part(name: str, size: int) -> Part | None:
    stem = name[: -len(PART_SUFFIX)] if name.endswith(PART_SUFFIX) else ""
    position, sep, offset = stem.partition("-")
    if not sep or len(position) != _DIGITS or len(offset) != _DIGITS:
        return None
    if not (position.isdigit() and offset.isdigit()):
        return None
    return Part(int(position), int(offset), size)


def _first_gap(parts: list[Part]) -> tuple[Part, int] | None:
    """The first part that does not start where the previous one ends, with that end."""
    expected = 0
    for part in parts:
        if part.position != expected:
            return part, expected
        expected += part.size
    return None


def _parse_segment(name: str) -> int | None:
    stem = name[: -len(SEGMENT_DIR_SUFFIX)] if name.endswith(SEGMENT_DIR_SUFFIX) else ""
    return int(stem) if len(stem) == _DIGITS and stem.isdigit() else None


class ObjectStore:
    """The WAL's folder in a store: the only code that calls ``pyarrow.fs``.

    Store errors surface as OSError (``pyarrow.fs`` raises OSError subclasses), except a
    missing object, which is FileNotFoundError."""

    __slots__ = ("_fs", "_local", "_root", "location")

    def __init__(self, location: WalLocation) -> None:
        self.location = location
        self._fs, root = location.filesystem()
        self._root = root.rstrip("/")
        self._local = self._fs.type_name == "local"

    @property
    def filesystem(self) -> FileSystem:
        return self._fs

    def where(self, *names: str) -> str:
        """A name inside the WAL, for messages (the location text is safe to log)."""
        return "/".join([self.location.text.split("?", 1)[0].rstrip("/"), *names])

    def _path(self, name: str) -> str:
        return f"{self._root}/{name}" if name else self._root

    def entries(self, folder: str = "") -> list[tuple[str, int, bool]]:
        """``(name, size, is folder)`` of the entries directly in ``folder``; [] when absent."""
        import pyarrow.fs as pafs

        selector = pafs.FileSelector(self._path(folder), allow_not_found=True)
        entries = []
        for info in self._fs.get_file_info(selector):
            is_dir = info.type == pafs.FileType.Directory
            entries.append((info.base_name, 0 if is_dir else int(info.size or 0), is_dir))
        return entries

    def read(self, name: str) -> bytes:
        """The whole object ``name``."""
        with self._fs.open_input_stream(self._path(name)) as stream:
            return bytes(stream.read())

    def write(self, name: str, data: bytes) -> None:
        """Write object ``name`` whole in one call (one PUT on object stores). On a local file
        system (a FUSE mount, a ``file://`` WAL) the file and its new directory entry are
        fsynced before this returns, where the file system supports it."""
        path = self._path(name)
        if not self._local:
            with self._fs.open_output_stream(path) as stream:
                stream.write(data)
            return
        parent = path.rsplit("/", 1)[0]
        self._fs.create_dir(parent, recursive=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            _fsync_if_supported(fd)
        finally:
            os.close(fd)
        dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _fsync_if_supported(dir_fd)
        finally:
            os.close(dir_fd)

    def replace(self, name: str, data: bytes) -> None:
        """Replace object ``name`` so that a reader finds the old bytes or the new, never a
        mix: one PUT on object stores; on a local file system a temporary file written and
        fsynced, then renamed over ``name`` (a mount that cannot rename gets :meth:`write`,
        whose file its store takes whole when it is closed)."""
        if not self._local:
            self.write(name, data)
            return
        temp = f"{name}.tmp"
        self.write(temp, data)
        path = self._path(name)
        try:
            os.replace(self._path(temp), path)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOTSUP, errno.EPERM, errno.ENOSYS):
                raise
            self.delete(temp)
            self.write(name, data)
            return
        dir_fd = os.open(path.rsplit("/", 1)[0], os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _fsync_if_supported(dir_fd)
        finally:
            os.close(dir_fd)

    def delete(self, name: str) -> None:
        """Delete object ``name``; absent is fine."""
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(self._path(name))

    def delete_folder(self, folder: str) -> None:
        """Delete ``folder`` and everything in it (batched on object stores)."""
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_dir(self._path(folder))

    # --------------------------------------------------------------------- WAL layout

    def segments(self) -> list[int]:
        """First offsets of the segments, ascending."""
        firsts = [_parse_segment(name) for name, _, is_dir in self.entries() if is_dir]
        return sorted(first for first in firsts if first is not None)

    def parts(self, first: int) -> list[Part]:
        """All parts of segment ``first`` in order, contiguous from byte 0, for a caller that
        needs the whole segment while no writer appends (recovery); WalCorruptError when they
        are not contiguous after listing again (see :meth:`stored_parts`)."""
        return self._listed(first, None)

    def stored_parts(self, first: int, past: int = -1) -> list[Part]:
        """The parts of segment ``first`` from byte 0 up to the first gap, for a reader racing
        the writer; the listing must reach past byte ``past``, which the caller knows is stored.

        A listing taken while the writer adds parts may show a newer part and miss an older
        one added during the same listing (s3proxy's file-system store renames each object
        into the folder, and a directory read returns an entry added meanwhile or not, in hash
        order). Parts never change once written, so parts after a gap are left for a later
        listing, and a listing that does not reach past ``past`` is listed again, a few times,
        before a gap there counts as damage (WalCorruptError) or the short listing is returned
        for the caller to report as lost (docs/wal-storage.md, "What a listing must show")."""
        return self._listed(first, past)

    def _listed(self, first: int, past: int | None) -> list[Part]:
        """List segment ``first`` until it is whole (``past`` None) or its contiguous prefix
        reaches past byte ``past``; at most LISTING_ATTEMPTS listings."""
        gap: tuple[Part, int] | None = None
        prefix: list[Part] = []
        for attempt in range(LISTING_ATTEMPTS):
            found = [_parse_part(n, size) for n, size, is_dir in self.entries(segment_dir(first))]
            parts = sorted((p for p in found if p is not None), key=lambda p: p.position)
            gap = _first_gap(parts)
            prefix = parts[: parts.index(gap[0])] if gap else parts
            end = prefix[-1].position + prefix[-1].size if prefix else 0
            if gap is None if past is None else end > past:
                return prefix
            if attempt < LISTING_ATTEMPTS - 1:
                log.info(
                    "WAL %s: segment %d listed %s; listing again",
                    self.location,
                    first,
                    f"with a gap at byte {gap[1]}" if gap else f"ending at byte {end}",
                )
                time.sleep(LISTING_RETRY_SECONDS * (attempt + 1))
        if gap is None:
            return prefix
        part, expected = gap
        raise WalCorruptError(
            self.where(segment_dir(first), part_name(part.position, part.offset)),
            expected,
            f"segment parts are not contiguous: the previous part ends at byte {expected}",
        )

    def read_part(self, first: int, part: Part) -> bytes:
        """A part's bytes; a size other than listed means another writer changed it."""
        name = f"{segment_dir(first)}/{part_name(part.position, part.offset)}"
        data = self.read(name)
        if len(data) != part.size:
            raise WalCorruptError(
                self.where(name), 0, f"part is {len(data)} bytes, listed as {part.size}"
            )
        return data

    def write_part(self, first: int, position: int, offset: int, data: bytes) -> None:
        self.write(f"{segment_dir(first)}/{part_name(position, offset)}", data)

    def delete_part(self, first: int, part: Part) -> None:
        self.delete(f"{segment_dir(first)}/{part_name(part.position, part.offset)}")


def _fsync_if_supported(fd: int) -> None:
    """fsync ``fd``; a FUSE mount that does not implement fsync (EINVAL, ENOTSUP) is taken
    at its word that a closed file is stored."""
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EROFS):
            raise


def part_for(parts: list[Part], offset: int) -> int:
    """Index of the part from which reading finds ``offset``: the last whose named offset is
    at most ``offset`` (0 when none is)."""
    return max(bisect_right([p.offset for p in parts], offset) - 1, 0)


def store_error(store: ObjectStore, action: str, exc: OSError) -> WalWriteError:
    """A WalWriteError naming the WAL and the store's own message."""
    return WalWriteError(f"WAL {store.location}: could not {action}: {exc}")
