"""A local Mosquitto broker for the demo, the tests and the benchmarks.

:class:`MosquittoBroker` runs one ``mosquitto`` process on a free loopback port with a config
file it writes into its own work directory; it can stop, kill and restart it on the same port
with the same persistence directory (the process itself: :mod:`devtools.broker_process`). The
binary comes from ``make setup`` (Debian's ``mosquitto`` package).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devtools.broker_process import BrokerError, BrokerProcess, free_port
from devtools.system_tools import find_tool, run_tool

DEFAULT_LOG_TYPES: tuple[str, ...] = (
    "error",
    "warning",
    "notice",
    "information",
    "subscribe",
    "unsubscribe",
)
_PERSISTENCE_FILE = "mosquitto.db"


def find_mosquitto() -> str:
    """The path of the ``mosquitto`` broker binary."""
    return find_tool("mosquitto")


@dataclass(frozen=True)
class TlsListener:
    """Settings for a broker's TLS listener; paths are PEM files."""

    cafile: Path
    certfile: Path
    keyfile: Path
    require_certificate: bool = False


class MosquittoBroker(BrokerProcess):
    """One ``mosquitto`` process listening on 127.0.0.1, with its files in ``workdir``.

    Nothing runs until ``start()`` (or ``with broker:``). The plain listener's port and the
    optional TLS listener's port are chosen on the first start and kept across ``restart()``,
    as are the persistence directory and the log file. ``extra_config`` lines are written
    verbatim before the listeners, so they should be global options.
    """

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
        directory = Path(tempfile.mkdtemp(prefix="mosquitto-") if workdir is None else workdir)
        super().__init__(
            "mosquitto",
            directory.resolve(),
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
        )
        self.cwd = self.workdir
        self.max_queued_messages = max_queued_messages
        self.max_inflight_messages = max_inflight_messages
        self.persistence = persistence
        self.autosave_interval = autosave_interval
        self.users: dict[str, str] = dict(users or {})
        self.allow_anonymous = not self.users if allow_anonymous is None else allow_anonymous
        self.tls = tls
        self.log_types = tuple(log_types)
        self.extra_config = tuple(extra_config)
        self._tls_port: int | None = None

    # -- paths and addresses -------------------------------------------------

    @property
    def config_path(self) -> Path:
        """The generated ``mosquitto.conf``."""
        return self.workdir / "mosquitto.conf"

    @property
    def password_path(self) -> Path | None:
        """The password file, when the broker was given users."""
        return self.workdir / "passwords" if self.users else None

    @property
    def persistence_dir(self) -> Path:
        """Directory of the persistence database (used when persistence is on)."""
        return self.workdir / "persistence"

    @property
    def persistence_file(self) -> Path:
        """The persistence database file itself."""
        return self.persistence_dir / _PERSISTENCE_FILE

    @property
    def tls_port(self) -> int:
        """TCP port of the TLS listener (known once started with ``tls``)."""
        if self.tls is None:
            raise BrokerError("broker has no TLS listener")
        if self._tls_port is None:
            raise BrokerError("broker has not been started yet")
        return self._tls_port

    @property
    def tls_url(self) -> str:
        """``ssl://127.0.0.1:PORT`` of the TLS listener."""
        return f"ssl://{self.host}:{self.tls_port}"

    # -- beyond the process's lifecycle --------------------------------------

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
        super().close()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- how to run it ---------------------------------------------------------

    def _command(self) -> list[str]:
        return [self._binary, "-c", str(self.config_path)]

    def _choose_ports(self) -> None:
        super()._choose_ports()
        if self.tls is not None:
            port = free_port(self.host)
            while port == self._port:
                port = free_port(self.host)
            self._tls_port = port
        self._write_files()

    def _ports(self) -> list[int]:
        return [self.port] + ([self.tls_port] if self.tls is not None else [])

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
            run_tool([passwd, "-b", *create, str(path), user, password])
        path.chmod(0o600)

    def _config_text(self) -> str:
        def flag(value: bool) -> str:
            return "true" if value else "false"

        lines = [
            "# Generated for one local broker; rewritten on every first start.",
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

    def _db_signature(self) -> tuple[int, int, int] | None:
        try:
            st = self.persistence_file.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)
