"""A loopback TCP proxy that adds a fixed one-way latency, like a long network link.

``python -m devtools.delay_proxy --listen 127.0.0.1:0 --target 127.0.0.1:PORT --delay-ms 10``

Each accepted connection gets its own connection to the target. Every byte read from one side
is written to the other ``delay`` later, in both directions: data read at time t goes out at
t + delay, in the order it came, and nothing else holds it back, so a round trip through the
proxy takes at least twice the delay while the throughput stays that of the two sockets (a
link with latency, not a slow link). The event loop wakes with a millisecond's granularity, so
bytes go out up to about a millisecond after they are due (a 10 ms proxy measures 20.5 to 21
ms per round trip), never before. The end of a stream is delayed as data is: when one side
closes, the other is closed once everything it sent before has gone out, ``delay`` after the
close. The TCP handshake itself is not delayed (the proxy accepts at once and connects to the
target at once); an MQTT connection's CONNECT and CONNACK are.

Once it listens, the proxy prints one line to stdout, ``delay-proxy ready on 127.0.0.1:PORT ->
127.0.0.1:TARGET, delay 10 ms each way``, and then runs until SIGTERM or SIGINT. It listens on
and connects to IPv4 loopback addresses (127.0.0.0/8) only; anything else is refused.

Design: asyncio protocols, one per socket. Each direction keeps a queue of (due time, bytes)
and one timer for its head: ``data_received`` stamps the bytes with ``loop.time() + delay``
and queues them; the timer writes everything due in one write and re-arms for the next.
Backpressure: when a direction holds more than ``QUEUE_LIMIT`` bytes, or the receiving
socket's write buffer is full, the sending socket is no longer read, so TCP pushes back.

:class:`DelayProxy` runs the proxy as a separate process for benchmarks and tests::

    with DelayProxy(target_port=broker.port, delay_ms=10) as proxy:
        client = MqttClient(proxy.url, ...)
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import ipaddress
import logging
import os
import re
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
READ_LIMIT = 1 << 16
QUEUE_LIMIT = 16 << 20
"""Bytes one direction may hold before the proxy stops reading its sender (backpressure)."""
READY_PREFIX = "delay-proxy ready on "
_READY = re.compile(
    r"delay-proxy ready on (?P<host>[\d.]+):(?P<port>\d+) -> (?P<target>[\d.]+:\d+), "
    r"delay (?P<delay>[\d.]+) ms each way"
)


# ------------------------------------------------------------------------------ addresses


def loopback_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` with HOST an IPv4 loopback address (127.0.0.0/8); raises ValueError for
    anything else (a name, another address, a port out of range)."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not an IP address (names are not resolved)") from None
    if address.version != 4 or not address.is_loopback:
        raise ValueError(f"{host} is not an IPv4 loopback address (127.0.0.0/8): refused")
    port = int(port_text)
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"port {port} is out of range")
    return str(address), port


# ------------------------------------------------------------------------------ the proxy


class _Direction:
    """Bytes on their way from one socket to the other, each with the time it is due."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float, name: str) -> None:
        self.loop = loop
        self.delay = delay
        self.name = name
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.queued_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.source: _Side | None = None
        self.sink: _Side | None = None
        self.finished = False

    def push(self, data: bytes | None) -> None:
        """Queue ``data`` (None: the sender closed) to go out ``delay`` from now."""
        if self.finished:
            return
        self.queue.append((self.loop.time() + self.delay, data))
        if data:
            self.queued_bytes += len(data)
            if self.queued_bytes > QUEUE_LIMIT and self.source is not None:
                self.source.pause("queue")
        if self.timer is None:
            self._arm()

    def _arm(self) -> None:
        self.timer = self.loop.call_at(self.queue[0][0], self._deliver)

    def _deliver(self) -> None:
        self.timer = None
        now = self.loop.time()
        chunks: list[bytes] = []
        closed = False
        while self.queue and self.queue[0][0] <= now:
            _, data = self.queue.popleft()
            if data is None:
                closed = True
                break
            chunks.append(data)
        sink = self.sink
        if chunks and sink is not None:
            payload = b"".join(chunks)
            self.queued_bytes -= len(payload)
            sink.write(payload)
            if self.queued_bytes <= QUEUE_LIMIT // 2 and self.source is not None:
                self.source.resume("queue")
        if closed:
            self.finished = True
            self.queue.clear()
            log.debug("%s: end of stream delivered", self.name)
            if sink is not None:
                sink.close()
            if self.source is not None:
                self.source.close()
            return
        if self.queue:
            self._arm()

    def abort(self) -> None:
        """Drop what is queued (the connection is gone)."""
        self.finished = True
        self.queue.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


class _Side(asyncio.Protocol):
    """One socket of a proxied connection: what it reads goes to ``outgoing``; it writes what
    ``incoming`` delivers."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.outgoing: _Direction | None = None
        self.incoming: _Direction | None = None
        self.paused: set[str] = set()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.paused:
            transport.pause_reading()  # before asyncio starts reading

    def data_received(self, data: bytes) -> None:
        if self.outgoing is not None:
            self.outgoing.push(data)

    def eof_received(self) -> bool:
        if self.outgoing is not None:
            self.outgoing.push(None)
        return True  # keep the socket open until the end of stream is delivered

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if exc is not None:
            log.debug("%s: connection lost: %s", self.name, exc)
        if self.outgoing is not None:
            self.outgoing.push(None)  # the other side closes, delayed like data
        if self.incoming is not None:
            self.incoming.abort()

    # Flow control of the socket this side writes to: stop reading the other socket.
    def pause_writing(self) -> None:
        if self.incoming is not None and self.incoming.source is not None:
            self.incoming.source.pause("write buffer")

    def resume_writing(self) -> None:
        if self.incoming is not None and self.incoming.source is not None:
            self.incoming.source.resume("write buffer")

    def pause(self, reason: str) -> None:
        if self.transport is not None and not self.closed and not self.paused:
            self.transport.pause_reading()
        self.paused.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self.paused:
            return
        self.paused.discard(reason)
        if self.transport is not None and not self.closed and not self.paused:
            self.transport.resume_reading()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()  # after what is buffered has been written


class _Connection:
    """One proxied connection: the client's socket, the target's, a direction each way."""

    def __init__(self, loop: asyncio.AbstractEventLoop, delay: float, number: int) -> None:
        self.client = _Side(f"connection {number}, client")
        self.target = _Side(f"connection {number}, target")
        up = _Direction(loop, delay, f"connection {number}, client -> target")
        down = _Direction(loop, delay, f"connection {number}, target -> client")
        up.source, up.sink = self.client, self.target
        down.source, down.sink = self.target, self.client
        self.client.outgoing = self.target.incoming = up
        self.client.incoming = self.target.outgoing = down


async def serve(
    listen: tuple[str, int],
    target: tuple[str, int],
    delay: float,
    on_ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the proxy until ``stop`` is set; ``on_ready(host, port)`` is called once it
    listens."""
    loop = asyncio.get_running_loop()
    numbers = iter(range(1, 1 << 62))
    tasks: set[asyncio.Task[None]] = set()

    def accepted() -> _Side:
        connection = _Connection(loop, delay, next(numbers))
        client = connection.client
        client.pause("connecting")  # what the client sends waits in the kernel meanwhile
        tasks.add(task := loop.create_task(_connect(connection)))
        task.add_done_callback(tasks.discard)
        return client

    async def _connect(connection: _Connection) -> None:
        client = connection.client
        try:
            await loop.create_connection(lambda: connection.target, *target)
        except OSError as exc:
            log.warning("could not connect to %s:%d: %s", *target, exc)
            client.close()
            return
        if client.closed:
            connection.target.close()
            return
        log.info("%s: connected to %s:%d", client.name, *target)
        client.resume("connecting")

    server = await loop.create_server(accepted, *listen, reuse_address=True)
    try:
        sock = server.sockets[0]
        host, port = sock.getsockname()[:2]
        if on_ready is not None:
            on_ready(host, port)
        await (stop or asyncio.Event()).wait()
    finally:
        server.close()
        await server.wait_closed()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.delay_proxy",
        description="A loopback TCP proxy that delays every byte by a fixed time each way.",
    )
    parser.add_argument(
        "--listen", default=f"{LOOPBACK}:0", help="HOST:PORT to listen on, 127.0.0.0/8 only "
        "(port 0: any free port; the ready line names it)"
    )  # fmt: skip
    parser.add_argument("--target", required=True, help="HOST:PORT to forward to, 127.0.0.0/8")
    parser.add_argument(
        "--delay-ms", type=float, required=True, help="one-way delay in milliseconds (>= 0)"
    )
    parser.add_argument("--verbose", action="store_true", help="log each connection")
    args = parser.parse_args(argv)
    try:
        args.listen = loopback_address(args.listen)
        args.target = loopback_address(args.target)
    except ValueError as exc:
        parser.error(str(exc))
    if args.target[1] == 0:
        parser.error("--target needs a port")
    if not args.delay_ms >= 0:
        parser.error(f"--delay-ms must be >= 0, got {args.delay_ms}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="delay-proxy %(levelname)s %(message)s",
        stream=sys.stderr,
    )

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)

        def announce(host: str, port: int) -> None:
            target = f"{args.target[0]}:{args.target[1]}"
            sys.stdout.write(
                f"{READY_PREFIX}{host}:{port} -> {target}, delay {args.delay_ms:g} ms each way\n"
            )
            sys.stdout.flush()

        await serve(args.listen, args.target, args.delay_ms / 1000, announce, stop)

    try:
        asyncio.run(run())
    except OSError as exc:
        log.error("%s", exc)
        return 1
    return 0


# ------------------------------------------------------------------------------ the wrapper

_live: set[DelayProxy] = set()


class DelayProxy:
    """``python -m devtools.delay_proxy`` as a child process: ``start()`` returns once it
    listens (its port is then :attr:`port`), ``stop()`` ends it (SIGTERM, then SIGKILL).
    Its stderr goes to ``log_path`` (by default a temporary file, quoted in errors)."""

    def __init__(
        self,
        target_port: int,
        delay_ms: float,
        *,
        target_host: str = LOOPBACK,
        log_path: Path | None = None,
        start_timeout: float = 15.0,
    ) -> None:
        self.target = loopback_address(f"{target_host}:{target_port}")
        if not delay_ms >= 0:
            raise ValueError(f"delay_ms must be >= 0, got {delay_ms}")
        self.delay_ms = delay_ms
        self.log_path = log_path
        self.start_timeout = start_timeout
        self.host = LOOPBACK
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def port(self) -> int:
        """The port the proxy listens on (known once started)."""
        if self._port is None:
            raise RuntimeError("the delay proxy has not been started")
        return self._port

    @property
    def url(self) -> str:
        """``tcp://127.0.0.1:PORT``: an MQTT broker URL through the proxy."""
        return f"tcp://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        target = f"{self.target[0]}:{self.target[1]}"
        return [
            sys.executable, "-m", "devtools.delay_proxy", "--listen", f"{self.host}:0",
            "--target", target, "--delay-ms", f"{self.delay_ms:g}",
        ]  # fmt: skip

    def start(self) -> Self:
        if self.running:
            raise RuntimeError("the delay proxy is already running")
        # Closed by stop() or kill().
        if self.log_path is not None:
            self._log = self.log_path.open("ab")
        else:
            self._log = tempfile.TemporaryFile()  # noqa: SIM115
        repo = Path(__file__).resolve().parent.parent
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(repo), os.environ.get("PYTHONPATH", "")) if p
        )}  # fmt: skip
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=repo,
            env=env,
            start_new_session=True,
        )
        _live.add(self)
        try:
            line = self._ready_line()
        except BaseException:
            self.kill()
            raise
        match = _READY.search(line)
        if match is None:
            self.kill()
            raise RuntimeError(f"the delay proxy printed an unexpected line: {line!r}")
        self._port = int(match["port"])
        log.info("delay proxy 127.0.0.1:%d -> %s:%d, %g ms each way", self._port, *self.target,
                 self.delay_ms)  # fmt: skip
        return self

    def _ready_line(self) -> str:
        proc = self._proc
        assert proc is not None and proc.stdout is not None
        deadline = time.monotonic() + self.start_timeout
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while b"\n" not in buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(
                        f"the delay proxy was not ready within {self.start_timeout:g} s: "
                        f"{self._log_text()}"
                    )
                if not selector.select(remaining):
                    continue
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    code = proc.wait()
                    raise RuntimeError(
                        f"the delay proxy exited with status {code} while starting: "
                        f"{self._log_text()}"
                    )
                buffer += chunk
        return buffer.decode(errors="replace").splitlines()[0]

    def _log_text(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; returns the exit status."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        _live.discard(self)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._close_files(proc)
        return proc.returncode

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _live.discard(self)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        self._close_files(proc)

    def _close_files(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.stdout is not None:
            proc.stdout.close()
        if self._log is not None:
            self._log.close()
            self._log = None

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
        self.stop()

    def __repr__(self) -> str:
        where = f"127.0.0.1:{self._port}" if self._port is not None else "not started"
        return f"DelayProxy({where} -> {self.target[0]}:{self.target[1]}, {self.delay_ms:g} ms)"


@atexit.register
def _kill_leftover_proxies() -> None:
    """No proxy process outlives the interpreter that started it."""
    for proxy in list(_live):
        proxy.kill()


if __name__ == "__main__":
    sys.exit(main())
