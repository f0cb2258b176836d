"""The ingest job's Prometheus endpoint (``--metrics-port``; docs/operations.md, "Prometheus").

Spark runs the source's receivers in its own Python process, out of the job's reach, so the
figures come the way Spark carries them: a ``StreamingQueryListener`` keeps the latest progress
of the job's query, whose reported latest offset is the source's report
(:mod:`connector.spark.reader.progress_report`), and the batch writer's :class:`RunStats` adds what
landed in Delta. A scrape turns the latest of both into metrics named by Prometheus'
conventions: the ``mqtt_ingest_`` prefix, base units in the names, counters ending
``_total``. Per-receiver figures carry a ``receiver`` label. Counters count from the job's
start (a restart starts them again, as Prometheus expects of counters).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from connector.spark.reader.progress_frame import source_receivers
from streaming_jobs.progress import RunStats, is_data_batch

log = logging.getLogger("streaming_jobs.metrics")

PREFIX = "mqtt_ingest_"


@dataclass(frozen=True)
class Family:
    """One metric family of a scrape: ``kind`` is ``gauge`` or ``counter`` (``name`` then
    without ``_total``, which the exposition adds); ``samples`` are (label values, value)."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()
    samples: tuple[tuple[tuple[str, ...], float], ...] = ()


RECEIVER_FIGURES: tuple[tuple[str, str, str, str], ...] = (
    # (report field, metric name, kind, help)
    ("backlog", "backlog_messages", "gauge",
     "messages stored in the WAL beyond the last batch (they wait for a later one)"),
    ("oldestUncommittedSeconds", "oldest_uncommitted_age_seconds", "gauge",
     "how long the last batch's oldest message had waited since it was received"),
    ("receiveRate", "receive_rate_messages_per_second", "gauge",
     "messages stored per second over the last 10 s"),
    ("received", "received_messages", "counter", "messages the receiver stored"),
    ("walBytes", "wal_bytes", "gauge", "bytes the WAL's segments hold"),
    ("walHighWaterMark", "wal_next_offset", "gauge", "the WAL's next offset"),
    ("committed", "committed_offset", "gauge", "the offset the query committed up to"),
    ("batchEnd", "batch_end_offset", "gauge", "the offset the last batch read up to"),
    ("connected", "connected", "gauge", "1 while the receiver is connected to the broker"),
    ("subscribed", "subscribed", "gauge",
     "1 once the broker holds the receiver's subscriptions (it queues for the query)"),
    ("reconnects", "reconnects", "counter", "connections to the broker after the first"),
    ("frozen", "receiver_frozen", "gauge", "1 once an available-now run stopped the receiver"),
    ("duplicatesDropped", "duplicates_dropped", "counter",
     "resends of stored messages withheld (docs/delivery.md)"),
    ("possibleDuplicates", "possible_duplicates", "counter",
     "messages stored that may repeat one stored before (docs/delivery.md)"),
)  # fmt: skip
"""The source report's per-receiver figures and the metric each becomes."""


class IngestMetrics:
    """The latest progress of the job's query and the batch writer's totals; thread-safe
    (progress comes from Spark's listener thread, scrapes from the HTTP server's)."""

    def __init__(self, stats: RunStats, clock: Callable[[], float] = time.time) -> None:
        self.stats = stats
        self._clock = clock
        self._lock = threading.Lock()
        self._progress: dict[str, Any] | None = None
        self._batches = 0
        self._input_rows = 0
        self._active = False
        self._progress_at: float | None = None
        self._last_batch = -1

    def started(self) -> None:
        with self._lock:
            self._active = True

    def terminated(self) -> None:
        with self._lock:
            self._active = False

    def progress(self, progress: dict[str, Any]) -> None:
        """A progress event of the query: the latest one is what a scrape reports."""
        with self._lock:
            self._progress = progress
            self._progress_at = self._clock()
            batch = int(progress.get("batchId", -1))
            if is_data_batch(progress) and batch > self._last_batch:
                self._last_batch = batch
                self._batches += 1
                self._input_rows += int(progress.get("numInputRows") or 0)

    def families(self) -> list[Family]:
        """The metrics of a scrape now."""
        with self._lock:
            progress = self._progress
            batches, input_rows, active = self._batches, self._input_rows, self._active
            progress_at = self._progress_at
        _, rows, dead = self.stats.totals()
        latest = self.stats.latest()
        out = [
            Family("query_active", "gauge", "1 while the query runs", (), (((), float(active)),)),
            Family("batches", "counter", "micro-batches run", (), (((), float(batches)),)),
            Family("input_rows", "counter", "rows the source gave the query's batches", (),
                   (((), float(input_rows)),)),
            Family("rows_written", "counter", "rows written to the table", (),
                   (((), float(rows)),)),
            Family("dead_letter_rows", "counter", "rows written to the dead-letter table", (),
                   (((), float(dead)),)),
        ]  # fmt: skip
        if latest is not None and latest.lag is not None:
            out.append(
                Family("batch_lag_seconds", "gauge",
                       "the last batch's newest message: from its receipt to its write", (),
                       (((), latest.lag),))
            )  # fmt: skip
        if progress_at is not None:
            out.append(
                Family("last_progress_timestamp_seconds", "gauge",
                       "when the query last reported progress (Unix time)", (),
                       (((), progress_at),))
            )  # fmt: skip
        if progress is not None:
            out += _progress_families(progress)
        return out


def _progress_families(progress: Mapping[str, Any]) -> list[Family]:
    """The last batch's duration and rate, and the source report's per-receiver figures."""
    out = []
    duration = (progress.get("durationMs") or {}).get("triggerExecution")
    if duration is not None:
        out.append(
            Family("batch_duration_seconds", "gauge", "the last trigger's duration", (),
                   (((), duration / 1000),))
        )  # fmt: skip
    rate = progress.get("processedRowsPerSecond")
    if rate is not None:
        out.append(
            Family("processed_rows_per_second", "gauge", "the last batch's processing rate",
                   (), (((), float(rate)),))
        )  # fmt: skip
    receivers = source_receivers(progress)
    for field, name, kind, text in RECEIVER_FIGURES:
        samples = tuple(
            ((str(r.get("receiver", i)),), float(r[field]))
            for i, r in enumerate(receivers)
            if r.get(field) is not None
        )
        if samples:
            out.append(Family(name, kind, text, ("receiver",), samples))
    faults = tuple(
        ((str(r.get("receiver", i)), rule), float(count))
        for i, r in enumerate(receivers)
        for rule, count in sorted((r.get("brokerFaults") or {}).items())
    )
    out.append(
        Family("broker_faults", "counter", "broker faults survived, by rule (docs/delivery.md)",
               ("receiver", "rule"), faults)
    )  # fmt: skip
    return out


class MetricsServer:
    """Serves :class:`IngestMetrics` at ``http://host:port/metrics`` until :meth:`close`."""

    def __init__(self, metrics: IngestMetrics, host: str, port: int) -> None:
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise MetricsUnavailable(
                "--metrics-port needs the prometheus_client package (the [metrics] extra)"
            ) from None
        self.metrics = metrics
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(metrics))
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise MetricsUnavailable(f"cannot serve metrics on {host}:{port}: {exc}") from None
        self.host = host
        self.port = int(self._server.server_address[1])
        self._detach: Callable[[], None] | None = None
        log.info("Prometheus metrics at http://%s:%d/metrics", _url_host(host), self.port)

    def attach(self, spark: Any, query_name: str) -> None:
        """Feed the metrics from the progress of ``spark``'s query named ``query_name``."""
        progress_listener = listener(self.metrics, query_name, spark)
        spark.streams.addListener(progress_listener)
        self._detach = lambda: spark.streams.removeListener(progress_listener)

    def close(self) -> None:
        """Stop serving and listening."""
        if self._detach is not None:
            try:
                self._detach()
            except Exception as exc:  # Spark's JVM may be gone already
                log.debug("removing the metrics listener: %s", exc)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5.0)


class MetricsUnavailable(Exception):
    """The endpoint cannot start: the library is missing or the address is taken."""


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class _Collector:
    """prometheus_client's collector protocol over :meth:`IngestMetrics.families`."""

    def __init__(self, metrics: IngestMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        for family in self.metrics.families():
            cls = CounterMetricFamily if family.kind == "counter" else GaugeMetricFamily
            metric = cls(PREFIX + family.name, family.help, labels=family.labels)
            for labels, value in family.samples:
                metric.add_metric(list(labels), value)
            yield metric


def listener(metrics: IngestMetrics, query_name: str, spark: Any = None) -> Any:
    """A ``StreamingQueryListener`` that feeds ``metrics`` with the progress of the query
    named ``query_name`` (``spark.streams.addListener``). Spark gives listeners a batch's
    progress, but for an idle query (every ``spark.sql.streaming.noDataProgressEventInterval``)
    only an idle event while its ``lastProgress`` is renewed: that is read from ``spark``."""
    from pyspark.sql.streaming import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        def __init__(self) -> None:
            self.ids: set[str] = set()

        def onQueryStarted(self, event: Any) -> None:
            if event.name == query_name:
                self.ids.add(str(event.id))
                metrics.started()

        def onQueryProgress(self, event: Any) -> None:
            progress = json.loads(event.progress.json)
            if str(progress.get("id")) in self.ids:
                metrics.progress(progress)

        def onQueryIdle(self, event: Any) -> None:
            if spark is None or str(event.id) not in self.ids:
                return
            query = spark.streams.get(str(event.id))
            last = query.lastProgress if query is not None else None
            if last is not None:
                metrics.progress(json.loads(last.json))

        def onQueryTerminated(self, event: Any) -> None:
            if str(event.id) in self.ids:
                metrics.terminated()

    return ProgressListener()
