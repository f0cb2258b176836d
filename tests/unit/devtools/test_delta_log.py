"""Reading a Delta table's JSON commit log without Spark (``devtools.delta_log``): the
versions, commits and ``SetTransaction`` versions the tests check, and the snapshot (live files,
row counts, rows) the demo reports from."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from devtools.delta_log import (
    DeltaSnapshot,
    UnreadableTable,
    commit_file,
    delta_commits,
    delta_row_count,
    delta_version,
    delta_versions,
    file_rows,
    read_commit,
    txn_versions,
)


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
    with pytest.raises(UnreadableTable, match="deletion vectors"):
        DeltaSnapshot.load(table)
    cleaned = tmp_path / "cleaned"
    _commit(cleaned, 5, _add("y.parquet", 1))
    with pytest.raises(UnreadableTable, match="old commits were cleaned"):
        DeltaSnapshot.load(cleaned)


def test_versions_commits_and_transactions(tmp_path: Path) -> None:
    table = tmp_path / "t"
    assert (delta_versions(table), delta_version(table), delta_commits(table)) == ([], -1, [])
    assert read_commit(table, 0) is None
    txn = {"txn": {"appId": "q", "version": 0}}
    _commit(table, 0, {"metaData": {"configuration": {}}}, {"commitInfo": {"operation": "WRITE"}})
    _commit(table, 1, txn, _add("a.parquet", 3))
    _commit(table, 2, {"txn": {"appId": "q", "version": 1}}, _add("b.parquet", None))
    _commit(table, 3, {"txn": {"appId": "q", "version": 2}})  # no data files: not counted
    (table / "_delta_log" / "00000000000000000002.checkpoint.parquet").write_bytes(b"")
    assert commit_file(table, 1) == table / "_delta_log" / "00000000000000000001.json"
    assert delta_versions(table) == [0, 1, 2, 3]
    assert delta_version(table) == 3
    assert [c["version"] for c in delta_commits(table)] == [0, 1, 2, 3]
    assert delta_commits(table)[1]["actions"] == [txn, _add("a.parquet", 3)]
    assert txn_versions(table) == [0, 1]
    assert [file_rows(a["add"]) for a in (_add("a", 3), _add("b", None))] == [3, None]
