"""The object-layout WAL against a real S3-compatible server (s3proxy on loopback)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from connector.wal import NewRecord, WalLockedError, WalStoreError, WalWriteError
from connector.wal.location import parse_location
from connector.wal.object_writer import ObjectWalWriter
from connector.wal.opening import open_reader, open_writer
from devtools.s3_server import TEST_SECRET_KEY, S3Server

pytestmark = pytest.mark.integration


def records(first: int, count: int, qos: int = 1) -> list[NewRecord]:
    return [
        NewRecord("s/t", b"%08d" % i, qos, False, False, i % 65535 + 1, i)
        for i in range(first, first + count)
    ]


def expected(start: int, end: int) -> list[bytes]:
    return [b"%08d" % i for i in range(start, end)]


def test_append_read_truncate_and_reopen_on_s3(s3_wal: str) -> None:
    location = parse_location(s3_wal)
    with ObjectWalWriter.open(location, segment_max_parts=4) as writer:
        for first in range(0, 200, 20):
            writer.append(records(first, 20, qos=2))
        writer.append([], released_qos2=range(1, 101))
        identity = writer.identity
        assert writer.truncate_before(writer.segments[1]) == 1
        kept = writer.first_offset
    reader = open_reader(s3_wal)
    assert reader.identity == identity
    assert list(reader.read(kept, 200).payloads) == expected(kept, 200)
    assert reader.first_offset() == kept
    with open_writer(s3_wal) as writer:
        assert (writer.identity, writer.next_offset, writer.first_offset) == (identity, 200, kept)
        assert writer.qos2_pending == frozenset(range(101, 201))


def test_a_second_writer_is_refused(s3_wal: str) -> None:
    with open_writer(s3_wal), pytest.raises(WalLockedError, match="lease held by"):
        ObjectWalWriter.open(parse_location(s3_wal), lease_wait=1.0)


def test_a_store_outage_fails_the_append_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    server = S3Server(tmp_path / "s3")
    with server.start():
        server.make_bucket("wal")
        uri = server.uri("wal", "outage")
        writer = open_writer(uri)
        durable = writer.append(records(0, 50))
        server.stop()
        with pytest.raises(WalWriteError) as caught:
            writer.append(records(50, 10))
        message = str(caught.value)
        assert "could not append 10 records" in message and "outage" in message
        assert TEST_SECRET_KEY not in message
        pattern = r"s3://wal/outage.*could not read .*AWS Error"
        with pytest.raises(WalStoreError, match=pattern) as read:
            open_reader(uri).read(0, 10)
        assert TEST_SECRET_KEY not in str(read.value)
        writer.close()
        server.start()
        with open_writer(uri) as reopened:
            assert reopened.next_offset == durable == 50
            reopened.append(records(50, 10))
        assert list(open_reader(uri).read(0, 60).payloads) == expected(0, 60)


def test_reads_while_the_writer_appends_see_every_stored_record(s3_wal: str) -> None:
    """s3proxy's file-system store lists a folder while other PUTs rename their objects into
    it, and such a listing can miss a part written long before (docs/wal-storage.md, "What
    a listing must show"). Readers racing a writer must still read every stored record."""
    location = parse_location(s3_wal)
    stored = [0]
    failures: list[BaseException] = []
    done = threading.Event()

    def read_while_appending() -> None:
        reader = open_reader(s3_wal)
        try:
            while not done.is_set():
                end = stored[0]
                if end:
                    assert list(reader.read(0, end).payloads) == expected(0, end)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)
            done.set()

    readers = [threading.Thread(target=read_while_appending) for _ in range(2)]
    with ObjectWalWriter.open(location, segment_max_parts=10_000) as writer:
        for thread in readers:
            thread.start()
        try:
            for first in range(0, 6_000, 5):
                if done.is_set():
                    break
                stored[0] = writer.append(records(first, 5))
        finally:
            done.set()
            for thread in readers:
                thread.join(timeout=60)
    assert not failures, failures[0]
    assert stored[0] == 6_000
