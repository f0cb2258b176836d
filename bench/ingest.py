"""Backlog into Delta: queued QoS 1 and QoS 2 messages landed by the ingest query, in msg/s.

``python -m bench.ingest [--messages N] [--repeat R] [--modes wal inline] [--qos 1 2]
[--s3-modes wal inline] [--inflight K [K ...]] [--trigger T] [--sink job|delta]
[--no-synthetic] [--no-paho] [--no-warmup] [--warmup-rows N] [--append-profile] [--profile]
[--output FILE]``

For every repetition, QoS and peer a fresh Mosquitto (``devtools.mosquitto``) gets a
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
  the raw rate of a plain MQTT client, nothing written;
* ``ours-s3`` / ``ours-s3-inline`` (``--s3-modes``): the same query with ``walPath`` on an
  S3-compatible server (``devtools.s3_server``, s3proxy) that this process starts on a free
  loopback port before the Spark JVM, a fresh prefix per run (docs/wal-storage.md: one PUT per
  append). ``ours-s3`` ships records with ``partitionData=wal``, the source's default for a
  WAL on shared storage, so the tasks read the parts from the store; ``ours-s3-inline`` ships
  them from the driver. They join ``ours-wal`` in the same repetitions, in turns, and are
  compared with it run by run (goal: at least ``SHARED_WAL_GOAL`` of its rate).

``--inflight`` sets the brokers' ``max_inflight_messages`` for our peers' backlogs (default
20, Mosquitto's; 0 is unbounded): how many QoS 1/2 messages the broker sends before it waits
for acknowledgements, so how many one socket read, one append, can hold. Several values take
turns in one run; off the default, peers carry ``-inflight<K>`` (``-inflight-unbounded``).
The publisher keeps at most 20 in flight whatever the window.

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
``foreachBatch`` function, Mosquitto; the S3 server is among "other descendants") and of
the other processes on the machine, around the measured batches (``bench.cpu_sampler``). The
observers share the two cores with the pipeline, so they read little: a sample reads the
JVM's named thread groups only (about 1.5 ms of CPU, where reading all of its several
hundred threads took about 11), and the wait for the rows
asks for the query's last progress, reading the whole list only after a new batch (a tenth of
the driver JVM's CPU per call). ``--profile`` also times the source's Python stages in
process (WAL append, WAL read, Arrow conversion, inline blob encode / pickle / decode, the
receiver loop on its own) and prints cProfile's top functions of the read path and of the
receiver loop. ``--append-profile`` runs, after the Spark runs, the source's receiver alone
(in this process, no Spark) into a local WAL and into one on the S3 server, in turns, on the
same backlogs and on ``--live-messages`` sent by a publisher while it is connected (peers
``(live)``), and times every WAL append it makes: messages per append (one socket read),
milliseconds per append, the share of the drain spent appending.
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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from connector.mqtt.cli import SEQUENCE_DIGITS

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
    pub_command,
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
LIVE_MESSAGES = 20_000
"""Messages of each live run of ``--append-profile``."""
SHARED_WAL_GOAL = 0.5
"""A query with its WAL on the S3-compatible server on loopback against the same query with a
local WAL, same QoS and broker window, same repetition."""
QOS_LEVELS = (1, 2)
WARMUP_ROWS = 600_000
"""Rows the warm-up rounds land before the measured runs. The driver JVM's JIT compiles Spark's
planning code over many queries: ten 60,000-message QoS 2 runs after a single warm-up run went
from 35.4k to 55-67k msg/s while the JIT's CPU per run fell from 0.89 to 0.12-0.30 s (one
sitting). The default peers' one round (QoS 1 and 2, both modes, the synthetic peer) lands
720,000 rows; a QoS 2-only run needs ten rounds of 60,000 to warm up as much."""
INFLIGHT = MOSQUITTO_INFLIGHT
SEQ_AT = len('{"seq":')


def _payload_template(size: int) -> str:
    """A printf template (Python ``%`` and Java ``String.format`` alike) of ``size`` bytes."""
    seq = f"%0{SEQUENCE_DIGITS}d"
    head = '{"seq":' + seq + ',"sensor":"line-3/sensor-17","value":%08.3f,"unit":"degC","pad":"'
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
    return int(data[SEQ_AT : SEQ_AT + SEQUENCE_DIGITS])


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
    inflight: int = MOSQUITTO_INFLIGHT,
) -> Backlog:
    """A fresh broker holding ``count`` messages for the session ``client_id`` (or for each
    (client id, filter) of ``sessions``: a shared subscription splits them); ``inflight`` is
    its ``max_inflight_messages`` (0: unbounded), how many it sends before acknowledgements."""
    from devtools.mosquitto import MosquittoBroker

    broker = MosquittoBroker(
        max_queued_messages=max(1_000_000, 2 * count), max_inflight_messages=inflight
    )
    broker.start()
    try:
        for session_id, topic_filter in sessions or [(client_id, TOPIC_FILTER)]:
            create_session(broker.url, session_id, topic_filter, qos)
        publish_rate = publish_backlog(broker.url, count, timeout, qos)
    except BaseException:
        broker.close()
        raise
    return Backlog(broker, client_id, publish_rate)


class S3Store:
    """The run's S3-compatible server on loopback (``devtools.s3_server``, s3proxy) with one
    bucket; every WAL on it gets a fresh prefix."""

    BUCKET = "bench-wal"

    def __init__(self, server: Any) -> None:
        self.server = server
        self._made = 0

    @classmethod
    def start(cls, workdir: Path) -> S3Store:
        """Put the test credentials into the environment (before any S3 client or Spark JVM
        starts), start the server, create the bucket."""
        from devtools.s3_server import S3Server, use_test_credentials

        use_test_credentials()
        server = S3Server(workdir)
        server.start()
        try:
            server.make_bucket(cls.BUCKET)
        except BaseException:
            server.close()
            raise
        return cls(server)

    @property
    def version(self) -> str:
        """The server's jar name, e.g. ``s3proxy-4.1.0``."""
        from devtools.s3_server import s3proxy_jar

        return s3proxy_jar().stem

    def fresh(self, label: str) -> str:
        """A ``walPath`` under a prefix no WAL used before."""
        self._made += 1
        return self.server.uri(self.BUCKET, f"{label}-{self._made}")

    def close(self) -> None:
        self.server.close()


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

    seq = F.substring("payload", SEQ_AT + 1, SEQUENCE_DIGITS).cast("string").cast("bigint")
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
    """``ours-wal`` for QoS 1 (no QoS suffix), ``ours-wal-qos2`` for QoS 2."""
    return base if qos == 1 else f"{base}-qos{qos}"


def inflight_label(inflight: int) -> str:
    """A broker's ``max_inflight_messages`` as shown: 0 is unbounded."""
    return "unbounded (0)" if inflight == 0 else str(inflight)


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


def query_sessions(client_id: str, qos: int, setup: Setup) -> list[tuple[str, str]]:
    """(client id, filter) of each MQTT session the query will use: one per receiver."""
    from connector.options.source import SourceOptions
    from connector.receiver.shards import shard_options

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
    spark: Any,
    peer: OursPeer,
    count: int,
    setup: Setup,
    workdir: Path,
    wal_path: str | None = None,
) -> Landing:
    """The ingest job's query over a fresh backlog of ``count`` messages published and
    subscribed with ``peer.qos``, on a broker with ``peer.inflight``; the WAL at ``wal_path``
    (``--source-option walPath=...``) or, without one, where the job puts it."""
    from streaming_jobs.ingest import build_parser, source_options

    collect_garbage(spark)
    name, mode, qos = peer.name, peer.mode, peer.qos
    store = "" if peer.store == "local" else f"{peer.store}-"
    client_id = f"bench-ingest-{store}{mode}-qos{qos}"
    table, checkpoint = workdir / f"{name}-table", workdir / f"{name}-checkpoint"
    run_setup = setup
    if wal_path is not None:
        run_setup = replace(setup, source_options=(*setup.source_options, f"walPath={wal_path}"))
    sessions = query_sessions(client_id, qos, run_setup)
    queued = backlog(count, client_id, setup.timeout, qos, sessions, peer.inflight)
    with queued.broker:
        args = build_parser().parse_args(
            [
                "--broker", queued.broker.url, "--topic", TOPIC_FILTER, "--qos", str(qos),
                "--table", str(table), "--checkpoint", str(checkpoint),
                "--client-id", client_id, "--partition-data", mode,
                *(f"--source-option={o}" for o in run_setup.source_options),
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
        details={
            "table_creation_seconds": round(created, 3),
            "max_inflight_messages": peer.inflight,
            **({"wal_path": wal_path} if wal_path is not None else {}),
        },
    )


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
    from connector.spark.reader.stream_reader import MqttPartition
    from connector.spark.schema import to_record_batches
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
    from connector.options.source import SourceOptions
    from connector.receiver.receiver import Receiver

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


@dataclass(slots=True)
class Appends:
    """The receiver alone storing ``messages`` into one WAL: every append call it made."""

    peer: str
    messages: int
    seconds: float
    """Backlog: connect -> the last message durable (QoS 2: and every release recorded);
    live: from the first append on."""
    calls: list[tuple[int, int, float]]  # (records, QoS 2 releases, seconds) per append
    live: bool = False

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def as_dict(self) -> dict[str, Any]:
        with_records = sorted(c[0] for c in self.calls if c[0])
        times = sorted(c[2] for c in self.calls)
        stored = sorted(c[2] for c in self.calls if c[0])
        return {
            "peer": self.peer,
            "live": self.live,
            "messages": self.messages,
            "seconds": round(self.seconds, 3),
            "rate": round(self.rate),
            "appends": len(self.calls),
            "appends_with_messages": len(with_records),
            "appends_of_releases_only": sum(1 for c in self.calls if not c[0] and c[1]),
            "messages_per_append": _spread(with_records, 1),
            "append_ms": _spread([t * 1000 for t in times], 1000),
            "append_ms_with_messages": _spread([t * 1000 for t in stored], 1000),
            "share_of_time_in_appends": round(sum(times) / self.seconds, 3),
        }


def _spread(ordered: Sequence[float], scale: int) -> dict[str, float]:
    """Median, 10th and 90th percentile, min, max of sorted values (rounded to 1/scale)."""
    if not ordered:
        return {}

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * scale) / scale

    return {
        "median": at(0.5),
        "p10": at(0.1),
        "p90": at(0.9),
        "min": at(0.0),
        "max": round(ordered[-1] * scale) / scale,
    }


def receiver_appends(
    peer: OursPeer, count: int, wal_path: str, timeout: float, *, live: bool = False
) -> Appends:
    """The source's receiver alone (no Spark), in this process, storing ``count`` messages
    (``peer.qos``, broker window ``peer.inflight``) into the WAL at ``wal_path``, every
    ``append`` call timed: how many messages one append (one socket read) stores and what it
    costs in that layout. The messages wait at the broker before the receiver connects (a
    backlog) or, ``live``, a publisher (``connector.mqtt pub`` in a subprocess, 20 in flight)
    sends them while it is connected, where a broker that holds its window sends at most that
    many per read (Mosquitto 2.0.11 holds it for neither: docs/brokers.md)."""
    from connector.options.source import SourceOptions
    from connector.receiver.receiver import Receiver
    from devtools.mosquitto import MosquittoBroker

    client_id = "bench-ingest-appends"
    if live:
        broker = MosquittoBroker(max_inflight_messages=peer.inflight)
        broker.start()
        try:
            create_session(broker.url, client_id, TOPIC_FILTER, peer.qos)
        except BaseException:
            broker.close()
            raise
    else:
        broker = backlog(count, client_id, timeout, peer.qos, inflight=peer.inflight).broker
    calls: list[tuple[int, int, float]] = []
    first: list[float] = []
    publisher: subprocess.Popen[bytes] | None = None
    with broker:
        options = SourceOptions.parse(
            {
                "brokerUrl": broker.url,
                "topic": TOPIC_FILTER,
                "qos": str(peer.qos),
                "clientId": client_id,
                "walPath": wal_path,
            }
        )
        receiver = Receiver(options)
        wal = receiver.wal
        append = wal.append

        def timed(records: Sequence[Any], *, released_qos2: Any = ()) -> int:
            released = list(released_qos2)
            began = time.perf_counter()
            end = append(records, released_qos2=released)
            if records and not first:
                first.append(began)
            calls.append((len(records), len(released), time.perf_counter() - began))
            return end

        setattr(wal, "append", timed)  # noqa: B010 (this instance only)
        start = time.perf_counter()
        receiver.start()
        deadline = start + timeout
        try:
            if live:
                command = pub_command(broker.url, TOPIC, peer.qos, count, PAYLOAD_BYTES)
                publisher = subprocess.Popen(
                    command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
            while wal.next_offset < count or wal.qos2_pending:
                receiver.check()
                if time.perf_counter() > deadline:
                    raise BenchError(
                        f"{peer.name}: the receiver stored {wal.next_offset} of {count} "
                        f"messages within {timeout} s"
                    )
                time.sleep(0.002)
            seconds = time.perf_counter() - (first[0] if live else start)
        finally:
            receiver.stop()
            if publisher is not None:
                try:
                    _, err = publisher.communicate(timeout=30)
                except subprocess.TimeoutExpired:
                    publisher.kill()
                    _, err = publisher.communicate()
    if publisher is not None and publisher.returncode != 0:
        raise BenchError(f"the publisher failed: {err.decode()[-2000:]}")
    if wal.next_offset != count:
        raise BenchError(f"{peer.name}: the receiver stored {wal.next_offset} of {count}")
    return Appends(peer.name, count, seconds, calls, live)


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


def phase_table(
    spark_peers: Mapping[str, list[Landing]],
) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows: each peer's last run, its batches and mean ms per phase."""
    rows = []
    for peer, runs in spark_peers.items():
        last = runs[-1]
        means = _phase_means(last)
        rows.append(
            [peer, len(last.batches), round(last.rows / len(last.batches))]
            + [f"{means[p]:.0f}" for p in PHASES]
        )
    return ["peer", "batches", "rows/batch", *PHASES], rows


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


def _appends_table(appends: dict[str, list[Appends]]) -> tuple[list[str], list[list[str]]]:
    """Per peer: receiver msg/s, appends, messages per append and ms per append (medians of
    the per-run medians), the share of the drain spent inside appends."""
    headers = [
        "peer (receiver alone)", "msg/s", "appends", "of releases only", "msgs/append p50",
        "p90", "max", "ms/append p50", "p90", "time in appends",
    ]  # fmt: skip
    rows = []
    for peer, found in appends.items():
        runs = [a.as_dict() for a in found]

        def med(pick: Callable[[dict[str, Any]], float]) -> float:
            return Stats.of(pick(r) for r in runs).median  # noqa: B023 (used at once)

        rows.append(
            [
                peer, rate(Stats.of(a.rate for a in found).median),
                f"{med(lambda r: r['appends']):,.0f}",
                f"{med(lambda r: r['appends_of_releases_only']):,.0f}",
                f"{med(lambda r: r['messages_per_append'].get('median', 0)):,.0f}",
                f"{med(lambda r: r['messages_per_append'].get('p90', 0)):,.0f}",
                f"{med(lambda r: r['messages_per_append'].get('max', 0)):,.0f}",
                f"{med(lambda r: r['append_ms']['median']):.2f}",
                f"{med(lambda r: r['append_ms']['p90']):.2f}",
                f"{med(lambda r: r['share_of_time_in_appends']):.0%}",
            ]
        )  # fmt: skip
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
    parser.add_argument(
        "--s3-modes",
        nargs="+",
        choices=MODES,
        default=[],
        help="also run our query with its WAL on an S3-compatible server on loopback, with "
        "partitionData wal (peer ours-s3) and/or inline (ours-s3-inline); none by default",
    )
    parser.add_argument(
        "--inflight",
        nargs="+",
        type=int,
        default=[MOSQUITTO_INFLIGHT],
        help="the broker's max_inflight_messages for our peers' backlogs (0: unbounded), "
        f"several values in turns (default {MOSQUITTO_INFLIGHT}, Mosquitto's)",
    )
    parser.add_argument(
        "--append-profile",
        action="store_true",
        help="after the Spark runs, the receiver alone (no Spark) drains each backlog into "
        "each WAL store, and takes --live-messages from a publisher while connected, every "
        "append timed (messages per append, ms per append)",
    )
    parser.add_argument(
        "--live-messages",
        type=int,
        default=LIVE_MESSAGES,
        help=f"messages of the append profile's live runs (default {LIVE_MESSAGES:,}; 0: none)",
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
    if any(k < 0 for k in args.inflight):
        parser.error("--inflight values must be >= 0")
    if any(o.startswith("walPath=") for o in args.source_option) and args.s3_modes:
        parser.error("--s3-modes sets walPath itself")
    n = args.messages
    modes: list[str] = list(dict.fromkeys(args.modes))
    s3_modes: list[str] = list(dict.fromkeys(args.s3_modes))
    windows: list[int] = list(dict.fromkeys(args.inflight))
    sizes = {1: n, 2: min(n, QOS2_BACKLOG_LIMIT)}
    levels: list[int] = sorted(set(args.qos))
    combos = [
        OursPeer(mode, qos, store, window)
        for window in windows
        for qos in levels
        for store, store_modes in (("local", modes), ("s3", s3_modes))
        for mode in store_modes
    ]
    info = machine_info()
    info["pyspark"] = package_version("pyspark")
    info["delta_spark"] = package_version("delta-spark")
    info["load_average_at_start"] = list(os.getloadavg())
    sink = args.sink if args.sink == "delta" or job_sink_available() else "delta"
    setup = Setup(args.trigger, sink, args.timeout, tuple(args.source_option))
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    s3: S3Store | None = None
    if s3_modes or args.append_profile:
        try:  # before the Spark JVM starts: its Python workers inherit the credentials
            s3 = S3Store.start(work / "s3")
        except (OSError, RuntimeError) as exc:
            sys.stderr.write(f"bench.ingest: no S3-compatible server: {exc}\n")
            shutil.rmtree(work, ignore_errors=True)
            return 1
        info["s3_server"] = s3.version

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
    ours: dict[str, list[Landing]] = {peer.name: [] for peer in combos}
    synthetic: list[Landing] = []
    paho: dict[str, list[Drain]] = {peer_name("paho", q): [] for q in levels}
    stages: list[tuple[str, float]] = []
    report = ""
    round_rows = sum(sizes[p.qos] for p in combos) + (0 if args.no_synthetic else sizes[levels[0]])
    rounds = 0 if args.no_warmup else warmup_rounds(round_rows, args.warmup_rows)
    warmups: dict[str, list[Landing]] = {}
    appends: dict[str, list[Appends]] = {}

    def wal_path(spec: OursPeer, label: str) -> str | None:
        return None if spec.store == "local" or s3 is None else s3.fresh(f"{spec.name}-{label}")

    try:
        for _ in range(rounds):  # JIT, class loading, the data source lookup: not measured
            for spec in combos:
                where = wal_path(spec, "warmup")
                landing = run_ours(spark, spec, sizes[spec.qos], setup, work / "warmup", where)
                warmups.setdefault(spec.name, []).append(landing)
            if not args.no_synthetic:
                warm = sizes[levels[0]]
                landing = run_synthetic(spark, warm, warm // 2, setup, work / "warmup")
                warmups.setdefault("synthetic", []).append(landing)
            shutil.rmtree(work / "warmup", ignore_errors=True)
        for rep in range(args.repeat):
            order = combos[rep % len(combos) :] + combos[: rep % len(combos)]
            for spec in order:
                run_dir = work / f"rep{rep}"
                where = wal_path(spec, f"rep{rep}")
                landing = run_ours(spark, spec, sizes[spec.qos], setup, run_dir, where)
                ours[spec.name].append(landing)
                shutil.rmtree(run_dir, ignore_errors=True)
            if not args.no_synthetic:
                # As many rows per batch as ours had: the same per-batch overheads.
                reference = ours[combos[0].name][-1]
                size = sizes[levels[0]]
                per_batch = math.ceil(size / len(reference.batches))
                synthetic.append(run_synthetic(spark, size, per_batch, setup, work / "syn"))
                shutil.rmtree(work / "syn", ignore_errors=True)
            if not args.no_paho:
                for qos in levels:
                    paho[peer_name("paho", qos)].append(run_paho(sizes[qos], args.timeout, qos))
        if args.append_profile and s3 is not None:
            profiled = [
                OursPeer("wal", qos, store, window)
                for window in windows
                for qos in levels
                for store in ("local", "s3")
            ]
            live_sizes = {q: min(args.live_messages, size) for q, size in sizes.items()}
            variants = [(spec, False) for spec in profiled]
            if args.live_messages > 0:
                variants += [(spec, True) for spec in profiled]
            for rep in range(args.repeat):
                turns = variants[rep % len(variants) :] + variants[: rep % len(variants)]
                for spec, live in turns:
                    label = f"{spec.name} (live)" if live else spec.name
                    local_dir = work / f"appends-{spec.name}-{int(live)}-{rep}"
                    where = (
                        str(local_dir)
                        if spec.store == "local"
                        else s3.fresh(f"{spec.name}-{'live' if live else 'backlog'}-rep{rep}")
                    )
                    count = (live_sizes if live else sizes)[spec.qos]
                    found = receiver_appends(spec, count, where, args.timeout, live=live)
                    appends.setdefault(label, []).append(found)
                    shutil.rmtree(local_dir, ignore_errors=True)
        if args.profile:
            stages, report = profile_stages(n, work)
    except (BenchError, subprocess.TimeoutExpired, RuntimeError) as exc:
        sys.stderr.write(f"bench.ingest: {exc}\n")
        return 1
    finally:
        spark.stop()
        if s3 is not None:
            s3.close()
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
    spec_of = {spec.name: spec for spec in combos}
    qos_of = {name: spec.qos for name, spec in spec_of.items()}
    for peer in ours:
        spec = spec_of[peer]
        against = ["synthetic"]
        if spec.inflight == MOSQUITTO_INFLIGHT:  # paho drains on a broker with the default
            against.append(peer_name("paho", spec.qos))
        for other in against:
            if other in headline:
                ratios[f"{peer}/{other}"] = paired_ratio(headline[peer], headline[other])
    shared: dict[str, str] = {}  # a peer with its WAL on the store -> the local peer it pairs with
    for peer in ours:
        spec = spec_of[peer]
        if spec.store == "local":
            continue
        for pair in (spec.local_wal, replace(spec, store="local")):
            if pair.name in ours and f"{peer}/{pair.name}" not in ratios:
                shared.setdefault(peer, pair.name)
                ratios[f"{peer}/{pair.name}"] = paired_ratio(headline[peer], headline[pair.name])

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
        "table verified (N rows, N distinct sequence numbers 0..N-1); brokers' "
        f"max_inflight_messages {', '.join(inflight_label(k) for k in windows)}"
        + (f"; WALs of the -s3 peers on {s3.version} on loopback" if s3 is not None else "")
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
    goals: dict[str, dict[str, Any]] = {}
    for peer in ours:
        if spec_of[peer].store != "local":
            continue
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
    for peer, pair_name in shared.items():
        name = f"{peer}/{pair_name}"
        measured = ratios[name].median
        goals[name] = {
            "ratio": name,
            "qos": qos_of[peer],
            "max_inflight_messages": spec_of[peer].inflight,
            "target": SHARED_WAL_GOAL,
            "measured": round(measured, 3),
            "met": measured >= SHARED_WAL_GOAL,
        }
        verdict = "met" if measured >= SHARED_WAL_GOAL else "NOT met"
        print(f"goal {name} >= {SHARED_WAL_GOAL} ({FIRST_BATCH}): {ratio(measured)} -> {verdict}")
    print()
    if shared:
        print(f"a WAL on the S3 server against a local WAL, per repetition ({FIRST_BATCH}):")
        print(
            format_table(
                ["repetition", "peer", "msg/s", "paired with", "msg/s", "ratio"],
                [
                    [
                        str(i),
                        name,
                        rate(headline[name][i]),
                        pair_name,
                        rate(headline[pair_name][i]),
                        ratio(headline[name][i] / headline[pair_name][i]),
                    ]
                    for name, pair_name in shared.items()
                    for i in range(len(headline[name]))
                ],
            )
        )
        print()
    if appends:
        print(
            "the receiver alone (no Spark) draining the same backlogs, every WAL append timed "
            "(medians over the repetitions):"
        )
        print(format_table(*_appends_table(appends)))
        print()
    print("Spark's per-batch phases, last repetition (mean ms per non-empty batch):")
    print(format_table(*phase_table(spark_peers)))
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
    appends_json = {
        peer: {
            "rate": Stats.of(a.rate for a in found).as_dict(1),
            "runs": [a.as_dict() for a in found],
        }
        for peer, found in appends.items()
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
            "max_inflight_messages": windows,
            "s3_modes": s3_modes,
            "s3_server": (
                f"{s3.version} on 127.0.0.1, a fresh prefix per run" if s3 is not None else None
            ),
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
        "receiver_appends": appends_json or None,
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
