"""Messages per second into Delta with one receiver vs several (``receivers`` option).

Each run: a fresh Mosquitto, the query's persistent sessions created first, then a backlog of
``--messages`` QoS 1 messages of 100 bytes queued by the broker; the clock runs from the
query's start until Spark reports every message written to the Delta table (local[2],
``partitionData=wal``). ``receivers=1`` and ``receivers=N`` alternate for ``--rounds`` rounds
in the same process and the ratio is taken per round (paired), so machine load that drifts
over time hits both sides alike. Usage::

    .venv/bin/python -m bench.shards [--messages 200000] [--receivers 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import (
    Stats,
    create_session,
    describe_machine,
    format_table,
    machine_info,
    paired_ratio,
    publish_windowed,
    rate,
    ratio,
    write_results,
)
from connector.mqtt.topics import SHARE_PREFIX

TOPIC = "bench/shards/t"
FILTER = "bench/shards/#"
PAYLOAD = b"x" * 100
TIMEOUT = 900.0


def create_sessions(url: str, client_id: str, receivers: int) -> None:
    """The persistent sessions the query will use, so that the broker queues the backlog."""
    if receivers == 1:
        sessions = [(client_id, FILTER)]
    else:
        sessions = [
            (f"{client_id}-{i}", f"{SHARE_PREFIX}{client_id}/{FILTER}") for i in range(receivers)
        ]
    for session_id, topic_filter in sessions:
        create_session(url, session_id, topic_filter)


def publish(url: str, count: int) -> None:
    """Publish ``count`` QoS 1 messages, at most Mosquitto's window unacknowledged."""
    publish_windowed(url, count, lambda _seq: (TOPIC, PAYLOAD), TIMEOUT)


def one_run(spark: Any, workdir: Path, count: int, receivers: int, tag: str) -> float:
    """Messages per second for one drain of a ``count`` backlog with ``receivers``."""
    from devtools.mosquitto import MosquittoBroker

    base = workdir / tag
    client_id = f"bsh-{receivers}-{tag}"
    broker = MosquittoBroker(base / "broker", max_queued_messages=2 * count + 1000)
    broker.start()
    try:
        create_sessions(broker.url, client_id, receivers)
        publish(broker.url, count)
        reader = (
            spark.readStream.format("mqtt")
            .option("brokerUrl", broker.url)
            .option("topic", FILTER)
            .option("clientId", client_id)
            .option("walPath", str(base / "wal"))
            .option("partitionData", "wal")
            .option("receivers", str(receivers))
        )
        start = time.monotonic()
        query = (
            reader.load()
            .writeStream.format("delta")
            .option("checkpointLocation", str(base / "checkpoint"))
            .trigger(processingTime="200 milliseconds")
            .start(str(base / "table"))
        )
        try:
            seen: set[int] = set()
            landed = 0
            while landed < count:
                if time.monotonic() - start > TIMEOUT:
                    raise RuntimeError(f"only {landed} of {count} rows landed")
                if query.exception() is not None:
                    raise RuntimeError(f"query failed: {query.exception()}")
                for progress in query.recentProgress:
                    if progress.batchId not in seen:
                        seen.add(progress.batchId)
                        landed += progress.numInputRows
                time.sleep(0.05)
            elapsed = time.monotonic() - start
        finally:
            query.stop()
        rows = spark.read.format("delta").load(str(base / "table")).count()
        if rows != count:
            raise RuntimeError(f"{rows} rows in the table, expected {count}")
        return count / elapsed
    finally:
        broker.close()
        shutil.rmtree(base, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--receivers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)

    from streaming_jobs.spark_session import local_spark

    spark = local_spark("bench-shards", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    workdir = Path(tempfile.mkdtemp(prefix="bench-shards-"))
    one: list[float] = []
    many: list[float] = []
    loads = []
    try:
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            one.append(one_run(spark, workdir, args.messages, 1, f"r{r}a"))
            many.append(one_run(spark, workdir, args.messages, args.receivers, f"r{r}b"))
            print(
                f"round {r}: receivers=1 {rate(one[-1])} msg/s, "
                f"receivers={args.receivers} {rate(many[-1])} msg/s",
                flush=True,
            )
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    info = machine_info()
    gain = paired_ratio(many, one)
    print(describe_machine(info))
    print(f"load average (1 min) at each round's start: {', '.join(f'{x:.1f}' for x in loads)}")
    print(
        format_table(
            ["receivers", "median msg/s into Delta", "runs"],
            [
                ["1", rate(Stats.of(one).median), len(one)],
                [str(args.receivers), rate(Stats.of(many).median), len(many)],
            ],
        )
    )
    print(f"receivers={args.receivers} / receivers=1: {ratio(gain.median)} (paired median)")
    write_results(
        "shards",
        {
            "machine": info,
            "load_average_1min": loads,
            "messages": args.messages,
            "payload_bytes": len(PAYLOAD),
            "qos": 1,
            "receivers": args.receivers,
            "rate_one": Stats.of(one).as_dict(),
            "rate_many": Stats.of(many).as_dict(),
            "ratio": gain.as_dict(),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
