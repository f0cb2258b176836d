"""The MQTT writer: ``df.write.format("mqtt")`` (:class:`MqttBatchWriter`) and
``writeStream.format("mqtt")`` (:class:`MqttStreamWriter`).

Each Spark task publishes its partition with its own client (:mod:`.task`) and returns a
:class:`SinkCommit` only after the broker has taken every row; the driver's ``commit`` logs the
totals. Spark's micro-batch engine records a batch as committed only after that, so a query
restarted on its checkpoint does not publish a committed batch again (docs/delivery.md).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from connector.spark.user_errors import one_line
from connector.spark.writer.options import SinkOptions
from connector.spark.writer.rows import OutMessage, batch_messages
from connector.spark.writer.task import TaskIdentity, TaskPublisher

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""The local property in which Spark gives a streaming query's id (the same after a restart on
the same checkpoint) to its tasks and to the thread that runs a ``foreachBatch`` batch."""

BATCH_ID_PROPERTY = "streaming.sql.batchId"
"""The local property in which Spark gives a micro-batch's tasks the batch id."""


@dataclass
class SinkCommit(WriterCommitMessage):
    """What one task published (all of it taken by the broker)."""

    partition: int
    rows: int
    by_qos: tuple[int, int, int]
    connections: int


def task_identity(write_id: str, streaming: bool) -> TaskIdentity:
    """This task's identity; a streaming task takes the query and batch ids Spark gives it."""
    context = TaskContext.get()
    if context is None:  # not in a Spark task (a direct call): one attempt of partition 0
        return TaskIdentity(write_id, 0, 0, 0, 0)
    batch_id = 0
    if streaming:
        write_id = context.getLocalProperty(QUERY_ID_PROPERTY) or write_id
        batch_id = int(context.getLocalProperty(BATCH_ID_PROPERTY) or 0)
    return TaskIdentity(
        write_id,
        batch_id,
        context.partitionId(),
        context.attemptNumber(),
        context.taskAttemptId(),
    )


def _messages(
    batches: Iterator[pa.RecordBatch], options: SinkOptions
) -> Iterator[Iterator[OutMessage]]:
    """The messages of each Arrow batch, rows numbered across the partition."""
    row = 0
    for batch in batches:
        yield batch_messages(batch, options, row)
        row += batch.num_rows


def publish_partition(
    batches: Iterator[pa.RecordBatch], options: SinkOptions, identity: TaskIdentity
) -> SinkCommit:
    """Publish one partition's rows; returns once the broker has taken every one."""
    tally = TaskPublisher(options, identity).run(_messages(batches, options))
    return SinkCommit(identity.partition, tally.rows, tally.by_qos, tally.connections)


def _log_commit(what: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    commits = [m for m in messages if isinstance(m, SinkCommit)]
    rows = sum(c.rows for c in commits)
    by_qos = [sum(c.by_qos[q] for c in commits) for q in range(3)]
    log.info(
        "MQTT writer: %s published %d rows (QoS 0/1/2: %d/%d/%d) from %d tasks",
        what,
        rows,
        *by_qos,
        len(commits),
    )


def _log_abort(what: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    done = sum(m.rows for m in messages if isinstance(m, SinkCommit))
    log.warning(
        "MQTT writer: %s failed; %d rows of its finished tasks are at the broker, and a "
        "failed task may have published part of its rows (at least once, docs/delivery.md)",
        what,
        done,
    )


class MqttBatchWriter(DataSourceArrowWriter):
    """``df.write.format("mqtt")``: one write id per write."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.write_id = uuid.uuid4().hex

    @one_line
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return publish_partition(iterator, self.options, task_identity(self.write_id, False))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(f"write {self.write_id}", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_abort(f"write {self.write_id}", messages)


class MqttStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("mqtt")``: the query id names the write, the batch id each run."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.write_id = uuid.uuid4().hex
        """Used only when Spark gives a task no query id."""

    @one_line
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return publish_partition(iterator, self.options, task_identity(self.write_id, True))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(f"batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_abort(f"batch {batchId}", messages)
