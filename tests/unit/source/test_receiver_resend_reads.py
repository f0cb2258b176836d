"""The receiver reads on while a WAL search hit waits for the resends that confirm it
(``receiver._qos1_resends``), with a real WAL and scripted reads in place of a socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.mqtt.driver import Batch
from connector.mqtt.packets import Publish
from connector.source.receiver import CONFIRM_READ_WAIT, _qos1_resends
from connector.source.resend_run import ResendRun
from connector.wal import WalWriter
from tests.scripted_reads import ScriptedReads

TOPIC = "r/t"
IDS = 100
STORED = 300


def message(n: int, *, dup: bool = True, new: bool = False) -> Publish:
    payload = (b"new%d" if new else b"m%05d") % n
    return Publish(TOPIC, payload, 1, False, dup, n % IDS + 1)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[ResendRun]:
    """Messages 0..299 stored on an earlier connection, ids cycling over 1..100."""
    with WalWriter.open(tmp_path / "wal", fsync=False) as writer:
        writer.append(
            [(TOPIC, message(n).payload, 1, False, False, n % IDS + 1, 0) for n in range(STORED)]
        )
        resends = ResendRun(writer)
        resends.connection_started(writer.next_offset)
        yield resends


def verdicts(run: ResendRun, client: ScriptedReads, batch: Batch) -> list[bool]:
    found = _qos1_resends(run, client, batch)  # type: ignore[arg-type]
    pairs = [m for m in batch.messages if m.dup and m.qos == 1]
    return [next(found) for _ in pairs]


def test_a_read_ending_after_the_hit_is_joined_by_the_next_read(run: ResendRun) -> None:
    """Message 150's id was reused by 250: only the search finds it. Its read ends one resend
    later; the next read brings the rest, and all are redeliveries (none stored again)."""
    batch = Batch([message(150), message(151)])
    client = ScriptedReads(Batch([message(n) for n in range(152, STORED)] + [message(0, new=True)]))
    got = verdicts(run, client, batch)
    assert got == [True] * (STORED - 150) + [False]
    assert [m.payload for m in batch.messages][-2:] == [message(299).payload, b"new0"]
    assert client.timeouts == [CONFIRM_READ_WAIT]
    assert run.searches == 1 and run.rejected == 0


def test_the_hit_is_stored_when_no_further_resend_comes(run: ResendRun) -> None:
    batch = Batch([message(150), message(151)])
    client = ScriptedReads(Batch([message(7, dup=False, new=True)]))  # a first delivery, no resend
    assert verdicts(run, client, batch) == [False, False]
    assert len(batch.messages) == 3, "the read taken while waiting goes with the batch"
    assert run.rejected == 1


def test_a_lost_connection_is_not_read_from(run: ResendRun) -> None:
    batch = Batch([message(150), message(151)])
    client = ScriptedReads(Batch([message(n) for n in range(152, 160)]), connected=False)
    assert verdicts(run, client, batch) == [False, False]
    assert client.timeouts == [] and len(batch.messages) == 2
