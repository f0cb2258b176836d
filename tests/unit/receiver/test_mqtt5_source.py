"""MQTT 5 in the source without a broker: the options and their checks, the schema, the
session the receiver builds, and a message's properties from the receiver through the WAL
(and the inline blob) to the ``properties`` column."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from connector.mqtt.config import DEFAULT_TOPIC_ALIAS_MAXIMUM
from connector.mqtt.driver import Read
from connector.mqtt.message_properties import FIELDS, message_properties
from connector.mqtt.packets import ProtocolLevel, Publish
from connector.mqtt.properties import Properties
from connector.options.source import InvalidOptionError, SourceOptions
from connector.options.table import OPTIONS, requiring
from connector.receiver.receiver import Receiver, _records_with_properties
from connector.receiver.wal_properties import decode_from_wal, encode_for_wal
from connector.spark.schema import (
    ARROW_SCHEMA,
    ARROW_SCHEMA_MQTT5,
    SCHEMA_DDL,
    SCHEMA_DDL_MQTT5,
    schema_ddl,
    to_arrow,
)
from connector.wal import NewRecord, WalColumns, WalReader, WalWriter, decode_blob

BASE = {"brokerUrl": "tcp://broker.example:1883", "topic": "a/#"}
V5 = {**BASE, "mqttVersion": "5"}
FULL = Properties(
    payload_format_indicator=1,
    message_expiry_interval=3600,
    content_type="application/json; charset=utf-8",
    response_topic="replies/42",
    correlation_data=b"\x00\xffcorr",
    user_properties=[("site", "a"), ("site", "b"), ("ü", "温度")],
    subscription_identifiers=[7, 300],
    topic_alias=4,
)
FULL_VIEW = {
    "payloadFormatIndicator": 1,
    "messageExpiryInterval": 3600,
    "contentType": "application/json; charset=utf-8",
    "responseTopic": "replies/42",
    "correlationData": b"\x00\xffcorr",
    "userProperties": [("site", "a"), ("site", "b"), ("ü", "温度")],
    "subscriptionIdentifiers": [7, 300],
}
EMPTY_VIEW = dict.fromkeys(FIELDS[:5]) | {"userProperties": [], "subscriptionIdentifiers": []}


# ------------------------------------------------------------------------------ options


def test_mqtt_version_5_and_the_defaults_of_its_options() -> None:
    for text in ("5", "5.0", " 5 "):
        parsed = SourceOptions.parse({**BASE, "mqttVersion": text})
        assert parsed.mqtt_version == ProtocolLevel.MQTT_5 and parsed.mqtt5
        assert parsed.receive_maximum == 65535 == int(OPTIONS["receiveMaximum"].default or 0)
        assert parsed.topic_alias_maximum == DEFAULT_TOPIC_ALIAS_MAXIMUM
        assert parsed.session_expiry_interval is None, "SessionConfig.expiry decides"
    parsed = SourceOptions.parse(
        {**V5, "receiveMaximum": "20", "sessionExpiryInterval": "90", "topicAliasMaximum": "8"}
    )
    assert (parsed.receive_maximum, parsed.session_expiry_interval) == (20, 90)
    assert parsed.topic_alias_maximum == 8
    assert parsed.redacted()["receiveMaximum"] == "20"
    clean = SourceOptions.parse({**V5, "cleanSession": "true", "sessionExpiryInterval": "0"})
    assert clean.session_expiry_interval == 0
    with pytest.raises(InvalidOptionError, match="'sessionExpiryInterval' 0 with 'cleanSession'"):
        SourceOptions.parse({**V5, "cleanSession": "false", "sessionExpiryInterval": "0"})
    plain = SourceOptions.parse(BASE)
    assert not plain.mqtt5
    assert (plain.receive_maximum, plain.session_expiry_interval, plain.topic_alias_maximum) == (
        None,
        None,
        None,
    )
    assert "receiveMaximum" not in plain.redacted()


@pytest.mark.parametrize(
    ("option", "value", "accepted"),
    [
        ("receiveMaximum", "0", "1..65535"),
        ("receiveMaximum", "65536", "1..65535"),
        ("receiveMaximum", "-1", "1..65535"),
        ("receiveMaximum", "many", "an integer"),
        ("receiveMaximum", "", "an integer"),
        ("sessionExpiryInterval", "-1", "0..4294967295"),
        ("sessionExpiryInterval", "4294967296", "0..4294967295"),
        ("sessionExpiryInterval", "1.5", "an integer"),
        ("topicAliasMaximum", "-1", "0..65535"),
        ("topicAliasMaximum", "65536", "0..65535"),
        ("topicAliasMaximum", "x", "an integer"),
    ],
)
def test_each_bad_value_is_refused_naming_the_option_and_its_range(
    option: str, value: str, accepted: str
) -> None:
    for version in ("5", "3.1.1"):  # the range is checked first, whatever the version
        with pytest.raises(InvalidOptionError, match=rf"'{option}' must be {re.escape(accepted)}"):
            SourceOptions.parse({**BASE, "mqttVersion": version, option: value})


@pytest.mark.parametrize("version", ["3.1", "3.1.1"])
@pytest.mark.parametrize("option", requiring("mqtt5"))
def test_mqtt5_options_are_refused_below_level_5(option: str, version: str) -> None:
    value = "10"
    with pytest.raises(InvalidOptionError) as raised:
        SourceOptions.parse({**BASE, "mqttVersion": version, option: value})
    message = str(raised.value)
    assert f"option {option!r}" in message and "'mqttVersion' 5" in message, message
    assert f"(got {version})" in message


def test_unknown_versions_are_refused_naming_the_choices() -> None:
    for text in ("6", "5.1", "3.2", "mqtt5"):
        with pytest.raises(InvalidOptionError, match=r"'mqttVersion' must be 3\.1, 3\.1\.1 or 5"):
            SourceOptions.parse({**BASE, "mqttVersion": text})


def test_shared_subscriptions_are_allowed_at_level_5() -> None:
    parsed = SourceOptions.parse({**V5, "receivers": "2"})
    assert (parsed.receivers, parsed.shard_by) == (2, "share")


# ------------------------------------------------------------------------------ schema


def test_the_schema_of_3_1_1_is_unchanged_and_5_adds_properties() -> None:
    assert schema_ddl(False) == SCHEMA_DDL
    assert (
        schema_ddl(True)
        == SCHEMA_DDL_MQTT5
        == (
            SCHEMA_DDL + ", properties STRUCT<payloadFormatIndicator: INT, messageExpiryInterval: "
            "BIGINT, contentType: STRING, responseTopic: STRING, correlationData: BINARY, "
            "userProperties: ARRAY<STRUCT<key: STRING, value: STRING>>, subscriptionIdentifiers: "
            "ARRAY<INT>>"
        )
    )
    assert ARROW_SCHEMA_MQTT5.names == [*ARROW_SCHEMA.names, "properties"]
    assert ARROW_SCHEMA_MQTT5.field("properties").nullable
    struct = ARROW_SCHEMA_MQTT5.field("properties").type
    assert [struct.field(i).name for i in range(struct.num_fields)] == list(FIELDS)
    records = [NewRecord("t", b"x", 0, False, False, None, 1)]
    batch = to_arrow(WalColumns.from_records(0, records))
    assert batch.schema == ARROW_SCHEMA, "3.1.1 batches have no properties column"


# ------------------------------------------------------------------------------ properties


def test_properties_are_stored_without_length_and_topic_alias_and_decode_back() -> None:
    stored = encode_for_wal(FULL)
    assert stored[0] == 0x01, "the first property, no Property Length in front"
    assert b"\x23" not in stored[:1] and decode_from_wal(stored) is not None
    decoded = decode_from_wal(stored)
    assert decoded is not None and decoded.topic_alias is None
    assert message_properties(decoded) == FULL_VIEW
    assert FULL.topic_alias == 4, "the received properties are left as they were"
    assert encode_for_wal(None) == b"" and decode_from_wal(b"") is None
    assert encode_for_wal(Properties(topic_alias=9)) == b"", "an alias alone stores nothing"
    with pytest.raises(ValueError, match=r"do not decode.*Session Expiry Interval"):
        decode_from_wal(b"\x11\x00\x00\x00\x01")  # not a PUBLISH property
    with pytest.raises(ValueError, match="do not decode"):
        decode_from_wal(b"\x03\x00\x09json")  # cut short


def test_one_shared_properties_object_is_encoded_once_per_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[Properties] = []

    def counting(props: Properties | None) -> bytes:
        calls.append(props)  # type: ignore[arg-type]
        return encode_for_wal(props)

    monkeypatch.setattr("connector.receiver.receiver.encode_for_wal", counting)
    shared = Properties(content_type="text/plain")
    messages = [
        Publish("a", b"1", 1, False, False, 1, shared),
        Publish("a", b"2", 0, False, False, None, None),
        Publish("b", b"3", 2, True, True, 2, shared),
    ]
    records = _records_with_properties(messages, 42)
    assert calls == [shared]
    assert [r[7] for r in records] == [encode_for_wal(shared), b"", encode_for_wal(shared)]  # type: ignore[misc]
    assert records[2][:7] == ("b", b"3", 2, True, True, 2, 42)


class _Acknowledged:
    """Stands in for the MQTT client: records what the receiver acknowledges."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Publish], list[int]]] = []

    def acknowledge(self, messages: list[Publish], released: list[int] | None = None) -> None:
        self.calls.append((list(messages), list(released or [])))


def _receiver(tmp_path: Path, **extra: str) -> Receiver:
    options = SourceOptions.parse({**BASE, "walPath": str(tmp_path / "wal"), **extra})
    return Receiver(options)


def test_the_receiver_session_carries_the_mqtt5_options(tmp_path: Path) -> None:
    receiver = _receiver(tmp_path, mqttVersion="5", receiveMaximum="100", topicAliasMaximum="10")
    try:
        config = receiver.client.session.config
        assert config.level == ProtocolLevel.MQTT_5
        assert (config.receive_maximum, config.topic_alias_maximum) == (100, 10)
        assert config.session_expiry_interval is None
        assert config.expiry == 4294967295, "a persistent session outlives its connection"
    finally:
        receiver.wal.close()
    receiver = _receiver(
        tmp_path, mqttVersion="5", cleanSession="true", sessionExpiryInterval="600"
    )
    try:
        assert receiver.client.session.config.expiry == 600
    finally:
        receiver.wal.close()
    receiver = _receiver(tmp_path)
    try:
        config = receiver.client.session.config
        assert config.level == ProtocolLevel.MQTT_3_1_1
        assert config.receive_maximum is None and config.topic_alias_maximum is None
    finally:
        receiver.wal.close()


def _rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    rows = batch.to_pylist()
    for row in rows:
        props = row["properties"]
        props["userProperties"] = [(p["key"], p["value"]) for p in props["userProperties"]]
    return rows


def test_properties_go_from_the_receiver_through_the_wal_to_the_properties_column(
    tmp_path: Path,
) -> None:
    receiver = _receiver(tmp_path, mqttVersion="5")
    client = _Acknowledged()
    receiver.client = client  # type: ignore[assignment]
    messages = [
        Publish("m/full", b'{"a": 1}', 1, False, False, 11, FULL),
        Publish("m/none", b"plain", 0, False, False, None, None),
        Publish("m/ct", b"x", 2, False, False, 12, Properties(content_type="text/plain")),
        Publish("m/full", b'{"a": 2}', 1, False, True, 13, FULL),
    ]
    try:
        receiver._persist_then_ack(Read(list(messages), []))
        receiver._persist_then_ack(Read([Publish("m/none", b"later", 0)], []))
        assert [m.packet_id for m in client.calls[0][0]] == [11, None, 12, 13]
        path = receiver.wal.path
    finally:
        receiver.wal.close()
    reader = WalReader(str(path))
    columns = reader.read(0, 5)
    for batch in (
        to_arrow(columns, mqtt5=True),
        to_arrow(decode_blob(reader.encode_range(0, 5)), mqtt5=True),
    ):
        assert batch.schema == ARROW_SCHEMA_MQTT5
        rows = _rows(batch)
        assert [r["properties"] for r in rows] == [
            FULL_VIEW,
            EMPTY_VIEW,
            EMPTY_VIEW | {"contentType": "text/plain"},
            FULL_VIEW,
            EMPTY_VIEW,
        ]
        assert [r["payload"] for r in rows] == [m.payload for m in messages] + [b"later"]
    only_plain = _rows(to_arrow(reader.read(4, 5), mqtt5=True))
    assert only_plain[0]["properties"] == EMPTY_VIEW, "a block without properties (kind 5)"


def test_a_3_1_1_receiver_stores_no_properties(tmp_path: Path) -> None:
    receiver = _receiver(tmp_path)
    receiver.client = _Acknowledged()  # type: ignore[assignment]
    try:
        receiver._persist_then_ack(Read([Publish("t", b"p", 1, False, False, 3)], []))
        path = receiver.wal.path
    finally:
        receiver.wal.close()
    assert (Path(str(path)) / "wal.json").read_text().count('"version": 2') == 1
    assert WalReader(str(path)).read(0, 1).properties == [b""]


def test_stored_bytes_that_do_not_decode_name_the_offset(tmp_path: Path) -> None:
    with WalWriter.open(tmp_path / "wal") as writer:
        writer.append(
            [
                NewRecord("t", b"a", 0, False, False, None, 1, encode_for_wal(FULL)),
                NewRecord("t", b"b", 0, False, False, None, 2, b"\x7f"),
            ]
        )
    columns = WalReader(tmp_path / "wal").read(0, 2)
    with pytest.raises(ValueError, match="WAL offset 1: stored MQTT 5 properties do not decode"):
        to_arrow(columns, mqtt5=True)
