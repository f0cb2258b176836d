"""Error types of the write-ahead log.

Every error is a :class:`WalError`. The subclasses carry the facts an operator needs (the file
and byte position of damage, the missing offsets, the lock holder) both as attributes and in
the message, and they pickle, so they survive a trip from a Python worker to the driver.
"""

from __future__ import annotations

from pathlib import Path


class WalError(Exception):
    """Base class of every error raised by :mod:`connector.wal`."""


class WalLockedError(WalError):
    """Another writer (another query or process) holds the WAL directory's lock."""

    def __init__(self, path: str | Path, holder: str) -> None:
        self.path = str(path)
        self.holder = holder
        super().__init__(
            f"WAL directory {self.path} is locked: another query or process is using this WAL "
            f"({holder}); only one writer may use a WAL directory at a time"
        )

    def __reduce__(self) -> tuple[type[WalLockedError], tuple[str, str]]:
        return (type(self), (self.path, self.holder))


class WalCorruptError(WalError):
    """Durable WAL data failed validation; it is reported, never silently repaired."""

    def __init__(self, file: str | Path, position: int, reason: str) -> None:
        self.file = str(file)
        self.position = position
        self.reason = reason
        super().__init__(f"WAL file {self.file} is corrupt at byte {position}: {reason}")

    def __reduce__(self) -> tuple[type[WalCorruptError], tuple[str, int, str]]:
        return (type(self), (self.file, self.position, self.reason))


class WalWriteError(WalError):
    """An append could not be made durable; the writer is unusable and must be reopened."""


class WalDataLossError(WalError):
    """Offsets a reader needs are not stored: deleted by truncation, never written, or held by
    a WAL since wiped or replaced. ``end`` None: every offset from ``start`` on (the lost WAL's
    end is not known)."""

    def __init__(self, path: str | Path, start: int, end: int | None, reason: str) -> None:
        self.path = str(path)
        self.missing_start = start
        self.missing_end = end
        self.reason = reason
        missing = f"from {start} on" if end is None else f"[{start}, {end})"
        super().__init__(f"WAL {self.path}: offsets {missing} are not stored: {reason}")

    def __reduce__(self) -> tuple[type[WalDataLossError], tuple[str, int, int | None, str]]:
        return (type(self), (self.path, self.missing_start, self.missing_end, self.reason))


class WalStoreError(WalError):
    """The store holding a WAL on shared storage failed a read (unreachable, refused)."""

    def __init__(self, path: str, action: str, reason: str) -> None:
        self.path = path
        self.action = action
        self.reason = reason
        super().__init__(f"WAL {path}: could not {action}: {reason}")

    def __reduce__(self) -> tuple[type[WalStoreError], tuple[str, str, str]]:
        return (type(self), (self.path, self.action, self.reason))
