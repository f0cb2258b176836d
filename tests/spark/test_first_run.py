"""The first run loses nothing (docs/delivery.md, "The first run"): a publisher that starts the
moment the product says it is ready, before the query's receiver has connected, lands every
message, at QoS 1 and 2 (one subscription at QoS 2 takes both: a message is delivered at the
QoS it was published with): the QoS 2 ones exactly once, the QoS 1 ones at least once.

* ``format("mqtt")``: the documented way, ``create_session(opts)`` before the query starts;
  the progress report then says ``subscribed``.
* The ingest job: its "the broker now queues for this job" line comes before Spark starts; its
  "ingesting" line after the receiver's own subscription.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from pyspark.sql import Row, SparkSession

from connector.source import create_session
from connector.spark.reader.progress_frame import source_receivers
from devtools.delta_log import delta_row_count
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ingest_job import LAND_TIMEOUT, START_TIMEOUT, TRIGGER, Job
from tests.support.publishing import Message, publish
from tests.support.spark_streams import (
    StreamDirs,
    assert_at_least_once,
    assert_exactly_once,
    read_table,
    stop_all,
    to_delta,
    wait_for_rows,
)

COUNT = 300
READY = "the broker now queues for this job"


def mixed(topic: str) -> list[Message]:
    """``COUNT`` messages, alternately QoS 1 and QoS 2."""
    return [Message(topic, f"m-{n}-q{1 + n % 2}".encode(), 1 + n % 2) for n in range(COUNT)]


def assert_landed(rows: list[Row], messages: list[Message]) -> None:
    """The QoS 2 messages exactly once, the others at least once; nothing else."""
    twos = [m for m in messages if m.qos == 2]
    exactly = {m.payload for m in twos}
    assert_exactly_once([r for r in rows if bytes(r["payload"]) in exactly], twos)
    others = [r for r in rows if bytes(r["payload"]) not in exactly]
    assert_at_least_once(others, [m for m in messages if m.qos != 2])


def test_a_session_made_ahead_loses_nothing_of_the_first_run(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    retained = Message("plant/status", b"retained-before", qos=1, retain=True)
    publish(broker, [retained])
    opts = {
        "brokerUrl": broker.url,
        "topic": "plant/#",
        "qos": "2",
        "walPath": str(dirs.wal),
        "clientId": unique_id("spark-"),
    }
    sessions = create_session(opts)
    assert [s.created for s in sessions] == [True]
    # Ready: published before the query exists, let alone its receiver.
    messages = mixed("plant/a")
    publish(broker, messages)
    query = to_delta(spark.readStream.format("mqtt").options(**opts).load(), dirs)
    try:
        rows = wait_for_rows(spark, dirs.table, COUNT + 1, [query])
        receivers = source_receivers(query.lastProgress or {})
        assert [r["subscribed"] for r in receivers] == [True], receivers
    finally:
        stop_all([query])
    rows = read_table(spark, dirs.table)
    assert_landed(rows, [retained, *messages])
    assert [bytes(r["payload"]) for r in rows].count(b"retained-before") == 1


def test_the_job_loses_nothing_published_from_its_ready_line(
    spark: SparkSession, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    job = Job.start(
        [
            "--broker", broker.url, "--topic", "plant/#", "--qos", "2",
            "--client-id", f"job-{uuid.uuid4().hex[:12]}", "--table", str(table),
            "--checkpoint", str(checkpoint), "--trigger", TRIGGER,
        ],
        tmp_path,
        "first-run",
    )  # fmt: skip
    try:
        job.wait_for("the job's ready line", lambda: READY in job.stdout, START_TIMEOUT)
        messages = mixed("plant/a")
        publish(broker, messages)
        job.wait_for(
            f"{COUNT} rows in the table", lambda: delta_row_count(table) >= COUNT, LAND_TIMEOUT
        )
        job.wait_for("the ingesting line", lambda: "INFO ingesting " in job.stdout, LAND_TIMEOUT)
        assert job.terminate() == 0, job.logs()
    finally:
        job.cleanup()
    out = job.stdout
    assert out.index(READY) < out.index("INFO ingesting "), out
    assert_landed(spark.read.format("delta").load(str(table)).collect(), messages)
