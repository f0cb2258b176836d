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

import atexit
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from streaming_jobs.local_broker import (
    LOOPBACK,
    BrokerError,
    MissingToolError,
    MosquittoBroker,
    free_port,
    port_accepts,
)
from tests.waiting import wait_until

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
MOCHI_BINARY = REPO / ".brokers" / "mochi" / "mochi-broker"
MOCHI_SOURCES = REPO / "tools" / "mochi-broker"
AEDES_DIR = REPO / "tools" / "aedes-broker"
AEDES_SERVER = AEDES_DIR / "server.js"
# Where Go's and Node's official installs put their binaries, outside many users' PATH.
_GO_CANDIDATES = ("/usr/local/go/bin/go",)
_NODE_CANDIDATES = ("/usr/bin/node", "/usr/local/bin/node")
_PORT_ATTEMPTS = 5
_ADDRESS_IN_USE = ("address already in use", "eaddrinuse")

# Running brokers, kept referenced so the exit hook can still kill them.
_live: set[ExternalBroker] = set()


class BrokerUnavailable(BrokerError):
    """The toolchain a broker needs (Go, Node) is not installed: its tests skip."""


def _which(name: str, candidates: Sequence[str]) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def mochi_command(port: int, *, trace: bool = True) -> list[str]:
    """The command line of the mochi-mqtt broker built by `make setup`."""
    if not MOCHI_BINARY.is_file():
        if _which("go", _GO_CANDIDATES) is None:
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
    node = _which("node", _NODE_CANDIDATES)
    if node is None:
        raise BrokerUnavailable("aedes interop tests need Node.js, and no `node` was found on PATH")
    if not (AEDES_DIR / "node_modules" / "aedes" / "package.json").is_file():
        raise MissingToolError(f"aedes is not installed in {AEDES_DIR}; run `make setup`")
    return [node, str(AEDES_SERVER), str(port), *(["--trace"] if trace else [])]


class ExternalBroker:
    """One broker process on 127.0.0.1, started from `command(port)`, logging to `log_path`.

    `start()` picks a free port (another one if the broker finds it taken) and returns once
    the broker printed `ready_text` and accepts TCP connections.
    """

    host = LOOPBACK

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
        self.name = name
        self._command = command
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ready_text = ready_text
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._crash_returncode: int | None = None

    @property
    def log_path(self) -> Path:
        """File receiving the broker's stdout and stderr."""
        return self.workdir / f"{self.name}.log"

    @property
    def port(self) -> int:
        """The listener's port (known once started)."""
        if self._port is None:
            raise BrokerError(f"{self.name} has not been started yet")
        return self._port

    @property
    def url(self) -> str:
        """`tcp://127.0.0.1:PORT`."""
        return f"tcp://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def crash_returncode(self) -> int | None:
        """Exit status if the process ended without `stop()` asking it to, else None."""
        if self._proc is not None and self._proc.poll() is not None:
            self._crash_returncode = self._proc.returncode
        return self._crash_returncode

    def log_text(self) -> str:
        """Everything the broker has logged so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self) -> Self:
        """Start the broker and wait until it is ready (`start_timeout` at most)."""
        if self.running:
            raise BrokerError(f"{self.name} {self.url} is already running")
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self._port = free_port(self.host)
            offset = self._spawn(self._command(self._port))
            try:
                self._wait_ready(offset)
            except BrokerError:
                text = self._log_since(offset).lower()
                if attempt < _PORT_ATTEMPTS and any(s in text for s in _ADDRESS_IN_USE):
                    log.info("port %s taken before %s could bind it", self._port, self.name)
                    continue
                raise
            log.info("%s %s started (pid %s)", self.name, self.url, self._proc.pid)  # type: ignore[union-attr]
            return self
        raise AssertionError("unreachable")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL if the broker has not exited within `stop_timeout`."""
        self.crash_returncode  # noqa: B018 - note an exit that happened on its own
        proc, self._proc = self._proc, None
        _live.discard(self)
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                return proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                log.warning(
                    "%s ignored SIGTERM for %.1fs; killing it", self.name, self.stop_timeout
                )
                proc.kill()
        return proc.wait()

    def kill(self) -> None:
        """SIGKILL, no goodbye."""
        proc, self._proc = self._proc, None
        _live.discard(self)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not started"
        return f"ExternalBroker({self.name}, {where}, log={str(self.log_path)!r})"

    def _spawn(self, command: list[str]) -> int:
        with self.log_path.open("ab") as log_file:
            offset = log_file.tell()
            log_file.write(f"--- {' '.join(command)} ---\n".encode())
            log_file.flush()
            self._proc = subprocess.Popen(
                command,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _live.add(self)
        return offset

    def _wait_ready(self, offset: int) -> None:
        proc = self._proc
        assert proc is not None

        def ready_or_exited() -> bool:
            if proc.poll() is not None:
                return True
            return self.ready_text in self._log_since(offset) and port_accepts(self.host, self.port)

        try:
            wait_until(
                ready_or_exited,
                self.start_timeout,
                interval=0.02,
                message=lambda: f"{self.name} was not ready on port {self.port}",
            )
        except AssertionError as exc:
            self.kill()
            raise BrokerError(f"{exc}; log {self.log_path}:\n{self._log_since(offset)}") from None
        if proc.poll() is not None:
            self._proc = None
            _live.discard(self)
            raise BrokerError(
                f"{self.name} exited with status {proc.returncode} while starting on port "
                f"{self.port}; log {self.log_path}:\n{self._log_since(offset)}"
            )

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as log_file:
                log_file.seek(offset)
                return log_file.read().decode(errors="replace")
        except FileNotFoundError:
            return ""


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
    broker: ExternalBroker | MosquittoBroker

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


@atexit.register
def _kill_leftover_brokers() -> None:
    """Never leave broker processes behind when the interpreter exits."""
    for broker in list(_live):
        try:
            broker.kill()
        except Exception:  # pragma: no cover - best effort at exit
            log.exception("could not kill %r", broker)
