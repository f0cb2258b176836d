"""The small costs behind choices the code makes (``python -m bench.micro``), each against its
alternative in the same run: enum reads, WAL records, CRC32, the receiver's figures, one PySpark
``Column``."""

from __future__ import annotations

import tempfile
import time
import timeit
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from connector.mqtt.packets import PacketType
from connector.receiver.figures import ARRIVAL_RESOLUTION_US, ArrivalIndex, RateMeter
from connector.wal import WalWriter
from connector.wal.records import NewRecord

from .common import Stats, arguments, finish, machine_info
from .render import Charts, Lines, md_table

_PUBLISH = PacketType.PUBLISH


def per_call_ns(statement: Callable[[], object], number: int, repeat: int) -> Stats:
    """Nanoseconds per call of ``statement`` (a loop of ``number`` calls, ``repeat`` times)."""
    timer = timeit.Timer(statement)
    return Stats.of(t / number * 1e9 for t in timer.repeat(repeat=repeat, number=number))


def enum_member(repeat: int) -> dict[str, Any]:
    def through_class() -> object:
        return PacketType.PUBLISH

    def module_name() -> object:
        return _PUBLISH

    return {
        "through the class": per_call_ns(through_class, 1_000_000, repeat).as_dict(1),
        "module name": per_call_ns(module_name, 1_000_000, repeat).as_dict(1),
    }


def record_build(repeat: int) -> dict[str, Any]:
    topic, payload = "plant/line-3/sensor-17/telemetry", b"x" * 100

    def named() -> object:
        return NewRecord(topic, payload, 1, False, False, 17, 1_700_000_000_000_000, b"")

    def plain() -> object:
        return (topic, payload, 1, False, False, 17, 1_700_000_000_000_000, b"")

    nt, tp = per_call_ns(named, 300_000, repeat), per_call_ns(plain, 300_000, repeat)
    return {
        "NewRecord (NamedTuple)": nt.as_dict(1),
        "plain tuple": tp.as_dict(1),
        "ratio": round(nt.median / tp.median, 2),
    }


def crc32_rate(repeat: int) -> dict[str, Any]:
    data = bytes(range(256)) * (64 * 1024 * 1024 // 256)
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        zlib.crc32(data)
        seconds.append(time.perf_counter() - started)
    return {"GB/s": Stats.of(len(data) / s / 1e9 for s in seconds).as_dict(2)}


def append_figures(repeat: int, directory: Path) -> dict[str, Any]:
    """Nanoseconds per append of the receiver's figures and of a 64-message WAL append."""
    records = [("plant/line-3/s/t", b"x" * 100, 1, False, False, n + 1, 0) for n in range(64)]
    arrivals, rate = ArrivalIndex(), RateMeter(time.monotonic())
    count = [0]

    def figures() -> None:
        count[0] += 64
        arrivals.note(count[0], count[0] * ARRIVAL_RESOLUTION_US)
        rate.note(64, time.monotonic())

    with WalWriter.open(directory / "wal", fsync=False) as wal:

        def append() -> None:
            wal.append(records)

        kept, appended = per_call_ns(figures, 20_000, repeat), per_call_ns(append, 2_000, repeat)
    return {
        "figures": kept.as_dict(1),
        "append": appended.as_dict(1),
        "share": round(kept.median / appended.median, 4),
    }


def py4j_column(repeat: int) -> dict[str, Any]:
    """Milliseconds to build one ``F.col(name).alias(other)`` in a local Spark session."""
    from pyspark.sql import functions as F

    from .ingest import spark_session

    spark = spark_session("bench-micro", master="local[1]")
    try:
        F.col("warm").alias("up")
        per_column = []
        for _ in range(repeat):
            started = time.perf_counter()
            for n in range(200):
                F.col(f"c{n}").alias(f"a{n}")
            per_column.append((time.perf_counter() - started) / 200 * 1000)
        return {"ms per column": Stats.of(per_column).as_dict(3)}
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments("micro", __doc__, repeat=7)
    parser.add_argument("--no-spark", action="store_true", help="skip the Py4J measurement")
    args = parser.parse_args(argv)

    def measure() -> dict[str, Any]:
        data: dict[str, Any] = {
            "machine": machine_info(),
            "enum member": enum_member(args.repeat),
            "record build": record_build(args.repeat),
            "crc32": crc32_rate(args.repeat),
        }
        with tempfile.TemporaryDirectory() as directory:
            data["append figures"] = append_figures(args.repeat, Path(directory))
        if not args.no_spark:
            data["py4j column"] = py4j_column(args.repeat)
        return data

    return finish("micro", measure, args.output, section)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """The small costs the code's comments refer to, each beside its alternative."""
    enum, record, crc = data["enum member"], data["record build"], data["crc32"]
    rows = [
        [
            "an enum member read through its class / as a module name (per-message paths of "
            "`connector.mqtt.decode`, `properties`)",
            f"{enum['through the class']['median']} ns / {enum['module name']['median']} ns",
        ],
        [
            "a WAL record built as `NewRecord` (NamedTuple) / as a plain tuple "
            "(`connector.receiver.receiver`, per message)",
            f"{record['NewRecord (NamedTuple)']['median']} ns / "
            f"{record['plain tuple']['median']} ns ({record['ratio']}x)",
        ],
        [
            "CRC32 over segment bytes, what bounds WAL recovery's read (`connector.wal.recovery`)",
            f"{crc['GB/s']['median']} GB/s",
        ],
    ]
    if (figures := data.get("append figures")) is not None:
        rows.append(
            [
                "the receiver's figures kept per WAL append (`connector.receiver.figures`) "
                "/ the append of 64 messages of 100 bytes without fsync",
                f"{figures['figures']['median']} ns / {figures['append']['median']} ns "
                f"({figures['share'] * 100:.2f}%)",
            ]
        )
    if "py4j column" in data:
        rows.append(
            [
                "one PySpark `Column` built (`F.col(...).alias(...)`, Py4J round trips), why "
                "the job builds its projections once (`streaming_jobs.projections`)",
                f"{data['py4j column']['ms per column']['median']} ms",
            ]
        )
    return md_table(["what", "median"], rows)


if __name__ == "__main__":
    raise SystemExit(main())
