"""The numbered payloads, the tally of what a drain saw, a Delta table read from its log, and
the turns and waits every benchmark shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.common import BenchError, in_turns, wait_for
from bench.drainer import TableTail
from bench.latency import quantile
from bench.payloads import (
    JSON_BYTES,
    JSON_SEQ_AT,
    Tally,
    json_payload,
    numbered,
    parse_timed,
    sequence_of,
    timed,
)


def test_every_payload_carries_its_sequence_number() -> None:
    assert numbered(7, 12) == b"0000000007xx"
    assert numbered(123, 4) == b"0000"
    data = timed(42, 1_700_000_000_123_456_789, 100)
    assert len(data) == 100 and parse_timed(data) == (42, 1_700_000_000_123_456_789)
    assert len(json_payload(99_999)) == JSON_BYTES
    assert sequence_of(json_payload(99_999), JSON_SEQ_AT) == 99_999


def test_the_tally_counts_distinct_numbers_copies_and_strays() -> None:
    tally = Tally(4)
    for payload in (numbered(0, 20), numbered(2, 20), numbered(2, 20), numbered(9, 20), b"x" * 20):
        tally.note(payload)
    assert (tally.received, tally.distinct, tally.out_of_range) == (5, 2, 2)
    assert tally.missing == [1, 3] and tally.extra_copies == 1
    found = tally.result(10.0, 10.5, 12.0, connections=2)
    assert (found["duplicates"], found["connect_seconds"], found["drain_seconds"]) == (1, 0.5, 2.0)
    at = Tally(2, JSON_SEQ_AT)
    at.note(json_payload(1))
    assert at.distinct == 1 and at.missing == [0]


def test_percentiles_interpolate() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (quantile(values, 0), quantile(values, 100)) == (1.0, 100.0)
    assert quantile(values, 99) == 99.01


def _commit(table: Path, version: int, rows: int, millis: int) -> None:
    actions: list[dict[str, object]] = [{"commitInfo": {"timestamp": millis}}]
    if rows:
        stats = json.dumps({"numRecords": rows})
        actions.append({"add": {"path": f"part%20{version}.parquet", "stats": stats}})
    lines = "\n".join(json.dumps(a) for a in actions)
    (table / "_delta_log" / f"{version:020d}.json").write_text(lines + "\n")


def test_a_table_is_read_from_its_log_commit_by_commit(tmp_path: Path) -> None:
    (tmp_path / "_delta_log").mkdir()
    tail = TableTail(tmp_path)
    assert tail.poll() == 0 and tail.committed_at == 0.0
    _commit(tmp_path, 0, 0, 1_000)
    _commit(tmp_path, 1, 5, 2_000)
    assert tail.poll() == 5
    _commit(tmp_path, 2, 3, 3_500)
    assert tail.poll() == 8
    assert [(c.version, c.rows) for c in tail.commits] == [(0, 0), (1, 5), (2, 3)]
    assert tail.commits[1].files == ["part 1.parquet"]
    assert tail.committed_at == 3.5


def test_peers_take_turns_and_a_wait_ends() -> None:
    assert list(in_turns("ab", 2)) == [(0, "a"), (0, "b"), (1, "b"), (1, "a")]
    assert wait_for(lambda: True, 0.0, lambda: "never") < 1
    with pytest.raises(BenchError, match="late"):
        wait_for(lambda: False, 0.01, lambda: "late", 0.001)
