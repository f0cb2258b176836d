"""Sparkplug B into Delta: metrics per second, against raw MQTT rows of the same messages.

The backlog: K edge nodes of group ``bench``, each first an NBIRTH (seq 0, bdSeq 0) defining M
metrics (Int32, Int64, Double, Boolean and String in turns, aliases 1..M), then N NDATA messages
(round robin over the nodes) carrying those M metrics by alias only, each node's seq counting
1, 2, ... and wrapping at 255; made with pysparkplug's protobuf classes
(``tests/sparkplug_payloads.py``), never the product's code. Sparkplug sends DATA at QoS 0,
which a broker does not queue: every message is published and subscribed at QoS 1 instead.

Peers, in turns in every repetition, each on a fresh Mosquitto holding the same bytes, written
as ``bench.ingest`` writes (the job's ``foreachBatch`` writer, ``partitionData`` wal, local[2])
and timed by its headline clock: ``sparkplug``, the job's query with ``--payload-format
sparkplug`` (a row per metric, names and datatypes resolved from the births), and ``raw``, the
default format (a row per message). Reported: messages/s and rows/s per peer, the ratio
sparkplug/raw in messages/s paired per repetition. Every table is checked after its query:
raw, one row per message, every offset once, the payload bytes in full; sparkplug, the expected
metric rows, each (offset, metric index) once, every name resolved, no reason.

The decoder alone (no Spark, before the JVM starts): ``decode_messages`` (a task's decoding of
its partition), ``to_record_batch`` (its conversion to Arrow) and ``fold`` (the planner's pass),
medians of ``--decoder-repeat`` runs; ``--profile`` adds cProfile's top functions of decode +
Arrow by cumulative time.
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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from connector.sparkplug.state import SEQ_MODULO

from . import drainer
from .common import (
    MOSQUITTO_INFLIGHT,
    RESULTS_DIR,
    BenchError,
    Stats,
    finish,
    machine,
    paired_ratio,
    publish_windowed,
    turn,
)
from .cpu_sampler import NOT_THE_PIPELINE
from .ingest import (
    CLOCKS,
    FIRST_BATCH,
    JOB_SINK,
    Landing,
    Setup,
    collect_garbage,
    cpu_per_100k,
    job_sink,
    job_source,
    others_share,
    received,
    run_query,
    spark_session,
)
from .render import (
    Charts,
    Lines,
    clock_notes,
    md_table,
    num,
    ratios_table,
    stats_cells,
    times,
    warmup_notes,
)

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
    from tests.sparkplug_payloads import birth, data

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
    from connector.spark.reader.sparkplug_schema import to_record_batch
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
    from connector.spark.reader.sparkplug_schema import to_record_batch
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
    collect_garbage(spark)
    client_id = f"bench-sparkplug-{peer}"
    table, checkpoint = workdir / f"{peer}-table", workdir / f"{peer}-checkpoint"
    queued = drainer.backlog(
        len(backlog),
        [(client_id, TOPIC_FILTER)],
        lambda url: publish_windowed(url, len(backlog), backlog.__getitem__, setup.timeout, QOS),
        qos=QOS,
    )
    with queued.broker as broker:
        argv = job_arguments(peer, broker.url, client_id, table, checkpoint, setup.source_options)
        payload_format = "sparkplug" if peer == SPARKPLUG else "binary"
        writer, created = job_sink(
            job_source(spark, argv), table, checkpoint, setup.trigger, payload_format
        )
        run = run_query(writer, rows, setup.timeout)
        if broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{broker.log_text()}")
    details = {"messages": len(backlog), "table_creation_seconds": round(created, 3)}
    landing = Landing(peer, rows, run, queued.publish_rate, details=details)
    return received(landing, check_table(spark, table, peer, backlog, rows))


def check_table(
    spark: Any, table: Path, peer: str, backlog: Sequence[tuple[str, bytes]], rows: int
) -> Any:
    """The table holds what ``peer`` must make of the backlog (a Spark read, after the query):
    raw, one row per message with every offset once and the payload bytes in full; sparkplug,
    the expected metric rows, each (offset, metric index) once, every name resolved and no
    reason."""
    from pyspark.sql import functions as F

    count = len(backlog)
    figures = {
        "rows": F.count("*"), "messages": F.countDistinct("offset"),
        "min_offset": F.min("offset"), "max_offset": F.max("offset"),
    }  # fmt: skip
    want: dict[str, Any] = {"messages": count, "min_offset": 0, "max_offset": count - 1}
    if peer == RAW:
        figures["payload_bytes"] = F.sum(F.length("payload"))
        want.update(rows=count, payload_bytes=sum(len(p) for _, p in backlog))
    else:
        figures["distinct_metrics"] = F.countDistinct("offset", "metric_index")
        figures["named"] = F.count("metric_name")
        figures["reasons"] = F.count("reason")
        want.update(rows=rows, distinct_metrics=rows, named=rows, reasons=0)
    return drainer.check_table(spark, table, figures, want)


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
    out = landing.as_dict()
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
        "other_processes_cpu_share": round(others_share(runs), 3),
        "cpu_seconds_per_100k_messages": cpu_per_100k(runs, lambda r: r.details["messages"]),
    }


# ------------------------------------------------------------------------------ main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sparkplug", description=__doc__)
    parser.add_argument("--messages", type=int, default=20_000, help="NDATA messages")
    parser.add_argument("--metrics", type=int, default=10, help="metrics per birth and NDATA")
    parser.add_argument("--nodes", type=int, default=1, help="edge nodes (default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="backlogs per peer")
    parser.add_argument(
        "--warmup-rounds", type=int, default=1, help="unmeasured rounds first (every peer once)"
    )
    parser.add_argument("--trigger", default="0 seconds", help="processing-time interval")
    parser.add_argument(
        "--source-option", action="append", default=[], metavar="KEY=VALUE",
        help="an option of format('mqtt') for both peers, e.g. recordsPerPartition=5000",
    )  # fmt: skip
    parser.add_argument("--decoder-repeat", type=int, default=5, help="runs of the decoder alone")
    parser.add_argument("--profile", action="store_true", help="cProfile of decode + Arrow")
    parser.add_argument("--timeout", type=float, default=600.0, help="per step, in seconds")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="results file")
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
    info = machine("pyspark", "delta-spark", "pyarrow")
    setup = Setup(args.trigger, args.timeout, tuple(args.source_option))
    try:
        backlog = backlog_messages(args.messages, args.metrics, args.nodes)
    except ImportError as exc:  # pysparkplug: `make setup` installs it
        sys.stderr.write(f"bench.sparkplug: cannot build the payloads ({exc}); run make setup\n")
        return 1
    rows = {SPARKPLUG: expected_rows(args.messages, args.metrics, args.nodes), RAW: len(backlog)}
    payload_bytes = [len(p) for _, p in backlog[args.nodes :]]
    decoder = decoder_alone(backlog, args.decoder_repeat)  # before the JVM: a quiet machine
    profile = profile_decoder(backlog) if args.profile else None

    work = Path(tempfile.mkdtemp(prefix="bench-sparkplug-"))
    spark = spark_session("bench-sparkplug")
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
            order = turn(PEERS, rep)
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
        "messages": len(backlog),
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
        "sink": JOB_SINK,
        "partition_data": "wal",
        "source_options": list(args.source_option),
        "warmup": warmup_note(args.warmup_rounds),
        "warmup_rounds": args.warmup_rounds,
        "before_each_spark_run": "a full GC of the driver JVM (System.gc())",
        "publish_inflight": MOSQUITTO_INFLIGHT,
        "decoder_repeat": args.decoder_repeat,
    }
    results = build_results(runs, orders, warmups, decoder, profile, info, parameters)
    return finish("sparkplug", results, args.output, section)


# ------------------------------------------------------------------------------ the report


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """A Sparkplug B backlog into Delta, a row per metric, against raw rows of the same
    messages, and the decoder alone."""
    params, peers = data.get("parameters", {}), data["peers"]
    payload = params.get("ndata_payload_bytes", {})
    kinds = ", ".join(dict.fromkeys(params.get("metric_datatypes", [])))
    options = ", ".join(f"`{o}`" for o in params.get("source_options", []))
    out = [
        f"{num(params.get('births'))} NBIRTH and {num(params.get('ndata_messages'))} "
        f"alias-only NDATA messages of {params.get('metrics')} metrics ({kinds}; "
        f"{num(payload.get('median'))}-byte payloads), queued at QoS {params.get('qos')} for "
        "the ingest job's persistent session (Sparkplug's own DATA is QoS 0, which a broker "
        f"does not queue), landed in Delta on {params.get('master')}, trigger "
        f"{params.get('trigger')}, written by {params.get('sink')}"
        + (f", source options {options}" if options else "")
        + f"; peers in turns, median of {params.get('repeat')}. `sparkplug`: "
        "`--payload-format sparkplug`, a row per metric; `raw`: the default, a row per message "
        "with the payload's bytes.",
        "",
        *warmup_notes(params.get("warmup"), peers),
        *clock_notes(data),
    ]
    rows = [
        [
            peer,
            *stats_cells(item["messages_per_second"]),
            num(item["rows_per_second"].get("median")),
            num(item.get("rows_per_message"), 2),
        ]
        for peer, item in peers.items()
    ]
    headers = ["peer", "msg/s median", "min", "max", "rows/s median", "rows/msg"]
    out += [*md_table(headers, rows), ""]
    reps = [
        [
            str(r["repetition"]),
            " then ".join(r["order"]),
            num(r["sparkplug"]),
            num(r["raw"]),
            times(r["ratio"]),
        ]
        for r in data.get("repetitions", [])
    ]
    out += [
        *md_table(["repetition", "order", "sparkplug msg/s", "raw msg/s", "sparkplug/raw"], reps),
        "",
        *ratios_table(data.get("ratios"), "ratio (msg/s)"),
        "",
    ]
    decoder = data.get("decoder")
    if isinstance(decoder, Mapping):
        out += [
            "The decoder alone (no Spark, one Python thread) on the same "
            f"{num(decoder['messages'])} messages ({num(decoder['rows'])} rows); median of "
            f"{decoder['repeat']}: "
            "`decode_messages` is a task's decoding of its partition, `to_record_batch` its "
            "conversion to Arrow, `fold` the planner's pass over the same records.",
            "",
            *md_table(
                ["stage", "seconds", "msg/s", "metrics/s"],
                [
                    [
                        f"`{stage}`",
                        num(s["seconds"], 3),
                        num(s["messages_per_second"]),
                        num(s.get("rows_per_second")),
                    ]
                    for stage, s in decoder["stages"].items()
                ],
            ),
            "",
        ]
    cpu = data.get("cpu_seconds_per_100k_messages")
    if isinstance(cpu, Mapping) and cpu:
        components = [
            c
            for c in next(iter(cpu.values()))
            if c not in NOT_THE_PIPELINE and any(p.get(c, 0) >= 0.005 for p in cpu.values())
        ]
        out += [
            "CPU seconds per 100,000 messages while the measured batches ran (median over the "
            "repetitions, sampled from /proc):",
            "",
            *md_table(
                ["component", *cpu],
                [
                    *([c, *(num(p.get(c), 2) for p in cpu.values())] for c in components),
                    [
                        "total of the pipeline",
                        *(
                            num(sum(v for c, v in p.items() if c not in NOT_THE_PIPELINE), 2)
                            for p in cpu.values()
                        ),
                    ],
                ],
            ),
            "",
        ]
    profile = data.get("decoder_profile")
    if profile:
        out += [
            "cProfile of `decode_messages` + `to_record_batch` on the same messages, the top "
            "functions by cumulative time (seconds under the profiler):",
            "",
            *md_table(
                ["function", "calls", "own s", "cumulative s"],
                [
                    [f"`{p['function']}`", p["ncalls"], num(p["tottime"], 3), num(p["cumtime"], 3)]
                    for p in profile
                ],
            ),
            "",
        ]
    share = data.get("other_processes_cpu_share")
    if share is not None:
        out += [
            f"Other processes and hypervisor steal took {share:.0%} of the machine's CPU "
            "during the measured batches.",
        ]
    return out


if __name__ == "__main__":
    sys.exit(main())
