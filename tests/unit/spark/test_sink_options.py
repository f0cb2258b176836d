"""The MQTT writer's options, its column checks and each row's message, without Spark or a
broker: every bad option or column fails on the driver, naming it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from connector.mqtt.message_properties import publish_properties
from connector.mqtt.packets import ProtocolLevel
from connector.options.source import InvalidOptionError, SourceOptions
from connector.options.table import OPTIONS, markdown
from connector.spark.writer.options import CLIENT_ID_PREFIX, SinkOptions
from connector.spark.writer.rows import RowError, SinkColumns, batch_messages, check_schema
from connector.spark.writer.task import TaskIdentity

URL = "tcp://127.0.0.1:1883"


def sink(**extra: str) -> SinkOptions:
    return SinkOptions.parse({"brokerUrl": URL, **extra})


def schema(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])  # type: ignore[arg-type]


def test_defaults_come_from_the_option_table() -> None:
    options = sink()
    assert options.qos == int(OPTIONS["qos"].default or "")
    assert options.mqtt_version == ProtocolLevel.MQTT_3_1_1
    assert options.topic is None
    assert options.client_id_prefix == CLIENT_ID_PREFIX
    assert options.publish_timeout == float(OPTIONS["publishTimeout"].default or "")
    assert options.idempotency_key is True
    assert options.ignore_extra_columns is False


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"walPath": "/tmp/x"}, "'walPath' is an option of the reader"),
        ({"topics": "a,b"}, "'topics' is an option of the reader"),
        ({"cleanSession": "true"}, "'cleanSession' is an option of the reader"),
        ({"topic": "a/+"}, "needs a topic name, not a filter"),
        ({"topic": "a/#"}, "needs a topic name, not a filter"),
        ({"qos": "3"}, "'qos' must be"),
        ({"mqttVersion": "6"}, "'mqttVersion' must be"),
        ({"publishTimeout": "0"}, "'publishTimeout' must be >="),
        ({"password": "p", "username": "u"}, "would be sent unencrypted"),
        ({"tls.caFile": "/nowhere"}, "tls.* options need"),
        ({"idempotencyKey": "maybe"}, "'idempotencyKey' must be true or false"),
    ],
)
def test_bad_writer_options_are_refused_by_name(extra: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        sink(**extra)


def test_the_broker_url_is_required() -> None:
    with pytest.raises(InvalidOptionError, match="'brokerUrl' is required"):
        SinkOptions.parse({"topic": "a"})


@pytest.mark.parametrize("name", ["publishTimeout", "ignoreExtraColumns", "idempotencyKey"])
def test_the_reader_refuses_the_writers_options(name: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"'{name}' is an option of the writer"):
        SourceOptions.parse({"brokerUrl": URL, "topic": "a/#", name: "1"})


def test_option_names_are_case_insensitive_and_the_password_is_hidden() -> None:
    options = SinkOptions.parse(
        {"brokerurl": URL, "TOPIC": "x/y", "username": "u", "password": "hunter2",
         "allowpasswordoverplaintcp": "true"}
    )  # fmt: skip
    assert options.topic == "x/y"
    assert "hunter2" not in repr(options)
    assert options.session_config("c").password == b"hunter2"
    assert options.session_config("c").clean_session is True


def test_the_docs_table_lists_each_side_s_options() -> None:
    reader, writer = markdown(), markdown(writer=True)
    assert "`publishTimeout`" in writer and "`publishTimeout`" not in reader
    assert "`walPath`" in reader and "`walPath`" not in writer
    assert "`brokerUrl`" in reader and "`brokerUrl`" in writer
    assert "prefix of the client ids" in writer


# ------------------------------------------------------------------------ columns

PROPS = StructType(
    [
        StructField("contentType", StringType()),
        StructField("userProperties", MapType(StringType(), StringType())),
        StructField("messageExpiryInterval", IntegerType()),
    ]
)


def test_the_writer_s_columns() -> None:
    columns = check_schema(
        schema(("topic", StringType()), ("payload", BinaryType()), ("qos", LongType()),
               ("retain", BooleanType()), ("properties", PROPS)),
        sink(mqttVersion="5"),
    )  # fmt: skip
    assert columns == SinkColumns(topic=True, qos=True, retain=True, properties=True)
    assert check_schema(schema(("payload", StringType())), sink(topic="a/b")) == SinkColumns(
        topic=False, qos=False, retain=False, properties=False
    )


@pytest.mark.parametrize(
    ("fields", "options", "message"),
    [
        ((("topic", StringType()),), {}, "needs a 'payload' column"),
        ((("payload", BinaryType()),), {}, "needs a 'topic' column .* or the option 'topic'"),
        ((("topic", IntegerType()), ("payload", BinaryType())), {}, "'topic' must be string"),
        ((("topic", StringType()), ("payload", IntegerType())), {}, "'payload' must be binary"),
        (
            (("topic", StringType()), ("payload", BinaryType()), ("qos", StringType())),
            {},
            "'qos' must be bigint or int",
        ),
        (
            (("topic", StringType()), ("payload", BinaryType()), ("value", StringType())),
            {},
            "columns 'value' are not the MQTT writer's",
        ),
        (
            (("topic", StringType()), ("payload", BinaryType()), ("properties", PROPS)),
            {},
            "needs option 'mqttVersion' 5",
        ),
        (
            (
                ("topic", StringType()),
                ("payload", BinaryType()),
                ("properties", schema(("colour", StringType()))),
            ),
            {"mqttVersion": "5"},
            "has a field 'colour'",
        ),
        (
            (
                ("topic", StringType()),
                ("payload", BinaryType()),
                ("properties", schema(("userProperties", ArrayType(StringType())))),
            ),
            {"mqttVersion": "5"},
            "'properties.userProperties' must be",
        ),
    ],
)
def test_bad_columns_are_refused_by_name(
    fields: tuple[tuple[str, object], ...], options: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        check_schema(schema(*fields), sink(**options))


def test_extra_columns_pass_when_told_to() -> None:
    fields = schema(("topic", StringType()), ("payload", BinaryType()), ("id", LongType()))
    assert check_schema(fields, sink(ignoreExtraColumns="true")).topic


# ------------------------------------------------------------------------ rows


def test_row_messages_take_the_defaults_for_nulls() -> None:
    batch = pa.record_batch(
        {
            "topic": ["a/1", "a/2", "a/3"],
            "payload": ["text", None, "é"],
            "qos": pa.array([2, None, 0], pa.int64()),
            "retain": [True, None, False],
        }
    )
    messages = list(batch_messages(batch, sink(qos="1"), 10))
    assert [(m.topic, m.payload, m.qos, m.retain) for m in messages] == [
        ("a/1", b"text", 2, True),
        ("a/2", b"", 1, False),
        ("a/3", "é".encode(), 0, False),
    ]


def test_the_topic_option_is_every_row_s_topic() -> None:
    batch = pa.record_batch({"topic": ["a/1", None], "payload": [b"x", b"y"]})
    assert [m.topic for m in batch_messages(batch, sink(topic="fixed/t"), 0)] == ["fixed/t"] * 2


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"topic": ["a", None], "payload": [b"x", b"y"]}, "row 8: the topic is null"),
        ({"topic": ["a", "b"], "payload": [b"x", b"y"], "qos": [1, 3]}, "row 8: qos must be"),
    ],
)
def test_bad_rows_are_named(columns: dict[str, list[object]], message: str) -> None:
    with pytest.raises(RowError, match=message):
        list(batch_messages(pa.record_batch(columns), sink(), 7))


def test_publish_properties_take_the_reader_s_shape_and_the_key() -> None:
    props = publish_properties(
        {
            "contentType": "application/json",
            "correlationData": "id-1",
            "userProperties": [{"key": "k", "value": "v"}, ("k2", "v2")],
            "subscriptionIdentifiers": [4],
        },
        (("spark-mqtt-key", "w:0:1:2"),),
    )
    assert props is not None
    assert props.content_type == "application/json"
    assert props.correlation_data == b"id-1"
    assert props.user_properties == [("k", "v"), ("k2", "v2"), ("spark-mqtt-key", "w:0:1:2")]
    assert props.subscription_identifiers == []
    assert publish_properties(None) is None
    assert publish_properties({"subscriptionIdentifiers": [1]}) is None


# ------------------------------------------------------------------------ task identity


def test_each_task_attempt_has_its_own_client_id_and_every_attempt_the_same_keys() -> None:
    first = TaskIdentity("q", 5, 3, 0, 100)
    retry = TaskIdentity("q", 5, 3, 1, 101)
    other = TaskIdentity("q", 5, 4, 0, 102)
    ids = {t.client_id(CLIENT_ID_PREFIX) for t in (first, retry, other)}
    assert len(ids) == 3
    assert all(len(i) == 23 and i.startswith(CLIENT_ID_PREFIX + "-") for i in ids)
    assert first.key(7) == retry.key(7) == "q:5:3:7"
    assert other.key(7) != first.key(7)


def test_a_misspelt_writer_option_is_refused_with_the_writer_s_names() -> None:
    with pytest.raises(InvalidOptionError) as refused:
        sink(maxInFlight_messages="10")
    message = str(refused.value)
    assert message.startswith("unknown option 'maxInFlight_messages' (did you mean 'maxInflight'")
    assert "the writer's options" in message
    assert sink(checkpointLocation="/c", path="/p", queryName="q").client_id_prefix
