"""``foreachBatch`` writer: each micro-batch into ``--table`` and ``--dead-letter-table``.

Both writes are idempotent appends (:mod:`streaming_jobs.delta_append`): each commit records
Delta's ``SetTransaction`` for (app id, batch id), and a batch the table already has is not
written again. The app id is the query's id, which Spark keeps in the checkpoint (the same id
Delta's own streaming sink uses, so a table that sink wrote for the same checkpoint is
continued seamlessly); the version is the batch id. A batch that Spark replays after a crash
(same offsets, same rows) therefore lands at most once in each table, whichever of the two
writes had finished. A new checkpoint means a new query id, so a reset never makes batches look
already written.
"""

from __future__ import annotations

import logging
import time

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from connector.spark.writer.sink import QUERY_ID_PROPERTY

from .compaction_policy import SAFE_RETENTION_HOURS
from .delta_append import DeltaAppender
from .payloads import (
    PayloadPlan,
    dead_letter_rows,
    decode,
    event_rows,
    row_counts,
    table_rows,
)
from .progress import BatchStats, RunStats
from .stop_interruption import stop_interruption
from .table_maintenance import TableMaintenance

log = logging.getLogger(__name__)

CREATED_TABLE_CHECKPOINT_INTERVAL = 1000
"""``delta.checkpointInterval`` of the tables the job creates (decision 23). Delta computes a
table's full state inside every interval-th commit, about 1 s in the stream's path; the job
writes a checkpoint every ``delta_append.CHECKPOINT_EVERY`` versions in the background instead
(decision 21), so readers find the log checkpointed as often as at Delta's default of 10."""

DEFAULT_INTERVAL_KEY = "spark.databricks.delta.properties.defaults.checkpointInterval"
"""The session setting that gives new Delta tables their ``delta.checkpointInterval``."""

CREATED_TABLE_LOG_RETENTION_HOURS = SAFE_RETENTION_HOURS
"""``delta.logRetentionDuration`` of the tables the job creates, in hours (decision 45): the
history time travel and a downstream ``readStream`` can reach, as long as Delta's default
``delta.deletedFileRetentionDuration`` (7 days; Delta refuses a log retention shorter than
that), beyond which ``VACUUM`` has deleted the files older versions name. Delta's own default
(30 days) keeps some 2.6 million commits at the default 1 s trigger for every reader to list."""

DEFAULT_LOG_RETENTION_KEY = "spark.databricks.delta.properties.defaults.logRetentionDuration"
"""The session setting that gives new Delta tables their ``delta.logRetentionDuration``."""


class BatchWriter:
    """The ``foreachBatch`` function of the ingest job."""

    def __init__(
        self,
        plan: PayloadPlan,
        table: str,
        dead_letter_table: str | None,
        stats: RunStats,
        *,
        merge_schema: bool = False,
        events_table: str | None = None,
    ) -> None:
        self.plan = plan
        self.table = table
        self.dead_letter_table = dead_letter_table
        self.events_table = events_table
        """Sparkplug: the births, deaths and STATE messages, one row each."""
        self.stats = stats
        self.merge_schema = merge_schema
        self.appender = DeltaAppender()
        self.maintenance: TableMaintenance | None = None
        """Compaction of the tables, told of each commit (:mod:`.table_maintenance`)."""
        self._exists: set[str] = set()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        session = batch.sparkSession
        app_id = session.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
        if not app_id:
            raise RuntimeError(f"no {QUERY_ID_PROPERTY} in the batch's context")
        began = time.monotonic()
        try:
            rows, unparsed, newest = self._write(batch, app_id, batch_id)
        except BaseException as error:
            self.appender.forget()  # a commit may or may not have landed: look it up next time
            interrupted = stop_interruption(error, session.sparkContext)
            if interrupted is None:
                raise
            log.info("batch %d: the query stopped during its write; replayed on restart", batch_id)
            raise interrupted from None
        log.debug("batch %d: %d rows in %.2f s", batch_id, rows, time.monotonic() - began)
        self.stats.record(BatchStats(batch_id, rows, unparsed, newest, time.time()))

    def create_tables(
        self,
        spark: SparkSession,
        source_schema: StructType | str,
        checkpoint_interval: int | None = None,
        log_retention_hours: float | None = None,
    ) -> list[str]:
        """Create the tables this writer fills, empty and with the columns and partitioning its
        batches will have, unless they exist; returns the paths created. The job calls it
        before its query starts: a path that cannot hold a Delta table fails the job at once,
        and the first batch commits to an existing table (a direct commit, decision 17)
        instead of creating it through Delta's writer.

        New tables get the properties of :func:`created_table_properties`. Existing tables
        keep theirs, and so does a table another application creates at the same moment."""
        properties = created_table_properties(spark, checkpoint_interval, log_retention_hours)
        decoded = decode(spark.createDataFrame([], source_schema), self.plan)
        plan = self.plan
        targets = [(self.table, table_rows(decoded, plan), plan.partition_by, plan.cluster_by)]
        if self.dead_letter_table is not None:
            targets.append((self.dead_letter_table, dead_letter_rows(decoded, plan), (), ()))
        if self.events_table is not None:
            targets.append((self.events_table, event_rows(decoded), (), ()))
        return self._create_missing(targets, properties)

    def _create_missing(
        self,
        targets: list[tuple[str, DataFrame, tuple[str, ...], tuple[str, ...]]],
        properties: dict[str, str],
    ) -> list[str]:
        """Create each (path, rows, partition_by, cluster_by) table that does not exist; the
        paths created."""
        created = []
        for path, rows, partition_by, cluster_by in targets:
            if self._table_exists(rows, path):
                continue
            try:
                _create(rows, path, properties, partition_by, cluster_by)
            except Exception:
                # Another application created it first (two jobs on one table, started
                # together): Delta refuses the second table creation, and the table is there.
                if not self._created_meanwhile(rows.sparkSession, path):
                    raise
                log.info("%s was created by another writer at the same time", path)
                continue
            self._exists.add(path)
            created.append(path)
        return created

    def _write(self, batch: DataFrame, app_id: str, batch_id: int) -> tuple[int, int, int | None]:
        """Write one batch to the tables; (rows, rows that did not parse, newest receive time
        in microseconds)."""
        if self.dead_letter_table is None and self.events_table is None:
            return self._write_single(batch, app_id, batch_id)
        return self._write_cached(batch, app_id, batch_id)

    @property
    def tables(self) -> tuple[str, ...]:
        """The paths of the tables this writer fills."""
        return tuple(
            path for path in (self.table, self.dead_letter_table, self.events_table) if path
        )

    def close(self, timeout: float | None = None) -> bool:
        """Wait for Delta checkpoints still being written after the last batch and for a
        compaction still running; False if ``timeout`` ran out first (the tables are complete
        either way)."""
        began = time.monotonic()
        done = self.appender.close(timeout)
        if self.maintenance is not None:
            left = None if timeout is None else max(0.0, timeout - (time.monotonic() - began))
            done = self.maintenance.close(left) and done
        return done

    def _metrics(self, frame: DataFrame) -> list:
        return self.plan.projections.columns(
            frame,
            "metrics",
            lambda: [
                *row_counts(self.plan),
                F.max(F.unix_micros(F.col("timestamp"))).alias("newest"),
            ],
        )

    def _write_single(
        self, batch: DataFrame, app_id: str, batch_id: int
    ) -> tuple[int, int, int | None]:
        """One table: a single pass, the counts observed while writing (no cache, no count).
        A batch the table already has is only counted; when this Delta build cannot tell
        beforehand, the counts come first from one cached read."""
        decoded = decode(batch, self.plan)
        written = self.appender.written(batch.sparkSession, self.table, app_id, batch_id)
        if written is False:
            observation = Observation(f"mqtt-ingest-{batch_id}")
            observed = decoded.observe(observation, *self._metrics(decoded))
            self._append(table_rows(observed, self.plan), self.table, app_id, batch_id, None)
            return self._counts(observation.get)
        if written:
            log.info("batch %d is already in %s; not written again", batch_id, self.table)
            counts = decoded.agg(*self._metrics(decoded)).first()
            assert counts is not None
            return self._counts(counts.asDict())
        return self._write_cached(batch, app_id, batch_id)

    @staticmethod
    def _counts(counts: dict) -> tuple[int, int, int | None]:
        newest = counts.get("newest")
        return (
            int(counts["rows"]),
            int(counts["unparsed"]),
            int(newest) if newest is not None else None,
        )

    def _write_cached(
        self, batch: DataFrame, app_id: str, batch_id: int
    ) -> tuple[int, int, int | None]:
        """The counts first, then the writes, from one cached read: good rows to the table and
        the rest to the dead-letter table when there is one, else every row to the table;
        Sparkplug's births, deaths and STATE messages also to the events table."""
        decoded = decode(batch, self.plan).persist()
        try:
            counts = decoded.agg(*self._metrics(decoded)).first()
            assert counts is not None
            rows, unparsed = int(counts["rows"]), int(counts["unparsed"])
            dead_letters = self.dead_letter_table
            kept = rows - unparsed if dead_letters is not None else rows
            if self.plan.sparkplug:  # one row per metric, and the undecodable ones when kept
                kept = int(counts["metrics"]) + (0 if dead_letters is not None else unparsed)
            self._append(table_rows(decoded, self.plan), self.table, app_id, batch_id, kept)
            if dead_letters is not None:
                self._append(
                    dead_letter_rows(decoded, self.plan), dead_letters, app_id, batch_id, unparsed
                )
            if self.events_table is not None:
                self._append(
                    event_rows(decoded),
                    self.events_table,
                    app_id,
                    batch_id,
                    int(counts["events"]),
                )
        finally:
            decoded.unpersist()
        return self._counts(counts.asDict())

    def _append(
        self, rows: DataFrame, path: str, app_id: str, batch_id: int, count: int | None
    ) -> None:
        """Append ``rows`` once per (query, batch); an empty batch only creates the table
        (``count`` None: not known before writing)."""
        if count == 0 and self._table_exists(rows, path):
            return
        if count is not None and self.appender.written(rows.sparkSession, path, app_id, batch_id):
            log.info("batch %d is already in %s; not written again", batch_id, path)
            return
        began = time.monotonic()
        self.appender.append(
            rows,
            path,
            app_id,
            batch_id,
            partition_by=self._partition_by(path),
            merge_schema=self.merge_schema,
        )
        self._exists.add(path)
        if self.maintenance is not None:
            self.maintenance.committed(path)
        log.debug(
            "batch %d: %s rows into %s in %.2f s", batch_id, count, path, time.monotonic() - began
        )

    def _partition_by(self, path: str) -> tuple[str, ...]:
        """The partition columns of the table at ``path``."""
        return self.plan.partition_by if path == self.table else ()

    def _created_meanwhile(self, spark: SparkSession, path: str) -> bool:
        """Whether a Delta table is at ``path`` now, read from its log afresh (after a failed
        creation ``DeltaTable.isDeltaTable`` may still answer from the log it cached before)."""
        from delta.tables import DeltaTable

        try:
            DeltaTable.forPath(spark, path)
        except Exception:
            return False
        self._exists.add(path)
        return True

    def _table_exists(self, rows: DataFrame, path: str) -> bool:
        if path in self._exists:
            return True
        from delta.tables import DeltaTable

        if DeltaTable.isDeltaTable(rows.sparkSession, path):
            self._exists.add(path)
            return True
        return False


def created_table_interval(spark: SparkSession, requested: int | None) -> int | None:
    """The ``delta.checkpointInterval`` to give a table the job creates: ``requested``; else
    None (Delta applies the session's default) when the session sets a default; else
    :data:`CREATED_TABLE_CHECKPOINT_INTERVAL`."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"a checkpoint interval must be at least 1, got {requested}")
        return requested
    if spark.conf.get(DEFAULT_INTERVAL_KEY, None) is not None:
        return None
    return CREATED_TABLE_CHECKPOINT_INTERVAL


def created_table_properties(
    spark: SparkSession, checkpoint_interval: int | None, log_retention_hours: float | None
) -> dict[str, str]:
    """The Delta table properties of a table the job creates: ``delta.checkpointInterval``
    (:func:`created_table_interval`) and ``delta.logRetentionDuration``, ``log_retention_hours``
    if given, else the session's default for new tables when it sets one, else
    :data:`CREATED_TABLE_LOG_RETENTION_HOURS`. A log retention below Delta's default
    deleted-file retention (:data:`.compaction_policy.SAFE_RETENTION_HOURS`) also sets
    ``delta.deletedFileRetentionDuration`` to the same (Delta refuses a log retention shorter
    than it), so ``VACUUM`` may then delete replaced files that soon. A property left out takes
    Delta's default."""
    properties = {}
    interval = created_table_interval(spark, checkpoint_interval)
    if interval is not None:
        properties["delta.checkpointInterval"] = str(interval)
    hours = log_retention_hours
    if hours is None and spark.conf.get(DEFAULT_LOG_RETENTION_KEY, None) is None:
        hours = CREATED_TABLE_LOG_RETENTION_HOURS
    if hours is not None:
        if hours <= 0:
            raise ValueError(f"a log retention must be more than 0 hours, got {hours}")
        retention = f"interval {max(1, round(hours * 3600))} seconds"
        properties["delta.logRetentionDuration"] = retention
        if hours < SAFE_RETENTION_HOURS:  # Delta's rule: files kept no longer than the log
            properties["delta.deletedFileRetentionDuration"] = retention
    return properties


def _create(
    rows: DataFrame,
    path: str,
    properties: dict[str, str],
    partition_by: tuple[str, ...],
    cluster_by: tuple[str, ...],
) -> None:
    """Create the empty table at ``path`` with ``rows``' columns: partitioned by
    ``partition_by`` through Delta's writer, or with liquid clustering on ``cluster_by``
    through Delta's table builder (the writer's ``clusterBy`` does not reach a path table)."""
    if cluster_by:
        from delta.tables import DeltaTable

        builder = DeltaTable.createIfNotExists(rows.sparkSession).location(path)
        builder = builder.addColumns(rows.schema).clusterBy(*cluster_by)
        for key, value in properties.items():
            builder = builder.property(key, value)
        builder.execute()
        return
    writer = rows.write.format("delta").mode("append").options(**properties)
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.save(path)
