"""Writing to MQTT (``python -m bench.sink``): rows per second from ``df.write.format("mqtt")``
and from the writer's task publisher alone, against paho publishing the same messages; peers in
turns, each on a fresh Mosquitto, done when the broker acknowledged every message."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

from .common import BenchError, Stats, arguments, finish, in_turns, machine_info, paired_ratio
from .ingest import spark_session
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


def spark_peer(spark: Any, count: int, size: int, partitions: int) -> Callable[[str, int], float]:
    """``df.write.format("mqtt")`` of the messages, cached in ``partitions`` partitions."""
    filler = "x" * max(0, size - SEQUENCE_DIGITS)
    frame = (
        spark.range(count, numPartitions=partitions)
        .selectExpr(
            f"concat('bench/sink/', cast(id % {TOPICS} as string)) AS topic",
            f"encode(substr(concat(lpad(cast(id as string), {SEQUENCE_DIGITS}, '0'), "
            f"'{filler}'), 1, {size}), 'UTF-8') AS payload",
        )
        .cache()
    )
    if frame.count() != count:
        raise BenchError("the cached frame does not hold every message")

    def run(url: str, qos: int) -> float:
        start = time.perf_counter()
        writer = frame.write.format("mqtt").mode("append").option("brokerUrl", url)
        writer.option("qos", str(qos)).save()
        return count / (time.perf_counter() - start)

    return run


def on_fresh_broker(run: Callable[..., float], *args: Any) -> float:
    """``run(url, *args)`` on a fresh Mosquitto."""
    from devtools.mosquitto import MosquittoBroker

    with MosquittoBroker(log_types=()) as broker:
        return run(broker.url, *args)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """Writing to MQTT: messages/s per peer and QoS, and the paired ratios against paho."""
    params = data["params"]
    rows = [
        [
            qos,
            *(num(result["rates"][peer]["median"]) for peer in PEERS),
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
    parser = arguments("sink", __doc__, messages=20_000, repeat=3, size=100)
    parser.add_argument("--qos", type=int, nargs="+", default=[1, 2], choices=(0, 1, 2))
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args(argv)

    def measure() -> dict[str, Any]:
        info = machine_info()
        spark = spark_session("bench-sink")
        try:
            spark_run = spark_peer(spark, args.messages, args.size, args.partitions)
            on_fresh_broker(spark_run, 1)  # the warm-up

            def publish(url: str, peer: str, qos: int) -> float:
                if peer == "spark":
                    return spark_run(url, qos)
                runner = run_task if peer == "task" else run_paho
                return runner(url, args.messages, args.size, qos)

            by_qos: dict[str, Any] = {}
            for qos in args.qos:
                rates: dict[str, list[float]] = {peer: [] for peer in PEERS}
                for rep, peer in in_turns(PEERS, args.repeat):
                    rates[peer].append(on_fresh_broker(publish, peer, qos))
                    print(f"qos {qos} rep {rep + 1} {peer}: {num(rates[peer][-1])} msg/s")
                by_qos[str(qos)] = {
                    "rates": {peer: Stats.of(values).as_dict(1) for peer, values in rates.items()},
                    "spark/paho": paired_ratio(rates["spark"], rates["paho"]).as_dict(),
                    "task/paho": paired_ratio(rates["task"], rates["paho"]).as_dict(),
                }
        finally:
            spark.stop()
        params = {k: vars(args)[k] for k in ("messages", "size", "repeat", "partitions")}
        return {"machine": info, "params": params, "qos": by_qos}

    return finish("sink", measure, args.output, section)


if __name__ == "__main__":
    raise SystemExit(main())
