"""A batch write cut short by ``query.stop()``, reported to Spark in a form it recognises.

``stop()`` interrupts the stream execution thread and cancels the query's job group. A
``foreachBatch`` function waiting on the JVM at that moment (a Delta commit, a Spark job) gets a
``Py4JJavaError`` whose text holds the whole Java stack trace, and py4j hands that text back to
the JVM. Spark decides whether the query was merely stopped by matching it against
``StreamExecution.PROXY_ERROR``: ``An error occurred while calling((.|\\r\\n|\\r|\\n)*)(<an
interruption>)``. Java matches that repeated alternation recursively, one level per character,
so a trace of a few thousand characters overflows the thread's stack: the stream thread dies
with ``StackOverflowError``, the JVM prints a thousand-line stack, and the query ends without
its "Stopped" status. :class:`BatchInterrupted` carries a short text instead, which the pattern
matches at once. The batch is replayed when the query restarts, as after any stop mid-batch.
"""

from __future__ import annotations

import logging

from py4j.protocol import Py4JError, Py4JJavaError
from pyspark import SparkContext

log = logging.getLogger(__name__)

INTERRUPTIONS = frozenset(
    {
        "java.lang.InterruptedException",
        "java.io.InterruptedIOException",
        "java.nio.channels.ClosedByInterruptException",
    }
)
"""The exception classes Spark's stop check accepts as "interrupted by stop"."""

JOB_GROUP_PROPERTY = "spark.jobGroup.id"
"""Local property naming the job group of the batch's thread: the query's run id, the group
``stop()`` cancels."""

MAX_CAUSES = 32
"""How far down a Java cause chain to look."""


class BatchInterrupted(RuntimeError):
    """The query stopped while this batch was being written; it is replayed on restart."""


def stop_interruption(error: BaseException, context: SparkContext) -> BatchInterrupted | None:
    """The short error to raise in place of ``error`` when the query's stop caused it: a
    ``Py4JJavaError`` with an interruption in its Java cause chain, or with a Spark job of the
    batch's job group (``context``'s local property) cancelled. None for any other error, or
    when the JVM cannot be asked (raise the original)."""
    if not isinstance(error, Py4JJavaError):
        return None
    call = str(error.errmsg).strip()
    try:
        job_group = context.getLocalProperty(JOB_GROUP_PROPERTY)
        cause = error.java_exception
        for _ in range(MAX_CAUSES):
            if cause is None:
                break
            name = cause.getClass().getName()
            message = str(cause.getMessage() or "")
            if name in INTERRUPTIONS:
                detail = f"{name}: the query stopped during the batch"
            elif job_group and "cancelled" in message and job_group in message:
                # Spark's other stop test: a SparkException naming the cancelled job group.
                detail = f"org.apache.spark.SparkException: {message.splitlines()[0][:500]}"
            else:
                cause = cause.getCause()
                continue
            return BatchInterrupted(f"py4j.protocol.Py4JJavaError: {call}\n: {detail}")
    except Py4JError as exc:  # the JVM is going away: keep the original error
        log.debug("could not inspect the batch's Java error: %s", exc)
    return None
