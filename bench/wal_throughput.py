"""WAL appends per layout: the cost of one append (a group commit) of N records, same run.

Layouts (docs/wal-storage.md), each a fresh WAL per measurement:

* ``files``: a local directory, the file layout (append + fsync per append, unless
  ``--no-fsync``);
* ``objects-file``: a ``file://`` URI on the same local disk, the object layout (one part file
  written whole per append, through ``pyarrow.fs``'s local file system);
* ``objects-s3``: an ``s3://`` URI on an S3-compatible server this script starts on a free
  loopback port (``devtools.s3_server``): one PUT per append.

For every batch size N, every layout appends the same ``min(ceil(records / N), max-appends)``
batches of N records (100-byte payload, QoS cycling 0/1/2), built as the receiver builds them:
seven-field tuples for MQTT 3.1/3.1.1, or with ``--properties BYTES`` eight-field MQTT 5 records
whose properties take that many bytes (data blocks with properties); the layouts take turns
within each
repetition, in an order rotated per repetition, so all of them meet the same load on a shared
machine. Clocks per measurement: the wall time of each ``append`` call (median, p90, and the
total over the batches: records/s), the process's CPU time over the appends (this process and
its threads: the S3 client's too, not the server's), the open of the writer (the object layout
takes a lease first), and the read back through ``open_reader`` in ranges of N. Ratios pair a
layout with ``files`` measured in the same repetition at the same N. Results go to
``bench/results/wal_throughput.json``; the machine is described in it, and figures are read
in bench/REPORT.md.
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector.wal import RecordTuple

from .common import Stats, finish, machine, paired_ratio, turn
from .render import Charts, Lines, md_table, num, per_repetition, stats_cells, times

LAYOUTS = ("files", "objects-file", "objects-s3")
BATCHES = (20, 1_000, 7_000)
"""Records per append: Mosquitto's default inflight window of QoS 1 messages (20), a middle
size, and about one 1 MiB socket read of 100-byte PUBLISHes (7,000 of ~140 bytes)."""
S3_BUCKET = "wal"


def make_batches(count: int, batch: int, properties: int = 0) -> list[list[RecordTuple]]:
    """``count`` records of a 100-byte payload, QoS cycling 0/1/2, split into batches: plain
    tuples as the receiver builds them, with ``properties`` bytes of properties when not 0."""
    payload = bytes(range(100))
    records: list[RecordTuple] = [
        (
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
    if properties:
        extra = bytes(properties)
        records = [(*record, extra) for record in records]
    return [records[i : i + batch] for i in range(0, count, batch)]


@dataclass(frozen=True, slots=True)
class Measurement:
    """One layout's appends of ``appends`` batches of ``batch`` records, and the read back."""

    layout: str
    batch: int
    repetition: int
    open_seconds: float
    append_seconds: tuple[float, ...]  # wall time of each append call
    cpu_seconds: float  # process CPU time over all the appends
    read_seconds: float  # open_reader + read in ranges of ``batch``

    @property
    def records(self) -> int:
        return self.batch * len(self.append_seconds)

    @property
    def wall(self) -> float:
        return sum(self.append_seconds)

    @property
    def rate(self) -> float:
        """Records appended per second of append calls."""
        return self.records / self.wall

    def as_dict(self) -> dict[str, Any]:
        times = sorted(self.append_seconds)
        return {
            "layout": self.layout,
            "batch": self.batch,
            "repetition": self.repetition,
            "appends": len(times),
            "records": self.records,
            "open_seconds": round(self.open_seconds, 4),
            "append_ms_median": round(statistics.median(times) * 1000, 3),
            "append_ms_p90": round(_percentile(times, 0.9) * 1000, 3),
            "append_ms_min": round(times[0] * 1000, 3),
            "append_ms_max": round(times[-1] * 1000, 3),
            "append_records_per_s": round(self.rate),
            "cpu_ms_per_append": round(self.cpu_seconds / len(times) * 1000, 3),
            "read_records_per_s": round(self.records / self.read_seconds),
        }


def _percentile(ordered: Sequence[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


class Stores:
    """Where each layout's fresh WALs go: directories under ``root``, the S3 server."""

    def __init__(self, root: Path, server: Any | None) -> None:
        self.root = root
        self.server = server
        self._count = 0

    def fresh(self, layout: str) -> tuple[str, Path | None]:
        """A new WAL location for ``layout`` and its local directory (None on S3)."""
        self._count += 1
        name = f"{layout}-{self._count}"
        if layout == "objects-s3":
            assert self.server is not None
            return self.server.uri(S3_BUCKET, name), None
        directory = self.root / name
        if layout == "objects-file":
            return directory.as_uri(), directory
        return str(directory), directory


@contextmanager
def s3_server(root: Path, wanted: bool) -> Iterator[Any | None]:
    """An S3-compatible server on loopback with the bucket ``wal`` (None unless ``wanted``)."""
    if not wanted:
        yield None
        return
    from devtools.s3_server import S3Server

    server = S3Server(root / "s3-server")
    server.start()
    try:
        server.make_bucket(S3_BUCKET)
        yield server
    finally:
        server.close()


def measure(
    stores: Stores, layout: str, batches: list[list[RecordTuple]], fsync: bool, repetition: int
) -> Measurement:
    """Append ``batches`` to a fresh WAL of ``layout``, one call each, then read them back."""
    from connector.wal import WalWriter
    from connector.wal.opening import open_reader, open_writer

    where, directory = stores.fresh(layout)
    began = time.perf_counter()
    writer = WalWriter.open(where, fsync=fsync) if layout == "files" else open_writer(where)
    opened = time.perf_counter() - began
    times = []
    try:
        cpu = time.process_time()
        for records in batches:
            began = time.perf_counter()
            writer.append(records)
            times.append(time.perf_counter() - began)
        cpu = time.process_time() - cpu
        end = writer.next_offset
    finally:
        writer.close()
    size = len(batches[0])
    began = time.perf_counter()
    reader = open_reader(where)
    found = sum(len(reader.read(first, min(end, first + size))) for first in range(0, end, size))
    read = time.perf_counter() - began
    if found != end or end != sum(len(b) for b in batches):
        raise RuntimeError(f"{layout}: appended {end} records, read back {found}")
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
    return Measurement(layout, size, repetition, opened, tuple(times), cpu, read)


def run(
    root: Path,
    layouts: Sequence[str],
    sizes: Sequence[int],
    records: int,
    max_appends: int,
    repeat: int,
    fsync: bool,
    properties: int = 0,
) -> list[Measurement]:
    """Every (repetition, batch size, layout), layouts in turns rotated per repetition."""
    results: list[Measurement] = []
    with s3_server(root, "objects-s3" in layouts) as server:
        stores = Stores(root, server)
        for size in sizes:  # a first, unmeasured append per layout: imports, the S3 client
            for layout in layouts:
                measure(stores, layout, make_batches(size, size, properties), fsync, -1)
        for rep in range(repeat):
            for size in sizes:
                appends = min(max(1, math.ceil(records / size)), max_appends)
                batches = make_batches(appends * size, size, properties)
                order = turn(layouts, rep)
                for layout in order:
                    results.append(measure(stores, layout, batches, fsync, rep))
    return results


def summarize(
    results: list[Measurement], layouts: Sequence[str], sizes: Sequence[int]
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Per (batch, layout): medians over repetitions; per (batch, layout != files): the ratio
    of its records/s to ``files``'s in the same repetition."""
    rows: list[dict[str, Any]] = []
    ratios: dict[str, dict[str, Any]] = {}
    for size in sizes:
        by_layout = {
            layout: sorted(
                (m for m in results if m.batch == size and m.layout == layout),
                key=lambda m: m.repetition,
            )
            for layout in layouts
        }
        for layout, runs in by_layout.items():
            rows.append(
                {
                    "batch": size,
                    "layout": layout,
                    "appends": len(runs[0].append_seconds),
                    "append_ms_median": round(
                        Stats.of(statistics.median(m.append_seconds) for m in runs).median * 1000,
                        3,
                    ),
                    "append_ms_p90": round(
                        Stats.of(_percentile(sorted(m.append_seconds), 0.9) for m in runs).median
                        * 1000,
                        3,
                    ),
                    "records_per_s": Stats.of(m.rate for m in runs).as_dict(0),
                    "cpu_ms_per_append": round(
                        Stats.of(m.cpu_seconds / len(m.append_seconds) for m in runs).median * 1000,
                        3,
                    ),
                    "open_seconds": round(Stats.of(m.open_seconds for m in runs).median, 4),
                    "read_records_per_s": round(
                        Stats.of(m.records / m.read_seconds for m in runs).median
                    ),
                }
            )
        if "files" in by_layout:
            base = [m.rate for m in by_layout["files"]]
            for layout, runs in by_layout.items():
                if layout != "files":
                    name = f"{layout}/files, {size:,} records per append"
                    ratios[name] = paired_ratio([m.rate for m in runs], base).as_dict(4)
    return rows, ratios


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """One append's cost per WAL layout."""
    params = data.get("parameters", {})
    fsync = ", fsync per append" if params.get("files_fsync") else ", no fsync"
    out = [
        f"Appends of N records ({params.get('payload_bytes')}-byte payloads) to a fresh WAL per "
        f"layout: `files` (a local directory{fsync}), `objects-file` (a `file://` URI on the "
        "same disk, one part file per append), `objects-s3` (one PUT per append to the S3 "
        f"server on loopback); at most {num(params.get('max_appends'))} appends per "
        f"measurement; {params.get('order')}; ratio to `files` in the same repetition at the "
        "same N.",
        "",
    ]
    ratios = data.get("ratios", {})
    rows = []
    for row in data["rows"]:
        layout, batch = row["layout"], int(row["batch"])
        stats = ratios.get(f"{layout}/files, {batch:,} records per append")
        rows.append(
            [
                num(batch),
                layout,
                num(row["append_ms_median"], 2),
                num(row["append_ms_p90"], 2),
                *stats_cells(row["records_per_s"]),
                num(row.get("cpu_ms_per_append"), 2),
                per_repetition(stats) if isinstance(stats, Mapping) else "",
                times(stats.get("median")) if isinstance(stats, Mapping) else "",
            ]
        )
    return out + md_table(
        ["records per append", "layout", "ms/append p50", "p90", "records/s median", "min",
         "max", "CPU ms/append", "ratio to files, per repetition", "median"],
        rows,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.wal_throughput", description=__doc__)
    parser.add_argument("--records", type=int, default=100_000, help="records per measurement")
    parser.add_argument("--batch", type=int, nargs="+", default=list(BATCHES), help="per append")
    parser.add_argument(
        "--max-appends", type=int, default=200,
        help="appends per measurement at most (small batches on S3 would take minutes)",
    )  # fmt: skip
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-fsync", action="store_true", help="files layout without fsync")
    parser.add_argument(
        "--properties", type=int, default=0, metavar="BYTES",
        help="MQTT 5 records with this many property bytes each (default 0: 3.1.1 records)",
    )  # fmt: skip
    parser.add_argument("--output", type=Path, help="results file")
    args = parser.parse_args(argv)
    if args.records < 1 or args.max_appends < 1 or args.repeat < 1 or min(args.batch) < 1:
        parser.error("--records, --batch, --max-appends and --repeat must be >= 1")
    layouts: list[str] = list(dict.fromkeys(args.layouts))
    sizes: list[int] = list(dict.fromkeys(args.batch))
    if "objects-s3" in layouts:
        from devtools.s3_server import use_test_credentials

        use_test_credentials()  # before the first S3 client
    info = machine("pyarrow")
    with tempfile.TemporaryDirectory(prefix="bench-wal-") as tmp:
        results = run(
            Path(tmp), layouts, sizes, args.records, args.max_appends, args.repeat,
            not args.no_fsync, args.properties,
        )  # fmt: skip
    rows, ratios = summarize(results, layouts, sizes)
    data = {
        "benchmark": "wal_throughput",
        "machine": info,
        "parameters": {
            "layouts": layouts,
            "records_per_append": sizes,
            "records": args.records,
            "max_appends": args.max_appends,
            "repeat": args.repeat,
            "payload_bytes": 100,
            "property_bytes": args.properties,
            "files_fsync": not args.no_fsync,
            "order": "per repetition and batch size, every layout once, order rotated",
        },
        "rows": rows,
        "ratios": ratios,
        "runs": [m.as_dict() for m in results],
    }
    return finish("wal_throughput", data, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
