"""Backlog into Delta: queued QoS 1 and QoS 2 messages landed by the ingest query, in msg/s.

For every repetition, QoS and peer a fresh Mosquitto holds a fresh backlog (``bench.drainer``):
N numbered 100-byte JSON payloads queued with that QoS for the peer's persistent session(s).
Peers of QoS 2 backlogs carry ``-qos2`` (``ours-wal-qos2``, ``paho-qos2``); off Mosquitto's
default window (``--inflight``, the broker's ``max_inflight_messages``: how many messages one
socket read, one append, can hold; 0 is unbounded) ``-inflight<K>``. Goals: 80,000 msg/s (QoS 1)
and 60,000 msg/s (QoS 2) into Delta. Peers:

* ``ours-wal`` / ``ours-inline``: the ingest job's query (``format("mqtt")`` with the options
  ``streaming_jobs.ingest`` derives from its flags, written by the job's own ``foreachBatch``
  writer, the table created before the query as the job does, outside the clocks) in this
  process on local[2], ``partitionData`` wal or inline;
* ``synthetic``: the same write path fed by Spark's file source from Parquet files of the same
  rows, as many files (tasks) per batch as ours split such a batch into (decision 30) and as
  many rows per batch as ``ours-wal`` had in that repetition: Spark + Delta's own ceiling;
* ``paho``: ``bench.drainer``'s paho-mqtt worker: the raw rate of a plain client, nothing written;
* ``ours-s3`` / ``ours-s3-inline`` (``--s3-modes``): the WAL on an S3 server (``bench.ingest_s3``).

The headline clock, from the query's progress events: start of the first batch with input rows
-> end of the batch that completes the N rows. Unmeasured warm-up rounds (every Spark peer once)
land at least ``WARMUP_ROWS`` rows first (JIT compilation, class loading, the data source
lookup), and every run starts with a full GC of the driver JVM: Spark's ContextCleaner removes
what earlier queries left only after a GC found it unreachable, which a run would otherwise pay
inside its clock (QoS 2, same sitting: 43.9k and 47.3k msg/s without, 53.2k and 59.6k with).
Ratios pair the runs of one repetition. Checks: every table holds exactly N rows with N distinct
sequence numbers 0..N-1; paho saw N distinct numbers. Every Spark run samples the CPU time of
the pipeline by component, and of the other processes, around the measured batches
(``bench.cpu_sampler``); the wait for the rows reads the query's whole progress list only after
a new batch (a tenth of the driver JVM's CPU per call).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

from . import drainer
from .common import (
    MOSQUITTO_INFLIGHT,
    BenchError,
    Stats,
    finish,
    machine,
    paired_ratio,
    publish_windowed,
    turn,
)
from .cpu_sampler import COMPONENTS, CpuSampler
from .drainer import TOPIC, TOPIC_FILTER
from .payloads import JSON_BYTES, JSON_SEQ_AT, JSON_TEMPLATE, json_payload
from .render import (
    Charts,
    Lines,
    clock_notes,
    goals_table,
    num,
    peer_clock_table,
    ratios_table,
    warmup_notes,
)

QOS2_BACKLOG_LIMIT = 60_000
"""QoS 2 backlogs stay below the packet-id space: Mosquitto 2.0 numbers queued messages when it
queues them, so past 65,535 waiting for one session it reuses ids of open exchanges and the
drain stalls (``mosquitto_sub`` too); docs/brokers.md says so."""
MODES = ("wal", "inline")
JOB_SINK = "the ingest job's writer: foreachBatch(BatchWriter), idempotent Delta appends"
GOAL_RATES = {1: 80_000.0, 2: 60_000.0}
"""Messages per second into Delta on local[2], per QoS of the backlog."""
QOS_LEVELS = (1, 2)
WARMUP_ROWS = 600_000
"""Rows the warm-up rounds land before the measured runs. The driver JVM's JIT compiles Spark's
planning code over many queries: ten 60,000-message QoS 2 runs after a single warm-up run went
from 35.4k to 55-67k msg/s while the JIT's CPU per run fell from 0.89 to 0.12-0.30 s (one
sitting). The default peers' one round (QoS 1 and 2, both modes, the synthetic peer) lands
720,000 rows; a QoS 2-only run needs ten rounds of 60,000 to warm up as much."""

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


# ------------------------------------------------------------------------------ a Spark query
# (bench.sparkplug and bench.latency run theirs the same way)


def spark_session(name: str, progress_updates: int = 10_000) -> Any:
    """The local[2] Spark session with Delta a benchmark's queries run on."""
    from streaming_jobs.spark_session import local_spark

    spark = local_spark(
        name,
        "local[2]",
        spark__sql__streaming__numRecentProgressUpdates=str(progress_updates),
        spark__ui__showConsoleProgress="false",
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def collect_garbage(spark: Any) -> None:
    """A full GC of the driver JVM (``System.gc()``), so that the ContextCleaner can remove
    what earlier runs' queries left before the next run's clock starts."""
    spark.sparkContext._jvm.java.lang.System.gc()


def job_source(spark: Any, argv: Sequence[str]) -> Any:
    """``format("mqtt")`` with the options the ingest job derives from its flags ``argv``."""
    from streaming_jobs.ingest import build_parser, source_options

    reader = spark.readStream.format("mqtt")
    for key, value in source_options(build_parser().parse_args(list(argv))).items():
        reader = reader.option(key, value)
    return reader.load()


def job_sink(
    frame: Any,
    table: Path,
    checkpoint: Path,
    trigger: str,
    payload_format: str = "binary",
    checkpoint_interval: int | None = None,
) -> tuple[Any, float]:
    """``frame.writeStream`` into ``table`` by the ingest job's writer (``foreachBatch``
    (BatchWriter), idempotent Delta appends), and the seconds taken to create the table first,
    as the job does before its query starts."""
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
    durations_ms: dict[str, int]

    @property
    def end(self) -> float:
        return self.start + self.seconds


@dataclass(slots=True)
class QueryRun:
    batches: list[BatchProgress]
    seconds: float  # writeStream.start() -> the last batch's progress seen
    cpu_window: float  # seconds the CPU figures cover (around the measured batches)
    cpu: dict[str, float]  # CPU seconds per component in that window


def _landed_batches(query: Any) -> list[BatchProgress]:
    """Distinct batches with input rows, in order, from the query's recent progress."""
    batches: dict[int, BatchProgress] = {}
    for p in query.recentProgress:
        if p.numInputRows > 0:
            start = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()
            durations = dict(p.durationMs)
            batches[p.batchId] = BatchProgress(
                p.batchId, start, p.batchDuration / 1000, p.numInputRows, durations
            )
    return [batches[key] for key in sorted(batches)]


def run_query(writer: Any, rows: int, timeout: float) -> QueryRun:
    """Start ``writer``, wait until ``rows`` rows are committed, stop it; keeps the non-empty
    batches up to the one completing ``rows`` and the CPU time of the pipeline around them.

    Every 0.1 s it asks for the query's last progress only; the whole list, which costs the
    driver JVM several times more CPU per call, is read when a new batch has ended."""
    with CpuSampler() as sampler:
        started = time.perf_counter()
        query = writer.start()
        deadline = started + timeout
        seen: int | None = None
        batches: list[BatchProgress] = []
        landed = 0
        try:
            while landed < rows:
                last = query.lastProgress
                if last is not None and last.batchId != seen:
                    seen = last.batchId
                    batches = _landed_batches(query)
                    landed = sum(b.rows for b in batches)
                    if landed >= rows:
                        break
                if not query.isActive:
                    raise BenchError(f"the query stopped after {landed} rows: {query.exception()}")
                if time.perf_counter() > deadline:
                    raise BenchError(f"only {landed} of {rows} rows landed within {timeout} s")
                time.sleep(0.1)
            done = time.perf_counter() - started
        finally:
            query.stop()
    total, kept = 0, []
    for batch in batches:
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
    first_received: float | None = None  # epoch seconds, from the WAL timestamps in the rows
    last_received: float | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def batches(self) -> list[BatchProgress]:
        return self.run.batches

    @property
    def receive_seconds(self) -> float | None:
        """The receiver's first to last WAL append (ours only)."""
        if self.first_received is None or self.last_received is None:
            return None
        return self.last_received - self.first_received

    @property
    def landing_seconds(self) -> float | None:
        """First message received -> end of the batch completing the backlog (ours only)."""
        if self.first_received is None:
            return None
        return self.batches[-1].end - self.first_received

    @property
    def seconds(self) -> float:
        """First non-empty batch's start -> end of the batch completing the rows."""
        return self.batches[-1].end - self.batches[0].start

    @property
    def rate(self) -> float:
        return self.rows / self.seconds

    def as_dict(self) -> dict[str, Any]:
        def rounded(value: float | None, digits: int | None = None) -> float | None:
            return None if not value else round(value, digits)

        return {
            "rows": self.rows,
            "rate": round(self.rate),
            "seconds": round(self.seconds, 3),
            "query_seconds": round(self.run.seconds, 3),
            "receive_rate": rounded(self.receive_seconds and self.rows / self.receive_seconds),
            "first_receive_to_last_commit_seconds": rounded(self.landing_seconds, 3),
            "backlog_publish_rate": rounded(self.publish_rate),
            "batches": [
                {"id": b.batch_id, "rows": b.rows, "seconds": round(b.seconds, 3), **b.durations_ms}
                for b in self.batches
            ],
            "cpu_window_seconds": round(self.run.cpu_window, 3),
            "cpu_seconds": {c: round(v, 3) for c, v in self.run.cpu.items()},
            **self.details,
        }


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
                Stats.of(r.run.cpu[component] / count(r) * 100_000 for r in runs).median, 3
            )
            for component in COMPONENTS
        }
        for peer, runs in peers.items()
    }


def others_share(peers: Mapping[str, list[Landing]]) -> float:
    """Median share of the machine's CPU that processes not ours (and hypervisor steal) took
    in the windows."""
    cores = os.cpu_count() or 1
    return Stats.of(
        r.run.cpu["not ours (other processes)"] / (r.run.cpu_window * cores)
        for runs in peers.values()
        for r in runs
    ).median


# ------------------------------------------------------------------------------ the peers


@dataclass(frozen=True, slots=True)
class Setup:
    """How the Spark peers run: trigger interval, time limit of each step, the options of
    ``format("mqtt")`` added as the job's ``--source-option``."""

    trigger: str
    timeout: float
    source_options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OursPeer:
    """One of our Spark peers: how records reach the tasks (``partitionData``), the QoS of
    its backlog, where its WAL lives (``local``: the job's default, in the checkpoint; ``s3``:
    under a fresh prefix on the run's S3-compatible server) and the broker's inflight window."""

    mode: str
    qos: int
    store: str = "local"
    inflight: int = MOSQUITTO_INFLIGHT

    @property
    def name(self) -> str:
        """``ours-wal``, ``ours-inline``, ``ours-s3`` (partitionData wal), ``ours-s3-inline``;
        then ``-qos2``, and ``-inflight<N>`` / ``-inflight-unbounded`` off Mosquitto's default
        window."""
        if self.store == "local":
            base = f"ours-{self.mode}"
        else:
            base = f"ours-{self.store}" + ("" if self.mode == "wal" else f"-{self.mode}")
        name = peer_name(base, self.qos)
        if self.inflight != MOSQUITTO_INFLIGHT:
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
        return publish_windowed(url, count, lambda seq: (TOPIC, json_payload(seq)), timeout, qos)

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


def run_ours(
    spark: Any, peer: OursPeer, count: int, setup: Setup, workdir: Path, wal: str | None = None
) -> Landing:
    """The ingest job's query over a fresh backlog of ``count`` messages published and
    subscribed with ``peer.qos``, on a broker with ``peer.inflight``; the WAL at ``wal``
    (``--source-option walPath=...``) or, without one, where the job puts it."""
    collect_garbage(spark)
    name, mode, qos = peer.name, peer.mode, peer.qos
    store = "" if peer.store == "local" else f"{peer.store}-"
    client_id = f"bench-ingest-{store}{mode}-qos{qos}"
    table, checkpoint = workdir / f"{name}-table", workdir / f"{name}-checkpoint"
    options = (*setup.source_options, *([f"walPath={wal}"] if wal else []))
    sessions = query_sessions(client_id, qos, replace(setup, source_options=options))
    queued = json_backlog(count, sessions, setup.timeout, qos, peer.inflight)
    with queued.broker as broker:
        frame = job_source(spark, [
            "--broker", broker.url, "--topic", TOPIC_FILTER, "--qos", str(qos),
            "--table", str(table), "--checkpoint", str(checkpoint), "--client-id", client_id,
            "--partition-data", mode, *(f"--source-option={o}" for o in options),
        ])  # fmt: skip
        writer, created = job_sink(frame, table, checkpoint, setup.trigger)
        run = run_query(writer, count, setup.timeout)
        if broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{broker.log_text()}")
    details = {"table_creation_seconds": round(created, 3), "max_inflight_messages": peer.inflight}
    landing = Landing(name, count, run, queued.publish_rate, details=details)
    if wal is not None:
        landing.details["wal_path"] = wal
    return received(landing, check_rows(spark, table, count))


def warmup_rounds(round_rows: int, target: int) -> int:
    """Warm-up rounds (every Spark peer once) that land at least ``target`` rows when one
    round lands ``round_rows``: at least one."""
    return max(1, -(-target // round_rows)) if round_rows > 0 else 1


def synthetic_files_per_batch(rows_per_batch: int) -> int:
    """Files (so tasks) per batch of the synthetic peer: as many as ours cut a batch of
    ``rows_per_batch`` rows into (``reader.split_range`` with the default
    ``recordsPerPartition``), so both pay the same per-task costs."""
    from connector.options.source import RECORDS_PER_PARTITION
    from connector.spark.reader.stream_reader import split_range

    return len(split_range(0, rows_per_batch, RECORDS_PER_PARTITION))


def run_synthetic(
    spark: Any, count: int, rows_per_batch: int, setup: Setup, workdir: Path
) -> Landing:
    """The same rows through the same write path from a bounded in-JVM stream: Parquet files
    of the source's schema, made beforehand, read ``synthetic_files_per_batch`` files per
    batch. Unlike ``rate-micro-batch`` it ends, so no batch is interrupted when the query
    stops."""
    from pyspark.sql import functions as F

    from connector.spark.schema import SCHEMA_DDL

    collect_garbage(spark)
    source = workdir / "synthetic-source"
    table, checkpoint = workdir / "synthetic-table", workdir / "synthetic-checkpoint"
    per_batch = synthetic_files_per_batch(rows_per_batch)
    files = math.ceil(count / rows_per_batch) * per_batch
    value = F.col("id")
    (
        spark.range(0, count, 1, numPartitions=files)
        .select(
            F.lit(TOPIC).alias("topic"),
            F.format_string(JSON_TEMPLATE, value, (value % 1000) / 8)
            .cast("binary")
            .alias("payload"),
            F.lit(1).cast("int").alias("qos"),
            F.lit(False).alias("retained"),
            F.lit(False).alias("duplicate"),
            (value % 65535 + 1).cast("int").alias("messageId"),
            F.current_timestamp().alias("timestamp"),
            value.alias("offset"),
        )
        .write.parquet(str(source))
    )
    rows = (
        spark.readStream.schema(SCHEMA_DDL)
        .option("maxFilesPerTrigger", str(per_batch))
        .parquet(str(source))
    )
    writer, created = job_sink(rows, table, checkpoint, setup.trigger)
    run = run_query(writer, count, setup.timeout)
    check_rows(spark, table, count)
    details = {
        "rows_per_batch": rows_per_batch,
        "files_per_batch": per_batch,
        "table_creation_seconds": round(created, 3),
    }
    return Landing("synthetic", count, run, details=details)


def run_paho(count: int, timeout: float, qos: int) -> tuple[float, dict[str, Any]]:
    """paho-mqtt draining a fresh backlog (``bench.drainer``): its CONNACK -> last message
    rate, and the run's record."""
    client_id = f"bench-ingest-paho-qos{qos}"
    queued = json_backlog(count, [(client_id, TOPIC_FILTER)], timeout, qos, MOSQUITTO_INFLIGHT)
    with queued.broker as broker:
        _, details = drainer.run(
            "paho", broker.url, client_id, count, timeout, qos=qos, stall=10.0, seq_at=JSON_SEQ_AT
        )
    seconds = details["drain_seconds"] - details["connect_seconds"]
    rate = details["distinct"] / seconds
    return rate, {
        "rate": round(rate),
        "backlog_publish_rate": round(queued.publish_rate),
        **details,
    }


# ------------------------------------------------------------------------------ the run


class IngestRun:
    """One ``python -m bench.ingest`` run: its peers, what they measured, its results."""

    def __init__(self, args: argparse.Namespace) -> None:
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
        self.info = machine("pyspark", "delta-spark")
        self.work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
        self.s3: Any = None  # bench.ingest_s3.S3Store
        self.spark: Any = None
        self.ours: dict[str, list[Landing]] = {peer.name: [] for peer in self.combos}
        self.synthetic: list[Landing] = []
        self.paho: dict[str, list[tuple[float, dict[str, Any]]]] = {
            peer_name("paho", q): [] for q in self.levels
        }
        self.warmups: dict[str, list[Landing]] = {}
        self.appends: dict[str, Any] = {}
        synthetic_rows = 0 if args.no_synthetic else self.sizes[self.levels[0]]
        round_rows = sum(self.sizes[p.qos] for p in self.combos) + synthetic_rows
        self.rounds = 0 if args.no_warmup else warmup_rounds(round_rows, args.warmup_rows)

    def wal(self, peer: OursPeer, label: str) -> str | None:
        if peer.store == "local" or self.s3 is None:
            return None
        return str(self.s3.fresh(f"{peer.name}-{label}"))

    def warm_up(self) -> None:
        """JIT, class loading, the data source lookup: every Spark peer, not measured."""
        for _ in range(self.rounds):
            for peer in self.combos:
                where = self.wal(peer, "warmup")
                landing = run_ours(
                    self.spark, peer, self.sizes[peer.qos], self.setup, self.work / "warmup", where
                )
                self.warmups.setdefault(peer.name, []).append(landing)
            if not self.args.no_synthetic:
                size = self.sizes[self.levels[0]]
                warm = self.work / "warmup"
                landing = run_synthetic(self.spark, size, size // 2, self.setup, warm)
                self.warmups.setdefault("synthetic", []).append(landing)
            shutil.rmtree(self.work / "warmup", ignore_errors=True)

    def measure(self) -> None:
        """The repetitions, peers in turns; the synthetic peer with as many rows per batch as
        ours had (the same per-batch overheads); paho at each QoS."""
        combos = self.combos
        for rep in range(self.args.repeat):
            for peer in turn(combos, rep):
                run_dir = self.work / f"rep{rep}"
                where = self.wal(peer, f"rep{rep}")
                landing = run_ours(
                    self.spark, peer, self.sizes[peer.qos], self.setup, run_dir, where
                )
                self.ours[peer.name].append(landing)
                shutil.rmtree(run_dir, ignore_errors=True)
            if not self.args.no_synthetic:
                size = self.sizes[self.levels[0]]
                per_batch = math.ceil(size / len(self.ours[combos[0].name][-1].batches))
                landing = run_synthetic(self.spark, size, per_batch, self.setup, self.work / "syn")
                self.synthetic.append(landing)
                shutil.rmtree(self.work / "syn", ignore_errors=True)
            if not self.args.no_paho:
                for qos in self.levels:
                    drain = run_paho(self.sizes[qos], self.args.timeout, qos)
                    self.paho[peer_name("paho", qos)].append(drain)

    def ratios(self, headline: Mapping[str, list[float]]) -> tuple[dict[str, Stats], dict]:
        """Paired ratios: ours against the synthetic peer and paho (on the default window);
        a peer with its WAL on the store against its local peer. Returns them, and the S3
        peers' pairs."""
        spec = {peer.name: peer for peer in self.combos}
        ratios: dict[str, Stats] = {}
        for peer in self.ours:
            against = ["synthetic"]
            if spec[peer].inflight == MOSQUITTO_INFLIGHT:  # paho drains with the default
                against.append(peer_name("paho", spec[peer].qos))
            for other in against:
                if other in headline:
                    ratios[f"{peer}/{other}"] = paired_ratio(headline[peer], headline[other])
        shared: dict[str, str] = {}
        for peer in self.ours:
            if spec[peer].store == "local":
                continue
            for pair in (spec[peer].local_wal, replace(spec[peer], store="local")):
                if pair.name in self.ours and f"{peer}/{pair.name}" not in ratios:
                    shared.setdefault(peer, pair.name)
                    ratios[f"{peer}/{pair.name}"] = paired_ratio(
                        headline[peer], headline[pair.name]
                    )
        return ratios, shared

    def results(self) -> dict[str, Any]:
        from .ingest_s3 import SHARED_WAL_GOAL

        args, spec = self.args, {peer.name: peer for peer in self.combos}
        spark_peers: dict[str, list[Landing]] = dict(self.ours)
        if self.synthetic:
            spark_peers["synthetic"] = self.synthetic
        rates = {peer: clock_rates(runs) for peer, runs in spark_peers.items()}
        for name, drains in self.paho.items():
            if drains:
                rates[name] = {PAHO_CLOCK: [rate for rate, _ in drains]}
        headline = {p: r.get(FIRST_BATCH, r.get(PAHO_CLOCK, [])) for p, r in rates.items()}
        ratios, shared = self.ratios(headline)
        goals: dict[str, dict[str, Any]] = {}
        for peer in self.ours:
            if spec[peer].store == "local":
                measured, target = Stats.of(headline[peer]).median, GOAL_RATES[spec[peer].qos]
                goals[peer] = {
                    "qos": spec[peer].qos, "target": target, "measured": round(measured),
                    "met": measured >= target,
                }  # fmt: skip
        for peer, pair in shared.items():
            name, measured = f"{peer}/{pair}", ratios[f"{peer}/{pair}"].median
            goals[name] = {
                "ratio": name, "qos": spec[peer].qos,
                "max_inflight_messages": spec[peer].inflight, "target": SHARED_WAL_GOAL,
                "measured": round(measured, 3), "met": measured >= SHARED_WAL_GOAL,
            }  # fmt: skip
        peers: dict[str, Any] = {
            peer: {
                "rates": {clock: Stats.of(v).as_dict(1) for clock, v in rates[peer].items()},
                "runs": [r.as_dict() for r in runs],
                "warmup_rates": [round(w.rate) for w in self.warmups.get(peer, [])],
            }
            for peer, runs in spark_peers.items()
        }
        for name, drains in self.paho.items():
            if drains:
                peers[name] = {"rates": {PAHO_CLOCK: Stats.of(headline[name]).as_dict(1)}}
                peers[name]["runs"] = [record for _, record in drains]
        conf = self.spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "")
        vm_flags = [
            w for w in conf.split() if w.startswith("-XX:") and "IgnoreUnrecognized" not in w
        ]
        rounds = self.rounds
        warmup = "none" if args.no_warmup else (
            f"{rounds} unmeasured round{'' if rounds == 1 else 's'}, every Spark peer once at the "
            f"measured size, until at least {args.warmup_rows:,} rows landed"
        )  # fmt: skip
        server = (
            None if self.s3 is None else f"{self.s3.version} on 127.0.0.1, a fresh prefix per run"
        )
        return {
            "benchmark": "ingest",
            "machine": self.info,
            "parameters": {
                "messages": args.messages,
                "messages_per_qos": {str(q): self.sizes[q] for q in self.levels},
                "qos": self.levels,
                "payload_bytes": JSON_BYTES,
                "payload_example": json_payload(0).decode(),
                "repeat": args.repeat,
                "master": "local[2]",
                "trigger": f"processingTime={args.trigger}",
                "sink": JOB_SINK,
                "modes": self.modes,
                "source_options": list(args.source_option),
                "warmup": warmup,
                "warmup_rounds": rounds,
                "before_each_spark_run": "a full GC of the driver JVM (System.gc())",
                "driver_vm_flags": vm_flags,
                "publish_inflight": MOSQUITTO_INFLIGHT,
                "max_inflight_messages": self.windows,
                "s3_modes": self.s3_modes,
                "s3_server": server,
                "topic": TOPIC,
                "topic_filter": TOPIC_FILTER,
            },
            "unit": "messages/s",
            "clocks": CLOCKS,
            "peers": peers,
            "ratios": {name: r.as_dict(3) for name, r in ratios.items()},
            "goal": goals,
            "other_processes_cpu_share": round(others_share(spark_peers), 3),
            "cpu_seconds_per_100k_messages": cpu_per_100k(spark_peers, lambda r: r.rows),
            "receiver_appends": self.appends or None,
        }


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


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000, help="backlog size")
    parser.add_argument("--repeat", type=int, default=3, help="backlogs per peer")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--qos", nargs="+", type=int, choices=QOS_LEVELS, default=list(QOS_LEVELS),
        help="QoS of the backlogs (default: 1 and 2); paho drains at each",
    )  # fmt: skip
    parser.add_argument("--trigger", default="0 seconds", help="processing-time interval")
    parser.add_argument(
        "--s3-modes", nargs="+", choices=MODES, default=[],
        help="also run our query with its WAL on an S3-compatible server on loopback, with "
        "partitionData wal (peer ours-s3) and/or inline (ours-s3-inline); none by default",
    )  # fmt: skip
    parser.add_argument(
        "--inflight", nargs="+", type=int, default=[MOSQUITTO_INFLIGHT],
        help="the broker's max_inflight_messages for our peers' backlogs (0: unbounded), "
        f"several values in turns (default {MOSQUITTO_INFLIGHT}, Mosquitto's)",
    )  # fmt: skip
    parser.add_argument(
        "--append-profile", action="store_true",
        help="after the Spark runs, the receiver alone (no Spark) drains each backlog into "
        "each WAL store, and takes --live-messages from a publisher while connected, every "
        "append timed (messages per append, ms per append)",
    )  # fmt: skip
    parser.add_argument(
        "--live-messages", type=int, default=20_000,
        help="messages of the append profile's live runs (0: none)",
    )  # fmt: skip
    parser.add_argument("--no-synthetic", action="store_true", help="skip the Spark ceiling")
    parser.add_argument("--no-paho", action="store_true", help="skip the paho drain")
    parser.add_argument("--no-warmup", action="store_true", help="skip the unmeasured warm-up runs")
    parser.add_argument(
        "--warmup-rows", type=int, default=WARMUP_ROWS,
        help="warm-up rounds (every Spark peer once) until this many rows landed (at least one)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, help="per step, in seconds")
    parser.add_argument(
        "--source-option", action="append", default=[], metavar="KEY=VALUE",
        help="an option of format('mqtt') for our peers, e.g. minMessagesPerTrigger=20000",
    )  # fmt: skip
    parser.add_argument(
        "--output", type=Path, help="results file (default bench/results/ingest.json)"
    )
    args = parser.parse_args(argv)
    if args.messages < 2 or args.repeat < 1 or args.warmup_rows < 0:
        parser.error("--messages must be >= 2, --repeat >= 1 and --warmup-rows >= 0")
    if any(k < 0 for k in args.inflight):
        parser.error("--inflight values must be >= 0")
    if any(o.startswith("walPath=") for o in args.source_option) and args.s3_modes:
        parser.error("--s3-modes sets walPath itself")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from . import ingest_s3

    run = IngestRun(parse_args(sys.argv[1:] if argv is None else argv))
    if run.s3_modes or run.args.append_profile:
        try:  # before the Spark JVM starts: its Python workers inherit the credentials
            run.s3 = ingest_s3.S3Store.start(run.work / "s3")
        except (OSError, RuntimeError) as exc:
            sys.stderr.write(f"bench.ingest: no S3-compatible server: {exc}\n")
            shutil.rmtree(run.work, ignore_errors=True)
            return 1
        run.info["s3_server"] = run.s3.version
    run.spark = spark_session("bench-ingest")
    try:
        run.warm_up()
        run.measure()
        if run.args.append_profile:
            run.appends = ingest_s3.append_profile(run)
        data = run.results()
    except (BenchError, subprocess.TimeoutExpired, RuntimeError) as exc:
        sys.stderr.write(f"bench.ingest: {exc}\n")
        return 1
    finally:
        run.spark.stop()
        if run.s3 is not None:
            run.s3.close()
        shutil.rmtree(run.work, ignore_errors=True)
    render = ingest_s3.section if run.s3_modes else section
    return finish("ingest", data, run.args.output, render)


# ------------------------------------------------------------------------------ the report


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    levels = params.get("qos", [])
    sizes = params.get("messages_per_qos") or {
        str(q): params.get("messages") for q in (levels if isinstance(levels, list) else [levels])
    }
    backlogs = " and ".join(f"{num(n)} QoS {q}" for q, n in sizes.items())
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
    ]
    share = data.get("other_processes_cpu_share")
    if share is not None:
        out += [
            "",
            f"Other processes and hypervisor steal took {share:.0%} of the machine's CPU "
            "during the run.",
        ]
    return out


if __name__ == "__main__":
    sys.exit(main())
