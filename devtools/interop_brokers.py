"""Brokers other than Mosquitto, for the interop tests and the benchmarks: mochi-mqtt (Go) and
aedes (Node).

`make setup` builds tools/mochi-broker into `.brokers/mochi/mochi-broker` and installs
tools/aedes-broker's lock file into its node_modules. `ExternalBroker` runs one of them on a
free loopback port, its stdout and stderr going to a log file, and waits for the ready line
it prints. Without the toolchain (Go, or Node) the broker is unavailable
(`BrokerUnavailable`: the tests skip, saying why); with the toolchain but nothing built, a
`MissingToolError` points at `make setup`.

`MochiBroker` can open more listeners beside the plain one, each on a free loopback port of its
own: MQTT over WebSocket (`ws_url`), over TLS (`tls_url`, with `MochiTls`: the server
certificate, optionally a client CA and one ALPN protocol) and over WebSocket with TLS
(`wss_url`). Debian's Mosquitto 2.0.11 is built without WebSocket support, so the WebSocket
tests (tests/interop/test_websocket.py) run against mochi-mqtt.

`MochiBroker(inflight_v311=N)` starts mochi with `-inflight-v311 N`: an in-flight window of N
unacknowledged QoS 1/2 messages per MQTT 3.1/3.1.1 client (and the Receive Maximum per MQTT 5
client), a resumed session's backlog included, as Mosquitto 2.0.12+ and EMQX keep one
(tools/mochi-broker/window.go); `window_peaks(client_id)` reads back the most each of that
client's connections had in flight at once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from devtools import REPO_ROOT
from devtools.broker_process import BrokerError, BrokerProcess, free_port
from devtools.system_tools import MissingToolError, which

log = logging.getLogger(__name__)

MOCHI_BINARY = REPO_ROOT / ".brokers" / "mochi" / "mochi-broker"
MOCHI_SOURCES = REPO_ROOT / "tools" / "mochi-broker"
AEDES_DIR = REPO_ROOT / "tools" / "aedes-broker"
AEDES_SERVER = AEDES_DIR / "server.js"
# Where Go's and Node's official installs put their binaries, outside many users' PATH.
_GO_DIRS = ("/usr/local/go/bin",)
_NODE_DIRS = ("/usr/bin", "/usr/local/bin")


class BrokerUnavailable(BrokerError):
    """The toolchain a broker needs (Go, Node) is not installed: its tests skip."""


@dataclass(frozen=True)
class MochiTls:
    """The TLS side of mochi's `-tls-port` and `-wss-port` listeners: the server certificate
    and key, with `client_ca` client certificates signed by that CA required, with `alpn` the
    one ALPN protocol the `-tls-port` listener accepts (a client offering others is refused)."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    alpn: str | None = None

    def flags(self) -> list[str]:
        """mochi-broker's flags for these settings."""
        out = ["-tls-cert", str(self.cert), "-tls-key", str(self.key)]
        if self.client_ca is not None:
            out += ["-tls-client-ca", str(self.client_ca)]
        if self.alpn is not None:
            out += ["-alpn", self.alpn]
        return out


def mochi_command(
    port: int,
    *,
    trace: bool = True,
    listeners: Mapping[str, int] | None = None,
    tls: MochiTls | None = None,
    inflight_v311: int = 0,
) -> list[str]:
    """The command line of the mochi-mqtt broker built by `make setup`; `listeners` maps
    `ws`, `tls` and `wss` to the ports of those listeners, and the TLS ones need `tls`;
    `inflight_v311` > 0 gives every client an in-flight window (`-inflight-v311`)."""
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
    extra = [token for kind, p in (listeners or {}).items() for token in (f"-{kind}-port", str(p))]
    if tls is not None:
        extra += tls.flags()
    if inflight_v311:
        extra += ["-inflight-v311", str(inflight_v311)]
    return [str(MOCHI_BINARY), "-port", str(port), *extra, *(["-trace"] if trace else [])]


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


class MochiBroker(ExternalBroker):
    """A mochi-mqtt broker with a plain listener and, as asked, WebSocket and TLS ones, each on
    a free loopback port chosen on the first start and kept across restarts."""

    LISTENERS = {"ws": "ws", "tls": "ssl", "wss": "wss"}
    """mochi-broker's listener kinds (`-<kind>-port`) and the URL scheme of each."""

    def __init__(
        self,
        workdir: Path | str,
        *,
        trace: bool = True,
        listeners: Sequence[str] = (),
        tls: MochiTls | None = None,
        inflight_v311: int = 0,
    ) -> None:
        unknown = set(listeners) - set(self.LISTENERS)
        if unknown:
            raise ValueError(f"unknown mochi listeners {sorted(unknown)}")
        if tls is None and {"tls", "wss"} & set(listeners):
            raise ValueError("TLS listeners need `tls`")
        if not 0 <= inflight_v311 <= 0xFFFF:
            raise ValueError(f"inflight_v311 must be 0 to 65535, got {inflight_v311}")
        super().__init__(
            "mochi",
            lambda port: mochi_command(
                port,
                trace=trace,
                listeners=self.listener_ports,
                tls=tls,
                inflight_v311=inflight_v311,
            ),
            workdir,
            ready_text="mochi-broker ready on",
        )
        self.kinds = tuple(listeners)
        self.listener_ports: dict[str, int] = {}
        self.inflight_v311 = inflight_v311

    def _choose_ports(self) -> None:
        super()._choose_ports()
        taken = {self.port}
        self.listener_ports = {}
        for kind in self.kinds:
            port = free_port(self.host)
            while port in taken:
                port = free_port(self.host)
            taken.add(port)
            self.listener_ports[kind] = port

    def _ports(self) -> list[int]:
        return [self.port, *self.listener_ports.values()]

    def listener_url(self, kind: str, host: str | None = None) -> str:
        """`ws://`, `ssl://` or `wss://` URL of listener `kind` (`ws`, `tls`, `wss`), at `host`
        (by default 127.0.0.1; `localhost` matches the test certificate's name too)."""
        if kind not in self.listener_ports:
            raise BrokerError(f"mochi was not started with a {kind} listener")
        return f"{self.LISTENERS[kind]}://{host or self.host}:{self.listener_ports[kind]}"

    @property
    def ws_url(self) -> str:
        """`ws://127.0.0.1:PORT` of the WebSocket listener (any request path is served)."""
        return self.listener_url("ws")

    def windows_closed(self, client_id: str) -> list[WindowClosed]:
        """What the in-flight window (`inflight_v311`) logged at the end of each of
        `client_id`'s connections so far, oldest first."""
        return window_closures(self.log_text(), client_id)


def mochi_broker(
    workdir: Path | str,
    *,
    trace: bool = True,
    listeners: Sequence[str] = (),
    tls: MochiTls | None = None,
    inflight_v311: int = 0,
) -> MochiBroker:
    """A mochi-mqtt broker (not started) logging into `workdir`, with the plain listener and
    the `listeners` asked for (`ws`, `tls`, `wss`; the TLS ones with `tls`), and with
    `inflight_v311` > 0 an in-flight window per client."""
    return MochiBroker(
        workdir, trace=trace, listeners=listeners, tls=tls, inflight_v311=inflight_v311
    )


@dataclass(frozen=True)
class WindowClosed:
    """mochi's `in-flight window closed` line (`-inflight-v311`) for one connection: its
    window, the most messages it had unacknowledged at once, those still unacknowledged and
    the session's queue (unacknowledged included) when it ended."""

    window: int
    peak_in_flight: int
    in_flight: int
    queued: int


_WINDOW_CLOSED = "in-flight window closed"
_LOG_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


def window_closures(log_text: str, client_id: str) -> list[WindowClosed]:
    """The `in-flight window closed` lines of `client_id` in a mochi log, oldest first."""
    found = []
    for line in log_text.splitlines():
        if f'msg="{_WINDOW_CLOSED}"' not in line:
            continue
        fields = {key: value.strip('"') for key, value in _LOG_FIELD.findall(line)}
        if fields.get("client") == client_id:
            found.append(
                WindowClosed(
                    int(fields["window"]),
                    int(fields["peak_in_flight"]),
                    int(fields["in_flight"]),
                    int(fields["queued"]),
                )
            )
    return found


def aedes_broker(workdir: Path | str, *, trace: bool = True) -> ExternalBroker:
    """An aedes broker (not started) logging into `workdir`."""
    return ExternalBroker(
        "aedes",
        lambda port: aedes_command(port, trace=trace),
        workdir,
        ready_text="aedes-broker ready on",
        cwd=AEDES_DIR,
    )
