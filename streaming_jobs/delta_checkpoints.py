"""Delta checkpoints written beside the stream instead of inside its commits.

Delta writes a checkpoint (the table's whole state as Parquet, so readers need not replay every
JSON commit) inside the commit of every ``delta.checkpointInterval``-th version: Delta's
post-commit checkpoint hook runs Spark jobs for one to several seconds before the commit call
returns, and the micro-batch, with every message waiting behind it, waits too. The appender
removes that hook from its own commits and hands the committed snapshot to a
:class:`Checkpointer`, which writes the same checkpoint with the same call the hook makes
(``DeltaLog.checkpoint(snapshot)``) on its own thread while the next batches run.

The checkpoint is written as Delta's ``checkpoint`` call writes it (the checkpoint files, then
``_last_checkpoint``), but Delta's removal of expired log files, which that call runs after
every checkpoint, is left to :class:`LogCleanups` (decision 45): it lists the whole
``_delta_log`` directory, so at every 10th version of a stream it cost as much as the log
was long.

Rules:

* One thread per checkpointer; it runs only while there is work.
* At most one pending snapshot per table: a newer one replaces an older one still waiting (a
  checkpoint at the newer version covers everything the older one would).
* A checkpoint only speeds up reading the log. The commits are complete without it, so a failed
  checkpoint is logged and the next interval writes another; Delta itself handles a checkpoint
  cut short by a crash (it writes the files first, then ``_last_checkpoint``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Checkpointer:
    """Runs checkpoint writes on one background thread, the newest one per table."""

    def __init__(self) -> None:
        self.written = 0
        """Checkpoints written so far."""
        self.failed = 0
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, Callable[[], object]]] = {}
        self._worker: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()

    def request(self, path: str, version: int, write: Callable[[], object]) -> None:
        """Have ``write`` (the checkpoint of table ``path`` at ``version``) run soon, unless a
        newer request for ``path`` replaces it first; returns at once."""
        with self._lock:
            self._pending[path] = (version, write)
            self._idle.clear()
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run, name="delta-checkpoints", daemon=True
                )
                self._worker.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no checkpoint is pending or running; False if ``timeout`` ran out."""
        return self._idle.wait(timeout)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._worker = None
                    self._idle.set()
                    return
                path, (version, write) = self._pending.popitem()
            self._write(path, version, write)

    def _write(self, path: str, version: int, write: Callable[[], object]) -> None:
        try:
            write()
        except Exception as exc:  # Spark stopped, the table moved: the next interval retries
            self.failed += 1
            log.warning(
                "Delta checkpoint of %s at version %d failed: %s", path, version, first_line(exc)
            )
            return
        self.written += 1
        log.debug("Delta checkpoint of %s at version %d written", path, version)


LOG_CLEANUP_EVERY = 600.0
"""Most seconds between two removals of a table's expired log files (decision 45)."""


class LogCleanups:
    """When each table's expired log files are next removed: at most every
    :data:`LOG_CLEANUP_EVERY` seconds and every quarter of the table's log retention. Each
    removal lists the log, about the retention's worth of commits, so the listing's cost per
    hour stays about the same whatever the retention. Delta deletes up to a checkpoint at the
    boundary of what expired only, so one removal may delete nothing and a later one catches up."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}

    def due(self, path: str, retention_seconds: float) -> bool:
        """Whether ``path``'s log is due for a removal now; True once per interval (and the
        first time a table is asked about), counting from that answer."""
        now = self._clock()
        every = min(LOG_CLEANUP_EVERY, retention_seconds / 4)
        last = self._last.get(path)
        if last is not None and now - last < every:
            return False
        self._last[path] = now
        return True


def first_line(exc: BaseException) -> str:
    """An exception's first line (a Java error carries its stack trace below), or its type."""
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__
