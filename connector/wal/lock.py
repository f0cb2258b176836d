"""The single-writer lock: ``fcntl.flock`` on ``<wal>/LOCK``.

The lock belongs to the open file description, so a second open in the same process fails
too, and the kernel releases it when the process dies. The file holds the holder's pid and
host for the error message of whoever is refused. A process forked while the lock is held
shares it; start WAL-using children with ``spawn`` or ``subprocess``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path

from .errors import WalLockedError

LOCK_NAME = "LOCK"


class WalLock:
    """An acquired WAL lock; release it exactly once."""

    __slots__ = ("_fd", "path")

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def acquire(cls, root: Path) -> WalLock:
        """Take the lock without waiting; WalLockedError naming the holder when it is taken."""
        path = root / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _describe_holder(fd)
            os.close(fd)
            raise WalLockedError(root, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid={os.getpid()} host={socket.gethostname()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        """Unlock and close; later calls do nothing."""
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _describe_holder(fd: int) -> str:
    """What the holder wrote into the lock file, for the refusal message."""
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return f"held by {text}" if text else "holder pid unknown"
