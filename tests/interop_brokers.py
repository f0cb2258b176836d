"""Brokers other than Mosquitto for the interop tests: mochi-mqtt (Go) and aedes (Node).

`make setup` builds tools/mochi-broker into `.brokers/mochi/mochi-broker` and installs
tools/aedes-broker's lock file into its node_modules. `ExternalBroker` runs one of them on a
free loopback port, its stdout and stderr going to a log file, and waits for the ready line
it prints. Without the toolchain (Go, or Node) the broker is unavailable
(`BrokerUnavailable`: the tests skip, saying why); with the toolchain but nothing built, a
`MissingToolError` points at `make setup`.

`InteropBroker` is the face the interop tests see of any of the three brokers: a name, a
`tcp://` URL and the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from devtools.broker_process import BrokerError, BrokerProcess
from devtools.system_tools import MissingToolError, which

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
MOCHI_BINARY = REPO / ".brokers" / "mochi" / "mochi-broker"
MOCHI_SOURCES = REPO / "tools" / "mochi-broker"
AEDES_DIR = REPO / "tools" / "aedes-broker"
AEDES_SERVER = AEDES_DIR / "server.js"
# Where Go's and Node's official installs put their binaries, outside many users' PATH.
_GO_DIRS = ("/usr/local/go/bin",)
_NODE_DIRS = ("/usr/bin", "/usr/local/bin")


class BrokerUnavailable(BrokerError):
    """The toolchain a broker needs (Go, Node) is not installed: its tests skip."""


def mochi_command(port: int, *, trace: bool = True) -> list[str]:
    """The command line of the mochi-mqtt broker built by `make setup`."""
    if not MOCHI_BINARY.is_file():
        if which("go", _GO_DIRS) is None:
            raise BrokerUnavailable(
                "mochi-mqtt interop tests need Go to build tools/mochi-broker, and no `go` was "
                "found (on PATH or in /usr/local/go/bin)"
            )
        raise MissingToolError(f"{MOCHI_BINARY} was not built; run `make setup`")
    newest_source = max(p.stat().st_mtime for p in MOCHI_SOURCES.iterdir() if p.is_file())
    if MOCHI_BINARY.stat().st_mtime < newest_source:
        log.warning("%s is older than tools/mochi-broker: run `make setup`", MOCHI_BINARY)
    return [str(MOCHI_BINARY), "-port", str(port), *(["-trace"] if trace else [])]


def aedes_command(port: int, *, trace: bool = True) -> list[str]:
    """The command line of the aedes broker installed by `make setup`."""
    node = which("node", _NODE_DIRS)
    if node is None:
        raise BrokerUnavailable("aedes interop tests need Node.js, and no `node` was found on PATH")
    if not (AEDES_DIR / "node_modules" / "aedes" / "package.json").is_file():
        raise MissingToolError(f"aedes is not installed in {AEDES_DIR}; run `make setup`")
    return [node, str(AEDES_SERVER), str(port), *(["--trace"] if trace else [])]


class ExternalBroker(BrokerProcess):
    """One broker process on 127.0.0.1, started from `command(port)`, logging to
    `<workdir>/<name>.log` (the process itself: `devtools.broker_process`).

    `start()` picks a free port (another one if the broker finds it taken) and returns once
    the broker printed `ready_text` and accepts TCP connections.
    """

    def __init__(
        self,
        name: str,
        command: Callable[[int], list[str]],
        workdir: Path | str,
        *,
        ready_text: str,
        cwd: Path | None = None,
        start_timeout: float = 20.0,
        stop_timeout: float = 10.0,
    ) -> None:
        super().__init__(
            name,
            Path(workdir),
            ready_text=ready_text,
            cwd=cwd,
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
        )
        self._command_for = command

    def _command(self) -> list[str]:
        return self._command_for(self.port)


def mochi_broker(workdir: Path | str, *, trace: bool = True) -> ExternalBroker:
    """A mochi-mqtt broker (not started) logging into `workdir`."""
    return ExternalBroker(
        "mochi",
        lambda port: mochi_command(port, trace=trace),
        workdir,
        ready_text="mochi-broker ready on",
    )


def aedes_broker(workdir: Path | str, *, trace: bool = True) -> ExternalBroker:
    """An aedes broker (not started) logging into `workdir`."""
    return ExternalBroker(
        "aedes",
        lambda port: aedes_command(port, trace=trace),
        workdir,
        ready_text="aedes-broker ready on",
        cwd=AEDES_DIR,
    )


@dataclass(frozen=True)
class InteropBroker:
    """A running broker of any kind, as the interop tests see it."""

    name: str
    broker: BrokerProcess

    @property
    def url(self) -> str:
        """`tcp://127.0.0.1:PORT`."""
        return self.broker.url

    @property
    def log_path(self) -> Path:
        """The broker's log file."""
        return self.broker.log_path

    def log_text(self) -> str:
        """Everything the broker has logged so far."""
        return self.broker.log_text()

    def __str__(self) -> str:
        return f"{self.name} at {self.url}"
