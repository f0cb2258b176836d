"""Shared fixtures: real Mosquitto brokers, the interop brokers and throwaway TLS material;
the Spark fixtures (``spark``, ``dirs``) come from the plugin :mod:`tests.support.spark_fixtures`.

A missing `mosquitto` or `openssl` makes the fixture fail (pointing at
`make setup`); nothing is skipped. The interop brokers (mochi-mqtt, aedes) skip only when
their toolchain (Go, Node) is not installed; when it is, a broker `make setup` did not build
fails the test the same way. When a test fails, the logs of the brokers it started are
attached to its report.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.interop_brokers import (
    BrokerUnavailable,
    ExternalBroker,
    MochiBroker,
    aedes_broker,
    mochi_broker,
)
from devtools.s3_server import S3Server, use_test_credentials
from tests.support.brokers import (
    DEFAULT_LOG_TYPES,
    BrokerFactory,
    InteropBroker,
    MissingToolError,
    MosquittoBroker,
    Pki,
    make_test_pki,
)

pytest_plugins = ["tests.support.spark_fixtures"]

# Before any Spark JVM or S3 client starts, so that both inherit them (devtools/s3_server.py).
use_test_credentials()

TESTS_DIR = Path(__file__).resolve().parent
BROKER_FIXTURES = frozenset({"mosquitto", "broker_factory", "s3", "s3_wal"})
# Tests in these subdirectories get the marker of the same name.
MARKED_DIRS = {
    "integration": "integration",
    "spark": "spark",
    "interop": "interop",
    "packaging": "spark",
    "cluster": "spark",
    "connect": "spark",
    "pipelines": "spark",
}
INTEROP_BROKERS = ("mosquitto", "mochi", "aedes")
LOG_TAIL_CHARS = 20_000

_factories_key = pytest.StashKey[BrokerFactory]()
_external_key = pytest.StashKey[list[ExternalBroker]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark broker-using tests `integration`, and tests by directory (markers: pyproject.toml)."""
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
    if report.failed:
        for external in item.stash.get(_external_key, []):
            text = external.log_text()
            if len(text) > LOG_TAIL_CHARS:
                text = "[...]\n" + text[-LOG_TAIL_CHARS:]
            report.sections.append((f"{external.name} log {external.log_path}", text))
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


def _run_external(
    request: pytest.FixtureRequest, broker: ExternalBroker
) -> Iterator[ExternalBroker]:
    """Start `broker` for one test (skip without its toolchain) and stop it at teardown."""
    try:
        broker.start()
    except BrokerUnavailable as exc:
        pytest.skip(str(exc))
    except MissingToolError as exc:
        pytest.fail(f"{broker.name} interop tests need `make setup`: {exc}", pytrace=False)
    request.node.stash.setdefault(_external_key, []).append(broker)
    yield broker
    crashed = broker.crash_returncode
    broker.stop()
    if crashed is not None:
        pytest.fail(
            f"{broker!r} exited unexpectedly with status {crashed}; see {broker.log_path}",
            pytrace=False,
        )


@pytest.fixture
def mochi(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExternalBroker]:
    """A running mochi-mqtt broker (tools/mochi-broker), tracing QoS 1/2 packets to its log."""
    yield from _run_external(request, mochi_broker(tmp_path / "brokers" / "mochi"))


@pytest.fixture
def mochi_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., MochiBroker]]:
    """Call with `mochi_broker` keyword arguments (`listeners=("ws",)`, `tls=MochiTls(...)`)
    to start a mochi-mqtt broker; each is stopped at teardown, as the `mochi` fixture's."""
    runs: list[Iterator[ExternalBroker]] = []

    def start(**options: Any) -> MochiBroker:
        broker = mochi_broker(tmp_path / "brokers" / f"mochi-{len(runs)}", **options)
        run = _run_external(request, broker)
        next(run)
        runs.append(run)
        return broker

    yield start
    for run in reversed(runs):
        next(run, None)


@pytest.fixture
def aedes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExternalBroker]:
    """A running aedes broker (tools/aedes-broker), tracing QoS 1/2 packets to its log."""
    yield from _run_external(request, aedes_broker(tmp_path / "brokers" / "aedes"))


@pytest.fixture(params=INTEROP_BROKERS)
def interop_broker(request: pytest.FixtureRequest) -> InteropBroker:
    """Each of Mosquitto, mochi-mqtt and aedes in turn, with `.url` and `.log_text()`."""
    name: str = request.param
    if name == "mosquitto":
        # With `debug`, Mosquitto logs every packet it sends and receives (DUP flag, id).
        factory: BrokerFactory = request.getfixturevalue("broker_factory")
        return InteropBroker(name, factory(log_types=(*DEFAULT_LOG_TYPES, "debug")))
    return InteropBroker(name, request.getfixturevalue(name))


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A test CA with server and client certificates, plus an unrelated CA."""
    try:
        return make_test_pki(tmp_path_factory.mktemp("pki"))
    except MissingToolError as exc:
        problem = str(exc)
    pytest.fail(f"TLS tests need system tools: {problem}", pytrace=False)


S3_BUCKET = "wal"


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """An S3-compatible server (s3proxy) for the whole run, with the bucket ``wal``."""
    try:
        server = S3Server(tmp_path_factory.mktemp("s3"))
    except FileNotFoundError as exc:
        pytest.fail(f"object storage tests need s3proxy: {exc}", pytrace=False)
    server.start()
    server.make_bucket(S3_BUCKET)
    yield server
    server.close()


@pytest.fixture
def s3_wal(s3: S3Server, request: pytest.FixtureRequest) -> str:
    """A ``walPath`` on the S3 server under a prefix of this test's own."""
    prefix = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return s3.uri(S3_BUCKET, f"{prefix}-{id(request)}")
