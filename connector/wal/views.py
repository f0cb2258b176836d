"""What both layouts' writers and readers answer the same way (the file layout in
:mod:`connector.wal.file_writer` and :mod:`connector.wal.file_reader`, the object layout in
:mod:`connector.wal.object_writer` and :mod:`connector.wal.object_reader`)."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

from connector.wal.scan import DataSink

from .blob import pack_blob
from .columns import WalColumns
from .errors import WalError, WalWriteError
from .state import QosState

log = logging.getLogger(__name__)


class WriterState(ABC):
    """A writer's offsets and QoS state, kept in memory and answered from there."""

    _identity: str
    _next_offset: int
    _segments: list[int]
    _state: QosState
    _closed: bool
    _failure: BaseException | None
    _seg_size: int
    _sealed_sizes: dict[int, int]
    _sealed_bytes: int

    @property
    @abstractmethod
    def path(self) -> object:
        """Where the WAL is (safe to log)."""

    @property
    def identity(self) -> str:
        """The WAL's random identity (uuid4 hex), stable across reopen."""
        return self._identity

    @property
    def next_offset(self) -> int:
        """High-water mark: the offset the next appended record gets; all below are durable."""
        return self._next_offset

    @property
    def first_offset(self) -> int:
        """Lowest offset still stored (== next_offset when nothing is stored)."""
        return self._segments[0]

    @property
    def segments(self) -> tuple[int, ...]:
        """First offsets of the segments, oldest first."""
        return tuple(self._segments)

    @property
    def qos2_pending(self) -> frozenset[int]:
        """Snapshot of QoS 2 packet ids appended whose release has not been appended."""
        return frozenset(self._state.pending_qos2)

    def is_qos2_pending(self, packet_id: int) -> bool:
        """Whether a QoS 2 message with ``packet_id`` is stored and not yet released."""
        return packet_id in self._state.pending_qos2

    def latest_digest(self, packet_id: int) -> int | None:
        """record_digest of the latest QoS 1 or 2 record appended with ``packet_id``."""
        return self._state.digests.get(packet_id)

    @property
    def stored_bytes(self) -> int:
        """Bytes of the segments still stored: records, seals and state snapshots (the file
        layout's small index files are not counted)."""
        return self._sealed_bytes + self._seg_size

    def _init_sealed(self, sizes: dict[int, int]) -> None:
        """Start counting with the sealed segments found at open (first offset -> bytes)."""
        self._sealed_sizes = dict(sizes)
        self._sealed_bytes = sum(sizes.values())

    def _note_sealed(self, first: int, size: int) -> None:
        """Segment ``first`` is sealed at ``size`` bytes; the next one is active."""
        self._sealed_sizes[first] = size
        self._sealed_bytes += size

    def _forget_sealed(self, first: int) -> None:
        """Segment ``first`` is deleted."""
        self._sealed_bytes -= self._sealed_sizes.pop(first, 0)

    def backlog(self, committed: int) -> int:
        """Records appended at or above offset ``committed``."""
        return self._next_offset - committed

    def _log_opened(self, where: object, layout: str) -> None:
        """Log what an opened writer found: its identity and its offsets."""
        log.info(
            "opened WAL %s (identity %s%s): offsets [%d, %d) in %d segment(s)",
            where,
            self._identity,
            layout,
            self.first_offset,
            self._next_offset,
            len(self._segments),
        )

    def _check_usable(self) -> None:
        """Refuse work after close or after a write failure."""
        if self._closed:
            raise WalError(f"WAL writer for {self.path} is closed")
        if self._failure is not None:
            raise WalWriteError(
                f"WAL writer for {self.path} failed earlier ({self._failure}); reopen the WAL"
            ) from self._failure

    @abstractmethod
    def close(self) -> None:
        """Release the WAL; later calls do nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class RangeReader(ABC):
    """Reads of offset ranges, as columns or as a blob for executors."""

    __slots__ = ()

    def read(self, start: int, end: int) -> WalColumns:
        """Records with ``start <= offset < end`` as columns.

        Raises WalDataLossError when any of those offsets is not stored and WalCorruptError
        when stored data is damaged.
        """
        sink = DataSink()
        self._gather(start, end, sink)
        return sink.columns(start)

    def encode_range(self, start: int, end: int) -> bytes:
        """The records with ``start <= offset < end`` as one blob for :func:`decode_blob`."""
        sink = DataSink(raw=True)
        self._gather(start, end, sink)
        return pack_blob(start, end - start, sink.raw or [])

    def _gather(self, start: int, end: int, sink: DataSink) -> None:
        if start < 0 or end < start:
            raise ValueError(f"invalid offset range [{start}, {end})")
        if start < end:
            self._collect(start, end, sink)

    @abstractmethod
    def _collect(self, start: int, end: int, sink: DataSink) -> None:
        """Feed every record of ``[start, end)`` (not empty) to ``sink``."""
