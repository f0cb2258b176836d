"""The ingest job's Prometheus endpoint scraped during a real run (``--metrics-port``,
docs/operations.md "Prometheus"): a Spark query's progress, fed through the job's
``StreamingQueryListener``, shows each receiver's figures and what landed."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from devtools.broker_process import free_port
from devtools.delta_log import delta_row_count
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import LAND_TIMEOUT, START_TIMEOUT, TRIGGER, Job
from tests.support.publishing import Message, publish
from tests.support.waiting import wait_subscribed

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples | None:
    """The endpoint's samples, or None while it does not answer yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_a_scrape_during_a_run(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    broker = broker_factory()
    client_id = f"metrics-{uuid.uuid4().hex[:10]}"
    port = free_port("127.0.0.1")
    table = tmp_path / "table"
    job = Job.start(
        [
            "--broker", broker.url, "--topic", "m/#", "--client-id", client_id,
            "--table", str(table), "--checkpoint", str(tmp_path / "checkpoint"),
            "--trigger", TRIGGER, "--metrics-port", str(port),
        ],
        tmp_path,
        "metrics-job",
    )  # fmt: skip
    receiver = (("receiver", "0"),)
    try:
        wait_subscribed(broker, client_id, "m/#", 1, job)
        job.wait_for("the metrics endpoint", lambda: scrape(port), START_TIMEOUT)
        published = time.monotonic()
        publish(broker, [Message(f"m/{i % 3}", b"reading %d" % i) for i in range(30)])
        seen: list[Samples] = []

        def landed() -> bool:
            got = scrape(port) or {}
            seen.append(got)
            return (
                got.get(("mqtt_ingest_rows_written_total", ())) == 30
                and got.get(("mqtt_ingest_received_messages_total", receiver)) == 30
                and got.get(("mqtt_ingest_backlog_messages", receiver)) == 0
            )

        job.wait_for("30 rows in the scraped metrics", landed, LAND_TIMEOUT)
        got = seen[-1]
        assert delta_row_count(table) == 30
        assert got[("mqtt_ingest_query_active", ())] == 1
        assert got[("mqtt_ingest_input_rows_total", ())] == 30
        assert got[("mqtt_ingest_batches_total", ())] >= 1
        assert got[("mqtt_ingest_connected", receiver)] == 1
        assert got[("mqtt_ingest_reconnects_total", receiver)] == 0
        assert got[("mqtt_ingest_wal_next_offset", receiver)] == 30
        assert got[("mqtt_ingest_batch_end_offset", receiver)] == 30
        assert 0 <= got[("mqtt_ingest_committed_offset", receiver)] < 30  # the batch's start
        # the last batch's oldest message had waited, at most since the publish began
        age = got[("mqtt_ingest_oldest_uncommitted_age_seconds", receiver)]
        assert 0 <= age < time.monotonic() - published
        assert got[("mqtt_ingest_wal_bytes", receiver)] > 30 * len(b"reading 00")
        assert got[("mqtt_ingest_batch_lag_seconds", ())] >= 0
        # the rate is over the last 10 s: served, whatever its value by now
        assert ("mqtt_ingest_receive_rate_messages_per_second", receiver) in got
        # idle, the query's progress is renewed (every 10 s): all committed, nothing waits
        job.wait_for(
            "the idle query's renewed figures",
            lambda: (scrape(port) or {}).get(("mqtt_ingest_committed_offset", receiver)) == 30,
            LAND_TIMEOUT,
        )
        idle = scrape(port) or {}
        assert idle[("mqtt_ingest_oldest_uncommitted_age_seconds", receiver)] == 0
        assert idle[("mqtt_ingest_backlog_messages", receiver)] == 0
        assert idle[("mqtt_ingest_batches_total", ())] == got[("mqtt_ingest_batches_total", ())]
        assert job.terminate() == 0, job.logs()
    finally:
        job.cleanup()
    assert f"Prometheus metrics at http://127.0.0.1:{port}/metrics" in job.stdout
    assert scrape(port) is None, "the endpoint closes with the job"
