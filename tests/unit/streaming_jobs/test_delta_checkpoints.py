"""The background checkpointer (``streaming_jobs.delta_checkpoints``) with plain callables.

Rules under test: requests return at once; one thread runs the writes; a newer request for a
table replaces one still waiting; a failed write is logged and counted and later ones still
run; ``wait`` reports whether everything finished in time. ``LogCleanups`` answers "due" once
per interval per table: the smaller of ``LOG_CLEANUP_EVERY`` and a quarter of the retention.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from streaming_jobs.delta_checkpoints import LOG_CLEANUP_EVERY, Checkpointer, LogCleanups

DEADLINE = 30.0


def test_a_newer_request_replaces_the_one_still_waiting_for_the_same_table() -> None:
    checkpointer = Checkpointer()
    running = threading.Event()
    release = threading.Event()
    ran: list[tuple[str, int, str]] = []

    def first() -> None:
        running.set()
        assert release.wait(DEADLINE)
        ran.append(("a", 2, threading.current_thread().name))

    def record(path: str, version: int) -> Callable[[], object]:
        return lambda: ran.append((path, version, threading.current_thread().name))

    checkpointer.request("a", 2, first)
    assert running.wait(DEADLINE)
    checkpointer.request("a", 4, record("a", 4))  # replaced by 6 before it runs
    checkpointer.request("b", 3, record("b", 3))
    checkpointer.request("a", 6, record("a", 6))
    assert not checkpointer.wait(0)  # the first write is still running
    release.set()
    assert checkpointer.wait(DEADLINE)

    assert sorted((path, version) for path, version, _ in ran) == [("a", 2), ("a", 6), ("b", 3)]
    assert {thread for _, _, thread in ran} == {"delta-checkpoints"}
    assert (checkpointer.written, checkpointer.failed) == (3, 0)


def test_a_failed_write_is_logged_and_the_next_one_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    checkpointer = Checkpointer()
    ran: list[int] = []

    def failing() -> None:
        raise RuntimeError("SparkContext was shut down\nstack")

    with caplog.at_level(logging.WARNING, logger="streaming_jobs.delta_checkpoints"):
        checkpointer.request("/t", 10, failing)
        assert checkpointer.wait(DEADLINE)
        checkpointer.request("/t", 20, lambda: ran.append(20))
        assert checkpointer.wait(DEADLINE)

    assert ran == [20]
    assert (checkpointer.written, checkpointer.failed) == (1, 1)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["Delta checkpoint of /t at version 10 failed: SparkContext was shut down"]


def test_wait_with_nothing_requested_returns_at_once() -> None:
    assert Checkpointer().wait(0)


def test_log_cleanups_are_due_once_per_interval_per_table() -> None:
    now = [1000.0]
    cleanups = LogCleanups(clock=lambda: now[0])
    day = 86400.0
    assert cleanups.due("/a", day)  # the first look at a table
    assert not cleanups.due("/a", day)
    assert cleanups.due("/b", day)  # tables count apart
    now[0] += LOG_CLEANUP_EVERY - 1
    assert not cleanups.due("/a", day)
    now[0] += 1
    assert cleanups.due("/a", day)  # a long retention: every LOG_CLEANUP_EVERY seconds
    assert not cleanups.due("/a", day)


def test_a_short_log_retention_is_cleaned_every_quarter_of_it() -> None:
    now = [0.0]
    cleanups = LogCleanups(clock=lambda: now[0])
    assert cleanups.due("/a", 60.0)
    now[0] += 14.9
    assert not cleanups.due("/a", 60.0)
    now[0] += 0.1
    assert cleanups.due("/a", 60.0)
