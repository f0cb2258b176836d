"""Idempotent Delta appends: each (app id, batch id) lands in a table at most once.

Every data commit carries Delta's ``SetTransaction(appId, version)`` action, the one Delta's own
streaming sink writes and that ``txnAppId`` / ``txnVersion`` write: the table itself records the
newest batch of each query. The rule, for batch ``n`` of query ``app``:

* ``n <= V``, where ``V`` is the table's ``SetTransaction`` version for ``app``: the batch is
  already in the table (Spark replays the last batch after a crash); nothing is written.
* ``n > V``: the batch is appended together with ``SetTransaction(app, n)``, so ``V`` becomes
  ``n`` in the same atomic commit.

Delta finds ``V`` by computing the snapshot's full state (three Spark jobs on every commit, about
half of a small batch's time). This module looks ``V`` up once per query run and table, and then
keeps it: after its own commit of batch ``n`` (direct or through Delta's writer), ``V`` is ``n``.
Only this query writes ``SetTransaction`` records under its id (the id lives in its checkpoint,
and Spark runs one instance of a query at a time), so the kept value stays exact. It is dropped,
and looked up again, on a new run and after any failure.

The lookup reads ``V`` from the version checksum (``_delta_log/<version>.crc``) when that file
lists the table's ``SetTransaction`` actions: Delta computes the list incrementally at each
commit (for up to 100 app ids), and the Delta protocol defines it as every ``SetTransaction`` of
the table at that version. Without a checksum or without the list, the lookup computes the
snapshot's state as Delta's own ``txnVersion`` does.

The commit itself goes through Delta's transaction API (``DeltaLog.startTransaction``,
``writeFiles``, ``commit``), as Delta's streaming sink does, with one difference (decision 44):
the transaction starts from the table's snapshot as this JVM last saw it
(``unsafeVolatileSnapshot``: every commit made in this JVM, the job's own and compaction's,
updates it) instead of asking Delta to update it first. That update lists the whole
``_delta_log`` directory on local, HDFS and (by default) object storage, so every batch cost
more as the log grew. Two exceptions keep Delta's update: a snapshot whose own commit file is
gone (a table deleted under the job is found gone, as before), and the first commit after each
background checkpoint, since a snapshot made after a commit keeps the log segment it was made
from and the commits it replays would otherwise grow with every batch (one listing in every
``CHECKPOINT_EVERY`` commits). A commit made elsewhere since is caught by Delta's optimistic
concurrency as for any two writers: the commit finds its version taken, checks the winning
commits for conflicts (a blind append with ``SetTransaction`` conflicts only with a change of
metadata or protocol, or another ``SetTransaction`` of its app id) and commits at the next
version. It is taken only when the batch's
columns are the table's columns (names and types) and the partitioning is the table's; a new
table, schema evolution or a different layout go through Delta's writer with ``txnAppId`` /
``txnVersion``. If this Delta build lacks the calls used here, every write goes through Delta's
writer (``direct`` is False), which is correct and slower.

Direct commits leave Delta's periodic checkpoint to a background thread
(:mod:`.delta_checkpoints`) instead of writing it inside the commit; :meth:`DeltaAppender.close`
waits for a checkpoint still being written. That thread also removes the log files older than
the table's ``delta.logRetentionDuration`` when :class:`.LogCleanups` says so, at Delta's minute
granularity. Delta still computes the table's full state inside
every ``delta.checkpointInterval``-th commit (its commit statistics), so a table may be given a
long interval (say 1000) to keep that out of the stream: the appender then checkpoints every
:data:`CHECKPOINT_EVERY` versions in the background all the same.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from .delta_checkpoints import Checkpointer, LogCleanups, first_line

log = logging.getLogger(__name__)

ADAPTIVE_METADATA = "adaptiveMetadata-preview"
"""Delta table feature whose checkpoints are commits of their own: its hook stays in place."""

CHECKPOINT_EVERY = 10
"""Versions between background checkpoints when the table's ``delta.checkpointInterval`` is
longer (Delta's default interval)."""

RUN_PROPERTY = "spark.jobGroup.id"
"""Local property that holds the run id on a streaming batch's thread (Spark sets the run's
job group)."""


@dataclass(frozen=True)
class _Known:
    """``version`` is table ``path``'s ``SetTransaction`` version for ``app`` (-1: none yet;
    None: no table), as this appender last saw or wrote it during ``run``."""

    app: str
    run: str | None
    version: int | None

    def serves(self, app: str, run: str | None) -> bool:
        return (self.app, self.run) == (app, run)


class _DeltaJvm:
    """The JVM classes and values the appender calls, looked up once per JVM: every step of
    ``spark._jvm.org.apache.spark...`` is a Py4J round trip (about 0.5 ms each here). A class
    this Delta build lacks shows up as a Py4JError at its first call, as before."""

    def __init__(self, jvm: Any) -> None:
        self.jvm = jvm
        delta = jvm.org.apache.spark.sql.delta
        self.delta = delta
        self.delta_log = delta.DeltaLog
        self.option = jvm.scala.Option
        self.none = self.option.apply(None)
        self.collections = jvm.scala.jdk.javaapi.CollectionConverters
        self.write = getattr(delta, "DeltaOperations$Write")
        self.append_mode = jvm.org.apache.spark.sql.SaveMode.Append
        self.set_transaction = delta.actions.SetTransaction
        self.file_names = getattr(getattr(delta.util, "FileNames$"), "MODULE$")
        self._checkpoint_hook: Any = None
        self._checkpoint_info: Any = None
        self._minute: Any = None

    @property
    def checkpoint_hook(self) -> Any:
        if self._checkpoint_hook is None:
            hook_class = getattr(self.delta.hooks, "CheckpointHook$")
            self._checkpoint_hook = getattr(hook_class, "MODULE$")
        return self._checkpoint_hook

    @property
    def checkpoint_info(self) -> Any:
        if self._checkpoint_info is None:
            self._checkpoint_info = getattr(getattr(self.delta, "LastCheckpointInfo$"), "MODULE$")
        return self._checkpoint_info

    @property
    def minute(self) -> Any:
        """Delta's ``TruncationGranularity.MINUTE``: the log cleanup's cutoff to the minute."""
        if self._minute is None:
            granularity = getattr(getattr(self.delta, "TruncationGranularity$"), "MODULE$")
            self._minute = granularity.MINUTE()
        return self._minute


def _checksum_version(snapshot: Any, app: str, collections: Any) -> int | None:
    """``app``'s ``SetTransaction`` version (-1: none) as the snapshot's version checksum
    lists it; None when the snapshot has no checksum or the checksum no such list."""
    checksum = snapshot.checksumOpt()
    if not checksum.isDefined():
        return None
    listed = checksum.get().setTransactions()
    if not listed.isDefined():
        return None
    versions = [int(t.version()) for t in collections.asJava(listed.get()) if t.appId() == app]
    return max(versions, default=-1)


def _shape(data_type: DataType) -> Any:
    """A type's names and types, without nullability or field metadata."""
    if isinstance(data_type, StructType):
        return tuple((f.name, _shape(f.dataType)) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return ("array", _shape(data_type.elementType))
    if isinstance(data_type, MapType):
        return ("map", _shape(data_type.keyType), _shape(data_type.valueType))
    return data_type.simpleString()


class DeltaAppender:
    """Appends micro-batches to Delta tables by path, once per (app id, batch id)."""

    def __init__(self) -> None:
        self.direct = True
        """False once this Delta build turned out to lack the transaction calls used here."""
        self.direct_commits = 0
        self.writer_commits = 0
        self.lookups = 0
        self.checksum_lookups = 0
        """Lookups answered by the version checksum (no state computed)."""
        self.background_checkpoints = True
        """Whether direct commits leave Delta's checkpoints to :attr:`checkpoints`."""
        self.checkpoints = Checkpointer()
        self.log_cleanups = LogCleanups()
        self.split_checkpoints = True
        """False once this Delta build lacked the calls that write a checkpoint without
        Delta's log cleanup (then ``DeltaLog.checkpoint`` writes it and cleans as Delta does)."""
        self._checkpointed: dict[str, int] = {}
        """Per table, the newest version handed to :attr:`checkpoints`."""
        self._checkpoints_written: dict[str, int] = {}
        """Per table, the newest version :attr:`checkpoints` wrote."""
        self.refreshes = 0
        """Snapshots read anew after a background checkpoint (a listing of the log each)."""
        self._log_fs: dict[str, Any] = {}
        """Per table, the Hadoop file system of its log (looked up at its first commit)."""
        self._known: dict[str, _Known] = {}
        self._classes: _DeltaJvm | None = None

    def _jvm(self, spark: SparkSession) -> _DeltaJvm:
        jvm = spark._jvm
        assert jvm is not None
        if self._classes is None or self._classes.jvm is not jvm:
            self._classes = _DeltaJvm(jvm)
            self._log_fs.clear()  # the file systems were the old JVM's objects
        return self._classes

    def written(self, spark: SparkSession, path: str, app: str, batch: int) -> bool | None:
        """Whether ``batch`` of ``app`` is already in the table at ``path``; None when this
        Delta build cannot tell without writing (then :meth:`append` lets Delta decide)."""
        if not self.direct:
            return None
        run = spark.sparkContext.getLocalProperty(RUN_PROPERTY)
        known = self._known.get(path)
        if known is None or not known.serves(app, run):
            try:
                version = self._lookup(spark, path, app)
            except Py4JJavaError:
                raise
            except Py4JError as exc:
                self._give_up(exc)
                return None
            known = self._known[path] = _Known(app, run, version)
        return known.version is not None and batch <= known.version

    def append(
        self,
        rows: DataFrame,
        path: str,
        app: str,
        batch: int,
        *,
        partition_by: tuple[str, ...] = (),
        merge_schema: bool = False,
    ) -> None:
        """Append ``rows`` as ``batch`` of ``app`` (call when :meth:`written` was not True)."""
        known = self._known.pop(path, None)
        run = rows.sparkSession.sparkContext.getLocalProperty(RUN_PROPERTY)
        if known is not None and not known.serves(app, run):
            known = None
        if (
            self.direct
            and known is not None
            and known.version is not None
            and batch > known.version
        ):
            try:
                committed = self._commit(rows, path, app, batch, partition_by)
            except Py4JJavaError:
                raise
            except Py4JError as exc:
                self._give_up(exc)
                committed = False
            if committed:
                self._known[path] = _Known(app, run, batch)
                self.direct_commits += 1
                return
        self._write(rows, path, app, batch, partition_by, merge_schema)
        self.writer_commits += 1
        if self.direct and known is not None and (known.version is None or batch > known.version):
            # Delta's writer either created the table with SetTransaction(app, batch) or raised
            # V from below batch to batch: either way V is batch now
            self._known[path] = _Known(app, run, batch)

    def close(self, timeout: float | None = None) -> bool:
        """Wait for checkpoints still being written; False if ``timeout`` ran out first."""
        return self.checkpoints.wait(timeout)

    def forget(self) -> None:
        """Drop every kept version (after a failure: the next write looks it up again)."""
        self._known.clear()

    def _give_up(self, exc: Exception) -> None:
        self.direct = False
        self._known.clear()
        log.warning(
            "Delta's transaction API is not as expected (%s); every batch now goes through "
            "Delta's writer with txnAppId/txnVersion, which looks the version up on each commit",
            first_line(exc),
        )

    def _lookup(self, spark: SparkSession, path: str, app: str) -> int | None:
        """The table's ``SetTransaction`` version for ``app``: -1 when it has none, None when
        there is no table. From the version checksum when it lists the table's
        ``SetTransaction`` actions, else from the snapshot's state (Delta's own lookup)."""
        classes = self._jvm(spark)
        none = classes.none
        delta_log = classes.delta_log.forTable(spark._jsparkSession, path)
        snapshot = delta_log.update(False, none, none)
        self.lookups += 1
        if snapshot.version() < 0:
            return None
        listed = _checksum_version(snapshot, app, classes.collections)
        if listed is not None:
            self.checksum_lookups += 1
            return listed
        found = snapshot.transactions().get(app)
        return int(found.get()) if found.isDefined() else -1

    def _commit(
        self, rows: DataFrame, path: str, app: str, batch: int, partition_by: tuple[str, ...]
    ) -> bool:
        """Write ``rows`` and commit them with ``SetTransaction(app, batch)`` in one Delta
        transaction; False (nothing written) when the table's columns or partitioning differ
        from the batch's."""
        spark = rows.sparkSession
        classes = self._jvm(spark)
        delta_log = classes.delta_log.forTable(spark._jsparkSession, path)
        snapshot = self._start_snapshot(delta_log, path, classes)
        if snapshot is not None:
            txn = delta_log.startTransaction(classes.none, classes.option.apply(snapshot))
        else:
            txn = delta_log.startTransaction()
        if txn.snapshot().version() < 0:
            return False
        metadata = txn.metadata()
        partitions = metadata.partitionColumns()
        if tuple(classes.collections.asJava(partitions)) != partition_by:
            return False
        table_schema = StructType.fromJson(json.loads(metadata.schema().json()))
        if _shape(table_schema) != _shape(rows.schema):
            log.debug("batch %d: columns differ from %s's; Delta's writer takes it", batch, path)
            return False
        option = classes.option
        operation = classes.write(
            classes.append_mode, option.apply(partitions), *([classes.none] * 7)
        )
        # epoch milliseconds exceed 2**31, so Py4J passes a java.lang.Long, as Option[Long] needs
        set_txn = classes.set_transaction(app, batch, option.apply(int(time.time() * 1000)))
        files = txn.writeFiles(rows._jdf)
        deferred = self._defer_checkpoint(txn, classes)
        txn.commit(files.prepended(set_txn), operation)
        if deferred:
            self._checkpoint_later(txn, path, classes)
        return True

    def _start_snapshot(self, delta_log: Any, path: str, classes: _DeltaJvm) -> Any | None:
        """The snapshot a direct commit starts from (module docstring): the JVM's own; read
        anew once after each background checkpoint of the table, so that its log segment (the
        commits a reader of the snapshot replays) starts at that checkpoint instead of growing
        with every commit; None (Delta updates it) when the table has no version here or the
        snapshot's commit file is gone."""
        snapshot = delta_log.unsafeVolatileSnapshot()
        if snapshot.version() < 0:
            return None
        written = self._checkpoints_written.get(path, -1)
        if written > int(snapshot.logSegment().checkpointProvider().version()):
            self.refreshes += 1
            return delta_log.update(False, classes.none, classes.none)
        return snapshot if self._commit_file_exists(delta_log, snapshot, path, classes) else None

    def _commit_file_exists(
        self, delta_log: Any, snapshot: Any, path: str, classes: _DeltaJvm
    ) -> bool:
        """Whether the commit file of ``snapshot``'s version is in the table's log: one look
        at one file, where an update of the snapshot lists the whole log."""
        log_path = delta_log.logPath()
        fs = self._log_fs.get(path)
        if fs is None:
            fs = self._log_fs[path] = log_path.getFileSystem(delta_log.newDeltaHadoopConf())
        return bool(fs.exists(classes.file_names.unsafeDeltaFile(log_path, snapshot.version())))

    def _defer_checkpoint(self, txn: Any, classes: _DeltaJvm) -> bool:
        """Take Delta's checkpoint hook out of ``txn`` (:mod:`.delta_checkpoints`); False when
        the hook stays (this Delta build differs, or the table checkpoints by commits)."""
        if not self.background_checkpoints:
            return False
        try:
            if txn.snapshot().protocol().writerFeatureNames().contains(ADAPTIVE_METADATA):
                return False
            hook = classes.checkpoint_hook
            hooks = txn.postCommitHooks()
            hooks.subtractOne(hook)
            return not hooks.contains(hook)
        except Exception as exc:  # the hook stays: Delta checkpoints inside the commit
            self._inline_checkpoints(exc)
            return False

    def _checkpoint_later(self, txn: Any, path: str, classes: _DeltaJvm) -> None:
        """Hand the committed snapshot to the checkpointer when Delta's rule (every
        ``delta.checkpointInterval``-th version) asks for a checkpoint, or, on a table whose
        interval is longer than :data:`CHECKPOINT_EVERY`, when that many versions have passed
        since the newest checkpoint (in the log, or handed over by this appender)."""
        try:
            delta_log = txn.deltaLog()
            due = bool(txn.maintenanceOperation().shouldCheckpoint())
            # a direct commit keeps the table's metadata: the transaction's is the table's
            if not due and int(delta_log.checkpointInterval(txn.metadata())) <= CHECKPOINT_EVERY:
                return
            snapshot = txn.committed().get().postCommitSnapshot()
            version = int(snapshot.version())
            if not due:
                in_log = int(snapshot.logSegment().checkpointProvider().version())
                newest = max(in_log, self._checkpointed.get(path, -1), 0)
                if version - newest < CHECKPOINT_EVERY:
                    return
        except Exception as exc:  # the batch is committed; only this checkpoint is skipped
            self._inline_checkpoints(exc)
            return
        self._checkpointed[path] = version
        self.checkpoints.request(
            path, version, lambda: self._checkpoint(delta_log, snapshot, path, classes)
        )

    def _checkpoint(self, delta_log: Any, snapshot: Any, path: str, classes: _DeltaJvm) -> None:
        """Write ``snapshot``'s checkpoint as ``DeltaLog.checkpoint`` does (its files, then
        ``_last_checkpoint``), then remove the expired log files when they are due
        (:mod:`.delta_checkpoints`) and the table allows it (``delta.enableExpiredLogCleanup``)."""
        none = classes.none
        if self.split_checkpoints:
            try:
                info = delta_log.writeCheckpointFiles(snapshot, none)
                checksum = classes.checkpoint_info.checksumEnabled(delta_log.spark())
                delta_log.writeLastCheckpointFile(delta_log, info, checksum)
                self._written(path, snapshot)
                metadata = snapshot.metadata()
                if not delta_log.enableExpiredLogCleanup(metadata):
                    return
                retention = int(delta_log.deltaRetentionMillis(metadata)) / 1000
                if self.log_cleanups.due(path, retention):
                    began = time.monotonic()
                    delta_log.cleanUpExpiredLogs(snapshot, none, none, classes.minute)
                    log.debug("expired log files of %s removed in %.2f s", path,
                              time.monotonic() - began)  # fmt: skip
                return
            except Py4JJavaError:
                raise
            except Py4JError as exc:
                self.split_checkpoints = False
                log.warning(
                    "Delta's checkpoint calls are not as expected (%s); checkpoints now clean "
                    "the log as Delta does, listing all of it each time",
                    first_line(exc),
                )
        delta_log.checkpoint(snapshot, none)
        self._written(path, snapshot)

    def _written(self, path: str, snapshot: Any) -> None:
        version = int(snapshot.version())
        self._checkpoints_written[path] = max(version, self._checkpoints_written.get(path, -1))

    def _inline_checkpoints(self, exc: Exception) -> None:
        """Leave Delta's checkpoints inside the commits from now on (a checkpoint only speeds
        up reading the log, so no failure here may fail a batch)."""
        self.background_checkpoints = False
        log.warning(
            "Delta's commit hooks are not as expected (%s); Delta writes its checkpoints "
            "inside the commits again",
            first_line(exc),
        )

    def _write(
        self,
        rows: DataFrame,
        path: str,
        app: str,
        batch: int,
        partition_by: tuple[str, ...],
        merge_schema: bool,
    ) -> None:
        """Delta's writer: it looks the version up itself and skips a batch it already has."""
        writer = (
            rows.write.format("delta")
            .mode("append")
            .option("txnAppId", app)
            .option("txnVersion", str(batch))
        )
        if merge_schema:
            writer = writer.option("mergeSchema", "true")
        if partition_by:
            writer = writer.partitionBy(*partition_by)
        writer.save(path)
