"""The ingest job's Prometheus endpoint (streaming_jobs/metrics_server.py): what a scrape
serves from a progress event of the real report's shape, over real HTTP on loopback."""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from connector.receiver.shard_handles import ShardStatus
from connector.spark.reader.progress_report import progress_report
from streaming_jobs.metrics_server import IngestMetrics, MetricsServer, MetricsUnavailable, listener
from streaming_jobs.progress import BatchStats, RunStats


def progress(batch: int, rows: int, *statuses: ShardStatus) -> dict[str, Any]:
    report = progress_report({"wal": "w", "offset": statuses[0].next}, list(statuses))
    return {
        "id": "q-1",
        "name": "mqtt-ingest",
        "batchId": batch,
        "numInputRows": rows,
        "processedRowsPerSecond": 250.0,
        "durationMs": {"addBatch": 100, "triggerExecution": 400},
        "sources": [{"latestOffset": json.dumps(report), "endOffset": "{}"}],
    }


def status(next_offset: int, committed: int, **figures: object) -> ShardStatus:
    return ShardStatus("w", 0, next_offset, committed, delivery=dict(figures))


def scrape(server: MetricsServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def served() -> Iterator[tuple[IngestMetrics, MetricsServer]]:
    stats = RunStats()
    metrics = IngestMetrics(stats, clock=lambda: 1_700_000_000.0)
    server = MetricsServer(metrics, "127.0.0.1", 0)
    try:
        yield metrics, server
    finally:
        server.close()


def test_a_scrape_serves_the_query_and_each_receiver(
    served: tuple[IngestMetrics, MetricsServer],
) -> None:
    metrics, server = served
    before = scrape(server)
    assert before[("mqtt_ingest_batches_total", ())] == 0
    assert not any(name == "mqtt_ingest_backlog_messages" for name, _ in before)
    metrics.started()
    metrics.stats.record(BatchStats(0, rows=40, dead_letters=2, newest_us=1_000_000,
                                    written_at=3.5))  # fmt: skip
    metrics.progress(progress(0, 42, status(50, 42, received=50, receiveRate=12.5,
                                            oldestUncommittedSeconds=1.25, walBytes=4096,
                                            connections=3, connected=True,
                                            brokerFaults={"pending-id-reused": 2}),
                              status(7, 7, connections=1, connected=False,
                                     oldestUncommittedSeconds=None)))  # fmt: skip
    got = scrape(server)
    r0, r1 = (("receiver", "0"),), (("receiver", "1"),)
    assert got[("mqtt_ingest_query_active", ())] == 1
    assert got[("mqtt_ingest_batches_total", ())] == 1
    assert got[("mqtt_ingest_input_rows_total", ())] == 42
    assert got[("mqtt_ingest_rows_written_total", ())] == 40
    assert got[("mqtt_ingest_dead_letter_rows_total", ())] == 2
    assert got[("mqtt_ingest_batch_lag_seconds", ())] == 2.5
    assert got[("mqtt_ingest_batch_duration_seconds", ())] == 0.4
    assert got[("mqtt_ingest_processed_rows_per_second", ())] == 250
    assert got[("mqtt_ingest_last_progress_timestamp_seconds", ())] == 1_700_000_000
    assert got[("mqtt_ingest_backlog_messages", r0)] == 8
    assert got[("mqtt_ingest_backlog_messages", r1)] == 0
    assert got[("mqtt_ingest_oldest_uncommitted_age_seconds", r0)] == 1.25
    assert ("mqtt_ingest_oldest_uncommitted_age_seconds", r1) not in got  # unknown: no sample
    assert got[("mqtt_ingest_received_messages_total", r0)] == 50
    assert got[("mqtt_ingest_receive_rate_messages_per_second", r0)] == 12.5
    assert got[("mqtt_ingest_wal_bytes", r0)] == 4096
    assert got[("mqtt_ingest_connected", r0)] == 1 and got[("mqtt_ingest_connected", r1)] == 0
    assert got[("mqtt_ingest_reconnects_total", r0)] == 2
    faults = (("receiver", "0"), ("rule", "pending-id-reused"))
    assert got[("mqtt_ingest_broker_faults_total", faults)] == 2
    # an idle progress event (no batch ran) counts no batch
    idle = progress(0, 0, status(50, 50))
    del idle["durationMs"]["addBatch"]
    metrics.progress(idle)
    metrics.terminated()
    got = scrape(server)
    assert got[("mqtt_ingest_batches_total", ())] == 1
    assert got[("mqtt_ingest_backlog_messages", r0)] == 0
    assert got[("mqtt_ingest_query_active", ())] == 0


def test_the_listener_takes_only_its_query() -> None:
    metrics = IngestMetrics(RunStats())
    ours = listener(metrics, "mqtt-ingest")
    ours.onQueryStarted(SimpleNamespace(name="other", id="q-2"))
    ours.onQueryStarted(SimpleNamespace(name="mqtt-ingest", id="q-1"))
    for query_id, rows in (("q-2", 5), ("q-1", 42)):
        event = progress(0, rows, status(50, 42))
        event["id"] = query_id
        # the progress's own JSON has the latest offset parsed, not as a string
        (source,) = event["sources"]
        source["latestOffset"] = json.loads(source["latestOffset"])
        ours.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json=json.dumps(event))))
    families = {f.name: f.samples for f in metrics.families()}
    assert families["input_rows"] == (((), 42.0),)
    assert families["query_active"] == (((), 1.0),)
    assert families["backlog_messages"] == ((("0",), 8.0),)
    ours.onQueryTerminated(SimpleNamespace(id="q-2"))
    assert {f.name: f.samples for f in metrics.families()}["query_active"] == (((), 1.0),)
    ours.onQueryTerminated(SimpleNamespace(id="q-1"))
    assert {f.name: f.samples for f in metrics.families()}["query_active"] == (((), 0.0),)


def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsUnavailable, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            MetricsServer(IngestMetrics(RunStats()), "127.0.0.1", port)
