"""A read of QoS 2 releases waits for more while many PUBRELs are owed
(``receiver._gather_releases``), with scripted reads in place of a socket."""

from __future__ import annotations

import time
from dataclasses import dataclass

from connector.mqtt.driver import Batch
from connector.mqtt.packets import Publish
from connector.source.receiver import RELEASE_GATHER, RELEASE_GATHER_WAIT, _gather_releases


@dataclass
class OpenExchanges:
    open_pubrecs: int


class ScriptedReads:
    """Stands in for the client: ``poll`` hands out the given reads, then empty ones."""

    def __init__(self, open_pubrecs: int, *reads: Batch, connected: bool = True) -> None:
        self.session = OpenExchanges(open_pubrecs)
        self.reads = list(reads)
        self.connected = connected
        self.timeouts: list[float | None] = []

    def poll(self, timeout: float | None = None) -> Batch:
        self.timeouts.append(timeout)
        return self.reads.pop(0) if self.reads else Batch()


def releases(first: int, count: int) -> list[int]:
    return list(range(first, first + count))


def test_reads_are_joined_until_enough_releases_are_in_hand() -> None:
    batch = Batch([], releases(1, 20))
    later = [Batch([], releases(21, 30)), Batch([], releases(51, 30)), Batch([], [999])]
    client = ScriptedReads(256, *later)
    assert _gather_releases(client, batch)  # type: ignore[arg-type]
    assert batch.released == releases(1, 80), "joined in order, and no read past the target"
    assert len(client.reads) == 1
    assert all(t is not None and 0 < t <= RELEASE_GATHER_WAIT for t in client.timeouts)


def test_no_wait_when_few_releases_are_owed() -> None:
    """A broker keeping 20 exchanges in flight is never waited for."""
    batch = Batch([], releases(1, 5))
    client = ScriptedReads(5 + RELEASE_GATHER - 1, Batch([], [99]))
    assert not _gather_releases(client, batch)  # type: ignore[arg-type]
    assert client.timeouts == [] and batch.released == releases(1, 5)


def test_a_message_ends_the_wait_and_joins_the_batch() -> None:
    message = Publish("r/t", b"new", 1, False, False, 7)
    batch = Batch([], releases(1, 10))
    client = ScriptedReads(256, Batch([message], [11]), Batch([], [12]))
    assert _gather_releases(client, batch)  # type: ignore[arg-type]
    assert batch.messages == [message] and batch.released == releases(1, 11)
    assert len(client.reads) == 1


def test_the_wait_ends_at_its_deadline_when_no_release_comes() -> None:
    batch = Batch([], releases(1, 10))
    client = ScriptedReads(256)
    began = time.monotonic()
    assert _gather_releases(client, batch)  # type: ignore[arg-type]
    assert time.monotonic() - began < 1.0  # bounded by RELEASE_GATHER_WAIT, with slack for load
    assert client.timeouts and batch.released == releases(1, 10)
    assert all(t is not None and t <= RELEASE_GATHER_WAIT for t in client.timeouts)


def test_a_lost_connection_is_not_read_from() -> None:
    batch = Batch([], releases(1, 10))
    client = ScriptedReads(256, Batch([], [11]), connected=False)
    _gather_releases(client, batch)  # type: ignore[arg-type]
    assert client.timeouts == [] and batch.released == releases(1, 10)
