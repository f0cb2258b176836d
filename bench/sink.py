"""Writing to MQTT: rows per second published from Spark, against paho publishing the same
messages in the same run.

Peers, in turns in every repetition (the order rotates), each on a fresh Mosquitto, each
publishing N messages of S bytes (default 20,000 of 100) on 4 topics at QoS Q, done when the
broker has acknowledged every one (QoS 0: when the last byte is written and the connection
closed with DISCONNECT):

* ``spark``: ``df.write.format("mqtt").mode("append").save()`` of a cached DataFrame of the
  messages in P partitions (default 2, local[2]: two tasks, two connections), the clock around
  ``save()``;
* ``task``: the writer's task publisher (``connector.spark.writer.task``) alone, one connection,
  no Spark: what the client costs without Spark's job around it;
* ``paho``: paho-mqtt 2.x, one connection, its default window of 20 QoS 1/2 messages in flight
  (the writer's ``maxInflight`` default), ``loop_start``'s thread.

Reported: messages/s per peer (medians of R repetitions) and the ratios spark/paho and
task/paho paired per repetition.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

from .common import BenchError, Stats, finish, machine_info, paired_ratio, turn
from .payloads import numbered as payload
from .render import Charts, Lines, md_table, num, times

PEERS = ("spark", "task", "paho")
TOPICS = 4
TIMEOUT = 600.0


def run_paho(url: str, count: int, size: int, qos: int) -> float:
    import paho.mqtt.client as mqtt

    host, port = url.removeprefix("tcp://").rsplit(":", 1)
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"bench-paho-{time.time_ns()}")
    done = threading.Event()
    acked = [0]

    def on_publish(*_: object) -> None:
        acked[0] += 1
        if acked[0] == count:
            done.set()

    client.on_publish = on_publish
    client.connect(host, int(port))
    client.loop_start()
    try:
        start = time.perf_counter()
        for seq in range(count):
            client.publish(f"bench/sink/{seq % TOPICS}", payload(seq, size), qos=qos)
        if not done.wait(TIMEOUT):
            raise BenchError(f"paho: {acked[0]} of {count} acknowledged")
        elapsed = time.perf_counter() - start
    finally:
        client.disconnect()
        client.loop_stop()
    return count / elapsed


def run_task(url: str, count: int, size: int, qos: int) -> float:
    from connector.spark.writer.options import SinkOptions
    from connector.spark.writer.rows import OutMessage
    from connector.spark.writer.task import TaskIdentity, TaskPublisher

    options = SinkOptions.parse({"brokerUrl": url, "qos": str(qos)})
    messages = [
        OutMessage(f"bench/sink/{seq % TOPICS}", payload(seq, size), qos, False, None)
        for seq in range(count)
    ]
    publisher = TaskPublisher(options, TaskIdentity(f"bench-{time.time_ns()}", 0, 0, 0, 0))
    start = time.perf_counter()
    tally = publisher.run([messages])
    elapsed = time.perf_counter() - start
    if tally.rows != count:
        raise BenchError(f"task: published {tally.rows} of {count}")
    return count / elapsed


class SparkPeer:
    """One Spark session for the run, and the cached messages."""

    def __init__(self, count: int, size: int, partitions: int) -> None:
        from streaming_jobs.spark_session import local_spark

        self.spark = local_spark("bench-sink")
        self.spark.sparkContext.setLogLevel("ERROR")
        filler = "x" * max(0, size - SEQUENCE_DIGITS)
        self.frame = (
            self.spark.range(count, numPartitions=partitions)
            .selectExpr(
                f"concat('bench/sink/', cast(id % {TOPICS} as string)) AS topic",
                f"encode(substr(concat(lpad(cast(id as string), {SEQUENCE_DIGITS}, '0'), "
                f"'{filler}'), 1, {size}), 'UTF-8') AS payload",
            )
            .cache()
        )
        if self.frame.count() != count:
            raise BenchError("the cached frame does not hold every message")
        self.count = count

    def run(self, url: str, qos: int) -> float:
        start = time.perf_counter()
        (
            self.frame.write.format("mqtt")
            .mode("append")
            .option("brokerUrl", url)
            .option("qos", str(qos))
            .save()
        )
        return self.count / (time.perf_counter() - start)

    def stop(self) -> None:
        self.spark.stop()


def measure(args: argparse.Namespace, qos: int, spark: SparkPeer) -> dict[str, Any]:
    from devtools.mosquitto import MosquittoBroker

    rates: dict[str, list[float]] = {peer: [] for peer in PEERS}
    for rep in range(args.repeat):
        order = turn(PEERS, rep)
        for peer in order:
            with tempfile.TemporaryDirectory(prefix="bench-sink-") as tmp:
                broker = MosquittoBroker(Path(tmp), log_types=())
                broker.start()
                try:
                    if peer == "spark":
                        value = spark.run(broker.url, qos)
                    elif peer == "task":
                        value = run_task(broker.url, args.messages, args.size, qos)
                    else:
                        value = run_paho(broker.url, args.messages, args.size, qos)
                finally:
                    broker.stop()
            rates[peer].append(value)
            print(f"qos {qos} rep {rep + 1} {peer}: {num(value)} msg/s", flush=True)
    return {
        "rates": {peer: Stats.of(values).as_dict(1) for peer, values in rates.items()},
        "spark/paho": paired_ratio(rates["spark"], rates["paho"]).as_dict(),
        "task/paho": paired_ratio(rates["task"], rates["paho"]).as_dict(),
    }


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Writing to MQTT: messages/s per peer and QoS, and the paired ratios against paho."""
    params = data["params"]
    peers = ("spark", "task", "paho")
    rows = [
        [
            qos,
            *(num(result["rates"][peer]["median"]) for peer in peers),
            times(result["spark/paho"]["median"]),
            times(result["task/paho"]["median"]),
        ]
        for qos, result in data["qos"].items()
    ]
    return [
        f"{params['messages']:,} messages of {params['size']} bytes per run, medians of "
        f"{params['repeat']} repetitions (peers in turns, each on a fresh Mosquitto); `spark` is "
        f'`df.write.format("mqtt")` in {params["partitions"]} partitions (local[2]), `task` '
        "the writer's task publisher alone (one connection, no Spark), `paho` paho-mqtt with "
        "its window of 20. Done when the broker acknowledged every message.",
        "",
        *md_table(
            ["QoS", "spark msg/s", "task msg/s", "paho msg/s", "spark/paho", "task/paho"], rows
        ),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sink", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--qos", type=int, nargs="+", default=[1, 2], choices=(0, 1, 2))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--output", type=Path, help="results file")
    args = parser.parse_args(argv)
    info = machine_info()
    spark = SparkPeer(args.messages, args.size, args.partitions)
    try:
        from devtools.mosquitto import MosquittoBroker

        with tempfile.TemporaryDirectory(prefix="bench-sink-") as tmp:
            broker = MosquittoBroker(Path(tmp), log_types=())
            broker.start()
            try:
                spark.run(broker.url, 1)
            finally:
                broker.stop()
        by_qos = {str(qos): measure(args, qos, spark) for qos in args.qos}
    finally:
        spark.stop()
    data: dict[str, Any] = {
        "machine": info,
        "params": {
            "messages": args.messages,
            "size": args.size,
            "repeat": args.repeat,
            "partitions": args.partitions,
        },
        "qos": by_qos,
    }
    return finish("sink", data, args.output, section)


if __name__ == "__main__":
    raise SystemExit(main())
