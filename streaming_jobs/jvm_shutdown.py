"""A graceful stop when Spark's JVM is told to exit: SIGTERM to ``spark-submit`` (whose JVM is
the parent of the job's Python driver), or to the job's whole process group.

The JVM then runs Spark's shutdown hooks, highest priority first: the executor's (100), the
SparkContext's (50), temporary directories (25). A hook registered above them, implemented in
Python through Py4J's callback server, asks the driver to stop after the batch in flight and
waits until it has (summary logged, Spark stopped) before Spark's own hooks run.

Spark runs all its hooks as one Hadoop shutdown hook, which Hadoop cancels after
``hadoop.service.shutdown.timeout`` (30 s by default): the wait stays below that, and a batch
still running then is interrupted and replayed on the next start (the exactly-once guarantee
does not depend on the stop being graceful).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

HOOK_PRIORITY = 1000
"""Above every hook Spark registers itself (the highest is 100), so this one runs first."""

JVM_STOP_BUDGET_SECONDS = 25.0
"""How long the hook lets the driver finish its batch: under Hadoop's 30 s hook timeout."""


class JvmShutdownHook:
    """``scala.Function0[Unit]`` run by Spark's ``ShutdownHookManager`` in the JVM.

    ``finished`` is set by the driver once its summary is out; Spark's own hooks then stop the
    SparkContext (the driver must not: that would close the Py4J connection this call waits on).
    """

    class Java:
        implements = ["scala.Function0"]

    def __init__(self, request_stop: Callable[[], None], finished: threading.Event) -> None:
        self._request_stop = request_stop
        self._finished = finished
        self.returned = threading.Event()
        self._remove: Callable[[], None] = lambda: None

    def apply(self) -> None:
        try:
            if not self._finished.is_set():
                self._request_stop()
                if not self._finished.wait(JVM_STOP_BUDGET_SECONDS + 2.0):
                    log.warning("the driver did not finish before the JVM's shutdown went on")
        finally:
            self.returned.set()

    def remove(self) -> None:
        """Unregister (before a normal exit, so a JVM outliving this process does not call
        back into it)."""
        self._remove()

    def toString(self) -> str:
        return "mqtt-ingest graceful stop"


# Scala calls a ``() => Unit`` through its Unit-specialised method.
setattr(JvmShutdownHook, "apply$mcV$sp", JvmShutdownHook.apply)


def install(
    spark: Any, request_stop: Callable[[], None], finished: threading.Event
) -> JvmShutdownHook:
    """Register a ``JvmShutdownHook`` with the JVM behind ``spark``."""
    from pyspark.java_gateway import ensure_callback_server_started

    context = spark.sparkContext
    ensure_callback_server_started(context._gateway)
    manager = context._jvm.org.apache.spark.util.ShutdownHookManager
    hook = JvmShutdownHook(request_stop, finished)
    reference = manager.addShutdownHook(HOOK_PRIORITY, hook)

    def remove() -> None:
        with contextlib.suppress(Exception):  # the JVM may be shutting down or gone
            manager.removeShutdownHook(reference)

    hook._remove = remove
    return hook
