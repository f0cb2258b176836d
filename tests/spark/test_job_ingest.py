"""The ingest job end to end: a real broker, the job as a subprocess, Delta tables read back.

* JSON payloads with a ``--schema``, malformed ones among them: every published message lands
  exactly once, in the table (typed, topic-level and date columns, partitioned by date) or in
  the dead-letter table (raw payload, reason); SIGTERM stops it with exit 0 and a summary.
* Text payloads, settings from a ``--config`` TOML file with a flag overriding one; SIGTERM
  while a batch is in flight lets that batch finish.
* Under ``spark-submit``, SIGTERM to the JVM (the process a scheduler signals) stops the job
  after the batch in flight, with its summary, through a Spark shutdown hook.
* A broker refusing the credentials: exit 1 and one line on stderr.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import uuid
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devtools.delta_log import delta_row_count
from streaming_jobs import payloads
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import LAND_TIMEOUT, TRIGGER, Job, batch_files, run_job, spark_submit
from tests.support.publishing import Message, as_messages, publish
from tests.support.waiting import wait_disconnected, wait_subscribed

SCHEMA = "seq BIGINT NOT NULL, temp DOUBLE, status STRING"
BAD_JSON: dict[bytes, str] = {
    b'{"seq": 100, "temp": "hot", "status": "ok"}': "field 'temp' is not a valid double",
    b'{"seq": 101, "temp": 1.5': payloads.NOT_JSON,
    b'[{"seq": 102}]': payloads.NOT_OBJECT,
    b"": payloads.EMPTY,
    b'\xff\xfe{"seq": 103}': payloads.NOT_UTF8,
    b'{"temp": 1.5}': "required field 'seq' is missing or null",
}


def _client_id() -> str:
    return f"job-{uuid.uuid4().hex[:12]}"


def _stderr_problems(stderr: str) -> list[str]:
    """Lines of a job's stderr that are neither JVM start-up notices nor Spark warnings."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip()
        and not line.startswith("WARNING: Using incubator modules")
        and not re.match(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d WARN ", line)
    ]


def test_json_payloads_split_exactly_once_between_table_and_dead_letters(
    broker_factory: BrokerFactory, spark: SparkSession, tmp_path: Path
) -> None:
    broker = broker_factory()
    table, dead, checkpoint = tmp_path / "table", tmp_path / "dead", tmp_path / "checkpoint"
    client_id = _client_id()
    job = Job.start(
        [
            "--broker", broker.url, "--topic", "plant/#", "--client-id", client_id,
            "--table", str(table), "--checkpoint", str(checkpoint), "--trigger", TRIGGER,
            "--payload-format", "json", "--schema", SCHEMA, "--dead-letter-table", str(dead),
            "--topic-columns", "_,site,device", "--partition-by", "date",
        ],
        tmp_path,
        "json-job",
    )  # fmt: skip
    try:
        wait_subscribed(broker, client_id, "plant/#", 1, job)
        good = {
            i: (
                f"plant/site{i % 2}/dev{i % 3}/telemetry",
                {"seq": i, "temp": i / 4, "status": "ok"},
            )
            for i in range(12)
        }
        messages = [(topic, json.dumps(body).encode()) for topic, body in good.values()]
        for n, payload in enumerate(BAD_JSON):  # interleaved with the good ones
            messages.insert(2 * n + 1, (f"plant/bad{n}/dev/telemetry", payload))
        publish(broker, as_messages(messages))
        total = len(messages)
        job.wait_for(
            f"{total} rows in the table and the dead-letter table",
            lambda: delta_row_count(table) + delta_row_count(dead) >= total,
            LAND_TIMEOUT,
        )
        assert job.terminate() == 0, job.logs()
    finally:
        job.cleanup()

    summary = re.search(
        r"stopped: \d+ batch(es)?, (\d+) messages: (\d+) table rows, (\d+) dead-letter rows",
        job.stdout,
    )
    assert summary is not None, job.logs()
    assert [int(summary.group(n)) for n in (2, 3, 4)] == [
        total,
        total - len(BAD_JSON),
        len(BAD_JSON),
    ]
    assert re.search(r"batch \d+: \d+ rows, \d+ dead-letter, \d+ rows/s", job.stdout)
    assert not _stderr_problems(job.stderr), job.stderr

    rows = spark.read.format("delta").load(str(table))
    assert rows.columns == [
        "topic", "site", "device", "seq", "temp", "status",
        "qos", "retained", "duplicate", "messageId", "timestamp", "offset", "receiver", "date",
    ]  # fmt: skip
    got = rows.withColumn("micros", F.unix_micros("timestamp")).collect()
    assert sorted(r.seq for r in got) == sorted(good)
    for row in got:
        topic, body = good[row.seq]
        assert (row.topic, row.temp, row.status) == (topic, body["temp"], "ok")
        assert (row.site, row.device) == tuple(topic.split("/")[1:3])
        assert row.date == dt.datetime.fromtimestamp(row.micros / 1e6, dt.UTC).date()
        assert (table / f"date={row.date.isoformat()}").is_dir()

    dead_rows = spark.read.format("delta").load(str(dead)).collect()
    assert {bytes(r.payload): r.reason for r in dead_rows} == BAD_JSON
    assert all(r.topic.startswith("plant/bad") and r.qos == 1 for r in dead_rows)
    offsets = sorted([r.offset for r in got] + [r.offset for r in dead_rows])
    assert offsets == list(range(total)), "every message exactly once, in one of the tables"


def test_text_payloads_with_toml_config_and_sigterm_during_a_batch(
    broker_factory: BrokerFactory, spark: SparkSession, tmp_path: Path
) -> None:
    broker = broker_factory()
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    client_id = _client_id()
    config = tmp_path / "ingest.toml"
    config.write_text(
        f"""
        broker = "{broker.url}"
        topic = "text/#"
        table = "{table}"
        checkpoint = "{checkpoint}"
        client_id = "{client_id}"
        payload-format = "text"
        qos = 0                      # overridden on the command line
        trigger = "{TRIGGER}"
        """
    )
    job = Job.start(["--config", str(config), "--qos", "1"], tmp_path, "text-job")
    texts = ["plain", "ünïcödé ✓", "", "line\nbreak"]
    try:
        wait_subscribed(broker, client_id, "text/#", 1, job)  # QoS 1: the flag won
        publish(
            broker,
            [Message("text/a", t.encode()) for t in texts] + [Message("text/b", b"\xc3\x28")],
        )
        job.wait_for(
            "5 rows, their batch committed in the checkpoint",
            lambda: (
                delta_row_count(table) >= 5
                and batch_files(checkpoint, "commits")[-1:]
                == batch_files(checkpoint, "offsets")[-1:]
            ),
            LAND_TIMEOUT,
        )

        committed = max(batch_files(checkpoint, "commits"))
        publish(broker, [Message("text/last", b"the last one")])
        job.wait_for(
            "a batch planned after the last message",
            lambda: max(batch_files(checkpoint, "offsets")) > committed,
            LAND_TIMEOUT,
        )
        in_flight = max(batch_files(checkpoint, "offsets"))
        assert in_flight not in batch_files(checkpoint, "commits"), "meant to land mid-batch"
        assert job.terminate() == 0, job.logs()
        wait_disconnected(broker, [client_id])  # the receiver's DISCONNECT, not a dropped socket
    finally:
        job.cleanup()

    assert in_flight in batch_files(checkpoint, "commits"), "the batch in flight finished"
    assert "stopping after the batch in flight" in job.stdout
    assert "interrupting" not in job.stdout
    assert re.search(r"stopped: \d+ batch(es)?, 6 rows, 1 of them unparsed, ", job.stdout), (
        job.logs()
    )
    assert not _stderr_problems(job.stderr), job.stderr

    rows = spark.read.format("delta").load(str(table)).orderBy("offset").collect()
    assert [r.text for r in rows] == [*texts, None, "the last one"]
    assert [r.qos for r in rows] == [1] * 6
    assert [r[payloads.PARSE_ERROR] for r in rows] == [None] * 4 + [payloads.NOT_UTF8, None]
    assert bytes(rows[4].payload) == b"\xc3\x28"  # raw bytes kept where decoding failed
    assert rows[0].payload is None  # and only there (no --keep-payload)


def test_sigterm_to_the_spark_submit_jvm_stops_after_the_batch_with_a_summary(
    broker_factory: BrokerFactory, spark: SparkSession, tmp_path: Path
) -> None:
    broker = broker_factory()
    table, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    client_id = _client_id()
    args = [
        "--broker", broker.url, "--topic", "jvm/#", "--qos", "1", "--client-id", client_id,
        "--payload-format", "text", "--table", str(table), "--checkpoint", str(checkpoint),
        "--trigger", TRIGGER,
    ]  # fmt: skip
    job = Job.start(args, tmp_path, "submit-job", launcher=spark_submit())
    try:
        wait_subscribed(broker, client_id, "jvm/#", 1, job)
        publish(broker, [Message(f"jvm/{i % 3}", f"m{i}".encode()) for i in range(40)])
        job.wait_for("40 rows landed", lambda: delta_row_count(table) >= 40, LAND_TIMEOUT)
        publish(broker, [Message("jvm/last", b"the last one")])
        status = job.terminate()  # the JVM: spark-submit execs java
    finally:
        job.cleanup()

    # The JVM exits with the status of a SIGTERM'd Java process, after the driver finished.
    assert status == 128 + 15, job.logs()
    assert "Spark's JVM is shutting down: stopping after the batch in flight" in job.stdout
    assert "interrupting" not in job.stdout, job.logs()
    assert re.search(r"stopped: \d+ batch(es)?, 4[01] rows", job.stdout), job.logs()
    assert "Traceback" not in job.stdout + job.stderr, job.logs()
    rows = spark.read.format("delta").load(str(table)).collect()
    texts = sorted(r.text for r in rows)
    assert len(texts) == len(set(texts)), "no row twice"
    assert set(texts) >= {f"m{i}" for i in range(40)}
    # A batch planned at the very moment of the stop may be left for the next start.
    assert len(batch_files(checkpoint, "offsets")) - len(batch_files(checkpoint, "commits")) <= 1
    assert _exception_records(job.stderr) == [], job.logs()


LOG_RECORD = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ", re.MULTILINE)


def _exception_records(stderr: str) -> list[str]:
    """Log records of Spark's JVM that mention an exception, except Hadoop's warning for a stop
    that interrupts Spark writing the offsets of the batch planned at that moment (the case
    the offsets/commits check above allows)."""
    starts = [0, *(m.start() for m in LOG_RECORD.finditer(stderr)), len(stderr)]
    records = [stderr[a:b] for a, b in itertools.pairwise(starts)]
    return [
        r
        for r in records
        if "Exception" in r
        and not ("WARN Shell: Interrupted while joining" in r and "markMicroBatchStart" in r)
    ]


def test_refused_credentials_exit_1_with_one_line(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(users={"ingest": "right"})
    password = "wrong-password"
    done = run_job(
        [
            "--broker", broker.url, "--topic", "a/#", "--username", "ingest",
            "--allow-password-over-plain-tcp",
            "--table", str(tmp_path / "t"), "--checkpoint", str(tmp_path / "c"),
        ],
        timeout=180,
        MQTT_PASSWORD=password,
    )  # fmt: skip
    assert done.returncode == 1, done
    problems = _stderr_problems(done.stderr)
    assert len(problems) == 1, done.stderr
    assert problems[0] == "error: NotAuthorized: not authorized (CONNACK return code 5)"
    assert "Traceback" not in done.stderr and "\tat " not in done.stderr
    assert password not in done.stdout + done.stderr
