"""Fixtures for ``format("mqtt")`` through Spark Connect: the project's wheel, and Spark Connect
servers whose Python has the connector installed from it, or not at all.

Each server is a ``spark-submit`` process on a free loopback port, its Python a fresh
virtualenv (:class:`tests.support.spark_processes.FreshVenv`) that sees PySpark and the other
dependencies but not the repository: what ``format("mqtt")`` finds there is what a cluster
with the wheel installed, or without it, would find. One server of each kind serves the
module's tests; each test gets its own client session, broker, WAL, checkpoint and table.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.connect.server import ConnectServer, missing_client_modules
from tests.support.spark_processes import FreshVenv, build_wheel


@pytest.fixture(scope="session")
def connector_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once per run from a copy of the sources."""
    return build_wheel(tmp_path_factory.mktemp("connect-wheel"))


def _serve(base: Path, wheels: list[Path]) -> Iterator[ConnectServer]:
    missing = missing_client_modules()
    if missing:
        pytest.fail(
            f"the Spark Connect client needs {', '.join(missing)}: run `make setup` "
            "(the dev extra installs PySpark's connect packages)",
            pytrace=False,
        )
    venv = FreshVenv.create(base / "venv", wheels)
    server = ConnectServer.start(base / "server", venv.python)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server_with_connector(
    tmp_path_factory: pytest.TempPathFactory, connector_wheel: Path
) -> Iterator[ConnectServer]:
    """A Spark Connect server whose Python has the connector's wheel installed."""
    yield from _serve(tmp_path_factory.mktemp("connect-installed"), [connector_wheel])


@pytest.fixture(scope="module")
def server_without_connector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server whose Python has PySpark but not the connector."""
    yield from _serve(tmp_path_factory.mktemp("connect-bare"), [])
