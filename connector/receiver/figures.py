"""A receiver's figures over time: when the messages still waiting for a commit arrived, and
how fast messages arrive (docs/operations.md, "Metrics in the query progress").

Every record of one WAL append carries the same receive time (``Receiver._persist_then_ack``
stamps a read once), so the receive time of any stored offset is the time of the append that
holds it. :class:`ArrivalIndex` keeps those times for this process's appends, one entry per
:data:`ARRIVAL_RESOLUTION_US` at most, so its memory grows with the backlog's time span, not
with its size; an offset's time is then at most that much older than the true one.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_right
from collections import deque

ARRIVAL_RESOLUTION_US = 100_000
"""Appends within this many microseconds of the last noted one share its entry (0.1 s)."""

RATE_WINDOW_SECONDS = 10.0
"""The receive rate is the messages stored in the last this many seconds, per second."""


class ArrivalIndex:
    """Receive times of appended offsets: ``(first offset, receive time)`` per entry, entries
    in offset order; the entry at ``i`` covers offsets up to the next entry's first."""

    __slots__ = ("_head", "_lock", "_offsets", "_stamps")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offsets = array("q")
        self._stamps = array("q")
        self._head = 0
        """Entries before this index are forgotten (dropped in bulk by :meth:`forget_below`)."""

    def __len__(self) -> int:
        return len(self._offsets) - self._head

    def note(self, first_offset: int, stamp_us: int) -> None:
        """Records from ``first_offset`` on were received at ``stamp_us`` (an append)."""
        with self._lock:
            if len(self) and stamp_us - self._stamps[-1] < ARRIVAL_RESOLUTION_US:
                return
            self._offsets.append(first_offset)
            self._stamps.append(stamp_us)

    def forget_below(self, offset: int) -> None:
        """Drop the entries that only cover offsets below ``offset`` (committed)."""
        with self._lock:
            offsets = self._offsets
            end = len(offsets)
            while self._head + 1 < end and offsets[self._head + 1] <= offset:
                self._head += 1
            if self._head > 1024 and self._head * 2 > end:
                del offsets[: self._head]
                del self._stamps[: self._head]
                self._head = 0

    def stamp_at(self, offset: int) -> int | None:
        """The receive time (µs since the epoch) of the record at ``offset``; None for an
        offset below the first entry (stored before this process noted anything)."""
        with self._lock:
            if not len(self) or offset < self._offsets[self._head]:
                return None
            at = bisect_right(self._offsets, offset, self._head) - 1
            return self._stamps[at]


class RateMeter:
    """Messages per second over the last :data:`RATE_WINDOW_SECONDS` (monotonic seconds)."""

    __slots__ = ("_buckets", "_lock", "_started")

    def __init__(self, now: float) -> None:
        self._lock = threading.Lock()
        self._started = now
        self._buckets: deque[list[int]] = deque()
        """``[whole second, messages]``, oldest first."""

    def note(self, count: int, now: float) -> None:
        """``count`` messages arrived at ``now``."""
        second = int(now)
        with self._lock:
            if self._buckets and self._buckets[-1][0] == second:
                self._buckets[-1][1] += count
            else:
                self._buckets.append([second, count])
            self._trim(now)

    def rate(self, now: float) -> float:
        """Messages per second over the window (or since the start, when it is shorter)."""
        with self._lock:
            self._trim(now)
            total = sum(count for _, count in self._buckets)
        span = min(RATE_WINDOW_SECONDS, now - self._started)
        return total / max(span, 1.0)

    def _trim(self, now: float) -> None:
        oldest = now - RATE_WINDOW_SECONDS
        while self._buckets and self._buckets[0][0] + 1 <= oldest:
            self._buckets.popleft()
