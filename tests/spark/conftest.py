"""Fixtures for end-to-end tests of ``format("mqtt")``: real Mosquitto, real Spark, real Delta.

One Spark session serves the whole run (it takes seconds to start and warm up). Every test gets
its own broker, WAL, checkpoint and table under ``tmp_path`` and stops its queries in a
``finally``. The helpers the tests share (publishing, queries, waits, assertions) are in
:mod:`tests.spark.streams`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming_jobs.spark_session import local_spark
from tests.spark.streams import StreamDirs


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one local Spark session (local[2], Delta) of the test run."""
    session = local_spark("connector-spark-tests", **{"spark.sql.shuffle.partitions": "2"})
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        for query in session.streams.active:
            with contextlib.suppress(Exception):  # best effort at the end of the run
                query.stop()
        session.stop()


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


@pytest.fixture
def dirs(tmp_path: Path) -> StreamDirs:
    """WAL, checkpoint and table paths for one query, under the test's tmp_path."""
    return StreamDirs.under(tmp_path / "stream")
