"""Throughput check of the WAL, run by hand (not part of ``make bench``; writes no results file).

Appends N records of a 100-byte payload in batches with fsync on, then reads them back in
ranges, and logs records/s for each. Run from the repository root:

    python -m bench.wal_throughput [--records N] [--batch N] [--dir DIR] [--no-fsync]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from connector.wal import NewRecord, WalReader, WalWriter, decode_blob

log = logging.getLogger("wal_throughput")


def make_batches(count: int, batch: int) -> list[list[NewRecord]]:
    """``count`` records of a 100-byte payload, QoS cycling 0/1/2, split into batches."""
    payload = bytes(range(100))
    records = [
        NewRecord(
            f"sensors/site-{i % 10}/temperature",
            payload,
            i % 3,
            False,
            False,
            None if i % 3 == 0 else i % 65535 + 1,
            1_700_000_000_000_000 + i,
        )
        for i in range(count)
    ]
    return [records[i : i + batch] for i in range(0, count, batch)]


class Clock:
    """Wall-clock and CPU time of a block (CPU time is robust against a busy machine)."""

    def __enter__(self) -> Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu

    def rates(self, count: int) -> str:
        return f"{count / self.wall:,.0f} records/s wall ({count / self.cpu:,.0f}/s per CPU second)"


def run(root: Path, count: int, batch: int, fsync: bool) -> None:
    """Measure append, read and blob encode/decode rates and log them."""
    batches = make_batches(count, batch)
    with WalWriter.open(root / "wal", fsync=fsync) as writer, Clock() as append:
        for records in batches:
            writer.append(records)
    reader = WalReader(root / "wal")
    ranges = [(first, min(count, first + batch)) for first in range(0, count, batch)]
    with Clock() as read:
        total = sum(len(reader.read(first, end)) for first, end in ranges)
    assert total == count
    with Clock() as blob:
        total = sum(len(decode_blob(reader.encode_range(first, end))) for first, end in ranges)
    assert total == count
    log.info(
        "append, fsync=%s, %d batches of %d: %s", fsync, len(batches), batch, append.rates(count)
    )
    log.info("read in ranges of %d: %s", batch, read.rates(count))
    log.info("encode_range + decode_blob in ranges of %d: %s", batch, blob.rates(count))


def main() -> None:
    """Parse arguments and run the measurement in a temporary directory."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary WAL")
    parser.add_argument("--no-fsync", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        run(Path(tmp), args.records, args.batch, fsync=not args.no_fsync)


if __name__ == "__main__":
    main()
