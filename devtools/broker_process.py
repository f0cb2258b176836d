"""One broker process on a loopback port, its output in a log file.

:class:`BrokerProcess` is what every local broker shares (Mosquitto, and the other brokers of
the interop tests): the ports are chosen on the first start (other ones when the broker finds a
port taken) and kept across restarts; a start returns once the broker is ready; a stop is
SIGTERM, then SIGKILL when the broker does not exit within its stop timeout; an exit nobody
asked for is noted as a crash; and no broker outlives the interpreter.
"""

from __future__ import annotations

import atexit
import logging
import shlex
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Self

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
PORT_ATTEMPTS = 5
"""Starts tried on new ports when the broker finds its port taken before it could bind it."""
_ADDRESS_IN_USE = ("address already in use", "eaddrinuse")
_POLL_INTERVAL = 0.01

# Running brokers, kept referenced so the exit hook can still kill them.
_live: set[BrokerProcess] = set()


class BrokerError(RuntimeError):
    """A broker could not be configured, started or stopped."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_accepts(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when a TCP connection to ``host:port`` succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class BrokerProcess(ABC):
    """A broker process on 127.0.0.1, its stdout and stderr appended to ``<workdir>/<name>.log``.

    A subclass says how to run it (:meth:`_command`) and, when it listens on more than one
    port or writes files that name its port, overrides :meth:`_choose_ports`. The broker is
    ready when every port of :meth:`_ports` accepts TCP connections and, when ``ready_text``
    is given, the broker has logged it since this start.
    """

    host = LOOPBACK

    def __init__(
        self,
        name: str,
        workdir: Path,
        *,
        ready_text: str | None = None,
        cwd: Path | None = None,
        start_timeout: float,
        stop_timeout: float,
    ) -> None:
        self.name = name
        self._workdir = workdir
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.ready_text = ready_text
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._last_returncode: int | None = None
        self._crashed_returncode: int | None = None
        self._starts = 0

    # -- what a subclass says ------------------------------------------------

    @abstractmethod
    def _command(self) -> list[str]:
        """The broker's command line, for the ports chosen."""

    def _choose_ports(self) -> None:
        """Choose the ports (and write what names them) before each try of the first start."""
        self._port = free_port(self.host)

    def _ports(self) -> list[int]:
        """The ports that must accept connections before the broker counts as ready."""
        return [self.port]

    # -- paths and addresses -------------------------------------------------

    @property
    def workdir(self) -> Path:
        """Directory of the broker's log and of its other files."""
        return self._workdir

    @property
    def log_path(self) -> Path:
        """File receiving the broker's stdout and stderr across all starts."""
        return self._workdir / f"{self.name}.log"

    @property
    def port(self) -> int:
        """TCP port of the plain listener (known once started)."""
        if self._port is None:
            raise BrokerError(f"{self.name} has not been started yet")
        return self._port

    @property
    def url(self) -> str:
        """``tcp://127.0.0.1:PORT`` of the plain listener."""
        return f"tcp://{self.host}:{self.port}"

    # -- process state -------------------------------------------------------

    @property
    def pid(self) -> int | None:
        """PID of the running broker process, or None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        """True while the broker process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def crashed(self) -> bool:
        """True if the process ever exited without :meth:`stop` or :meth:`kill` asking it to."""
        self._note_unexpected_exit()
        return self._crashed_returncode is not None

    @property
    def crash_returncode(self) -> int | None:
        """Exit status of the last unexpected exit, or None if there was none."""
        self._note_unexpected_exit()
        return self._crashed_returncode

    @property
    def returncode(self) -> int | None:
        """Exit status of the last process that ended, or None."""
        self._note_unexpected_exit()
        return self._last_returncode

    def log_text(self) -> str:
        """Everything the broker has logged so far, across restarts."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> Self:
        """Start the broker and wait until it is ready (``start_timeout`` at most)."""
        if self.running:
            raise BrokerError(f"{self.name} {self.url} is already running")
        self._note_unexpected_exit()
        first = self._port is None
        attempts = PORT_ATTEMPTS if first else 1
        for attempt in range(1, attempts + 1):
            if first:
                self._choose_ports()
            offset = self._spawn(self._command())
            try:
                self._wait_ready(offset)
                break
            except BrokerError:
                text = self._log_since(offset).lower()
                if attempt == attempts or not any(s in text for s in _ADDRESS_IN_USE):
                    raise
                log.info("port taken before %s could bind it; choosing another", self.name)
        log.info("%s %s started (pid %s)", self.name, self.url, self.pid)
        return self

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM; SIGKILL when the broker has not exited within ``timeout`` (default
        ``stop_timeout``). Returns the exit status of the last process that ended."""
        proc = self._take_process()
        if proc is None:
            return self._last_returncode
        limit = self.stop_timeout if timeout is None else timeout
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            log.warning("%s %s ignored SIGTERM for %.1fs; killing it", self.name, self.url, limit)
            proc.kill()
            code = proc.wait()
        return self._ended(code)

    def kill(self) -> int | None:
        """SIGKILL: no goodbye to clients, nothing saved."""
        proc = self._take_process()
        if proc is None:
            return self._last_returncode
        proc.kill()
        return self._ended(proc.wait())

    def restart(self, *, hard: bool = False) -> Self:
        """Stop (or with ``hard=True``, kill) and start again on the same ports and files."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the broker."""
        self.stop()

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not started"
        return f"{type(self).__name__}({self.name}, {where}, log={str(self.log_path)!r})"

    # -- internals -----------------------------------------------------------

    def _spawn(self, command: list[str]) -> int:
        """Start the process; return the log offset where this start's output begins."""
        self._starts += 1
        with self.log_path.open("ab") as log_file:
            offset = log_file.tell()
            log_file.write(f"--- start #{self._starts}: {shlex.join(command)} ---\n".encode())
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
        ports = self._ports()
        deadline = time.monotonic() + self.start_timeout
        while True:
            proc = self._proc
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                self._proc = None
                self._last_returncode = code
                _live.discard(self)
                raise BrokerError(
                    f"{self.name} exited with status {code} while starting on {ports}; "
                    f"log {self.log_path}:\n{self._log_since(offset)}"
                )
            logged = self.ready_text is None or self.ready_text in self._log_since(offset)
            if logged and all(port_accepts(self.host, port) for port in ports):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerError(
                    f"{self.name} was not ready on {ports} within {self.start_timeout}s; "
                    f"log {self.log_path}:\n{self._log_since(offset)}"
                )
            time.sleep(_POLL_INTERVAL)

    def _log_since(self, offset: int) -> str:
        try:
            with self.log_path.open("rb") as log_file:
                log_file.seek(offset)
                return log_file.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def _note_unexpected_exit(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            code = self._proc.returncode
            log.warning("%s %s exited on its own with status %s", self.name, self.url, code)
            self._proc = None
            self._last_returncode = code
            self._crashed_returncode = code
            _live.discard(self)

    def _take_process(self) -> subprocess.Popen[bytes] | None:
        self._note_unexpected_exit()
        proc, self._proc = self._proc, None
        return proc

    def _ended(self, code: int) -> int:
        self._last_returncode = code
        _live.discard(self)
        log.info("%s %s stopped with status %s", self.name, self.url, code)
        return code


@atexit.register
def _kill_leftover_brokers() -> None:
    """Never leave broker processes behind when the interpreter exits."""
    for broker in list(_live):
        try:
            broker.kill()
        except Exception:  # pragma: no cover - best effort at exit
            log.exception("could not kill %r", broker)
