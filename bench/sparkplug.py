"""Sparkplug B into Delta: metrics per second, against raw MQTT rows of the same messages.

``python -m bench.sparkplug [--messages N] [--metrics M] [--nodes K] [--repeat R]
[--warmup-rounds W] [--sink job|delta] [--trigger T] [--source-option KEY=VALUE]
[--decoder-repeat D] [--profile] [--output FILE]``

The backlog: K edge nodes (default 1) of group ``bench``, each first an NBIRTH (seq 0, bdSeq 0)
defining M metrics (default 10: Int32, Int64, Double, Boolean and String in turns, aliases 1..M),
then N NDATA messages (default 20,000, round robin over the nodes) carrying those M metrics by
alias only, the seq of each node counting 1, 2, ... and wrapping at 255. The payloads are made
with pysparkplug's protobuf classes (``tests/sparkplug_payloads.py``), never the product's code.
Sparkplug sends DATA at QoS 0, which a broker does not queue for an offline client: to make a
backlog, every message is published (at most 20 in flight) and subscribed at QoS 1, so the
broker queues it for the peer's persistent session, as ``bench.ingest`` does.

Peers, in turns in every repetition (the order rotates), each on a fresh Mosquitto holding a
fresh backlog of the same bytes:

* ``sparkplug``: the ingest job's query with ``--payload-format sparkplug`` (the source's
  ``payloadFormat`` ``sparkplug``): a row per metric, the births' bdSeq included, names and
  datatypes resolved from the births;
* ``raw``: the same query with the default ``payloadFormat``: a row per message, the payload
  as bytes.

Both are written as ``bench.ingest`` writes (``--sink``): by default the job's own
``foreachBatch`` writer (table created before the query, outside the clock), or Spark's Delta
sink; ``partitionData`` wal (the job's default on a local master), local[2], trigger 0 seconds.
The clock is ``bench.ingest``'s headline: from the start of the first batch with input rows to
the end of the batch that completes the rows (the query's progress events). Before the
measured repetitions, ``--warmup-rounds`` unmeasured rounds (every peer once); before every run
a full GC of the driver JVM. Reported: messages/s and rows/s (metrics/s) per peer, and the
ratio sparkplug/raw in messages/s paired per repetition. Every table is checked after its query
stopped: raw, one row per message with every offset once and the payload bytes in full;
sparkplug, the expected metric rows, each (offset, metric index) once, every name resolved and
no reason.

The decoder alone (no Spark, in this process, before the Spark JVM starts): the source's
decoding of a partition, ``connector.sparkplug.messages.decode_messages`` over the same
messages, then ``to_record_batch`` (the rows as Arrow), and ``fold``, the planner's pass that
only advances the state; medians of ``--decoder-repeat`` runs. ``--profile`` adds cProfile's top
functions by cumulative time of decode + Arrow on the same messages.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from connector.sparkplug.state import SEQ_MODULO

from .common import (
    MOSQUITTO_INFLIGHT,
    RESULTS_DIR,
    BenchError,
    Stats,
    create_session,
    describe_machine,
    format_table,
    machine_info,
    package_version,
    paired_ratio,
    publish_windowed,
    rate,
    ratio,
    write_results,
)
from .cpu_sampler import COMPONENTS, NOT_THE_PIPELINE
from .ingest import (
    CLOCKS,
    FIRST_BATCH,
    SINK_NAMES,
    SINKS,
    Backlog,
    Landing,
    Setup,
    _landing_dict,
    _others_share,
    collect_garbage,
    job_sink_available,
    phase_table,
    run_query,
)
from .ingest import stream_writer as raw_stream_writer

GROUP = "bench"
TOPIC_FILTER = f"spBv1.0/{GROUP}/#"
SPARKPLUG, RAW = "sparkplug", "raw"
PEERS = (SPARKPLUG, RAW)
RATIO = f"{SPARKPLUG}/{RAW}"
QOS = 1
PAYLOAD_TIMESTAMP_MS = 1_700_000_000_000
KINDS: tuple[tuple[str, int, str], ...] = (
    ("Int32", 3, "int_value"),
    ("Int64", 4, "long_value"),
    ("Double", 10, "double_value"),
    ("Boolean", 11, "boolean_value"),
    ("String", 12, "string_value"),
)
"""The metrics' datatypes in turns: name, Sparkplug datatype code, the payload's value field."""
DEFAULT_MESSAGES = 20_000
DEFAULT_METRICS = 10
OUTPUT = RESULTS_DIR / "sparkplug.json"


# ------------------------------------------------------------------------------ messages


def metric_name(index: int) -> str:
    """The name the births give metric ``index`` (alias ``index + 1``), e.g. ``m03_Boolean``."""
    return f"m{index:02d}_{KINDS[index % len(KINDS)][0]}"


def metric_value(index: int, sample: int) -> Any:
    """Metric ``index``'s value in the node's ``sample``-th message (0: the birth), as decoded:
    Int32 values are negative half of the time."""
    kind = KINDS[index % len(KINDS)][0]
    if kind == "Int32":
        return (sample * 31 + index) % 2_000 - 1_000
    if kind == "Int64":
        return sample * 1_000_003 + index
    if kind == "Double":
        return sample / 8 + index
    if kind == "Boolean":
        return (sample + index) % 2 == 0
    return f"state-{(sample + index) % 7}"


def _wire_value(index: int, sample: int) -> Any:
    """As the payload carries it: an Int32 sign-extended to 32 bits (as Tahu does)."""
    value = metric_value(index, sample)
    return value & 0xFFFFFFFF if KINDS[index % len(KINDS)][0] == "Int32" else value


def node_topic(kind: str, node: int) -> str:
    return f"spBv1.0/{GROUP}/{kind}/edge-{node}"


def backlog_messages(messages: int, metrics: int, nodes: int = 1) -> list[tuple[str, bytes]]:
    """(topic, payload) of the backlog: every node's NBIRTH, then ``messages`` alias-only
    NDATA messages, round robin over the nodes."""
    from devtools.sparkplug_payloads import birth, data

    out = []
    for node in range(nodes):
        defined = [
            (metric_name(k), k + 1, KINDS[k % len(KINDS)][1], KINDS[k % len(KINDS)][2],
             _wire_value(k, 0))
            for k in range(metrics)
        ]  # fmt: skip
        out.append((node_topic("NBIRTH", node), birth(defined, bd_seq=0, seq=0)))
    for i in range(messages):
        node, sample = i % nodes, i // nodes + 1
        values = [(k + 1, KINDS[k % len(KINDS)][2], _wire_value(k, sample)) for k in range(metrics)]
        out.append((node_topic("NDATA", node), data(values, sample % SEQ_MODULO)))
    return out


def expected_rows(messages: int, metrics: int, nodes: int = 1) -> int:
    """Sparkplug rows of the backlog: a birth's M metrics and its bdSeq, each NDATA's M."""
    return nodes * (metrics + 1) + messages * metrics


def stored(backlog: Sequence[tuple[str, bytes]]) -> list[Any]:
    """The backlog as the source's decoder gets it from the WAL (QoS 1, receive times 10 µs
    apart, offsets from 0)."""
    from connector.sparkplug.messages import Message

    start_us = PAYLOAD_TIMESTAMP_MS * 1000
    return [Message(t, p, QOS, start_us + 10 * i, i) for i, (t, p) in enumerate(backlog)]


# ------------------------------------------------------------------------------ decoder alone


def decoder_alone(backlog: Sequence[tuple[str, bytes]], repeat: int) -> dict[str, Any]:
    """``decode_messages``, ``to_record_batch`` and ``fold`` over the backlog, each ``repeat``
    times after a full GC; seconds per run, and rates of the medians."""
    from connector.source.sparkplug_schema import to_record_batch
    from connector.sparkplug.messages import decode_messages, fold
    from connector.sparkplug.state import SparkplugState

    messages = stored(backlog)
    seconds: dict[str, list[float]] = {"decode_messages": [], "to_record_batch": [], "fold": []}

    def timed(stage: str, call: Callable[..., Any], *args: Any) -> Any:
        gc.collect()
        began = time.perf_counter()
        result = call(*args)
        seconds[stage].append(time.perf_counter() - began)
        return result

    rows: Any = None
    for _ in range(repeat):
        rows = timed("decode_messages", decode_messages, messages, SparkplugState())
        timed("to_record_batch", to_record_batch, rows)
        timed("fold", fold, messages, SparkplugState())
    seconds["decode_messages + to_record_batch"] = [
        a + b for a, b in zip(seconds["decode_messages"], seconds["to_record_batch"], strict=True)
    ]
    count, metric_rows = len(messages), len(rows)
    stages = {}
    for stage, found in seconds.items():
        median = statistics.median(found)
        stages[stage] = {
            "seconds": round(median, 4),
            "seconds_runs": [round(s, 4) for s in found],
            "messages_per_second": round(count / median),
            "rows_per_second": None if stage == "fold" else round(metric_rows / median),
        }
    return {"messages": count, "rows": metric_rows, "repeat": repeat, "stages": stages}


def profile_decoder(backlog: Sequence[tuple[str, bytes]], limit: int = 10) -> list[dict[str, Any]]:
    """cProfile of ``decode_messages`` + ``to_record_batch`` over the backlog: the ``limit``
    functions with the most cumulative time."""
    from connector.source.sparkplug_schema import to_record_batch
    from connector.sparkplug.messages import decode_messages
    from connector.sparkplug.state import SparkplugState

    messages = stored(backlog)

    def decode_partition() -> Any:
        return to_record_batch(decode_messages(messages, SparkplugState()))

    profiler = cProfile.Profile()
    profiler.runcall(decode_partition)
    found = pstats.Stats(profiler).get_stats_profile().func_profiles
    top = sorted(found.items(), key=lambda item: item[1].cumtime, reverse=True)[:limit]
    root = str(Path(__file__).resolve().parent.parent) + os.sep
    return [
        {
            "function": f"{p.file_name.replace(root, '')}:{p.line_number}({name})",
            "ncalls": p.ncalls,
            "tottime": round(p.tottime, 3),
            "cumtime": round(p.cumtime, 3),
        }
        for name, p in top
    ]


# ------------------------------------------------------------------------------ Spark peers


def make_backlog(backlog: Sequence[tuple[str, bytes]], client_id: str, timeout: float) -> Backlog:
    """A fresh broker holding ``backlog`` for the persistent session ``client_id``
    (``bench.ingest.backlog`` with these messages)."""
    from devtools.mosquitto import MosquittoBroker

    broker = MosquittoBroker(
        max_queued_messages=max(1_000_000, 2 * len(backlog)),
        max_inflight_messages=MOSQUITTO_INFLIGHT,
    )
    broker.start()
    try:
        create_session(broker.url, client_id, TOPIC_FILTER, QOS)
        publish_rate = publish_windowed(
            broker.url, len(backlog), backlog.__getitem__, timeout, QOS, MOSQUITTO_INFLIGHT
        )
    except BaseException:
        broker.close()
        raise
    return Backlog(broker, client_id, publish_rate)


def stream_writer(
    frame: Any, setup: Setup, table: Path, checkpoint: Path, peer: str
) -> tuple[Any, float]:
    """``bench.ingest.stream_writer``; for the sparkplug peer with the job's writer, the job's
    Sparkplug plan (a row per metric) instead of its binary one."""
    if peer == RAW or setup.sink == "delta":
        return raw_stream_writer(frame, setup, table, checkpoint)
    from streaming_jobs.batch_writer import BatchWriter
    from streaming_jobs.payloads import make_plan
    from streaming_jobs.progress import RunStats

    stream = frame.writeStream.option("checkpointLocation", str(checkpoint)).trigger(
        processingTime=setup.trigger
    )
    writer = BatchWriter(make_plan("sparkplug", None), str(table), None, RunStats())
    began = time.perf_counter()
    writer.create_tables(frame.sparkSession, frame.schema)
    return stream.foreachBatch(writer), time.perf_counter() - began


def job_arguments(
    peer: str,
    url: str,
    client_id: str,
    table: Path,
    checkpoint: Path,
    source_options: Sequence[str] = (),
) -> list[str]:
    """The ingest job's command line for ``peer``'s query."""
    return [
        "--broker", url, "--topic", TOPIC_FILTER, "--qos", str(QOS), "--table", str(table),
        "--checkpoint", str(checkpoint), "--client-id", client_id, "--partition-data", "wal",
        *(["--payload-format", "sparkplug"] if peer == SPARKPLUG else []),
        *(f"--source-option={o}" for o in source_options),
    ]  # fmt: skip


def run_peer(
    spark: Any,
    peer: str,
    backlog: Sequence[tuple[str, bytes]],
    rows: int,
    setup: Setup,
    workdir: Path,
) -> Landing:
    """``peer``'s query over a fresh backlog of ``backlog``, until ``rows`` rows landed."""
    from streaming_jobs.ingest import build_parser, source_options

    collect_garbage(spark)
    client_id = f"bench-sparkplug-{peer}"
    table, checkpoint = workdir / f"{peer}-table", workdir / f"{peer}-checkpoint"
    queued = make_backlog(backlog, client_id, setup.timeout)
    with queued.broker:
        args = build_parser().parse_args(
            job_arguments(
                peer, queued.broker.url, client_id, table, checkpoint, setup.source_options
            )
        )
        reader = spark.readStream.format("mqtt")
        for key, value in source_options(args).items():
            reader = reader.option(key, value)
        writer, created = stream_writer(reader.load(), setup, table, checkpoint, peer)
        run = run_query(writer, rows, setup.timeout)
        if queued.broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{queued.broker.log_text()}")
    found = check_table(spark, table, peer, backlog, rows)
    return Landing(
        peer,
        rows,
        run,
        publish_rate=queued.publish_rate,
        first_received=found["first_received"].timestamp(),
        last_received=found["last_received"].timestamp(),
        details={"messages": len(backlog), "table_creation_seconds": round(created, 3)},
    )


def check_table(
    spark: Any, table: Path, peer: str, backlog: Sequence[tuple[str, bytes]], rows: int
) -> dict[str, Any]:
    """The table holds what ``peer`` must make of the backlog (a Spark read, after the query)."""
    from pyspark.sql import functions as F

    count = len(backlog)
    common = [
        F.count("*").alias("rows"),
        F.countDistinct("offset").alias("messages"),
        F.min("offset").alias("min_offset"),
        F.max("offset").alias("max_offset"),
        F.min("timestamp").alias("first_received"),
        F.max("timestamp").alias("last_received"),
    ]
    if peer == RAW:
        extra = [F.sum(F.length("payload")).alias("payload_bytes")]
        want = {"rows": count, "payload_bytes": sum(len(p) for _, p in backlog)}
    else:
        extra = [
            F.countDistinct("offset", "metric_index").alias("distinct_metrics"),
            F.count("metric_name").alias("named"),
            F.count("reason").alias("reasons"),
        ]
        want = {"rows": rows, "distinct_metrics": rows, "named": rows, "reasons": 0}
    found = spark.read.format("delta").load(str(table)).agg(*common, *extra).first().asDict()
    want.update(messages=count, min_offset=0, max_offset=count - 1)
    if any(found[key] != value for key, value in want.items()):
        raise BenchError(f"{table}: expected {want}, found {found}")
    return found


def warmup_note(rounds: int) -> str:
    if not rounds:
        return "none"
    plural = "" if rounds == 1 else "s"
    return f"{rounds} unmeasured round{plural}, every peer once at the measured size"


# ------------------------------------------------------------------------------ results


def message_rate(landing: Landing) -> float:
    return int(landing.details["messages"]) / landing.seconds


def _run_dict(landing: Landing) -> dict[str, Any]:
    """``bench.ingest``'s run record, its rates named for what they count."""
    out = _landing_dict(landing)
    out.pop("receive_rate")
    out["rows_per_second"] = out.pop("rate")
    out["messages_per_second"] = round(message_rate(landing))
    if landing.receive_seconds:
        out["receiver_messages_per_second"] = round(
            landing.details["messages"] / landing.receive_seconds
        )
    return out


def build_results(
    runs: dict[str, list[Landing]],
    orders: list[list[str]],
    warmups: dict[str, list[Landing]],
    decoder: dict[str, Any],
    profile: list[dict[str, Any]] | None,
    info: dict[str, Any],
    parameters: dict[str, Any],
) -> dict[str, Any]:
    """The JSON document of a run (``bench/results/sparkplug.json``)."""
    msg_rates = {peer: [message_rate(r) for r in found] for peer, found in runs.items()}
    paired = paired_ratio(msg_rates[SPARKPLUG], msg_rates[RAW])
    peers = {
        peer: {
            "messages_per_second": Stats.of(msg_rates[peer]).as_dict(1),
            "rows_per_second": Stats.of(r.rate for r in found).as_dict(1),
            "rows_per_message": round(found[0].rows / found[0].details["messages"], 4),
            "runs": [_run_dict(r) for r in found],
            "warmup_rates": [round(message_rate(w)) for w in warmups.get(peer, [])],
        }
        for peer, found in runs.items()
    }
    repetitions = [
        {
            "repetition": i,
            "order": order,
            **{peer: round(msg_rates[peer][i]) for peer in PEERS},
            "ratio": round(paired.runs[i], 3),
        }
        for i, order in enumerate(orders)
    ]
    return {
        "benchmark": "sparkplug",
        "machine": info,
        "parameters": parameters,
        "unit": "messages/s",
        "clock": FIRST_BATCH,
        "clocks": {FIRST_BATCH: CLOCKS[FIRST_BATCH]},
        "peers": peers,
        "ratios": {RATIO: paired.as_dict(3)},
        "repetitions": repetitions,
        "decoder": decoder,
        "decoder_profile": profile,
        "other_processes_cpu_share": round(_others_share(runs), 3),
        "cpu_seconds_per_100k_messages": {
            peer: {
                component: round(
                    Stats.of(
                        r.run.cpu[component] / r.details["messages"] * 100_000 for r in found
                    ).median,
                    3,
                )
                for component in COMPONENTS
            }
            for peer, found in runs.items()
        },
    }


# ------------------------------------------------------------------------------ main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sparkplug", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--messages", type=int, default=DEFAULT_MESSAGES, help="NDATA messages in the backlog"
    )
    parser.add_argument(
        "--metrics", type=int, default=DEFAULT_METRICS, help="metrics per birth and per NDATA"
    )
    parser.add_argument("--nodes", type=int, default=1, help="edge nodes (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="backlogs per peer")
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="unmeasured rounds first (every peer once)"
    )
    parser.add_argument(
        "--sink",
        choices=SINKS,
        default="job",
        help="job: the ingest job's foreachBatch writer (default); delta: "
        "writeStream.format('delta')",
    )
    parser.add_argument(
        "--trigger", default="0 seconds", help="processing-time interval (default 0 seconds)"
    )
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of format('mqtt') for both peers, e.g. recordsPerPartition=5000",
    )
    parser.add_argument(
        "--decoder-repeat", type=int, default=5, help="runs of the decoder alone (median)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile of decode + Arrow, top 10 cumulative"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per step, in seconds")
    parser.add_argument(
        "--output", type=Path, default=OUTPUT, help="results file (default %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.messages < 1 or args.metrics < 1 or args.nodes < 1:
        parser.error("--messages, --metrics and --nodes must be >= 1")
    if args.repeat < 1 or args.warmup_rounds < 0 or args.decoder_repeat < 1:
        parser.error("--repeat and --decoder-repeat must be >= 1, --warmup-rounds >= 0")
    if args.nodes > args.messages:
        parser.error("--nodes must not exceed --messages")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine_info()
    info["pyspark"] = package_version("pyspark")
    info["delta_spark"] = package_version("delta-spark")
    info["pyarrow"] = package_version("pyarrow")
    info["load_average_at_start"] = list(os.getloadavg())
    sink = args.sink if args.sink == "delta" or job_sink_available() else "delta"
    setup = Setup(args.trigger, sink, args.timeout, tuple(args.source_option))
    try:
        backlog = backlog_messages(args.messages, args.metrics, args.nodes)
    except ImportError as exc:  # pysparkplug: `make setup` installs it
        sys.stderr.write(f"bench.sparkplug: cannot build the payloads ({exc}); run make setup\n")
        return 1
    count = len(backlog)
    rows = {
        SPARKPLUG: expected_rows(args.messages, args.metrics, args.nodes),
        RAW: count,
    }
    payload_bytes = [len(p) for _, p in backlog[args.nodes :]]

    decoder = decoder_alone(backlog, args.decoder_repeat)  # before the JVM: a quiet machine
    profile = profile_decoder(backlog) if args.profile else None

    from streaming_jobs.spark_session import local_spark

    work = Path(tempfile.mkdtemp(prefix="bench-sparkplug-"))
    spark = local_spark(
        "bench-sparkplug",
        "local[2]",
        spark__sql__streaming__numRecentProgressUpdates="10000",
        spark__ui__showConsoleProgress="false",
    )
    spark.sparkContext.setLogLevel("ERROR")
    runs: dict[str, list[Landing]] = {peer: [] for peer in PEERS}
    warmups: dict[str, list[Landing]] = {}
    orders: list[list[str]] = []
    try:
        for _ in range(args.warmup_rounds):  # JIT, class loading, the data source lookup
            for peer in PEERS:
                landing = run_peer(spark, peer, backlog, rows[peer], setup, work / "warmup")
                warmups.setdefault(peer, []).append(landing)
            shutil.rmtree(work / "warmup", ignore_errors=True)
        for rep in range(args.repeat):
            order = list(PEERS[rep % len(PEERS) :] + PEERS[: rep % len(PEERS)])
            orders.append(order)
            for peer in order:
                run_dir = work / f"rep{rep}"
                runs[peer].append(run_peer(spark, peer, backlog, rows[peer], setup, run_dir))
                shutil.rmtree(run_dir, ignore_errors=True)
    except (BenchError, RuntimeError) as exc:
        sys.stderr.write(f"bench.sparkplug: {exc}\n")
        return 1
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    parameters = {
        "messages": count,
        "ndata_messages": args.messages,
        "births": args.nodes,
        "edge_nodes": args.nodes,
        "metrics": args.metrics,
        "metric_datatypes": [KINDS[k % len(KINDS)][0] for k in range(args.metrics)],
        "rows": rows,
        "ndata_payload_bytes": {
            "min": min(payload_bytes),
            "median": statistics.median_low(payload_bytes),
            "max": max(payload_bytes),
        },
        "nbirth_payload_bytes": len(backlog[0][1]),
        "qos": QOS,
        "topic_filter": TOPIC_FILTER,
        "repeat": args.repeat,
        "master": "local[2]",
        "trigger": f"processingTime={args.trigger}",
        "sink": SINK_NAMES[sink],
        "partition_data": "wal",
        "source_options": list(args.source_option),
        "warmup": warmup_note(args.warmup_rounds),
        "warmup_rounds": args.warmup_rounds,
        "before_each_spark_run": "a full GC of the driver JVM (System.gc())",
        "publish_inflight": MOSQUITTO_INFLIGHT,
        "decoder_repeat": args.decoder_repeat,
    }
    results = build_results(runs, orders, warmups, decoder, profile, info, parameters)
    print_summary(results, runs)
    path = write_results("sparkplug", results, args.output)
    print(f"results: {path}")
    return 0


def cpu_table(per_peer: dict[str, dict[str, float]]) -> tuple[list[str], list[list[str]]]:
    """CPU seconds per 100,000 messages by component (median over the repetitions), the
    components that took any, and the pipeline's total (without the sampler, other processes)."""
    headers = ["CPU s per 100k msgs", *per_peer]
    rows = [
        [component, *(f"{cpu[component]:.2f}" for cpu in per_peer.values())]
        for component in COMPONENTS
        if any(cpu[component] >= 0.005 for cpu in per_peer.values())
    ]
    totals = [
        sum(v for c, v in cpu.items() if c not in NOT_THE_PIPELINE) for cpu in per_peer.values()
    ]
    rows.append(["total of the pipeline (without the sampler)", *(f"{t:.2f}" for t in totals)])
    return headers, rows


def print_summary(results: dict[str, Any], runs: dict[str, list[Landing]]) -> None:
    """What the run measured, as text."""
    params, info = results["parameters"], results["machine"]
    print(f"bench.sparkplug: {describe_machine(info)}, pyspark {info['pyspark']}")
    print(
        f"{params['births']} NBIRTH + {params['ndata_messages']:,} alias-only NDATA of "
        f"{params['metrics']} metrics (QoS {QOS} backlog, {params['ndata_payload_bytes']['median']}"
        f"-byte payloads); local[2], written by {params['sink']}; warm-up: {params['warmup']}"
    )
    print()
    table = []
    for peer, item in results["peers"].items():
        msgs, found = item["messages_per_second"], item["rows_per_second"]
        table.append(
            [peer, rate(msgs["median"]), rate(msgs["min"]), rate(msgs["max"]),
             rate(found["median"]), f"{item['rows_per_message']:g}"]
        )  # fmt: skip
    print(
        format_table(
            [f"peer ({FIRST_BATCH})", "msg/s median", "min", "max", "rows/s median", "rows/msg"],
            table,
        )
    )
    print()
    print(
        format_table(
            ["repetition", "order", f"{SPARKPLUG} msg/s", f"{RAW} msg/s", RATIO],
            [
                [
                    str(r["repetition"]),
                    " then ".join(r["order"]),
                    rate(r[SPARKPLUG]),
                    rate(r[RAW]),
                    ratio(r["ratio"]),
                ]
                for r in results["repetitions"]
            ],
        )
    )
    paired = results["ratios"][RATIO]
    low, high = ratio(paired["min"]), ratio(paired["max"])
    print(f"{RATIO} median {ratio(paired['median'])} (min {low}, max {high})")
    print()
    for peer, item in results["peers"].items():
        if item["warmup_rates"]:
            print(f"warm-up {peer}: " + ", ".join(rate(r) for r in item["warmup_rates"]) + " msg/s")
    print()
    decoder = results["decoder"]
    print(
        f"the decoder alone on {decoder['messages']:,} messages ({decoder['rows']:,} rows), "
        f"median of {decoder['repeat']}:"
    )
    print(
        format_table(
            ["stage", "seconds", "msg/s", "rows/s"],
            [
                [
                    stage,
                    f"{s['seconds']:.3f}",
                    rate(s["messages_per_second"]),
                    "—" if s["rows_per_second"] is None else rate(s["rows_per_second"]),
                ]
                for stage, s in decoder["stages"].items()
            ],
        )
    )
    print()
    print("Spark's per-batch phases, last repetition (mean ms per non-empty batch):")
    print(format_table(*phase_table(runs)))
    print()
    print("where the CPU goes while the measured batches run (sampled from /proc):")
    print(format_table(*cpu_table(results["cpu_seconds_per_100k_messages"])))
    print(f"other processes took {results['other_processes_cpu_share']:.0%} of the machine's CPU")
    if results["decoder_profile"]:
        print()
        print("cProfile of decode_messages + to_record_batch, top by cumulative time:")
        print(
            format_table(
                ["function", "ncalls", "tottime", "cumtime"],
                [
                    [p["function"], p["ncalls"], f"{p['tottime']:.3f}", f"{p['cumtime']:.3f}"]
                    for p in results["decoder_profile"]
                ],
            )
        )


if __name__ == "__main__":
    sys.exit(main())
