"""WAL appends per layout (``python -m bench.wal_throughput``): one append of N records to
``files`` (fsync), ``objects-file`` and ``objects-s3`` (an S3 server on loopback), layouts in
turns; ratios to ``files`` paired by repetition."""

from __future__ import annotations

import math
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connector.wal import RecordTuple

from .common import Stats, arguments, finish, machine, paired_ratio, turn
from .render import Charts, Lines, md_table, num, per_repetition, stats_cells, times

LAYOUTS = ("files", "objects-file", "objects-s3")
BATCHES = (20, 1_000, 7_000)
"""Records per append: Mosquitto's default inflight window (20), a middle size, and about one
1 MiB socket read of 100-byte PUBLISHes."""


def make_batches(count: int, batch: int, properties: int = 0) -> list[list[RecordTuple]]:
    """``count`` records of 100-byte payloads, QoS 0/1/2 in turns, as the receiver builds them."""
    payload, extra = bytes(range(100)), ((bytes(properties),) if properties else ())
    records: list[RecordTuple] = [
        (f"sensors/site-{i % 10}/temperature", payload, i % 3, False, False,
         None if i % 3 == 0 else i % 65535 + 1, 1_700_000_000_000_000 + i, *extra)
        for i in range(count)
    ]  # fmt: skip
    return [records[i : i + batch] for i in range(0, count, batch)]


@dataclass(frozen=True, slots=True)
class Measurement:
    """One layout's appends of batches of ``batch`` records."""

    layout: str
    batch: int
    repetition: int
    append_seconds: tuple[float, ...]  # wall time of each append call
    cpu_seconds: float  # process CPU time over all the appends

    @property
    def records(self) -> int:
        return self.batch * len(self.append_seconds)

    @property
    def rate(self) -> float:
        """Records appended per second of append calls."""
        return self.records / sum(self.append_seconds)


def _percentile(ordered: Sequence[float], q: float = 0.9) -> float:
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _median(runs: Sequence[Measurement], seconds: Callable[[Measurement], float]) -> float:
    """The median of ``seconds`` over ``runs``, in ms."""
    return round(Stats.of(seconds(m) for m in runs).median * 1000, 3)


def measure(
    where: str, layout: str, batches: list[list[RecordTuple]], fsync: bool, repetition: int
) -> Measurement:
    """Append ``batches`` to a fresh WAL of ``layout``, one call each, checked by a read back."""
    from connector.wal import WalWriter
    from connector.wal.opening import open_reader, open_writer

    writer = WalWriter.open(where, fsync=fsync) if layout == "files" else open_writer(where)
    spent = []
    try:
        cpu = time.process_time()
        for records in batches:
            began = time.perf_counter()
            writer.append(records)
            spent.append(time.perf_counter() - began)
        cpu = time.process_time() - cpu
        end = writer.next_offset
    finally:
        writer.close()
    size, reader = len(batches[0]), open_reader(where)
    found = sum(len(reader.read(first, min(end, first + size))) for first in range(0, end, size))
    if found != end or end != sum(len(b) for b in batches):
        raise RuntimeError(f"{layout}: appended {end} records, read back {found}")
    return Measurement(layout, size, repetition, tuple(spent), cpu)


def run(root: Path, args: Any, layouts: Sequence[str], sizes: Sequence[int]) -> list[Measurement]:
    """Every repetition, size and layout in turns, after an unmeasured append of each."""
    from .ingest_s3 import S3Store

    s3 = S3Store.start(root / "s3-server") if "objects-s3" in layouts else None
    results: list[Measurement] = []
    made = 0

    def fresh(layout: str, batches: list[list[RecordTuple]], rep: int) -> Measurement:
        nonlocal made
        made += 1
        directory = root / f"{layout}-{made}"
        if layout == "objects-s3" and s3 is not None:
            where = s3.fresh(layout)
        else:
            where = directory.as_uri() if layout == "objects-file" else str(directory)
        found = measure(where, layout, batches, not args.no_fsync, rep)
        shutil.rmtree(directory, ignore_errors=True)
        return found

    try:
        for size in sizes:
            for layout in layouts:
                fresh(layout, make_batches(size, size, args.properties), -1)
        for rep in range(args.repeat):
            for size in sizes:
                appends = min(max(1, math.ceil(args.records / size)), args.max_appends)
                batches = make_batches(appends * size, size, args.properties)
                for layout in turn(layouts, rep):
                    results.append(fresh(layout, batches, rep))
    finally:
        if s3 is not None:
            s3.close()
    return results


def summarize(
    results: list[Measurement], layouts: Sequence[str], sizes: Sequence[int]
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Medians per (batch, layout), and ratios to ``files`` paired by repetition."""
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
        rows += [
            {
                "batch": size,
                "layout": layout,
                "append_ms_median": _median(runs, lambda m: statistics.median(m.append_seconds)),
                "append_ms_p90": _median(runs, lambda m: _percentile(sorted(m.append_seconds))),
                "records_per_s": Stats.of(m.rate for m in runs).as_dict(0),
                "cpu_ms_per_append": _median(runs, lambda m: m.cpu_seconds / len(m.append_seconds)),
            }
            for layout, runs in by_layout.items()
        ]
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
        paired = isinstance(stats, Mapping)
        rows.append([
            num(batch), layout, num(row["append_ms_median"], 2), num(row["append_ms_p90"], 2),
            *stats_cells(row["records_per_s"]), num(row.get("cpu_ms_per_append"), 2),
            per_repetition(stats) if paired else "", times(stats.get("median")) if paired else "",
        ])  # fmt: skip
    return out + md_table(
        ["records per append", "layout", "ms/append p50", "p90", "records/s median", "min",
         "max", "CPU ms/append", "ratio to files, per repetition", "median"],
        rows,
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments("wal_throughput", __doc__, repeat=3)
    parser.add_argument("--records", type=int, default=100_000, help="records per measurement")
    parser.add_argument("--batch", type=int, nargs="+", default=list(BATCHES), help="per append")
    parser.add_argument("--max-appends", type=int, default=200, help="per measurement at most")
    parser.add_argument("--layouts", nargs="+", choices=LAYOUTS, default=list(LAYOUTS))
    parser.add_argument("--no-fsync", action="store_true", help="files layout without fsync")
    parser.add_argument(
        "--properties", type=int, default=0, metavar="BYTES",
        help="MQTT 5 records with this many property bytes each (default 0: 3.1.1 records)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if min(args.records, args.max_appends, *args.batch) < 1:
        parser.error("--records, --batch and --max-appends must be >= 1")
    layouts: list[str] = list(dict.fromkeys(args.layouts))
    sizes: list[int] = list(dict.fromkeys(args.batch))

    def results() -> dict[str, Any]:
        info = machine("pyarrow")
        with tempfile.TemporaryDirectory(prefix="bench-wal-") as tmp:
            found = run(Path(tmp), args, layouts, sizes)
        rows, ratios = summarize(found, layouts, sizes)
        params = {
            "layouts": layouts, "records_per_append": sizes, "records": args.records,
            "max_appends": args.max_appends, "repeat": args.repeat, "payload_bytes": 100,
            "property_bytes": args.properties, "files_fsync": not args.no_fsync,
            "order": "per repetition and batch size, every layout once, order rotated",
        }  # fmt: skip
        return {"machine": info, "parameters": params, "rows": rows, "ratios": ratios}

    return finish("wal_throughput", results, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
