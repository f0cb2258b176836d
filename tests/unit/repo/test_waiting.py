"""wait_until returns the first truthy value or fails at its deadline."""

from __future__ import annotations

import itertools
import time

import pytest

from tests.support.waiting import wait_until


def test_returns_first_truthy_value() -> None:
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "done", timeout=5, interval=0) == "done"


def test_fails_with_message_at_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"never ready \(waited 0.05s\)"):
        wait_until(lambda: False, timeout=0.05, message=lambda: "never ready")
    assert time.monotonic() - started >= 0.05
