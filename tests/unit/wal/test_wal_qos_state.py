"""Pending QoS 2 ids and message digests (QoS 1 and 2) are durable: reopen and truncation keep
them."""

from __future__ import annotations

from pathlib import Path

from connector.wal import NewRecord, WalWriter, record_digest
from connector.wal.state import QosState


def q1(pid: int, payload: bytes, topic: str = "q/1") -> NewRecord:
    return NewRecord(topic, payload, 1, False, False, pid, 0)


def q2(pid: int, payload: bytes = b"two") -> NewRecord:
    return NewRecord("q/2", payload, 2, False, False, pid, 0)


def q0(i: int) -> NewRecord:
    return NewRecord("filler", b"%020d" % i, 0, False, False, None, i)


def snapshot(writer: WalWriter) -> tuple[frozenset[int], dict[int, int | None]]:
    return writer.qos2_pending, {pid: writer.latest_digest(pid) for pid in range(1, 20)}


def test_state_follows_appends_and_releases(tmp_path: Path) -> None:
    with WalWriter.open(tmp_path / "wal") as writer:
        writer.append([q2(5), q2(6), q1(7, b"a", "tö/pic")])
        assert writer.qos2_pending == {5, 6}
        assert writer.is_qos2_pending(5) and not writer.is_qos2_pending(7)
        assert writer.latest_digest(7) == record_digest("tö/pic", b"a")
        assert writer.append([], released_qos2=[5, 42]) == 3, "releases alone add no offsets"
        assert writer.qos2_pending == {6}
        writer.append([q1(7, b"b")])
        assert writer.latest_digest(7) == record_digest("q/1", b"b"), "latest record wins"
        assert writer.latest_digest(8) is None
        assert writer.latest_digest(6) == record_digest("q/2", b"two"), "QoS 2 records too"
        # releases apply before the batch's records: a reused id stays pending
        writer.append([q2(6, b"reused")], released_qos2=[6])
        assert writer.qos2_pending == {6}


def test_state_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append([q2(1), q2(2), q2(3), q1(4, b"x"), q1(5, b"y")])
        writer.append([q1(4, b"z")], released_qos2=[2])
        before = snapshot(writer)
        assert before[0] == {1, 3}
    with WalWriter.open(path) as writer:
        assert snapshot(writer) == before
        writer.append([], released_qos2=[1])
        after_release = snapshot(writer)
    with WalWriter.open(path) as writer:
        assert snapshot(writer) == after_release
        assert writer.qos2_pending == {3}


def test_state_survives_truncation_of_the_segments_that_held_it(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=256) as writer:
        writer.append([q2(11), q2(12), q1(13, b"kept"), q1(14, b"old")])
        writer.append([q1(14, b"new")], released_qos2=[12])
        writer.append([q0(i) for i in range(40)])
        writer.append([], released_qos2=[11])
        writer.append([q0(i) for i in range(40, 60)])
        before = snapshot(writer)
        assert before[0] == frozenset()
        assert before[1][13] == record_digest("q/1", b"kept")
        assert before[1][14] == record_digest("q/1", b"new")
        writer.append([q2(15)])
        before = snapshot(writer)
        writer.append([q0(i) for i in range(60, 80)])
        deleted = writer.truncate_before(writer.next_offset)
        assert deleted >= 3 and len(writer.segments) == 1
        assert snapshot(writer) == before
    with WalWriter.open(path, segment_max_bytes=256) as writer:
        assert snapshot(writer) == before
        assert writer.qos2_pending == {15}


def test_snapshot_encoding_round_trip_at_full_size() -> None:
    state = QosState(range(1, 65536), {pid: pid * 7919 % (1 << 32) for pid in range(1, 65536)})
    assert QosState.decode(state.encode()) == state
    assert QosState.decode(QosState().encode()) == QosState()
