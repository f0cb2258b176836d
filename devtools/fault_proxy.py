"""A loopback TCP proxy between clients and a broker, with network faults on demand: latency,
cut links, stalls, half-open links, fragmented writes, a broker that never answers or is down,
malformed frames.

Each accepted client connection gets its own connection to the target and a direction each
way (client -> target, target -> client). Every byte read from one side is written to the
other ``delay`` later (by default 0: at once), in the order it came, and nothing else holds it
back, so a round trip through the proxy takes at least twice the delay while the throughput
stays that of the two sockets (a link with latency, not a slow link). The event loop wakes with
a millisecond's granularity, so delayed bytes go out up to about a millisecond after they are
due (a 10 ms proxy measures 20.5 to 21 ms per round trip), never before. The end of a stream
is delayed as data is: when one side closes, the other is closed once everything it sent
before has gone out. The TCP handshake itself is not delayed (the proxy accepts at once and
connects to the target at once); an MQTT connection's CONNECT and CONNACK are.

Faults, the methods of :class:`FaultProxy`:

* ``cut()``: close every current connection at once (both sides, RST), as a dropped link does;
* ``stall()``: stop forwarding on the current connections while their sockets stay open (a
  half-open peer: nothing arrives, nothing fails); ``resume()`` ends it;
* ``hold_upstream()``: stop forwarding what clients send on the current connections while the
  broker's packets still reach them (acknowledgements written, never delivered: the moment a
  link goes half-open between a PUBLISH and its acknowledgement); ``resume()`` ends it;
* ``fragment(size)``: forward in writes of at most ``size`` bytes, so frames arrive split at
  every byte position;
* ``blackhole(True)``: new connections are accepted and read, never answered (a broker that
  takes the TCP connection and never sends CONNACK);
* ``inject(frame)``: slip a malformed MQTT frame into each current broker -> client stream, at
  the next frame boundary after a PUBLISH;
* ``refuse(True)``: new connections are closed at once (the broker is down).

Counters (``stats``) say how many of each fault were applied, for the chaos report.

Two ways to run it:

* :class:`FaultProxy`, in this process on an event loop thread of its own: the faults are its
  methods (the chaos tests, the reconnect benchmark's cut);
* ``python -m devtools.fault_proxy --listen 127.0.0.1:0 --target 127.0.0.1:PORT --delay-ms 10``,
  or :class:`DelayProxy`, which runs that command as a child process: latency only, and no
  interpreter shared with the client being measured (the benchmarks). Once it listens, the
  command prints one line to stdout, ``fault-proxy ready on 127.0.0.1:PORT -> 127.0.0.1:TARGET,
  delay 10 ms each way``, and then runs until SIGTERM or SIGINT.

It listens on and connects to IPv4 loopback addresses (127.0.0.0/8) only.

Design: asyncio protocols, one per socket. Each direction keeps a queue of (due time, bytes)
and one timer for its head: ``data_received`` stamps the bytes with ``loop.time() + delay``
and queues them; the timer writes everything due in one write and re-arms for the next (with
no delay, what is read is written at once). A held direction (stall, hold) keeps its queue and
stops reading its sender. Backpressure: when a direction holds more than ``QUEUE_LIMIT``
bytes, or the receiving socket's write buffer is full, the sending socket is no longer read,
so TCP pushes back.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import collections
import contextlib
import ipaddress
import itertools
import logging
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self, TypeVar

from devtools import REPO_ROOT

log = logging.getLogger(__name__)

T = TypeVar("T")

LOOPBACK = "127.0.0.1"
QUEUE_LIMIT = 16 << 20
"""Bytes one direction may hold before the proxy stops reading its sender (backpressure)."""
CONNECT_TIMEOUT = 5.0
"""Seconds the proxy waits for the target to accept a connection."""
CALL_TIMEOUT = 10.0
"""Seconds a :class:`FaultProxy` method waits for its event loop to apply it."""
MQTT_PUBLISH = 3
READY_PREFIX = "fault-proxy ready on "
_READY = re.compile(
    r"fault-proxy ready on (?P<host>[\d.]+):(?P<port>\d+) -> (?P<target>[\d.]+:\d+), "
    r"delay (?P<delay>[\d.]+) ms each way"
)


@dataclass
class ProxyStats:
    """What the proxy did: connections accepted and faults applied."""

    connections: int = 0
    cuts: int = 0
    """Connections closed by ``cut()``."""
    stalls: int = 0
    """Connections stalled by ``stall()``."""
    fragments: int = 0
    """Writes of at most ``fragment_size`` bytes made while fragmenting."""
    malformed_frames: int = 0
    blackholed: int = 0
    """Connections accepted in blackhole mode (never answered)."""
    refused: int = 0


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


# ------------------------------------------------------------------------------ MQTT frames


class FrameBoundaries:
    """Tracks MQTT fixed headers (section 2.2) in one direction of a stream and reports the
    byte positions in each chunk right after a complete PUBLISH frame."""

    def __init__(self) -> None:
        self._header = bytearray()
        """First byte and remaining-length bytes of the frame being read."""
        self._body_left = -1
        """Bytes of the current frame's body still to come; -1 while reading its header."""

    def after_publish(self, data: bytes) -> list[int]:
        ends: list[int] = []
        i, n = 0, len(data)
        while i < n:
            if self._body_left < 0:
                self._header.append(data[i])
                i += 1
                length = _remaining_length(self._header)
                if length is None:
                    continue
                self._body_left = length
            take = min(self._body_left, n - i)
            i += take
            self._body_left -= take
            if self._body_left == 0:
                if self._header[0] >> 4 == MQTT_PUBLISH:
                    ends.append(i)
                self._header.clear()
                self._body_left = -1
        return ends


def _remaining_length(header: bytearray) -> int | None:
    """The remaining length once the header holds all its bytes (section 2.2.3), else None."""
    if len(header) < 2:
        return None
    value, multiplier = 0, 1
    for byte in header[1:]:
        value += (byte & 0x7F) * multiplier
        if not byte & 0x80:
            return value
        multiplier *= 128
    if len(header) >= 5:  # malformed length: treat as a frame with no body
        return 0
    return None


# ------------------------------------------------------------------------------ the links


class _Direction:
    """Bytes on their way from one socket to the other, each with the time it is due."""

    def __init__(self, link: _Link, delay: float, name: str) -> None:
        self.link = link
        self.loop = link.proxy.loop
        self.delay = delay
        self.name = name
        self.queue: collections.deque[tuple[float, bytes | None]] = collections.deque()
        self.queued_bytes = 0
        self.timer: asyncio.TimerHandle | None = None
        self.source: _Side | None = None
        self.sink: _Side | None = None
        self.finished = False
        self.held = False

    def push(self, data: bytes | None) -> None:
        """Queue ``data`` (None: the sender closed) to go out ``delay`` from now."""
        if self.finished:
            return
        self.queue.append((self.loop.time() + self.delay, data))
        if data:
            self.queued_bytes += len(data)
            if self.queued_bytes > QUEUE_LIMIT and self.source is not None:
                self.source.pause("queue")
        self._schedule()

    def hold(self) -> None:
        """Stop forwarding and stop reading the sender; what is queued stays."""
        self.held = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.source is not None:
            self.source.pause("held")

    def release(self) -> None:
        """Forward again (what came due meanwhile goes out at once)."""
        if not self.held:
            return
        self.held = False
        if self.source is not None:
            self.source.resume("held")
        self._schedule()

    def _schedule(self) -> None:
        if self.held or self.finished or not self.queue or self.timer is not None:
            return
        if self.delay <= 0:
            self._deliver()
        else:
            self.timer = self.loop.call_at(self.queue[0][0], self._on_timer)

    def _on_timer(self) -> None:
        self.timer = None
        self._deliver()

    def _deliver(self) -> None:
        if self.held:
            return
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
        if chunks:
            payload = b"".join(chunks)
            self.queued_bytes -= len(payload)
            if sink is not None:
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
        self._schedule()

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

    def __init__(self, link: _Link, name: str) -> None:
        self.link = link
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.outgoing: _Direction | None = None
        self.incoming: _Direction | None = None
        self.inspect: Callable[[bytes], bytes] | None = None
        """Sees (and may change) what this side reads before it is queued."""
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
        if self.outgoing is None:
            return  # a blackholed connection: read and dropped
        if self.inspect is not None:
            data = self.inspect(data)
        self.outgoing.push(data)

    def eof_received(self) -> bool:
        if self.outgoing is None:
            return False  # close
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
        if self is self.link.client:
            self.link.proxy.forget(self.link)

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
        if self.transport is None or self.closed:
            return
        size = self.link.proxy.fragment_size
        if not size:
            self.transport.write(data)
            return
        for start in range(0, len(data), size):
            self.transport.write(data[start : start + size])
            self.link.proxy.stats.fragments += 1

    def close(self) -> None:
        """Close once what is buffered has been written (an end of stream)."""
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.close()

    def drop(self, *, reset: bool) -> None:
        """Close at once: shut the socket down both ways, with ``reset`` an RST instead of a
        FIN (the peer's next read fails at once)."""
        transport, self.closed = self.transport, True
        if transport is None or transport.is_closing():
            return
        sock = transport.get_extra_info("socket")
        if sock is not None:
            if reset:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        transport.abort()


class _Refused(asyncio.Protocol):
    """A connection closed as soon as it is accepted."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class _Link:
    """One proxied client connection: the client's socket, the target's, a direction each
    way."""

    def __init__(self, proxy: _Proxy, number: int, *, blackhole: bool = False) -> None:
        self.proxy = proxy
        self.number = number
        self.blackholed = blackhole
        self.forwarding = False
        """Connected to the target (a blackholed connection never is)."""
        self.closed = False
        self.client = _Side(self, f"connection {number}, client")
        self.target = _Side(self, f"connection {number}, target")
        self.up = _Direction(self, proxy.delay, f"connection {number}, client -> target")
        self.down = _Direction(self, proxy.delay, f"connection {number}, target -> client")
        self.boundaries = FrameBoundaries()
        self.pending_injection: bytes | None = None
        if blackhole:
            return
        self.up.source, self.up.sink = self.client, self.target
        self.down.source, self.down.sink = self.target, self.client
        self.client.outgoing = self.target.incoming = self.up
        self.client.incoming = self.target.outgoing = self.down
        self.target.inspect = self._with_injection

    def hold(self, *, up: bool = True, down: bool = True) -> None:
        if self.blackholed:
            return
        if up:
            self.up.hold()
        if down:
            self.down.hold()

    def release(self) -> None:
        self.up.release()
        self.down.release()

    def _with_injection(self, data: bytes) -> bytes:
        ends = self.boundaries.after_publish(data)
        frame = self.pending_injection
        if frame is None or not ends:
            return data
        self.pending_injection = None
        self.proxy.stats.malformed_frames += 1
        at = ends[0]
        return data[:at] + frame + data[at:]

    def drop(self, *, reset: bool = False) -> None:
        """Close both sockets at once (with ``reset``, RST instead of FIN)."""
        if self.closed:
            return
        self.closed = True
        self.up.abort()
        self.down.abort()
        self.client.drop(reset=reset)
        self.target.drop(reset=reset)
        self.proxy.forget(self)


# ------------------------------------------------------------------------------ the proxy


class _Proxy:
    """The proxy on an event loop: the listening socket, the links, the faults in force. Its
    methods run on the loop's thread."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, target: tuple[str, int], delay: float
    ) -> None:
        self.loop = loop
        self.target = target
        self.delay = delay
        self.stats = ProxyStats()
        self.fragment_size = 0
        self.blackholing = False
        self.refusing = False
        self.stall_new = False
        self.server: asyncio.Server | None = None
        self.links_lock = threading.Lock()
        """Guards ``links``, which other threads count."""
        self.links: set[_Link] = set()
        self._numbers = itertools.count(1)
        self._connecting: set[asyncio.Task[None]] = set()

    async def listen(
        self, *, sock: socket.socket | None = None, address: tuple[str, int] | None = None
    ) -> tuple[str, int]:
        """Start accepting on ``sock``, or on a new socket bound to ``address``; returns the
        address it listens on."""
        if sock is not None:
            self.server = await self.loop.create_server(self._accepted, sock=sock)
        else:
            assert address is not None
            self.server = await self.loop.create_server(
                self._accepted, *address, reuse_address=True
            )
        host, port = self.server.sockets[0].getsockname()[:2]
        return host, port

    def _accepted(self) -> asyncio.Protocol:
        if self.refusing:
            self.stats.refused += 1
            return _Refused()
        link = _Link(self, next(self._numbers), blackhole=self.blackholing)
        with self.links_lock:
            self.links.add(link)
        self.stats.connections += 1
        if link.blackholed:
            self.stats.blackholed += 1
            return link.client
        if self.stall_new:
            link.hold()
        link.client.pause("connecting")  # what the client sends waits in the kernel meanwhile
        task = self.loop.create_task(self._connect(link))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)
        return link.client

    async def _connect(self, link: _Link) -> None:
        client = link.client
        try:
            await asyncio.wait_for(
                self.loop.create_connection(lambda: link.target, *self.target), CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            log.warning("could not connect to %s:%d: %s", *self.target, exc)
            link.drop()
            return
        if link.closed or client.closed:
            link.drop()
            link.target.drop(reset=False)  # connected after the link was dropped
            return
        link.forwarding = True
        log.info("%s: connected to %s:%d", client.name, *self.target)
        client.resume("connecting")

    def forget(self, link: _Link) -> None:
        with self.links_lock:
            self.links.discard(link)

    def current(self) -> list[_Link]:
        with self.links_lock:
            return list(self.links)

    # ------------------------------------------------------------------ faults

    def cut(self) -> int:
        links = self.current()
        for link in links:
            link.drop(reset=True)
        self.stats.cuts += len(links)
        log.info("proxy -> %s:%d: cut %d connection(s)", *self.target, len(links))
        return len(links)

    def stall(self, new_connections: bool) -> int:
        links = self.current()
        self.stall_new = new_connections
        for link in links:
            link.hold()
        self.stats.stalls += len(links)
        log.info("proxy -> %s:%d: stalled %d connection(s)", *self.target, len(links))
        return len(links)

    def hold_upstream(self) -> int:
        links = self.current()
        for link in links:
            link.hold(down=False)
        return len(links)

    def resume(self) -> None:
        self.stall_new = False
        for link in self.current():
            link.release()

    def inject(self, frame: bytes) -> int:
        links = [link for link in self.current() if link.forwarding]
        for link in links:
            link.pending_injection = frame
        return len(links)

    async def shutdown(self) -> None:
        """Stop accepting and close every connection."""
        if self.server is not None:
            self.server.close()
        for task in list(self._connecting):
            task.cancel()
        await asyncio.gather(*self._connecting, return_exceptions=True)
        for link in self.current():
            link.drop()
        for _ in range(3):  # the transports close their sockets on the next iterations
            await asyncio.sleep(0)


class FaultProxy:
    """A TCP proxy on a free loopback port in front of ``upstream`` (host, port), running in
    this process on an event loop thread of its own, with ``delay`` seconds of latency each
    way (none by default). It accepts from the moment it is made; the faults are its methods
    (the module's docstring); ``close()`` ends it."""

    def __init__(self, upstream: tuple[str, int], *, delay: float = 0.0) -> None:
        if not delay >= 0:
            raise ValueError(f"delay must be >= 0, got {delay}")
        self.upstream = upstream
        self._loop = asyncio.new_event_loop()
        self._proxy = _Proxy(self._loop, upstream, delay)
        server = socket.create_server((LOOPBACK, 0))
        self.port: int = server.getsockname()[1]
        self._thread = threading.Thread(target=self._run, daemon=True, name="fault-proxy")
        self._thread.start()
        self._closed = False
        try:
            self._call_async(self._proxy.listen(sock=server))
        except BaseException:
            server.close()
            self.close()
            raise

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _call_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(CALL_TIMEOUT)

    def _call(self, action: Callable[[], T]) -> T:
        """Run ``action`` on the proxy's loop and return its result."""

        async def run() -> T:
            return action()

        return self._call_async(run())

    @property
    def url(self) -> str:
        """``tcp://127.0.0.1:PORT``: an MQTT broker URL through the proxy."""
        return f"tcp://{LOOPBACK}:{self.port}"

    @property
    def stats(self) -> ProxyStats:
        """The counters, updated as the proxy works."""
        return self._proxy.stats

    @property
    def fragment_size(self) -> int:
        return self._proxy.fragment_size

    @property
    def open_links(self) -> int:
        return len(self._proxy.current())

    @property
    def forwarding_links(self) -> int:
        """Open connections that reach the broker (blackholed ones do not)."""
        return sum(1 for link in self._proxy.current() if link.forwarding and not link.closed)

    # ------------------------------------------------------------------ faults

    def cut(self) -> int:
        """Close every current connection with a reset; returns how many were cut."""
        return self._call(self._proxy.cut)

    def stall(self, *, new_connections: bool = False) -> int:
        """Stop forwarding on every current connection (and on new ones when asked), leaving
        the sockets open; returns how many connections were stalled."""
        return self._call(lambda: self._proxy.stall(new_connections))

    def hold_upstream(self) -> int:
        """Stop forwarding client -> broker on every current connection (broker -> client
        still flows); returns how many connections hold."""
        return self._call(self._proxy.hold_upstream)

    def resume(self) -> None:
        """Forward again on stalled or held connections; new connections flow."""
        self._call(self._proxy.resume)

    def fragment(self, size: int | None) -> None:
        """Forward in writes of at most ``size`` bytes (None or 0: whole reads)."""
        self._call(lambda: setattr(self._proxy, "fragment_size", size or 0))

    def blackhole(self, on: bool) -> None:
        """New connections are accepted and never answered (no CONNACK) while on."""
        self._call(lambda: setattr(self._proxy, "blackholing", on))

    def refuse(self, on: bool) -> None:
        """New connections are closed at once while on."""
        self._call(lambda: setattr(self._proxy, "refusing", on))

    def inject(self, frame: bytes) -> int:
        """Insert ``frame`` once into each current broker -> client stream, after the next
        PUBLISH frame; returns how many connections will get it."""
        return self._call(lambda: self._proxy.inject(frame))

    # ------------------------------------------------------------------ plumbing

    def close(self) -> None:
        """Stop accepting and close every connection."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call_async(self._proxy.shutdown())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FaultProxy({self.url} -> {self.upstream[0]}:{self.upstream[1]})"


# ------------------------------------------------------------------------------ the command


async def serve(
    listen: tuple[str, int],
    target: tuple[str, int],
    delay: float,
    on_ready: Callable[[str, int], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Run the proxy until ``stop`` is set; ``on_ready(host, port)`` is called once it
    listens."""
    proxy = _Proxy(asyncio.get_running_loop(), target, delay)
    host, port = await proxy.listen(address=listen)
    try:
        if on_ready is not None:
            on_ready(host, port)
        await (stop or asyncio.Event()).wait()
    finally:
        await proxy.shutdown()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.fault_proxy",
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
        format="fault-proxy %(levelname)s %(message)s",
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


# ------------------------------------------------------------------------------ the child process

_live: set[DelayProxy] = set()


class DelayProxy:
    """``python -m devtools.fault_proxy`` as a child process adding ``delay_ms`` each way:
    ``start()`` returns once it listens (its port is then :attr:`port`), ``stop()`` ends it
    (SIGTERM, then SIGKILL). Its stderr goes to ``log_path`` (by default a temporary file,
    quoted in errors)."""

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
            sys.executable, "-m", "devtools.fault_proxy", "--listen", f"{self.host}:0",
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
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
        )}  # fmt: skip
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=REPO_ROOT,
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
