"""Routes inside Spark (streaming_jobs/routes.py, routed_writer.py) and the VARIANT payload
format, in the test run's session: the route of each topic as the MQTT matcher says, one batch
split into its tables once each, a replay after a partial write, a catalog table, and a
payload parsed into VARIANT (the job's format and the DataFrame API's one-liner)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import cast

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from connector.mqtt.topics import topic_matches
from connector.spark.schema import SCHEMA_DDL
from devtools.delta_log import delta_row_count, txn_versions
from devtools.sparkplug_payloads import birth, data
from streaming_jobs.payloads import EMPTY, MQTT_COLUMNS, NOT_JSON, NOT_UTF8, make_plan
from streaming_jobs.progress import RunStats
from streaming_jobs.routed_writer import RoutedBatchWriter, TableRoute
from streaming_jobs.routes import NO_ROUTE, route_index
from streaming_jobs.sparkplug_route import RouteStates
from tests.spark.source_batches import source_rows

FILTERS = ["plant/+/telemetry", "plant/a/#", "+/+/events", "$SYS/#", "#"]


def test_each_topic_takes_the_first_route_whose_filter_matches(spark: SparkSession) -> None:
    topics = [
        "/".join(levels)
        for depth in range(1, 4)
        for levels in itertools.product(
            ["plant", "a", "telemetry", "events", "$SYS", ""], repeat=depth
        )
    ]
    topics += ["$SYS/x", "$other", "plant/a/b/c"]
    frame = spark.createDataFrame([(t,) for t in topics], "topic STRING")
    got = {
        row.topic: row.route
        for row in frame.select(
            "topic", route_index(F.col("topic"), FILTERS).alias("route")
        ).collect()
    }
    for topic in topics:
        want = next((i for i, f in enumerate(FILTERS) if topic_matches(f, topic)), None)
        assert got[topic] == want, topic
    assert got["$SYS/x"] == 3 and got["$other"] is None  # "#" takes no "$" topic


def routed_writer(tmp_path: Path) -> RoutedBatchWriter:
    """Three routes (JSON with a schema, VARIANT, text) sharing one dead-letter table, which
    also takes what no route does."""
    dead = str(tmp_path / "dead")
    schema = cast(StructType, StructType.fromDDL("seq BIGINT NOT NULL, temp DOUBLE"))
    targets = [
        TableRoute(
            (0,), make_plan("json", schema, dead_letters=True), str(tmp_path / "json"), dead
        ),
        TableRoute(
            (1,), make_plan("variant", None, dead_letters=True), str(tmp_path / "variant"), dead
        ),
        TableRoute((2,), make_plan("text", None, dead_letters=True), str(tmp_path / "text"), dead),
    ]
    filters = ["r/json", "r/variant", "r/text"]
    return RoutedBatchWriter(filters, targets, dead, MQTT_COLUMNS, RunStats())


def batch(spark: SparkSession) -> DataFrame:
    parts = [
        source_rows(spark, [b'{"seq": 1, "temp": 2.5}', b"not json"], topic="r/json"),
        source_rows(
            spark, [b'{"a": {"b": [1, 2]}}', b"[1, 2]", b"{bad", b"\xff", b""], topic="r/variant"
        ),
        source_rows(spark, [b"on", b"\xfe"], topic="r/text"),
        source_rows(spark, [b"x"], topic="elsewhere"),
    ]
    frame = parts[0]
    for part in parts[1:]:
        frame = frame.unionByName(part)
    return frame


class Killed(Exception):
    """The job's death, between two tables' commits."""


def dies_writing(writer: RoutedBatchWriter, table: str) -> None:
    """Make ``writer`` die when it comes to commit to ``table`` (a path's last name); the
    other tables' commits of the batch go on."""
    commit = writer._append

    def dying(rows: DataFrame, path: str, app_id: str, batch_id: int, count: int | None) -> None:
        if path.endswith(table):
            raise Killed
        commit(rows, path, app_id, batch_id, count)

    writer._append = dying  # type: ignore[method-assign]


def test_one_batch_lands_in_each_routes_table_once_even_replayed_after_a_partial_write(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    # A first run commits the JSON route's table, and dies at the VARIANT one.
    first = routed_writer(tmp_path)
    assert len(first.create_tables(spark, SCHEMA_DDL)) == 4
    dies_writing(first, "variant")
    with pytest.raises(Killed):
        first(batch(spark), 0)
    assert delta_row_count(tmp_path / "json") == 1 and delta_row_count(tmp_path / "variant") == 0
    # The restarted job replays batch 0: every table gets it, none twice.
    writer = routed_writer(tmp_path)
    assert writer.create_tables(spark, SCHEMA_DDL) == []
    writer(batch(spark), 0)
    writer(batch(spark), 0)
    counts = {
        name: delta_row_count(tmp_path / name) for name in ("json", "variant", "text", "dead")
    }
    assert counts == {"json": 1, "variant": 2, "text": 1, "dead": 1 + 3 + 1 + 1}
    assert all(txn_versions(tmp_path / name) == [0] for name in counts)
    reasons = {
        (r.topic, r.reason)
        for r in spark.read.format("delta").load(str(tmp_path / "dead")).collect()
    }
    assert reasons >= {("r/variant", NOT_JSON), ("r/variant", NOT_UTF8), ("r/variant", EMPTY)}
    assert ("elsewhere", NO_ROUTE) in reasons and ("r/text", NOT_UTF8) in reasons
    variant = spark.read.format("delta").load(str(tmp_path / "variant"))
    assert dict(variant.dtypes)["payload"] == "variant"
    values = sorted(
        str(r.v)
        for r in variant.select(
            F.expr("variant_get(payload, '$.a.b[1]', 'int')").alias("v")
        ).collect()
    )
    assert values == ["2", "None"]  # the object's a.b[1]; the array has no field a
    writer(batch(spark), 1)
    assert delta_row_count(tmp_path / "json") == 2 and delta_row_count(tmp_path / "dead") == 12


NODE = "spBv1.0/plant/{}/edge1"


def sparkplug_writer(tmp_path: Path) -> RoutedBatchWriter:
    """A Sparkplug route with its events and dead-letter tables, and a text route."""
    states = RouteStates(str(tmp_path / "wal"), str(tmp_path / "metrics"), None)
    dead = str(tmp_path / "dead")
    targets = [
        TableRoute(
            (0,),
            make_plan("sparkplug", None, dead_letters=True, events=True),
            str(tmp_path / "metrics"),
            dead,
            events_table=str(tmp_path / "events"),
            sparkplug=states,
        ),
        TableRoute((1,), make_plan("text", None), str(tmp_path / "text"), None),
    ]
    return RoutedBatchWriter(["spBv1.0/#", "r/#"], targets, None, MQTT_COLUMNS, RunStats())


def sparkplug_batch(spark: SparkSession, number: int) -> DataFrame:
    """Batch 0: a birth of two receivers' nodes; batch 1: data by alias only, a payload that
    is not Sparkplug, and a text message."""
    if number == 0:
        return source_rows(
            spark, [birth([("temp", 7, 10, "double_value", 1.5)], 0)], NODE.format("NBIRTH")
        ).unionByName(
            source_rows(
                spark,
                [birth([("rpm", 7, 4, "long_value", 10)], 0)],
                NODE.format("NBIRTH"),
                receiver=1,
            )
        )
    return (
        source_rows(spark, [data([(7, "double_value", 2.5)], 1), b"\x08"], NODE.format("NDATA"),
                    first_offset=1)
        .unionByName(source_rows(spark, [data([(7, "long_value", 11)], 1)],
                                 NODE.format("NDATA"), first_offset=1, receiver=1))
        .unionByName(source_rows(spark, [b"on"], "r/t", first_offset=3))
    )  # fmt: skip


def test_a_sparkplug_route_resolves_aliases_from_a_birth_of_an_earlier_batch_after_a_restart(
    spark: SparkSession, run: str, tmp_path: Path
) -> None:
    first = sparkplug_writer(tmp_path)
    assert len(first.create_tables(spark, SCHEMA_DDL)) == 4
    first(sparkplug_batch(spark, 0), 0)
    dies_writing(first, "events")
    with pytest.raises(Killed):
        first(sparkplug_batch(spark, 1), 1)
    # A new writer (the restarted job) knows the births only from the stored states.
    writer = sparkplug_writer(tmp_path)
    writer(sparkplug_batch(spark, 1), 1)
    metrics = spark.read.format("delta").load(str(tmp_path / "metrics"))
    got = sorted(
        (r.receiver, r.message_type, r.metric_name, r.double_value, r.long_value)
        for r in metrics.where("metric_name != 'bdSeq'").collect()
    )
    assert got == [
        (0, "NBIRTH", "temp", 1.5, None),
        (0, "NDATA", "temp", 2.5, None),
        (1, "NBIRTH", "rpm", None, 10),
        (1, "NDATA", "rpm", None, 11),
    ]
    assert txn_versions(tmp_path / "metrics") == [0, 1]
    events = spark.read.format("delta").load(str(tmp_path / "events"))
    assert sorted(r.message_type for r in events.collect()) == ["NBIRTH", "NBIRTH"]
    assert txn_versions(tmp_path / "events") == [0]  # batch 1 has no event
    dead = spark.read.format("delta").load(str(tmp_path / "dead")).collect()
    assert [(r.topic, r.offset) for r in dead] == [(NODE.format("NDATA"), 2)]
    assert dead[0].reason.startswith("not a Sparkplug B payload")
    assert delta_row_count(tmp_path / "text") == 1


def test_a_route_may_name_a_catalog_table(spark: SparkSession, run: str, tmp_path: Path) -> None:
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS routes_test LOCATION '{tmp_path / 'schema'}'")
    try:
        target = TableRoute((0,), make_plan("text", None), "routes_test.texts", None)
        writer = RoutedBatchWriter(["r/#"], [target], None, MQTT_COLUMNS, RunStats())
        assert len(writer.create_tables(spark, SCHEMA_DDL)) == 1
        writer(source_rows(spark, [b"one", b"two", b"\xff"], topic="r/a"), 0)
        texts = spark.table("routes_test.texts").collect()
        assert sorted(str(r.text) for r in texts) == ["None", "one", "two"]
        assert [r._parse_error for r in texts if r.text is None] == [NOT_UTF8]
        stats = writer.stats.get(0)  # counted while writing: no dead-letter table
        assert stats is not None and (stats.rows, stats.dead_letters) == (3, 1)
        writer(source_rows(spark, [b"one", b"two", b"\xff"], topic="r/a"), 0)
        assert len(spark.table("routes_test.texts").collect()) == 3
    finally:
        spark.sql("DROP SCHEMA IF EXISTS routes_test CASCADE")


def test_the_dataframe_api_parses_json_into_variant_with_one_expression(
    spark: SparkSession,
) -> None:
    rows = source_rows(spark, [b'{"temp": 21.5, "tags": ["a"]}', b"oops"])
    parsed = rows.selectExpr("topic", "try_parse_json(cast(payload as string)) as payload")
    got = [r.t for r in parsed.selectExpr("payload:temp::double as t").collect()]
    assert got == [21.5, None]
