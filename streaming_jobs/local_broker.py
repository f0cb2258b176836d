"""A local Mosquitto broker for the demo, the tests and the benchmarks.

`MosquittoBroker` runs one `mosquitto` process on a free loopback port with a
config file it writes into its own work directory, and can stop, kill and
restart it on the same port with the same persistence directory. The binary
comes from `make setup` (Debian's `mosquitto` package).
"""

from __future__ import annotations

import atexit
import logging
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_LOG_TYPES: tuple[str, ...] = (
    "error",
    "warning",
    "notice",
    "information",
    "subscribe",
    "unsubscribe",
)
# Debian installs mosquitto in /usr/sbin, which is not on every user's PATH.
_EXTRA_BIN_DIRS: tuple[str, ...] = ("/usr/sbin", "/usr/local/sbin")
_PERSISTENCE_FILE = "mosquitto.db"
_PORT_ATTEMPTS = 5

# Running brokers, kept referenced so the exit hook can still kill them.
_live_brokers: set[MosquittoBroker] = set()


class BrokerError(RuntimeError):
    """A broker could not be configured, started or stopped."""


class MissingToolError(BrokerError):
    """A system binary the test helpers need is not installed."""


def find_tool(name: str) -> str:
    """Return the path of system binary `name`, looking on PATH and in the sbin dirs."""
    found = shutil.which(name)
    if found:
        return found
    for directory in _EXTRA_BIN_DIRS:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    where = f" or in {', '.join(_EXTRA_BIN_DIRS)}" if _EXTRA_BIN_DIRS else ""
    raise MissingToolError(f"`{name}` was not found on PATH{where}; run `make setup` to install it")


def find_mosquitto() -> str:
    """Return the path of the `mosquitto` broker binary."""
    return find_tool("mosquitto")


def free_port(host: str = LOOPBACK) -> int:
    """Return a TCP port on `host` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_accepts(host: str, port: int, timeout: float = 0.2) -> bool:
    """Return True when a TCP connection to host:port succeeds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _run(cmd: Sequence[str], cwd: Path | None = None) -> None:
    """Run a helper command, raising BrokerError with its output on failure."""
    try:
        subprocess.run(list(cmd), cwd=cwd, check=True, capture_output=True, text=True, timeout=60)
    except subprocess.CalledProcessError as exc:
        raise BrokerError(
            f"command failed ({exc.returncode}): {' '.join(cmd)}\n{exc.stdout}{exc.stderr}"
        ) from exc


@dataclass(frozen=True)
class TlsListener:
    """Settings for a broker's TLS listener; paths are PEM files."""

    cafile: Path
    certfile: Path
    keyfile: Path
    require_certificate: bool = False


class MosquittoBroker:
    """One `mosquitto` process listening on 127.0.0.1, with its files in `workdir`.

    Nothing runs until `start()` (or `with broker:`). The plain listener's port
    and the optional TLS listener's port are chosen on the first start and kept
    across `restart()`, as are the persistence directory and the log file.
    `extra_config` lines are written verbatim before the listeners, so they
    should be global options.
    """

    host = LOOPBACK

    def __init__(
        self,
        workdir: Path | str | None = None,
        *,
        max_queued_messages: int = 1_000_000,
        max_inflight_messages: int = 20,
        persistence: bool = False,
        autosave_interval: int | None = None,
        users: Mapping[str, str] | None = None,
        allow_anonymous: bool | None = None,
        tls: TlsListener | None = None,
        log_types: Iterable[str] = DEFAULT_LOG_TYPES,
        extra_config: Sequence[str] = (),
        start_timeout: float = 15.0,
        stop_timeout: float = 15.0,
    ) -> None:
        if max_queued_messages < 0 or max_inflight_messages < 0:
            raise ValueError("queue and inflight limits must be >= 0")
        self._binary = find_mosquitto()
        self._owns_workdir = workdir is None
        self._workdir = Path(
            tempfile.mkdtemp(prefix="mosquitto-") if workdir is None else workdir
        ).resolve()
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.max_queued_messages = max_queued_messages
        self.max_inflight_messages = max_inflight_messages
        self.persistence = persistence
        self.autosave_interval = autosave_interval
        self.users: dict[str, str] = dict(users or {})
        self.allow_anonymous = not self.users if allow_anonymous is None else allow_anonymous
        self.tls = tls
        self.log_types = tuple(log_types)
        self.extra_config = tuple(extra_config)
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self._port: int | None = None
        self._tls_port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._last_returncode: int | None = None
        self._crashed_returncode: int | None = None
        self._starts = 0

    # -- paths and addresses -------------------------------------------------

    @property
    def workdir(self) -> Path:
        """Directory holding the config, log, password file and persistence data."""
        return self._workdir

    @property
    def config_path(self) -> Path:
        """The generated `mosquitto.conf`."""
        return self._workdir / "mosquitto.conf"

    @property
    def log_path(self) -> Path:
        """File receiving the broker's stdout and stderr across all starts."""
        return self._workdir / "mosquitto.log"

    @property
    def password_path(self) -> Path | None:
        """The password file, when the broker was given users."""
        return self._workdir / "passwords" if self.users else None

    @property
    def persistence_dir(self) -> Path:
        """Directory of the persistence database (used when persistence is on)."""
        return self._workdir / "persistence"

    @property
    def persistence_file(self) -> Path:
        """The persistence database file itself."""
        return self.persistence_dir / _PERSISTENCE_FILE

    @property
    def port(self) -> int:
        """TCP port of the plain listener (known once started)."""
        if self._port is None:
            raise BrokerError("broker has not been started yet")
        return self._port

    @property
    def tls_port(self) -> int:
        """TCP port of the TLS listener (known once started with `tls`)."""
        if self.tls is None:
            raise BrokerError("broker has no TLS listener")
        if self._tls_port is None:
            raise BrokerError("broker has not been started yet")
        return self._tls_port

    @property
    def url(self) -> str:
        """`tcp://127.0.0.1:PORT` of the plain listener."""
        return f"tcp://{self.host}:{self.port}"

    @property
    def tls_url(self) -> str:
        """`ssl://127.0.0.1:PORT` of the TLS listener."""
        return f"ssl://{self.host}:{self.tls_port}"

    # -- process state ------------------------------------------------------

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
        """True if the process ever exited without `stop()`/`kill()` asking it to."""
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
        """Start the broker and wait until its listeners accept TCP connections."""
        if self.running:
            raise BrokerError(f"broker {self.url} is already running")
        self._note_unexpected_exit()
        first = self._port is None
        attempts = _PORT_ATTEMPTS if first else 1
        for attempt in range(1, attempts + 1):
            if first:
                self._pick_ports()
                self._write_files()
            log_offset = self._spawn()
            try:
                self._wait_ready(log_offset)
                break
            except BrokerError:
                retry = (
                    first
                    and attempt < attempts
                    and "Address already in use" in self._log_since(log_offset)
                )
                if not retry:
                    raise
                log.info("port taken before mosquitto could bind it; choosing another")
        log.info("mosquitto %s started (pid %s)", self.url, self.pid)
        return self

    def stop(self, timeout: float | None = None) -> int | None:
        """Stop with SIGTERM (persistence is saved); SIGKILL if it does not exit in time."""
        proc = self._take_process()
        if proc is None:
            return self._last_returncode
        limit = self.stop_timeout if timeout is None else timeout
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            log.warning("mosquitto %s ignored SIGTERM for %.1fs; killing it", self.url, limit)
            proc.kill()
            code = proc.wait()
        return self._ended(code)

    def kill(self) -> int | None:
        """Kill with SIGKILL: no persistence save, no goodbye to clients."""
        proc = self._take_process()
        if proc is None:
            return self._last_returncode
        proc.kill()
        return self._ended(proc.wait())

    def restart(self, *, hard: bool = False) -> Self:
        """Stop (or with `hard=True`, kill) and start again on the same ports and files."""
        if hard:
            self.kill()
        else:
            self.stop()
        return self.start()

    def save_persistence(self, timeout: float = 10.0) -> None:
        """Make the broker write its persistence database now (SIGUSR1) and wait for it."""
        if not self.persistence:
            raise BrokerError("broker was started without persistence")
        if self._proc is None or not self.running:
            raise BrokerError("broker is not running")
        before = self._db_signature()
        self._proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while self._db_signature() == before:
            if time.monotonic() > deadline:
                raise BrokerError(
                    f"persistence file not rewritten within {timeout}s\n{self.log_text()}"
                )
            if not self.running:
                raise BrokerError(f"broker exited while saving\n{self.log_text()}")
            time.sleep(0.01)

    def close(self) -> None:
        """Stop the broker and delete the work directory if this object created it."""
        self.stop()
        _live_brokers.discard(self)
        if self._owns_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)

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
        return f"MosquittoBroker({where}, workdir={str(self._workdir)!r})"

    # -- internals -----------------------------------------------------------

    def _pick_ports(self) -> None:
        self._port = free_port(self.host)
        if self.tls is not None:
            port = free_port(self.host)
            while port == self._port:
                port = free_port(self.host)
            self._tls_port = port

    def _write_files(self) -> None:
        if self.persistence:
            self.persistence_dir.mkdir(parents=True, exist_ok=True)
        password_path = self.password_path
        if password_path is not None:
            self._write_password_file(password_path)
        self.config_path.write_text(self._config_text())

    def _write_password_file(self, path: Path) -> None:
        passwd = find_tool("mosquitto_passwd")
        path.unlink(missing_ok=True)
        for index, (user, password) in enumerate(self.users.items()):
            create = ["-c"] if index == 0 else []
            _run([passwd, "-b", *create, str(path), user, password])
        path.chmod(0o600)

    def _config_text(self) -> str:
        def flag(value: bool) -> str:
            return "true" if value else "false"

        lines = [
            "# Generated for one test broker; rewritten on every first start.",
            # As root, mosquitto would otherwise drop to the `mosquitto` user,
            # which cannot write the persistence directory. Ignored when not root.
            f"user {pwd.getpwuid(os.getuid()).pw_name}",
            "log_dest stderr",
            *(f"log_type {kind}" for kind in self.log_types),
            "log_timestamp true",
            "log_timestamp_format %Y-%m-%dT%H:%M:%S",
            "connection_messages true",
            f"max_queued_messages {self.max_queued_messages}",
            "max_queued_bytes 0",
            f"max_inflight_messages {self.max_inflight_messages}",
            f"persistence {flag(self.persistence)}",
            f"persistence_location {self.persistence_dir}/",
            f"persistence_file {_PERSISTENCE_FILE}",
        ]
        if self.autosave_interval is not None:
            lines.append(f"autosave_interval {self.autosave_interval}")
        lines.append(f"allow_anonymous {flag(self.allow_anonymous)}")
        if self.password_path is not None:
            lines.append(f"password_file {self.password_path}")
        lines.extend(self.extra_config)
        lines += ["", f"listener {self.port} {self.host}"]
        if self.tls is not None:
            lines += [
                "",
                f"listener {self.tls_port} {self.host}",
                f"cafile {self.tls.cafile}",
                f"certfile {self.tls.certfile}",
                f"keyfile {self.tls.keyfile}",
                f"require_certificate {flag(self.tls.require_certificate)}",
            ]
        return "\n".join(lines) + "\n"

    def _spawn(self) -> int:
        """Start the process; return the log offset where this run's output begins."""
        self._starts += 1
        with self.log_path.open("ab") as log_file:
            offset = log_file.tell()
            log_file.write(f"--- start #{self._starts} ---\n".encode())
            log_file.flush()
            self._proc = subprocess.Popen(
                [self._binary, "-c", str(self.config_path)],
                cwd=self._workdir,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _live_brokers.add(self)
        return offset

    def _wait_ready(self, log_offset: int) -> None:
        ports = [self.port] + ([self.tls_port] if self.tls is not None else [])
        deadline = time.monotonic() + self.start_timeout
        pending = list(ports)
        while pending:
            if self._proc is None or self._proc.poll() is not None:
                code = self._proc.returncode if self._proc is not None else None
                self._proc = None
                self._last_returncode = code
                raise BrokerError(
                    f"mosquitto exited with status {code} while starting on {ports}; "
                    f"log {self.log_path}:\n{self._log_since(log_offset)}"
                )
            if port_accepts(self.host, pending[0]):
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                proc = self._take_process()
                if proc is not None:
                    proc.kill()
                    self._ended(proc.wait())
                raise BrokerError(
                    f"mosquitto did not accept connections on {ports} within "
                    f"{self.start_timeout}s; log {self.log_path}:\n{self._log_since(log_offset)}"
                )
            time.sleep(0.01)

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
            log.warning("mosquitto %s exited on its own with status %s", self.url, code)
            self._proc = None
            self._last_returncode = code
            self._crashed_returncode = code
            _live_brokers.discard(self)

    def _take_process(self) -> subprocess.Popen[bytes] | None:
        self._note_unexpected_exit()
        proc, self._proc = self._proc, None
        return proc

    def _ended(self, code: int) -> int:
        self._last_returncode = code
        _live_brokers.discard(self)
        log.info("mosquitto %s stopped with status %s", self.url, code)
        return code

    def _db_signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.persistence_file.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)


@atexit.register
def _kill_leftover_brokers() -> None:
    """Never leave broker processes behind when the interpreter exits."""
    for broker in list(_live_brokers):
        try:
            broker.kill()
        except Exception:  # pragma: no cover - best effort at exit
            log.exception("could not kill %r", broker)
