"""Every orderly stop of the ``mqtt`` source ends its connections with DISCONNECT.

Rule under test (``MqttStreamReader._stop_on_sigterm``, docs/architecture.md decision 32):
Spark stops a Python streaming source by destroying its runner process (SIGTERM) before it
closes the runner's socket; the reader turns that signal into its ``stop()``, so each receiver
(a thread, or with ``receivers`` > 1 a process of its own) sends DISCONNECT. Checked for
``query.stop()`` and the end of an AvailableNow run with one and with two receivers, and the
ingest job's SIGTERM with two; the job's SIGTERM with one receiver is checked by
``test_job_ingest`` (SIGTERM during a batch), and the end of its ``--trigger available-now``
run by ``test_job_drain_progress``.

Mosquitto logs ``Client <id> disconnected.`` when it receives DISCONNECT, and ``Client <id>
closed its connection.`` (or a socket error) when the connection closes without one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from devtools.delta_log import delta_row_count
from tests.support import ingest_job
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.ids import unique_id
from tests.support.ingest_job import TRIGGER, Job
from tests.support.publishing import Message, numbered, publish
from tests.support.spark_streams import (
    StreamDirs,
    mqtt_reader,
    start_stream,
    to_delta,
    wait_for_rows,
)
from tests.support.waiting import wait_disconnected, wait_subscribed

RUN_TIMEOUT = 120.0


def client_ids(client_id: str, receivers: int) -> list[str]:
    """The broker-side client ids of a query's receivers."""
    return [client_id] if receivers == 1 else [f"{client_id}-{i}" for i in range(receivers)]


def subscription(topic: str, client_id: str, receivers: int) -> str:
    """The filter each receiver subscribes to (``shardBy=share``, the group its client id)."""
    return topic if receivers == 1 else f"$share/{client_id}/{topic}"


# ---------------------------------------------------------------------------- in the session


@pytest.mark.parametrize("receivers", [1, 2])
def test_query_stop_sends_disconnect(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs, receivers: int
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    query = start_stream(
        spark, broker.url, dirs, topic="dis/#", clientId=client_id, receivers=receivers
    )
    try:
        for client in client_ids(client_id, receivers):
            wait_subscribed(broker, client, subscription("dis/#", client_id, receivers), 1)
        publish(broker, numbered("dis/t", 4))
        wait_for_rows(spark, dirs.table, 4, [query])
    finally:
        query.stop()
    wait_disconnected(broker, client_ids(client_id, receivers))


@pytest.mark.parametrize("receivers", [1, 2])
def test_the_end_of_an_available_now_run_sends_disconnect(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs, receivers: int
) -> None:
    broker = broker_factory()
    client_id = unique_id("spark-")
    frame = mqtt_reader(
        spark, broker.url, dirs.wal, topic="now/#", clientId=client_id, receivers=receivers,
        availableNowIdleTimeout="0.5",
    ).load()  # fmt: skip
    query = to_delta(frame, dirs, available_now=True)
    try:
        # pyspark types awaitTermination's timeout int; it takes seconds as a float
        assert query.awaitTermination(RUN_TIMEOUT), "AvailableNow did not stop by itself"  # type: ignore[arg-type]
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    wait_disconnected(broker, client_ids(client_id, receivers))


# ---------------------------------------------------------------------------- the ingest job


def job_args(broker: MosquittoBroker, tmp_path: Path, client_id: str, receivers: int) -> list:
    return [
        "--broker", broker.url, "--topic", "job/#", "--client-id", client_id,
        "--table", str(tmp_path / "table"), "--checkpoint", str(tmp_path / "checkpoint"),
        "--source-option", f"receivers={receivers}",
        "--source-option", "availableNowIdleTimeout=0.5",
    ]  # fmt: skip


def test_sigterm_of_the_ingest_job_sends_disconnect(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    receivers = 2  # one receiver: tests/spark/test_job_ingest.py's SIGTERM during a batch
    broker = broker_factory()
    client_id = unique_id("job-")
    args = job_args(broker, tmp_path, client_id, receivers)
    job = Job.start([*args, "--trigger", TRIGGER], tmp_path, f"sigterm-{receivers}")
    try:
        for client in client_ids(client_id, receivers):
            wait_subscribed(broker, client, subscription("job/#", client_id, receivers), 1, job)
        publish(broker, [Message("job/t", b"one"), Message("job/t", b"two")])
        job.wait_for(
            "2 rows in the table",
            lambda: delta_row_count(tmp_path / "table") >= 2,
            ingest_job.LAND_TIMEOUT,
        )
        assert job.terminate() == 0, job.logs()
        wait_disconnected(broker, client_ids(client_id, receivers))
    finally:
        job.cleanup()
    assert "the stream reader's process is gone" not in job.stderr, job.logs()
