"""Condition waits with a deadline, for tests that must not sleep and hope."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None],
    timeout: float,
    interval: float = 0.01,
    message: str | Callable[[], str] = "condition was not met",
) -> T:
    """Poll `predicate` until it returns a truthy value and return that value (never None: a
    predicate typed `X | None` gives an `X`).

    Raises AssertionError with `message` (called if it is callable, so it can
    describe the state at the deadline) when `timeout` seconds pass first.
    The predicate is always evaluated at least once, and once more at the deadline.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            text = message() if callable(message) else message
            raise AssertionError(f"{text} (waited {timeout:g}s)")
        time.sleep(min(interval, remaining))
