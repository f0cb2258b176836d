"""Condition waits with a deadline, for tests that must not sleep and hope: any condition
(:func:`wait_until`), and a client's subscription or DISCONNECT in a broker's log
(:func:`wait_subscribed`, :func:`wait_disconnected`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from devtools.broker_process import BrokerProcess
    from tests.support.ingest_job import Job

T = TypeVar("T")

SUBSCRIBE_TIMEOUT = 90.0
"""Deadline for a query's receiver to subscribe (starting the query's Python runner)."""
DISCONNECT_TIMEOUT = 30.0
"""The runner (or a receiver process) stops its receivers after Spark has moved on."""


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


def wait_subscribed(
    broker: BrokerProcess, client_id: str, topic: str, qos: int, job: Job | None = None
) -> None:
    """Wait until Mosquitto logged the SUBSCRIBE of ``client_id`` to ``topic`` at ``qos`` (log
    type ``subscribe``): messages published before a receiver's first subscription are not
    queued for it.

    With ``job`` (a run of the ingest job, :mod:`tests.support.ingest_job`), wait on the job:
    fail at once if it exits, and wait for its query to run too (its ``ingesting`` line, after
    its receiver's own connection); the job makes its session before Spark starts, so from its
    SUBSCRIBE on the broker queues for it.
    """
    line = f": {client_id} {qos} {topic}\n"
    if job is None:
        wait_until(
            lambda: line in broker.log_text(),
            SUBSCRIBE_TIMEOUT,
            interval=0.05,
            message=f"{client_id} did not subscribe to {topic!r} at QoS {qos} on {broker.url}",
        )
        return
    from tests.support.ingest_job import INGESTING, START_TIMEOUT  # it imports this module

    job.wait_for(
        f"{client_id} never subscribed to {topic}",
        lambda: line in broker.log_text() and INGESTING in job.stdout,
        START_TIMEOUT,
    )


def wait_disconnected(broker: BrokerProcess, ids: list[str]) -> None:
    """Wait until Mosquitto logged a DISCONNECT of every client in ``ids`` (``Client <id>
    disconnected.``); none closed its connection without one (``closed its connection.`` or a
    socket error)."""

    def lines() -> list[str]:
        return [line for line in broker.log_text().splitlines() if any(i in line for i in ids)]

    wait_until(
        lambda: all(f"Client {i} disconnected." in broker.log_text() for i in ids),
        DISCONNECT_TIMEOUT,
        message=lambda: "no DISCONNECT from every receiver; broker log:\n" + "\n".join(lines()),
    )
    text = broker.log_text()
    for client in ids:
        assert f"Client {client} closed its connection." not in text
        assert f"Socket error on client {client}," not in text
