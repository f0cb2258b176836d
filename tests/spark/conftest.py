"""End-to-end tests of ``format("mqtt")``: real Mosquitto, real Spark, real Delta.

The run's one Spark session and each test's ``dirs`` come from
:mod:`tests.support.spark_fixtures`, the helpers the tests share (queries, waits, assertions)
from :mod:`tests.support.spark_streams`. Every test gets its own broker, WAL, checkpoint and
table under ``tmp_path`` and stops its queries in a ``finally``; a test that leaves one running
fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from connector.spark.writer.sink import QUERY_ID_PROPERTY
from streaming_jobs.delta_append import RUN_PROPERTY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(autouse=True)
def _no_leftover_queries(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a streaming query running (each must stop its own)."""
    yield
    if "spark" not in request.fixturenames:
        return
    session: SparkSession = request.getfixturevalue("spark")
    leftovers = list(session.streams.active)
    for query in leftovers:
        query.stop()
    assert not leftovers, f"test left {len(leftovers)} streaming queries running"


APP = "query-1"
"""The query id :func:`run` gives the test's thread."""


@pytest.fixture
def run(spark: SparkSession) -> Iterator[str]:
    """The local properties Spark sets on a streaming batch's thread (query id :data:`APP`),
    set on this one: the job's writers called directly see a batch of a query."""
    context = spark.sparkContext
    context.setLocalProperty(QUERY_ID_PROPERTY, APP)
    context.setLocalProperty(RUN_PROPERTY, "run-1")
    yield "run-1"
    # pyspark types setLocalProperty's value str; None removes the property
    context.setLocalProperty(QUERY_ID_PROPERTY, None)  # type: ignore[arg-type]
    context.setLocalProperty(RUN_PROPERTY, None)  # type: ignore[arg-type]
