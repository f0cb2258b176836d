"""``format("mqtt").option("mqttVersion", "5")`` into Delta: MQTT 5 messages published by
paho with and without properties, at QoS 0, 1 and 2, land exactly once with their properties
intact in the ``properties`` column (MQTT 5.0 section 3.3.2.3); the WAL holds them in data
blocks with properties and says format version 3.

A real Mosquitto (2.0, which speaks MQTT 5 and forwards PUBLISH properties to MQTT 5
subscribers), the run's Spark session and a real Delta table.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties as PahoProperties
from pyspark.sql import SparkSession

from connector.wal.records import FRAME_KIND, FRAME_SIZE, KIND_BLOCK, KIND_PROPERTIES_BLOCK
from connector.wal.segment import HEADER_SIZE
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.publishing import Message, publish
from tests.support.spark_streams import (
    COLUMNS,
    StreamDirs,
    assert_gap_free,
    read_table,
    start_stream,
    wait_for_rows,
)
from tests.support.waiting import wait_subscribed

TOPIC_FILTER = "m5/#"
EXPIRY = 3600
USER_PROPERTIES = [("site", "north"), ("site", "south"), ("ünï", "温度")]
CORRELATION = b"\x00\xffcorr-"


def full_properties(n: int) -> PahoProperties:
    """Every PUBLISH property a consumer sees that a publisher sets (not Subscription
    Identifier, which the broker adds, nor Topic Alias, which the session resolves)."""
    props = PahoProperties(PacketTypes.PUBLISH)
    props.PayloadFormatIndicator = 1
    props.MessageExpiryInterval = EXPIRY
    props.ContentType = "application/json; charset=utf-8"
    props.ResponseTopic = f"replies/{n}"
    props.CorrelationData = CORRELATION + struct.pack(">I", n)
    props.UserProperty = list(USER_PROPERTIES)
    return props


def block_kinds(wal: Path) -> set[int]:
    kinds = set()
    for segment in wal.glob("*.seg"):
        data = segment.read_bytes()
        pos = HEADER_SIZE
        while pos + FRAME_SIZE < len(data):
            length, _, kind = FRAME_KIND.unpack_from(data, pos)
            kinds.add(kind)
            pos += FRAME_SIZE + length
    return kinds & {KIND_BLOCK, KIND_PROPERTIES_BLOCK}


@pytest.mark.parametrize("partition_data", ["inline", "wal"])
def test_mqtt5_messages_land_exactly_once_with_their_properties(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs, partition_data: str
) -> None:
    broker = broker_factory()
    client_id = unique_id("m5-")
    query = start_stream(
        spark,
        broker.url,
        dirs,
        topic=TOPIC_FILTER,
        qos=2,
        clientId=client_id,
        mqttVersion="5",
        partitionData=partition_data,
    )
    try:
        wait_subscribed(broker, client_id, TOPIC_FILTER, 2)
        messages: list[Message] = []
        for n in range(90):
            qos = n % 3
            props = full_properties(n) if n % 2 == 0 else None
            payload = json.dumps({"n": n, "props": props is not None}).encode()
            messages.append(Message(f"m5/q{qos}/{n % 4}", payload, qos, properties=props))
        publish(broker, messages, protocol=mqtt.MQTTv5)
        wait_for_rows(spark, dirs.table, len(messages), [query])
    finally:
        query.stop()

    table = spark.read.format("delta").load(str(dirs.table))
    assert tuple(table.columns) == (*COLUMNS, "properties")
    struct_type = table.schema["properties"].dataType
    assert [f.name for f in struct_type.fields] == [  # type: ignore[attr-defined]
        "payloadFormatIndicator",
        "messageExpiryInterval",
        "contentType",
        "responseTopic",
        "correlationData",
        "userProperties",
        "subscriptionIdentifiers",
    ]
    rows = read_table(spark, dirs.table)
    assert_gap_free(rows)
    by_payload = {bytes(row["payload"]): row for row in rows}
    assert len(by_payload) == len(rows) == len(messages), "every message exactly once"
    for n, message in enumerate(messages):
        props = message.properties
        row = by_payload[message.payload]
        assert (row["topic"], row["qos"], row["duplicate"]) == (message.topic, message.qos, False)
        got = row["properties"].asDict(recursive=True)
        if props is None:
            assert got == {
                "payloadFormatIndicator": None,
                "messageExpiryInterval": None,
                "contentType": None,
                "responseTopic": None,
                "correlationData": None,
                "userProperties": [],
                "subscriptionIdentifiers": [],
            }, row
            continue
        expiry = got.pop("messageExpiryInterval")
        assert EXPIRY - 60 <= expiry <= EXPIRY, "the broker forwards the remaining lifetime"
        assert got == {
            "payloadFormatIndicator": 1,
            "contentType": "application/json; charset=utf-8",
            "responseTopic": f"replies/{n}",
            "correlationData": bytearray(CORRELATION + struct.pack(">I", n)),
            "userProperties": [{"key": k, "value": v} for k, v in USER_PROPERTIES],
            "subscriptionIdentifiers": [],
        }, row
    assert json.loads((dirs.wal / "wal.json").read_text())["version"] == 3
    assert KIND_PROPERTIES_BLOCK in block_kinds(dirs.wal)
    # Spark SQL reaches into the struct: the repeated key keeps both values, in order.
    sites = table.selectExpr(
        "filter(properties.userProperties, p -> p.key = 'site').value AS sites"
    ).where("properties.contentType IS NOT NULL")
    assert {tuple(r.sites) for r in sites.collect()} == {("north", "south")}


def test_a_3_1_1_query_keeps_its_schema_and_a_version_2_wal(
    spark: SparkSession, broker_factory: BrokerFactory, dirs: StreamDirs
) -> None:
    broker = broker_factory()
    client_id = unique_id("m3-")
    query = start_stream(spark, broker.url, dirs, topic=TOPIC_FILTER, qos=1, clientId=client_id)
    try:
        wait_subscribed(broker, client_id, TOPIC_FILTER, 1)
        # An MQTT 5 publisher's properties do not reach a 3.1.1 subscriber.
        messages = [Message("m5/x", b"%d" % n, properties=full_properties(n)) for n in range(5)]
        publish(broker, messages, protocol=mqtt.MQTTv5)
        wait_for_rows(spark, dirs.table, 5, [query])
    finally:
        query.stop()
    assert tuple(spark.read.format("delta").load(str(dirs.table)).columns) == COLUMNS
    assert json.loads((dirs.wal / "wal.json").read_text())["version"] == 2
    assert block_kinds(dirs.wal) == {KIND_BLOCK}
