"""The ingest job's payload decoding and batch writer, in the test run's Spark session.

Pins down what Spark 4.2's ``from_json`` does with malformed payloads (the job's dead-letter
rules rest on it), the columns of each table, and that a replayed batch never doubles a table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from devtools.delta_log import delta_commits, delta_row_count, txn_versions
from streaming_jobs import payloads
from streaming_jobs.batch_writer import QUERY_ID_PROPERTY, BatchWriter
from streaming_jobs.ingest import parse_schema
from streaming_jobs.ingest_config import UsageError
from streaming_jobs.payloads import (
    PARSE_ERROR,
    REASON,
    SchemaError,
    dead_letter_rows,
    decode,
    make_plan,
    table_rows,
)
from streaming_jobs.progress import RunStats
from tests.spark.source_batches import RECEIVED, SCHEMA, source_rows

# payload -> reason (None: parses). Observed with Spark 4.2.0 (see streaming_jobs/payloads.py).
JSON_CASES: dict[bytes, str | None] = {
    b'{"seq": 1, "temp": 21.5, "status": "ok"}': None,
    b'{"seq": 2}': None,  # missing keys: null, not an error
    b'{"seq": 3, "temp": null}': None,  # JSON null
    b'{"seq": 4, "TEMP": 1.0}': None,  # another case: not this field, ignored
    b'{"seq": 5, "extra": [1, 2]}': None,  # extra keys ignored
    b'{"seq": 6, "status": 42}': None,  # a number for a STRING field: its JSON text
    b'{"seq": 7, "status": {"a": 1}}': None,  # an object for a STRING field: its JSON text
    b'{"seq": 8} trailing junk': None,  # Spark stops after the first JSON value
    b'  {"seq": 9}  ': None,
    b'{"seq": 10, "temp": "hot"}': "field 'temp' is not a valid double",
    b'{"seq": 11.5}': "field 'seq' is not a valid bigint",
    b'{"seq": "12"}': "field 'seq' is not a valid bigint",
    b'{"seq": true}': "field 'seq' is not a valid bigint",
    b'{"seq": 13, "temp": "x", "status": "ok"}': "field 'temp' is not a valid double",
    b'{"seq": 14, "temp": 1.0': payloads.NOT_JSON,
    b"not json": payloads.NOT_JSON,
    b"{'seq': 15}": None,  # single quotes: Spark's allowSingleQuotes is on by default
    b"[1, 2, 3]": payloads.NOT_OBJECT,
    b'[{"seq": 16}]': payloads.NOT_OBJECT,
    b"42": payloads.NOT_OBJECT,
    b'"text"': payloads.NOT_OBJECT,
    b"null": payloads.NOT_OBJECT,
    b"true": payloads.NOT_OBJECT,
    b"": payloads.EMPTY,
    b"  \n": payloads.EMPTY,
    b'\xff\xfe{"seq": 17}': payloads.NOT_UTF8,
    b'{"seq": 18, "status": "\xc3\x28"}': payloads.NOT_UTF8,  # valid JSON, invalid UTF-8
    b'{"temp": 1.0}': "required field 'seq' is missing or null",
    b'{"seq": null}': "required field 'seq' is missing or null",
    b"{}": "required field 'seq' is missing or null",
}


@pytest.fixture(scope="module")
def schema(spark: SparkSession) -> StructType:
    return parse_schema(SCHEMA)


def test_json_reasons_match_what_spark_does(spark: SparkSession, schema: StructType) -> None:
    plan = make_plan("json", schema, dead_letters=True)
    cases = list(JSON_CASES.items())
    decoded = decode(source_rows(spark, [p for p, _ in cases]), plan)
    reasons = {r.offset: r[REASON] for r in decoded.select("offset", REASON).collect()}
    wrong = {
        cases[offset][0]: (got, cases[offset][1])
        for offset, got in reasons.items()
        if got != cases[offset][1]
    }
    assert not wrong, f"payload: (reason, expected): {wrong}"


def test_json_table_and_dead_letter_rows_split_every_row(
    spark: SparkSession, schema: StructType
) -> None:
    plan = make_plan("json", schema, (None, "site", "device"), dead_letters=True)
    cases = list(JSON_CASES.items())
    decoded = decode(source_rows(spark, [p for p, _ in cases]), plan)
    good = table_rows(decoded, plan)
    bad = dead_letter_rows(decoded)
    assert good.columns == [
        "topic", "site", "device", "seq", "temp", "status",
        "qos", "retained", "duplicate", "messageId", "timestamp", "offset", "receiver",
    ]  # fmt: skip
    assert bad.columns == [*payloads.MQTT_COLUMNS, "reason"]
    good_rows, bad_rows = good.collect(), bad.collect()
    assert sorted(r.offset for r in good_rows + bad_rows) == list(range(len(cases)))
    assert {r.offset for r in good_rows} == {i for i, (_, why) in enumerate(cases) if why is None}
    first = next(r for r in good_rows if r.offset == 0)
    assert (first.seq, first.temp, first.status) == (1, 21.5, "ok")
    assert (first.site, first.device) == ("s1", "d1")
    assert {r.status for r in good_rows if r.seq in (6, 7)} == {"42", '{"a":1}'}
    for row in bad_rows:
        assert bytes(row.payload) == cases[row.offset][0]
        assert row.reason == cases[row.offset][1]


def test_without_dead_letter_table_bad_rows_stay_with_parse_error_and_raw_payload(
    spark: SparkSession, schema: StructType
) -> None:
    plan = make_plan("json", schema, dead_letters=False)
    payload_list = [b'{"seq": 1, "temp": 2.5}', b'{"seq": 2, "temp": "hot"}']
    rows = table_rows(decode(source_rows(spark, payload_list), plan), plan).collect()
    assert PARSE_ERROR in rows[0] and "payload" in rows[0]
    assert (rows[0].seq, rows[0].temp, rows[0][PARSE_ERROR], rows[0].payload) == (
        1,
        2.5,
        None,
        None,
    )
    # all or nothing: no partial values (seq parsed, temp did not) for a row that failed
    assert (rows[1].seq, rows[1].temp) == (None, None)
    assert rows[1][PARSE_ERROR] == "field 'temp' is not a valid double"
    assert bytes(rows[1].payload) == payload_list[1]


def test_keep_payload_keeps_it_for_every_row(spark: SparkSession, schema: StructType) -> None:
    plan = make_plan("json", schema, keep_payload=True, dead_letters=True)
    rows = table_rows(decode(source_rows(spark, [b'{"seq": 1}']), plan), plan).collect()
    assert bytes(rows[0].payload) == b'{"seq": 1}'


def test_text_format(spark: SparkSession) -> None:
    plan = make_plan("text", None, dead_letters=False)
    texts = ["plain", "ünïcödé ✓", ""]
    frame = source_rows(spark, [t.encode() for t in texts] + [b"\xc3\x28"])
    rows = table_rows(decode(frame, plan), plan).orderBy("offset").collect()
    assert [r.text for r in rows] == [*texts, None]
    assert [r[PARSE_ERROR] for r in rows] == [None, None, None, payloads.NOT_UTF8]
    assert [r.payload for r in rows[:3]] == [None] * 3
    assert bytes(rows[3].payload) == b"\xc3\x28"


def test_binary_format_keeps_the_source_columns(spark: SparkSession) -> None:
    plan = make_plan("binary", None, (None, "site"))
    rows = table_rows(decode(source_rows(spark, [b"\xff\x00"]), plan), plan)
    assert rows.columns == ["topic", "site", *payloads.MQTT_COLUMNS[1:]]
    first = rows.first()
    assert first is not None
    assert bytes(first.payload) == b"\xff\x00"


def test_topic_columns_by_position(spark: SparkSession) -> None:
    plan = make_plan("binary", None, ("root", "", "leaf"))
    topics = ["a/b/c/d", "a/b", "a//c", "/x/y"]
    frames = [source_rows(spark, [b"x"], topic) for topic in topics]
    frame = frames[0].unionByName(frames[1]).unionByName(frames[2]).unionByName(frames[3])
    rows = table_rows(decode(frame, plan), plan).select("topic", "root", "leaf").collect()
    assert {r.topic: (r.root, r.leaf) for r in rows} == {
        "a/b/c/d": ("a", "c"),
        "a/b": ("a", None),  # fewer levels: null
        "a//c": ("a", "c"),
        "/x/y": ("", "y"),  # a leading '/' makes an empty first level
    }


def test_partition_column_date_is_the_utc_receive_date(spark: SparkSession) -> None:
    plan = make_plan("binary", None, partition_by=("date",))
    row = table_rows(decode(source_rows(spark, [b"x"]), plan), plan).first()
    assert row is not None
    assert row.date == RECEIVED.date() == dt.date(2026, 3, 1)


def test_schema_field_named_like_an_mqtt_column_renames_the_column(spark: SparkSession) -> None:
    plan = make_plan("json", parse_schema("timestamp STRING, value INT"), dead_letters=True)
    assert plan.renamed == {"timestamp": "mqtt_timestamp"}
    frame = source_rows(spark, [b'{"timestamp": "2026-01-01T00:00:00Z", "value": 3}'])
    row = table_rows(decode(frame, plan), plan).first()
    assert row is not None
    assert row.timestamp == "2026-01-01T00:00:00Z"
    assert row.mqtt_timestamp == RECEIVED.astimezone().replace(tzinfo=None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"topic_columns": ("qos",)}, "already has a column 'qos'"),
        ({"topic_columns": ("temp",)}, "already has a column 'temp'"),
        ({"partition_by": ("nope",)}, "--partition-by 'nope': no such column"),
    ],
)
def test_plan_errors_name_the_flag(schema: StructType, args: dict, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        make_plan("json", schema, **args)


@pytest.mark.parametrize(
    ("ddl", "message"),
    [("temp DOUBL,,", "PARSE_SYNTAX_ERROR"), ("int", "give fields"), ("a INT, A INT", "twice")],
)
def test_bad_schema_is_one_line(spark: SparkSession, ddl: str, message: str) -> None:
    with pytest.raises((UsageError, SchemaError)) as caught:
        make_plan("json", parse_schema(ddl))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


# ------------------------------------------------------------------------ batch writer


@pytest.fixture
def query_id(spark: SparkSession) -> Iterator[str]:
    """The local property Spark sets on a streaming batch's thread, set on this one."""
    spark.sparkContext.setLocalProperty(QUERY_ID_PROPERTY, "test-query")
    yield "test-query"
    # pyspark types setLocalProperty's value str; None removes the property
    spark.sparkContext.setLocalProperty(QUERY_ID_PROPERTY, None)  # type: ignore[arg-type]


def test_replayed_batches_never_double_either_table(
    spark: SparkSession, schema: StructType, query_id: str, tmp_path: Path
) -> None:
    table, dead = tmp_path / "table", tmp_path / "dead"
    plan = make_plan("json", schema, dead_letters=True)
    stats = RunStats()
    writer = BatchWriter(plan, str(table), str(dead), stats)
    batch = source_rows(spark, [b'{"seq": 1}', b'{"seq": 2}', b"bad"])

    writer(batch, 0)
    writer(batch, 0)  # replay after a crash before the checkpoint's commit
    assert (delta_row_count(table), delta_row_count(dead)) == (2, 1)
    recorded = stats.get(0)
    assert recorded is not None and (recorded.rows, recorded.dead_letters) == (3, 1)

    # batch 1 crashed between the two writes: only the table has it
    second = source_rows(spark, [b'{"seq": 3}', b"[]"])
    writer._append(table_rows(decode(second, plan), plan), str(table), query_id, 1, 1)
    writer(second, 1)
    assert (delta_row_count(table), delta_row_count(dead)) == (3, 2)
    assert txn_versions(table) == txn_versions(dead) == [0, 1]
    txns = [a["txn"] for c in delta_commits(table) for a in c["actions"] if "txn" in a]
    assert {t["appId"] for t in txns} == {query_id}


def test_empty_first_batch_creates_both_tables(
    spark: SparkSession, schema: StructType, query_id: str, tmp_path: Path
) -> None:
    table, dead = tmp_path / "table", tmp_path / "dead"
    plan = make_plan("json", schema, dead_letters=True)
    BatchWriter(plan, str(table), str(dead), RunStats())(source_rows(spark, []), 0)
    assert (delta_row_count(table), delta_row_count(dead)) == (0, 0)
    assert {c["version"] for c in delta_commits(table)} == {0}
    assert {c["version"] for c in delta_commits(dead)} == {0}
