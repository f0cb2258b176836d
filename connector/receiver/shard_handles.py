"""What the stream reader drives: one handle per shard, in-process or a receiver process.

Both kinds answer the same questions (:class:`ShardStatus`: WAL identity, first and next
offset, commit point, error) and take the same orders (commit, wait until idle, freeze, stop).
Waiting and freezing are split into ``begin_*`` and ``end_*`` so that receiver processes do
them in parallel.
``LocalShard`` wraps the receiver thread of a single-receiver query; ``ShardProcess`` talks to
a :mod:`connector.receiver.shard_worker` process over two pipes.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from connector.options.source import SourceOptions
from connector.receiver.receiver import Receiver
from connector.receiver.shards import drops_retained, shard_options

log = logging.getLogger(__name__)

START_TIMEOUT_MARGIN = 30.0
"""Beyond ``connectTimeout`` and the WAL lock wait, how long a worker may take to start."""
REPLY_TIMEOUT = 60.0
"""How long a request other than ``wait_idle`` may take (a commit deletes WAL segments)."""
STOP_TIMEOUT = 30.0
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class ShardFailed(RuntimeError):
    """A shard's receiver failed or its process ended."""


@dataclass(frozen=True, slots=True)
class ShardStatus:
    """One shard's WAL bounds and receiver state at one moment."""

    identity: str
    first: int
    next: int
    committed: int
    error: str | None = None
    delivery: dict[str, Any] = field(default_factory=dict)
    """The receiver's counters and figures (``Receiver.figures``)."""
    frozen: bool = False
    """The receiver stopped taking messages (``Receiver.freeze``): ``next`` no longer moves."""


class LocalShard:
    """The receiver thread of a query with one receiver (WAL at ``walPath`` itself)."""

    def __init__(self, options: SourceOptions) -> None:
        self.index = 0
        self.wal_path = options.wal_path
        self.receiver = Receiver(options)
        self.receiver.start()
        self.identity = self.receiver.wal.identity

    def status(self) -> ShardStatus:
        wal = self.receiver.wal
        return ShardStatus(
            self.identity,
            wal.first_offset,
            wal.next_offset,
            self.receiver.committed,
            delivery=self.receiver.figures(),
            frozen=self.receiver.frozen,
        )

    def check(self) -> None:
        self.receiver.check()

    def commit(self, offset: int) -> ShardStatus:
        self.receiver.committed_to(offset)
        return self.status()

    def begin_wait_idle(self, idle: float, timeout: float) -> None:
        self.receiver.wait_idle(idle, timeout=timeout)

    def end_wait_idle(self) -> ShardStatus:
        self.check()
        return self.status()

    def begin_freeze(self) -> None:
        self.receiver.freeze()

    def end_freeze(self) -> ShardStatus:
        """The frozen shard's status: its ``next`` is the offset nothing is stored past."""
        return self.status()

    def stop(self) -> None:
        self.receiver.stop()


class ShardProcess:
    """A receiver in its own process (``receivers`` > 1); see :mod:`.shard_worker`."""

    def __init__(self, options: SourceOptions, index: int) -> None:
        self.index = index
        self.options = shard_options(options, index)
        self.wal_path = self.options.wal_path
        self.identity = ""
        self._last: ShardStatus | None = None
        self._wait_timeout = REPLY_TIMEOUT
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "connector.receiver.shard_worker",
                    str(to_child_r),
                    str(from_child_w),
                ],
                pass_fds=(to_child_r, from_child_w),
                stdin=subprocess.DEVNULL,
                env=env,
            )
        except BaseException:
            for fd in (to_child_r, to_child_w, from_child_r, from_child_w):
                os.close(fd)
            raise
        os.close(to_child_r)
        os.close(from_child_w)
        self._out = Connection(to_child_w, readable=False)
        self._in = Connection(from_child_r, writable=False)
        self._out.send(
            {
                "options": self.options,
                "index": index,
                "drop_retained": drops_retained(options, index),
                "log_level": logging.getLogger("connector").getEffectiveLevel(),
            }
        )

    @property
    def name(self) -> str:
        return f"receiver {self.index} ({self.options.client_id}, pid {self.proc.pid})"

    def _reply(self, timeout: float | None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                if self._in.poll(0.5):
                    reply: dict[str, Any] = self._in.recv()
                    return reply
            except (EOFError, OSError):
                pass
            code = self.proc.poll()
            if code is not None:
                raise ShardFailed(f"MQTT {self.name} exited with status {code}")
            if deadline is not None and time.monotonic() >= deadline:
                raise ShardFailed(f"MQTT {self.name} did not answer within {timeout:.0f} s")

    def _status(self, reply: dict[str, Any]) -> ShardStatus:
        if "error" in reply and "identity" not in reply:
            raise ShardFailed(f"the MQTT {self.name} failed to start: {reply['error']}")
        status = ShardStatus(
            reply["identity"],
            reply["first"],
            reply["next"],
            reply["committed"],
            reply["error"],
            reply.get("delivery") or {},
            bool(reply.get("frozen")),
        )
        self._last = status
        return status

    def _request(
        self, request: dict[str, Any], timeout: float | None = REPLY_TIMEOUT
    ) -> ShardStatus:
        try:
            self._out.send(request)
        except OSError as exc:
            raise ShardFailed(f"MQTT {self.name} is gone: {exc}") from None
        return self._status(self._reply(timeout))

    def started(self) -> None:
        """Wait for the worker's hello: its WAL is open and it is connected."""
        timeout = self.options.connect_timeout + START_TIMEOUT_MARGIN + 15.0
        self.identity = self._status(self._reply(timeout)).identity

    def status(self) -> ShardStatus:
        return self._request({"op": "status"})

    def check(self) -> None:
        status = self.status()
        if status.error is not None:
            raise ShardFailed(f"the MQTT {self.name} failed: {status.error}")

    def commit(self, offset: int) -> ShardStatus:
        return self._request({"op": "commit", "offset": offset})

    def begin_wait_idle(self, idle: float, timeout: float) -> None:
        try:
            self._out.send({"op": "wait_idle", "idle": idle, "timeout": timeout})
        except OSError as exc:
            raise ShardFailed(f"MQTT {self.name} is gone: {exc}") from None
        self._wait_timeout = timeout + REPLY_TIMEOUT

    def end_wait_idle(self) -> ShardStatus:
        status = self._status(self._reply(self._wait_timeout))
        if status.error is not None:
            raise ShardFailed(f"the MQTT {self.name} failed: {status.error}")
        return status

    def begin_freeze(self) -> None:
        """Ask the worker to freeze its receiver (``end_freeze`` takes the answer)."""
        try:
            self._out.send({"op": "freeze"})
        except OSError as exc:
            raise ShardFailed(f"MQTT {self.name} is gone: {exc}") from None

    def end_freeze(self) -> ShardStatus:
        """The frozen shard's status: its ``next`` is the offset nothing is stored past.
        The worker bounds the freeze itself (``Receiver.freeze``), by the connection's
        timeouts."""
        status = self._status(self._reply(None))
        if status.error is not None or not status.frozen:
            raise ShardFailed(f"the MQTT {self.name} failed: {status.error or 'not frozen'}")
        return status

    def stop(self) -> None:
        """DISCONNECT and close the WAL in the worker, wait for its exit (kill it when it
        does not exit in time)."""
        try:
            try:
                self._out.send({"op": "stop"})
                self._reply(STOP_TIMEOUT)
            except (OSError, ShardFailed):
                pass
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log.warning("MQTT %s did not stop in %.0f s: killing it", self.name, STOP_TIMEOUT)
            self.proc.kill()
            self.proc.wait()
        finally:
            self._out.close()
            self._in.close()


def start_processes(options: SourceOptions) -> list[ShardProcess]:
    """Start every shard's worker, then wait until each is connected (in parallel); on any
    failure stop the ones that started and raise the first error."""
    shards: list[ShardProcess] = []
    try:
        for index in range(options.receivers):
            shards.append(ShardProcess(options, index))
        for shard in shards:
            shard.started()
    except BaseException:
        for shard in shards:
            try:
                shard.stop()
            except Exception as exc:  # keep the first error
                log.warning("stopping MQTT %s: %s", shard.name, exc)
        raise
    return shards
