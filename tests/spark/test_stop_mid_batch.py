"""``query.stop()`` while the job's ``foreachBatch`` writer waits on the JVM.

Rule under test (streaming_jobs.stop_interruption): the writer reports the interruption with a
short error, so Spark's stop check recognises it and the query ends as stopped: no failure, the
status "Stopped". Raw, the interrupted call's Java trace overflows that check's regex and kills
the stream thread with a StackOverflowError before it records the stop.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession

from streaming_jobs.batch_writer import BatchWriter
from streaming_jobs.payloads import make_plan
from streaming_jobs.progress import RunStats
from streaming_jobs.stop_interruption import BatchInterrupted, stop_interruption


class BlockingWriter(BatchWriter):
    """The job's writer whose write waits in the JVM (as a Delta commit does) until stopped."""

    def __init__(self, table: Path) -> None:
        super().__init__(make_plan("binary", None), str(table), None, RunStats())
        self.entered = threading.Event()
        self.raised: list[BaseException] = []

    def _write_single(self, batch: DataFrame, app_id: str, batch_id: int) -> tuple:
        self.entered.set()
        batch.sparkSession._jvm.java.lang.Thread.sleep(120_000)  # type: ignore[union-attr]
        raise AssertionError("the stop did not interrupt the write")

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        try:
            super().__call__(batch, batch_id)
        except BaseException as exc:
            self.raised.append(exc)
            raise


def test_a_stop_during_the_write_ends_the_query_as_stopped(
    spark: SparkSession, tmp_path: Path
) -> None:
    writer = BlockingWriter(tmp_path / "table")
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 10)
        .load()
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        # An interrupt that comes before the JVM's Thread.sleep starts makes it throw at once.
        assert writer.entered.wait(60), "no batch reached the writer"
    finally:
        query.stop()
    assert len(writer.raised) == 1
    raised = writer.raised[0]
    assert isinstance(raised, BatchInterrupted)
    assert raised.__suppress_context__  # the long Java trace does not travel with it
    assert "java.lang.InterruptedException" in str(raised) and len(str(raised)) < 300
    assert query.exception() is None
    assert query.status["message"] == "Stopped"


def _failed_join(spark: SparkSession, cause: object) -> Py4JJavaError:
    """The Py4JJavaError of a JVM call that threw ``cause`` wrapped in a CompletionException."""
    jvm = spark._jvm
    assert jvm is not None
    with pytest.raises(Py4JJavaError) as caught:
        jvm.java.util.concurrent.CompletableFuture.failedFuture(cause).join()
    return caught.value


def test_other_errors_are_left_alone(spark: SparkSession) -> None:
    jvm = spark._jvm
    assert jvm is not None
    failed = _failed_join(spark, jvm.java.lang.IllegalStateException("the disk is full"))
    assert stop_interruption(failed, spark.sparkContext) is None
    assert stop_interruption(ValueError("x"), spark.sparkContext) is None


def test_a_cancelled_job_of_the_batch_s_group_counts_as_the_stop(spark: SparkSession) -> None:
    context = spark.sparkContext
    jvm = spark._jvm
    assert jvm is not None
    group = "a-query-run-id"
    cancelled = jvm.org.apache.spark.SparkException(
        f"Job 7 cancelled part of cancelled job group {group}"
    )
    failed = _failed_join(spark, cancelled)
    context.setLocalProperty("spark.jobGroup.id", group)
    try:
        translated = stop_interruption(failed, context)
        context.setLocalProperty("spark.jobGroup.id", "another-query")
        other = stop_interruption(failed, context)
    finally:
        # pyspark types setLocalProperty's value str; None removes the property
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    assert isinstance(translated, BatchInterrupted)
    assert f"cancelled part of cancelled job group {group}" in str(translated)
    assert "org.apache.spark.SparkException" in str(translated)
    assert other is None
