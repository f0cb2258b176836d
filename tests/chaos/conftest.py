"""Fixtures of the chaos tests: the marker, the Spark session, the proxy, the seed, and the
tally of faults and messages that ``make chaos`` writes to ``bench/results/chaos.json``.

Each test adds what it did to the session's tally (``tally.add("broker_restarts")``) and checks
its Delta table with :func:`tests.chaos.tally.settle`, which adds the
published/landed/lost/duplicated counts and fails the test unless every published message
landed exactly once. When ``CHAOS_RESULTS`` names a file, the tally is written there as one flat
JSON object at the end of the run, with ``machine``, ``seed`` and ``scale``. The tally itself
(:class:`~tests.chaos.tally.Tally`) and ``settle`` live in ``tests/chaos/tally.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from streaming_jobs.spark_session import local_spark
from tests.brokers import MosquittoBroker
from tests.chaos.harness import Ledger, rng_for, run_seed, scale
from tests.chaos.proxy import ChaosProxy
from tests.chaos.tally import Tally
from tests.spark.streams import StreamDirs

CHAOS_DIR = Path(__file__).resolve().parent

_TALLY = Tally()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if CHAOS_DIR in item.path.resolve().parents:
            item.add_marker(pytest.mark.chaos)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if CHAOS_DIR.name not in report.nodeid.split("/"):
        return
    if report.when == "call":
        _TALLY.add("tests_passed" if report.passed else "tests_failed")
    elif report.failed:
        _TALLY.add("tests_failed")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get("CHAOS_RESULTS")
    if not target or not (_TALLY.counts["tests_passed"] or _TALLY.counts["tests_failed"]):
        return
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_TALLY.as_json(), indent=2) + "\n")


def pytest_report_header(config: pytest.Config) -> str:
    return f"chaos: scale {scale()}, seed {run_seed()} (CHAOS_SEED={run_seed()} replays it)"


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture
def tally() -> Tally:
    return _TALLY


@pytest.fixture
def rng(request: pytest.FixtureRequest):
    """The test's random stream; the seed is printed so a failure can be replayed."""
    print(f"chaos seed {run_seed()} (CHAOS_SEED={run_seed()}), scale {scale()}")
    return rng_for(request.node.nodeid)


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The run's one local Spark session (the same one tests/spark uses when both run)."""
    session = local_spark("connector-spark-tests", **{"spark.sql.shuffle.partitions": "2"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if SparkContext._active_spark_context is not None:
        for query in session.streams.active:
            with contextlib.suppress(Exception):
                query.stop()
        session.stop()


@pytest.fixture
def dirs(tmp_path: Path) -> StreamDirs:
    """WAL, checkpoint and table paths for one query, under the test's tmp_path."""
    return StreamDirs.under(tmp_path / "stream")


@pytest.fixture
def proxy_to() -> Iterator:
    """Call with a broker to get a :class:`ChaosProxy` in front of it; closed at teardown."""
    proxies: list[ChaosProxy] = []

    def make(broker: MosquittoBroker) -> ChaosProxy:
        proxy = ChaosProxy((broker.host, broker.port))
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()
