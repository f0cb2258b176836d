"""The process of one shard's receiver: ``python -m connector.receiver.shard_worker <in> <out>``.

The stream reader starts it with two pipe descriptors (``multiprocessing.connection`` framing,
pickled dicts). The first message carries the shard's options (the password travels only
through the pipe, never on the command line or in the environment). The worker opens the
shard's WAL, connects, answers ``hello`` with its status or ``error``, then serves requests
one at a time, each answered with a status:

* ``{"op": "status"}``;
* ``{"op": "commit", "offset": n}``: Spark committed everything below n (frees the WAL,
  lifts backpressure);
* ``{"op": "wait_idle", "idle": s, "timeout": s}``: returns once nothing arrived for ``idle``
  seconds, the backlog bound pauses the receiver, or ``timeout`` passed;
* ``{"op": "freeze"}``: stop taking messages for good (``Receiver.freeze``: the read in hand
  is stored and acknowledged, then DISCONNECT); the status's ``next`` is the offset nothing is
  stored past, and the WAL stays open for commits;
* ``{"op": "stop"}``: DISCONNECT, close the WAL, exit.

The worker dies with its parent: end of file on the request pipe (the parent exited or was
killed, even with SIGKILL: the kernel closes its descriptors) stops the receiver as ``stop``
does, and so does SIGTERM (sent to a job's whole process group, say). Everything acknowledged
to the broker is already in the WAL, so nothing is lost.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from connector.options.source import SourceOptions
from connector.receiver.receiver import Receiver

log = logging.getLogger(__name__)

TERMINATED_EXIT_STATUS = 128 + signal.SIGTERM
"""The exit status of a receiver process, or of Spark's source runner, after an orderly stop
on SIGTERM (as a death by the signal)."""


class WorkerTerminated(BaseException):
    """SIGTERM: unwinds ``serve`` so that its ``finally`` stops the receiver (DISCONNECT)."""


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the stop that follows runs to its end
    raise WorkerTerminated


def status(receiver: Receiver) -> dict[str, Any]:
    """What the parent needs to plan batches: the WAL's bounds, commit point and health."""
    wal = receiver.wal
    error = receiver.error
    return {
        "identity": wal.identity,
        "first": wal.first_offset,
        "next": wal.next_offset,
        "committed": receiver.committed,
        "quiet_for": time.monotonic() - receiver.last_activity,
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "delivery": receiver.figures(),
        "frozen": receiver.frozen,
    }


def serve(inbox: Connection, outbox: Connection) -> int:
    """Run one shard's receiver until ``stop`` or the parent's end; the exit status."""
    try:
        hello = inbox.recv()
    except EOFError:
        return 0
    options: SourceOptions = hello["options"]
    logging.basicConfig(
        level=hello.get("log_level", logging.WARNING),
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s mqtt shard {hello['index']}: %(name)s: %(message)s",
    )
    try:
        receiver = Receiver(options, drop_retained=bool(hello.get("drop_retained")))
        receiver.start()
    except BaseException as exc:  # reported to the parent, which raises it in Spark
        outbox.send({"error": f"{type(exc).__name__}: {exc}"})
        return 1
    op = None
    try:
        outbox.send(status(receiver))
        while True:
            try:
                request = inbox.recv()
            except EOFError:
                log.warning("the stream reader's process is gone: stopping the receiver")
                return 0
            op = request.get("op")
            if op == "stop":
                return 0
            if op == "commit":
                receiver.committed_to(int(request["offset"]))
            elif op == "wait_idle":
                # On failure the status carries the receiver's error.
                with contextlib.suppress(RuntimeError):
                    receiver.wait_idle(request["idle"], timeout=request.get("timeout"))
            elif op == "freeze":
                try:
                    receiver.freeze()
                except RuntimeError as exc:  # the status carries it: not frozen, no target
                    reply = status(receiver)
                    reply["error"] = reply["error"] or str(exc)
                    outbox.send(reply)
                    continue
            outbox.send(status(receiver))
    finally:
        receiver.stop()
        if op == "stop":
            with contextlib.suppress(OSError):
                outbox.send({"stopped": True})


def main(argv: list[str]) -> int:
    # Ctrl-C in a terminal reaches the whole process group: the parent decides when to stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminate)
    inbox = Connection(int(argv[0]), writable=False)
    outbox = Connection(int(argv[1]), readable=False)
    try:
        return serve(inbox, outbox)
    except WorkerTerminated:
        log.info("SIGTERM: the receiver stopped")
        return TERMINATED_EXIT_STATUS


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
