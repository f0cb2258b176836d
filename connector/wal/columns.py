"""Decoded records of one offset range, column by column, without a Python object per row.

A :class:`WalColumns` is a sequence of :class:`ColumnPiece`: each piece holds the column
buffers of one data block (zero-copy views of the block's bytes) and the rows ``[lo, hi)`` of
those buffers that belong to the range (:meth:`WalColumns.from_records` builds arrays of
records instead, for tests and tools). A consumer
such as the Arrow converter uses the buffers as they are; the list attributes (``topics``,
``payloads``, ``qos``, ...) are built on first use, for tests and tools. Only a piece of a
block with properties (kind 6) has property columns; the rows of any other piece have none
(``b""``).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from .records import (
    DUP_OF,
    FLAG_HAS_ID,
    FLAGS,
    QOS_OF,
    RETAIN_OF,
    NewRecord,
    WalRecord,
)

Buffer = Any
"""A C-contiguous buffer of machine values: an ``array``, ``bytes`` or a typed memoryview."""

_T = TypeVar("_T")


class ColumnPiece:
    """Column buffers of ``n`` rows, of which rows ``[lo, hi)`` are in use.

    ``topic_ids`` (int32) index ``topic_names``; ``flags`` (uint8), ``packet_ids`` (uint16,
    meaningful where the flags have FLAG_HAS_ID) and ``timestamps`` (int64 microseconds) hold
    one value per row; ``payload_ends`` (int32, ``n + 1`` values, the first 0) delimit row i's
    payload as ``payload_data[ends[i]:ends[i + 1]]``. ``property_ends`` and ``property_data``
    delimit each row's property bytes the same way; both None when no row of the buffers has
    any.
    """

    __slots__ = (
        "flags",
        "hi",
        "lo",
        "packet_ids",
        "payload_data",
        "payload_ends",
        "property_data",
        "property_ends",
        "timestamps",
        "topic_ids",
        "topic_names",
    )

    def __init__(
        self,
        topic_names: list[str],
        topic_ids: Buffer,
        flags: Buffer,
        packet_ids: Buffer,
        timestamps: Buffer,
        payload_ends: Buffer,
        payload_data: Buffer,
        lo: int = 0,
        hi: int | None = None,
        *,
        property_ends: Buffer | None = None,
        property_data: Buffer | None = None,
    ) -> None:
        self.topic_names = topic_names
        self.topic_ids = topic_ids
        self.flags = flags
        self.packet_ids = packet_ids
        self.timestamps = timestamps
        self.payload_ends = payload_ends
        self.payload_data = payload_data
        self.lo = lo
        self.hi = len(flags) if hi is None else hi
        self.property_ends = property_ends
        self.property_data = property_data

    def rows(self, lo: int, hi: int) -> ColumnPiece:
        """The same buffers with rows ``[lo, hi)`` in use (relative to the buffers)."""
        return ColumnPiece(
            self.topic_names,
            self.topic_ids,
            self.flags,
            self.packet_ids,
            self.timestamps,
            self.payload_ends,
            self.payload_data,
            lo,
            hi,
            property_ends=self.property_ends,
            property_data=self.property_data,
        )

    def __len__(self) -> int:
        return self.hi - self.lo

    def payloads(self) -> list[bytes]:
        """The payloads of the rows in use, as bytes."""
        ends, data = self.payload_ends, self.payload_data
        return [bytes(data[ends[i] : ends[i + 1]]) for i in range(self.lo, self.hi)]

    def properties(self) -> list[bytes]:
        """The property bytes of the rows in use (``b""`` for a row without)."""
        ends, data = self.property_ends, self.property_data
        if ends is None or data is None:
            return [b""] * (self.hi - self.lo)
        return [bytes(data[ends[i] : ends[i + 1]]) for i in range(self.lo, self.hi)]

    def topics(self) -> Iterator[str]:
        """The topics of the rows in use."""
        return map(self.topic_names.__getitem__, memoryview(self.topic_ids)[self.lo : self.hi])

    def column(self, name: str) -> memoryview:
        """The rows in use of the buffer attribute ``name`` (a typed memoryview)."""
        return memoryview(getattr(self, name))[self.lo : self.hi]


class WalColumns:
    """Records of one offset range as a sequence of column pieces; ``len()`` is the number of
    records. Offsets are consecutive from ``first_offset`` across the pieces."""

    __slots__ = ("_length", "_lists", "first_offset", "pieces")

    def __init__(self, first_offset: int, pieces: Iterable[ColumnPiece] = ()) -> None:
        self.first_offset = first_offset
        self.pieces: tuple[ColumnPiece, ...] = tuple(p for p in pieces if p.hi > p.lo)
        self._length = sum(p.hi - p.lo for p in self.pieces)
        self._lists: dict[str, Any] = {}

    @classmethod
    def from_records(cls, first_offset: int, records: Iterable[NewRecord]) -> WalColumns:
        """Columns of ``records`` numbered from ``first_offset`` (for tests and tools)."""
        names: dict[str, int] = {}
        ids, flags, pids, stamps = array("i"), bytearray(), array("H"), array("q")
        ends, data = array("i", [0]), bytearray()
        property_ends, property_data = array("i", [0]), bytearray()
        for record in records:
            topic, payload, qos, retain, dup, pid, stamp = record[:7]
            ids.append(names.setdefault(topic, len(names)))
            flags.append(FLAGS[(qos, retain, dup, pid is not None)])
            pids.append(pid or 0)
            stamps.append(stamp)
            data += payload
            ends.append(len(data))
            property_data += record[7] if len(record) > 7 else b""
            property_ends.append(len(property_data))
        piece = ColumnPiece(list(names), ids, flags, pids, stamps, ends, bytes(data))
        if property_data:
            piece.property_ends, piece.property_data = property_ends, bytes(property_data)
        return cls(first_offset, [piece])

    @classmethod
    def empty(cls, first_offset: int = 0) -> WalColumns:
        """Columns with no records."""
        return cls(first_offset)

    def __len__(self) -> int:
        return self._length

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WalColumns):
            return NotImplemented
        return len(self) == len(other) and all(
            getattr(self, name) == getattr(other, name) for name in _COLUMN_NAMES
        )

    # Unhashable: a class that defines __eq__ without __hash__ gets __hash__ = None.

    def __repr__(self) -> str:
        return (
            f"WalColumns(offsets=[{self.first_offset}, {self.first_offset + len(self)}), "
            f"pieces={len(self.pieces)})"
        )

    def _list(self, name: str, build: Callable[[], _T]) -> _T:
        value: _T | None = self._lists.get(name)
        if value is None:
            value = self._lists[name] = build()
        return value

    def _joined(self, name: str, typecode: str) -> array[int]:
        """One buffer column of every piece, concatenated."""
        joined = array(typecode)
        for piece in self.pieces:
            joined.frombytes(piece.column(name).tobytes())
        return joined

    @property
    def flags(self) -> bytes:
        """The flags bytes of every row."""
        return self._list("flags", lambda: self._joined("flags", "B").tobytes())

    @property
    def packet_id_values(self) -> array[int]:
        """Raw u16 packet ids (``array("H")``); meaningful only where flags have FLAG_HAS_ID."""
        return self._list("packet_id_values", lambda: self._joined("packet_ids", "H"))

    @property
    def timestamps(self) -> array[int]:
        """Timestamps in microseconds as ``array('q')``."""
        return self._list("timestamps", lambda: self._joined("timestamps", "q"))

    @property
    def offsets(self) -> list[int]:
        return self._list(
            "offsets", lambda: list(range(self.first_offset, self.first_offset + len(self)))
        )

    @property
    def topics(self) -> list[str]:
        return self._list("topics", lambda: _concat(piece.topics() for piece in self.pieces))

    @property
    def payloads(self) -> list[bytes]:
        return self._list("payloads", lambda: _concat(piece.payloads() for piece in self.pieces))

    @property
    def qos(self) -> list[int]:
        return self._list("qos", lambda: list(map(QOS_OF.__getitem__, self.flags)))

    @property
    def retain(self) -> list[bool]:
        return self._list("retain", lambda: list(map(RETAIN_OF.__getitem__, self.flags)))

    @property
    def dup(self) -> list[bool]:
        return self._list("dup", lambda: list(map(DUP_OF.__getitem__, self.flags)))

    @property
    def packet_ids(self) -> list[int | None]:
        return self._list(
            "packet_ids",
            lambda: [
                pid if flag & FLAG_HAS_ID else None
                for flag, pid in zip(self.flags, self.packet_id_values, strict=True)
            ],
        )

    @property
    def timestamps_us(self) -> list[int]:
        return self._list("timestamps_us", lambda: self.timestamps.tolist())

    @property
    def properties(self) -> list[bytes]:
        """Each row's property bytes, ``b""`` for a row without."""
        return self._list(
            "properties", lambda: _concat(piece.properties() for piece in self.pieces)
        )

    @property
    def has_properties(self) -> bool:
        """Whether a piece has property columns (some row of its block has properties)."""
        return any(piece.property_ends is not None for piece in self.pieces)

    def records(self) -> Iterator[WalRecord]:
        """Yield the rows as :class:`WalRecord` (convenient, slower than the columns)."""
        return map(
            WalRecord,
            self.offsets,
            self.topics,
            self.payloads,
            self.qos,
            self.retain,
            self.dup,
            self.packet_ids,
            self.timestamps_us,
            self.properties,
        )


def _concat(parts: Iterable[Sequence[Any] | Iterator[Any]]) -> list[Any]:
    out: list[Any] = []
    for part in parts:
        out.extend(part)
    return out


_COLUMN_NAMES = (
    "offsets",
    "topics",
    "payloads",
    "qos",
    "retain",
    "dup",
    "packet_ids",
    "timestamps_us",
    "properties",
)
