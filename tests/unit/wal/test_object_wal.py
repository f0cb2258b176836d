"""The object layout (connector.wal.objects) on the local file system, through a ``file://``
URI: appends, reads, recovery of a torn last part, corruption, rollover, truncation and the
lease. The same code runs against an S3 server in tests/integration/test_s3_wal.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connector.wal import NewRecord, WalCorruptError, WalDataLossError, WalLockedError
from connector.wal.lease import LEASE_DIR
from connector.wal.location import WalLocation, parse_location
from connector.wal.object_reader import ObjectWalReader
from connector.wal.object_writer import ObjectWalWriter
from connector.wal.objects import ObjectStore, segment_dir
from connector.wal.opening import AnyWalReader, open_reader, open_writer, wal_identity
from tests.support.waiting import wait_until


def records(first: int, count: int, qos: int = 1) -> list[NewRecord]:
    return [
        NewRecord(f"s/{i % 3}", b"%08d" % i, qos, False, False, i % 65535 + 1 if qos else None, i)
        for i in range(first, first + count)
    ]


def uri(path: Path) -> str:
    return f"file://{path}"


def parts_of(root: Path, first: int = 0) -> list[Path]:
    return sorted((root / segment_dir(first)).iterdir())


def payloads(reader: AnyWalReader, start: int, end: int) -> list[bytes]:
    return list(reader.read(start, end).payloads)


def test_appends_read_back_by_range_and_survive_reopen(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        assert isinstance(writer, ObjectWalWriter)
        for first in range(0, 100, 10):
            assert writer.append(records(first, 10)) == first + 10
        identity = writer.identity
    assert len(parts_of(root)) == 11  # the segment's first part, then one per append
    reader = open_reader(uri(root))
    assert isinstance(reader, ObjectWalReader)
    assert reader.identity == identity == wal_identity(uri(root))
    assert payloads(reader, 0, 100) == [b"%08d" % i for i in range(100)]
    assert payloads(reader, 37, 52) == [b"%08d" % i for i in range(37, 52)]
    with open_writer(uri(root)) as writer:
        assert (writer.identity, writer.next_offset) == (identity, 100)
        writer.append(records(100, 5))
    assert payloads(open_reader(uri(root)), 95, 105) == [b"%08d" % i for i in range(95, 105)]


def test_qos2_state_is_recovered_from_the_parts(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        writer.append(records(0, 4, qos=2))
        writer.append([], released_qos2=[1, 2])
    with open_writer(uri(root)) as writer:
        assert writer.qos2_pending == frozenset({3, 4})
        assert writer.latest_digest(1) is not None


def test_segments_roll_over_by_parts_and_reads_cross_them(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with ObjectWalWriter.open(open_writer_location(root), segment_max_parts=3) as writer:
        for first in range(0, 60, 6):
            writer.append(records(first, 6))
        assert len(writer.segments) >= 3
        segments = writer.segments
    reader = open_reader(uri(root))
    assert payloads(reader, 0, 60) == [b"%08d" % i for i in range(60)]
    assert payloads(reader, segments[1] - 2, segments[2] + 2) == [
        b"%08d" % i for i in range(segments[1] - 2, segments[2] + 2)
    ]


def test_truncation_deletes_committed_segments_in_the_background(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with ObjectWalWriter.open(open_writer_location(root), segment_max_parts=2) as writer:
        for first in range(0, 40, 4):
            writer.append(records(first, 4))
        second = writer.segments[1]
        assert writer.truncate_before(second) == 1
        assert writer.first_offset == second
        wait_until(lambda: not (root / segment_dir(0)).exists(), timeout=10)
    reader = open_reader(uri(root))
    with pytest.raises(WalDataLossError, match="deleted by truncation"):
        reader.read(0, 5)
    assert payloads(reader, second, 40) == [b"%08d" % i for i in range(second, 40)]


def test_a_torn_last_part_is_deleted_and_its_offsets_reused(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        writer.append(records(0, 10))
        writer.append(records(10, 10))
    last = parts_of(root)[-1]
    last.write_bytes(last.read_bytes()[:-7])  # a writer that died while writing it
    with open_writer(uri(root)) as writer:
        assert writer.next_offset == 10
        assert not last.exists()
        writer.append(records(100, 3))
    assert payloads(open_reader(uri(root)), 8, 13) == [b"%08d" % i for i in (8, 9, 100, 101, 102)]


def test_a_torn_first_part_of_a_new_wal_is_made_anew(tmp_path: Path) -> None:
    """Segment 0's first part holds no records: torn, it is written again and the WAL opens."""
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        identity = writer.identity
    (only,) = parts_of(root)
    only.write_bytes(only.read_bytes()[:9])
    with open_writer(uri(root)) as writer:
        assert (writer.identity, writer.next_offset) == (identity, 0)
        writer.append(records(0, 3))
    assert payloads(open_reader(uri(root)), 0, 3) == [b"%08d" % i for i in range(3)]


def test_a_torn_only_segment_after_truncation_is_corruption(tmp_path: Path) -> None:
    """Its QoS state went with the truncated segments: a clear error, not a crash."""
    root = tmp_path / "wal"
    with ObjectWalWriter.open(open_writer_location(root), segment_max_parts=2) as writer:
        for first in range(0, 40, 4):
            writer.append(records(first, 4))
        last = writer.segments[-1]
        writer.truncate_before(last)
        wait_until(lambda: sorted(root.glob("*.seg")) == [root / segment_dir(last)], timeout=10)
    head, *rest = parts_of(root, last)
    for part in rest:
        part.unlink()
    head.write_bytes(head.read_bytes()[:9])
    with pytest.raises(WalCorruptError, match="deleted by truncation"):
        open_writer(uri(root))


def test_damage_before_the_last_part_is_corruption(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        writer.append(records(0, 10))
        writer.append(records(10, 10))
    middle = parts_of(root)[1]
    data = bytearray(middle.read_bytes())
    data[-3] ^= 0xFF
    middle.write_bytes(bytes(data))
    with pytest.raises(WalCorruptError, match="damaged before the last part"):
        open_writer(uri(root))


def test_a_missing_part_is_a_gap(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        for first in range(0, 30, 10):
            writer.append(records(first, 10))
    parts_of(root)[1].unlink()
    with pytest.raises(WalCorruptError, match="not contiguous"):
        open_reader(uri(root)).read(0, 30)


@pytest.mark.parametrize("hidden", [1, -1], ids=["middle", "newest"])
def test_a_part_missing_from_one_listing_is_found_by_listing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hidden: int
) -> None:
    """A store whose listing can miss a part renamed into place meanwhile (s3proxy's file
    store): the read lists again instead of reporting a gap or a loss."""
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        for first in range(0, 30, 10):
            writer.append(records(first, 10))
    part = parts_of(root)[hidden]
    aside = tmp_path / "aside"
    part.rename(aside)
    listings: list[int] = []
    entries = ObjectStore.entries

    def entries_then_restore(self: ObjectStore, folder: str = "") -> list[tuple[str, int, bool]]:
        found = entries(self, folder)
        if folder == segment_dir(0):
            listings.append(len(found))
            if len(listings) == 2:  # missed twice, then listed, as a rename that finished
                aside.rename(part)
        return found

    monkeypatch.setattr(ObjectStore, "entries", entries_then_restore)
    assert list(open_reader(uri(root)).read(0, 30).payloads) == [b"%08d" % i for i in range(30)]
    assert listings[0] == listings[-1] - 1


def test_a_log_shorter_than_asked_is_a_loss_after_listing_again(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        for first in range(0, 30, 10):
            writer.append(records(first, 10))
    parts_of(root)[-1].unlink()
    started = time.monotonic()
    with pytest.raises(WalDataLossError, match="the log ends at offset 20"):
        open_reader(uri(root)).read(0, 30)
    assert time.monotonic() - started >= 1.0  # listed again (0.2 + 0.4 + 0.6 s) first


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)), pytest.raises(WalLockedError, match=f"pid={os.getpid()}"):
        ObjectWalWriter.open(open_writer_location(root), lease_wait=0.5)
    with open_writer(uri(root)) as writer:  # released on close
        assert writer.next_offset == 0


def test_the_lease_of_a_dead_process_on_this_host_is_taken_at_once(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    child = (
        "import os, sys\n"
        "from connector.wal.opening import open_writer\n"
        "open_writer(sys.argv[1]).append([])\n"
        "os._exit(0)\n"  # dies holding the lease
    )
    subprocess.run([sys.executable, "-c", child, uri(root)], check=True, timeout=60)
    assert list((root / LEASE_DIR).iterdir())
    started = time.monotonic()
    with ObjectWalWriter.open(open_writer_location(root), lease_wait=5) as writer:
        assert writer.next_offset == 0
    assert time.monotonic() - started < 5


def test_a_claim_that_stops_beating_goes_stale_after_its_lease_time(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    open_writer(uri(root)).close()
    (root / LEASE_DIR).mkdir(exist_ok=True)
    claim = {"host": "another-host", "pid": 1, "beat": 3, "ttl": 1.0}
    (root / LEASE_DIR / "00000000000000000001-x.json").write_text(json.dumps(claim))
    with pytest.raises(WalLockedError, match="host=another-host"):
        ObjectWalWriter.open(open_writer_location(root), lease_wait=0.3)
    with ObjectWalWriter.open(open_writer_location(root), lease_wait=10) as writer:
        assert writer.next_offset == 0
    assert not (root / LEASE_DIR / "00000000000000000001-x.json").exists()


def test_a_writer_whose_claim_was_taken_over_refuses_appends(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    writer = ObjectWalWriter.open(open_writer_location(root), lease_seconds=0.4)
    try:
        for claim in (root / LEASE_DIR).iterdir():
            claim.unlink()  # what a writer that judged this one dead does first
        wait_until(lambda: _refuses(writer), timeout=10)
        with pytest.raises(WalLockedError, match="taken over"):
            writer.append(records(0, 1))
    finally:
        writer.close()


def test_a_writer_that_cannot_renew_stops_appending(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    writer = ObjectWalWriter.open(open_writer_location(root), lease_seconds=0.6)
    try:
        shutil.rmtree(root / LEASE_DIR)
        (root / LEASE_DIR).write_text("")  # listing the claims fails from now on
        wait_until(lambda: _refuses(writer), timeout=10)
        with pytest.raises(WalLockedError, match="could not renew"):
            writer.append(records(0, 1))
    finally:
        writer.close()


def test_store_listing_ignores_foreign_objects(tmp_path: Path) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        writer.append(records(0, 3))
    (root / segment_dir(0) / "notes.txt").write_text("x")
    (root / "unrelated").mkdir()
    store = ObjectStore(open_writer_location(root))
    assert store.segments() == [0]
    assert payloads(open_reader(uri(root)), 0, 3) == [b"%08d" % i for i in range(3)]


def _refuses(writer: ObjectWalWriter) -> bool:
    try:
        writer.append([])
    except WalLockedError:
        return True
    return False


def open_writer_location(root: Path) -> WalLocation:
    return parse_location(uri(root))


def test_parts_on_a_local_mount_are_fsynced_with_their_directory_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "wal"
    with open_writer(uri(root)) as writer:
        synced: list[str] = []
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        writer.append(records(0, 5))
    part = parts_of(root)[-1]
    assert str(part) in synced and str(part.parent) in synced
