"""Fixtures of the chaos tests: the marker, the fault proxy, the seed, and the tally of faults
and messages that ``make chaos`` writes to ``bench/results/chaos.json`` (the Spark session and
``dirs`` are :mod:`tests.support.spark_fixtures`').

Each test adds what it did to the session's tally (``tally.add("broker_restarts")``) and checks
its Delta table with :func:`tests.support.ledger.settle`, which adds the
published/landed/lost/duplicated counts and fails the test unless every published message
landed exactly once. When ``CHAOS_RESULTS`` names a file, the tally is written there as one flat
JSON object at the end of the run, with ``machine``, ``seed`` and ``scale``
(:func:`tests.chaos.harness.run_results`). The tally itself
(:class:`~tests.support.ledger.Tally`) and ``settle`` live in ``tests/support/ledger.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devtools.fault_proxy import FaultProxy
from tests.chaos.harness import rng_for, run_results, run_seed, scale
from tests.support.brokers import MosquittoBroker
from tests.support.ledger import Ledger, Tally

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
    path.write_text(json.dumps(run_results(_TALLY), indent=2) + "\n")


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


@pytest.fixture
def proxy_to() -> Iterator[Callable[[MosquittoBroker], FaultProxy]]:
    """Call with a broker to get a :class:`FaultProxy` in front of it; closed at teardown."""
    proxies: list[FaultProxy] = []

    def make(broker: MosquittoBroker) -> FaultProxy:
        proxy = FaultProxy((broker.host, broker.port))
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()
