"""The ingest job with MQTT 5: the Content Type rule of ``--payload-format json`` and the
columns of both tables (``properties``, ``--property-columns``) in the run's Spark session,
then the job end to end with a real broker: a ``text/plain`` message goes to the dead-letter
table with a reason naming its content type."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from connector.spark.schema import SCHEMA_DDL_MQTT5
from devtools.delta_log import delta_row_count
from streaming_jobs import payloads
from streaming_jobs.ingest import parse_schema
from streaming_jobs.payloads import (
    REASON,
    SchemaError,
    dead_letter_rows,
    decode,
    make_plan,
    table_rows,
)
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import LAND_TIMEOUT, TRIGGER, Job
from tests.support.publishing import Message, publish
from tests.support.waiting import wait_subscribed

SCHEMA = "seq BIGINT NOT NULL, temp DOUBLE"
RECEIVED = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
GOOD = b'{"seq": 1, "temp": 2.5}'

# content type -> reason (None: parsed); the payload is valid JSON every time.
CONTENT_TYPES: dict[str | None, str | None] = {
    None: None,
    "application/json": None,
    "Application/JSON; charset=utf-8": None,
    " text/json ": None,
    "application/ld+json": None,
    "application/vnd.example.reading+json;v=2": None,
    "text/plain": "content type 'text/plain' is not JSON",
    "application/xml": "content type 'application/xml' is not JSON",
    "application/json-seq": "content type 'application/json-seq' is not JSON",
    "json": "content type 'json' is not JSON",
    "application/+json": "content type 'application/+json' is not JSON",
    "": "content type '' is not JSON",
}


def rows_with_content_types(
    spark: SparkSession, cases: Sequence[tuple[bytes, str | None]]
) -> DataFrame:
    """Rows shaped like an MQTT 5 source's, one per (payload, content type)."""
    rows: list[tuple[object, ...]] = [
        (
            "plant/s1/d1/telemetry",
            payload,
            1,
            False,
            False,
            i + 1,
            RECEIVED,
            i,
            0,
            (None, None, content_type, None, None, [("k", str(i))], []),
        )
        for i, (payload, content_type) in enumerate(cases)
    ]
    return spark.createDataFrame(rows, SCHEMA_DDL_MQTT5)


@pytest.fixture(scope="module")
def schema(spark: SparkSession) -> StructType:
    return parse_schema(SCHEMA)


def test_a_json_payload_whose_content_type_is_not_json_is_a_dead_letter(
    spark: SparkSession, schema: StructType
) -> None:
    plan = make_plan("json", schema, dead_letters=True, mqtt5=True)
    cases = [(GOOD, content_type) for content_type in CONTENT_TYPES]
    cases.append((b"\xff not utf-8", "text/plain"))  # the content type is the reason given
    cases.append((b"\xff not utf-8", None))
    decoded = decode(rows_with_content_types(spark, cases), plan)
    reasons: dict[int, str | None] = dict(decoded.select("offset", REASON).collect())
    expected = [*CONTENT_TYPES.values(), "content type 'text/plain' is not JSON", payloads.NOT_UTF8]
    assert [reasons[i] for i in range(len(cases))] == expected
    good = table_rows(decoded, plan).collect()
    assert {r.offset for r in good} == {i for i, why in enumerate(expected) if why is None}
    assert all((r.seq, r.temp) == (1, 2.5) for r in good)
    dead = dead_letter_rows(decoded, plan)
    assert dead.columns == [*payloads.MQTT_COLUMNS, "properties", "reason"]
    for row in dead.collect():
        assert row.reason == expected[row.offset]
        assert row.properties.contentType == cases[row.offset][1]


def test_mqtt5_tables_keep_properties_and_copy_the_property_columns(
    spark: SparkSession, schema: StructType
) -> None:
    plan = make_plan(
        "json",
        schema,
        (None, "site"),
        dead_letters=False,
        mqtt5=True,
        property_columns=("contentType", "userProperties"),
        partition_by=("contentType",),
    )
    frame = rows_with_content_types(spark, [(GOOD, "application/json"), (GOOD, "text/plain")])
    rows = table_rows(decode(frame, plan), plan)
    assert rows.columns == [
        "topic", "site", "seq", "temp", "payload", "qos", "retained", "duplicate", "messageId",
        "timestamp", "offset", "receiver", "properties", "contentType", "userProperties",
        "_parse_error",
    ]  # fmt: skip
    got = {r.offset: r for r in rows.collect()}
    assert (got[0].contentType, got[0].seq, got[0]._parse_error) == ("application/json", 1, None)
    assert got[0].userProperties == got[0].properties.userProperties
    assert [(p.key, p.value) for p in got[1].userProperties] == [("k", "1")]
    assert got[1]._parse_error == "content type 'text/plain' is not JSON" and got[1].seq is None
    plain = make_plan("binary", None, mqtt5=True)
    assert "properties" in plain.table_columns() and "contentType" not in plain.table_columns()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"property_columns": ("contentType",)}, "--property-columns needs --mqtt-version 5"),
        (
            {"mqtt5": True, "property_columns": ("temp",), "schema": "temp DOUBLE"},
            "--property-columns 'temp': the table already has a column 'temp'",
        ),
        (
            {"mqtt5": True, "property_columns": ("contentType",),
             "topic_columns": ("contentType",)},
            "--property-columns 'contentType': the table already has a column",
        ),
        (
            {"mqtt5": True, "property_columns": ("userProperties",),
             "partition_by": ("userProperties",)},
            "--partition-by 'userProperties': Delta cannot partition by a struct or array",
        ),
        ({"mqtt5": True, "partition_by": ("properties",)}, "cannot partition by a struct"),
        ({"mqtt5": True, "topic_columns": ("properties",)}, "already has a column 'properties'"),
    ],
)  # fmt: skip
def test_mqtt5_column_names_must_fit_together(
    spark: SparkSession, kwargs: dict, message: str
) -> None:
    ddl = kwargs.pop("schema", None)
    with pytest.raises(SchemaError, match=message):
        make_plan("json" if ddl else "binary", parse_schema(ddl) if ddl else None, **kwargs)


def test_a_schema_field_named_properties_renames_the_mqtt_column(spark: SparkSession) -> None:
    plan = make_plan("json", parse_schema("properties STRING, seq BIGINT"), mqtt5=True)
    assert plan.renamed == {"properties": "mqtt_properties"}
    assert "mqtt_properties" in plan.table_columns()


# ---------------------------------------------------------------------------- end to end


def _properties(content_type: str | None, device: str) -> PahoProperties:
    props = PahoProperties(PacketTypes.PUBLISH)
    if content_type is not None:
        props.ContentType = content_type
    props.UserProperty = [("device", device), ("device", device + "-alias")]
    return props


def test_the_job_lands_mqtt5_properties_and_dead_letters_a_text_plain_message(
    broker_factory: BrokerFactory, spark: SparkSession, tmp_path: Path
) -> None:
    broker = broker_factory()
    table, dead, checkpoint = tmp_path / "table", tmp_path / "dead", tmp_path / "checkpoint"
    client_id = f"job5-{uuid.uuid4().hex[:10]}"
    job = Job.start(
        [
            "--broker", broker.url, "--topic", "plant/#", "--client-id", client_id,
            "--mqtt-version", "5", "--property-columns", "contentType,userProperties",
            "--payload-format", "json", "--schema", SCHEMA, "--dead-letter-table", str(dead),
            "--table", str(table), "--checkpoint", str(checkpoint), "--trigger", TRIGGER,
        ],
        tmp_path,
        "job5",
    )  # fmt: skip
    messages = [
        Message(
            "plant/a", b'{"seq": 0, "temp": 1.5}', properties=_properties("application/json", "d0")
        ),
        Message("plant/b", b'{"seq": 1, "temp": 2.5}'),  # no properties: parsed
        Message("plant/c", b'{"seq": 2, "temp": 3.5}', properties=_properties("text/plain", "d2")),
        Message("plant/d", b'{"seq": 3, "temp": 4.5}', properties=_properties(None, "d3")),
        Message("plant/e", b"not json", properties=_properties(None, "d4")),
    ]
    try:
        wait_subscribed(broker, client_id, "plant/#", 1, job)
        publish(broker, messages, protocol=mqtt.MQTTv5)
        job.wait_for(
            "5 rows in the table and the dead-letter table",
            lambda: delta_row_count(table) + delta_row_count(dead) >= len(messages),
            LAND_TIMEOUT,
        )
        assert job.terminate() == 0, job.logs()
    finally:
        job.cleanup()

    rows = spark.read.format("delta").load(str(table))
    assert rows.columns == [
        "topic", "seq", "temp", "qos", "retained", "duplicate", "messageId", "timestamp",
        "offset", "receiver", "properties", "contentType", "userProperties",
    ]  # fmt: skip
    good = {r.seq: r for r in rows.collect()}
    assert sorted(good) == [0, 1, 3]
    assert good[0].contentType == "application/json" == good[0].properties.contentType
    assert [(p.key, p.value) for p in good[0].userProperties] == [
        ("device", "d0"),
        ("device", "d0-alias"),
    ]
    assert good[1].contentType is None and good[1].userProperties == []
    assert good[3].contentType is None and len(good[3].userProperties) == 2
    dead_rows = {
        r.topic: r
        for r in spark.read.format("delta")
        .load(str(dead))
        .withColumn("ct", F.col("properties.contentType"))
        .collect()
    }
    assert set(dead_rows) == {"plant/c", "plant/e"}
    assert dead_rows["plant/c"].reason == "content type 'text/plain' is not JSON"
    assert dead_rows["plant/c"].ct == "text/plain"
    assert bytes(dead_rows["plant/c"].payload) == messages[2].payload
    assert dead_rows["plant/e"].reason == payloads.NOT_JSON
    offsets = sorted([r.offset for r in good.values()] + [r.offset for r in dead_rows.values()])
    assert offsets == list(range(len(messages))), "every message exactly once, in one table"
    assert (
        "dead-letter rows" in job.stdout
        and json.loads((checkpoint / "mqtt-wal" / "wal.json").read_text())["version"] == 3
    )
