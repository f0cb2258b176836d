"""Backlog into Delta: queued QoS 1 and QoS 2 messages landed by the ingest query, in msg/s.

``python -m bench.ingest [--messages N] [--repeat R] [--modes wal inline] [--qos 1 2]
[--trigger T] [--sink job|delta] [--no-synthetic] [--no-paho] [--no-warmup]
[--warmup-rows N] [--profile] [--output FILE]``

For every repetition, QoS and peer a fresh Mosquitto (``streaming_jobs.local_broker``) gets a
fresh backlog: a ``clean_session=False`` session is created for the peer's client id
(subscribe with that QoS, leave), then N numbered 100-byte JSON payloads are published with
that QoS (at most 20 in flight) and acknowledged, i.e. queued for the offline session. Peers
of the QoS 2 backlogs carry a ``-qos2`` suffix (``ours-wal-qos2``, ``paho-qos2``). Goals:
80,000 msg/s (QoS 1) and 60,000 msg/s (QoS 2) into Delta. Peers:

* ``ours-wal`` / ``ours-inline``: the ingest job's query (``format("mqtt")`` with the options
  ``streaming_jobs.ingest`` derives from its flags, written by the job's own ``foreachBatch``
  writer, or with ``--sink delta`` by ``writeStream.format("delta")``; processing-time trigger,
  default 0 seconds) run inside this process on ``streaming_jobs.spark_session.local_spark``
  (local[2]), with ``partitionData`` wal or inline;
* ``synthetic``: the same write path and trigger fed by Spark's file source reading Parquet
  files of the same rows (the source's schema, the same 100-byte JSON payloads) made
  beforehand, as many files (tasks) per batch as ours split such a batch into
  (``synthetic_files_per_batch``: one up to 100,000 rows, decision 30),
  as many rows per batch as ``ours-wal`` had in that repetition: Spark + Delta's own ceiling;
* ``paho``: a paho-mqtt 2.x subscriber (subprocess, automatic PUBACKs) draining the backlog:
  the raw rate of a plain MQTT client, nothing written.

The headline clock of the Spark peers, from the query's progress events: start of the first
batch with input rows -> end (start + batchDuration) of the batch that completes the N rows.
With the job's writer, the table is created empty before the query starts, as the job does
at start-up: that one-off step is outside every clock and recorded per run
(``table_creation_seconds``).
Every Spark run is like the others: before the measured repetitions, unmeasured warm-up
rounds (every Spark peer once, at the measured size) until at least ``WARMUP_ROWS`` rows have
landed (JIT compilation, class loading, the data source lookup; one round for the default
peers), and before every run, ahead of making its backlog, a full GC of the driver JVM.
The warm-up runs' rates are printed and kept (``warmup_rates``): the first is the JVM's first
query. Spark's ContextCleaner removes what earlier queries left (their broadcasts, shuffles and
state) only after a GC found it unreachable; without one a run could pay inside its clock
for its predecessors' cleanup (QoS 2, same sitting: 43.9k and 47.3k msg/s without, 53.2k and
59.6k with).
Also shown: first message received (the earliest WAL receive timestamp in the table) -> that
end, which includes the receive that overlaps the query's first (empty) batch; the receiver's
own rate (first -> last WAL receive timestamp); ``query start -> done``. paho: CONNACK -> last
message, inside its process. Ratios pair the runs of one repetition.

``make bench`` also runs a 1,000,000-message QoS 1 backlog (``bench/results/ingest_long.json``):
about ten seconds of draining, where what every new query pays once (the first batch, and the
driver JVM's JIT compiling more of Spark's planning code) weighs less than in a two-second run.

Checks: every Delta table holds exactly N rows with N distinct sequence numbers 0..N-1 (a
Spark read after the query stopped); paho saw N distinct sequence numbers.

Profile: every Spark run samples, from /proc, the CPU time of this process's descendants by
component (JVM threads by name, the streaming source runner that hosts the receiver, the
Python task workers, this process as the driver's Python side that runs the job's
``foreachBatch`` function, Mosquitto) and of the other processes on the machine, around the
measured batches (``bench.cpu_sampler``). The observers share the two cores with the pipeline,
so they read little: a sample reads the JVM's named thread groups only (about 1.5 ms of CPU,
where reading all of its several hundred threads took about 11), and the wait for the rows
asks for the query's last progress, reading the whole list only after a new batch (a tenth of
the driver JVM's CPU per call). ``--profile`` also times the source's Python stages in
process (WAL append, WAL read, Arrow conversion, inline blob encode / pickle / decode, the
receiver loop on its own) and prints cProfile's top functions of the read path and of the
receiver loop.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .common import (
    MOSQUITTO_INFLIGHT,
    REPO_ROOT,
    BenchError,
    Stats,
    create_session,
    describe_machine,
    format_table,
    machine_info,
    package_version,
    paho_loop,
    paired_ratio,
    profile_report,
    publish_windowed,
    rate,
    ratio,
    write_results,
)
from .cpu_sampler import COMPONENTS, NOT_THE_PIPELINE, CpuSampler

TOPIC = "plant/line-3/sensor-17/telemetry"
TOPIC_FILTER = "plant/+/+/telemetry"
QOS2_BACKLOG_LIMIT = 60_000
"""QoS 2 backlogs stay below the packet-id space: Mosquitto 2.0 numbers queued messages when it
queues them, so past 65,535 waiting for one session it reuses ids of open exchanges and the
drain stalls (``mosquitto_sub`` too); docs/brokers.md says so."""
PAYLOAD_BYTES = 100
MODES = ("wal", "inline")
SINKS = ("job", "delta")
SINK_NAMES = {
    "job": "the ingest job's writer: foreachBatch(BatchWriter), idempotent Delta appends",
    "delta": "Spark's Delta sink: writeStream.format('delta')",
}
PEERS = ("ours-wal", "ours-inline", "synthetic", "paho")
GOAL_RATES = {1: 80_000.0, 2: 60_000.0}
"""Messages per second into Delta on local[2], per QoS of the backlog."""
QOS_LEVELS = (1, 2)
WARMUP_ROWS = 600_000
"""Rows the warm-up rounds land before the measured runs. The driver JVM's JIT compiles Spark's
planning code over many queries: ten 60,000-message QoS 2 runs after a single warm-up run went
from 35.4k to 55-67k msg/s while the JIT's CPU per run fell from 0.89 to 0.12-0.30 s (one
sitting). The default peers' one round (QoS 1 and 2, both modes, the synthetic peer) lands
720,000 rows; a QoS 2-only run needs ten rounds of 60,000 to warm up as much."""
INFLIGHT = MOSQUITTO_INFLIGHT
SEQ_AT = len('{"seq":')
SEQ_DIGITS = 10


def _payload_template(size: int) -> str:
    """A printf template (Python ``%`` and Java ``String.format`` alike) of ``size`` bytes."""
    head = '{"seq":%010d,"sensor":"line-3/sensor-17","value":%08.3f,"unit":"degC","pad":"'
    tail = '"}'
    filler = size - len(head % (0, 0.0)) - len(tail)
    if filler < 0:
        raise ValueError(f"payloads must be at least {size - filler} bytes")
    return head + "x" * filler + tail


PAYLOAD_TEMPLATE = _payload_template(PAYLOAD_BYTES)


def payload(seq: int) -> bytes:
    """The JSON payload of message ``seq``: exactly PAYLOAD_BYTES bytes."""
    return (PAYLOAD_TEMPLATE % (seq, (seq % 1000) / 8)).encode()


def sequence_of(data: bytes) -> int:
    return int(data[SEQ_AT : SEQ_AT + SEQ_DIGITS])


# ------------------------------------------------------------------------------ paho worker


def worker_paho(
    url: str, client_id: str, count: int, timeout: float, stall: float, qos: int = 1
) -> dict:
    """Drain with paho-mqtt 2.x: on_message checks, paho sends each PUBACK itself; the loop is
    loop_forever's cycle through the external-loop API so it can stop at the last message."""
    from urllib.parse import urlsplit

    from paho.mqtt import client as paho

    parts = urlsplit(url)
    seen = bytearray(count)
    state = {"received": 0, "distinct": 0, "bad": 0, "last": 0.0, "connected": 0.0}

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        state["connected"] = time.perf_counter()
        client.subscribe(TOPIC_FILTER, qos=qos)

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        state["received"] += 1
        state["last"] = time.perf_counter()
        try:
            seq = sequence_of(message.payload)
        except ValueError:
            state["bad"] += 1
            return
        if 0 <= seq < count and not seen[seq]:
            seen[seq] = 1
            state["distinct"] += 1

    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=False,
        protocol=paho.MQTTv311,
    )
    client.on_connect = on_connect
    client.on_message = on_message
    start = time.perf_counter()
    client.connect(parts.hostname or "127.0.0.1", parts.port or 1883, keepalive=60)
    paho_loop(
        client, lambda: state["distinct"] >= count, lambda: state["last"], start, timeout, stall
    )
    client.disconnect()
    connected = state["connected"] or start
    return {
        "received": state["received"],
        "distinct": state["distinct"],
        "bad_payloads": state["bad"],
        "connect_to_last_seconds": (state["last"] or connected) - connected,
    }


def run_worker(argv: Sequence[str]) -> int:
    """``python -m bench.ingest paho-worker URL CLIENT_ID COUNT``: one JSON line out."""
    parser = argparse.ArgumentParser(prog="python -m bench.ingest paho-worker")
    parser.add_argument("url")
    parser.add_argument("client_id")
    parser.add_argument("count", type=int)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--stall", type=float, default=10.0)
    parser.add_argument("--qos", type=int, choices=QOS_LEVELS, default=1)
    args = parser.parse_args(argv)
    result = worker_paho(args.url, args.client_id, args.count, args.timeout, args.stall, args.qos)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["distinct"] == args.count else 1


# ------------------------------------------------------------------------------ backlogs


def publish_backlog(url: str, count: int, timeout: float, qos: int = 1) -> float:
    """Publish ``count`` numbered JSON payloads to TOPIC with ``qos``; returns the rate."""
    return publish_windowed(url, count, lambda seq: (TOPIC, payload(seq)), timeout, qos, INFLIGHT)


@dataclass(slots=True)
class Backlog:
    """A broker holding ``count`` queued messages for session ``client_id``."""

    broker: Any
    client_id: str
    publish_rate: float


def backlog(
    count: int,
    client_id: str,
    timeout: float,
    qos: int = 1,
    sessions: Sequence[tuple[str, str]] = (),
) -> Backlog:
    """A fresh broker holding ``count`` messages for the session ``client_id`` (or for each
    (client id, filter) of ``sessions``: a shared subscription splits them)."""
    from streaming_jobs.local_broker import MosquittoBroker

    broker = MosquittoBroker(max_queued_messages=max(1_000_000, 2 * count))
    broker.start()
    try:
        for session_id, topic_filter in sessions or [(client_id, TOPIC_FILTER)]:
            create_session(broker.url, session_id, topic_filter, qos)
        publish_rate = publish_backlog(broker.url, count, timeout, qos)
    except BaseException:
        broker.close()
        raise
    return Backlog(broker, client_id, publish_rate)


# ------------------------------------------------------------------------------ Spark peers


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
    def query_seconds(self) -> float:
        return self.run.seconds

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


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def _landed_batches(query: Any) -> list[BatchProgress]:
    """Distinct batches with input rows, in order, from the query's recent progress."""
    batches: dict[int, BatchProgress] = {}
    for p in query.recentProgress:
        if p.numInputRows > 0:
            batches[p.batchId] = BatchProgress(
                p.batchId,
                _epoch(p.timestamp),
                p.batchDuration / 1000,
                p.numInputRows,
                dict(p.durationMs),
            )
    return [batches[key] for key in sorted(batches)]


@dataclass(slots=True)
class QueryRun:
    batches: list[BatchProgress]
    seconds: float  # writeStream.start() -> the last batch's progress seen
    cpu_window: float  # seconds the CPU figures cover (around the measured batches)
    cpu: dict[str, float]  # CPU seconds per component in that window


def run_query(writer: Any, rows: int, timeout: float) -> QueryRun:
    """Start ``writer``, wait until ``rows`` rows are committed, stop it.
    Keeps the non-empty batches up to the one completing ``rows``.

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
            while True:
                last = query.lastProgress
                if last is not None and last.batchId != seen:
                    seen = last.batchId
                    batches = _landed_batches(query)
                    landed = sum(b.rows for b in batches)
                if landed >= rows:
                    done = time.perf_counter() - started
                    break
                if not query.isActive:
                    raise BenchError(f"the query stopped after {landed} rows: {query.exception()}")
                if time.perf_counter() > deadline:
                    raise BenchError(f"only {landed} of {rows} rows landed within {timeout} s")
                time.sleep(0.1)
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


def _check_table(spark: Any, table: Path, rows: int) -> dict[str, Any]:
    """Row count, distinct sequence numbers and their range, payload sizes, WAL receive span."""
    from pyspark.sql import functions as F

    seq = F.substring("payload", SEQ_AT + 1, SEQ_DIGITS).cast("string").cast("bigint")
    found = (
        spark.read.format("delta")
        .load(str(table))
        .agg(
            F.count("*").alias("rows"),
            F.countDistinct(seq).alias("distinct"),
            F.min(seq).alias("min_seq"),
            F.max(seq).alias("max_seq"),
            F.min(F.length("payload")).alias("min_bytes"),
            F.max(F.length("payload")).alias("max_bytes"),
            F.min("timestamp").alias("first_received"),
            F.max("timestamp").alias("last_received"),
        )
        .first()
        .asDict()
    )
    ok = (
        found["rows"] == rows
        and found["distinct"] == rows
        and found["min_seq"] == 0
        and found["max_seq"] == rows - 1
        and found["min_bytes"] == found["max_bytes"] == PAYLOAD_BYTES
    )
    if not ok:
        raise BenchError(f"{table}: expected {rows} rows, sequence numbers 0..{rows - 1}: {found}")
    return found


@dataclass(frozen=True, slots=True)
class Setup:
    """How the Spark peers run: trigger interval, write path, time limit of each step."""

    trigger: str
    sink: str
    timeout: float
    source_options: tuple[str, ...] = ()
    """``KEY=VALUE`` options of ``format("mqtt")`` added as the job's ``--source-option``."""


def job_sink_available() -> bool:
    """Whether the ingest job's own ``foreachBatch`` writer can be imported."""
    try:
        from streaming_jobs.batch_writer import BatchWriter  # noqa: F401
        from streaming_jobs.payloads import make_plan  # noqa: F401
        from streaming_jobs.progress import RunStats  # noqa: F401
    except ImportError:
        return False
    return True


def stream_writer(frame: Any, setup: Setup, table: Path, checkpoint: Path) -> tuple[Any, float]:
    """``frame.writeStream`` into ``table`` the way ``setup.sink`` says: ``job``, the ingest
    job's writer (``foreachBatch(BatchWriter)``, raw payloads, idempotent Delta appends) or
    ``delta``, Spark's Delta sink (``writeStream.format("delta")``); and the seconds taken to
    create the table first, as the job does before its query starts (0 for ``delta``)."""
    stream = frame.writeStream.option("checkpointLocation", str(checkpoint)).trigger(
        processingTime=setup.trigger
    )
    if setup.sink == "delta":
        return stream.format("delta").option("path", str(table)), 0.0
    from streaming_jobs.batch_writer import BatchWriter
    from streaming_jobs.payloads import make_plan
    from streaming_jobs.progress import RunStats

    writer = BatchWriter(make_plan("binary", None), str(table), None, RunStats())
    began = time.perf_counter()
    writer.create_tables(frame.sparkSession, frame.schema)
    return stream.foreachBatch(writer), time.perf_counter() - began


def peer_name(base: str, qos: int) -> str:
    """``ours-wal`` for QoS 1 (the historical name), ``ours-wal-qos2`` for QoS 2."""
    return base if qos == 1 else f"{base}-qos{qos}"


def query_sessions(client_id: str, qos: int, setup: Setup) -> list[tuple[str, str]]:
    """(client id, filter) of each MQTT session the query will use: one per receiver."""
    from connector.source.options import SourceOptions
    from connector.source.shards import shard_options

    raw = dict(option.split("=", 1) for option in setup.source_options)
    options = SourceOptions.parse(
        {**raw, "brokerUrl": "tcp://127.0.0.1:1883", "topic": TOPIC_FILTER, "qos": str(qos),
         "clientId": client_id}
    )  # fmt: skip
    shards = [shard_options(options, i) for i in range(options.receivers)]
    return [(s.client_id, s.topics[0]) for s in shards] if options.receivers > 1 else []


def collect_garbage(spark: Any) -> None:
    """A full GC of the driver JVM (``System.gc()``), so that the ContextCleaner can remove
    what earlier runs' queries left before the next run's clock starts."""
    spark.sparkContext._jvm.java.lang.System.gc()


def run_ours(
    spark: Any, mode: str, count: int, setup: Setup, workdir: Path, qos: int = 1
) -> Landing:
    """The ingest job's query over a fresh backlog of ``count`` messages published and
    subscribed with ``qos``."""
    from streaming_jobs.ingest import build_parser, source_options

    collect_garbage(spark)
    name = peer_name(f"ours-{mode}", qos)
    client_id = f"bench-ingest-{mode}-qos{qos}"
    table, checkpoint = workdir / f"{name}-table", workdir / f"{name}-checkpoint"
    queued = backlog(count, client_id, setup.timeout, qos, query_sessions(client_id, qos, setup))
    with queued.broker:
        args = build_parser().parse_args(
            [
                "--broker", queued.broker.url, "--topic", TOPIC_FILTER, "--qos", str(qos),
                "--table", str(table), "--checkpoint", str(checkpoint),
                "--client-id", client_id, "--partition-data", mode,
                *(f"--source-option={o}" for o in setup.source_options),
            ]
        )  # fmt: skip
        reader = spark.readStream.format("mqtt")
        for key, value in source_options(args).items():
            reader = reader.option(key, value)
        writer, created = stream_writer(reader.load(), setup, table, checkpoint)
        run = run_query(writer, count, setup.timeout)
        if queued.broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{queued.broker.log_text()}")
    found = _check_table(spark, table, count)
    return Landing(
        name,
        count,
        run,
        publish_rate=queued.publish_rate,
        first_received=found["first_received"].timestamp(),
        last_received=found["last_received"].timestamp(),
        details={"table_creation_seconds": round(created, 3)},
    )


def warmup_rounds(round_rows: int, target: int) -> int:
    """Warm-up rounds (every Spark peer once) that land at least ``target`` rows when one
    round lands ``round_rows``: at least one."""
    return max(1, -(-target // round_rows)) if round_rows > 0 else 1


def synthetic_files_per_batch(rows_per_batch: int) -> int:
    """Files (so tasks) per batch of the synthetic peer: as many as ours cut a batch of
    ``rows_per_batch`` rows into (``reader.split_range`` with the default
    ``recordsPerPartition``), so both pay the same per-task costs."""
    from connector.source.options import RECORDS_PER_PARTITION
    from connector.source.reader import split_range

    return len(split_range(0, rows_per_batch, RECORDS_PER_PARTITION))


def run_synthetic(
    spark: Any, count: int, rows_per_batch: int, setup: Setup, workdir: Path
) -> Landing:
    """The same rows through the same write path from a bounded in-JVM stream: Parquet files
    of the source's schema, made beforehand, read ``synthetic_files_per_batch`` files per
    batch. Unlike ``rate-micro-batch`` it ends, so no batch is interrupted when the query
    stops."""
    from pyspark.sql import functions as F

    from connector.source.schema import SCHEMA_DDL

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
            F.format_string(PAYLOAD_TEMPLATE, value, (value % 1000) / 8)
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
    writer, created = stream_writer(rows, setup, table, checkpoint)
    run = run_query(writer, count, setup.timeout)
    _check_table(spark, table, count)
    details = {
        "rows_per_batch": rows_per_batch,
        "files_per_batch": per_batch,
        "table_creation_seconds": round(created, 3),
    }
    return Landing("synthetic", count, run, details=details)


# ------------------------------------------------------------------------------ paho peer


@dataclass(slots=True)
class Drain:
    seconds: float
    publish_rate: float
    details: dict[str, Any]

    @property
    def rate(self) -> float:
        return self.details["distinct"] / self.seconds


def run_paho(count: int, timeout: float, qos: int = 1) -> Drain:
    client_id = f"bench-ingest-paho-qos{qos}"
    queued = backlog(count, client_id, timeout, qos)
    with queued.broker:
        command = [
            sys.executable, "-m", "bench.ingest", "paho-worker", queued.broker.url, client_id,
            str(count), "--timeout", str(timeout), "--qos", str(qos),
        ]  # fmt: skip
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout + 30, cwd=REPO_ROOT
        )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = lines[-1] if lines else "nothing"
        raise BenchError(f"paho worker failed ({done.returncode}): {last}\n{done.stderr[-2000:]}")
    details = json.loads(lines[-1])
    return Drain(details["connect_to_last_seconds"], queued.publish_rate, details)


# ------------------------------------------------------------------------------ profile


def _timed(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """Best wall time of ``repeat`` calls and the last result."""
    best, result = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def profile_stages(count: int, workdir: Path) -> tuple[list[tuple[str, float]], str]:
    """Per-stage rates of the source's Python code on ``count`` messages, in this process,
    and a cProfile of the read path (WAL read + Arrow) of the ``wal`` mode."""
    from connector.source.reader import MqttPartition
    from connector.source.schema import to_record_batches
    from connector.wal import NewRecord, WalReader, WalWriter, decode_blob, encode_range

    wal_dir = workdir / "profile-wal"
    shutil.rmtree(wal_dir, ignore_errors=True)
    payloads = [payload(i) for i in range(count)]
    chunk = 4_096  # a 1 MiB socket read holds ~7,000 of these PUBLISHes; 4 KiB-ish batches
    now_us = time.time_ns() // 1000

    def append() -> None:
        shutil.rmtree(wal_dir, ignore_errors=True)
        wal = WalWriter.open(wal_dir)
        try:
            for at in range(0, count, chunk):
                wal.append(
                    [
                        NewRecord(TOPIC, p, 1, False, False, (at + i) % 65535 + 1, now_us)
                        for i, p in enumerate(payloads[at : at + chunk])
                    ]
                )
        finally:
            wal.close()

    stages: list[tuple[str, float]] = []
    seconds, _ = _timed(append, repeat=1)
    stages.append(("receiver: NewRecord + WAL append + fsync", seconds))
    reader = WalReader(wal_dir)
    seconds, columns = _timed(lambda: reader.read(0, count))
    stages.append(("wal: WalReader.read -> columns", seconds))
    seconds, _ = _timed(lambda: list(to_record_batches(columns)))
    stages.append(("wal+inline: columns -> Arrow batches", seconds))
    seconds, blob = _timed(lambda: encode_range(wal_dir, 0, count))
    stages.append(("inline: encode_range (driver)", seconds))
    part = MqttPartition(str(wal_dir), reader.identity or "", 0, count, blob)
    seconds, pickled = _timed(lambda: pickle.dumps(part))
    stages.append(("inline: pickle partition (driver)", seconds))
    seconds, _ = _timed(lambda: pickle.loads(pickled))
    stages.append(("inline: unpickle partition (task)", seconds))
    seconds, _ = _timed(lambda: decode_blob(blob))
    stages.append(("inline: decode_blob -> columns (task)", seconds))

    profiler = cProfile.Profile()
    profiler.runcall(lambda: list(to_record_batches(WalReader(wal_dir).read(0, count))))
    shutil.rmtree(wal_dir, ignore_errors=True)
    report = "cProfile of the wal mode's read path (WalReader.read + Arrow):\n"
    report += profile_report(profiler, 12)

    seconds, _ = profile_receiver(count, workdir / "profile-receiver", 300.0, profile=False)
    stages.append(("receiver loop: MQTT -> WAL -> PUBACK (no Spark)", seconds))
    _, receiver_profile = profile_receiver(count, workdir / "profile-receiver", 300.0)
    report += "\ncProfile of the receiver loop draining the backlog into a WAL (no Spark):\n"
    report += profile_report(receiver_profile, 15)
    return stages, report


def profile_receiver(
    count: int, wal_dir: Path, timeout: float, *, profile: bool = True
) -> tuple[float, cProfile.Profile]:
    """The source's receiver loop alone, in this thread (under cProfile unless ``profile`` is
    false): a fresh backlog of ``count`` messages drained into a WAL. Returns connect -> the
    loop's end once the last message was appended, and the profile."""
    from connector.source.options import SourceOptions
    from connector.source.receiver import Receiver

    client_id = "bench-ingest-receiver"
    queued = backlog(count, client_id, timeout)
    with queued.broker:
        options = SourceOptions.parse(
            {
                "brokerUrl": queued.broker.url,
                "topic": TOPIC_FILTER,
                "qos": "1",
                "clientId": client_id,
                "walPath": str(wal_dir),
            }
        )
        receiver = Receiver(options)
        done = threading.Event()
        reached = [math.inf]

        def watch() -> None:  # stop the loop once the whole backlog is in the WAL
            deadline = time.monotonic() + timeout
            while receiver.wal.next_offset < count and time.monotonic() < deadline:
                time.sleep(0.002)
            reached[0] = time.perf_counter()
            receiver._stop.set()
            done.set()

        profiler = cProfile.Profile()
        start = time.perf_counter()
        receiver.client.connect()
        threading.Thread(target=watch, daemon=True).start()
        if profile:  # Receiver.start() runs _run in a thread of its own
            profiler.runcall(receiver._run)
        else:
            receiver._run()
        done.wait()
        seconds = reached[0] - start
        appended = receiver.wal.next_offset
        receiver.stop()
    shutil.rmtree(wal_dir, ignore_errors=True)
    if appended != count:
        raise BenchError(f"the receiver appended {appended} of {count} messages")
    return seconds, profiler


# ------------------------------------------------------------------------------ main

# Spark's per-batch phases, as reported in StreamingQueryProgress.durationMs.
PHASES = (
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
    "triggerExecution",
)


def _phase_means(landing: Landing) -> dict[str, float]:
    return {
        phase: sum(b.durations_ms.get(phase, 0) for b in landing.batches) / len(landing.batches)
        for phase in PHASES
    }


def _landing_dict(landing: Landing) -> dict[str, Any]:
    return {
        "rows": landing.rows,
        "rate": round(landing.rate),
        "seconds": round(landing.seconds, 3),
        "query_seconds": round(landing.query_seconds, 3),
        "receive_rate": (
            round(landing.rows / landing.receive_seconds) if landing.receive_seconds else None
        ),
        "first_receive_to_last_commit_seconds": (
            round(landing.landing_seconds, 3) if landing.landing_seconds else None
        ),
        "backlog_publish_rate": (
            round(landing.publish_rate) if landing.publish_rate is not None else None
        ),
        "batches": [
            {"id": b.batch_id, "rows": b.rows, "seconds": round(b.seconds, 3), **b.durations_ms}
            for b in landing.batches
        ],
        "cpu_window_seconds": round(landing.run.cpu_window, 3),
        "cpu_seconds": {c: round(v, 3) for c, v in landing.run.cpu.items()},
        **landing.details,
    }


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


def _clock_rates(landings: list[Landing]) -> dict[str, list[float]]:
    rates = {
        FIRST_BATCH: [r.rate for r in landings],
        QUERY: [r.rows / r.query_seconds for r in landings],
    }
    if all(r.landing_seconds for r in landings):
        rates[FIRST_RECEIVE] = [r.rows / r.landing_seconds for r in landings]  # type: ignore[operator]
    if all(r.receive_seconds for r in landings):
        rates[RECEIVER] = [r.rows / r.receive_seconds for r in landings]  # type: ignore[operator]
    return rates


def _cpu_table(spark_peers: dict[str, list[Landing]]) -> tuple[list[str], list[list[str]]]:
    """CPU seconds per 100,000 messages by component (median over repetitions), measured
    around each run's measured batches."""
    headers = ["CPU s per 100k msgs", *spark_peers]
    rows = []
    for component in COMPONENTS:
        cells = [
            Stats.of(r.run.cpu[component] / r.rows * 100_000 for r in runs).median
            for runs in spark_peers.values()
        ]
        if any(cell >= 0.005 for cell in cells):
            rows.append([component, *(f"{cell:.2f}" for cell in cells)])
    totals = [
        Stats.of(
            sum(v for c, v in r.run.cpu.items() if c not in NOT_THE_PIPELINE) / r.rows * 100_000
            for r in runs
        ).median
        for runs in spark_peers.values()
    ]
    rows.append(["total of the pipeline (without the sampler)", *(f"{t:.2f}" for t in totals)])
    window = [Stats.of(r.run.cpu_window for r in runs).median for runs in spark_peers.values()]
    rows.append(["(window seconds)", *(f"{w:.2f}" for w in window)])
    return headers, rows


def _others_share(spark_peers: dict[str, list[Landing]]) -> float:
    """Median share of the machine's CPU that processes not ours (and hypervisor steal) took
    in the windows."""
    cores = os.cpu_count() or 1
    return Stats.of(
        r.run.cpu["not ours (other processes)"] / (r.run.cpu_window * cores)
        for runs in spark_peers.values()
        for r in runs
    ).median


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["paho-worker"]:
        return run_worker(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m bench.ingest", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--messages", type=int, default=200_000, help="backlog size")
    parser.add_argument("--repeat", type=int, default=3, help="backlogs per peer")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--qos",
        nargs="+",
        type=int,
        choices=QOS_LEVELS,
        default=list(QOS_LEVELS),
        help="QoS of the backlogs (default: 1 and 2); paho drains at each",
    )
    parser.add_argument(
        "--trigger", default="0 seconds", help="processing-time interval (default 0 seconds)"
    )
    parser.add_argument(
        "--sink",
        choices=SINKS,
        default="job",
        help="job: the ingest job's foreachBatch writer (default; Spark's Delta sink when the "
        "job's writer is not there); delta: writeStream.format('delta')",
    )
    parser.add_argument("--no-synthetic", action="store_true", help="skip the Spark ceiling")
    parser.add_argument("--no-paho", action="store_true", help="skip the paho drain")
    parser.add_argument("--no-warmup", action="store_true", help="skip the unmeasured warm-up runs")
    parser.add_argument(
        "--warmup-rows",
        type=int,
        default=WARMUP_ROWS,
        help="warm-up rounds (every Spark peer once) until this many rows landed (at least one)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="per step, in seconds")
    parser.add_argument(
        "--source-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of format('mqtt') for our peers, e.g. minMessagesPerTrigger=20000",
    )
    parser.add_argument("--output", help="results file (default bench/results/ingest.json)")
    parser.add_argument(
        "--profile", action="store_true", help="time the source's Python stages in process"
    )
    args = parser.parse_args(argv)
    if args.messages < 2 or args.repeat < 1 or args.warmup_rows < 0:
        parser.error("--messages must be >= 2, --repeat >= 1 and --warmup-rows >= 0")
    n = args.messages
    modes: list[str] = list(dict.fromkeys(args.modes))
    sizes = {1: n, 2: min(n, QOS2_BACKLOG_LIMIT)}
    levels: list[int] = sorted(set(args.qos))
    combos = [(mode, qos) for qos in levels for mode in modes]
    info = machine_info()
    info["pyspark"] = package_version("pyspark")
    info["delta_spark"] = package_version("delta-spark")
    info["load_average_at_start"] = list(os.getloadavg())
    sink = args.sink if args.sink == "delta" or job_sink_available() else "delta"
    setup = Setup(args.trigger, sink, args.timeout, tuple(args.source_option))

    from streaming_jobs.spark_session import local_spark

    spark = local_spark(
        "bench-ingest",
        "local[2]",
        spark__sql__streaming__numRecentProgressUpdates="10000",
        spark__ui__showConsoleProgress="false",
    )
    spark.sparkContext.setLogLevel("ERROR")
    driver_vm_flags = [
        word
        for word in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", "").split()
        if word.startswith("-XX:") and "IgnoreUnrecognized" not in word
    ]
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    ours: dict[str, list[Landing]] = {peer_name(f"ours-{m}", q): [] for m, q in combos}
    synthetic: list[Landing] = []
    paho: dict[str, list[Drain]] = {peer_name("paho", q): [] for q in levels}
    stages: list[tuple[str, float]] = []
    report = ""
    round_rows = sum(sizes[q] for _, q in combos) + (0 if args.no_synthetic else sizes[levels[0]])
    rounds = 0 if args.no_warmup else warmup_rounds(round_rows, args.warmup_rows)
    warmups: dict[str, list[Landing]] = {}
    try:
        for _ in range(rounds):  # JIT, class loading, the data source lookup: not measured
            for mode, qos in combos:
                landing = run_ours(spark, mode, sizes[qos], setup, work / "warmup", qos)
                warmups.setdefault(peer_name(f"ours-{mode}", qos), []).append(landing)
            if not args.no_synthetic:
                warm = sizes[levels[0]]
                landing = run_synthetic(spark, warm, warm // 2, setup, work / "warmup")
                warmups.setdefault("synthetic", []).append(landing)
            shutil.rmtree(work / "warmup", ignore_errors=True)
        for rep in range(args.repeat):
            order = combos[rep % len(combos) :] + combos[: rep % len(combos)]
            for mode, qos in order:
                run_dir = work / f"rep{rep}"
                landing = run_ours(spark, mode, sizes[qos], setup, run_dir, qos)
                ours[peer_name(f"ours-{mode}", qos)].append(landing)
                shutil.rmtree(run_dir, ignore_errors=True)
            if not args.no_synthetic:
                # As many rows per batch as ours had: the same per-batch overheads.
                reference = ours[peer_name(f"ours-{modes[0]}", levels[0])][-1]
                size = sizes[levels[0]]
                per_batch = math.ceil(size / len(reference.batches))
                synthetic.append(run_synthetic(spark, size, per_batch, setup, work / "syn"))
                shutil.rmtree(work / "syn", ignore_errors=True)
            if not args.no_paho:
                for qos in levels:
                    paho[peer_name("paho", qos)].append(run_paho(sizes[qos], args.timeout, qos))
        if args.profile:
            stages, report = profile_stages(n, work)
    except (BenchError, subprocess.TimeoutExpired, RuntimeError) as exc:
        sys.stderr.write(f"bench.ingest: {exc}\n")
        return 1
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    spark_peers: dict[str, list[Landing]] = dict(ours)
    if synthetic:
        spark_peers["synthetic"] = synthetic
    clock_rates = {peer: _clock_rates(runs) for peer, runs in spark_peers.items()}
    for name, drains in paho.items():
        if drains:
            clock_rates[name] = {PAHO_CLOCK: [d.rate for d in drains]}
    headline = {
        peer: rates[FIRST_BATCH if FIRST_BATCH in rates else PAHO_CLOCK]
        for peer, rates in clock_rates.items()
    }
    ratios: dict[str, Stats] = {}
    qos_of = {peer_name(f"ours-{m}", q): q for m, q in combos}
    for peer in ours:
        for other in ("synthetic", peer_name("paho", qos_of[peer])):
            if other in headline:
                ratios[f"{peer}/{other}"] = paired_ratio(headline[peer], headline[other])

    versions = f"pyspark {info['pyspark']}, delta-spark {info['delta_spark']}"
    load = ", ".join(f"{v:.2f}" for v in info["load_average_at_start"])
    print(f"bench.ingest: {describe_machine(info)}, {versions}; load average {load}")
    print(
        f"backlog of {' and '.join(f'{sizes[q]:,} QoS {q}' for q in levels)} messages "
        f"({PAYLOAD_BYTES}-byte JSON payloads) per run; peers named -qos2 drain QoS 2 backlogs; "
        f"local[2], processing-time trigger {args.trigger!r}, median of {args.repeat}; written "
        f"by {SINK_NAMES[sink]}"
        + (f" (asked for {args.sink}: not available)" if sink != args.sink else "")
        + "; every "
        "table verified (N rows, N distinct sequence numbers 0..N-1)"
    )
    print()
    rows = []
    for clock in (FIRST_BATCH, PAHO_CLOCK, FIRST_RECEIVE, RECEIVER, QUERY):
        for peer, rates in clock_rates.items():
            if clock in rates:
                st = Stats.of(rates[clock])
                rows.append([clock, peer, rate(st.median), rate(st.min), rate(st.max)])
    print(format_table(["clock", "peer", "msg/s median", "min", "max"], rows))
    print()
    if ratios:
        print(
            format_table(
                [f"ratio ({FIRST_BATCH}; paho: {PAHO_CLOCK})", "median", "min", "max"],
                [[name, ratio(r.median), ratio(r.min), ratio(r.max)] for name, r in ratios.items()],
            )
        )
        print()
    if warmups:
        rounds_text = f"{rounds} round{'' if rounds == 1 else 's'}"
        print(f"unmeasured warm-up runs ({rounds_text}; the first run is the JVM's first query):")
        for peer, landings in warmups.items():
            print(f"  {peer}: " + ", ".join(rate(w.rate) for w in landings) + " msg/s")
        print()
    goals = {}
    for peer in ours:
        measured = Stats.of(headline[peer]).median
        target = GOAL_RATES[qos_of[peer]]
        goals[peer] = {
            "qos": qos_of[peer],
            "target": target,
            "measured": round(measured),
            "met": measured >= target,
        }
        verdict = "met" if measured >= target else "NOT met"
        print(f"goal {peer} >= {target:,.0f} msg/s into Delta: {rate(measured)} -> {verdict}")
    print()
    phase_rows = []
    for peer, runs in spark_peers.items():
        last = runs[-1]
        means = _phase_means(last)
        phase_rows.append(
            [peer, len(last.batches), round(last.rows / len(last.batches))]
            + [f"{means[p]:.0f}" for p in PHASES]
        )
    print("Spark's per-batch phases, last repetition (mean ms per non-empty batch):")
    print(format_table(["peer", "batches", "rows/batch", *PHASES], phase_rows))
    print()
    print("where the CPU goes while the measured batches run (sampled from /proc):")
    print(format_table(*_cpu_table(spark_peers)))
    others = _others_share(spark_peers)
    print(
        f"other processes and hypervisor steal took {others:.0%} of the machine's CPU during "
        "the measured windows (median)"
        + ("; the figures are disturbed, run again on a quiet machine" if others > 0.1 else "")
    )
    if stages:
        print()
        print(f"the source's Python stages on {n:,} messages, in process (best of 3):")
        print(
            format_table(
                ["stage", "seconds", "msg/s", "us/msg"],
                [[name, f"{s:.3f}", rate(n / s), f"{s / n * 1e6:.2f}"] for name, s in stages],
            )
        )
        print()
        print(report)

    peers_json: dict[str, Any] = {
        peer: {
            "rates": {clock: Stats.of(v).as_dict(1) for clock, v in clock_rates[peer].items()},
            "runs": [_landing_dict(r) for r in runs],
            "warmup_rates": [round(w.rate) for w in warmups.get(peer, [])],
        }
        for peer, runs in spark_peers.items()
    }
    for name, drains in paho.items():
        if not drains:
            continue
        peers_json[name] = {
            "rates": {PAHO_CLOCK: Stats.of(headline[name]).as_dict(1)},
            "runs": [
                {
                    "rate": round(d.rate),
                    "backlog_publish_rate": round(d.publish_rate),
                    **d.details,
                }
                for d in drains
            ],
        }
    results = {
        "benchmark": "ingest",
        "machine": info,
        "parameters": {
            "messages": n,
            "messages_per_qos": {str(q): sizes[q] for q in levels},
            "qos": levels,
            "payload_bytes": PAYLOAD_BYTES,
            "payload_example": payload(0).decode(),
            "repeat": args.repeat,
            "master": "local[2]",
            "trigger": f"processingTime={args.trigger}",
            "sink": SINK_NAMES[sink],
            "modes": modes,
            "source_options": list(args.source_option),
            "warmup": "none"
            if args.no_warmup
            else (
                f"{rounds} unmeasured round{'' if rounds == 1 else 's'}, every Spark peer once at "
                "the measured size, "
                f"until at least {args.warmup_rows:,} rows landed"
            ),
            "warmup_rounds": rounds,
            "before_each_spark_run": "a full GC of the driver JVM (System.gc())",
            "driver_vm_flags": driver_vm_flags,
            "publish_inflight": INFLIGHT,
            "topic": TOPIC,
            "topic_filter": TOPIC_FILTER,
        },
        "unit": "messages/s",
        "clocks": CLOCKS,
        "peers": peers_json,
        "ratios": {name: r.as_dict(3) for name, r in ratios.items()},
        "goal": goals,
        "other_processes_cpu_share": round(_others_share(spark_peers), 3),
        "cpu_seconds_per_100k_messages": {
            peer: {
                component: round(
                    Stats.of(r.run.cpu[component] / r.rows * 100_000 for r in runs).median, 3
                )
                for component in COMPONENTS
            }
            for peer, runs in spark_peers.items()
        },
        "python_stages": (
            {name: {"seconds": round(s, 4), "rate": round(n / s)} for name, s in stages}
            if stages
            else None
        ),
    }
    path = write_results("ingest", results, None if args.output is None else Path(args.output))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
