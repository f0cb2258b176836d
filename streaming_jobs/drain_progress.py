"""Progress of a ``--trigger available-now`` drain towards its target.

Under ``Trigger.AvailableNow`` the source freezes every receiver before the run's first batch
and drains each WAL up to its high-water mark at that moment. Every progress report made after
the freeze carries, per receiver (``sources[0].latestOffset``,
:mod:`connector.spark.reader.progress_report`), ``frozen`` and ``walHighWaterMark``, the target. The
report is made when the batch is planned, so its ``committed`` is the batch's start, one batch
behind: the first frozen report's ``committed`` is where the drain started, and the batch's
``endOffset`` (a report arrives once its batch is written) is what has been drained.

Figures only change when a batch ends; between batches the last figures stand. The rate is
measured over the reports of the last :data:`RATE_WINDOW` seconds, by the clock given with each
report. :class:`DrainProgress` computes, :class:`DrainDisplay` shows: a line rewritten in place
on a terminal stream, and a log line at most every ``log_every`` seconds.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from connector.spark.reader.progress_frame import source_receivers
from streaming_jobs.progress import is_data_batch

log = logging.getLogger("streaming_jobs.progress.drain")

MODES = ("auto", "always", "never")
"""``--progress``: the terminal line when stderr is a terminal, always, or never."""
RATE_WINDOW = 20.0
"""Seconds of reports the rate is measured over."""
LOG_EVERY = 5.0
"""Seconds between two log lines of a drain (the final line is always logged)."""
WAITING = "draining: waiting for the first batch"
MIN_WIDTH = 20
"""Terminals narrower than this (or of unknown width) get the line uncut."""


@dataclass(frozen=True, slots=True)
class DrainFigures:
    """How far a drain got: messages drained of the total, and the recent rate."""

    done: int
    total: int
    rate: float | None = None
    """Messages per second over the recent reports; None until two reports at different
    times."""

    @property
    def percent(self) -> float:
        """Share drained; a drain with nothing to drain is complete."""
        return 100.0 if self.total <= 0 else 100.0 * self.done / self.total

    @property
    def seconds_left(self) -> float | None:
        """The rest at the recent rate; None without a rate."""
        if self.done >= self.total:
            return 0.0
        return (self.total - self.done) / self.rate if self.rate else None


def frozen_receivers(progress: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The receivers of a progress report made after every receiver froze; None before."""
    receivers = source_receivers(progress)
    if not receivers:
        return None
    if not all(isinstance(r, dict) and r.get("frozen") is True for r in receivers):
        return None
    return receivers


class DrainProgress:
    """The figures of one drain, from the query's progress reports (no Spark needed)."""

    def __init__(self, started: float, window: float = RATE_WINDOW) -> None:
        self.started = started
        """Clock value when the query started."""
        self.window = window
        self.figures: DrainFigures | None = None
        """None until a report made after the freeze arrived."""
        self._starts: list[int] | None = None
        self._last_batch = -1
        self._points: deque[tuple[float, int]] = deque()

    def add(self, progress: Mapping[str, Any], now: float) -> bool:
        """Take one progress report, seen at clock value ``now``; True when the figures
        changed. Reports of batches already taken, of triggers that ran no batch and of
        batches before the freeze change nothing."""
        batch = progress.get("batchId")
        if not isinstance(batch, int) or batch <= self._last_batch or not is_data_batch(progress):
            return False
        receivers = frozen_receivers(progress)
        if receivers is None:
            return False
        self._last_batch = batch
        if self._starts is None or len(self._starts) != len(receivers):
            self._starts = [int(r.get("committed", 0)) for r in receivers]
        targets = [int(r.get("walHighWaterMark", 0)) for r in receivers]
        ends = [int(r.get("batchEnd", r.get("committed", 0))) for r in receivers]
        total = done = 0
        for start, target, end in zip(self._starts, targets, ends, strict=True):
            size = max(0, target - start)
            total += size
            done += min(size, max(0, end - start))
        previous = self.figures
        self.figures = DrainFigures(done, total, self._rate(now, done))
        return self.figures != previous

    def _rate(self, now: float, done: int) -> float | None:
        """Messages per second from the oldest report in the window to this one (reports seen
        at the same clock value count as the last of them)."""
        points = self._points
        if points and points[-1][0] >= now:
            points.pop()
        points.append((now, done))
        while len(points) > 2 and points[1][0] <= now - self.window:
            points.popleft()
        (first, first_done), (last, last_done) = points[0], points[-1]
        if last <= first:
            return self.figures.rate if self.figures is not None else None
        return (last_done - first_done) / (last - first)

    def finish(self, complete: bool) -> DrainFigures:
        """The figures at the end: a complete drain (the query finished) reached its target,
        0 of 0 when no batch had anything to drain; otherwise the last figures."""
        figures = self.figures or DrainFigures(0, 0)
        if complete:
            figures = DrainFigures(figures.total, figures.total, figures.rate)
        self.figures = figures
        return figures


def _count(n: int) -> str:
    return f"{n:,}"


def duration_text(seconds: float) -> str:
    """E.g. ``4.6 s``, ``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def progress_text(figures: DrainFigures | None) -> str:
    """The line during a drain, e.g. ``draining: 12,345 / 50,000 messages (24.7%), 8,210
    msg/s, 4.6 s left``; rate and time left only once known."""
    if figures is None:
        return WAITING
    parts = [
        f"draining: {_count(figures.done)} / {_count(figures.total)} messages "
        f"({figures.percent:.1f}%)"
    ]
    if figures.rate is not None:
        parts.append(f"{figures.rate:,.0f} msg/s")
    left = figures.seconds_left
    if left is not None and figures.done < figures.total:
        parts.append(f"{duration_text(left)} left")
    return ", ".join(parts)


def final_text(figures: DrainFigures, elapsed: float, how: str) -> str:
    """The line at the end, e.g. ``drained: 50,000 / 50,000 messages (100.0%) in 6.1 s, 8,197
    msg/s`` (the rate is the average over the run); ``how`` is ``finished``, ``stopped`` or
    ``failed``."""
    verb = "drained" if how == "finished" else f"drain {how}"
    text = (
        f"{verb}: {_count(figures.done)} / {_count(figures.total)} messages "
        f"({figures.percent:.1f}%) in {duration_text(max(0.0, elapsed))}"
    )
    if figures.done and elapsed > 0:
        text += f", {figures.done / elapsed:,.0f} msg/s"
    return text


def terminal_stream(mode: str, stream: TextIO) -> TextIO | None:
    """The stream for the terminal line under ``--progress`` ``mode``: ``auto`` only when
    ``stream`` is a terminal, ``always`` even when it is not, ``never`` none."""
    if mode == "always":
        return stream
    if mode == "auto":
        try:
            return stream if stream.isatty() else None
        except (AttributeError, ValueError):  # no isatty, or closed
            return None
    return None


def _width(stream: TextIO) -> int | None:
    """Columns of a terminal stream; None when it is not one or gives no usable size (a
    pseudo-terminal may say 0)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns if stream.isatty() else 0
    except (AttributeError, OSError, ValueError):
        return None
    return columns if columns >= MIN_WIDTH else None


class DrainDisplay:
    """Shows a drain's figures: on ``stream`` (None: not at all) one line rewritten in place
    with ``\\r``, ended with a newline by :meth:`finish`; in the log, the figures at most every
    ``log_every`` seconds, and the final line."""

    def __init__(
        self, stream: TextIO | None, started: float, *, log_every: float = LOG_EVERY
    ) -> None:
        self.stream = stream
        self.progress = DrainProgress(started)
        self.log_every = log_every
        self._shown = ""
        """The text on the terminal line now ("" when cleared)."""
        self._logged: DrainFigures | None = None
        self._logged_at: float | None = None
        self._seen: tuple[Any, Any] | None = None
        """(batch id, timestamp) of the last progress event taken."""

    def poll(
        self, query: Any, now: float, log_batches: Callable[[Any], None] | None = None
    ) -> None:
        """Take the reports new since the last call (``query`` is a StreamingQuery) at clock
        value ``now``; ``log_batches(query)`` logs other lines while the terminal line is
        cleared; then log the figures when due and redraw."""
        last = query.lastProgress
        # an idle trigger's event has the next batch's id: events differ by their time too
        event = None if last is None else (last.get("batchId"), last.get("timestamp"))
        new = event is not None and event != self._seen
        if new:
            self.clear()
        if log_batches is not None:
            log_batches(query)
        if new:
            self._seen = event
            for progress in query.recentProgress:
                self.progress.add(progress, now)
        self._log(now)
        self._draw(progress_text(self.progress.figures))

    def _log(self, now: float) -> None:
        figures = self.progress.figures
        if figures is None or figures == self._logged or figures.done >= figures.total:
            return  # a complete drain: the final line says it
        if self._logged_at is not None and now - self._logged_at < self.log_every:
            return
        self.clear()
        log.info("%s", progress_text(figures))
        self._logged, self._logged_at = figures, now

    def clear(self) -> None:
        """Erase the terminal line, so that a line written next starts on an empty one."""
        if self.stream is not None and self._shown:
            self._write("\r" + " " * len(self._shown) + "\r")
            self._shown = ""

    def _draw(self, text: str) -> None:
        if self.stream is None or text == self._shown:
            return
        width = _width(self.stream)
        if width is not None and len(text) >= width:
            text = text[: max(0, width - 1)]
        self._write("\r" + text + " " * max(0, len(self._shown) - len(text)))
        self._shown = text

    def _write(self, text: str) -> None:
        assert self.stream is not None
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed terminal: the log still has the figures
            self.stream = None

    def finish(self, now: float, how: str) -> str:
        """End the display: ``how`` is ``finished`` (the drain reached its target: 100%),
        ``stopped`` or ``failed``. The final line replaces the terminal line, with a newline,
        and is logged; returns it."""
        figures = self.progress.finish(complete=how == "finished")
        text = final_text(figures, now - self.progress.started, how)
        if self.stream is not None:
            self._draw(text)
            self._write("\n")
            self._shown = ""
        log.info("%s", text)
        return text
