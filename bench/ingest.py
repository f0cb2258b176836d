"""Backlog into Delta (``python -m bench.ingest``): queued QoS 1 and 2 JSON messages landed by
the ingest job's query (``partitionData`` wal or inline; ``--s3-modes``: the WAL on S3, see
``bench.ingest_s3``) against Spark's own ceiling (``synthetic``, the same writer fed by files)
and paho's raw drain; peers in turns after unmeasured warm-up rounds, each on a fresh broker."""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

from . import common, drainer
from .cpu_sampler import COMPONENTS, CpuSampler
from .drainer import TOPIC, TOPIC_FILTER
from .payloads import JSON_BYTES, JSON_SEQ_AT, JSON_TEMPLATE, json_payload
from .render import (
    Charts,
    Lines,
    clock_notes,
    cpu_components_table,
    cpu_share_note,
    goals_table,
    num,
    peer_clock_table,
    ratios_table,
    warmup_notes,
)

QOS2_BACKLOG_LIMIT = 60_000  # below 65,535: Mosquitto 2.0 numbers a message as it queues it
MODES = ("wal", "inline")
JOB_SINK = "the ingest job's writer: foreachBatch(BatchWriter), idempotent Delta appends"
GOAL_RATES = {1: 80_000.0, 2: 60_000.0}
WARMUP_ROWS = 600_000
"""The driver JVM's JIT compiles Spark's planning code over many queries: ten 60,000-message
QoS 2 runs after one warm-up run went from 35.4k to 55-67k msg/s (one sitting)."""

FIRST_BATCH = "first batch -> last commit"
FIRST_RECEIVE = "first receive -> last commit"
RECEIVER = "receiver: first -> last WAL append"
QUERY = "query start -> done"
PAHO_CLOCK = "connect -> last message"
CLOCKS = {
    FIRST_BATCH: "query progress: start of the first batch with input rows to start + "
    "batchDuration of the batch that completes the backlog (the headline figure)",
    FIRST_RECEIVE: "first WAL receive timestamp in the table to the end of that batch",
    RECEIVER: "first to last WAL receive timestamp in the table (MQTT -> WAL, ours only)",
    QUERY: "writeStream.start() until the bench saw the last batch's progress",
    PAHO_CLOCK: "inside the paho process, from CONNACK to the last message",
}


# ------------------------------------------ a Spark query (bench.sparkplug's and bench.latency's)


def spark_session(name: str, progress_updates: int = 10_000, master: str = "local[2]") -> Any:
    """The local Spark session with Delta a benchmark's queries run on."""
    from streaming_jobs.spark_session import local_spark

    updates = str(progress_updates)
    spark = local_spark(
        name, master, spark__sql__streaming__numRecentProgressUpdates=updates,
        spark__ui__showConsoleProgress="false",
    )  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def collect_garbage(spark: Any) -> None:
    """A full GC of the driver JVM, so that no run pays for what earlier queries left."""
    spark.sparkContext._jvm.java.lang.System.gc()


def job_source(spark: Any, argv: Sequence[str]) -> Any:
    """``format("mqtt")`` with the options the ingest job derives from its flags ``argv``."""
    from streaming_jobs.ingest import build_parser, source_options

    reader = spark.readStream.format("mqtt")
    for key, value in source_options(build_parser().parse_args(list(argv))).items():
        reader = reader.option(key, value)
    return reader.load()


def job_sink(
    frame: Any, table: Path, checkpoint: Path, trigger: str, payload_format: str = "binary",
    checkpoint_interval: int | None = None,
) -> tuple[Any, float]:  # fmt: skip
    """``frame.writeStream`` by the ingest job's writer; the seconds to create the table first."""
    from streaming_jobs.batch_writer import BatchWriter
    from streaming_jobs.payloads import make_plan
    from streaming_jobs.progress import RunStats

    writer = BatchWriter(make_plan(payload_format, None), str(table), None, RunStats())
    began = time.perf_counter()
    writer.create_tables(frame.sparkSession, frame.schema, checkpoint_interval)
    created = time.perf_counter() - began
    stream = frame.writeStream.option("checkpointLocation", str(checkpoint))
    return stream.trigger(processingTime=trigger).foreachBatch(writer), created


@dataclass(frozen=True, slots=True)
class BatchProgress:
    batch_id: int
    start: float  # epoch seconds
    seconds: float
    rows: int

    @property
    def end(self) -> float:
        return self.start + self.seconds


@dataclass(slots=True)
class QueryRun:
    batches: list[BatchProgress]
    seconds: float  # writeStream.start() -> the last batch's progress seen
    cpu_window: float  # seconds the CPU figures cover (around the measured batches)
    cpu: dict[str, float]  # CPU seconds per component in that window


def run_query(writer: Any, rows: int, timeout: float) -> QueryRun:
    """Run ``writer`` until ``rows`` rows are committed: those batches, the CPU around them."""
    with CpuSampler() as sampler:
        started = time.perf_counter()
        query = writer.start()
        seen: int | None = None
        batches: dict[int, BatchProgress] = {}
        landed = 0
        try:
            while landed < rows:
                last = query.lastProgress
                if last is not None and last.batchId != seen:
                    seen = last.batchId
                    batches = {
                        p.batchId: BatchProgress(
                            p.batchId,
                            datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp(),
                            p.batchDuration / 1000,
                            p.numInputRows,
                        )
                        for p in query.recentProgress
                        if p.numInputRows > 0
                    }
                    landed = sum(b.rows for b in batches.values())
                    if landed >= rows:
                        break
                if not query.isActive:
                    raise common.BenchError(
                        f"the query stopped after {landed} rows: {query.exception()}"
                    )
                if time.perf_counter() > started + timeout:
                    raise common.BenchError(
                        f"only {landed} of {rows} rows landed within {timeout} s"
                    )
                time.sleep(0.1)
            done = time.perf_counter() - started
        finally:
            query.stop()
    total, kept = 0, []
    for batch in (batches[key] for key in sorted(batches)):
        kept.append(batch)
        total += batch.rows
        if total >= rows:
            break
    window, cpu = sampler.window(kept[0].start, kept[-1].end)
    return QueryRun(kept, done, window, cpu)


@dataclass(slots=True)
class Landing:
    """One Spark peer's run: N rows landed in a Delta table."""

    peer: str
    rows: int
    run: QueryRun
    publish_rate: float | None = None
    first_received: float = 0.0  # epoch seconds, from the WAL timestamps in the rows (ours)
    last_received: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def batches(self) -> list[BatchProgress]:
        return self.run.batches

    @property
    def receive_seconds(self) -> float | None:
        """The receiver's first to last WAL append (ours only)."""
        return self.last_received - self.first_received if self.last_received else None

    @property
    def landing_seconds(self) -> float | None:
        """First message received -> end of the batch completing the backlog (ours only)."""
        return self.batches[-1].end - self.first_received if self.first_received else None

    @property
    def seconds(self) -> float:
        """First non-empty batch's start -> end of the batch completing the rows."""
        return self.batches[-1].end - self.batches[0].start

    @property
    def rate(self) -> float:
        return self.rows / self.seconds

    def as_dict(self) -> dict[str, Any]:
        batches = [
            {"id": b.batch_id, "rows": b.rows, "seconds": round(b.seconds, 3)} for b in self.batches
        ]
        return {
            "rows": self.rows, "rate": round(self.rate), "seconds": round(self.seconds, 3),
            "batches": batches, "cpu_window_seconds": round(self.run.cpu_window, 3),
            "cpu_seconds": {c: round(v, 3) for c, v in self.run.cpu.items()}, **self.details,
        }  # fmt: skip


def received(landing: Landing, found: Mapping[str, Any]) -> Landing:
    """``landing`` with the first and last receive time a table check found."""
    landing.first_received = found["first_received"].timestamp()
    landing.last_received = found["last_received"].timestamp()
    return landing


def cpu_per_100k(
    peers: Mapping[str, list[Landing]], count: Callable[[Landing], int]
) -> dict[str, dict[str, float]]:
    """CPU seconds per 100,000 messages (``count`` of a run) by component, median over runs."""
    return {
        peer: {
            component: round(
                common.Stats.of(r.run.cpu[component] / count(r) * 100_000 for r in runs).median, 3
            )
            for component in COMPONENTS
        }
        for peer, runs in peers.items()
    }


def others_share(peers: Mapping[str, list[Landing]]) -> float:
    """Median share of the machine's CPU that other processes (and steal) took in the runs."""
    cores = os.cpu_count() or 1
    return common.Stats.of(
        r.run.cpu["not ours (other processes)"] / (r.run.cpu_window * cores)
        for runs in peers.values()
        for r in runs
    ).median


# ------------------------------------------------------------------------------ the peers


@dataclass(frozen=True, slots=True)
class Setup:
    """How the Spark peers run: trigger, time limit of each step, ``format("mqtt")`` options."""

    trigger: str
    timeout: float
    source_options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OursPeer:
    """One of our Spark peers: ``partitionData``, QoS, where its WAL lives, the broker's window."""

    mode: str
    qos: int
    store: str = "local"
    inflight: int = common.MOSQUITTO_INFLIGHT

    @property
    def name(self) -> str:
        """``ours-wal``, ``ours-s3-inline``, ...; ``-qos2``, ``-inflight<N>`` off the default."""
        base = f"ours-{self.mode}" if self.store == "local" else f"ours-{self.store}"
        if self.store != "local" and self.mode != "wal":
            base += f"-{self.mode}"
        name = peer_name(base, self.qos)
        if self.inflight != common.MOSQUITTO_INFLIGHT:
            name += f"-inflight{self.inflight or '-unbounded'}"
        return name

    @property
    def local_wal(self) -> OursPeer:
        """``ours-wal`` with this peer's QoS and window: what a shared WAL is compared with."""
        return OursPeer("wal", self.qos, "local", self.inflight)


def peer_name(base: str, qos: int) -> str:
    """``ours-wal`` for QoS 1 (no QoS suffix), ``ours-wal-qos2`` for QoS 2."""
    return base if qos == 1 else f"{base}-qos{qos}"


def json_backlog(
    count: int, sessions: Sequence[tuple[str, str]], timeout: float, qos: int, inflight: int
) -> drainer.Backlog:
    """A fresh broker holding ``count`` numbered JSON payloads for each of ``sessions``."""

    def publish(url: str) -> float:
        return common.publish_windowed(
            url, count, lambda seq: (TOPIC, json_payload(seq)), timeout, qos
        )

    return drainer.backlog(count, sessions, publish, qos=qos, inflight=inflight)


def query_sessions(client_id: str, qos: int, setup: Setup) -> list[tuple[str, str]]:
    """(client id, filter) of each MQTT session the query will use: one per receiver."""
    from connector.options.source import SourceOptions
    from connector.receiver.shards import shard_options

    raw = dict(option.split("=", 1) for option in setup.source_options)
    options = SourceOptions.parse(
        {**raw, "brokerUrl": "tcp://127.0.0.1:1883", "topic": TOPIC_FILTER, "qos": str(qos),
         "clientId": client_id}
    )  # fmt: skip
    if options.receivers == 1:
        return [(client_id, TOPIC_FILTER)]
    shards = [shard_options(options, i) for i in range(options.receivers)]
    return [(s.client_id, s.topics[0]) for s in shards]


def check_rows(spark: Any, table: Path, rows: int) -> Any:
    """N rows, N distinct sequence numbers 0..N-1, every payload JSON_BYTES long."""
    from pyspark.sql import functions as F

    seq = F.substring("payload", JSON_SEQ_AT + 1, SEQUENCE_DIGITS).cast("string").cast("bigint")
    figures = {
        "rows": F.count("*"), "distinct": F.countDistinct(seq), "min_seq": F.min(seq),
        "max_seq": F.max(seq), "min_bytes": F.min(F.length("payload")),
        "max_bytes": F.max(F.length("payload")),
    }  # fmt: skip
    want = {"rows": rows, "distinct": rows, "min_seq": 0, "max_seq": rows - 1}
    return drainer.check_table(
        spark, table, figures, {**want, "min_bytes": JSON_BYTES, "max_bytes": JSON_BYTES}
    )


def run_job(
    spark: Any, peer: str, rows: int, setup: Setup, workdir: Path,
    backlog: Callable[[], drainer.Backlog], flags: Sequence[str], payload_format: str = "binary",
) -> tuple[Landing, Path]:  # fmt: skip
    """The ingest job's query (``flags``) over a fresh ``backlog()`` until ``rows`` rows landed."""
    collect_garbage(spark)
    table, checkpoint = workdir / f"{peer}-table", workdir / f"{peer}-checkpoint"
    queued = backlog()
    with queued.broker as broker:
        argv = ["--broker", broker.url, "--table", str(table), "--checkpoint", str(checkpoint)]
        frame = job_source(spark, [*argv, *flags])
        writer, created = job_sink(frame, table, checkpoint, setup.trigger, payload_format)
        run = run_query(writer, rows, setup.timeout)
        common.check_broker(broker)
    details = {"table_creation_seconds": round(created, 3)}
    return Landing(peer, rows, run, queued.publish_rate, details=details), table


def run_ours(
    spark: Any, peer: OursPeer, count: int, setup: Setup, workdir: Path, wal: str | None = None
) -> Landing:
    """The ingest job's query over a fresh JSON backlog of ``peer``'s QoS and window."""
    store = "" if peer.store == "local" else f"{peer.store}-"
    client_id = f"bench-ingest-{store}{peer.mode}-qos{peer.qos}"
    options = (*setup.source_options, *([f"walPath={wal}"] if wal else []))
    sessions = query_sessions(client_id, peer.qos, replace(setup, source_options=options))
    landing, table = run_job(
        spark, peer.name, count, setup, workdir,
        lambda: json_backlog(count, sessions, setup.timeout, peer.qos, peer.inflight),
        ["--topic", TOPIC_FILTER, "--qos", str(peer.qos), "--client-id", client_id,
         "--partition-data", peer.mode, *(f"--source-option={o}" for o in options)],
    )  # fmt: skip
    landing.details["max_inflight_messages"] = peer.inflight
    return received(landing, check_rows(spark, table, count))


def warmup_rounds(round_rows: int, target: int) -> int:
    """Warm-up rounds that land at least ``target`` rows when one lands ``round_rows``: >= 1."""
    return max(1, -(-target // round_rows)) if round_rows > 0 else 1


def synthetic_files_per_batch(rows_per_batch: int) -> int:
    """Files, so tasks, per batch: as many as ours cut such a batch into."""
    from connector.options.source import RECORDS_PER_PARTITION
    from connector.spark.reader.stream_reader import split_range

    return len(split_range(0, rows_per_batch, RECORDS_PER_PARTITION))


def run_synthetic(
    spark: Any, count: int, rows_per_batch: int, setup: Setup, workdir: Path
) -> Landing:
    """The same rows through the same writer from Parquet files, as many a batch as ours' tasks."""
    from pyspark.sql import functions as F

    from connector.spark.schema import SCHEMA_DDL

    collect_garbage(spark)
    source = workdir / "synthetic-source"
    table, checkpoint = workdir / "synthetic-table", workdir / "synthetic-checkpoint"
    per_batch = synthetic_files_per_batch(rows_per_batch)
    value = F.col("id")
    spark.range(0, count, 1, numPartitions=math.ceil(count / rows_per_batch) * per_batch).select(
        F.lit(TOPIC).alias("topic"),
        F.format_string(JSON_TEMPLATE, value, (value % 1000) / 8).cast("binary").alias("payload"),
        F.lit(1).cast("int").alias("qos"), F.lit(False).alias("retained"),
        F.lit(False).alias("duplicate"), (value % 65535 + 1).cast("int").alias("messageId"),
        F.current_timestamp().alias("timestamp"), value.alias("offset"),
    ).write.parquet(str(source))  # fmt: skip
    rows = spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", str(per_batch))
    writer, created = job_sink(rows.parquet(str(source)), table, checkpoint, setup.trigger)
    run = run_query(writer, count, setup.timeout)
    check_rows(spark, table, count)
    details = {
        "rows_per_batch": rows_per_batch,
        "files_per_batch": per_batch,
        "table_creation_seconds": round(created, 3),
    }
    return Landing("synthetic", count, run, details=details)


def run_paho(count: int, timeout: float, qos: int) -> dict[str, Any]:
    """paho-mqtt draining a fresh backlog: its figures and its CONNACK -> last message rate."""
    client_id = f"bench-ingest-paho-qos{qos}"
    queued = json_backlog(
        count, [(client_id, TOPIC_FILTER)], timeout, qos, common.MOSQUITTO_INFLIGHT
    )
    with queued.broker as broker:
        _, details = drainer.run(
            "paho", broker.url, client_id, count, timeout, qos=qos, stall=10.0, seq_at=JSON_SEQ_AT
        )
    seconds = details["drain_seconds"] - details["connect_seconds"]
    return {"rate": details["distinct"] / seconds, **details}


# ------------------------------------------------------------------------------ the run


class IngestRun:
    """One ``python -m bench.ingest`` run: its peers, what they measured, its results."""

    def __init__(self, args: Any) -> None:
        self.args = args
        self.modes: list[str] = list(dict.fromkeys(args.modes))
        self.s3_modes: list[str] = list(dict.fromkeys(args.s3_modes))
        self.windows: list[int] = list(dict.fromkeys(args.inflight))
        self.levels: list[int] = sorted(set(args.qos))
        self.sizes = {1: args.messages, 2: min(args.messages, QOS2_BACKLOG_LIMIT)}
        self.combos = [
            OursPeer(mode, qos, store, window)
            for window in self.windows
            for qos in self.levels
            for store, store_modes in (("local", self.modes), ("s3", self.s3_modes))
            for mode in store_modes
        ]
        self.setup = Setup(args.trigger, args.timeout, tuple(args.source_option))
        self.work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
        self.s3: Any = None  # bench.ingest_s3.S3Store
        self.spark: Any = None
        self.runs: dict[str, list[Landing]] = {}  # every Spark peer's measured runs
        self.warmups: dict[str, list[Landing]] = {}
        self.paho: dict[str, list[dict[str, Any]]] = {}
        synthetic_rows = 0 if args.no_synthetic else self.sizes[self.levels[0]]
        round_rows = sum(self.sizes[p.qos] for p in self.combos) + synthetic_rows
        self.rounds = 0 if args.no_warmup else warmup_rounds(round_rows, args.warmup_rows)

    def spark_round(self, label: str, rep: int, into: dict[str, list[Landing]]) -> None:
        """Every Spark peer once in the turn of ``rep``; synthetic with ours' rows per batch."""
        run_dir = self.work / label
        batches = 2
        for peer in common.turn(self.combos, rep):
            wal = None if peer.store == "local" else str(self.s3.fresh(f"{peer.name}-{label}"))
            landing = run_ours(self.spark, peer, self.sizes[peer.qos], self.setup, run_dir, wal)
            into.setdefault(peer.name, []).append(landing)
            if peer == self.combos[0] and into is self.runs:
                batches = len(landing.batches)
            shutil.rmtree(run_dir, ignore_errors=True)
        if not self.args.no_synthetic:
            size = self.sizes[self.levels[0]]
            landing = run_synthetic(
                self.spark, size, math.ceil(size / batches), self.setup, run_dir
            )
            into.setdefault("synthetic", []).append(landing)
            shutil.rmtree(run_dir, ignore_errors=True)

    def measure(self) -> dict[str, Any]:
        """The S3 server (before the JVM: its workers inherit the credentials), rounds, results."""
        from . import ingest_s3

        info = common.machine("pyspark", "delta-spark")
        try:
            if self.s3_modes or self.args.append_profile:
                self.s3 = ingest_s3.S3Store.start(self.work / "s3")
                info["s3_server"] = self.s3.version
            self.spark = spark_session("bench-ingest")
            for _ in range(self.rounds):
                self.spark_round("warmup", 0, self.warmups)
            for rep in range(self.args.repeat):
                self.spark_round(f"rep{rep}", rep, self.runs)
                for qos in [] if self.args.no_paho else self.levels:
                    drained = run_paho(self.sizes[qos], self.args.timeout, qos)
                    self.paho.setdefault(peer_name("paho", qos), []).append(drained)
            appends = ingest_s3.append_profile(self) if self.args.append_profile else None
            return {"machine": info, **self.results(), "receiver_appends": appends}
        finally:
            if self.spark is not None:
                self.spark.stop()
            if self.s3 is not None:
                self.s3.close()
            shutil.rmtree(self.work, ignore_errors=True)

    def ratios(self, headline: Mapping[str, list[float]]) -> tuple[dict[str, common.Stats], dict]:
        """Paired ratios against synthetic and paho, and of each S3 peer against its local one."""
        spec = {peer.name: peer for peer in self.combos}
        pairs = [
            (peer, other)
            for peer in spec
            for other in ("synthetic", peer_name("paho", spec[peer].qos))
            if other in headline
            and (other == "synthetic" or spec[peer].inflight == common.MOSQUITTO_INFLIGHT)
        ]
        shared: dict[str, str] = {}
        for peer in (p for p in spec if spec[p].store != "local"):
            for pair in (spec[peer].local_wal, replace(spec[peer], store="local")):
                if pair.name in spec and (peer, pair.name) not in pairs:
                    shared.setdefault(peer, pair.name)
                    pairs.append((peer, pair.name))
        ratios = {f"{a}/{b}": common.paired_ratio(headline[a], headline[b]) for a, b in pairs}
        return ratios, shared

    def results(self) -> dict[str, Any]:
        from .ingest_s3 import SHARED_WAL_GOAL

        args, spec = self.args, {peer.name: peer for peer in self.combos}
        rates = {peer: clock_rates(runs) for peer, runs in self.runs.items()}
        rates |= {name: {PAHO_CLOCK: [d["rate"] for d in runs]} for name, runs in self.paho.items()}
        headline = {p: r.get(FIRST_BATCH, r.get(PAHO_CLOCK, [])) for p, r in rates.items()}
        ratios, shared = self.ratios(headline)
        goals = {
            peer: common.goal(
                peer, GOAL_RATES[p.qos], common.Stats.of(headline[peer]).median, None, qos=p.qos
            )
            for peer, p in spec.items()
            if p.store == "local"
        }
        for peer, pair in shared.items():
            name = f"{peer}/{pair}"
            goals[name] = common.goal(
                name, SHARED_WAL_GOAL, ratios[name].median, qos=spec[peer].qos,
                max_inflight_messages=spec[peer].inflight,
            )  # fmt: skip
        runs: dict[str, list[Any]] = {p: [r.as_dict() for r in rs] for p, rs in self.runs.items()}
        peers = {
            peer: {
                "rates": {clock: common.Stats.of(v).as_dict(1) for clock, v in rates[peer].items()},
                "runs": records,
                "warmup_rates": [round(w.rate) for w in self.warmups.get(peer, [])],
            }
            for peer, records in (runs | self.paho).items()
        }
        rounds = self.rounds
        warmup = "none" if args.no_warmup else (
            f"{rounds} unmeasured round{'' if rounds == 1 else 's'}, every Spark peer once at the "
            f"measured size, until at least {args.warmup_rows:,} rows landed"
        )  # fmt: skip
        return {
            "parameters": {
                "messages_per_qos": {str(q): self.sizes[q] for q in self.levels},
                "qos": self.levels, "payload_bytes": JSON_BYTES, "repeat": args.repeat,
                "master": "local[2]", "trigger": f"processingTime={args.trigger}",
                "sink": JOB_SINK, "source_options": list(args.source_option), "warmup": warmup,
                "publish_inflight": common.MOSQUITTO_INFLIGHT, "s3_modes": self.s3_modes,
                "max_inflight_messages": self.windows,
            },
            "clocks": CLOCKS,
            "peers": peers,
            "ratios": {name: r.as_dict(3) for name, r in ratios.items()},
            "goal": goals,
            "other_processes_cpu_share": round(others_share(self.runs), 3),
            "cpu_seconds_per_100k_messages": cpu_per_100k(self.runs, lambda r: r.rows),
        }  # fmt: skip


def clock_rates(landings: list[Landing]) -> dict[str, list[float]]:
    rates = {
        FIRST_BATCH: [r.rate for r in landings],
        QUERY: [r.rows / r.run.seconds for r in landings],
    }
    if all(r.landing_seconds for r in landings):
        rates[FIRST_RECEIVE] = [r.rows / (r.landing_seconds or 1) for r in landings]
    if all(r.receive_seconds for r in landings):
        rates[RECEIVER] = [r.rows / (r.receive_seconds or 1) for r in landings]
    return rates


def query_arguments(parser: argparse.ArgumentParser, *, warmup_rounds: bool = True) -> None:
    """The arguments of a benchmark's Spark queries (:class:`Setup`): ``--trigger``,
    ``--source-option`` and, with ``warmup_rounds``, ``--warmup-rounds``."""
    parser.add_argument("--trigger", default="0 seconds", help="processing-time interval")
    parser.add_argument(
        "--source-option", action="append", default=[], metavar="KEY=VALUE",
        help="an option of format('mqtt') for the queries, e.g. minMessagesPerTrigger=20000",
    )  # fmt: skip
    if warmup_rounds:
        parser.add_argument("--warmup-rounds", type=int, default=1, help="unmeasured rounds first")


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = common.arguments("ingest", __doc__, messages=200_000, repeat=3, timeout=600.0)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--qos", nargs="+", type=int, choices=(1, 2), default=[1, 2])
    query_arguments(parser, warmup_rounds=False)
    parser.add_argument(
        "--s3-modes", nargs="+", choices=MODES, default=[],
        help="also with the WAL on an S3 server on loopback (peers ours-s3, ours-s3-inline)",
    )  # fmt: skip
    parser.add_argument(
        "--inflight", nargs="+", type=int, default=[common.MOSQUITTO_INFLIGHT],
        help="the broker's max_inflight_messages for our peers' backlogs (0: unbounded)",
    )  # fmt: skip
    parser.add_argument(
        "--append-profile", action="store_true",
        help="then the receiver alone into each WAL store, every append timed (bench.ingest_s3)",
    )  # fmt: skip
    parser.add_argument("--live-messages", type=int, default=20_000, help="of the append profile")
    parser.add_argument("--no-synthetic", action="store_true", help="skip the Spark ceiling")
    parser.add_argument("--no-paho", action="store_true", help="skip the paho drain")
    parser.add_argument("--no-warmup", action="store_true", help="skip the warm-up rounds")
    parser.add_argument("--warmup-rows", type=int, default=WARMUP_ROWS, help="rows to warm up")
    args = parser.parse_args(argv)
    if args.messages < 2 or args.warmup_rows < 0 or any(k < 0 for k in args.inflight):
        parser.error("--messages must be >= 2, --warmup-rows and --inflight >= 0")
    if any(o.startswith("walPath=") for o in args.source_option) and args.s3_modes:
        parser.error("--s3-modes sets walPath itself")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from . import ingest_s3

    run = IngestRun(parse_args(argv))
    render = ingest_s3.section if run.s3_modes else section
    return common.finish("ingest", run.measure, run.args.output, render)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    backlogs = " and ".join(f"{num(n)} QoS {q}" for q, n in params["messages_per_qos"].items())
    options = ", ".join(f"`{o}`" for o in params.get("source_options", []))
    out = [
        f"A backlog of {backlogs} messages "
        f"({params.get('payload_bytes')}-byte JSON) landed in Delta by the ingest job's query "
        f"on {params.get('master')}, trigger {params.get('trigger')}, written by "
        f"{params.get('sink')}"
        + (f", source options {options}" if options else "")
        + f"; median of {params.get('repeat')}.",
        "",
        *warmup_notes(params.get("warmup"), data.get("peers")),
        *clock_notes(data),
        *peer_clock_table(data),
        "",
        *ratios_table(data.get("ratios")),
        "",
        *goals_table(data.get("goal")),
        "",
        *cpu_components_table(data),
    ]
    shared = cpu_share_note(data, "during the run")
    return [*out, "", *shared] if shared else out


if __name__ == "__main__":
    sys.exit(main())
