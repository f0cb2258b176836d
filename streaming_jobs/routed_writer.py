"""``foreachBatch`` writer of a job with routes (:mod:`streaming_jobs.routes`): each micro-batch
split by route inside Spark, each route's rows into its table, every dead letter into its
dead-letter table.

The batch is read once (cached) with the index of the route that takes each row
(:func:`.routes.route_index`, first match in file order). Each table gets the rows of the
routes writing it, decoded by its route's plan; each dead-letter table gets, in one commit, the
rows its routes could not parse and, for the top-level one, the messages no route took (reason
:data:`.routes.NO_ROUTE`). Every commit is an idempotent append (:mod:`.delta_append`): the
table records (query id, batch id), so after a crash between two tables' commits the replayed
batch lands in the tables that lack it and in no other. The routes' tables are written at once
(up to :data:`PARALLEL_TABLES` threads, each with the batch's Spark properties), the
dead-letter tables after them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType
from pyspark.util import inheritable_thread_target

from .batch_writer import BatchWriter, created_table_properties
from .payloads import (
    REASON,
    PayloadPlan,
    dead_letter_rows,
    decode,
    event_rows,
    row_counts,
    table_rows,
)
from .progress import RunStats
from .routes import NO_ROUTE, check_catalog_name, is_path, route_index
from .sparkplug_route import SCHEMA_DDL as SPARKPLUG_DDL
from .sparkplug_route import RouteStates, decode_batch

log = logging.getLogger(__name__)

ROUTE = "__route"
PARALLEL_TABLES = 4
"""Tables written at once: each append's driver-side work (planning, Delta's commit) overlaps
another's tasks (bench/REPORT.md, "Routes")."""


@dataclass(frozen=True)
class TableRoute:
    """The routes writing one table: their indexes (0-based, in file order), the plan of the
    table's rows, its path, and the path of their dead-letter table (None: the rows that do not
    parse stay in the table with ``_parse_error``)."""

    indexes: tuple[int, ...]
    plan: PayloadPlan
    table: str
    dead_letter_table: str | None
    events_table: str | None = None
    """Sparkplug: the births, deaths and STATE messages of the routes."""
    sparkplug: RouteStates | None = None
    """Sparkplug: the stored states the routes' messages are decoded from
    (:mod:`.sparkplug_route`)."""

    def empty_source(self, spark: SparkSession, source: DataFrame) -> DataFrame:
        """No rows with the columns this table's plan decodes: the source's, or Sparkplug's."""
        return source if self.sparkplug is None else spark.createDataFrame([], SPARKPLUG_DDL)


class RoutedBatchWriter(BatchWriter):
    """The ``foreachBatch`` function of a job with routes (module docstring)."""

    def __init__(
        self,
        filters: Sequence[str],
        targets: Sequence[TableRoute],
        unrouted_table: str | None,
        mqtt_columns: Sequence[str],
        stats: RunStats,
        *,
        merge_schema: bool = False,
    ) -> None:
        first = targets[0]
        super().__init__(first.plan, first.table, None, stats, merge_schema=merge_schema)
        self.filters = tuple(filters)
        self.targets = tuple(targets)
        self.unrouted_table = unrouted_table
        """The dead-letter table of the messages no route takes (None: every message has a
        route, :func:`.routes.subscription`)."""
        self.mqtt_columns = tuple(mqtt_columns)
        workers = min(len(self.targets), PARALLEL_TABLES)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="mqtt-route")
        """The tables' writers, the same threads for every batch (each Python thread has a JVM
        thread of its own in PySpark's pinned-thread mode: new ones per batch would add up)."""

    def close(self, timeout: float | None = None) -> bool:
        self._pool.shutdown(wait=False)
        return super().close(timeout)

    @property
    def tables(self) -> tuple[str, ...]:
        others = [t.dead_letter_table for t in self.targets] + [self.unrouted_table]
        others += [t.events_table for t in self.targets]
        return tuple(dict.fromkeys([*(t.table for t in self.targets), *(p for p in others if p)]))

    def create_tables(
        self,
        spark: SparkSession,
        source_schema: StructType | str,
        checkpoint_interval: int | None = None,
        log_retention_hours: float | None = None,
    ) -> list[str]:
        """Each route's table and each dead-letter table, unless they exist (as
        :meth:`BatchWriter.create_tables` does for one table)."""
        properties = created_table_properties(spark, checkpoint_interval, log_retention_hours)
        source = spark.createDataFrame([], source_schema)
        created = self._locate_catalog_tables(spark, source, properties)
        wanted: dict[str, tuple[DataFrame, tuple[str, ...], tuple[str, ...]]] = {}
        for target in self.targets:
            decoded = decode(target.empty_source(spark, source), target.plan)
            rows = table_rows(decoded, target.plan)
            layout = (target.plan.partition_by, target.plan.cluster_by)
            wanted.setdefault(target.table, (rows, *layout))
            if target.dead_letter_table:
                dead = self._dead_letters(target, decoded, source)
                wanted.setdefault(target.dead_letter_table, (dead, (), ()))
            if target.events_table:
                wanted.setdefault(target.events_table, (event_rows(decoded), (), ()))
        if self.unrouted_table:
            wanted.setdefault(self.unrouted_table, (self._unrouted_rows(source), (), ()))
        targets = [(path, *rest) for path, rest in wanted.items()]
        return created + self._create_missing(targets, properties)

    def _locate_catalog_tables(
        self, spark: SparkSession, source: DataFrame, properties: dict[str, str]
    ) -> list[str]:
        """Routes whose table is a catalog name (``main.iot.events``): the table created in the
        catalog unless it is there, and written by its location from then on; the names of
        those created."""
        from delta.tables import DeltaTable

        created: list[str] = []
        located: list[TableRoute] = []
        for target in self.targets:
            if is_path(target.table):
                located.append(target)
                continue
            check_catalog_name(spark, target.table)
            known = spark.catalog.tableExists(target.table)
            if not known and not _register_left_table(spark, target.table):
                created.append(target.table)
            rows = table_rows(decode(target.empty_source(spark, source), target.plan), target.plan)
            builder = DeltaTable.createIfNotExists(spark).tableName(target.table)
            builder = builder.addColumns(rows.schema)
            if target.plan.cluster_by:
                builder = builder.clusterBy(*target.plan.cluster_by)
            elif target.plan.partition_by:
                builder = builder.partitionedBy(*target.plan.partition_by)
            for key, value in properties.items():
                builder = builder.property(key, value)
            builder.execute()
            detail = spark.sql(f"DESCRIBE DETAIL {target.table}").first()
            assert detail is not None
            log.info("the catalog table %s is at %s", target.table, detail.location)
            located.append(dataclasses.replace(target, table=detail.location))
        self.targets = tuple(located)
        self.table = located[0].table
        return created

    def _unrouted_rows(self, batch: DataFrame) -> DataFrame:
        return batch.select(*self.mqtt_columns, F.lit(NO_ROUTE).alias("reason"))

    def _dead_letters(self, target: TableRoute, decoded: DataFrame, batch: DataFrame) -> DataFrame:
        """``target``'s dead letters with the source's columns and ``reason``, whatever the
        route's format, so that routes can share a dead-letter table: a Sparkplug route's found
        by (receiver, offset) among the batch's messages."""
        rows = dead_letter_rows(decoded, target.plan)
        if target.sparkplug is None:
            return rows
        reasons = rows.select("receiver", "offset", "reason")
        return batch.join(reasons, ["receiver", "offset"]).select(*self.mqtt_columns, "reason")

    def _write(self, batch: DataFrame, app_id: str, batch_id: int) -> tuple[int, int, int | None]:
        routed = batch.withColumn(ROUTE, route_index(F.col("topic"), self.filters)).persist()
        cached: list[DataFrame] = []
        try:
            found = routed.groupBy(ROUTE).agg(
                F.count(F.lit(1)).alias("rows"),
                F.max(F.unix_micros(F.col("timestamp"))).alias("newest"),
            )
            counts: dict[int | None, int] = {}
            newest: int | None = None
            for row in found.collect():
                counts[row[ROUTE]] = int(row["rows"])
                if row["newest"] is not None:
                    newest = max(int(row["newest"]), newest or 0)
            # The batch's job group and properties go with each table's writes (a stop cancels).
            write = inheritable_thread_target(routed.sparkSession)(
                functools.partial(self._write_table, routed, counts, app_id, batch_id, cached)
            )
            # Every future done before the dead letters and before an error goes up.
            futures = [self._pool.submit(write, target) for target in self.targets]
            wait(futures)
            written = [future.result() for future in futures]
            unparsed = sum(bad for bad, _ in written)
            dead: dict[str, list[tuple[DataFrame, int]]] = {}
            for target, (bad, letters) in zip(self.targets, written, strict=True):
                if target.dead_letter_table and letters is not None:
                    dead.setdefault(target.dead_letter_table, []).append((letters, bad))
            if self.unrouted_table:
                lost = counts.get(None, 0)
                unrouted = self._unrouted_rows(routed.where(F.col(ROUTE).isNull()))
                dead.setdefault(self.unrouted_table, []).append((unrouted, lost))
                unparsed += lost
            for path, parts in dead.items():
                frame = parts[0][0]
                for other, _ in parts[1:]:
                    frame = frame.unionByName(other)
                self._append(frame, path, app_id, batch_id, sum(n for _, n in parts))
        finally:
            for frame in cached:
                frame.unpersist()
            routed.unpersist()
        return sum(counts.values()), unparsed, newest

    def _write_table(
        self,
        routed: DataFrame,
        counts: dict[int | None, int],
        app_id: str,
        batch_id: int,
        cached: list[DataFrame],
        target: TableRoute,
    ) -> tuple[int, DataFrame | None]:
        """One table's rows of the batch appended, and its events when it has an events table;
        (rows that did not parse, its dead letters for the dead-letter table or None). Frames
        it caches go into ``cached``."""
        routed_rows = sum(counts.get(i, 0) for i in target.indexes)
        mine = routed.where(F.col(ROUTE).isin(*target.indexes))
        if target.sparkplug is not None and routed_rows:
            mine = decode_batch(mine, target.sparkplug, app_id, batch_id)
        elif target.sparkplug is not None:
            mine = target.empty_source(routed.sparkSession, mine)
        decoded = decode(mine, target.plan)
        if not routed_rows or target.plan.payload_format == "binary":
            self._append(
                table_rows(decoded, target.plan), target.table, app_id, batch_id, routed_rows
            )
            return 0, None
        if target.dead_letter_table is None and target.sparkplug is None:
            return self._append_observed(decoded, target, app_id, batch_id), None
        decoded = decoded.persist()
        cached.append(decoded)
        bad, kept, events = self._counts_of(decoded, target)
        self._append(table_rows(decoded, target.plan), target.table, app_id, batch_id, kept)
        if target.events_table:
            self._append(event_rows(decoded), target.events_table, app_id, batch_id, events)
        letters = self._dead_letters(target, decoded, routed) if target.dead_letter_table else None
        return bad, letters

    def _append_observed(
        self, decoded: DataFrame, target: TableRoute, app_id: str, batch_id: int
    ) -> int:
        """A table that keeps every row of its routes (no dead-letter table): written in one
        pass, the rows that did not parse counted while writing; that count."""
        spark = decoded.sparkSession
        if self.appender.written(spark, target.table, app_id, batch_id):
            log.info("batch %d is already in %s; not written again", batch_id, target.table)
            return decoded.where(F.col(REASON).isNotNull()).count()
        observation = Observation(f"mqtt-route-{batch_id}-{target.indexes[0]}")
        observed = decoded.observe(observation, F.count(F.col(REASON)).alias("bad"))
        self._append(table_rows(observed, target.plan), target.table, app_id, batch_id, None)
        return int(observation.get["bad"])

    @staticmethod
    def _counts_of(decoded: DataFrame, target: TableRoute) -> tuple[int, int, int]:
        """Of one table's decoded rows: (rows that did not parse, rows for the table, events).
        A Sparkplug table takes a row per metric, and the undecodable messages when it has no
        dead-letter table."""
        counts = decoded.agg(*row_counts(target.plan)).first()
        assert counts is not None
        bad = int(counts["unparsed"])
        if not target.plan.sparkplug:
            return bad, int(counts["rows"]) - (bad if target.dead_letter_table else 0), 0
        kept = int(counts["metrics"]) + (0 if target.dead_letter_table else bad)
        return bad, kept, int(counts["events"])

    def _partition_by(self, path: str) -> tuple[str, ...]:
        return next((t.plan.partition_by for t in self.targets if t.table == path), ())


def _register_left_table(spark: SparkSession, name: str) -> bool:
    """A table of Spark's session catalog that an earlier run created but this run's catalog
    does not know (an in-memory catalog forgets its tables when the job stops): when a Delta
    table is at the catalog's default location for ``name``, register it there; whether it
    was. Names in other catalogs are left to them."""
    from delta.tables import DeltaTable

    parts = name.split(".")
    if len(parts) == 3 and parts[0] != "spark_catalog":
        return False
    jvm = spark._jvm
    assert jvm is not None
    schema, table = parts[-2], parts[-1]
    identifier = jvm.org.apache.spark.sql.catalyst.TableIdentifier(
        table, jvm.scala.Option.apply(schema)
    )
    location = str(spark._jsparkSession.sessionState().catalog().defaultTablePath(identifier))
    if not DeltaTable.isDeltaTable(spark, location):
        return False
    spark.sql(f"CREATE TABLE IF NOT EXISTS {schema}.{table} USING delta LOCATION '{location}'")
    log.info("registered %s at %s, where an earlier run created it", name, location)
    return True
