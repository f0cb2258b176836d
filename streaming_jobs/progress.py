"""Per-batch progress lines and the summary at exit.

Two sources are joined by batch id: the batch writer records what it saw in each batch (rows,
dead-letter rows, newest message time) in :class:`RunStats`, and Spark's query progress gives
the rate and the source's report (its ``latestOffset``,
:mod:`connector.spark.reader.progress_report`).
The backlog is what waits in the write-ahead log beyond the batch when it was planned: the
receivers' ``backlog`` added up. The lag is the time from the newest message of a batch
reaching the receiver to the batch's write. The same report carries the receivers' delivery
counters of this run (``delivery``): resends withheld, possible
duplicates stored, broker faults survived (docs/delivery.md); lines and summary name the
non-zero ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connector.spark.reader.progress_frame import source_receivers, source_reports

log = logging.getLogger("streaming_jobs.progress")


@dataclass(frozen=True)
class BatchStats:
    """What the batch writer saw in one micro-batch."""

    batch_id: int
    rows: int
    dead_letters: int
    newest_us: int | None
    """Receive time of the batch's newest message, microseconds since the epoch."""
    written_at: float
    """``time.time()`` when both tables were written."""

    @property
    def lag(self) -> float | None:
        """Seconds from the newest message's arrival to the batch's write."""
        if self.newest_us is None:
            return None
        return max(0.0, self.written_at - self.newest_us / 1e6)


RECENT_BATCHES = 1000
"""Batches whose statistics :class:`RunStats` keeps for lookup; the run's totals count all."""


class RunStats:
    """Batch statistics of this run; written by the batch writer (a Py4J callback thread),
    read by the main loop. Memory stays bounded over a run of months: running totals, and
    the last :data:`RECENT_BATCHES` batches for :meth:`get` (a progress line looks its batch
    up right after the batch's commit)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._recent: OrderedDict[int, BatchStats] = OrderedDict()
        self._totals = (0, 0, 0)
        self._latest: BatchStats | None = None
        self.started = time.monotonic()

    def record(self, stats: BatchStats) -> None:
        """Count ``stats``; a batch recorded again (a replay) replaces its earlier figures."""
        with self._lock:
            batches, rows, dead = self._totals
            earlier = self._recent.pop(stats.batch_id, None)
            if earlier is None:
                batches += 1
            else:
                rows, dead = rows - earlier.rows, dead - earlier.dead_letters
            self._totals = (batches, rows + stats.rows, dead + stats.dead_letters)
            self._recent[stats.batch_id] = stats
            if len(self._recent) > RECENT_BATCHES:
                self._recent.popitem(last=False)
            if self._latest is None or stats.batch_id >= self._latest.batch_id:
                self._latest = stats

    def get(self, batch_id: int) -> BatchStats | None:
        with self._lock:
            return self._recent.get(batch_id)

    def latest(self) -> BatchStats | None:
        """The batch of the highest id written by this run."""
        with self._lock:
            return self._latest

    def totals(self) -> tuple[int, int, int]:
        """(batches, rows, dead-letter rows) written by this run."""
        with self._lock:
            return self._totals


def delivery(progress: Mapping[str, Any]) -> dict[str, Any]:
    """The receivers' delivery counters in a progress report ({} when absent)."""
    reports = source_reports(progress)
    counters = reports[0][1].get("delivery") if reports else None
    return counters if isinstance(counters, dict) else {}


def delivery_text(counters: Mapping[str, Any]) -> str | None:
    """The non-zero delivery counters in words, e.g. "3 possible duplicates, broker faults:
    pending-id-reused 2"; None when all are zero."""
    parts = []
    if counters.get("duplicatesDropped"):
        parts.append(f"{counters['duplicatesDropped']} resends withheld")
    if counters.get("possibleDuplicates"):
        parts.append(f"{counters['possibleDuplicates']} possible duplicates")
    faults = {rule: n for rule, n in (counters.get("brokerFaults") or {}).items() if n}
    if faults:
        parts.append(
            "broker faults: " + ", ".join(f"{rule} {n}" for rule, n in sorted(faults.items()))
        )
    return ", ".join(parts) if parts else None


def backlog(progress: Mapping[str, Any]) -> int | None:
    """Messages in the WAL beyond the batch when it was planned: the receivers' ``backlog``
    in the source's report added up (None without a report)."""
    receivers = source_receivers(progress)
    if not receivers:
        return None
    return sum(int(r.get("backlog", 0)) for r in receivers)


def is_data_batch(progress: Mapping[str, Any]) -> bool:
    """False for the progress Spark reports while idle (no batch ran)."""
    return "addBatch" in (progress.get("durationMs") or {})


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def progress_line(
    progress: Mapping[str, Any], stats: BatchStats | None, unparsed: str | None = "dead-letter"
) -> str:
    """One line about a finished micro-batch; ``unparsed`` names the rows that did not parse."""
    rows = int(progress.get("numInputRows") or 0)
    rate = float(progress.get("processedRowsPerSecond") or 0.0)
    waiting = backlog(progress)
    duration = (progress.get("durationMs") or {}).get("triggerExecution")
    parts = [
        f"batch {progress.get('batchId')}: {rows} rows",
        f"{stats.dead_letters} {unparsed}" if stats is not None and stats.dead_letters else None,
        f"{rate:.0f} rows/s",
        f"took {_seconds(duration / 1000 if duration is not None else None)}",
        f"backlog {'-' if waiting is None else waiting}",
        f"lag {_seconds(stats.lag if stats is not None else None)}",
        delivery_text(delivery(progress)),
    ]
    return ", ".join(p for p in parts if p is not None)


class ProgressReporter:
    """Logs one line per finished micro-batch of a query, polled from the main loop."""

    def __init__(self, stats: RunStats, unparsed: str | None = "dead-letter") -> None:
        self.stats = stats
        self.unparsed = unparsed
        self.last_batch = -1
        self.delivery: dict[str, Any] = {}
        """The latest delivery counters seen (this run's receivers)."""

    def poll(self, query: Any) -> None:
        """Log the batches finished since the last call (``query`` is a StreamingQuery)."""
        last = query.lastProgress
        if last is not None:
            self.delivery = delivery(last) or self.delivery
        if last is None or int(last["batchId"]) <= self.last_batch:
            return
        for progress in query.recentProgress:
            batch_id = int(progress["batchId"])
            if batch_id <= self.last_batch or not is_data_batch(progress):
                continue
            self.last_batch = batch_id
            log.info("%s", progress_line(progress, self.stats.get(batch_id), self.unparsed))

    def _rows_text(self, rows: int, unparsed: int) -> str:
        """What the messages became: with a dead-letter table, the rows of each table (they
        add up to the messages); otherwise the table's rows and how many did not parse."""
        if self.unparsed == "dead-letter":
            return f"{rows} messages: {rows - unparsed} table rows, {unparsed} dead-letter rows"
        if self.unparsed:
            return f"{rows} rows, {unparsed} of them {self.unparsed}"
        return f"{rows} rows"

    def summary(self, how: str) -> str:
        """The line logged at exit."""
        batches, rows, dead = self.stats.totals()
        elapsed = time.monotonic() - self.stats.started
        rate = rows / elapsed if elapsed > 0 else 0.0
        parts = [
            f"{how}: {batches} batch{'es' if batches != 1 else ''}",
            self._rows_text(rows, dead),
            f"{elapsed:.1f} s",
            f"{rate:.0f} rows/s on average",
            delivery_text(self.delivery),
        ]
        return ", ".join(p for p in parts if p is not None)
