"""Compaction of the job's tables while the stream runs, on one background thread.

The batch writer calls :meth:`TableMaintenance.committed` after each batch. Every so many
commits of a table (:attr:`TableMaintenance.check_every`) the thread reads the sizes of the
table's files below half the target size from its snapshot and asks the policy
(:mod:`.compaction_policy`) whether a compaction is due; if so it runs Delta's own ``OPTIMIZE``
(``DeltaTable.optimize().executeCompaction()``) with ``minFileSize`` the due class's bound and
``maxFileSize`` the target, in a Spark session of its own so that those settings never reach the
stream's. Rules:

* ``OPTIMIZE`` commits with ``dataChange=false``: a downstream ``readStream`` of the table skips
  it, and the rows are the same rows. It removes only files it read; the stream only adds files
  (blind appends with ``SetTransaction``), so neither conflicts with the other. A compaction that
  loses a race all the same (another writer removed a file it read) is logged and tried again
  at the next check; no failure of maintenance fails the query.
* A compaction cut short by a crash leaves only files that no commit names; ``VACUUM`` removes
  them after the retention period.
* :meth:`TableMaintenance.close` lets a running compaction finish (up to its timeout) and starts
  no other.
* On a table with liquid clustering ``OPTIMIZE`` reclusters every Z-cube (the files one
  clustering wrote together) smaller than ``minCubeSize.threshold`` (100 GiB by Delta's default:
  the whole table, each time) with the files no clustering has touched. Here the policy's units
  are those cubes (each unclustered file a unit of its own) and the threshold is the due class's
  bound, so a cube climbs the classes as a file does and stays once it is half the target.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from .compaction_policy import RETENTION_CHECK_KEY, CompactionPolicy
from .delta_checkpoints import first_line

log = logging.getLogger(__name__)

MIN_FILE_SIZE_KEY = "spark.databricks.delta.optimize.minFileSize"
MAX_FILE_SIZE_KEY = "spark.databricks.delta.optimize.maxFileSize"
MIN_CUBE_SIZE_KEY = "spark.databricks.delta.optimize.clustering.mergeStrategy.minCubeSize.threshold"
"""Z-cubes of this size or more are left alone by an incremental ``OPTIMIZE`` of a clustered
table."""
ZCUBE_TAG = "ZCUBE_ID"
"""The tag naming a file's Z-cube in its ``AddFile`` action."""
POOL_PROPERTY = "spark.scheduler.pool"
POOL = "table-maintenance"
"""The scheduler pool of maintenance's Spark jobs."""
LISTING_PARALLELISM_KEY = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
"""``VACUUM`` lists the table's directories in this many Spark tasks; Spark's default (10,000)
costs half a minute on a small machine for a table of one directory. Unless the user set it,
the maintenance session uses the cluster's default parallelism."""


@dataclass
class MaintenanceStats:
    """What maintenance did so far, for the job's summary and metrics."""

    compactions: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_written: int = 0
    """Bytes of the files compactions wrote (their write amplification's numerator)."""
    failures: int = 0
    seconds: float = 0.0
    vacuums: int = 0
    by_table: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class TableMaintenance:
    """Compacts the tables it is told of (module docstring)."""

    def __init__(
        self,
        spark: SparkSession,
        tables: Iterable[str],
        policy: CompactionPolicy,
        *,
        check_every: int | None = None,
        vacuum_every: float | None = None,
        vacuum_retention_hours: float | None = None,
        retention_check: bool = True,
    ) -> None:
        self.policy = policy
        self.vacuum_every = vacuum_every
        """Seconds between two ``VACUUM`` runs of every table (None: never)."""
        self.vacuum_retention_hours = vacuum_retention_hours
        """None: each table's own ``delta.deletedFileRetentionDuration`` (7 days by default)."""
        self.tables = tuple(tables)
        self.check_every = check_every or max(1, policy.bottom_files // 2)
        """Commits of a table between two looks at its files."""
        self.stats = MaintenanceStats()
        self._spark = spark
        """The session the queries run in (their listeners are its)."""
        self._session = spark.newSession()
        for key, value in spark.conf.getAll.items():  # the user's runtime settings too
            if self._session.conf.isModifiable(key):
                self._session.conf.set(key, value)
        self._session.conf.set(MAX_FILE_SIZE_KEY, str(policy.target_bytes))
        if spark.conf.get(LISTING_PARALLELISM_KEY, None) is None:
            parallelism = spark.sparkContext.defaultParallelism
            self._session.conf.set(LISTING_PARALLELISM_KEY, str(parallelism))
        self._session.conf.set(RETENTION_CHECK_KEY, str(retention_check).lower())
        self._next_vacuum = None if vacuum_every is None else time.monotonic() + vacuum_every
        self._lock = threading.Condition()
        self._commits: dict[str, int] = {path: 0 for path in self.tables}
        self._due: set[str] = set(self.tables)  # look once at the start
        self._closing = False
        self._listeners: list[tuple[SparkSession, StreamingQueryListener]] = []
        self._thread = threading.Thread(target=self._run, name="table-maintenance", daemon=True)
        self._thread.start()

    def summary(self) -> str:
        """One line for the job's end: what compaction did."""
        stats = self.stats
        return (
            f"compaction: {stats.compactions} runs replaced {stats.files_removed} files with "
            f"{stats.files_added} ({_size_text(stats.bytes_written)} written) in "
            f"{stats.seconds:.1f} s" + (f"; {stats.failures} failed" if stats.failures else "")
        )

    def committed(self, path: str) -> None:
        """A batch was committed to ``path``; returns at once."""
        with self._lock:
            if path not in self._commits:
                return
            self._commits[path] += 1
            if self._commits[path] >= self.check_every:
                self._commits[path] = 0
                self._due.add(path)
                self._lock.notify()

    def follow(self, query: StreamingQuery) -> None:
        """Be told of each batch of ``query`` (a ``writeStream`` into these tables, the
        DataFrame API's way, started in the session given to this object) by its progress:
        every progress with input rows counts as a commit of each table."""
        listener = _BatchListener(self, query.id)
        self._spark.streams.addListener(listener)
        self._listeners.append((self._spark, listener))

    def close(self, timeout: float | None = None) -> bool:
        """Start no further compaction and wait for a running one; False if ``timeout`` ran
        out first (a compaction cut short changes no table)."""
        for session, listener in self._listeners:
            session.streams.removeListener(listener)
        self._listeners.clear()
        with self._lock:
            self._closing = True
            self._lock.notify()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        # Spark jobs of this thread go to their own pool: with FAIR scheduling the stream's
        # batches take turns with a compaction's tasks (spark_session.SCHEDULER_MODE).
        self._session.sparkContext.setLocalProperty(POOL_PROPERTY, POOL)
        while True:
            with self._lock:
                while not self._due and not self._closing and not self._vacuum_due():
                    self._lock.wait(self._vacuum_wait())
                if self._closing:
                    return
                path = self._due.pop() if self._due else None
            if path is not None:
                self._maintain(path)
            if self._vacuum_due():
                self._vacuum_all()

    def _vacuum_due(self) -> bool:
        return self._next_vacuum is not None and time.monotonic() >= self._next_vacuum

    def _vacuum_wait(self) -> float | None:
        return None if self._next_vacuum is None else max(0.0, self._next_vacuum - time.monotonic())

    def _vacuum_all(self) -> None:
        assert self.vacuum_every is not None
        self._next_vacuum = time.monotonic() + self.vacuum_every
        for path in self.tables:
            if self._closing:
                return
            try:
                self.vacuum(path)
            except Exception as exc:  # as for compaction: tried again at the next interval
                self.stats.failures += 1
                log.warning("VACUUM of %s failed, tried again later: %s", path, first_line(exc))

    def vacuum(self, path: str) -> None:
        """``VACUUM`` of the table: the files no version within the retention names (those
        compaction replaced, those of writes cut short) are deleted."""
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(self._session, path):
            return  # not created yet (a DataFrame query's first batch creates it)
        began = time.monotonic()
        DeltaTable.forPath(self._session, path).vacuum(self.vacuum_retention_hours)
        self.stats.vacuums += 1
        log.info("vacuumed %s in %.1f s", path, time.monotonic() - began)

    def _maintain(self, path: str) -> None:
        try:
            while not self._closing:
                small = self.small_files(path)
                min_size = self.policy.due(small)
                log.debug(
                    "%s: %d files below half the target; compaction due: %s",
                    path,
                    sum(len(sizes) for sizes in small.values()),
                    "no" if min_size is None else f"files below {_size_text(min_size)}",
                )
                if min_size is None or not self.compact(path, min_size):
                    return
        except Exception as exc:  # Spark stopping, a conflict, a store error: try next time
            self.stats.failures += 1
            log.warning("compaction of %s failed, tried again later: %s", path, first_line(exc))

    def small_files(self, path: str) -> dict[str, list[int]]:
        """The sizes of the table's units below half the target size, by partition: files, or
        on a clustered table Z-cubes (module docstring)."""
        files, clustered = _snapshot_files(self._session, path)
        partition = F.to_json("partitionValues").alias("partition")
        if clustered:  # a file of a cube counts as the cube; one no clustering wrote, alone
            unit = F.coalesce(F.col("tags").getItem(ZCUBE_TAG), F.col("path")).alias("unit")
            files = files.groupBy(partition, unit).agg(F.sum("size").alias("size"))
        else:
            files = files.select(partition, "size")
        rows = files.where(F.col("size") < self.policy.bounds[0]).collect()
        found: dict[str, list[int]] = defaultdict(list)
        for row in rows:
            found[row["partition"] or ""].append(int(row["size"]))
        return found

    def compact(self, path: str, min_file_size: int) -> bool:
        """``OPTIMIZE`` of the files (on a clustered table, the Z-cubes) below
        ``min_file_size``; False when it changed nothing."""
        from delta.tables import DeltaTable

        began = time.monotonic()
        log.info("compacting %s: the files below %s", path, _size_text(min_file_size))
        self._session.conf.set(MIN_FILE_SIZE_KEY, str(min_file_size))
        self._session.conf.set(MIN_CUBE_SIZE_KEY, str(min_file_size))
        result = DeltaTable.forPath(self._session, path).optimize().executeCompaction()
        metrics = _metrics(result)
        elapsed = time.monotonic() - began
        removed = int(metrics.get("numFilesRemoved", 0))
        added = int(metrics.get("numFilesAdded", 0))
        written = int((metrics.get("filesAdded") or {}).get("totalSize", 0))
        if not removed:
            return False
        stats = self.stats
        stats.compactions += 1
        stats.files_removed += removed
        stats.files_added += added
        stats.bytes_written += written
        stats.seconds += elapsed
        stats.by_table[path] += 1
        log.info(
            "compacted %s: %d files into %d (%s) in %.1f s",
            path,
            removed,
            added,
            _size_text(written),
            elapsed,
        )
        return True


class _BatchListener(StreamingQueryListener):
    """Tells a :class:`TableMaintenance` of each batch with rows of one query."""

    def __init__(self, maintenance: TableMaintenance, query_id: str) -> None:
        self.maintenance = maintenance
        self.query_id = query_id

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        if str(progress.id) == str(self.query_id) and progress.numInputRows > 0:
            for path in self.maintenance.tables:
                self.maintenance.committed(path)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def _snapshot_files(session: SparkSession, path: str) -> tuple[DataFrame, bool]:
    """The table's live files (Delta's ``AddFile`` actions) at the newest version this JVM saw,
    and whether the table has liquid clustering. The JVM's snapshot, not a fresh listing of the
    log (decision 44): the job's commits and compaction's update it, a change made elsewhere
    only delays a compaction until the next commit here, and ``OPTIMIZE`` reads the table anew."""
    jvm = session._jvm
    assert jvm is not None
    delta = jvm.org.apache.spark.sql.delta
    snapshot = delta.DeltaLog.forTable(session._jsparkSession, path).unsafeVolatileSnapshot()
    clustered = delta.skipping.clustering.ClusteredTableUtils.isSupported(snapshot.protocol())
    return DataFrame(snapshot.allFiles().toDF(), session), bool(clustered)


def _metrics(result: DataFrame) -> dict[str, Any]:
    """The metrics row of ``executeCompaction``'s result, as plain values."""
    row = result.select(F.to_json("metrics").alias("m")).first()
    return {} if row is None else dict(json.loads(row["m"]))


def _size_text(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"
