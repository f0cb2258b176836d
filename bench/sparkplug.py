"""Sparkplug B into Delta (``python -m bench.sparkplug``): NBIRTHs and alias-only NDATA messages
(made with pysparkplug, queued at QoS 1) landed by the ingest job with ``--payload-format
sparkplug`` (a row per metric) against the default raw rows of the same messages, in turns;
then the decoder alone."""

from __future__ import annotations

import cProfile
import gc
import importlib
import json
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from connector.sparkplug.state import SEQ_MODULO

from . import common, drainer, ingest
from .render import (
    Charts,
    Lines,
    clock_notes,
    cpu_components_table,
    cpu_share_note,
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


def metric_name(index: int) -> str:
    """The name the births give metric ``index`` (alias ``index + 1``), e.g. ``m03_Boolean``."""
    return f"m{index:02d}_{KINDS[index % len(KINDS)][0]}"


def metric_value(index: int, sample: int) -> Any:
    """Metric ``index``'s value in a node's ``sample``-th message, as decoded (0: the birth)."""
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


def backlog_messages(messages: int, metrics: int, nodes: int = 1) -> list[tuple[str, bytes]]:
    """Every node's NBIRTH, then ``messages`` alias-only NDATA round robin: (topic, payload)."""
    from devtools.sparkplug_payloads import birth, data

    out = []
    for node in range(nodes):
        defined = [
            (metric_name(k), k + 1, KINDS[k % len(KINDS)][1], KINDS[k % len(KINDS)][2],
             _wire_value(k, 0))
            for k in range(metrics)
        ]  # fmt: skip
        out.append((f"spBv1.0/{GROUP}/NBIRTH/edge-{node}", birth(defined, bd_seq=0, seq=0)))
    for i in range(messages):
        node, sample = i % nodes, i // nodes + 1
        values = [(k + 1, KINDS[k % len(KINDS)][2], _wire_value(k, sample)) for k in range(metrics)]
        out.append((f"spBv1.0/{GROUP}/NDATA/edge-{node}", data(values, sample % SEQ_MODULO)))
    return out


def expected_rows(messages: int, metrics: int, nodes: int = 1) -> int:
    """Sparkplug rows of the backlog: a birth's M metrics and its bdSeq, each NDATA's M."""
    return nodes * (metrics + 1) + messages * metrics


def stored(backlog: Sequence[tuple[str, bytes]]) -> list[Any]:
    """The backlog as the source's decoder gets it from the WAL (receive times 10 µs apart)."""
    from connector.sparkplug.messages import Message

    start_us = PAYLOAD_TIMESTAMP_MS * 1000
    return [Message(t, p, QOS, start_us + 10 * i, i) for i, (t, p) in enumerate(backlog)]


def decoder_alone(
    backlog: Sequence[tuple[str, bytes]], repeat: int, decoder: Any | None = None
) -> dict[str, Any]:
    """The decoder's stages over the backlog, ``repeat`` times each after a GC; medians.
    ``decoder``: another revision's (:func:`baseline_decoder`), else this one's."""
    if decoder is None:
        from connector.spark.reader import sparkplug_schema
        from connector.sparkplug import messages as messages_module
        from connector.sparkplug import state as state_module
    else:
        sparkplug_schema, messages_module, state_module = decoder
    to_record_batch = sparkplug_schema.to_record_batch
    decode_messages, fold = messages_module.decode_messages, messages_module.fold
    SparkplugState = state_module.SparkplugState
    Message = messages_module.Message

    messages = [Message(*vars_of(m)) for m in stored(backlog)]
    seconds: dict[str, list[float]] = {"decode_messages": [], "to_record_batch": [], "fold": []}

    def timed(stage: str, call: Callable[..., Any], *args: Any) -> Any:
        gc.collect()
        began = time.perf_counter()
        result = call(*args)
        seconds[stage].append(time.perf_counter() - began)
        return result

    for _ in range(repeat):
        decoded = timed("decode_messages", decode_messages, messages, SparkplugState())
        timed("to_record_batch", to_record_batch, decoded)
        timed("fold", fold, messages, SparkplugState())
    rows = len(decoded)
    seconds["decode_messages + to_record_batch"] = [
        a + b for a, b in zip(seconds["decode_messages"], seconds["to_record_batch"], strict=True)
    ]
    stages = {}
    for stage, found in seconds.items():
        median = statistics.median(found)
        stages[stage] = {
            "seconds": round(median, 4),
            "messages_per_second": round(len(messages) / median),
            "rows_per_second": None if stage == "fold" else round(rows / median),
        }
    return {"messages": len(messages), "rows": rows, "repeat": repeat, "stages": stages}


def vars_of(message: Any) -> tuple[Any, ...]:
    """A stored message's fields, in order (to make another revision's Message of it)."""
    return (message.topic, message.payload, message.qos, message.timestamp_us, message.offset)


BASELINE_PACKAGE = "bench_sparkplug_baseline"


@contextmanager
def baseline_decoder(revision: str) -> Iterator[tuple[Any, Any, Any]]:
    """The decoder of git ``revision`` (``connector/sparkplug`` and the Arrow conversion of
    ``connector/spark/reader/sparkplug_schema.py``), imported from a temporary copy as a package
    of its own beside this revision's: (sparkplug_schema, messages, state) modules."""

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "show", f"{revision}:{path}"], cwd=common.REPO_ROOT, check=True,
            capture_output=True, text=True,
        ).stdout  # fmt: skip

    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{revision}:connector/sparkplug"],
        cwd=common.REPO_ROOT, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="bench-sparkplug-baseline-"))
    package = work / BASELINE_PACKAGE
    package.mkdir()
    try:
        for name in listed:
            if name.endswith((".py", ".pyi")):
                (package / name).write_text(show(f"connector/sparkplug/{name}"))
        schema = show("connector/spark/reader/sparkplug_schema.py")
        (package / "sparkplug_schema.py").write_text(
            schema.replace("connector.sparkplug.", f"{BASELINE_PACKAGE}.")
        )
        sys.path.insert(0, str(work))
        try:
            yield (
                importlib.import_module(f"{BASELINE_PACKAGE}.sparkplug_schema"),
                importlib.import_module(f"{BASELINE_PACKAGE}.messages"),
                importlib.import_module(f"{BASELINE_PACKAGE}.state"),
            )
        finally:
            sys.path.remove(str(work))
            for module in [m for m in sys.modules if m.split(".")[0] == BASELINE_PACKAGE]:
                del sys.modules[module]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def decoder_ratios(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> dict[str, float]:
    """This revision's msg/s over the baseline's, per stage of the decoder alone."""
    return {
        stage: round(s["messages_per_second"] / theirs["stages"][stage]["messages_per_second"], 2)
        for stage, s in ours["stages"].items()
        if stage in theirs["stages"]
    }


def before_of(path: Path) -> dict[str, Any]:
    """The headline figures of an earlier run's results (``--before``): its revision and date,
    the sparkplug/raw ratio and both peers' msg/s, and the decoder's stages."""
    earlier = json.loads(path.read_text())
    machine = earlier.get("machine", {})
    return {
        "git_revision": machine.get("git_revision"),
        "date": machine.get("date"),
        "load_average_at_start": machine.get("load_average_at_start"),
        "ratio": earlier["ratios"][f"{SPARKPLUG}/{RAW}"],
        "messages_per_second": {
            peer: item["messages_per_second"]["median"] for peer, item in earlier["peers"].items()
        },
        "decoder": earlier.get("decoder"),
    }


def profile_decoder(backlog: Sequence[tuple[str, bytes]], limit: int = 10) -> list[dict[str, Any]]:
    """cProfile of decode + Arrow: the ``limit`` functions with the most cumulative time."""
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
    root = f"{common.REPO_ROOT}/"
    return [
        {
            "function": f"{p.file_name.removeprefix(root)}:{p.line_number}({name})",
            "ncalls": p.ncalls,
            "tottime": round(p.tottime, 3),
            "cumtime": round(p.cumtime, 3),
        }
        for name, p in top
    ]


def job_arguments(peer: str, client_id: str, source_options: Sequence[str] = ()) -> list[str]:
    """The ingest job's flags for ``peer``'s query (besides the broker, table and checkpoint)."""
    return [
        "--topic", TOPIC_FILTER, "--qos", str(QOS), "--client-id", client_id, "--partition-data",
        "wal", *(["--payload-format", "sparkplug"] if peer == SPARKPLUG else []),
        *(f"--source-option={o}" for o in source_options),
    ]  # fmt: skip


def run_peer(
    spark: Any, peer: str, backlog: Sequence[tuple[str, bytes]], rows: int, setup: ingest.Setup,
    workdir: Path,
) -> ingest.Landing:  # fmt: skip
    """``peer``'s query over a fresh backlog until ``rows`` rows landed, its table checked."""
    from pyspark.sql import functions as F

    client_id, count = f"bench-sparkplug-{peer}", len(backlog)

    def queue() -> drainer.Backlog:
        publish = backlog.__getitem__
        return drainer.backlog(
            count, [(client_id, TOPIC_FILTER)], qos=QOS,
            publish=lambda url: common.publish_windowed(url, count, publish, setup.timeout, QOS),
        )  # fmt: skip

    flags = job_arguments(peer, client_id, setup.source_options)
    payload_format = "sparkplug" if peer == SPARKPLUG else "binary"
    landing, table = ingest.run_job(spark, peer, rows, setup, workdir, queue, flags, payload_format)
    landing.details["messages"] = count
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
    return ingest.received(landing, drainer.check_table(spark, table, figures, want))


def warmup_note(rounds: int) -> str:
    plural = "" if rounds == 1 else "s"
    return (
        f"{rounds} unmeasured round{plural}, every peer once at the measured size"
        if rounds
        else "none"
    )


def message_rate(landing: ingest.Landing) -> float:
    return int(landing.details["messages"]) / landing.seconds


def build_results(
    runs: dict[str, list[ingest.Landing]], orders: list[list[str]],
    warmups: dict[str, list[ingest.Landing]], decoder: dict[str, Any],
    profile: list[dict[str, Any]] | None, info: dict[str, Any], parameters: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """The JSON document of a run (``bench/results/sparkplug.json``)."""
    msg_rates = {peer: [message_rate(r) for r in found] for peer, found in runs.items()}
    paired = common.paired_ratio(msg_rates[SPARKPLUG], msg_rates[RAW])
    peers = {
        peer: {
            "messages_per_second": common.Stats.of(msg_rates[peer]).as_dict(1),
            "rows_per_second": common.Stats.of(r.rate for r in found).as_dict(1),
            "rows_per_message": round(found[0].rows / found[0].details["messages"], 4),
            "runs": [r.as_dict() for r in found],
            "warmup_rates": [round(message_rate(w)) for w in warmups.get(peer, [])],
        }
        for peer, found in runs.items()
    }
    repetitions = [
        {"repetition": i, "order": order, **{peer: round(msg_rates[peer][i]) for peer in PEERS},
         "ratio": round(paired.runs[i], 3)}
        for i, order in enumerate(orders)
    ]  # fmt: skip
    return {
        "machine": info,
        "parameters": parameters,
        "clocks": {ingest.FIRST_BATCH: ingest.CLOCKS[ingest.FIRST_BATCH]},
        "peers": peers,
        "ratios": {f"{SPARKPLUG}/{RAW}": paired.as_dict(3)},
        "repetitions": repetitions,
        "decoder": decoder,
        "decoder_profile": profile,
        "other_processes_cpu_share": round(ingest.others_share(runs), 3),
        "cpu_seconds_per_100k_messages": ingest.cpu_per_100k(runs, lambda r: r.details["messages"]),
    }


def parse_args(argv: Sequence[str] | None = None) -> Any:
    parser = common.arguments("sparkplug", __doc__, messages=20_000, repeat=3, timeout=600.0)
    parser.add_argument("--metrics", type=int, default=10, help="metrics per birth and NDATA")
    parser.add_argument("--nodes", type=int, default=1, help="edge nodes (default 1)")
    ingest.query_arguments(parser)
    parser.add_argument("--decoder-repeat", type=int, default=5, help="runs of the decoder alone")
    parser.add_argument("--profile", action="store_true", help="cProfile of decode + Arrow")
    parser.add_argument(
        "--baseline", metavar="REV",
        help="also time git revision REV's decoder alone in the same run (ratios to it)",
    )  # fmt: skip
    parser.add_argument(
        "--before", type=Path, metavar="JSON",
        help="an earlier run's results, whose headline figures the report shows beside these",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if min(args.metrics, args.nodes, args.decoder_repeat) < 1 or args.warmup_rounds < 0:
        parser.error("--metrics, --nodes and --decoder-repeat must be >= 1, --warmup-rounds >= 0")
    if args.nodes > args.messages:
        parser.error("--nodes must not exceed --messages")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    setup = ingest.Setup(args.trigger, args.timeout, tuple(args.source_option))

    def measure() -> dict[str, Any]:
        info = common.machine("pyspark", "delta-spark", "pyarrow")
        try:
            backlog = backlog_messages(args.messages, args.metrics, args.nodes)
        except ImportError as exc:  # pysparkplug: `make setup` installs it
            raise common.BenchError(f"cannot build the payloads ({exc}); run make setup") from exc
        rows = {
            SPARKPLUG: expected_rows(args.messages, args.metrics, args.nodes),
            RAW: len(backlog),
        }
        payload_bytes = [len(p) for _, p in backlog[args.nodes :]]
        before = before_of(args.before) if args.before else None
        decoder = decoder_alone(backlog, args.decoder_repeat)  # before the JVM: a quiet machine
        if args.baseline:
            with baseline_decoder(args.baseline) as old:
                baseline = decoder_alone(backlog, args.decoder_repeat, old)
            decoder["baseline"] = {
                "git_revision": args.baseline, **baseline,
                "ratios": decoder_ratios(decoder, baseline),
            }  # fmt: skip
        profile = profile_decoder(backlog) if args.profile else None
        work = Path(tempfile.mkdtemp(prefix="bench-sparkplug-"))
        spark = ingest.spark_session("bench-sparkplug")
        runs: dict[str, list[ingest.Landing]] = {peer: [] for peer in PEERS}
        warmups: dict[str, list[ingest.Landing]] = {peer: [] for peer in PEERS}
        orders = [common.turn(PEERS, rep) for rep in range(args.repeat)]
        # The warm-up rounds first: JIT, class loading, the data source lookup.
        rounds = [(warmups, list(PEERS))] * args.warmup_rounds + [(runs, o) for o in orders]
        try:
            for into, order in rounds:
                for peer in order:
                    landing = run_peer(spark, peer, backlog, rows[peer], setup, work / "run")
                    into[peer].append(landing)
                    shutil.rmtree(work / "run", ignore_errors=True)
        finally:
            spark.stop()
            shutil.rmtree(work, ignore_errors=True)
        parameters = {
            "ndata_messages": args.messages, "births": args.nodes, "metrics": args.metrics,
            "metric_datatypes": [KINDS[k % len(KINDS)][0] for k in range(args.metrics)],
            "ndata_payload_bytes": {"median": statistics.median_low(payload_bytes)},
            "qos": QOS, "repeat": args.repeat, "master": "local[2]",
            "trigger": f"processingTime={args.trigger}", "sink": ingest.JOB_SINK,
            "source_options": list(args.source_option), "warmup": warmup_note(args.warmup_rounds),
            "publish_inflight": common.MOSQUITTO_INFLIGHT,
        }  # fmt: skip
        results = build_results(runs, orders, warmups, decoder, profile, info, parameters)
        if before is not None:
            results["before"] = before
        return results

    return common.finish("sparkplug", measure, args.output, section)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """The Sparkplug peer against raw rows, and the decoder alone."""
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
        [peer, *stats_cells(item["messages_per_second"]),
         num(item["rows_per_second"].get("median")), num(item.get("rows_per_message"), 2)]
        for peer, item in peers.items()
    ]  # fmt: skip
    headers = ["peer", "msg/s median", "min", "max", "rows/s median", "rows/msg"]
    reps = [
        [str(r["repetition"]), " then ".join(r["order"]), num(r["sparkplug"]), num(r["raw"]),
         times(r["ratio"])]
        for r in data.get("repetitions", [])
    ]  # fmt: skip
    out += [
        *md_table(headers, rows),
        "",
        *md_table(["repetition", "order", "sparkplug msg/s", "raw msg/s", "sparkplug/raw"], reps),
        "",
        *ratios_table(data.get("ratios"), "ratio (msg/s)"),
        "",
    ]
    decoder = data.get("decoder")
    if isinstance(decoder, Mapping):
        stages = [
            [f"`{stage}`", num(s["seconds"], 3), num(s["messages_per_second"]),
             num(s.get("rows_per_second"))]
            for stage, s in decoder["stages"].items()
        ]  # fmt: skip
        out += [
            "The decoder alone (no Spark, one Python thread) on the same "
            f"{num(decoder['messages'])} messages ({num(decoder['rows'])} rows); median of "
            f"{decoder['repeat']}: "
            "`decode_messages` is a task's decoding of its partition, `to_record_batch` its "
            "conversion to Arrow, `fold` the planner's pass over the same records.",
            "",
            *md_table(["stage", "seconds", "msg/s", "metrics/s"], stages),
            "",
        ]
        out += baseline_lines(decoder)
    out += before_lines(data)
    out += cpu_components_table(data)
    profile = data.get("decoder_profile")
    if profile:
        top = [
            [f"`{p['function']}`", p["ncalls"], num(p["tottime"], 3), num(p["cumtime"], 3)]
            for p in profile
        ]
        out += [
            "cProfile of `decode_messages` + `to_record_batch` on the same messages, the top "
            "functions by cumulative time (seconds under the profiler):",
            "",
            *md_table(["function", "calls", "own s", "cumulative s"], top),
            "",
        ]
    return out + cpu_share_note(data, "during the measured batches")


def baseline_lines(decoder: Mapping[str, Any]) -> Lines:
    """The decoder alone at another revision, timed in the same run, and the ratios to it."""
    baseline = decoder.get("baseline")
    if not isinstance(baseline, Mapping):
        return []
    ratios = baseline.get("ratios", {})
    rows = [
        [f"`{stage}`", num(s["messages_per_second"]),
         num(decoder["stages"].get(stage, {}).get("messages_per_second")), times(ratios.get(stage))]
        for stage, s in baseline["stages"].items()
    ]  # fmt: skip
    return [
        f"The same stages of revision `{baseline['git_revision']}`'s decoder (`--baseline`; "
        "`make bench` names the last one before decision 43: the pure-Python protobuf reader, "
        "`Rows.add` value by value), timed in the same run on the same messages, against this "
        "revision's:",
        "",
        *md_table(["stage", f"msg/s at {baseline['git_revision']}", "msg/s now", "now/then"], rows),
        "",
    ]


def before_lines(data: Mapping[str, Any]) -> Lines:
    """The headline figures of the run before (``--before``) beside this run's."""
    before = data.get("before")
    if not isinstance(before, Mapping):
        return []
    now_ratio = data["ratios"][f"{SPARKPLUG}/{RAW}"]
    now_rates = {
        peer: item["messages_per_second"]["median"] for peer, item in data["peers"].items()
    }
    rows = [
        ["sparkplug/raw (msg/s, same-run ratio)", times(before["ratio"]["median"]),
         times(now_ratio["median"])],
        *([f"{peer} msg/s", num(before["messages_per_second"].get(peer)), num(now_rates[peer])]
          for peer in PEERS),
    ]  # fmt: skip
    stages = (before.get("decoder") or {}).get("stages", {})
    rows += [
        [f"`{stage}` msg/s (decoder alone)", num(s["messages_per_second"]),
         num(data.get("decoder", {}).get("stages", {}).get(stage, {}).get("messages_per_second"))]
        for stage, s in stages.items()
    ]  # fmt: skip
    return [
        f"Before and after: the run at revision `{before['git_revision']}` ({before['date']}; "
        "`--before`, `make bench` gives `bench/results/before/sparkplug.json`, the decoder "
        "before decision 43) beside this one. Figures of two runs on a shared machine, each a "
        "median of its own; the ratios compare peers of one run.",
        "",
        *md_table(["figure", f"before ({before['git_revision']})", "after"], rows),
        "",
    ]


if __name__ == "__main__":
    sys.exit(main())
