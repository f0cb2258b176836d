"""Readers need no lock: they read durable ranges while the writer appends and rolls over."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

from connector.wal import NewRecord, WalReader, WalWriter

REPO_ROOT = Path(__file__).resolve().parents[3]
BATCHES, BATCH = 150, 40


def batch(first: int) -> list[NewRecord]:
    return [
        NewRecord(f"c/{i % 3}", struct.pack("<Q", i) * 4, 0, False, False, None, i)
        for i in range(first, first + BATCH)
    ]


def offsets_in(payloads: list[bytes]) -> list[int]:
    return [struct.unpack_from("<Q", payload)[0] for payload in payloads]


def test_reader_follows_a_writer_that_rolls_segments(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    writer = WalWriter.open(path, segment_max_bytes=2048, fsync=False)
    published = [0]  # next_offset values the writer returned: durable high-water marks
    caught_up = threading.Condition()
    consumed = [0]
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            for number in range(BATCHES):
                published.append(writer.append(batch(number * BATCH)))
                if number % 25 == 24:  # let the reader catch up now and then
                    with caught_up:
                        if not caught_up.wait_for(lambda: consumed[0] >= published[-1], 60):
                            raise TimeoutError("reader did not catch up")
        except BaseException as exc:
            failures.append(exc)

    producer = threading.Thread(target=produce)
    producer.start()
    reader, reads = WalReader(path), 0
    try:
        while producer.is_alive() or consumed[0] < published[-1]:
            low, high = consumed[0], published[-1]
            if high == low:
                continue
            columns = reader.read(low, high)
            assert columns.offsets == list(range(low, high))
            assert offsets_in(columns.payloads) == columns.offsets
            reads += 1
            with caught_up:
                consumed[0] = high
                caught_up.notify_all()
    finally:
        producer.join()
        writer.close()
    assert failures == []
    assert consumed[0] == BATCHES * BATCH
    assert reads >= BATCHES // 25


def test_reader_in_another_process_while_the_writer_is_open(tmp_path: Path) -> None:
    path = tmp_path / "wal"
    with WalWriter.open(path, segment_max_bytes=4096) as writer:
        for number in range(10):
            writer.append(batch(number * BATCH))
        end = writer.next_offset
        code = (
            "import sys, struct\n"
            "from connector.wal import WalReader\n"
            "columns = WalReader(sys.argv[1]).read(int(sys.argv[2]), int(sys.argv[3]))\n"
            "ok = [struct.unpack_from('<Q', p)[0] for p in columns.payloads] == columns.offsets\n"
            "sys.stdout.write(f'{len(columns)} {ok} {columns.offsets[0]}')\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, str(path), "7", str(end)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"{end - 7} True 7"
        assert writer.append(batch(end)) == end + BATCH, "the writer is unaffected"
