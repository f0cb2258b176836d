"""``stored_bytes``: what a WAL's segments hold on disk or in the store, through appends,
segment roll-overs, truncation and reopening (both layouts)."""

from __future__ import annotations

from pathlib import Path

from connector.wal import NewRecord, WalWriter
from connector.wal.location import parse_location
from connector.wal.object_writer import ObjectWalWriter
from connector.wal.objects import segment_dir
from connector.wal.segment import segment_name


def records(first: int, count: int) -> list[NewRecord]:
    return [
        NewRecord("t", b"%06d" % i, 1, False, False, i % 65535 + 1, i)
        for i in range(first, first + count)
    ]


def file_bytes(root: Path, segments: tuple[int, ...]) -> int:
    return sum((root / segment_name(first)).stat().st_size for first in segments)


def object_bytes(root: Path, segments: tuple[int, ...]) -> int:
    return sum(
        part.stat().st_size for first in segments for part in (root / segment_dir(first)).iterdir()
    )


def test_file_layout(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with WalWriter.open(root, segment_max_bytes=200) as writer:
        empty = writer.stored_bytes
        assert empty == file_bytes(root, writer.segments) > 0  # the first segment's header
        for first in range(0, 60, 6):
            writer.append(records(first, 6))
            assert writer.stored_bytes == file_bytes(root, writer.segments)
        assert len(writer.segments) >= 4
        writer.truncate_before(writer.segments[2])
        assert writer.stored_bytes == file_bytes(root, writer.segments)
        kept = writer.stored_bytes
    with WalWriter.open(root, segment_max_bytes=200) as again:
        assert again.stored_bytes == kept == file_bytes(root, again.segments)
        again.append(records(60, 30))
        assert again.stored_bytes == file_bytes(root, again.segments) > kept


def test_object_layout(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    location = parse_location(f"file://{root}")
    with ObjectWalWriter.open(location, segment_max_bytes=300) as writer:
        for first in range(0, 60, 6):
            writer.append(records(first, 6))
            assert writer.stored_bytes == object_bytes(root, writer.segments)
        assert len(writer.segments) >= 3
        writer.truncate_before(writer.segments[2])  # deleted in the background
        assert writer.stored_bytes == object_bytes(root, writer.segments)
        kept = writer.stored_bytes
    with ObjectWalWriter.open(location, segment_max_bytes=300) as again:
        assert again.stored_bytes == kept == object_bytes(root, again.segments)
