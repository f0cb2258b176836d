"""Receive times of appended offsets and the receive rate (connector/receiver/figures.py)."""

from __future__ import annotations

from connector.receiver.figures import (
    ARRIVAL_RESOLUTION_US,
    RATE_WINDOW_SECONDS,
    ArrivalIndex,
    RateMeter,
)


def test_an_offset_has_the_time_of_the_append_that_holds_it() -> None:
    index = ArrivalIndex()
    assert index.stamp_at(0) is None  # nothing noted
    index.note(10, 1_000_000)
    index.note(15, 2_000_000)
    index.note(40, 3_000_000)
    assert index.stamp_at(9) is None  # stored before anything was noted
    assert [index.stamp_at(o) for o in (10, 14, 15, 39, 40, 1000)] == [
        1_000_000, 1_000_000, 2_000_000, 2_000_000, 3_000_000, 3_000_000,
    ]  # fmt: skip


def test_appends_closer_than_the_resolution_share_an_entry() -> None:
    index = ArrivalIndex()
    index.note(0, 5_000_000)
    index.note(3, 5_000_000 + ARRIVAL_RESOLUTION_US - 1)  # shares the first entry
    index.note(7, 5_000_000 + ARRIVAL_RESOLUTION_US)
    assert len(index) == 2
    assert index.stamp_at(5) == 5_000_000  # never later than the true time
    assert index.stamp_at(7) == 5_000_000 + ARRIVAL_RESOLUTION_US


def test_committed_entries_are_forgotten_and_the_arrays_shrink() -> None:
    index = ArrivalIndex()
    step = ARRIVAL_RESOLUTION_US
    for i in range(5000):
        index.note(i * 10, i * step)
    index.forget_below(25)  # offsets 20..29 are still needed
    assert index.stamp_at(25) == 2 * step
    assert len(index) == 4998
    index.forget_below(40_000)
    assert len(index) == 1000 and index.stamp_at(40_000) == 4000 * step
    assert index.stamp_at(39_999) is None  # committed, forgotten
    index.note(50_000, 5000 * step)
    assert index.stamp_at(50_005) == 5000 * step and len(index) == 1001


def test_the_rate_counts_the_last_window() -> None:
    meter = RateMeter(now=100.0)
    assert meter.rate(100.5) == 0.0
    meter.note(30, 100.2)
    meter.note(20, 101.7)
    # 2 s since the start: the span is 2 s, not the whole window
    assert meter.rate(102.0) == 25.0
    meter.note(50, 105.0)
    assert meter.rate(110.0) == 100 / RATE_WINDOW_SECONDS
    # 100.2's and 101.7's seconds leave the window, 105's stays
    assert meter.rate(113.0) == 50 / RATE_WINDOW_SECONDS
    assert meter.rate(200.0) == 0.0


def test_the_rate_of_a_short_start_is_not_inflated() -> None:
    meter = RateMeter(now=0.0)
    meter.note(7, 0.1)
    assert meter.rate(0.2) == 7.0  # spans shorter than a second count as one
