"""The demo's pure parts: the fleet's plan, and counting Delta rows from the commit log."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streaming_jobs.demo import (
    MALFORMED,
    DeltaSnapshot,
    DemoFailed,
    delta_row_count,
    malformed_count,
    plan_fleet,
    stamp,
)


@pytest.mark.parametrize(("messages", "devices"), [(1, 1), (7, 3), (150, 4), (2000, 6)])
def test_plan_deals_every_message_with_gap_free_sequence_numbers(
    messages: int, devices: int
) -> None:
    fleet = plan_fleet(messages, devices)
    assert len(fleet) == devices
    assert sum(len(d.payloads) for d in fleet) == messages
    assert sum(d.malformed for d in fleet) == malformed_count(messages)
    for index, device in enumerate(fleet):
        assert len(device.payloads) == len(range(index, messages, devices))
        assert device.qos == 1 + index % 2
        readings = [json.loads(p) for p in device.payloads if p not in MALFORMED]
        assert [r["seq"] for r in readings] == list(range(device.valid))
        assert {r["device"] for r in readings} <= {device.name}
        assert device.topic == f"plant/{device.site}/{device.name}/telemetry"
    assert plan_fleet(messages, devices) == fleet, "the plan must be reproducible"


def test_a_few_malformed_messages_in_every_run_that_can_have_them() -> None:
    assert malformed_count(9) == 0
    assert malformed_count(30) == 3
    assert malformed_count(2000) == 20


def test_stamp_sets_the_publication_time_of_readings_only() -> None:
    reading = plan_fleet(2, 1)[0].payloads[0]
    stamped = json.loads(stamp(reading))
    assert stamped["ts"].endswith("+00:00") and len(stamped["ts"]) > 20
    for payload in MALFORMED:
        assert stamp(payload) == payload


def _write_parquet(table: Path, name: str, rows: int) -> None:
    (table / name).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"seq": list(range(rows))}), table / name)


def _commit(table: Path, version: int, *actions: dict) -> None:
    log_dir = table / "_delta_log"
    log_dir.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(a) for a in actions]
    (log_dir / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def _add(path: str, rows: int | None, partition: dict[str, str] | None = None) -> dict:
    add: dict = {"path": path, "partitionValues": partition or {}, "dataChange": True}
    if rows is not None:
        add["stats"] = json.dumps({"numRecords": rows})
    return {"add": add}


def test_row_count_follows_adds_and_removes(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert delta_row_count(table) == 0  # no commit yet
    _write_parquet(table, "a.parquet", 3)
    _write_parquet(table, "b.parquet", 4)
    _write_parquet(table, "c.parquet", 5)
    _commit(table, 0, {"metaData": {"configuration": {}}}, _add("a.parquet", 3))
    _commit(table, 1, _add("b.parquet", 4), {"commitInfo": {}})
    assert delta_row_count(table) == 7
    # c has no statistics: its Parquet footer counts; a is removed (compaction, say)
    _commit(table, 2, _add("c.parquet", None), {"remove": {"path": "a.parquet"}})
    assert delta_row_count(table) == 9
    assert sorted(DeltaSnapshot.load(table).read()["seq"].to_pylist()) == sorted(
        [*range(4), *range(5)]
    )


def test_partition_values_become_columns(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _write_parquet(table, "date=2025-06-01/p.parquet", 2)
    _commit(table, 0, _add("date%3D2025-06-01/p.parquet", 2, {"date": "2025-06-01"}))
    rows = DeltaSnapshot.load(table).read()
    assert rows.to_pylist() == [{"seq": 0, "date": "2025-06-01"}, {"seq": 1, "date": "2025-06-01"}]


def test_tables_the_simple_reader_cannot_read_are_refused(tmp_path: Path) -> None:
    table = tmp_path / "t"
    _commit(table, 0, {"add": {"path": "x.parquet", "deletionVector": {"storageType": "u"}}})
    with pytest.raises(DemoFailed, match="deletion vectors"):
        DeltaSnapshot.load(table)
    cleaned = tmp_path / "cleaned"
    _commit(cleaned, 5, _add("y.parquet", 1))
    with pytest.raises(DemoFailed, match="old commits were cleaned"):
        DeltaSnapshot.load(cleaned)
