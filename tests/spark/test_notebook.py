"""The Databricks notebook ``streaming_jobs/notebooks/mqtt_ingest.py``, run locally end to end.

The notebook's source is executed with ``runpy.run_path`` in this process, so it reuses the
run's one Spark session (``SparkSession.getActiveSession()``). Messages are queued for the
notebook's persistent session before it runs; its ``Trigger.AvailableNow`` query drains them
into Delta and stops. Once with its parameters from environment variables (no ``dbutils``:
``.show()``, the chart of the source's figures saved to a PNG), once with a stand-in for
Databricks' ``dbutils`` widgets and ``display`` (which is given the table and the chart).
"""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any, cast

import pytest
from matplotlib.figure import Figure
from pyspark.sql import DataFrame, Row, SparkSession

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.ids import unique_id
from tests.support.publishing import Message, publish

REPO_ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO_ROOT / "streaming_jobs" / "notebooks" / "mqtt_ingest.py"
TOPIC_FILTER = "plant/+/+/telemetry"
SCHEMA = "ts TIMESTAMP, temperature DOUBLE, humidity DOUBLE, seq BIGINT"
ENV_NAMES = {
    "broker": "MQTT_BROKER_URL",
    "topic": "MQTT_TOPIC",
    "qos": "MQTT_QOS",
    "table": "MQTT_TABLE",
    "checkpoint": "MQTT_CHECKPOINT",
    "wal_path": "MQTT_WAL_PATH",
    "client_id": "MQTT_CLIENT_ID",
    "schema": "MQTT_SCHEMA",
}
MALFORMED = b'{"ts": "2025-06-01T10:00:00Z", "temperat'


def readings(count: int) -> list[Message]:
    """``count`` JSON readings over two devices (QoS 1 and 2) and one malformed payload."""
    messages = []
    for seq in range(count):
        device = f"sensor-{seq % 2}"
        body = {
            "device": device,
            "ts": f"2025-06-01T10:00:{seq:02d}Z",
            "temperature": 20.0 + seq / 10,
            "humidity": 40.5,
            "seq": seq,
        }
        messages.append(
            Message(f"plant/north/{device}/telemetry", json.dumps(body).encode(), qos=1 + seq % 2)
        )
    messages.append(Message("plant/north/sensor-0/telemetry", MALFORMED, qos=1))
    return messages


def queue_for(broker: MosquittoBroker, client_id: str, messages: list[Message]) -> None:
    """Create the notebook's persistent session, then publish: the broker queues for it."""
    client = MqttClient(
        broker.url, SessionConfig(client_id, clean_session=False), [(TOPIC_FILTER, 2)]
    )
    assert not client.connect().session_present
    client.disconnect()
    publish(broker, messages)


def params_for(broker: MosquittoBroker, tmp_path: Path, client_id: str) -> dict[str, str]:
    return {
        "broker": broker.url,
        "topic": TOPIC_FILTER,
        "qos": "2",
        "table": str(tmp_path / "table"),
        "checkpoint": str(tmp_path / "checkpoint"),
        "wal_path": "",
        "client_id": client_id,
        "schema": SCHEMA,
    }


def assert_landed(rows: list[Row], messages: list[Message]) -> None:
    """One row per message: typed columns for JSON readings, the text for the malformed one."""
    assert len(rows) == len(messages), [r.asDict() for r in rows]
    good = sorted((r for r in rows if r["malformed_payload"] is None), key=lambda r: r["seq"])
    bad = [r for r in rows if r["malformed_payload"] is not None]
    assert [r["seq"] for r in good] == list(range(len(messages) - 1))
    for row in good:
        assert row["topic"] == f"plant/north/sensor-{row['seq'] % 2}/telemetry"
        assert row["temperature"] == pytest.approx(20.0 + row["seq"] / 10)
        assert row["humidity"] == pytest.approx(40.5)
        assert row["ts"] is not None and row["ts"].second == row["seq"]
        assert row["qos"] == 1 + row["seq"] % 2
    assert [(r["malformed_payload"], r["seq"], r["temperature"]) for r in bad] == [
        (MALFORMED.decode(), None, None)
    ]
    assert sorted(r["offset"] for r in rows) == list(range(len(messages)))


def assert_charted(namespace: dict[str, Any]) -> Figure:
    """The last cell's frame of the source's figures and its chart: backlog and rate."""
    progress = namespace["progress"]
    assert not progress.empty and set(progress["receiver"]) == {0}
    assert progress["walHighWaterMark"].max() > 0
    fig = namespace["fig"]
    assert isinstance(fig, Figure)
    backlog, rate = fig.axes
    assert backlog.get_ylabel() == "backlog (messages)" and backlog.get_lines()
    assert rate.get_lines()
    return fig


def test_notebook_runs_with_environment_defaults(
    spark: SparkSession,
    broker_factory: BrokerFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker = broker_factory()
    client_id = unique_id("nb-")
    messages = readings(30)
    queue_for(broker, client_id, messages)
    params = params_for(broker, tmp_path, client_id)
    for name, value in params.items():
        monkeypatch.setenv(ENV_NAMES[name], value)
    chart = tmp_path / "charts" / "progress.png"
    monkeypatch.setenv("MQTT_PLOT_PATH", str(chart))

    namespace = runpy.run_path(str(NOTEBOOK), run_name="__main__")

    assert namespace["spark"] is spark, "the notebook must reuse the active session"
    assert not namespace["query"].isActive
    # Outside Databricks the WAL goes next to a local checkpoint.
    assert namespace["wal_path"] == str(tmp_path / "checkpoint" / "mqtt-wal")
    assert (tmp_path / "checkpoint" / "mqtt-wal").is_dir()
    rows = spark.read.format("delta").load(params["table"]).collect()
    assert_landed(rows, messages)
    out = capsys.readouterr().out
    assert f"{params['table']}: {len(messages)} rows" in out
    assert "malformed_payload" in out  # the .show() of the table
    assert_charted(namespace)
    assert chart.read_bytes().startswith(b"\x89PNG")
    assert f"chart of the source's figures: {chart}" in out


class FakeWidgets:
    """``dbutils.widgets`` for text widgets: records definitions, answers with set values."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values
        self.defined: dict[str, str] = {}

    def text(self, name: str, default: str, label: str | None = None) -> None:
        self.defined[name] = default

    def get(self, name: str) -> str:
        assert name in self.defined, f"widget {name!r} read before it was defined"
        return self.values.get(name, self.defined[name])


class FakeDbutils:
    def __init__(self, values: dict[str, str]) -> None:
        self.widgets = FakeWidgets(values)


def test_notebook_reads_widgets_and_displays_on_databricks(
    spark: SparkSession,
    broker_factory: BrokerFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broker = broker_factory()
    client_id = unique_id("nb-")
    messages = readings(12)
    queue_for(broker, client_id, messages)
    for env_name in [*ENV_NAMES.values(), "MQTT_PLOT_PATH"]:
        monkeypatch.delenv(env_name, raising=False)
    monkeypatch.chdir(tmp_path)  # where the chart's default path would be
    # Widgets win over the defaults; an explicit WAL path is used as given.
    values = params_for(broker, tmp_path, client_id)
    values["wal_path"] = str(tmp_path / "driver-local" / "wal")
    dbutils = FakeDbutils(values)
    displayed: list[DataFrame | Figure] = []
    init: dict[str, Any] = {"dbutils": dbutils, "display": displayed.append}

    namespace = runpy.run_path(str(NOTEBOOK), init_globals=init, run_name="__main__")

    assert set(dbutils.widgets.defined) == set(ENV_NAMES)
    assert dbutils.widgets.defined["broker"] == "tcp://localhost:1883"  # the default shown
    assert namespace["spark"] is spark
    assert (tmp_path / "driver-local" / "wal").is_dir()
    assert not (tmp_path / "checkpoint" / "mqtt-wal").exists()
    assert len(displayed) == 2
    assert_landed(cast(DataFrame, displayed[0]).collect(), messages)
    assert displayed[1] is assert_charted(namespace)  # shown, not saved
    assert not (tmp_path / "data").exists()
