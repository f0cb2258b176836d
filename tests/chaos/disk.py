"""Disk faults for a write-ahead log directory: a filesystem that fills up, or one that turns
read-only under a running writer.

* :class:`TinyTmpfs`: a tmpfs of a few pages; ``grow()`` gives space back (``mount -o
  remount,size=...`` keeps the files and the open descriptors).
* :class:`FailingExt4`: ext4 in a loop-mounted image file with ``errors=remount-ro``;
  ``go_read_only()`` makes the kernel record a filesystem error (``trigger_fs_error``), so ext4
  turns read-only at once, open descriptors included, as it does on a real I/O error; writes
  then fail with EROFS. ``repair()`` unmounts, checks the image with ``e2fsck`` and mounts it
  writable again.

Both need root (``mount``). A plain ``chmod`` is no substitute: root, which runs the tests
in CI, ignores permission bits, and a tmpfs or bind mount cannot be remounted read-only
while a file on it is open for writing (EBUSY). ``mount_fault_unavailable()`` says why
the faults cannot be made here, for a skip message.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import time
from pathlib import Path

PAGE = 4096
UMOUNT_TIMEOUT = 60.0


def _run(*command: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise OSError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")


def mount_fault_unavailable() -> str | None:
    """Why mounts cannot be made here (not root, no ``mount``), or None when they can."""
    if os.geteuid() != 0:
        return "disk-fault tests mount filesystems and need root"
    for tool in ("mount", "umount"):
        if shutil.which(tool) is None:
            return f"disk-fault tests need the {tool} command"
    return None


def _unmount(path: Path, timeout: float = UMOUNT_TIMEOUT) -> None:
    """Unmount ``path``, waiting while processes that used it (a stopped query's source
    process) still hold files open on it."""
    deadline = time.monotonic() + timeout
    while True:
        done = subprocess.run(["umount", str(path)], capture_output=True, text=True, timeout=30)
        if done.returncode == 0:
            return
        if "busy" not in done.stderr or time.monotonic() >= deadline:
            raise OSError(f"umount {path} failed: {done.stderr.strip()}")
        time.sleep(0.1)


def _is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target for line in mounts)


class TinyTmpfs:
    """A tmpfs of ``size`` bytes mounted at ``path`` (created when missing)."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        path.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path))

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def grow(self, size: int) -> None:
        """Give space back: resize the mounted tmpfs (files and open descriptors stay)."""
        _run("mount", "-o", f"remount,size={size}", str(self.path))
        self.size = size

    def close(self) -> None:
        if _is_mounted(self.path):
            _unmount(self.path)


class FailingExt4:
    """An ext4 image of ``size`` bytes in ``image``, mounted at ``path``, that can be made to
    turn read-only while in use."""

    def __init__(self, image: Path, path: Path, size: int = 8 << 20) -> None:
        self.image = image
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        with image.open("wb") as handle:
            handle.truncate(size)
        _run("mkfs.ext4", "-q", "-F", str(image))
        self._mount()

    def _mount(self) -> None:
        _run("mount", "-o", "loop,errors=remount-ro", str(self.image), str(self.path))
        self.device = Path(_mount_source(self.path)).name

    @property
    def read_only(self) -> bool:
        """Whether creating a file fails with EROFS (newer kernels mark an ext4 that went
        read-only after an error ``emergency_ro`` rather than ``ro`` in the mount table)."""
        probe = self.path / ".write-probe"
        try:
            fd = os.open(probe, os.O_CREAT | os.O_WRONLY, 0o600)
        except OSError as exc:
            return exc.errno == errno.EROFS
        os.close(fd)
        probe.unlink()
        return False

    def go_read_only(self) -> None:
        """Record a filesystem error: ext4 (errors=remount-ro) turns read-only at once."""
        trigger = Path("/sys/fs/ext4") / self.device / "trigger_fs_error"
        trigger.write_text("chaos test: simulated disk error\n")
        if not self.read_only:
            raise OSError(f"{self.path} did not turn read-only after {trigger}")

    def repair(self) -> None:
        """Unmount (once nothing holds files open on it), fsck, and mount writable again."""
        _unmount(self.path)
        done = subprocess.run(
            ["e2fsck", "-fy", str(self.image)], capture_output=True, text=True, timeout=120
        )
        if done.returncode not in (0, 1):  # 1: errors corrected
            raise OSError(f"e2fsck {self.image} failed ({done.returncode}): {done.stdout}")
        self._mount()

    def close(self) -> None:
        if _is_mounted(self.path):
            _unmount(self.path)
        with contextlib.suppress(FileNotFoundError):
            self.image.unlink()


def _mount_source(path: Path) -> str:
    target = str(path.resolve())
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            fields = line.split()
            if fields[1] == target:
                return fields[0]
    raise OSError(f"{path} is not mounted")
