"""The WAL directory and every file in it are owner-only: the WAL holds message payloads."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from connector.wal import NewRecord, WalWriter


def modes(root: Path) -> dict[str, int]:
    """Permission bits of ``root`` and of everything under it, by relative path."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for path in root.rglob("*"):
        found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found


def fill(root: Path) -> None:
    with WalWriter.open(root, segment_max_bytes=4096) as wal:
        for n in range(40):  # several segments, their index hints, a truncation
            wal.append([NewRecord("t", os.urandom(200), 2, False, False, n + 1, n)])
        wal.truncate_before(20)
        wal.append([], released_qos2=[1, 2])


def test_a_new_wal_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    root = tmp_path / "parent" / "wal"
    old = os.umask(0o000)  # the most permissive umask: modes come from the code alone
    try:
        fill(root)
    finally:
        os.umask(old)
    found = modes(root)
    assert found["."] == 0o700, found
    assert stat.S_IMODE(root.parent.stat().st_mode) == 0o700, "a parent it created, too"
    assert len(found) > 4, found  # segments, index hints, identity, lock
    loose = {name: oct(mode) for name, mode in found.items() if mode & 0o077}
    assert not loose, loose


def test_an_existing_wal_directory_is_made_owner_only(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    fill(root)
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
