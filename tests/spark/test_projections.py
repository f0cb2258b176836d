"""Column lists kept across micro-batches (``streaming_jobs.projections``)."""

from __future__ import annotations

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F

from streaming_jobs.projections import Projections


def test_columns_are_built_once_and_select_matches_a_plain_select(spark: SparkSession) -> None:
    built: list[str] = []

    def doubled() -> list[Column]:
        built.append("doubled")
        return [F.col("id").alias("x"), (F.col("id") * 2).alias("y")]

    projections = Projections()
    first = projections.select(spark.range(3), "doubled", doubled)
    second = projections.select(spark.range(5).where("id > 2"), "doubled", doubled)
    assert built == ["doubled"]
    plain = spark.range(3).select(F.col("id").alias("x"), (F.col("id") * 2).alias("y"))
    assert first.schema == plain.schema
    assert [tuple(r) for r in first.collect()] == [tuple(r) for r in plain.collect()]
    assert [tuple(r) for r in second.collect()] == [(3, 6), (4, 8)]

    # another name is another list
    (negative,) = projections.columns(spark.range(1), "negative", lambda: [F.col("id") < 0])
    assert built == ["doubled"]
    assert spark.range(4).where(negative).count() == 0
