"""Fixtures of the chaos tests: the marker, the Spark session, the proxy, the seed, and the
tally of faults and messages that ``make chaos`` writes to ``bench/results/chaos.json``.

Each test adds what it did to the session's tally (``tally.add("broker_restarts")``) and checks
its Delta table with :func:`settle`, which adds the published/landed/lost/duplicated counts and
fails the test unless every published message landed exactly once. When ``CHAOS_RESULTS``
names a file, the tally is written there as one flat JSON object at the end of the run, with
``machine``, ``seed`` and ``scale``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark import SparkContext
from pyspark.sql import SparkSession

from streaming_jobs.spark_session import local_spark
from tests.brokers import MosquittoBroker
from tests.chaos.harness import Ledger, Verdict, rng_for, run_seed, scale
from tests.chaos.proxy import ChaosProxy
from tests.spark.conftest import StreamDirs

CHAOS_DIR = Path(__file__).resolve().parent
REPO_ROOT = CHAOS_DIR.parents[1]
FUZZ_COUNTS = REPO_ROOT / "bench" / "results" / "fuzz.json"
FUZZ_KEYS = ("total_inputs", "fuzz_inputs_tried", "inputs_tried")

COUNTERS = (
    "kills_survived",
    "driver_kills",
    "source_process_kills",
    "broker_restarts",
    "broker_hard_kills",
    "sessions_dropped",
    "connection_cuts",
    "stalls",
    "fragments",
    "malformed_frames_sent",
    "no_connack_connections",
    "keepalive_detections",
    "disk_full_faults",
    "read_only_faults",
    "fuzz_inputs_tried",
    "bad_options_refused",
    "bad_payloads_dead_lettered",
    "messages_published",
    "messages_landed",
    "messages_lost",
    "messages_duplicated",
    "tests_passed",
    "tests_failed",
)


class Tally:
    """Counters of one test run (all chaos tests add to it)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.started = time.monotonic()

    def add(self, name: str, amount: int = 1) -> None:
        if name not in self.counts:
            raise KeyError(f"unknown chaos counter {name!r}")
        self.counts[name] += amount

    def add_proxy(self, proxy: ChaosProxy) -> None:
        stats = proxy.stats
        self.add("connection_cuts", stats.cuts)
        self.add("stalls", stats.stalls)
        self.add("fragments", stats.fragments)
        self.add("malformed_frames_sent", stats.malformed_frames)
        self.add("no_connack_connections", stats.blackholed)

    def add_verdict(self, verdict: Verdict) -> None:
        self.add("messages_published", verdict.published)
        self.add("messages_landed", verdict.landed)
        self.add("messages_lost", len(verdict.lost))
        self.add("messages_duplicated", len(verdict.duplicated))

    def as_json(self) -> dict:
        from bench.common import machine_info

        data: dict = dict(self.counts)
        data["fuzz_inputs_tried"] = fuzz_inputs_tried()
        data["duration_s"] = round(time.monotonic() - self.started, 1)
        data["scale"] = scale()
        data["seed"] = run_seed()
        data["machine"] = machine_info()
        return data


def fuzz_inputs_tried() -> int:
    """Inputs the fuzz targets report having tried (their counter file), else 0."""
    path = Path(os.environ.get("CHAOS_FUZZ_COUNTS", FUZZ_COUNTS))
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    for key in FUZZ_KEYS:
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, int):
            return value
    return 0


_TALLY = Tally()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos: fault-injection tests (CHAOS_SCALE=ci|long)")


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


def settle(
    tally: Tally,
    ledger: Ledger,
    landed_payloads: list[bytes],
    possible_duplicates: int | None = None,
) -> Verdict:
    """Check the table's payloads against the ledger, count, and fail unless exactly once;
    or, given the receivers' ``possible_duplicates`` (QoS 1 resends after a dropped
    connection, docs/delivery.md), unless nothing is lost and the extra rows are those."""
    verdict = ledger.check(landed_payloads)
    tally.add_verdict(verdict)
    assert verdict.published > 0, "nothing was published"
    if possible_duplicates is None:
        assert verdict.exactly_once, verdict.problems()
    else:
        assert verdict.at_least_once, verdict.problems()
        assert verdict.extra == possible_duplicates, (
            f"{verdict.extra} extra rows, {possible_duplicates} counted: {verdict.problems()}"
        )
    return verdict
