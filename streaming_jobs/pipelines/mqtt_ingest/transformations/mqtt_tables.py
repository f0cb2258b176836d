"""MQTT -> Delta as a declarative pipeline: two streaming tables.

* ``mqtt_messages``: one row per message, as ``format("mqtt")`` reads it (the README's schema).
* ``mqtt_readings``: the JSON payloads of ``mqtt_messages`` parsed into columns with
  ``mqtt.schema``; a payload that does not parse keeps its text in ``malformed_payload``.

Each setting comes from the pipeline's Spark conf (the spec's ``configuration``), else from an
environment variable of the ``spark-pipelines`` process, else the default (:data:`SETTINGS`).
A ``run`` drains what the broker queued for the query's persistent session and stops: the
pipeline runs streaming flows with ``Trigger.AvailableNow``; the next run continues from the
checkpoint under the spec's ``storage``.

``format("mqtt")`` is found by name wherever the connector's wheel is installed (PySpark
discovers its ``pyspark_mqtt`` module), so this file does not register the source: with
PySpark 4.2.0 a source registered from the pipeline's client makes ``spark-pipelines run`` fail
after the run completed (docs/deployment.md, "Declarative pipelines").
"""

from __future__ import annotations

import os

from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

SETTINGS: dict[str, tuple[str, str, str | None]] = {
    # source option: (Spark conf key, environment variable, default; None: the source's own)
    "brokerUrl": ("mqtt.brokerUrl", "MQTT_BROKER_URL", "tcp://localhost:1883"),
    "topic": ("mqtt.topic", "MQTT_TOPIC", "plant/+/+/telemetry"),
    "qos": ("mqtt.qos", "MQTT_QOS", "1"),
    "clientId": ("mqtt.clientId", "MQTT_CLIENT_ID", None),
    "walPath": ("mqtt.walPath", "MQTT_WAL_PATH", None),
    "availableNowIdleTimeout": (
        "mqtt.availableNowIdleTimeout",
        "MQTT_AVAILABLE_NOW_IDLE_TIMEOUT",
        None,
    ),
}
SCHEMA = (
    "mqtt.schema",
    "MQTT_SCHEMA",
    "ts TIMESTAMP, temperature DOUBLE, humidity DOUBLE, seq BIGINT",
)
CORRUPT = "_corrupt_record"

spark = SparkSession.active()


def setting(conf_key: str, env_name: str, default: str | None) -> str | None:
    """The pipeline's Spark conf, else the environment variable, else ``default``."""
    value = spark.conf.get(conf_key, None) or os.environ.get(env_name) or default
    return value.strip() if value else None


def source_options() -> dict[str, str]:
    """The options of ``format("mqtt")`` that have a value."""
    values = {name: setting(*where) for name, where in SETTINGS.items()}
    return {name: value for name, value in values.items() if value is not None}


@dp.table(comment="MQTT messages, one row each, exactly once")
def mqtt_messages() -> DataFrame:
    """Every message of the subscription's topic filter."""
    return spark.readStream.format("mqtt").options(**source_options()).load()


@dp.table(comment="The JSON payloads of mqtt_messages, parsed")
def mqtt_readings() -> DataFrame:
    """One row per message of ``mqtt_messages`` with its payload's fields as columns."""
    schema = f"{setting(*SCHEMA)}, {CORRUPT} STRING"
    data = F.from_json(
        F.col("payload").cast("string"), schema, {"columnNameOfCorruptRecord": CORRUPT}
    )
    return (
        spark.readStream.table("mqtt_messages")
        .select(
            "topic", data.alias("data"), "qos", F.col("timestamp").alias("received_at"), "offset"
        )
        .select("topic", "data.*", "qos", "received_at", "offset")
        .withColumnRenamed(CORRUPT, "malformed_payload")
    )
