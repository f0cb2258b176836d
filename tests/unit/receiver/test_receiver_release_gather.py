"""A read of QoS 2 releases waits for more while many PUBRELs are owed
(``receiver._gather_releases``), with scripted reads in place of a socket."""

from __future__ import annotations

import time

from connector.mqtt.driver import Read
from connector.mqtt.packets import Publish
from connector.receiver.receiver import RELEASE_GATHER, RELEASE_GATHER_WAIT, _gather_releases
from tests.support.scripted_reads import ScriptedReads


def releases(first: int, count: int) -> list[int]:
    return list(range(first, first + count))


def test_reads_are_joined_until_enough_releases_are_in_hand() -> None:
    read = Read([], releases(1, 20))
    later = [Read([], releases(21, 30)), Read([], releases(51, 30)), Read([], [999])]
    client = ScriptedReads(*later, open_pubrecs=256)
    assert _gather_releases(client, read)  # type: ignore[arg-type]
    assert read.released == releases(1, 80), "joined in order, and no read past the target"
    assert len(client.reads) == 1
    assert all(t is not None and 0 < t <= RELEASE_GATHER_WAIT for t in client.timeouts)


def test_no_wait_when_few_releases_are_owed() -> None:
    """One PUBREL fewer owed than RELEASE_GATHER: no wait (a broker keeping 20 exchanges in
    flight never comes near)."""
    read = Read([], releases(1, 5))
    client = ScriptedReads(Read([], [99]), open_pubrecs=5 + RELEASE_GATHER - 1)
    assert not _gather_releases(client, read)  # type: ignore[arg-type]
    assert client.timeouts == [] and read.released == releases(1, 5)


def test_a_message_ends_the_wait_and_joins_the_read() -> None:
    message = Publish("r/t", b"new", 1, False, False, 7)
    read = Read([], releases(1, 10))
    client = ScriptedReads(Read([message], [11]), Read([], [12]), open_pubrecs=256)
    assert _gather_releases(client, read)  # type: ignore[arg-type]
    assert read.messages == [message] and read.released == releases(1, 11)
    assert len(client.reads) == 1


def test_the_wait_ends_at_its_deadline_when_no_release_comes() -> None:
    read = Read([], releases(1, 10))
    client = ScriptedReads(open_pubrecs=256)
    began = time.monotonic()
    assert _gather_releases(client, read)  # type: ignore[arg-type]
    assert time.monotonic() - began < 1.0  # bounded by RELEASE_GATHER_WAIT, with slack for load
    assert client.timeouts and read.released == releases(1, 10)
    assert all(t is not None and t <= RELEASE_GATHER_WAIT for t in client.timeouts)


def test_a_lost_connection_is_not_read_from() -> None:
    read = Read([], releases(1, 10))
    client = ScriptedReads(Read([], [11]), connected=False, open_pubrecs=256)
    _gather_releases(client, read)  # type: ignore[arg-type]
    assert client.timeouts == [] and read.released == releases(1, 10)
