"""The in-order resend rule for DUP=1 QoS 1 messages, against a real WAL (no broker)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.source.resend_run import ResendRun
from connector.wal import RecordTuple, WalColumns, WalReader, WalWriter, record_digest

TOPIC = "r/t"
IDS = 100  # packet ids cycle over 1..100, so each id is used by several stored messages
STORED = 300


def qos1(n: int) -> tuple[int, bytes]:
    """Packet id and payload of QoS 1 message number ``n``."""
    return n % IDS + 1, b"m%05d" % n


def stored_records() -> list[RecordTuple]:
    """STORED QoS 1 messages in send order, with a QoS 0 message after every 40th and a
    QoS 2 message (ids above 1000) after every 70th, which the run skips."""
    records: list[RecordTuple] = []
    for n in range(STORED):
        pid, payload = qos1(n)
        records.append((TOPIC, payload, 1, False, False, pid, 0))
        if n % 40 == 39:
            records.append(("r/zero", b"z%d" % n, 0, False, False, None, 0))
        if n % 70 == 69:
            records.append(("r/two", b"t%d" % n, 2, False, False, 1000 + n, 0))
    return records


@pytest.fixture
def wal(tmp_path: Path) -> Iterator[WalWriter]:
    """A WAL of small segments holding stored_records(), appended 25 at a time."""
    with WalWriter.open(tmp_path / "wal", segment_max_bytes=2048, fsync=False) as writer:
        records = stored_records()
        for at in range(0, len(records), 25):
            writer.append(records[at : at + 25])
        assert len(writer.segments) > 3
        yield writer


def resend(n: int) -> tuple[int, int]:
    pid, payload = qos1(n)
    return pid, record_digest(TOPIC, payload)


def latest_digest_rule(wal: WalWriter, pid: int, digest: int) -> bool:
    """The rule before runs: a redelivery only when equal to the latest message of its id."""
    return wal.latest_digest(pid) == digest


@pytest.mark.parametrize("chunk_records", [7, 65_536])
def test_an_in_order_resend_of_stored_messages_is_recognised_even_where_ids_were_reused(
    wal: WalWriter, chunk_records: int
) -> None:
    run = ResendRun(wal, chunk_records=chunk_records)
    run.connection_started(wal.next_offset)
    resent = range(150, STORED)  # the broker's in-flight list: a suffix of what it sent
    verdicts = [run.is_resend(*resend(n)) for n in resent]
    assert all(verdicts), [n for n, v in zip(resent, verdicts, strict=True) if not v]
    assert run.searches == 1
    assert not run.active, "the run ends where this connection began"
    # The latest-digest rule alone stores 150..199 again: ids 51..100 were reused by 250..299.
    old = [n for n in resent if not latest_digest_rule(wal, *resend(n))]
    assert old == list(range(150, 200))

    # Messages the broker sent after those, never received: new, although their ids are stored.
    never = [(n % IDS + 1, record_digest(TOPIC, b"new%d" % n)) for n in range(5)]
    assert [run.is_resend(*m) for m in never] == [False] * 5
    assert run.searches == 1, "after the run no search is needed"


def test_the_run_starts_where_the_latest_digest_rule_stops_matching(wal: WalWriter) -> None:
    """A resend that starts at 200: 200..299 are the latest of their ids (no search needed);
    a second pass 150.. after a reconnect needs one search, then follows the run."""
    run = ResendRun(wal)
    run.connection_started(wal.next_offset)
    assert all(run.is_resend(*resend(n)) for n in range(200, STORED))
    assert run.searches == 0
    run.connection_started(wal.next_offset)
    assert all(run.is_resend(*resend(n)) for n in range(120, STORED))
    assert run.searches == 1
    assert run.matched == 180  # 120 by the search, 121..299 by the run


def test_a_dup_message_never_stored_is_new(wal: WalWriter) -> None:
    run = ResendRun(wal)
    run.connection_started(wal.next_offset)
    assert not run.is_resend(7, record_digest(TOPIC, b"never stored"))
    assert not run.is_resend(4242, record_digest(TOPIC, b"m00001"))  # an id never used
    assert not run.is_resend(*resend(150)), "searched once: later messages are new"
    # A new connection searches again.
    run.connection_started(wal.next_offset)
    assert run.is_resend(*resend(150))
    # Another topic with a stored payload and id is another message.
    run.connection_started(wal.next_offset)
    assert not run.is_resend(qos1(150)[0], record_digest("r/other", qos1(150)[1]))


def test_a_mismatch_mid_run_falls_back_to_the_search_and_warns_once(
    wal: WalWriter, caplog: pytest.LogCaptureFixture
) -> None:
    run = ResendRun(wal)
    run.connection_started(wal.next_offset)
    with caplog.at_level(logging.WARNING, logger="connector.source.resend_run"):
        assert all(run.is_resend(*resend(n)) for n in range(150, 160))
        assert run.cursor is not None
        expected_at = run.cursor
        # Out of order: 170 comes where 160 was expected; found by the search, run goes on.
        assert run.is_resend(*resend(170))
        assert all(run.is_resend(*resend(n)) for n in range(171, 180))
        # Out of order again (back to 165): found again, no second warning.
        assert run.is_resend(*resend(165))
        # A message never stored, mid-run: new.
        assert not run.is_resend(3, record_digest(TOPIC, b"fresh"))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    text = warnings[0].getMessage()
    assert "packet id 71" in text and f"offset {expected_at}" in text
    assert f"offset {wal.next_offset}" in text
    assert run.searches == 4  # 150, 170, 165 and the fresh message


def test_a_receiver_restart_is_a_new_connection(wal: WalWriter) -> None:
    """A ResendRun made on an open WAL takes its next offset as the connection's start."""
    run = ResendRun(wal)
    assert run.conn_start == wal.next_offset
    assert all(run.is_resend(*resend(n)) for n in range(100, STORED))


def test_messages_stored_on_this_connection_are_not_part_of_the_run(wal: WalWriter) -> None:
    run = ResendRun(wal)
    run.connection_started(wal.next_offset)
    pid, payload = 9, b"stored now"
    wal.append([(TOPIC, payload, 1, False, True, pid, 0)])
    # The latest-digest rule still sees it (same as before runs existed) ...
    assert run.is_resend(pid, record_digest(TOPIC, payload))
    # ... but the search starts below this connection's first offset.
    wal.append([(TOPIC, b"m00008", 1, False, True, 9, 0)])  # same as stored message 8
    run.connection_started(wal.next_offset - 2)
    assert run.is_resend(*resend(108))
    assert run.cursor is not None and run.cursor < wal.next_offset - 2


def test_messages_in_deleted_segments_cannot_be_matched(wal: WalWriter) -> None:
    """Only what the WAL still holds can be matched; the latest-digest rule still applies."""
    run = ResendRun(wal)
    run.connection_started(wal.next_offset)
    assert wal.truncate_before(175 + 175 // 40 + 175 // 70) > 0  # offset of message 175
    first = wal.first_offset
    gone = [n for n in range(100, 200) if n + n // 40 + n // 70 < first]
    kept = [n for n in range(100, 200) if n + n // 40 + n // 70 >= first]
    assert gone and kept
    assert not run.is_resend(*resend(gone[0]))
    run.connection_started(wal.next_offset)
    assert all(run.is_resend(*resend(n)) for n in range(kept[0], STORED))


def test_a_read_racing_truncation_stops_the_search_at_the_new_first_offset(
    tmp_path: Path,
) -> None:
    """Truncation from another thread while the run reads: no error, no false match."""
    with WalWriter.open(tmp_path / "wal", segment_max_bytes=1024, fsync=False) as writer:
        for n in range(0, STORED, 10):
            writer.append(
                [(TOPIC, qos1(k)[1], 1, False, False, qos1(k)[0], 0) for k in range(n, n + 10)]
            )

        class TruncatingReader(WalReader):
            """Another thread deletes a segment just before each read."""

            def read(self, start: int, end: int) -> WalColumns:
                if len(writer.segments) > 1:
                    writer.truncate_before(writer.segments[1])
                return super().read(start, end)

        run = ResendRun(writer, TruncatingReader(writer.path), chunk_records=16)
        assert not run.is_resend(*resend(5))
        assert run.searches == 1
        assert writer.first_offset > 100, "the search met the truncation"
