"""A Delta table's JSON commit log (``<table>/_delta_log/<version>.json``), read without Spark.

Enough for the append-only tables the ingest job writes, and cheap enough to poll while a job
writes them: Delta's local log store creates each commit file by an atomic rename, so a reader
sees a commit whole or not at all. Checkpoints (``*.checkpoint.parquet``) are not read, so every
commit must still be in the log (Delta keeps them for 30 days by default); a table whose log no
longer starts at version 0, or that uses deletion vectors or column mapping, is refused with
:class:`UnreadableTable` (read it with Spark).

Used by the demo's report (``devtools/demo/tables.py``), the tests (row counts, versions and
``SetTransaction`` records of the tables they write) and the benchmarks (``bench/drainer.py``'s
``TableTail``, which watches for each next commit file).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict
from urllib.parse import unquote

if TYPE_CHECKING:
    import pyarrow as pa

LOG_DIR = "_delta_log"
"""The commit log's directory inside a table."""


class UnreadableTable(Exception):
    """A table this reader cannot replay; the message says why (read it with Spark)."""


class Commit(TypedDict):
    """One commit: its version and its actions (one JSON object per line of its file)."""

    version: int
    actions: list[dict[str, Any]]


def commit_name(version: int) -> str:
    """The file name of commit ``version`` (``00000000000000000007.json``)."""
    return f"{version:020d}.json"


def commit_file(table: Path, version: int) -> Path:
    """The path of commit ``version``'s file (which may not exist yet)."""
    return table / LOG_DIR / commit_name(version)


def delta_versions(table: Path) -> list[int]:
    """The versions of the table's JSON commits, oldest first ([] before the first commit)."""
    try:
        names = os.listdir(table / LOG_DIR)
    except FileNotFoundError:
        return []
    return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())


def delta_version(table: Path) -> int:
    """The latest commit version of the Delta table, -1 when it has none yet."""
    return max(delta_versions(table), default=-1)


def read_commit(table: Path, version: int) -> list[dict[str, Any]] | None:
    """The actions of commit ``version``, or None when its file is not there."""
    try:
        text = commit_file(table, version).read_text()
    except FileNotFoundError:
        return None
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def delta_commits(table: Path) -> list[Commit]:
    """Every commit of the table that is in its log, oldest first ([] before the first)."""
    commits = []
    for version in delta_versions(table):
        actions = read_commit(table, version)
        if actions is not None:  # gone since the listing
            commits.append(Commit(version=version, actions=actions))
    return commits


def file_rows(add: dict[str, Any]) -> int | None:
    """The row count in an ``add`` action's statistics (None without statistics)."""
    rows = json.loads(add.get("stats") or "{}").get("numRecords")
    return None if rows is None else int(rows)


def txn_versions(table: Path) -> list[int]:
    """The ``txnVersion`` (batch id) of every commit of the table that added data files."""
    versions: list[int] = []
    for commit in delta_commits(table):
        actions = commit["actions"]
        if any("add" in a for a in actions):
            versions += [a["txn"]["version"] for a in actions if "txn" in a]
    return versions


@dataclass
class DeltaSnapshot:
    """The live files of a Delta table, from replaying its JSON commit log."""

    table: Path
    files: dict[str, tuple[int | None, dict[str, str]]] = field(default_factory=dict)
    """Relative path -> (rows from the file's statistics, partition values)."""

    @classmethod
    def load(cls, table: Path) -> DeltaSnapshot:
        """Replay ``_delta_log/*.json`` (an empty snapshot before the first commit)."""
        snapshot = cls(table)
        commits = delta_commits(table)
        if commits and commits[0]["version"] != 0:
            raise UnreadableTable(
                f"{table / LOG_DIR} starts at {commit_name(commits[0]['version'])}: "
                "old commits were cleaned"
            )
        for commit in commits:
            for action in commit["actions"]:
                if "add" in action:
                    add = action["add"]
                    if add.get("deletionVector"):
                        raise UnreadableTable(f"{table} uses deletion vectors: read it with Spark")
                    partition = dict(add.get("partitionValues") or {})
                    snapshot.files[add["path"]] = (file_rows(add), partition)
                elif "remove" in action:
                    snapshot.files.pop(action["remove"]["path"], None)
                elif "metaData" in action:
                    config = action["metaData"].get("configuration") or {}
                    if config.get("delta.columnMapping.mode", "none") != "none":
                        raise UnreadableTable(f"{table} uses column mapping: read it with Spark")
        return snapshot

    @property
    def rows(self) -> int:
        """Rows in the table (statistics; the Parquet footer for files without them)."""
        import pyarrow.parquet as pq

        return sum(
            rows if rows is not None else pq.ParquetFile(self.data_file(path)).metadata.num_rows
            for path, (rows, _) in self.files.items()
        )

    def read(self) -> pa.Table:
        """Every row, partition columns included (as strings)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        parts = []
        for path, (_, partition) in self.files.items():
            part = pq.read_table(self.data_file(path))
            for name, value in partition.items():
                part = part.append_column(name, pa.array([value] * part.num_rows, pa.string()))
            parts.append(part)
        if not parts:
            return pa.table({})
        return pa.concat_tables(parts, promote_options="permissive")

    def data_file(self, path: str) -> Path:
        """The data file an ``add`` action's (URL-encoded, relative) ``path`` names."""
        return self.table / unquote(path)


def delta_row_count(table: Path) -> int:
    """Rows in the Delta table at ``table`` (0 before its first commit)."""
    return DeltaSnapshot.load(table).rows
