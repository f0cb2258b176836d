"""The example declarative pipeline (``streaming_jobs/pipelines/mqtt_ingest``) run by
``spark-pipelines`` against a real Mosquitto, each run a process of its own with its own local
Spark Connect server (:mod:`streaming_jobs.pipelines.launch`).

Each test copies the example and points its spec at the test's broker, storage, WAL and client
id. ``run`` drains what the broker queued for the query's persistent session and exits by
itself (streaming flows run with ``Trigger.AvailableNow``); the tables are read back from their
Delta logs (:mod:`devtools.delta_log`), without Spark.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from devtools import REPO_ROOT
from devtools.broker_process import LOOPBACK, port_accepts
from devtools.class_archive import OPTS_ENV as SUBMIT_OPTS
from devtools.delta_log import DeltaSnapshot
from streaming_jobs.pipelines.launch import CONNECT_PORT
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.ids import unique_id
from tests.support.publishing import Message, publish
from tests.support.spark_processes import SparkProcess, tail
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]

EXAMPLE = REPO_ROOT / "streaming_jobs" / "pipelines" / "mqtt_ingest"
TOPIC_FILTER = "sdp/+/reading"
RUN_TIMEOUT = 300.0
"""One ``spark-pipelines`` process: two JVMs start, the metastore opens, both flows run."""
PORT_TIMEOUT = 60.0
"""Until a finished run's Connect server has let go of its port."""
CONNECTED = "New client connected from"
"""What Mosquitto logs for each MQTT connection (``log_type`` ``notice``), with the client id.
A bare TCP connection ("New connection from", then "closed its connection") is the broker
fixture's own readiness probe, whose line may reach the log late."""


def pipeline_project(base: Path, broker: MosquittoBroker, client_id: str) -> Path:
    """A copy of the example under ``base`` whose spec names this test's broker, client id,
    storage and WAL; the spec's path."""
    project = base / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    spec_path = project / "spark-pipeline.yml"
    spec = yaml.safe_load(spec_path.read_text())
    spec["storage"] = (base / "storage").as_uri()
    spec["configuration"].update(
        {
            "mqtt.brokerUrl": broker.url,
            "mqtt.topic": TOPIC_FILTER,
            "mqtt.qos": "2",
            "mqtt.clientId": client_id,
            "mqtt.walPath": str(base / "wal"),
            "mqtt.availableNowIdleTimeout": "0.5",
        }
    )
    spec_path.write_text(yaml.safe_dump(spec))
    return spec_path


def spark_pipelines(base: Path, name: str, *args: str) -> tuple[int, str]:
    """Run ``python -m streaming_jobs.pipelines.launch --state <base>/state <args>`` to its end
    (or fail at :data:`RUN_TIMEOUT`); its exit status and output."""
    wait_until(
        lambda: not port_accepts(LOOPBACK, CONNECT_PORT),
        PORT_TIMEOUT,
        interval=0.2,
        message=f"port {CONNECT_PORT} is taken: another Spark Connect server listens there",
    )
    python = sys.executable
    command = [python, "-m", "streaming_jobs.pipelines.launch", "--state", str(base / "state")]
    # The Connect server's JVM: the C1 JIT compiler only, as for the job's runs (a third less
    # CPU for a run this short), after the options the test run gives Spark's JVMs.
    submit_opts = " ".join(filter(None, [os.environ.get(SUBMIT_OPTS), "-XX:TieredStopAtLevel=1"]))
    env = {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, SUBMIT_OPTS: submit_opts}
    process = SparkProcess.start(name, [*command, *args], base / "logs", cwd=base, env=env)
    try:
        code = process.wait(RUN_TIMEOUT)
    finally:
        process.stop()
    return code, tail(process.log_path, 200_000)


def table(base: Path, name: str) -> list[dict[str, Any]]:
    """The rows of one of the pipeline's tables (its Delta log replayed)."""
    path = base / "state" / "warehouse" / name
    assert (path / "_delta_log").is_dir(), f"{name} is not a Delta table at {path}"
    rows: list[dict[str, Any]] = DeltaSnapshot.load(path).read().to_pylist()
    return rows


def subscribe_persistently(broker: MosquittoBroker, client_id: str) -> None:
    """Create the pipeline's persistent session with its QoS 2 subscription, so that the broker
    queues what is published before the first run."""
    client = MqttClient(
        broker.url, SessionConfig(client_id, clean_session=False), [(TOPIC_FILTER, 2)]
    )
    assert not client.connect().session_present
    client.disconnect()


def readings(start: int, count: int) -> list[Message]:
    """QoS 2 JSON readings with ``seq`` ``start`` .. ``start + count - 1`` over two topics."""
    return [
        Message(
            f"sdp/dev-{n % 2}/reading",
            json.dumps({"ts": "2026-01-02T03:04:05Z", "temperature": n / 4, "seq": n}).encode(),
            qos=2,
        )
        for n in range(start, start + count)
    ]


def readings_table(base: Path) -> Counter[tuple[Any, ...]]:
    """``mqtt_readings`` as a multiset of (topic, seq, temperature, humidity, malformed)."""
    return Counter(
        (r["topic"], r["seq"], r["temperature"], r["humidity"], r["malformed_payload"])
        for r in table(base, "mqtt_readings")
    )


def parsed(sent: list[Message]) -> Counter[tuple[Any, ...]]:
    """What ``mqtt_readings`` holds for ``sent``: the JSON fields, or the malformed text."""
    rows: Counter[tuple[Any, ...]] = Counter()
    for message in sent:
        try:
            data = json.loads(message.payload)
        except ValueError:
            rows[(message.topic, None, None, None, message.payload.decode())] += 1
        else:
            rows[(message.topic, data["seq"], data["temperature"], None, None)] += 1
    return rows


def assert_messages(base: Path, sent: list[Message]) -> None:
    """Each message exactly once in ``mqtt_messages``, nothing else, offsets without a gap."""
    raw = table(base, "mqtt_messages")
    got = Counter((r["topic"], bytes(r["payload"]), r["qos"]) for r in raw)
    want = Counter((m.topic, m.payload, 2) for m in sent)
    assert got == want, f"mqtt_messages: missing {want - got}, unexpected {got - want}"
    assert sorted(r["offset"] for r in raw) == list(range(len(sent)))


def assert_readings(base: Path, sent: list[Message], at_least: list[Message]) -> None:
    """``mqtt_readings`` holds each of ``at_least`` once, maybe more of ``sent`` (once each),
    and nothing else."""
    got, want, floor = readings_table(base), parsed(sent), parsed(at_least)
    assert not got - want, f"mqtt_readings: unexpected or doubled {got - want}"
    assert not floor - got, f"mqtt_readings: missing {floor - got}"


def assert_completed(code: int, output: str) -> None:
    """A run that exited 0 after both flows and the run completed."""
    assert code == 0, output
    for event in (
        "Flow spark_catalog.default.mqtt_messages has COMPLETED",
        "Flow spark_catalog.default.mqtt_readings has COMPLETED",
        "Run is COMPLETED",
    ):
        assert event in output, f"no {event!r}:\n{output[-20_000:]}"


def test_runs_land_each_message_once_and_continue_from_the_checkpoint(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    client_id = unique_id("sdp-")
    spec = pipeline_project(tmp_path, broker, client_id)
    subscribe_persistently(broker, client_id)
    first = [*readings(0, 30), Message("sdp/dev-0/reading", b"not json", qos=2)]
    publish(broker, first)

    code, output = spark_pipelines(tmp_path, "run-1", "run", "--spec", str(spec))
    assert_completed(code, output)
    assert_messages(tmp_path, first)
    assert_readings(tmp_path, first, at_least=first)

    second = readings(30, 20)
    publish(broker, second)
    code, output = spark_pipelines(tmp_path, "run-2", "run", "--spec", str(spec))
    assert_completed(code, output)
    assert_messages(tmp_path, first + second)
    # mqtt_readings may have run beside mqtt_messages and so not seen this run's rows yet.
    assert_readings(tmp_path, first + second, at_least=first)

    # Nothing new: mqtt_messages stays as it is, mqtt_readings catches up.
    code, output = spark_pipelines(tmp_path, "run-3", "run", "--spec", str(spec))
    assert_completed(code, output)
    assert_messages(tmp_path, first + second)
    assert_readings(tmp_path, first + second, at_least=first + second)


def test_dry_run_checks_the_graph_without_connecting_to_the_broker(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    client_id = unique_id("sdp-")
    spec = pipeline_project(tmp_path, broker, client_id)
    logged = len(broker.log_text())

    code, output = spark_pipelines(tmp_path, "dry-run", "dry-run", "--spec", str(spec))
    assert code == 0, output
    assert "Run is COMPLETED" in output, output
    during = broker.log_text()[logged:]
    assert CONNECTED not in during and client_id not in during, during
    assert not (tmp_path / "state" / "warehouse" / "mqtt_messages").exists()

    # The broker's log does show a connection: the check above could have failed.
    subscribe_persistently(broker, client_id)
    after = broker.log_text()[logged:]
    assert f"{CONNECTED} 127.0.0.1" in after and f"as {client_id} " in after, after
