"""Only one writer per WAL directory, across processes and within one."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from connector.wal import NewRecord, WalLockedError, WalReader, WalWriter

REPO_ROOT = Path(__file__).resolve().parents[3]
CHILD = """
import sys
from connector.wal import WalLockedError, WalWriter
try:
    WalWriter.open(sys.argv[1]).close()
except WalLockedError as exc:
    sys.stdout.write(str(exc))
    sys.exit(3)
sys.stdout.write("opened")
"""


def open_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_second_process_is_refused_until_close(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    writer = WalWriter.open(path)
    try:
        refused = open_in_child(path)
        assert refused.returncode == 3, refused.stderr
        assert str(path) in refused.stdout
        assert "another query or process is using this WAL" in refused.stdout
        assert f"pid={os.getpid()}" in refused.stdout
    finally:
        writer.close()
    opened = open_in_child(path)
    assert (opened.returncode, opened.stdout) == (0, "opened"), opened.stderr


def test_second_writer_in_the_same_process_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path) as writer:
        writer.append([NewRecord("t", b"p", 0, False, False, None, 1)])
        with pytest.raises(WalLockedError, match="is locked") as raised:
            WalWriter.open(path)
        assert raised.value.path == str(path)
        assert WalReader(path).read(0, 1).payloads == [b"p"], "readers need no lock"
    with WalWriter.open(path) as writer:
        assert writer.next_offset == 1


def test_lock_error_pickles() -> None:
    error = WalLockedError("/x/wal", "held by pid=1 host=h")
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.path == "/x/wal"
