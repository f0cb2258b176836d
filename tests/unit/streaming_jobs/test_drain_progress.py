"""The progress of an available-now drain (``streaming_jobs.drain_progress``) from synthetic
progress reports: figures, the terminal line on terminals and pipes, the log's pace."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Sequence
from typing import Any

import pytest

from streaming_jobs.drain_progress import (
    WAITING,
    DrainDisplay,
    DrainFigures,
    DrainProgress,
    duration_text,
    final_text,
    progress_text,
    terminal_stream,
)

LOGGER = "streaming_jobs.progress.drain"


def _progress(
    batch: int,
    ends: Sequence[int],
    receivers: Sequence[tuple[int, int]],
    *,
    frozen: bool = True,
    data: bool = True,
) -> dict[str, Any]:
    """A query progress of batch ``batch``: each receiver's end offset, and (target, committed)
    in the source's report."""
    positions = [{"wal": f"w{i}", "offset": end} for i, end in enumerate(ends)]
    end_offset = positions[0] if len(positions) == 1 else {"shards": positions}
    report = {
        **end_offset,
        "version": 1,
        "receivers": [
            {
                "receiver": i,
                "walHighWaterMark": target,
                "committed": committed,
                "batchEnd": end,
                "backlog": target - end,
                "frozen": frozen,
            }
            for i, ((target, committed), end) in enumerate(zip(receivers, ends, strict=True))
        ],
    }
    durations = {"addBatch": 100, "triggerExecution": 150} if data else {"latestOffset": 1}
    return {
        "batchId": batch,
        "durationMs": durations,
        "sources": [{"endOffset": json.dumps(end_offset), "latestOffset": json.dumps(report)}],
    }


def test_done_is_the_batch_s_end_and_the_start_the_first_frozen_report_s_committed() -> None:
    drain = DrainProgress(started=0.0)
    # the run starts at offset 100 with 400 messages to drain (target 500)
    assert drain.add(_progress(3, [200], [(500, 100)]), now=10.0)
    figures = drain.figures
    assert figures == DrainFigures(100, 400, None)  # one report: no rate yet
    assert figures.percent == 25.0 and figures.seconds_left is None
    assert drain.add(_progress(4, [300], [(500, 200)]), now=12.0)
    figures = drain.figures
    assert figures is not None
    assert (figures.done, figures.total, figures.rate) == (200, 400, 50.0)
    assert figures.percent == 50.0 and figures.seconds_left == 4.0
    assert progress_text(figures) == "draining: 200 / 400 messages (50.0%), 50 msg/s, 4.0 s left"


def test_reports_that_are_old_idle_or_before_the_freeze_change_nothing() -> None:
    drain = DrainProgress(started=0.0)
    assert not drain.add(_progress(0, [0], [(0, 0)], frozen=False), now=1.0)  # before the freeze
    assert not drain.add({"batchId": 1, "durationMs": {"addBatch": 1}, "sources": []}, now=1.0)
    assert drain.figures is None
    assert drain.add(_progress(1, [50], [(100, 0)]), now=2.0)
    assert not drain.add(_progress(1, [50], [(100, 0)]), now=3.0)  # seen already
    assert not drain.add(_progress(2, [50], [(100, 50)], data=False), now=3.0)  # no batch ran
    assert drain.figures == DrainFigures(50, 100, None)


def test_several_receivers_add_up() -> None:
    drain = DrainProgress(started=0.0)
    # receiver 0 drains 10 -> 110, receiver 1 20 -> 70
    drain.add(_progress(5, [40, 30], [(110, 10), (70, 20)]), now=1.0)
    assert drain.figures == DrainFigures(40, 150, None)
    drain.add(_progress(6, [110, 50], [(110, 40), (70, 30)]), now=2.0)
    assert drain.figures == DrainFigures(130, 150, 90.0)
    assert drain.figures.percent == pytest.approx(86.667, abs=1e-3)


def test_the_rate_is_over_the_recent_window_and_holds_between_reports() -> None:
    drain = DrainProgress(started=0.0, window=10.0)
    drain.add(_progress(0, [100], [(10_000, 0)]), now=0.0)
    drain.add(_progress(1, [200], [(10_000, 100)]), now=1.0)  # 100 msg/s
    drain.add(_progress(2, [300], [(10_000, 200)]), now=1.0)  # seen in the same poll
    assert drain.figures is not None and drain.figures.rate == 200.0
    drain.add(_progress(3, [5_300], [(10_000, 300)]), now=21.0)  # 1,000 in 20 s before
    assert drain.figures is not None and drain.figures.rate == 250.0
    assert drain.figures.seconds_left == pytest.approx(4_700 / 250.0)
    # no new report: the figures stand (nothing made up between batches)
    assert not drain.add(_progress(3, [5_300], [(10_000, 300)]), now=40.0)
    assert drain.figures.rate == 250.0


def test_nothing_to_drain_is_complete_at_once() -> None:
    drain = DrainProgress(started=0.0)
    drain.add(_progress(0, [70], [(70, 70)]), now=1.0)
    figures = drain.figures
    assert figures == DrainFigures(0, 0, None)
    assert figures.percent == 100.0 and figures.seconds_left == 0.0
    assert progress_text(figures) == "draining: 0 / 0 messages (100.0%)"
    # a run whose receivers had nothing: no batch, no report
    empty = DrainProgress(started=0.0).finish(complete=True)
    assert empty == DrainFigures(0, 0) and empty.percent == 100.0
    assert final_text(empty, 0.0, "finished") == "drained: 0 / 0 messages (100.0%) in 0.0 s"


def test_the_final_figures() -> None:
    drain = DrainProgress(started=0.0)
    drain.add(_progress(0, [3_000], [(12_000, 0)]), now=1.0)
    stopped = drain.finish(complete=False)
    assert (stopped.done, stopped.total) == (3_000, 12_000)
    assert final_text(stopped, 2.0, "stopped") == (
        "drain stopped: 3,000 / 12,000 messages (25.0%) in 2.0 s, 1,500 msg/s"
    )
    done = drain.finish(complete=True)  # the query finished: the target was reached
    assert (done.done, done.total, done.percent) == (12_000, 12_000, 100.0)
    assert final_text(done, 64.0, "finished") == (
        "drained: 12,000 / 12,000 messages (100.0%) in 1 min 04 s, 188 msg/s"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(4.56, "4.6 s"), (42.4, "42 s"), (185, "3 min 05 s"), (3_720, "1 h 02 min")],
)
def test_durations(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


class _Stream(io.StringIO):
    """A stderr stand-in that is a terminal or not."""

    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class _Query:
    """A StreamingQuery's progress, as the job polls it."""

    def __init__(self) -> None:
        self.recentProgress: list[dict[str, Any]] = []

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return self.recentProgress[-1] if self.recentProgress else None


def test_the_terminal_line_goes_where_progress_says() -> None:
    tty, pipe = _Stream(tty=True), _Stream(tty=False)
    assert terminal_stream("auto", tty) is tty
    assert terminal_stream("auto", pipe) is None
    assert terminal_stream("always", pipe) is pipe
    assert terminal_stream("never", tty) is None


def test_the_terminal_line_is_rewritten_in_place_and_ends_with_a_newline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    stream, query = _Stream(tty=False), _Query()
    display = DrainDisplay(terminal_stream("always", stream), started=0.0)
    display.poll(query, 0.5)
    assert stream.getvalue() == "\r" + WAITING
    display.poll(query, 1.0)
    assert stream.getvalue() == "\r" + WAITING  # unchanged: not written again
    seen_by_batch_lines = []
    query.recentProgress.append(_progress(0, [100], [(400, 0)]))
    display.poll(query, 2.0, lambda q: seen_by_batch_lines.append(stream.getvalue()))
    # the batch lines were logged on a cleared line
    assert seen_by_batch_lines == ["\r" + WAITING + "\r" + " " * len(WAITING) + "\r"]
    assert stream.getvalue().endswith("\rdraining: 100 / 400 messages (25.0%)")
    query.recentProgress.append(_progress(1, [300], [(400, 100)]))
    display.poll(query, 3.0)
    final = display.finish(4.0, "finished")
    assert final == "drained: 400 / 400 messages (100.0%) in 4.0 s, 100 msg/s"
    lines = [part.rstrip() for part in stream.getvalue().split("\r") if part.strip()]
    assert lines[-2:] == [
        "draining: 300 / 400 messages (75.0%), 200 msg/s, 0.5 s left",
        final,
    ]
    assert stream.getvalue().endswith("\n") and stream.getvalue().count("\n") == 1
    assert [r.getMessage() for r in caplog.records][-1] == final


def test_without_a_terminal_only_the_log_shows_the_drain(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    pipe, query = _Stream(tty=False), _Query()
    display = DrainDisplay(terminal_stream("auto", pipe), started=0.0)
    query.recentProgress.append(_progress(0, [10], [(20, 0)]))
    display.poll(query, 1.0)
    query.recentProgress.append(_progress(1, [20], [(20, 10)]))
    display.poll(query, 10.0)  # complete: the final line says it
    display.finish(11.0, "finished")
    assert pipe.getvalue() == ""
    assert [r.getMessage() for r in caplog.records] == [
        "draining: 10 / 20 messages (50.0%)",
        "drained: 20 / 20 messages (100.0%) in 11 s, 2 msg/s",
    ]


def test_a_batch_after_an_idle_trigger_with_its_id_is_taken() -> None:
    query, display = _Query(), DrainDisplay(None, started=0.0)
    query.recentProgress.append({**_progress(0, [10], [(30, 0)]), "timestamp": "t0"})
    display.poll(query, 1.0)
    idle = {**_progress(1, [10], [(30, 10)], data=False), "timestamp": "t1"}
    query.recentProgress.append(idle)
    display.poll(query, 2.0)
    query.recentProgress.append({**_progress(1, [20], [(30, 10)]), "timestamp": "t2"})
    display.poll(query, 3.0)
    assert display.progress.figures == DrainFigures(20, 30, 5.0)  # 10 in 2 s


def test_the_log_has_the_figures_at_most_every_few_seconds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    query = _Query()
    display = DrainDisplay(None, started=0.0, log_every=5.0)
    logged_at: list[float] = []
    for tick in range(25):  # a poll every 0.5 s, a batch of 10 every 1 s
        now = tick * 0.5
        if tick % 2 == 0:
            batch = tick // 2
            query.recentProgress.append(_progress(batch, [10 * (batch + 1)], [(1_000, 10 * batch)]))
        before = len(caplog.records)
        display.poll(query, now)
        if len(caplog.records) > before:
            logged_at.append(now)
    assert logged_at == [0.0, 5.0, 10.0]
    assert caplog.records[1].getMessage().startswith("draining: 60 / 1,000 messages (6.0%)")
    display.poll(query, 30.0)  # the last figures, held back by the pace, once it allows
    assert caplog.records[-1].getMessage().startswith("draining: 130 / 1,000 messages")
    before = len(caplog.records)
    display.poll(query, 40.0)  # no new figures: no line
    assert len(caplog.records) == before
    display.finish(31.0, "stopped")
    assert caplog.records[-1].getMessage().startswith("drain stopped: 130 / 1,000 messages")
