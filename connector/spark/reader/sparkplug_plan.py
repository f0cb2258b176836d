"""The Sparkplug state each partition of a batch starts from, and the state kept with the WAL so
that a restart finds it (``payloadFormat`` ``sparkplug``, docs/sparkplug.md).

A partition of records [a, b) is decoded from S(a), the state after every message before ``a``
(:mod:`connector.sparkplug.state`). The planner (the driver-side source) knows S at the end of
the batch it last planned; it folds the records of each new partition to get the next one's
start. When a batch is committed, S(end) is written next to the WAL (``sparkplug-state.json``,
one atomic write) before the WAL deletes the records below ``end``: so whatever a crash leaves,
the state at the checkpoint's offset is the stored one, or the stored one folded over records
the WAL still holds. The same records always decode the same way: after kill -9, after the
committed segments are gone, and when a birth and its data fall in one micro-batch.
"""

from __future__ import annotations

import json
import logging

from connector.sparkplug.messages import Message, fold, messages_of
from connector.sparkplug.state import SparkplugState
from connector.wal.opening import open_reader, read_sidecar, write_sidecar

log = logging.getLogger(__name__)

STATE_FILE = "sparkplug-state.json"
"""The state at the last committed offset, next to the WAL: ``{"wal", "offset", "state"}``."""

FOLD_CHUNK = 50_000
"""Records read at a time while folding (bounds the planner's memory)."""


def read_messages(wal_path: str, start: int, end: int) -> list[Message]:
    """The stored messages [start, end) of the WAL at ``wal_path``."""
    columns = open_reader(wal_path).read(start, end)
    return messages_of(columns.topics, columns.payloads, columns.qos, columns.timestamps_us, start)


class SparkplugStates:
    """The states of one WAL (one receiver) at the offsets its batches start at."""

    def __init__(self, wal_path: str, identity: str, reorder_timeout_us: int) -> None:
        self.wal_path = wal_path
        self.identity = identity
        self.reorder_timeout_us = reorder_timeout_us
        self._known: dict[int, str] = {}
        """offset -> the state before it, as JSON (states planned and not yet committed)."""

    def at(self, offset: int, first_stored: int) -> SparkplugState:
        """The state before ``offset``: planned, or the stored one folded up to it (records
        from ``first_stored`` on are in the WAL)."""
        known = self._known.get(offset)
        if known is not None:
            return SparkplugState.from_json(known)
        base, state = self._stored(offset, first_stored)
        self._fold(state, base, offset)
        self._known[offset] = state.to_json()
        return state

    def plan(self, ranges: list[tuple[int, int]], first_stored: int) -> list[str]:
        """The state at the start of each of ``ranges`` (consecutive), as JSON; the state
        at the end of the last is kept for the next batch and the commit."""
        if not ranges:
            return []
        state = self.at(ranges[0][0], first_stored)
        starts = []
        for start, end in ranges:
            starts.append(state.to_json())
            self._fold(state, start, end)
        self._known[ranges[-1][1]] = state.to_json()
        return starts

    def commit(self, offset: int, first_stored: int) -> None:
        """The batch ending at ``offset`` is committed: store the state there (before the
        WAL deletes the records below it) and forget the states before it."""
        state_json = self._known.get(offset) or self.at(offset, first_stored).to_json()
        record = {"wal": self.identity, "offset": offset, "state": json.loads(state_json)}
        write_sidecar(self.wal_path, STATE_FILE, json.dumps(record, separators=(",", ":")).encode())
        self._known = {o: s for o, s in self._known.items() if o >= offset}

    def _stored(self, offset: int, first_stored: int) -> tuple[int, SparkplugState]:
        """The stored state and its offset, when it belongs to this WAL and lies at or before
        ``offset``; else an empty state at the WAL's first record."""
        try:
            raw = read_sidecar(self.wal_path, STATE_FILE)
            record = None if raw is None else json.loads(raw)
        except (OSError, ValueError) as exc:
            log.warning("the stored Sparkplug state of %s cannot be read: %s", self.wal_path, exc)
            record = None
        if (
            record is not None
            and record.get("wal") == self.identity
            and first_stored <= int(record["offset"]) <= offset
        ):
            state = SparkplugState.from_json(json.dumps(record["state"]))
            state.reorder_timeout_us = self.reorder_timeout_us
            return int(record["offset"]), state
        if first_stored > 0:
            log.warning(
                "no stored Sparkplug state for %s at or after its first record %d: births "
                "before it are not known (metrics by alias resolve again after the next birth)",
                self.wal_path,
                first_stored,
            )
        return first_stored, SparkplugState(self.reorder_timeout_us)

    def _fold(self, state: SparkplugState, start: int, end: int) -> None:
        for chunk in range(start, end, FOLD_CHUNK):
            fold(read_messages(self.wal_path, chunk, min(end, chunk + FOLD_CHUNK)), state)
