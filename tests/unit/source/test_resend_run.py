"""The in-order resend rule for DUP=1 QoS 1 messages, against a real WAL (no broker)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from connector.source.resend_run import CHUNK_RECORDS, CONFIRM, ResendRun
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


def resends(ns: Iterable[int]) -> list[tuple[int, int]]:
    """One socket read carrying the resends of stored messages ``ns``, in that order."""
    return [resend(n) for n in ns]


def fresh(n: int, pid: int | None = None) -> tuple[int, int]:
    """A DUP=1 message never stored (its first delivery was lost with the connection)."""
    return (n % IDS + 1 if pid is None else pid), record_digest(TOPIC, b"new%d" % n)


def connected(wal: WalWriter, chunk_records: int = CHUNK_RECORDS) -> ResendRun:
    """The rule's state for a connection that just came up on ``wal``."""
    run = ResendRun(wal, chunk_records=chunk_records)
    run.connection_started(wal.next_offset)
    return run


@pytest.mark.parametrize("chunk_records", [7, 65_536])
def test_an_in_order_resend_of_stored_messages_is_recognised_even_where_ids_were_reused(
    wal: WalWriter, chunk_records: int
) -> None:
    run = connected(wal, chunk_records=chunk_records)
    resent = range(150, STORED)  # the broker's in-flight list: a suffix of what it sent
    # ... then messages the broker sent after those, never received: new, although their
    # ids are stored.
    verdicts = run.classify(resends(resent) + [fresh(n) for n in range(5)])
    assert verdicts == [True] * len(resent) + [False] * 5
    assert run.searches == 1
    assert not run.active, "the run ends where this connection began"
    # The latest-digest rule alone stores 150..199 again: ids 51..100 were reused by 250..299.
    old = [n for n in resent if not latest_digest_rule(wal, *resend(n))]
    assert old == list(range(150, 200))
    assert run.classify([fresh(n) for n in range(5, 10)]) == [False] * 5
    assert run.searches == 1, "after the run no search is needed"


@pytest.mark.parametrize("chunk_records", [7, 65_536])
def test_a_run_confirmed_in_one_read_continues_over_the_following_reads(
    wal: WalWriter, chunk_records: int
) -> None:
    run = connected(wal, chunk_records=chunk_records)
    # The first read ends right after the confirming resends; a read of one message follows.
    reads = [range(150, 155), range(155, 156), range(156, 230), range(230, STORED)]
    for ns in reads:
        assert run.classify(resends(ns)) == [True] * len(ns), ns
        assert run.searches == 1
    assert run.matched == 150 and not run.active
    assert run.classify([fresh(1), fresh(2)]) == [False, False]


def test_the_run_starts_where_the_latest_digest_rule_stops_matching(wal: WalWriter) -> None:
    """A resend that starts at 200: 200..299 are the latest of their ids (no search needed);
    a second pass 120.. after a reconnect needs one search, then follows the run."""
    run = connected(wal)
    assert all(run.classify(resends(range(200, STORED))))
    assert run.searches == 0
    run.connection_started(wal.next_offset)
    assert all(run.classify(resends(range(120, STORED))))
    assert run.searches == 1
    assert run.matched == 180  # 120 by the search, 121..299 by the run


def test_a_lost_new_message_equal_to_an_older_stored_message_with_its_id_is_kept(
    tmp_path: Path,
) -> None:
    """The loss case a single search hit would cause: ids cycle over 1..10 and one sensor
    repeats "on". Message X (id 3, "on") was in flight when the connection dropped, before
    the receiver read it; the broker had every earlier PUBACK, so its resend starts with X,
    never stored, followed by more never-stored messages. The WAL holds an older message
    with id 3 and payload "on" (later id-3 messages carry other payloads): X is new."""
    with WalWriter.open(tmp_path / "wal", fsync=False) as writer:
        stored = [(n % 10 + 1, b"on" if n == 12 else b"v%d" % n) for n in range(60)]
        writer.append([(TOPIC, p, 1, False, False, pid, 0) for pid, p in stored])
        assert writer.latest_digest(3) != record_digest(TOPIC, b"on")
        run = ResendRun(writer)
        run.connection_started(writer.next_offset)
        after = [(pid, record_digest(TOPIC, b"on")) for pid in range(4, 9)]  # ids go on
        verdicts = run.classify([(3, record_digest(TOPIC, b"on")), *after])
        assert verdicts == [False] * 6, "a message never stored would be dropped: lost"
        assert run.searches == 1 and run.rejected == 1 and run.matched == 0


def test_a_hit_the_read_does_not_confirm_is_new_and_not_searched_again(
    wal: WalWriter, caplog: pytest.LogCaptureFixture
) -> None:
    run = connected(wal)
    with caplog.at_level(logging.INFO, logger="connector.source.resend_run"):
        # 150 is found at its offset, 151 matches the next record, then the read ends.
        assert run.classify(resends([150, 151])) == [False, False]
        assert run.searches == 1 and run.rejected == 1 and not run.active
        # The next read goes to the latest-digest test only: 152..199 (ids reused since)
        # are stored again, 250 (the latest with its id) is still recognised.
        assert run.classify(resends([*range(152, 200), 250])) == [False] * 48 + [True]
        assert run.searches == 1
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == 1, infos
    offset = 150 + 150 // 40 + 150 // 70  # a QoS 0 record every 40, a QoS 2 every 70
    assert f"packet id {qos1(150)[0]} " in infos[0] and f"offset {offset}," in infos[0]
    # A new connection searches again; a hit confirmed at once starts the run.
    run.connection_started(wal.next_offset)
    assert run.classify(resends(range(150, 155))) == [True] * 5
    assert run.active and run.rejected == 1


@pytest.fixture
def reused_by_qos2(tmp_path: Path) -> Iterator[WalWriter]:
    """50 QoS 1 messages with ids 1..10 cycling, then QoS 2 messages reusing ids 1..10: the
    latest digest of every id is a QoS 2 message, so every QoS 1 resend needs the search."""
    with WalWriter.open(tmp_path / "wal", fsync=False) as writer:
        writer.append([(TOPIC, b"p%d" % n, 1, False, False, n % 10 + 1, 0) for n in range(50)])
        writer.append([("r/two", b"q%d" % n, 2, False, False, n + 1, 0) for n in range(10)])
        yield writer


def p_resends(ns: Iterable[int]) -> list[tuple[int, int]]:
    return [(n % 10 + 1, record_digest(TOPIC, b"p%d" % n)) for n in ns]


@pytest.mark.parametrize(
    ("reads", "verdicts"),
    [
        # 1 + CONFIRM resends in one read: confirmed; the run goes on in the next read.
        ([range(40, 40 + 1 + CONFIRM), range(45, 50)], [True] * 10),
        # Exactly CONFIRM records lie after the hit up to conn_start: all must match.
        ([range(50 - 1 - CONFIRM, 50)], [True] * (1 + CONFIRM)),
        # Fewer than CONFIRM records after the hit: all of them confirm it.
        ([range(47, 50)], [True] * 3),
        ([range(49, 50)], [True]),
        # ... but the read must carry them all.
        ([range(47, 49), range(49, 50)], [False, False, False]),
        # One short of CONFIRM in the read: new.
        ([range(40, 40 + CONFIRM)], [False] * CONFIRM),
        # A confirming resend differs: new (later ones go to the latest-digest test).
        ([[40, 41, 42, 44, 45]], [False] * 5),
    ],
)
def test_the_confirmation_boundaries(
    reused_by_qos2: WalWriter, reads: list[Iterable[int]], verdicts: list[bool]
) -> None:
    run = ResendRun(reused_by_qos2)
    run.connection_started(reused_by_qos2.next_offset)
    got = [v for ns in reads for v in run.classify(p_resends(ns))]
    assert got == verdicts
    assert run.searches == 1
    assert run.rejected == (0 if all(verdicts) else 1)
    # Whatever follows in the next read was never stored.
    assert run.classify([(n % 10 + 1, record_digest(TOPIC, b"x")) for n in range(3)]) == [False] * 3


def test_a_dup_message_never_stored_is_new(wal: WalWriter) -> None:
    run = connected(wal)
    assert run.classify([(7, record_digest(TOPIC, b"never stored"))]) == [False]
    assert run.classify([(4242, record_digest(TOPIC, b"m00001"))]) == [False]  # id never used
    assert run.classify(resends(range(150, 160))) == [False] * 10, "searched once"
    # A new connection searches again.
    run.connection_started(wal.next_offset)
    assert run.classify(resends(range(150, 160))) == [True] * 10
    # Another topic with a stored payload and id is another message.
    run.connection_started(wal.next_offset)
    assert run.classify([(qos1(150)[0], record_digest("r/other", qos1(150)[1]))]) == [False]


def test_a_mismatch_mid_run_falls_back_to_the_search_and_warns_once(
    wal: WalWriter, caplog: pytest.LogCaptureFixture
) -> None:
    run = connected(wal)
    with caplog.at_level(logging.WARNING, logger="connector.source.resend_run"):
        assert all(run.classify(resends(range(150, 160))))
        assert run.cursor is not None
        expected_at = run.cursor
        # Out of order: 170 comes where 160 was expected; found by the search and confirmed
        # by 171.., the run goes on.
        assert all(run.classify(resends(range(170, 180))))
        # Out of order again (back to 165): found again, no second warning; then a message
        # never stored, mid-run: new.
        verdicts = run.classify([*resends(range(165, 170)), (3, record_digest(TOPIC, b"x"))])
        assert verdicts == [True] * 5 + [False]
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
    assert all(run.classify(resends(range(100, STORED))))


def test_messages_stored_on_this_connection_are_not_part_of_the_run(wal: WalWriter) -> None:
    run = connected(wal)
    pid, payload = 9, b"stored now"
    wal.append([(TOPIC, payload, 1, False, True, pid, 0)])
    # The latest-digest rule still sees it (same as before runs existed) ...
    assert run.classify([(pid, record_digest(TOPIC, payload))]) == [True]
    # ... but the search starts below this connection's first offset.
    wal.append([(TOPIC, b"m00008", 1, False, True, 9, 0)])  # same as stored message 8
    run.connection_started(wal.next_offset - 2)
    assert all(run.classify(resends(range(108, 113))))
    assert run.cursor is not None and run.cursor < wal.next_offset - 2


def test_messages_in_deleted_segments_cannot_be_matched(wal: WalWriter) -> None:
    """Only what the WAL still holds can be matched; the latest-digest rule still applies."""
    run = connected(wal)
    assert wal.truncate_before(175 + 175 // 40 + 175 // 70) > 0  # offset of message 175
    first = wal.first_offset
    gone = [n for n in range(100, 200) if n + n // 40 + n // 70 < first]
    kept = [n for n in range(100, 200) if n + n // 40 + n // 70 >= first]
    assert gone and kept
    assert run.classify(resends(gone[:1])) == [False]
    run.connection_started(wal.next_offset)
    assert all(run.classify(resends(range(kept[0], STORED))))


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
        assert run.classify([resend(5)]) == [False]
        assert run.searches == 1
        assert writer.first_offset > 100, "the search met the truncation"


def test_a_hit_the_pairs_do_not_confirm_yet_waits_when_not_final(wal: WalWriter) -> None:
    """Not final: the pairs end two resends after the hit, so there is no verdict and the
    state is as before; asked again with the resends read after them, the run is confirmed
    without a second WAL search. The same pairs in a final call store the hit as new."""
    run = connected(wal)
    before = (run.active, run.matched, run.rejected)
    assert run.classify(resends([150, 151]), final=False) is None
    assert (run.active, run.matched, run.rejected) == before
    assert run.searches == 1
    assert run.classify(resends([150, 151]), final=False) is None
    assert run.classify(resends(range(150, 160)), final=False) == [True] * 10
    assert run.searches == 1, "the hit was kept, not searched for again"
    assert run.active and run.matched == 10 and run.rejected == 0
    # A final call decides with what it has.
    run.connection_started(wal.next_offset)
    assert run.classify(resends([150, 151])) == [False, False]
    assert run.rejected == 1 and not run.active


def test_without_a_search_hit_a_call_that_is_not_final_decides_at_once(wal: WalWriter) -> None:
    run = connected(wal)
    assert run.classify([fresh(1), *resends([250])], final=False) == [False, True]
    assert run.classify(resends(range(150, 155)), final=False) == [False] * 5, "searched once"
