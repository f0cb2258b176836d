"""Decoding of MQTT payloads into table columns, in Spark SQL only (no Python per row).

``decode`` adds the columns of ``--payload-format`` and ``--topic-columns`` to the source's
rows, plus ``__reason``: null when the payload parsed, else why not. How Spark 4.2's
``from_json`` (PERMISSIVE, with a corrupt-record column) treats payloads, checked by the tests:

* not JSON, truncated JSON, a JSON array, string, number, ``true``/``false`` or ``null`` at the
  top: every field null, corrupt-record column set;
* a value of the wrong type (``"temp": "hot"`` for DOUBLE, ``"seq": 1.5`` for BIGINT): the other
  fields parsed, that one null, corrupt-record column set;
* an empty payload: the whole struct null;
* missing keys, keys of another case, extra keys and JSON ``null``: nulls, no error (declare a
  field ``NOT NULL`` in ``--schema`` to make its absence a parse error);
* numbers and objects are accepted for STRING fields (as their JSON text); text after the first
  JSON value (``{"a": 1} junk``) is ignored; single-quoted strings are accepted (Spark's
  ``allowSingleQuotes`` default);
* ``cast(payload as string)`` keeps invalid UTF-8 bytes, so UTF-8 is checked first
  (``is_valid_utf8``).

With MQTT 5 (``--mqtt-version 5``) the source's rows have ``properties`` (MQTT 5.0 section
3.3.2.3), which both tables keep; ``--property-columns`` copies fields of it to top-level
columns of ``--table``. A JSON payload whose message says it is something else (a Content
Type, section 3.3.2.3.9, that is not JSON: :func:`is_json_content_type`) is not parsed: it
goes to the dead letters with a reason naming the content type. A message without a Content
Type is parsed as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from connector.spark.reader.sparkplug_schema import FIELDS as SPARKPLUG_FIELDS
from connector.spark.schema import COLUMNS, PROPERTIES_COLUMN, PROPERTIES_TYPE

from .projections import Projections

MQTT_COLUMNS = COLUMNS
"""The source's columns (connector.spark.schema)."""
METADATA_COLUMNS = COLUMNS[2:]
"""Every column of the source but ``topic`` and ``payload``."""
PROPERTIES = PROPERTIES_COLUMN
"""The MQTT 5 column of the source, after the others."""
ARRAY_PROPERTIES = frozenset(f.name for f in PROPERTIES_TYPE if pa.types.is_list(f.type))
"""Fields of ``properties`` that are arrays (no partition column can be one)."""
DEAD_LETTER_COLUMNS = (*MQTT_COLUMNS, "reason")
JSON_MEDIA_TYPES = ("application/json", "text/json")
JSON_SUFFIX = r"^[^/\s]+/[^/\s]+\+json$"
"""A structured syntax suffix ``+json`` (RFC 6839): ``application/ld+json``, ..."""
PARSE_ERROR = "_parse_error"
TEXT = "text"
REASON = "__reason"
DATE = "date"
_CORRUPT = "__corrupt_record"
_PARSED = "__parsed"
_MICROS_PER_DAY = 86_400_000_000
RENAMED_PREFIX = "mqtt_"

NOT_UTF8 = "payload is not valid UTF-8"
EMPTY = "payload is empty"
NOT_JSON = "payload is not valid JSON"
NOT_OBJECT = "payload is JSON but not an object"
NO_MATCH = "payload does not match the schema"
CONTENT_TYPE_NOT_JSON = ("content type '", "' is not JSON")
"""The reason of a JSON row whose MQTT 5 Content Type is not JSON, around that type."""

SPARKPLUG = "sparkplug"
VARIANT = "variant"
"""``--payload-format variant``: any JSON payload as one VARIANT column, :data:`VARIANT_COLUMN`
(Spark's ``try_parse_json``); the raw bytes, when kept, under ``mqtt_payload``."""
VARIANT_COLUMN = "payload"
SPARKPLUG_SOURCE_COLUMNS = tuple(f[0] for f in SPARKPLUG_FIELDS)
"""The source's columns with ``payloadFormat`` ``sparkplug``
(connector.spark.reader.sparkplug_schema)."""
_EVENT_ONLY = ("event", "host_id", "host_online", "payload")
SPARKPLUG_METRIC_COLUMNS = tuple(c for c in SPARKPLUG_SOURCE_COLUMNS if c not in _EVENT_ONLY)
"""``--table`` of a Sparkplug run: one row per metric (docs/sparkplug.md)."""
_EVENT_COLUMNS = frozenset(
    {"group_id", "edge_node_id", "device_id", "message_type", "seq", "bd_seq"}
    | {"payload_timestamp", "death_matched", "host_id", "host_online", "seq_gap"}
    | {"missing_seqs", "reason", "topic", "qos", "timestamp", "offset", "receiver"}
)
SPARKPLUG_EVENT_COLUMNS = tuple(c for c in SPARKPLUG_SOURCE_COLUMNS if c in _EVENT_COLUMNS)
"""``--events-table``: one row per NBIRTH, DBIRTH, NDEATH, DDEATH and STATE message."""
SPARKPLUG_DEAD_LETTER_COLUMNS = ("topic", "payload", "qos", "timestamp", "offset", "receiver")
"""A Sparkplug dead letter: the message as stored, and ``reason``."""


class SchemaError(ValueError):
    """``--schema``, ``--topic-columns`` or ``--partition-by`` do not fit together."""


@dataclass(frozen=True)
class PayloadPlan:
    """What ``decode`` makes of the source's rows, and which columns go to which table."""

    payload_format: str
    schema: StructType | None
    topic_columns: tuple[str | None, ...]
    keep_payload: bool
    dead_letters: bool
    partition_by: tuple[str, ...]
    renamed: dict[str, str]
    """MQTT columns renamed because a ``--schema`` field has their name (old -> new)."""
    mqtt5: bool = False
    """The source speaks MQTT 5: its rows have ``properties``, which both tables keep."""
    property_columns: tuple[str, ...] = ()
    """``--property-columns``: fields of ``properties`` copied to top-level columns."""
    events: bool = False
    """Sparkplug: an ``--events-table`` takes the births, deaths and STATE messages."""
    cluster_by: tuple[str, ...] = ()
    """``--cluster-by``: the table's liquid clustering columns, when the job creates it."""
    projections: Projections = dataclasses.field(
        default_factory=Projections, compare=False, repr=False
    )
    """The plan's column expressions, built once per Spark context (see ``projections``)."""

    @property
    def adds_date(self) -> bool:
        layout = (*self.partition_by, *self.cluster_by)
        return DATE in layout and DATE not in self._data_names()

    @property
    def sparkplug(self) -> bool:
        return self.payload_format == SPARKPLUG

    @property
    def mqtt_columns(self) -> tuple[str, ...]:
        """The source's columns: MQTT_COLUMNS, and ``properties`` for MQTT 5; Sparkplug's."""
        if self.sparkplug:
            return SPARKPLUG_SOURCE_COLUMNS
        return (*MQTT_COLUMNS, PROPERTIES) if self.mqtt5 else MQTT_COLUMNS

    def _data_names(self) -> list[str]:
        names = [n for n in self.topic_columns if n is not None]
        names += self.property_columns
        if self.payload_format == "text":
            names.append(TEXT)
        elif self.payload_format == VARIANT:
            names.append(VARIANT_COLUMN)
        elif self.schema is not None:
            names += [f.name for f in self.schema.fields]
        return names

    def column(self, name: str) -> str:
        """The table's name for MQTT column ``name``."""
        return self.renamed.get(name, name)

    def table_columns(self) -> list[str]:
        """The columns of ``--table``, in order."""
        if self.sparkplug:
            cols = list(SPARKPLUG_METRIC_COLUMNS)
            if self.keep_payload or not self.dead_letters:
                cols.append("payload")
            return [*cols, DATE] if self.adds_date else cols
        cols = [self.column("topic"), *(n for n in self.topic_columns if n is not None)]
        if self.payload_format == "binary":
            cols.append("payload")
        elif self.payload_format == "text":
            cols.append(TEXT)
        elif self.payload_format == VARIANT:
            cols.append(VARIANT_COLUMN)
        else:
            assert self.schema is not None
            cols += [f.name for f in self.schema.fields]
        if self.payload_format != "binary" and (self.keep_payload or not self.dead_letters):
            cols.append(self.column("payload"))
        cols += [self.column(c) for c in METADATA_COLUMNS]
        if self.mqtt5:
            cols += [self.column(PROPERTIES), *self.property_columns]
        if self.payload_format != "binary" and not self.dead_letters:
            cols.append(PARSE_ERROR)
        if self.adds_date:
            cols.append(DATE)
        return cols


def make_plan(
    payload_format: str,
    schema: StructType | None,
    topic_columns: tuple[str | None, ...] = (),
    *,
    keep_payload: bool = False,
    dead_letters: bool = False,
    partition_by: tuple[str, ...] = (),
    mqtt5: bool = False,
    property_columns: tuple[str, ...] = (),
    events: bool = False,
    cluster_by: tuple[str, ...] = (),
) -> PayloadPlan:
    """Check that the names fit together; MQTT columns that a schema field names are renamed
    ``mqtt_<name>`` (a JSON ``timestamp`` field is common). ``property_columns`` need
    ``mqtt5``; ``events`` (an events table) needs ``sparkplug``."""
    if payload_format == SPARKPLUG:
        return _sparkplug_plan(keep_payload, dead_letters, partition_by, events, cluster_by)
    if events:
        raise SchemaError("--events-table goes with --payload-format sparkplug")
    fields = list(schema.fields) if schema is not None else []
    field_names = {f.name.lower() for f in fields}
    if len(field_names) != len(fields):
        raise SchemaError("--schema names a field twice")
    if payload_format == VARIANT:
        field_names = {VARIANT_COLUMN}  # the raw payload makes room: mqtt_payload
    if property_columns and not mqtt5:
        raise SchemaError("--property-columns needs --mqtt-version 5")
    source_columns = (*MQTT_COLUMNS, PROPERTIES) if mqtt5 else MQTT_COLUMNS
    renamed = {c: RENAMED_PREFIX + c for c in source_columns if c.lower() in field_names}
    for old, new in renamed.items():
        if new.lower() in field_names:
            raise SchemaError(f"--schema has both {old!r} and {new!r}: rename one of them")
    reserved = {PARSE_ERROR, REASON, _CORRUPT, _PARSED}
    clash = sorted(field_names & reserved)
    if clash:
        raise SchemaError(f"--schema field {clash[0]!r} is a name the job uses itself")
    taken = {*(c.lower() for c in source_columns), *field_names, PARSE_ERROR}
    taken |= {n.lower() for n in renamed.values()}
    if payload_format == "text":
        taken.add(TEXT)
    for name in (n for n in topic_columns if n is not None):
        if name.lower() in taken:
            raise SchemaError(f"--topic-columns {name!r}: the table already has a column {name!r}")
        taken.add(name.lower())
    for name in property_columns:
        if name.lower() in taken:
            raise SchemaError(
                f"--property-columns {name!r}: the table already has a column {name!r}"
            )
    plan = PayloadPlan(
        payload_format,
        schema,
        topic_columns,
        keep_payload,
        dead_letters,
        partition_by,
        renamed,
        mqtt5,
        property_columns,
        cluster_by=cluster_by,
    )
    arrays = (*ARRAY_PROPERTIES, plan.column(PROPERTIES)) if mqtt5 else ()
    _check_layout(plan, arrays)
    return plan


def _sparkplug_plan(
    keep_payload: bool,
    dead_letters: bool,
    partition_by: tuple[str, ...],
    events: bool,
    cluster_by: tuple[str, ...],
) -> PayloadPlan:
    plan = PayloadPlan(
        SPARKPLUG, None, (), keep_payload, dead_letters, partition_by, {}, events=events,
        cluster_by=cluster_by,
    )  # fmt: skip
    _check_layout(
        plan, [name for name, spark, _, _ in SPARKPLUG_FIELDS if spark.startswith("ARRAY")]
    )
    return plan


def _check_layout(plan: PayloadPlan, arrays: Sequence[str]) -> None:
    """Each ``--partition-by`` and ``--cluster-by`` column is one of the table's, and not a
    struct or array (Delta partitions and clusters by scalar columns only)."""
    columns = {c.lower() for c in plan.table_columns()}
    nested = {c.lower() for c in arrays}
    layouts = (("--partition-by", "partition", plan.partition_by),
               ("--cluster-by", "cluster", plan.cluster_by))  # fmt: skip
    for flag, verb, names in layouts:
        for name in names:
            if name.lower() not in columns:
                raise SchemaError(
                    f"{flag} {name!r}: no such column; the table has "
                    + ", ".join(plan.table_columns())
                )
            if name.lower() in nested:
                raise SchemaError(f"{flag} {name!r}: Delta cannot {verb} by a struct or array")


def is_json_content_type(content_type: Column) -> Column:
    """Whether an MQTT 5 Content Type (a MIME type, MQTT 5.0 section 3.3.2.3.9) names JSON:
    ``application/json``, ``text/json`` or any ``type/subtype+json``, compared without case,
    surrounding spaces and parameters (``; charset=utf-8``)."""
    media = F.lower(F.trim(F.substring_index(content_type, ";", 1)))
    return media.isin(*JSON_MEDIA_TYPES) | media.rlike(JSON_SUFFIX)


def _json_path(name: str) -> str | None:
    """``$['name']`` for ``get_json_object``, or None when the name cannot be quoted."""
    if "'" in name or "]" in name or "\\" in name:
        return None
    return f"$['{name}']"


def _json_reason(text: Column, parsed: Column, schema: StructType) -> Column:
    """Why a payload that passed the UTF-8 check does not parse, or null."""
    mismatches = []
    for field in schema.fields:
        path = _json_path(field.name)
        if path is None:
            continue
        mismatches.append(
            F.when(
                parsed[field.name].isNull() & F.get_json_object(text, path).isNotNull(),
                F.lit(f"field '{field.name}' is not a valid {field.dataType.simpleString()}"),
            )
        )
    detail = F.concat_ws("; ", *mismatches) if mismatches else F.lit("")
    corrupt = (
        F.when(F.get_json_object(text, "$").isNull(), F.lit(NOT_JSON))
        .when(F.json_object_keys(text).isNull(), F.lit(NOT_OBJECT))
        .when(detail != "", detail)
        .otherwise(F.lit(NO_MATCH))
    )
    reason = F.when(parsed.isNull(), F.lit(NOT_JSON)).when(parsed[_CORRUPT].isNotNull(), corrupt)
    for field in _required(schema):
        reason = reason.when(
            parsed[field.name].isNull(), F.lit(f"required field '{field.name}' is missing or null")
        )
    return reason


def _required(schema: StructType) -> list[StructField]:
    return [f for f in schema.fields if not f.nullable]


def decode(frame: DataFrame, plan: PayloadPlan) -> DataFrame:
    """The source's rows with the plan's data columns and ``__reason`` (null: parsed)."""
    return plan.projections.select(frame, "decode", lambda: _decoded_columns(plan))


def _decoded_columns(plan: PayloadPlan) -> list[Column]:
    payload = F.col("payload")
    text = payload.cast("string")
    columns: list[Column] = [F.col(c) for c in plan.mqtt_columns]
    if plan.topic_columns:
        levels = F.split(F.col("topic"), "/")
        columns += [
            F.get(levels, F.lit(i)).alias(name)
            for i, name in enumerate(plan.topic_columns)
            if name is not None
        ]
    valid_utf8 = F.is_valid_utf8(text)
    if plan.sparkplug:
        # A dead letter is a message that is not Sparkplug (its bytes kept, connector.sparkplug
        # .messages); a metric with a reason (an unknown alias) is a row of the table.
        reason = F.when(payload.isNotNull() & F.col("metric_index").isNull(), F.col("reason"))
    elif plan.payload_format == "binary":
        reason = F.lit(None).cast("string")
    elif plan.payload_format == "text":
        columns.append(F.when(valid_utf8, text).alias(TEXT))
        reason = F.when(~valid_utf8, F.lit(NOT_UTF8))
    else:  # JSON: typed columns from the schema, or one VARIANT
        if plan.schema is None:
            parsed = F.try_parse_json(F.when(valid_utf8, text))
        else:
            with_corrupt = StructType([*plan.schema.fields, StructField(_CORRUPT, StringType())])
            options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}
            parsed = F.from_json(text, with_corrupt, options)
        columns.append(parsed.alias(_PARSED))
        reason = F.when(~valid_utf8, F.lit(NOT_UTF8))
        if plan.mqtt5:
            content_type = F.col(PROPERTIES)["contentType"]
            before, after = CONTENT_TYPE_NOT_JSON
            reason = F.when(
                content_type.isNotNull() & ~is_json_content_type(content_type),
                F.concat(F.lit(before), content_type, F.lit(after)),
            ).when(~valid_utf8, F.lit(NOT_UTF8))
        reason = reason.when(text.rlike(r"^\s*$"), F.lit(EMPTY)).otherwise(
            F.when(F.col(_PARSED).isNull(), F.lit(NOT_JSON))
            if plan.schema is None
            else _json_reason(text, F.col(_PARSED), plan.schema)
        )
    return [*columns, reason.cast("string").alias(REASON)]


def table_rows(decoded: DataFrame, plan: PayloadPlan) -> DataFrame:
    """The rows for ``--table``: all of them, or only those that parsed when a dead-letter
    table takes the others. Sparkplug: the metrics (and, without a dead-letter table, the
    messages that did not decode)."""
    if plan.sparkplug:
        (kept,) = plan.projections.columns(
            decoded,
            "parsed",
            lambda: [
                F.col("metric_index").isNotNull()
                | (F.lit(not plan.dead_letters) & F.col(REASON).isNotNull())
            ],
        )
        decoded = decoded.where(kept)
    elif plan.dead_letters:
        (parsed,) = plan.projections.columns(decoded, "parsed", lambda: [F.col(REASON).isNull()])
        decoded = decoded.where(parsed)
    return plan.projections.select(decoded, "table", lambda: _table_columns(plan))


def _table_columns(plan: PayloadPlan) -> list[Column]:
    out: list[Column] = []
    for name in plan.table_columns():
        if plan.schema is not None and name in plan.schema.names:
            # all or nothing: a row that did not parse keeps no partial values
            value = F.col(_PARSED)[name]
            out.append(F.when(F.col(REASON).isNull(), value).alias(name))
        elif name == VARIANT_COLUMN and plan.payload_format == VARIANT:
            out.append(F.when(F.col(REASON).isNull(), F.col(_PARSED)).alias(name))
        elif name == PARSE_ERROR:
            out.append(F.col(REASON).alias(PARSE_ERROR))
        elif name == DATE and plan.adds_date:
            micros = F.unix_micros(F.col("timestamp"))
            day = F.floor(micros / F.lit(_MICROS_PER_DAY)).cast("int")
            out.append(F.date_from_unix_date(day).alias(DATE))
        elif name == plan.column("payload") and plan.payload_format != "binary":
            keep = F.lit(True) if plan.keep_payload else F.col(REASON).isNotNull()
            out.append(F.when(keep, F.col("payload")).alias(name))
        elif name in plan.property_columns:
            out.append(F.col(PROPERTIES)[name].alias(name))
        else:
            original = next((k for k, v in plan.renamed.items() if v == name), name)
            out.append(F.col(original).alias(name))
    return out


def row_counts(plan: PayloadPlan) -> list[Column]:
    """Aggregates of a batch's decoded rows: ``rows``, ``unparsed`` (a reason set), and with
    Sparkplug ``metrics`` (rows of a metric) and ``events`` (births, deaths, STATE)."""
    counts = [F.count(F.lit(1)).alias("rows"), F.count(F.col(REASON)).alias("unparsed")]
    if plan.sparkplug:
        counts += [
            F.count(F.col("metric_index")).alias("metrics"),
            F.count_if(F.col("event")).alias("events"),
        ]
    return counts


def event_rows(decoded: DataFrame) -> DataFrame:
    """The rows for ``--events-table`` (Sparkplug): one per birth, death and STATE message."""
    return decoded.where(F.col("event")).select(*SPARKPLUG_EVENT_COLUMNS)


def dead_letter_rows(decoded: DataFrame, plan: PayloadPlan | None = None) -> DataFrame:
    """The rows for ``--dead-letter-table``: the source's columns (``properties`` too with
    MQTT 5) with the raw payload, and ``reason``."""
    if plan is not None and plan.sparkplug:
        columns: tuple[str, ...] = SPARKPLUG_DEAD_LETTER_COLUMNS
        return decoded.where(F.col(REASON).isNotNull()).select(
            *columns, F.col(REASON).alias("reason")
        )
    columns = MQTT_COLUMNS if plan is None else plan.mqtt_columns
    return decoded.where(F.col(REASON).isNotNull()).select(*columns, F.col(REASON).alias("reason"))
