"""Throughput check of the WAL (a script, not a test).

Appends N records of a 100-byte payload in batches with fsync on, then reads them back in
ranges, and logs records/s for each. Run from the repository root:

    python tests/unit/wal/wal_throughput.py [--records 100000] [--batch 1000] [--dir DIR]
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


def run(root: Path, count: int, batch: int, fsync: bool) -> None:
    """Measure append, read and blob encode/decode rates and log them."""
    batches = make_batches(count, batch)
    with WalWriter.open(root / "wal", fsync=fsync) as writer:
        started = time.perf_counter()
        for records in batches:
            writer.append(records)
        append_s = time.perf_counter() - started
        assert writer.next_offset == count
    reader = WalReader(root / "wal")
    started = time.perf_counter()
    total = 0
    for first in range(0, count, batch * 10):
        total += len(reader.read(first, min(count, first + batch * 10)))
    read_s = time.perf_counter() - started
    assert total == count
    started = time.perf_counter()
    decoded = 0
    for first in range(0, count, batch * 10):
        decoded += len(decode_blob(reader.encode_range(first, min(count, first + batch * 10))))
    blob_s = time.perf_counter() - started
    assert decoded == count
    log.info(
        "fsync=%s: append %.0f records/s (%d batches of %d, %.2fs); read %.0f records/s (%.2fs); "
        "encode+decode blob %.0f records/s",
        fsync,
        count / append_s,
        len(batches),
        batch,
        append_s,
        count / read_s,
        read_s,
        count / blob_s,
    )


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
