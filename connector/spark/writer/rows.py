"""What the MQTT writer takes from a DataFrame: its columns, checked on the driver, and each
row's message, read from the Arrow batches the tasks get.

Columns: ``topic`` (string; the ``topic`` option, when given, is the topic of every row, as
Kafka's sink does), ``payload`` (binary, or string sent as UTF-8; null is an empty payload),
optional ``qos`` (an integer 0 to 2; null: the ``qos`` option), ``retain`` (boolean; null:
false) and, with ``mqttVersion`` 5, ``properties``: a struct shaped as the reader's
(:data:`connector.mqtt.message_properties.FIELDS`), any subset of its fields. Any other column
is an error unless ``ignoreExtraColumns``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
from pyspark.sql.types import StructType

from connector.mqtt.message_properties import FIELDS
from connector.options.source import InvalidOptionError
from connector.spark.user_errors import UserError
from connector.spark.writer.options import SinkOptions

_INTEGERS = frozenset({"tinyint", "smallint", "int", "bigint"})
_COLUMN_TYPES: dict[str, frozenset[str]] = {
    "topic": frozenset({"string"}),
    "payload": frozenset({"binary", "string"}),
    "qos": _INTEGERS,
    "retain": frozenset({"boolean"}),
}
"""Each plain column and the Spark types (``simpleString``) it may have."""

_PAIRS = frozenset({"array<struct<key:string,value:string>>", "map<string,string>"})
_PROPERTY_TYPES: dict[str, frozenset[str]] = {
    "payloadFormatIndicator": _INTEGERS,
    "messageExpiryInterval": _INTEGERS,
    "contentType": frozenset({"string"}),
    "responseTopic": frozenset({"string"}),
    "correlationData": frozenset({"binary", "string"}),
    "userProperties": _PAIRS,
    "subscriptionIdentifiers": frozenset({"array<int>", "array<bigint>"}),
}
"""Each field of ``properties`` and the Spark types it may have (``subscriptionIdentifiers``
is taken, so the reader's rows pass through, and never sent: [MQTT-3.3.4-6])."""

PROPERTIES = "properties"


@dataclass(frozen=True, slots=True)
class SinkColumns:
    """Which of the writer's columns the data has."""

    topic: bool
    qos: bool
    retain: bool
    properties: bool


class OutMessage(NamedTuple):
    """One row's PUBLISH: ``properties`` is the consumer's view (None: none set)."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: dict[str, Any] | None


class RowError(UserError, ValueError):
    """A row that cannot be published (its position in the task's partition named)."""


def check_schema(schema: StructType, options: SinkOptions) -> SinkColumns:
    """The columns of ``schema`` the writer uses; InvalidOptionError naming what is wrong."""
    types = {f.name: f.dataType.simpleString() for f in schema.fields}
    for name, accepted in _COLUMN_TYPES.items():
        if name in types and types[name] not in accepted:
            raise InvalidOptionError(
                f"column {name!r} must be {' or '.join(sorted(accepted))}, got {types[name]}"
            )
    if "payload" not in types:
        raise InvalidOptionError("the MQTT writer needs a 'payload' column (binary or string)")
    if "topic" not in types and options.topic is None:
        raise InvalidOptionError(
            "the MQTT writer needs a 'topic' column (string) or the option 'topic'"
        )
    if PROPERTIES in types:
        _check_properties(schema[PROPERTIES].dataType, options)
    extra = [name for name in types if name not in _COLUMN_TYPES and name != PROPERTIES]
    if extra and not options.ignore_extra_columns:
        raise InvalidOptionError(
            f"columns {', '.join(map(repr, extra))} are not the MQTT writer's (topic, "
            "payload, qos, retain, and with mqttVersion 5 properties); select the columns "
            "to write or set option 'ignoreExtraColumns' to true"
        )
    return SinkColumns("topic" in types, "qos" in types, "retain" in types, PROPERTIES in types)


def _check_properties(data_type: Any, options: SinkOptions) -> None:
    if not options.mqtt5:
        raise InvalidOptionError(
            f"column 'properties' holds MQTT 5 properties: it needs option 'mqttVersion' 5 "
            f"(got {options.mqtt_version})"
        )
    if not isinstance(data_type, StructType):
        raise InvalidOptionError(
            f"column 'properties' must be a struct of {', '.join(FIELDS)}, got "
            f"{data_type.simpleString()}"
        )
    for f in data_type.fields:
        accepted = _PROPERTY_TYPES.get(f.name)
        if accepted is None:
            raise InvalidOptionError(
                f"column 'properties' has a field {f.name!r}; its fields are {', '.join(FIELDS)}"
            )
        if f.dataType.simpleString() not in accepted:
            raise InvalidOptionError(
                f"field 'properties.{f.name}' must be {' or '.join(sorted(accepted))}, got "
                f"{f.dataType.simpleString()}"
            )


def _values(batch: pa.RecordBatch, name: str, rows: int) -> list[Any]:
    index = batch.schema.get_field_index(name)
    return [None] * rows if index < 0 else batch.column(index).to_pylist()


def batch_messages(
    batch: pa.RecordBatch, options: SinkOptions, first_row: int
) -> Iterator[OutMessage]:
    """The messages of ``batch``, whose first row is row ``first_row`` of the partition;
    RowError for a row without a topic or with a QoS other than 0, 1 or 2."""
    rows = batch.num_rows
    topics = [options.topic] * rows if options.topic else _values(batch, "topic", rows)
    payloads = _values(batch, "payload", rows)
    qoss = _values(batch, "qos", rows)
    retains = _values(batch, "retain", rows)
    props = _values(batch, PROPERTIES, rows)
    default_qos = options.qos
    for i in range(rows):
        topic = topics[i]
        if topic is None:
            raise RowError(f"row {first_row + i}: the topic is null")
        payload = payloads[i]
        if payload is None:
            payload = b""
        elif isinstance(payload, str):
            payload = payload.encode()
        qos = qoss[i]
        if qos is None:
            qos = default_qos
        elif qos not in (0, 1, 2):
            raise RowError(f"row {first_row + i}: qos must be 0, 1 or 2, got {qos}")
        yield OutMessage(topic, payload, qos, bool(retains[i]), props[i])
