"""The Sparkplug states a batch's partitions start from, against a real WAL on disk: partitions
decode as one pass would, and after a commit, a restart and the deletion of the committed
segments, the next batch starts from the same state."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from connector.spark.reader.sparkplug_plan import STATE_FILE, SparkplugStates, read_messages
from connector.sparkplug.messages import decode_messages
from connector.sparkplug.state import SparkplugState
from connector.wal import NewRecord
from connector.wal.file_writer import WalWriter
from connector.wal.opening import open_reader, read_sidecar
from devtools.sparkplug_payloads import birth, data

NODE = "spBv1.0/plant/{}/edge1"


def _records() -> list[NewRecord]:
    """An NBIRTH, alias-only NDATA, a rebirth with other aliases, more NDATA."""
    out = [
        NewRecord(
            NODE.format("NBIRTH"), birth([("t", 1, 3, "int_value", 0)], 0), 0, False, False, None, 0
        )
    ]
    seq = 1
    for i in range(30):
        if i == 15:
            body = birth([("t", 9, 3, "int_value", 0)], 1, seq=0)
            out.append(NewRecord(NODE.format("NBIRTH"), body, 0, False, False, None, i * 10))
            seq = 1
            continue
        alias = 1 if i < 15 else 9
        body = data([(alias, "int_value", i)], seq % 256)
        seq += 1
        out.append(NewRecord(NODE.format("NDATA"), body, 0, False, False, None, i * 10 + 5))
    return out


@pytest.fixture
def wal(tmp_path: Path) -> tuple[Path, WalWriter, str]:
    path = tmp_path / "wal"
    writer = WalWriter.open(path, segment_max_bytes=300, fsync=False)
    writer.append(_records())
    identity = open_reader(path).identity
    assert identity is not None
    return path, writer, identity


def _rows(path: Path, start: int, end: int, state_json: str) -> list[tuple[object, ...]]:
    rows = decode_messages(
        read_messages(str(path), start, end), SparkplugState.from_json(state_json)
    )
    return list(
        zip(
            rows.columns["offset"],
            rows.columns["metric_name"],
            rows.columns["long_value"],
            rows.columns["reason"],
            strict=True,
        )
    )


def test_partitions_decode_as_one_pass(wal: tuple[Path, WalWriter, str]) -> None:
    path, _, identity = wal
    states = SparkplugStates(str(path), identity, 0)
    ranges = [(0, 7), (7, 16), (16, 17), (17, 31)]
    starts = states.plan(ranges, first_stored=0)
    pieces = [row for (a, b), s in zip(ranges, starts, strict=True) for row in _rows(path, a, b, s)]
    whole = _rows(path, 0, 31, SparkplugState().to_json())
    assert pieces == whole
    assert all(reason is None for *_, reason in whole)
    assert {name for _, name, value, _ in whole if value is not None} == {"bdSeq", "t"}
    assert [value for _, name, value, _ in whole if name == "t"][-1] == 29


def test_a_restart_after_commit_and_deletion_starts_from_the_stored_state(
    wal: tuple[Path, WalWriter, str], caplog: pytest.LogCaptureFixture
) -> None:
    path, writer, identity = wal
    expected = _rows(path, 20, 31, _state_at(path, 20))
    states = SparkplugStates(str(path), identity, 0)
    states.plan([(0, 20)], first_stored=0)
    states.commit(20, first_stored=0)
    assert read_sidecar(str(path), STATE_FILE) is not None
    assert writer.truncate_before(20) > 0
    first = open_reader(path).first_offset()
    assert first is not None and 0 < first <= 20
    # A new query (a restart): nothing planned in memory, the records below `first` gone.
    restarted = SparkplugStates(str(path), identity, 0)
    with caplog.at_level(logging.WARNING):
        (start,) = restarted.plan([(20, 31)], first_stored=first)
    assert not caplog.records
    assert _rows(path, 20, 31, start) == expected
    assert all(reason is None for *_, reason in expected)


def test_a_crash_before_the_state_was_stored_folds_from_the_older_one(
    wal: tuple[Path, WalWriter, str],
) -> None:
    """The commit stored the state at 10; the batch to 20 was committed by Spark but its state
    never written (kill -9): the WAL still holds 10.. (deletion comes after), so folding from
    10 gives the state at 20."""
    path, _, identity = wal
    states = SparkplugStates(str(path), identity, 0)
    states.plan([(0, 10)], first_stored=0)
    states.commit(10, first_stored=0)
    restarted = SparkplugStates(str(path), identity, 0)
    (start,) = restarted.plan([(20, 31)], first_stored=10)
    assert start == _state_at(path, 20)


def test_a_state_of_another_wal_is_not_used(
    wal: tuple[Path, WalWriter, str], caplog: pytest.LogCaptureFixture
) -> None:
    path, writer, identity = wal
    SparkplugStates(str(path), "other-identity", 0).commit(20, first_stored=0)
    writer.truncate_before(20)
    first = open_reader(path).first_offset()
    assert first is not None and first > 0
    with caplog.at_level(logging.WARNING):
        SparkplugStates(str(path), identity, 0).plan([(first, 31)], first_stored=first)
    assert "births before it are not known" in caplog.text


def _state_at(path: Path, offset: int) -> str:
    state = SparkplugState()
    decode_messages(read_messages(str(path), 0, offset), state)
    return state.to_json()
