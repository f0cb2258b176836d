"""Land MQTT messages in a Delta table, exactly once.

    spark-submit streaming_jobs/ingest.py --broker tcp://broker:1883 --topic 'plant/#' --qos 2 \\
        --table ./data/tables/telemetry --checkpoint ./data/checkpoints/telemetry

The write-ahead log of the source goes inside the checkpoint directory (``<checkpoint>/mqtt-wal``)
so that one directory holds everything a restart needs. Works with plain ``python`` too. Every
flag is described by ``--help`` and in docs/options.md; the modules: ``ingest_flags`` (the
table of flags), ``ingest_config`` (parser, TOML, validation), ``payloads`` (decoding in Spark
SQL), ``batch_writer`` (idempotent writes of both tables), ``progress`` (per-batch lines,
summary), ``drain_progress`` (an available-now run's progress towards its target).

Output: the job's log (progress lines, summary) on stdout; one ``error: ...`` line on stderr
and a non-zero exit status when something fails (2: flags or config, 1: at run time); during an
available-now run on a terminal (``--progress``), a line on stderr rewritten in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import logging
import os
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if __package__ in (None, ""):  # run as a script by spark-submit or python
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from connector.options.source import SourceOptions

if TYPE_CHECKING:
    from streaming_jobs.metrics_server import MetricsServer
    from streaming_jobs.progress import RunStats
from streaming_jobs.ingest_config import (
    IngestConfig,
    UsageError,
    build_parser,
    describe,
    parse_config,
    source_options,
)

__all__ = ["build_parser", "main", "source_options"]

log = logging.getLogger("streaming_jobs.ingest")

PREFLIGHT_TIMEOUT = 10.0
POLL_SECONDS = 0.5
STOP_POLL_SECONDS = 0.02
QUIET_LOG4J = """\
# Written by streaming_jobs/ingest.py: Spark's defaults at WARN; the job reports a failed
# query itself, in one line.
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.hadoop.name = org.apache.hadoop.util.NativeCodeLoader
logger.hadoop.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
"""
# Loggers that print a failed query's stack trace; the job prints its root cause instead
# (all of it with --log-level DEBUG).
FAILURE_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.runtime.StreamExecution",
    "org.apache.spark.sql.execution.python.streaming.PythonStreamingSourceRunner",
)

NOISE = (
    "org.apache.spark.sql.execution.streaming.runtime.ResolveWriteToStream",
    "org.apache.spark.util.SparkStringUtils",
    # a WARN at each compaction: maintenance's pool has no allocation file (it needs none)
    "org.apache.spark.scheduler.FairSchedulableBuilder",
    # a WARN at every batch that takes longer than the trigger: the job's own batch line
    # says how long each batch took, and a log of months must not grow twice per batch
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor",
)


class JobError(RuntimeError):
    """A failure at run time, reported as one line (exit status 1)."""


# ---------------------------------------------------------------------------------- errors


_PY_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*([A-Z]\w*): (.+)$")
_JAVA_PREFIX = re.compile(r"^(?::\s*)?(?:[a-z_][\w$]*\.)+([A-Z][\w$]*): ")
_SPARK_PREFIX = re.compile(
    r"^\[STREAM_FAILED\] Query \[id = [^\]]*\] terminated with exception: ", re.S
)
_PYTHON_SOURCE_PREFIX = re.compile(r"^\[PYTHON_[A-Z_]+\] [^:\n]*: (?=(?:[a-z_]\w*\.)+[A-Z])")
"""Spark's wrapper of a Python data source's error sent without its traceback
(connector/spark/user_errors.py): ``[PYTHON_..._ERROR] Failed when ...: module.Error: ...``."""
_SKIP = ("at ", "JVM stacktrace", "An error occurred while", "Caused by", "...")


def root_cause(error: BaseException | str) -> str:
    """The first line that says what went wrong, from a Spark, Py4J or Python error.

    A Python error inside Spark (the MQTT source's process, the batch writer) arrives as text
    holding a Python traceback; its last line is the error itself (for a ``Py4JJavaError``,
    the Java exception after it).
    """
    text = error if isinstance(error, str) else _error_text(error)
    if "Traceback (most recent call last):" in text:
        block = text.rsplit("Traceback (most recent call last):", 1)[1].splitlines()
        for index, line in enumerate(block):
            match = _PY_EXCEPTION_LINE.match(line)
            if match is None:
                continue
            if match.group(1) == "Py4JJavaError":
                return (
                    root_cause("\n".join(block[index + 1 :]))
                    if index + 1 < len(block)
                    else (_tidy(line))
                )
            return _tidy(f"{match.group(1)}: {match.group(2)}")
    text = _PYTHON_SOURCE_PREFIX.sub("", _SPARK_PREFIX.sub("", text.strip()))
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(_SKIP):
            return _tidy(line)
    return "unknown error" if isinstance(error, str) else type(error).__name__


def _error_text(error: BaseException) -> str:
    desc = getattr(error, "desc", None)  # pyspark's CapturedException
    if isinstance(desc, str) and desc:
        return desc
    java = getattr(error, "java_exception", None)  # py4j's Py4JJavaError
    if java is not None:
        try:
            return str(java.toString())
        except Exception:  # the JVM may be gone
            pass
    return str(error) or type(error).__name__


def _tidy(line: str) -> str:
    line = _JAVA_PREFIX.sub(lambda m: f"{m.group(1)}: ", line.strip())
    line = re.sub(r"^(RuntimeError|PythonException|Exception|ReceiverFailed): ", "", line)
    line = re.sub(r"^the MQTT receiver failed: ", "MQTT receiver: ", line)
    return line if len(line) <= 400 else line[:397] + "..."


# ------------------------------------------------------------------------------- preflight


DELTA_EXTRA = "mqtt-lakehouse-connector[delta]"
METRICS_EXTRA = "mqtt-lakehouse-connector[delta,metrics]"


def require_delta_package() -> None:
    """The job writes with delta-spark's Python package, which the connector alone does not
    install (it is the ``[delta]`` extra): without it, fail before Spark starts."""
    if importlib.util.find_spec("delta") is None:
        raise JobError(
            f"the ingest job needs delta-spark's Python package: pip install '{DELTA_EXTRA}'"
        )


def require_metrics_package(config: IngestConfig) -> None:
    """``--metrics-port`` serves through ``prometheus_client``, the ``[metrics]`` extra:
    without it, fail before Spark starts."""
    if config.metrics_port is not None and importlib.util.find_spec("prometheus_client") is None:
        raise JobError(
            f"--metrics-port needs the prometheus_client package: pip install '{METRICS_EXTRA}'"
        )


def preflight(options: SourceOptions) -> None:
    """Fail fast when nothing listens at the broker's address (TCP only: the MQTT session
    itself belongs to the source, which reports refusals, TLS and credential errors)."""
    address = (options.broker.host, options.broker.port)
    timeout = min(options.connect_timeout, PREFLIGHT_TIMEOUT)
    try:
        with socket.create_connection(address, timeout=timeout):
            pass
    except TimeoutError:
        raise JobError(
            f"cannot reach the MQTT broker {options.broker}: no answer in {timeout:g} s"
        ) from None
    except OSError as exc:
        raise JobError(
            f"cannot reach the MQTT broker {options.broker}: {exc.strerror or exc}"
        ) from None


def create_broker_session(options: SourceOptions, checkpoint: str) -> None:
    """The job's persistent session made before Spark starts, so that the broker queues for
    the job from this moment, its first run included (docs/delivery.md, "The first run");
    then the job logs that it does. A checkpoint with offsets belongs to a run that made it
    (its receiver, not a new WAL, takes what the broker kept)."""
    from connector.mqtt.errors import MqttError
    from connector.receiver.first_run import create_session
    from connector.wal.opening import child_names

    if options.clean_session:
        log.warning(
            "--clean-session: the broker queues nothing for this job until its receiver has "
            "subscribed, nor while it is down"
        )
        return
    if "offsets" in child_names(checkpoint):
        log.info(
            "subscribed to %s at %s since the job's first run (client id %s, checkpoint %s): "
            "the broker queues for this job",
            ", ".join(options.topics),
            options.broker,
            options.client_id,
            checkpoint,
        )
        return
    try:
        sessions = create_session(options)
    except MqttError as exc:  # unreachable, refused credentials or subscription, TLS
        raise JobError(f"{type(exc).__name__}: {exc}") from None
    filters = sorted({topic for one in sessions for topic in one.filters})
    log.info(
        "subscribed to %s at %s (client id %s, QoS %d%s): the broker now queues for this job",
        ", ".join(filters),
        options.broker,
        ", ".join(one.client_id for one in sessions),
        options.qos,
        "" if any(one.created for one in sessions) else ", the session of an earlier run",
    )


def receivers_subscribed(progress: Any) -> bool:
    """Whether the source's report in ``progress`` says every receiver is subscribed."""
    from connector.spark.reader.progress_frame import source_receivers

    receivers = [] if progress is None else source_receivers(progress)
    return bool(receivers) and all(r.get("subscribed") for r in receivers)


# ----------------------------------------------------------------------------------- spark


def quiet_spark_logs(level: str, *, launching: bool = False) -> None:
    """Before a JVM starts (a local one, or the job submitting itself again): Spark's console
    log at ``level`` without its INFO start-up lines. A JVM that spark-submit already runs
    keeps the user's log4j settings."""
    if "PYSPARK_GATEWAY_PORT" in os.environ and not launching:
        return
    opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if "log4j" in opts:
        return
    text = QUIET_LOG4J.replace("rootLogger.level = warn", f"rootLogger.level = {level.lower()}")
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"mqtt-ingest-log4j2-{digest}.properties"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts} -Dlog4j2.configurationFile=file:{path}".strip()


def set_spark_log_levels(spark: Any, level: str, debug: bool) -> None:
    """Spark's log level; unless ``debug``, the loggers of a failed query's stack trace off
    and harmless warnings (AQE off in streaming, long plan strings) quiet."""
    spark.sparkContext.setLogLevel(level)
    if not debug:
        set_logger_levels(
            spark, {**dict.fromkeys(FAILURE_LOGGERS, "OFF"), **dict.fromkeys(NOISE, "ERROR")}
        )


def set_logger_levels(spark: Any, levels: dict[str, str]) -> None:
    """Set log4j levels of JVM loggers by name (best effort)."""
    jvm = spark.sparkContext._jvm  # the py4j gateway: the only way to log4j
    try:
        configurator = jvm.org.apache.logging.log4j.core.config.Configurator
        for name, level in levels.items():
            configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.toLevel(level))
    except Exception as exc:  # another logging backend
        log.debug("cannot set the level of Spark's loggers: %s", exc)


LOCAL_TUNING = ("spark.sql.shuffle.partitions", "spark.databricks.delta.snapshotPartitions")
"""Settings whose defaults (200, 50 tasks) suit clusters: tiny tasks by the dozen make every
micro-batch's Delta commit take seconds on a laptop."""


def tune_local(spark: Any, given: dict[str, str]) -> None:
    """In local mode, as many shuffle and Delta snapshot partitions as cores, unless set."""
    context = spark.sparkContext
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", context.master)
    if match is None:
        return
    cores = str(context.defaultParallelism)
    conf = context.getConf()
    for key in LOCAL_TUNING:
        if key not in given and not conf.contains(key):
            spark.conf.set(key, cores)


def parse_schema(ddl: str) -> Any:
    """``--schema`` as a StructType (Spark's DDL parser needs the running JVM)."""
    from pyspark.sql.types import StructType

    try:
        parsed = StructType.fromDDL(ddl)
    except Exception as exc:
        raise UsageError(f"--schema {ddl!r}: {root_cause(exc)}") from None
    if not isinstance(parsed, StructType) or not parsed.fields:
        raise UsageError(f"--schema {ddl!r}: give fields, e.g. 'temp DOUBLE, status STRING'")
    return parsed


# ------------------------------------------------------------------------------- main loop


class StopRequest:
    """SIGTERM/SIGINT: the first asks for a stop after the batch in flight, the second for a
    stop now. The handler only sets flags: stopping inside it would re-enter the Py4J call the
    main thread is blocked in. Spark's JVM shutting down (``jvm_shutdown``) asks the same way,
    with a shorter budget; ``finished`` tells it the driver is done."""

    def __init__(self) -> None:
        self.graceful = threading.Event()
        self.now = threading.Event()
        self.finished = threading.Event()
        self.query_started = False
        self.budget: float | None = None

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.graceful.is_set():
            self.now.set()
            if not self.query_started:
                raise KeyboardInterrupt  # a second signal aborts a slow start
            return
        self.graceful.set()
        log.info("%s: stopping after the batch in flight", signal.Signals(signum).name)

    def jvm_exiting(self) -> None:
        """Spark's JVM runs its shutdown hooks (it got SIGTERM): stop within its budget."""
        from streaming_jobs.jvm_shutdown import JVM_STOP_BUDGET_SECONDS

        self.budget = JVM_STOP_BUDGET_SECONDS
        if not self.graceful.is_set():
            self.graceful.set()
            log.info("Spark's JVM is shutting down: stopping after the batch in flight")


def stop_after_batch(query: Any, stop: StopRequest, timeout: float) -> None:
    """Stop ``query`` once the batch in flight, if any, has finished (or at the deadline)."""
    if stop.budget is not None:
        timeout = min(timeout, stop.budget)
    deadline = time.monotonic() + timeout
    last = query.lastProgress
    started_with = int(last["batchId"]) if last is not None else -1
    while not stop.now.is_set() and time.monotonic() < deadline:
        if not query.isActive or not query.status["isTriggerActive"]:
            break
        last = query.lastProgress
        if (
            last is not None
            and int(last["batchId"]) > started_with
            and "addBatch" in (last.get("durationMs") or {})
        ):
            break
        time.sleep(STOP_POLL_SECONDS)
    else:
        if query.isActive and not stop.now.is_set():
            log.warning(
                "the batch in flight did not finish within %g s: interrupting it "
                "(it is replayed on restart)",
                timeout,
            )
    query.stop()


def finish_checkpoints(writer: Any, stop: StopRequest, timeout: float) -> None:
    """Let a Delta checkpoint or a compaction still running finish, unless Spark's JVM is
    exiting or a second signal asked to stop now (the tables are complete either way)."""
    if stop.budget is not None or stop.now.is_set():
        timeout = 0.0
    if not writer.close(timeout):
        log.info(
            "a Delta checkpoint or compaction was still running; it is done again later "
            "(the tables are complete)"
        )


JVM_REPLY_SECONDS = 5.0
QUERY_NAME = "mqtt-ingest"
"""How long the driver waits for the JVM's shutdown hook to take its answer before exiting."""


def payload_plan(config: IngestConfig, mqtt5: bool) -> Any:
    """The :class:`~streaming_jobs.payloads.PayloadPlan` of ``config``'s table; a schema or
    columns that do not fit are a usage error."""
    from streaming_jobs.payloads import SchemaError, make_plan

    schema = parse_schema(config.schema) if config.schema else None
    try:
        plan = make_plan(
            config.payload_format,
            schema,
            config.topic_columns,
            keep_payload=config.keep_payload,
            dead_letters=config.dead_letter_table is not None,
            partition_by=config.partition_by,
            cluster_by=config.cluster_by,
            mqtt5=mqtt5,
            property_columns=config.property_columns,
            events=config.events_table is not None,
        )
    except SchemaError as exc:
        raise UsageError(str(exc)) from None
    for old, new in plan.renamed.items():
        if config.payload_format == "json":
            log.warning("--schema has a field %r: the MQTT column %r is named %r", old, old, new)
    return plan


def routed_writer(config: IngestConfig, mqtt5: bool, stats: Any, wal_path: str) -> Any:
    """The writer of a job with routes: the routes grouped by table, each table with its
    route's plan (:mod:`streaming_jobs.routed_writer`); a Sparkplug route's states beside the
    WAL at ``wal_path`` (:mod:`streaming_jobs.sparkplug_route`)."""
    from streaming_jobs.payloads import MQTT_COLUMNS, PROPERTIES
    from streaming_jobs.routed_writer import RoutedBatchWriter, TableRoute
    from streaming_jobs.routes import is_path
    from streaming_jobs.sparkplug_route import RouteStates

    def where(table: str) -> str:
        return _path(table) if is_path(table) else table

    targets: dict[str, TableRoute] = {}
    for position, route in enumerate(config.routes):
        table = where(route.table)
        if table in targets:  # the same settings (routes.check_routes): one more index
            known = targets[table]
            targets[table] = dataclasses.replace(known, indexes=(*known.indexes, position))
            continue
        own = route.config
        dead, events = own.dead_letter_table, own.events_table
        states = None
        if own.payload_format == "sparkplug":
            states = RouteStates(wal_path, table, own.sparkplug_reorder_timeout)
        targets[table] = TableRoute(
            (position,),
            payload_plan(own, mqtt5),
            table,
            where(dead) if dead else None,
            events_table=where(events) if events else None,
            sparkplug=states,
        )
    unrouted = config.dead_letter_table
    return RoutedBatchWriter(
        [route.topic for route in config.routes],
        list(targets.values()),
        where(unrouted) if unrouted else None,
        (*MQTT_COLUMNS, PROPERTIES) if mqtt5 else MQTT_COLUMNS,
        stats,
        merge_schema=config.merge_schema,
    )


def _path(path: str) -> str:
    """Local paths made absolute; URIs (s3a://, abfss://, ...) as given."""
    return path if "://" in path else str(Path(path).resolve())


def run(config: IngestConfig, argv: Sequence[str], stop: StopRequest) -> int:
    """Start the query and supervise it; returns the exit status."""
    options = source_options(config)
    parsed = SourceOptions.parse(options)
    require_metrics_package(config)
    require_delta_package()
    preflight(parsed)

    from streaming_jobs import jvm_shutdown
    from streaming_jobs.spark_session import job_spark, resubmit_with_delta, submit_lacks_delta

    if submit_lacks_delta():
        quiet_spark_logs(config.spark_log_level, launching=True)
        resubmit_with_delta(os.path.abspath(__file__), list(argv))
    quiet_spark_logs(config.spark_log_level)
    create_broker_session(parsed, config.checkpoint)
    settings = {"spark.ui.showConsoleProgress": "false", **config.spark_settings}
    spark = job_spark("mqtt-ingest", config.master, settings)
    hook = jvm_shutdown.install(spark, stop.jvm_exiting, stop.finished)
    try:
        return supervise(spark, config, options, parsed, stop)
    finally:
        if stop.budget is not None:
            # Spark's JVM is shutting down: its own hooks stop Spark once this one returns.
            stop.finished.set()
            hook.returned.wait(JVM_REPLY_SECONDS)
        else:
            hook.remove()
            try:
                spark.stop()
            except Exception as exc:  # the JVM may be gone already
                log.debug("stopping Spark: %s", exc)


def serve_metrics(spark: Any, config: IngestConfig, stats: RunStats) -> MetricsServer | None:
    """``--metrics-port``: the Prometheus endpoint fed by the query's progress (None without)."""
    if config.metrics_port is None:
        return None
    from streaming_jobs.metrics_server import IngestMetrics, MetricsServer, MetricsUnavailable

    try:
        server = MetricsServer(IngestMetrics(stats), config.metrics_host, config.metrics_port)
    except MetricsUnavailable as exc:
        raise JobError(str(exc)) from None
    server.attach(spark, QUERY_NAME)
    return server


def supervise(
    spark: Any,
    config: IngestConfig,
    options: dict[str, str],
    parsed: SourceOptions,
    stop: StopRequest,
) -> int:
    """Build and start the query on ``spark``, report its progress, stop it on request."""
    set_spark_log_levels(spark, config.spark_log_level, config.log_level == "DEBUG")
    tune_local(spark, config.spark_settings)

    from streaming_jobs.batch_writer import BatchWriter
    from streaming_jobs.drain_progress import DrainDisplay, terminal_stream
    from streaming_jobs.progress import ProgressReporter, RunStats
    from streaming_jobs.routes import RouteError

    if config.partition_data is None and spark.sparkContext.master.startswith("local"):
        options["partitionData"] = "wal"

    reader = spark.readStream.format("mqtt")
    for key, value in options.items():
        reader = reader.option(key, value)
    stats = RunStats()
    writer = (
        routed_writer(config, parsed.mqtt5, stats, options["walPath"])
        if config.routes
        else BatchWriter(
            payload_plan(config, parsed.mqtt5),
            _path(config.table),
            _path(config.dead_letter_table) if config.dead_letter_table else None,
            stats,
            merge_schema=config.merge_schema,
            events_table=_path(config.events_table) if config.events_table else None,
        )
    )
    source = reader.load()
    try:
        created = writer.create_tables(
            spark, source.schema, config.table_checkpoint_interval, config.log_retention
        )
        for path in created:
            log.info("created the Delta table %s", path)
    except RouteError as exc:  # a route's catalog or schema that is not there
        raise UsageError(f"--config: {exc}") from None
    except Exception as exc:  # a path Delta cannot use: fail before the query takes messages
        raise JobError(f"cannot create the Delta tables: {root_cause(exc)}") from None
    if config.compaction == "on":
        from streaming_jobs.compaction_policy import RETENTION_CHECK_KEY, CompactionPolicy
        from streaming_jobs.table_maintenance import TableMaintenance

        policy = CompactionPolicy(config.target_file_size, config.small_files)
        writer.maintenance = TableMaintenance(
            spark,
            writer.tables,
            policy,
            vacuum_every=config.vacuum_every,
            vacuum_retention_hours=config.vacuum_retention,
            retention_check=spark.conf.get(RETENTION_CHECK_KEY, "true") != "false",
        )
    stream = (
        source.writeStream.foreachBatch(writer)
        .option("checkpointLocation", config.checkpoint)
        .queryName(QUERY_NAME)
    )
    interval = config.trigger_interval
    stream = (
        stream.trigger(processingTime=interval) if interval else stream.trigger(availableNow=True)
    )
    if stop.graceful.is_set():
        log.info("stopped before the query started")
        return 0
    metrics = serve_metrics(spark, config, stats)
    query = stream.start()
    stop.query_started = True
    stats.started = time.monotonic()
    log.info("query %s started; its receiver connects with the first batch", query.id)
    ingesting = [
        "ingesting %s from %s into %s%s (%s, query %s)",
        ", ".join(config.topic),
        parsed.broker,
        writer.tables[0],
        "".join(f" and {path}" for path in writer.tables[1:]),
        config.payload_format,
        query.id,
    ]
    unparsed = None if config.payload_format == "binary" else "unparsed"
    reporter = ProgressReporter(stats, "dead-letter" if config.dead_letter_table else unparsed)
    # available-now: the drain's progress towards its target (docs/ingest-job.md)
    drain = (
        DrainDisplay(terminal_stream(config.progress, sys.stderr), stats.started)
        if interval is None
        else None
    )

    def poll() -> None:
        if ingesting and receivers_subscribed(query.lastProgress):
            # after the receivers' own SUBACK (or their session found present)
            log.info(*ingesting)
            ingesting.clear()
        if drain is None:
            reporter.poll(query)
        else:  # the batch lines are logged while the drain's terminal line is cleared
            drain.poll(query, time.monotonic(), reporter.poll)

    failure: BaseException | None = None
    how = "finished"
    try:
        while not query.awaitTermination(POLL_SECONDS):
            poll()
            if stop.graceful.is_set():
                # stopping cancels the query's job group, which may have no job: not news
                set_logger_levels(spark, {"org.apache.spark.scheduler.DAGScheduler": "ERROR"})
                stop_after_batch(query, stop, config.stop_timeout)
                how = "stopped"
                break
    except Exception as exc:  # the query failed: awaitTermination raises its exception
        failure = exc
    if drain is not None:
        drain.clear()
    finish_checkpoints(writer, stop, config.stop_timeout)
    poll()
    if failure is None:
        failure = query.exception()
    if drain is not None:
        drain.finish(time.monotonic(), "failed" if failure is not None else how)
    if failure is None and how == "stopped":
        log.info("the query stopped cleanly (checkpoint %s)", config.checkpoint)
    log.info("%s", reporter.summary("failed" if failure is not None else how))
    if writer.maintenance is not None and writer.maintenance.stats.compactions:
        log.info("%s", writer.maintenance.summary())
    if metrics is not None:
        metrics.close()
    if failure is not None:
        raise JobError(root_cause(failure))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 done, 1 failed at run time, 2 bad usage)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if any(arg in ("-h", "--help") for arg in argv):
        return _print(build_parser().format_help())
    try:
        config, print_config = parse_config(argv)
    except UsageError as exc:
        return _fail(f"{exc} (see --help)", 2)
    if print_config:
        return _print(describe(config) + "\n")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=config.log_level, handlers=[handler], force=True)
    if config.log_level != "DEBUG":
        # py4j logs a failed batch writer's traceback; the job reports its root cause
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
        # the job says itself when the broker queues for it (create_broker_session)
        logging.getLogger("connector.receiver.first_run").setLevel(logging.WARNING)
    stop = StopRequest()
    stop.install()
    try:
        return run(config, argv, stop)
    except UsageError as exc:
        return _fail(str(exc), 2)
    except JobError as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        return _fail("interrupted before the query started", 1)
    except Exception as exc:  # Spark, Py4J, Delta: one line, details at DEBUG
        log.debug("failure", exc_info=True)
        return _fail(root_cause(exc), 1)


def _print(text: str) -> int:
    """Write ``text`` to stdout; a reader that closed the pipe early (``| head``) is no
    error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at /dev/null so that says nothing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _fail(message: str, status: int) -> int:
    sys.stdout.flush()
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
