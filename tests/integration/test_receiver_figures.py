"""A receiver's figures for the progress report (``Receiver.figures``) against real Mosquitto:
the age of the oldest uncommitted message, from this process's appends and, after a restart,
from the WAL; the receive rate; the WAL's bytes."""

from __future__ import annotations

import time
from pathlib import Path

from connector.receiver.figures import ARRIVAL_RESOLUTION_US, RATE_WINDOW_SECONDS
from connector.receiver.receiver import Receiver
from connector.wal.segment import segment_name
from tests.integration.receiver_setup import options
from tests.support.brokers import MosquittoBroker
from tests.support.publishing import publish_with_cli
from tests.support.waiting import wait_until

RESOLUTION = ARRIVAL_RESOLUTION_US / 1e6


def stored(receiver: Receiver, count: int) -> None:
    wait_until(
        lambda: receiver.wal.next_offset == count,
        15,
        message=lambda: f"WAL holds {receiver.wal.next_offset} of {count}",
    )


def test_age_rate_and_bytes(mosquitto: MosquittoBroker, tmp_path: Path) -> None:
    wal = tmp_path / "wal"
    first = Receiver(options(mosquitto, wal, 1, clientId="figures-test"))
    first.start()
    try:
        before = time.time()
        publish_with_cli(mosquitto, "r/a", 1, 8)
        stored(first, 8)
        after = time.time()
        figures = first.figures()
        seen_at = time.time()
        # the oldest uncommitted message arrived between `before` and `after`
        age = figures["oldestUncommittedSeconds"]
        assert isinstance(age, float)
        assert seen_at - after - RESOLUTION <= age <= seen_at - before + RESOLUTION
        assert figures["received"] == 8
        rate = figures["receiveRate"]
        assert isinstance(rate, float) and 8 / RATE_WINDOW_SECONDS <= rate <= 8
        on_disk = sum((wal / segment_name(f)).stat().st_size for f in first.wal.segments)
        assert figures["walBytes"] == on_disk > 8 * 20  # eight 20-byte payloads and more
        first.committed_to(8)
        assert first.figures()["oldestUncommittedSeconds"] == 0.0
        publish_with_cli(mosquitto, "r/b", 1, 2)
        stored(first, 10)
    finally:
        first.stop()
    # A new process has no append times for what it found stored: it reads the WAL.
    restarted_at = time.time()
    second = Receiver(options(mosquitto, wal, 1, clientId="figures-test"))
    second.start()
    try:
        second.committed_to(8)
        figures = second.figures()
        age = figures["oldestUncommittedSeconds"]
        assert isinstance(age, float) and age >= time.time() - restarted_at
        assert age <= time.time() - before
        assert figures["received"] == 0 and figures["receiveRate"] == 0.0
        second.committed_to(10)
        assert second.figures()["oldestUncommittedSeconds"] == 0.0
    finally:
        second.stop()
