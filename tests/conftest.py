"""Shared fixtures: real Mosquitto brokers and throwaway TLS material.

A missing `mosquitto` or `openssl` makes the fixture fail (pointing at
`make setup`); nothing is skipped. When a test fails, the logs of the brokers
it started are attached to its report.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import BrokerFactory, MissingToolError, MosquittoBroker, Pki, make_test_pki

TESTS_DIR = Path(__file__).resolve().parent
BROKER_FIXTURES = frozenset({"mosquitto", "broker_factory"})
MARKERS = {
    "integration": "needs a real Mosquitto broker",
    "spark": "needs a local Spark session with Delta",
}
# Tests in these subdirectories get the marker of the same name.
MARKED_DIRS = {"integration": "integration", "spark": "spark"}
LOG_TAIL_CHARS = 20_000

_factories_key = pytest.StashKey[BrokerFactory]()


def pytest_configure(config: pytest.Config) -> None:
    """Register the project's markers unless the ini file already does."""
    known = {line.split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")}
    for name, doc in MARKERS.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {doc}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark broker-using tests `integration`, and tests by directory."""
    for item in items:
        if BROKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
        try:
            top = item.path.resolve().relative_to(TESTS_DIR).parts[0]
        except (ValueError, IndexError):
            continue
        marker = MARKED_DIRS.get(top)
        if marker is not None:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the tail of each broker's log to a failed test's report."""
    report = yield
    factory = item.stash.get(_factories_key, None)
    if report.failed and factory is not None:
        for broker in factory.brokers:
            text = broker.log_text()
            if len(text) > LOG_TAIL_CHARS:
                text = "[...]\n" + text[-LOG_TAIL_CHARS:]
            report.sections.append((f"mosquitto log {broker.log_path}", text))
    return report


class _FixtureBrokerFactory(BrokerFactory):
    """BrokerFactory whose missing-binary errors fail the test with a setup hint."""

    def __call__(self, **options: Any) -> MosquittoBroker:
        try:
            return super().__call__(**options)
        except MissingToolError as exc:
            problem = str(exc)
        pytest.fail(f"Mosquitto integration tests need system tools: {problem}", pytrace=False)


@pytest.fixture
def broker_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerFactory]:
    """Call with `MosquittoBroker` keyword arguments to start a broker; all stop at teardown."""
    factory = _FixtureBrokerFactory(tmp_path / "brokers")
    request.node.stash[_factories_key] = factory
    yield factory
    crashed = factory.close_all()
    if crashed:
        pytest.fail("\n\n".join(crashed), pytrace=False)


@pytest.fixture
def mosquitto(broker_factory: BrokerFactory) -> MosquittoBroker:
    """A running broker with the default configuration (anonymous, no persistence)."""
    return broker_factory()


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A test CA with server and client certificates, plus an unrelated CA."""
    try:
        return make_test_pki(tmp_path_factory.mktemp("pki"))
    except MissingToolError as exc:
        problem = str(exc)
    pytest.fail(f"TLS tests need system tools: {problem}", pytrace=False)
