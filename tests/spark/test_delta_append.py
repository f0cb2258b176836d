"""Idempotent Delta appends (``streaming_jobs.delta_append``) on real Delta tables.

The rule under test: batch ``n`` of query ``app`` is written, with ``SetTransaction(app, n)`` in
the same commit, only when the table's version for ``app`` is below ``n``. The version is looked
up once per run and table (from the version checksum when it lists the table's transactions),
then kept from the appender's own commits, direct or through Delta's writer; a new run or a
failure make the next batch look it up again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.errors import SparkRuntimeException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from devtools.delta_log import (
    Commit,
    delta_commits,
    delta_row_count,
    delta_versions,
    txn_versions,
)
from streaming_jobs import delta_append
from streaming_jobs.batch_writer import (
    CREATED_TABLE_CHECKPOINT_INTERVAL,
    CREATED_TABLE_LOG_RETENTION_HOURS,
    DEFAULT_INTERVAL_KEY,
    DEFAULT_LOG_RETENTION_KEY,
    QUERY_ID_PROPERTY,
    BatchWriter,
    created_table_interval,
    created_table_properties,
)
from streaming_jobs.delta_append import RUN_PROPERTY, DeltaAppender, _DeltaJvm
from streaming_jobs.delta_checkpoints import Checkpointer, LogCleanups
from streaming_jobs.payloads import decode, make_plan, table_rows
from streaming_jobs.progress import RunStats
from tests.spark.conftest import APP
from tests.spark.source_batches import source_rows


def rows(spark: SparkSession, batch: int, count: int = 3) -> DataFrame:
    return spark.range(count).select(
        (F.col("id") + batch * 100).alias("seq"), F.lit(f"b{batch}").alias("tag")
    )


def write(appender: DeltaAppender, frame: DataFrame, table: Path, batch: int, **kw: object) -> bool:
    """What the batch writer does: append unless the table already has the batch."""
    if appender.written(frame.sparkSession, str(table), APP, batch):
        return False
    appender.append(frame, str(table), APP, batch, **kw)  # type: ignore[arg-type]
    return True


def appended(spark: SparkSession, table: Path, batches: int, **kw: object) -> DeltaAppender:
    """A new appender that has written batches ``0 .. batches-1`` to ``table``."""
    appender = DeltaAppender()
    for batch in range(batches):
        assert write(appender, rows(spark, batch), table, batch, **kw)
    return appender


def delta_txn_version(spark: SparkSession, table: Path, app: str = APP) -> int:
    """Delta's own view: ``txnVersion`` of a transaction on the table (from its full state)."""
    jvm = spark._jvm
    assert jvm is not None
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table))
    assert delta_log.tableExists(), f"no table at {table}"
    return int(delta_log.startTransaction().txnVersion(app))


def test_one_lookup_per_run_then_direct_commits_with_their_set_transaction(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    appender = appended(spark, table, 5)

    # batch 0 found no table and created it through Delta's writer; 1-4 knew the version
    assert (appender.writer_commits, appender.direct_commits, appender.lookups) == (1, 4, 1)
    assert txn_versions(table) == [0, 1, 2, 3, 4]
    assert delta_row_count(table) == 15
    assert delta_txn_version(spark, table) == 4
    operations = [c["actions"][0]["commitInfo"]["operation"] for c in delta_commits(table)]
    assert operations == ["WRITE"] * 5
    seqs = sorted(r.seq for r in spark.read.format("delta").load(str(table)).collect())
    assert seqs == sorted(b * 100 + i for b in range(5) for i in range(3))


def test_replays_are_skipped_in_the_same_run_and_after_a_restart(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    appender = appended(spark, table, 3)
    assert not write(appender, rows(spark, 2), table, 2)  # the same run replays batch 2

    restarted = DeltaAppender()  # a new process: nothing kept
    assert not write(restarted, rows(spark, 2), table, 2)
    assert restarted.lookups == 1
    assert write(restarted, rows(spark, 3), table, 3)
    assert (restarted.direct_commits, restarted.lookups) == (1, 1)

    spark.sparkContext.setLocalProperty(RUN_PROPERTY, "run-2")  # a new run in this process
    assert not write(restarted, rows(spark, 3), table, 3)
    assert restarted.lookups == 2
    assert txn_versions(table) == [0, 1, 2, 3]
    assert delta_row_count(table) == 12


def test_a_lookup_reads_the_version_checksum_and_agrees_with_delta(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    appended(spark, table, 3)
    other = DeltaAppender()
    assert other.written(spark, str(table), "other-query", 0) is False
    other.append(rows(spark, 9), str(table), "other-query", 0)
    log = table / "_delta_log"
    assert (log / "00000000000000000003.crc").is_file()

    restarted = DeltaAppender()
    assert restarted.written(spark, str(table), APP, 2)
    assert not restarted.written(spark, str(table), APP, 3)
    assert (restarted.lookups, restarted.checksum_lookups) == (1, 1)
    assert restarted._lookup(spark, str(table), "other-query") == 0
    assert restarted._lookup(spark, str(table), "never-wrote") == -1
    assert delta_txn_version(spark, table) == 2
    assert delta_txn_version(spark, table, "other-query") == 0
    assert delta_txn_version(spark, table, "never-wrote") == -1

    for checksum in log.glob("*.crc"):  # a table without checksums: Delta's full state
        checksum.unlink()
    jvm = spark._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # forget the snapshots read so far
    spark.sparkContext.setLocalProperty(RUN_PROPERTY, "run-2")
    without = DeltaAppender()
    assert without.written(spark, str(table), APP, 2)
    assert not without.written(spark, str(table), APP, 3)
    assert (without.lookups, without.checksum_lookups) == (1, 0)
    assert write(without, rows(spark, 3), table, 3)
    assert txn_versions(table) == [0, 1, 2, 0, 3]  # the 0 is other-query's batch
    assert delta_row_count(table) == 15


def test_a_failed_write_commits_nothing_and_the_next_batch_looks_the_version_up(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    appender = appended(spark, table, 2)
    failing = rows(spark, 2).withColumn("seq", F.raise_error(F.lit("boom")).cast("long"))
    # Spark raises the task's error itself or wrapped in TASK_WRITE_FAILED (which PySpark
    # leaves a Py4JJavaError); both runs have been seen in one suite
    with pytest.raises((SparkRuntimeException, Py4JJavaError), match="boom"):
        write(appender, failing, table, 2)
    assert txn_versions(table) == [0, 1]
    lookups = appender.lookups
    assert write(appender, rows(spark, 2), table, 2)
    assert appender.lookups == lookups + 1
    assert txn_versions(table) == [0, 1, 2]
    assert delta_row_count(table) == 9


def test_new_columns_go_through_delta_writer_and_partitions_commit_directly(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    appender = appended(spark, table, 2, partition_by=("tag",))
    assert appender.direct_commits == 1
    assert (table / "tag=b1").is_dir()

    wider = rows(spark, 2).withColumn("extra", F.lit(1))
    write(appender, wider, table, 2, partition_by=("tag",), merge_schema=True)
    assert (appender.writer_commits, appender.direct_commits) == (2, 1)
    lookups = appender.lookups
    assert write(appender, rows(spark, 3).withColumn("extra", F.lit(2)), table, 3,
                 partition_by=("tag",))  # fmt: skip
    assert appender.direct_commits == 2
    assert appender.lookups == lookups  # Delta's writer set the version to 2
    assert txn_versions(table) == [0, 1, 2, 3]
    columns = spark.read.format("delta").load(str(table)).columns
    assert sorted(columns) == ["extra", "seq", "tag"]


def test_without_the_transaction_api_every_batch_goes_through_delta_writer(
    spark: SparkSession, run: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    def missing(*_: object) -> None:
        raise Py4JError("Method update([class java.lang.Boolean]) does not exist")

    monkeypatch.setattr(DeltaAppender, "_lookup", missing)
    table = tmp_path / "t"
    writer = BatchWriter(make_plan("binary", None), str(table), None, RunStats())
    batch = source_rows(spark, [b"a", b"b"])
    with caplog.at_level(logging.WARNING, logger="streaming_jobs.delta_append"):
        writer(batch, 0)
        writer(batch, 0)  # a replay: Delta's writer skips it
        writer(source_rows(spark, [b"c"]), 1)
    assert not writer.appender.direct
    assert writer.appender.writer_commits == 3
    assert sum("transaction API is not as expected" in r.message for r in caplog.records) == 1
    assert txn_versions(table) == [0, 1]
    assert delta_row_count(table) == 3
    recorded = writer.stats.get(0)
    assert recorded is not None and recorded.rows == 2


def test_a_replayed_batch_into_one_table_is_counted_not_written(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    table = tmp_path / "t"
    stats = RunStats()
    writer = BatchWriter(make_plan("binary", None), str(table), None, stats)
    writer(source_rows(spark, [b"a", b"b", b"c"]), 0)

    def replay() -> None:  # local properties are per thread
        spark.sparkContext.setLocalProperty(QUERY_ID_PROPERTY, APP)
        writer(source_rows(spark, [b"a", b"b", b"c"]), 0)

    done = threading.Thread(target=replay, daemon=True)
    done.start()
    done.join(120)
    assert not done.is_alive(), "a replayed batch must not wait for metrics of a skipped write"
    assert delta_row_count(table) == 3
    recorded = stats.get(0)
    assert recorded is not None and recorded.rows == 3


def test_tables_created_before_the_query_take_the_first_batch_directly(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    from pyspark.sql.types import StructType

    from connector.spark.schema import SCHEMA_DDL
    from streaming_jobs.ingest import parse_schema
    from tests.spark.source_batches import SCHEMA

    table, dead = tmp_path / "t", tmp_path / "dead"
    plan = make_plan("json", parse_schema(SCHEMA), dead_letters=True, partition_by=("date",))
    writer = BatchWriter(plan, str(table), str(dead), RunStats())
    source_schema = StructType.fromDDL(SCHEMA_DDL)
    assert isinstance(source_schema, StructType)  # a list of columns: a struct
    assert writer.create_tables(spark, source_schema) == [str(table), str(dead)]
    assert [c["commitInfo"]["operation"] for c in map(_commit_info, delta_commits(table))] == [
        "WRITE"
    ]
    assert delta_row_count(table) == delta_row_count(dead) == 0
    again = BatchWriter(plan, str(table), str(dead), RunStats())
    assert again.create_tables(spark, source_schema) == []  # they exist: nothing written
    assert len(delta_commits(table)) == len(delta_commits(dead)) == 1

    batch = source_rows(spark, [b'{"seq": 1}', b"not json", b'{"seq": 2}'])
    writer(batch, 0)
    assert (writer.appender.direct_commits, writer.appender.writer_commits) == (2, 0)
    assert txn_versions(table) == txn_versions(dead) == [0]
    written = spark.read.format("delta").load(str(table))
    assert written.columns == table_rows(decode(batch, plan), plan).columns
    assert sorted(r.seq for r in written.collect()) == [1, 2]
    assert delta_row_count(dead) == 1
    details = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
    assert details is not None and details.partitionColumns == ["date"]


def test_a_clustered_table_takes_batches_directly_and_compaction_clusters_it(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    """``--cluster-by``: the job creates the table with liquid clustering, its batches commit
    directly, and the maintenance's OPTIMIZE clusters the files (Delta's own clustering)."""
    from connector.spark.schema import SCHEMA_DDL
    from streaming_jobs.compaction_policy import CompactionPolicy
    from streaming_jobs.table_maintenance import TableMaintenance

    table = tmp_path / "clustered"
    plan = make_plan("binary", None, cluster_by=("topic", "date"))
    writer = BatchWriter(plan, str(table), None, RunStats())
    assert writer.create_tables(spark, SCHEMA_DDL) == [str(table)]
    details = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
    assert details is not None and details.clusteringColumns == ["topic", "date"]
    for batch in range(3):
        payloads = [f"{batch}-{i}".encode() * 10 for i in range(400)]
        writer(source_rows(spark, payloads, topic=f"t/{batch}"), batch)
    assert (writer.appender.direct_commits, writer.appender.writer_commits) == (3, 0)

    maintenance = TableMaintenance(spark, [str(table)], CompactionPolicy(1 << 20, 23))

    def units(maintenance: TableMaintenance) -> list[int]:
        return [size for sizes in maintenance.small_files(str(table)).values() for size in sizes]

    try:
        assert maintenance.compact(str(table), 1 << 20)
        optimize = _commit_info(delta_commits(table)[-1])["commitInfo"]
        assert optimize["operation"] == "OPTIMIZE"
        assert json.loads(optimize["operationParameters"]["clusterBy"]) == ["topic", "date"]
        cube = set(spark.read.format("delta").load(str(table)).inputFiles())
        (cube_size,) = units(maintenance)  # the cube is one unit
        for batch in range(3, 6):
            writer(source_rows(spark, [b"c"], topic=f"t/{batch}"), batch)
        sizes = units(maintenance)
        assert sorted(sizes)[-1] == cube_size and len(sizes) == 4
        # Only what is smaller than the cube is reclustered: the cube's files stay.
        assert maintenance.compact(str(table), max(u for u in sizes if u != cube_size) + 1)
    finally:
        assert maintenance.close(60)
    live = set(spark.read.format("delta").load(str(table)).inputFiles())
    assert cube <= live and len(live - cube) == 1
    assert len(units(maintenance)) == 2
    assert delta_row_count(table) == 3 * 400 + 3


def _table_interval(spark: SparkSession, table: Path) -> str | None:
    return _table_property(spark, table, "delta.checkpointInterval")


LOG, FILES = "delta.logRetentionDuration", "delta.deletedFileRetentionDuration"
DEFAULT_FILES_KEY = f"spark.databricks.delta.properties.defaults.{FILES[len('delta.') :]}"


def _table_property(spark: SparkSession, table: Path, key: str) -> str | None:
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first().properties  # type: ignore[union-attr]
    return properties.get(key)


def test_tables_the_job_creates_keep_a_day_of_log_unless_told_otherwise(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Decision 45: created tables get ``delta.logRetentionDuration`` of
    CREATED_TABLE_LOG_RETENTION_HOURS, or the hours asked for, or (nothing asked) the session's
    default for new tables; Delta refuses one below the deleted-file retention."""
    from connector.spark.schema import SCHEMA_DDL

    plan = make_plan("text", None, dead_letters=True)

    def retention(name: str, hours: float | None = None) -> list[tuple[str | None, ...]]:
        """The log and deleted-file retentions of a created table and dead-letter table."""
        table, dead = tmp_path / name, tmp_path / f"{name}-dead"
        writer = BatchWriter(plan, str(table), str(dead), RunStats())
        assert writer.create_tables(spark, SCHEMA_DDL, None, hours) == [str(table), str(dead)]
        return [
            tuple(_table_property(spark, t, key) for key in (LOG, FILES)) for t in (table, dead)
        ]

    week = f"interval {round(CREATED_TABLE_LOG_RETENTION_HOURS * 3600)} seconds"
    assert retention("default") == [(week, None)] * 2  # files: Delta's 7 days
    assert retention("asked", 200) == [("interval 720000 seconds", None)] * 2
    spark.conf.set(DEFAULT_LOG_RETENTION_KEY, "interval 10 days")
    try:
        assert retention("session") == [("interval 10 days", None)] * 2
    finally:
        spark.conf.unset(DEFAULT_LOG_RETENTION_KEY)
    # Delta's rule, no log shorter than the deleted-file retention: a short log takes it along
    assert retention("short", 0.5) == [("interval 1800 seconds",) * 2] * 2
    with pytest.raises(ValueError, match="more than 0 hours"):
        created_table_properties(spark, None, 0)


def test_a_commit_made_elsewhere_meanwhile_is_caught_by_deltas_concurrency_control(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    """Decision 44: the appender starts its transaction from this JVM's snapshot without
    listing the log; a commit another process made since (here delta-rs) is not lost, and the
    batch lands once, at the next version."""
    import pyarrow as pa
    from deltalake import write_deltalake

    table = tmp_path / "t"
    appender = appended(spark, table, 3)  # versions 0 .. 2
    outside = pa.table({"seq": pa.array([900, 901], pa.int64()), "tag": ["x", "x"]})
    write_deltalake(str(table), outside, mode="append")  # version 3, unseen by this JVM
    assert write(appender, rows(spark, 3), table, 3)
    assert write(appender, rows(spark, 4), table, 4)
    assert (appender.direct_commits, appender.lookups) == (4, 1)

    assert txn_versions(table) == [0, 1, 2, 3, 4]
    tags = Counter(r.tag for r in spark.read.format("delta").load(str(table)).collect())
    assert tags == {"b0": 3, "b1": 3, "b2": 3, "x": 2, "b3": 3, "b4": 3}
    assert not write(DeltaAppender(), rows(spark, 4), table, 4)  # still known as written


def test_a_table_deleted_under_the_appender_is_created_anew_not_continued(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    """The JVM's snapshot is used only while its commit file is in the log: a deleted table's
    next batch creates it again (Delta's writer), readable from version 0."""
    table = tmp_path / "t"
    appender = appended(spark, table, 3)
    shutil.rmtree(table)
    assert write(appender, rows(spark, 3), table, 3)
    assert delta_versions(table) == [0] and appender.writer_commits == 2
    tags = Counter(r.tag for r in spark.read.format("delta").load(str(table)).collect())
    assert tags == {"b3": 3}


def test_the_background_checkpoints_remove_expired_log_files(
    spark: SparkSession, run: str, tmp_path: Path, checkpoint_every_1000: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Decision 45: after a checkpoint, when due, the log files older than the table's
    ``delta.logRetentionDuration`` (to the minute) are removed as far as Delta's rule allows
    (up to a checkpoint at the boundary: here version 3); the table reads the same."""
    monkeypatch.setattr(delta_append, "CHECKPOINT_EVERY", 3)
    spark.conf.set(DEFAULT_LOG_RETENTION_KEY, "interval 1 minutes")
    spark.conf.set(DEFAULT_FILES_KEY, "interval 1 minutes")
    now = [0.0]
    table = tmp_path / "t"
    log_dir = table / "_delta_log"
    try:
        appender = DeltaAppender()
        appender.log_cleanups = LogCleanups(clock=lambda: now[0])
        for batch in range(4):  # versions 0 .. 3; the checkpoint at 3 cleans (nothing is old)
            assert write(appender, rows(spark, batch), table, batch)
            assert appender.close(120)
        assert delta_versions(table) == [0, 1, 2, 3]
        hour_ago = time.time() - 3600
        for path in log_dir.iterdir():  # versions 0 .. 2 are an hour old, 3 (a checkpoint) not
            version = path.name.lstrip(".")[:20]
            if version.isdigit() and int(version) < 3:
                os.utime(path, (hour_ago, hour_ago))
        for batch in range(4, 7):  # versions 4 .. 6; checkpoint at 6, cleanup not due yet
            assert write(appender, rows(spark, batch), table, batch)
            assert appender.close(120)
        assert delta_versions(table)[0] == 0
        now[0] += 60  # a quarter of the retention and more
        for batch in range(7, 10):  # versions 7 .. 9; checkpoint at 9, cleanup due
            assert write(appender, rows(spark, batch), table, batch)
            assert appender.close(120)
    finally:
        spark.conf.unset(DEFAULT_LOG_RETENTION_KEY)
        spark.conf.unset(DEFAULT_FILES_KEY)

    assert delta_versions(table) == list(range(3, 10))  # the hour-old commits are gone
    assert (appender.checkpoints.written, appender.checkpoints.failed) == (3, 0)
    assert appender.split_checkpoints
    fresh = spark.read.format("delta").load(str(table))
    assert fresh.count() == 30
    from deltalake import DeltaTable as RustTable

    assert RustTable(str(table)).to_pyarrow_table().num_rows == 30
    assert delta_txn_version(spark, table) == 9


def test_tables_the_job_creates_get_a_long_checkpoint_interval_unless_told_otherwise(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Decision 23: created tables get CREATED_TABLE_CHECKPOINT_INTERVAL, or the interval asked
    for, or (nothing asked) the session's default for new tables; existing ones keep theirs."""
    from connector.spark.schema import SCHEMA_DDL

    plan = make_plan("text", None, dead_letters=True)

    def create(name: str, interval: int | None = None) -> tuple[Path, Path]:
        table, dead = tmp_path / name, tmp_path / f"{name}-dead"
        writer = BatchWriter(plan, str(table), str(dead), RunStats())
        assert writer.create_tables(spark, SCHEMA_DDL, interval) == [str(table), str(dead)]
        return table, dead

    expected = str(CREATED_TABLE_CHECKPOINT_INTERVAL)
    assert [_table_interval(spark, t) for t in create("default")] == [expected, expected]
    assert [_table_interval(spark, t) for t in create("asked", 10)] == ["10", "10"]
    for _ in new_tables_checkpoint_every(spark, 7):
        assert [_table_interval(spark, t) for t in create("session")] == ["7", "7"]
        assert [_table_interval(spark, t) for t in create("asked-too", 20)] == ["20", "20"]

    existing = tmp_path / "existing"
    spark.range(1).write.format("delta").save(str(existing))
    writer = BatchWriter(make_plan("binary", None), str(existing), None, RunStats())
    assert writer.create_tables(spark, SCHEMA_DDL, 5) == []
    assert _table_interval(spark, existing) is None
    with pytest.raises(ValueError, match="at least 1"):
        created_table_interval(spark, 0)


def _commit_info(commit: Commit) -> dict[str, Any]:
    return next(a for a in commit["actions"] if "commitInfo" in a)


def test_a_streaming_batch_runs_under_its_run_id(spark: SparkSession, tmp_path: Path) -> None:
    """The run key is Spark's job group on the batch's thread: the query's run id."""
    seen: list[str | None] = []

    def record(batch: DataFrame, batch_id: int) -> None:
        seen.append(batch.sparkSession.sparkContext.getLocalProperty(RUN_PROPERTY))

    query = (
        spark.readStream.format("rate").option("rowsPerSecond", 10).load()
        .writeStream.option("checkpointLocation", str(tmp_path / "cp"))
        .foreachBatch(record).trigger(availableNow=True).start()
    )  # fmt: skip
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    assert seen and set(seen) == {str(query.runId)}


def new_tables_checkpoint_every(spark: SparkSession, interval: int) -> Iterator[None]:
    """New tables get ``delta.checkpointInterval`` ``interval`` while the test runs."""
    spark.conf.set(DEFAULT_INTERVAL_KEY, str(interval))
    yield
    spark.conf.unset(DEFAULT_INTERVAL_KEY)


@pytest.fixture
def checkpoint_every_2(spark: SparkSession) -> Iterator[None]:
    """Version 2 of a new table is due for a checkpoint."""
    yield from new_tables_checkpoint_every(spark, 2)


def test_checkpoints_are_written_beside_the_commits_not_inside_them(
    spark: SparkSession, run: str, tmp_path: Path, checkpoint_every_2: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    release = threading.Event()
    write_checkpoint = Checkpointer._write

    def held(self: Checkpointer, *args: Any) -> None:
        assert release.wait(120), "the test never released the checkpoint"
        write_checkpoint(self, *args)

    monkeypatch.setattr(Checkpointer, "_write", held)
    table = tmp_path / "t"
    log_dir = table / "_delta_log"
    appender = appended(spark, table, 4)  # versions 0 (Delta's writer) .. 3 (direct)

    # version 2's commit and the next batch's returned while its checkpoint was held back
    assert txn_versions(table) == [0, 1, 2, 3]
    assert appender.direct_commits == 3
    assert not list(log_dir.glob("*.checkpoint.parquet"))
    assert not appender.close(0)
    release.set()
    assert appender.close(120)
    assert [p.name for p in log_dir.glob("*.checkpoint.parquet")] == [
        "00000000000000000002.checkpoint.parquet"
    ]
    assert json.loads((log_dir / "_last_checkpoint").read_text())["version"] == 2
    assert (appender.checkpoints.written, appender.checkpoints.failed) == (1, 0)

    # a reader that starts from that checkpoint sees every batch, and Delta's lookup agrees
    fresh = spark.read.format("delta").load(str(table))
    assert sorted(r.seq for r in fresh.collect()) == sorted(
        b * 100 + i for b in range(4) for i in range(3)
    )
    assert delta_txn_version(spark, table) == 3


@pytest.fixture
def checkpoint_every_1000(spark: SparkSession) -> Iterator[None]:
    """No version of a new table in a test is due for a checkpoint by Delta's rule."""
    yield from new_tables_checkpoint_every(spark, 1000)


def checkpoint_versions(table: Path) -> list[int]:
    return sorted(
        int(p.name.split(".")[0]) for p in (table / "_delta_log").glob("*.checkpoint.parquet")
    )


def segment_checkpoint(spark: SparkSession, table: Path) -> int:
    """The checkpoint version the JVM's snapshot of ``table`` starts its log segment from."""
    jvm = spark._jvm
    assert jvm is not None
    delta_log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, str(table))
    return int(delta_log.unsafeVolatileSnapshot().logSegment().checkpointProvider().version())


def test_a_long_interval_still_gets_background_checkpoints(
    spark: SparkSession, run: str, tmp_path: Path, checkpoint_every_1000: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(delta_append, "CHECKPOINT_EVERY", 3)
    table = tmp_path / "t"
    appender = DeltaAppender()
    for batch in range(8):  # versions 0 .. 7
        assert write(appender, rows(spark, batch), table, batch)
        assert appender.close(120)  # each checkpoint done before the next commit
    assert checkpoint_versions(table) == [3, 6]
    assert (appender.checkpoints.written, appender.checkpoints.failed) == (2, 0)
    assert json.loads((table / "_delta_log" / "_last_checkpoint").read_text())["version"] == 6
    # the commit after each checkpoint read the snapshot anew: its log segment starts there
    assert appender.refreshes == 2
    assert segment_checkpoint(spark, table) == 6

    # a new run counts from the newest checkpoint in the log
    context = spark.sparkContext
    context.setLocalProperty(RUN_PROPERTY, "run-2")
    again = DeltaAppender()
    for batch in range(8, 11):  # versions 8 .. 10
        assert write(again, rows(spark, batch), table, batch)
        assert again.close(120)
    assert checkpoint_versions(table) == [3, 6, 9]
    fresh = spark.read.format("delta").load(str(table))
    assert fresh.count() == 11 * 3
    assert delta_txn_version(spark, table) == 10


def test_delta_writer_commits_keep_their_checkpoint_inside_the_commit(
    spark: SparkSession, run: str, tmp_path: Path, checkpoint_every_2: None
) -> None:
    table = tmp_path / "t"
    appender = DeltaAppender()
    appender.direct = False  # every batch through Delta's writer, as without the API
    for batch in range(3):
        assert write(appender, rows(spark, batch), table, batch)
    assert (table / "_delta_log" / "00000000000000000002.checkpoint.parquet").exists()
    assert appender.checkpoints.written == 0


def test_without_the_hook_api_checkpoints_stay_inside_the_commit_and_batches_land(
    spark: SparkSession, run: str, tmp_path: Path, checkpoint_every_2: None,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    class NoHooks:
        """A Delta build whose checkpoint hook is not where this appender looks."""

        @property
        def checkpoint_hook(self) -> object:
            raise Py4JError("Trying to call a package.")

    defer = DeltaAppender._defer_checkpoint
    monkeypatch.setattr(
        DeltaAppender,
        "_defer_checkpoint",
        lambda self, txn, _: defer(self, txn, cast(_DeltaJvm, NoHooks())),  # a stand-in
    )
    table = tmp_path / "t"
    with caplog.at_level(logging.WARNING, logger="streaming_jobs.delta_append"):
        appender = appended(spark, table, 4)
    assert not appender.background_checkpoints
    assert sum("commit hooks are not as expected" in r.message for r in caplog.records) == 1
    assert appender.direct_commits == 3
    assert txn_versions(table) == [0, 1, 2, 3]
    # written by Delta's own hook inside version 2's commit
    assert (table / "_delta_log" / "00000000000000000002.checkpoint.parquet").exists()
    assert appender.checkpoints.written == 0
