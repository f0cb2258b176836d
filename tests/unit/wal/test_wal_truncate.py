"""truncate_before deletes only whole segments below the offset; reads below report loss."""

from __future__ import annotations

from pathlib import Path

import pytest

from connector.wal import NewRecord, WalDataLossError, WalReader, WalWriter
from connector.wal.segment import index_name, segment_name


def records(first: int, count: int) -> list[NewRecord]:
    return [
        NewRecord("t", b"%06d" % i, 0, False, False, None, i) for i in range(first, first + count)
    ]


def test_truncate_deletes_whole_segments_below(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=150) as writer:
        writer.append(records(0, 30))
        segments = list(writer.segments)
        assert len(segments) >= 5
        # an offset inside segment 2 keeps segment 2: it still holds records >= offset
        inside = segments[2] + 1
        assert writer.truncate_before(inside) == 2
        assert writer.first_offset == segments[2]
        assert writer.segments == tuple(segments[2:])
        assert not (path / segment_name(segments[0])).exists()
        assert not (path / index_name(segments[1])).exists()
        assert writer.truncate_before(inside) == 0, "nothing more to delete"
        assert writer.truncate_before(0) == 0
        reader = WalReader(path)
        assert reader.first_offset() == segments[2]
        with pytest.raises(WalDataLossError) as lost:
            reader.read(segments[1], inside + 1)
        assert (lost.value.missing_start, lost.value.missing_end) == (segments[1], segments[2])
        assert f"offsets [{segments[1]}, {segments[2]}) are not stored" in str(lost.value)
        assert reader.read(segments[2], 30).payloads == [
            b"%06d" % i for i in range(segments[2], 30)
        ]


def test_truncate_never_deletes_the_active_segment(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=150) as writer:
        writer.append(records(0, 30))
        active, older = writer.segments[-1], len(writer.segments) - 1
        assert older >= 4
        assert writer.truncate_before(10**9) == older
        assert writer.segments == (active,)
        assert writer.first_offset == active
        assert writer.append(records(30, 2)) == 32
    with WalWriter.open(path, segment_max_bytes=150) as writer:
        assert (writer.first_offset, writer.next_offset) == (active, 32)
    assert WalReader(path).read(active, 32).offsets == list(range(active, 32))
    with pytest.raises(WalDataLossError, match="deleted by truncation"):
        WalReader(path).read(0, 32)


def test_truncate_exactly_at_a_segment_boundary(tmp_path: Path) -> None:
    with WalWriter.open(tmp_path / "wal", segment_max_bytes=150) as writer:
        writer.append(records(0, 30))
        segments = writer.segments
        assert writer.truncate_before(segments[1] - 1) == 0
        assert writer.truncate_before(segments[1]) == 1
        assert writer.first_offset == segments[1]
