"""A failed write or fsync is never reported as durable; the writer is poisoned; reopen recovers.

The failures are injected by monkeypatching ``os.fsync`` / ``os.write`` as seen by the writer
module (the one place these tests replace filesystem calls).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from connector.wal import NewRecord, WalDataLossError, WalReader, WalWriteError, WalWriter
from connector.wal.segment import segment_name


def records(first: int, count: int, qos: int = 1) -> list[NewRecord]:
    return [
        NewRecord("t", b"payload %d" % i, qos, False, False, i % 65535 + 1 if qos else None, i)
        for i in range(first, first + count)
    ]


def enospc(*args: object) -> int:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def assert_reopens_with_only(path: Path, durable: int) -> None:
    with WalWriter.open(path) as writer:
        assert writer.next_offset == durable
        assert writer.latest_digest(durable + 1) is None, "QoS state of the failed batch is gone"
        reader = WalReader(path)
        assert reader.read(0, durable).payloads == [b"payload %d" % i for i in range(durable)]
        with pytest.raises(WalDataLossError):
            reader.read(0, durable + 1)
        assert writer.append(records(durable, 1)) == durable + 1


def test_fsync_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wal"
    writer = WalWriter.open(path)
    assert writer.append(records(0, 3)) == 3
    durable_size = (path / segment_name(0)).stat().st_size
    monkeypatch.setattr("connector.wal.file_writer.os.fsync", enospc)
    with pytest.raises(WalWriteError, match="not durable") as raised:
        writer.append(records(3, 4))
    assert isinstance(raised.value.__cause__, OSError)
    assert raised.value.__cause__.errno == errno.ENOSPC
    assert writer.next_offset == 3
    monkeypatch.undo()
    assert (path / segment_name(0)).stat().st_size == durable_size, "unsynced bytes were cut"
    with pytest.raises(WalWriteError, match="reopen"):
        writer.append(records(3, 1))
    with pytest.raises(WalWriteError, match="reopen"):
        writer.truncate_before(1)
    writer.close()
    assert_reopens_with_only(path, 3)


def test_short_write_then_enospc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wal"
    writer = WalWriter.open(path)
    writer.append(records(0, 2))
    real_write = os.write
    calls: list[int] = []

    def half_then_fail(fd: int, data: bytes) -> int:
        if calls:
            return enospc()
        calls.append(len(data))
        return real_write(fd, bytes(data[: len(data) // 2]))

    monkeypatch.setattr("connector.wal.file_writer.os.write", half_then_fail)
    with pytest.raises(WalWriteError):
        writer.append(records(2, 10))
    monkeypatch.undo()
    assert calls, "the injected write ran"
    writer.close()
    assert_reopens_with_only(path, 2)


def test_failure_during_rollover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=300) as writer:
        writer.append(records(0, 3))
        segments = writer.segments
        monkeypatch.setattr("connector.wal.file_writer.os.fsync", enospc)
        with pytest.raises(WalWriteError):
            writer.append(records(3, 20))
        monkeypatch.undo()
    with WalWriter.open(path, segment_max_bytes=300) as writer:
        assert writer.segments == segments, "no segment appears for a failed rollover"
    assert_reopens_with_only(path, 3)
