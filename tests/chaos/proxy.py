"""A loopback TCP proxy between MQTT clients and a broker, with network faults on demand.

Each accepted client connection gets its own upstream connection to the broker and two pump
threads (client -> broker, broker -> client). Faults:

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
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import struct
import threading
from dataclasses import dataclass

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
READ_SIZE = 65536
MQTT_PUBLISH = 3


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


class _Link:
    """One proxied client connection: the client socket, the broker socket, two pumps."""

    def __init__(self, proxy: ChaosProxy, number: int, client: socket.socket) -> None:
        self.proxy = proxy
        self.number = number
        self.client = client
        self.upstream: socket.socket | None = None
        self.flowing = threading.Event()
        self.upstream_flowing = threading.Event()
        self.upstream_flowing.set()
        self.closed = threading.Event()
        self.pending_injection: bytes | None = None
        self.boundaries = FrameBoundaries()
        self.lock = threading.Lock()

    def start(self, *, stalled: bool, blackhole: bool) -> None:
        if not stalled:
            self.flowing.set()
        if blackhole:
            threading.Thread(target=self._swallow, daemon=True, name="proxy-blackhole").start()
            return
        try:
            self.upstream = socket.create_connection(self.proxy.upstream, timeout=5)
        except OSError as exc:
            log.info("proxy link %d: broker unreachable (%s); closing the client", self.number, exc)
            self.close()
            return
        self.upstream.settimeout(None)
        for sock in (self.client, self.upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(
            target=self._pump, args=(self.client, self.upstream, False), daemon=True
        ).start()
        threading.Thread(
            target=self._pump, args=(self.upstream, self.client, True), daemon=True
        ).start()

    def _swallow(self) -> None:
        """Read and drop everything the client sends; never answer."""
        with contextlib.suppress(OSError):
            while not self.closed.is_set():
                if not self.client.recv(READ_SIZE):
                    break
        self.close()

    def _pump(self, source: socket.socket, target: socket.socket, downstream: bool) -> None:
        try:
            while not self.closed.is_set():
                self._wait_flowing()
                data = source.recv(READ_SIZE)
                if not data:
                    break
                self._wait_flowing()
                if downstream:
                    data = self._with_injection(data)
                else:
                    self._wait_flowing(self.upstream_flowing)
                self._send(target, data)
        except OSError:
            pass
        self.close()

    def _wait_flowing(self, flowing: threading.Event | None = None) -> None:
        flowing = flowing or self.flowing
        while not flowing.wait(0.1):
            if self.closed.is_set():
                raise OSError("link closed while stalled")

    def _with_injection(self, data: bytes) -> bytes:
        ends = self.boundaries.after_publish(data)
        with self.lock:
            frame = self.pending_injection
            if frame is None or not ends:
                return data
            self.pending_injection = None
        self.proxy._count("malformed_frames")
        at = ends[0]
        return data[:at] + frame + data[at:]

    def _send(self, target: socket.socket, data: bytes) -> None:
        size = self.proxy.fragment_size
        if not size:
            target.sendall(data)
            return
        for start in range(0, len(data), size):
            target.sendall(data[start : start + size])
            self.proxy._count("fragments")

    def close(self, *, reset: bool = False) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        self.flowing.set()
        self.upstream_flowing.set()
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            if reset:  # RST instead of FIN: the peer's next read fails at once
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()
        self.proxy._forget(self)


class ChaosProxy:
    """A TCP proxy on a free loopback port in front of ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.stats = ProxyStats()
        self.fragment_size = 0
        self._lock = threading.Lock()
        self._links: set[_Link] = set()
        self._numbers = itertools.count(1)
        self._blackhole = False
        self._refuse = False
        self._stall_new = False
        self._server = socket.create_server((LOOPBACK, 0))
        self.port: int = self._server.getsockname()[1]
        self._closing = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, daemon=True, name="chaos-proxy")
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"tcp://{LOOPBACK}:{self.port}"

    @property
    def open_links(self) -> int:
        with self._lock:
            return len(self._links)

    @property
    def forwarding_links(self) -> int:
        """Open connections that reach the broker (blackholed ones do not)."""
        with self._lock:
            return sum(1 for link in self._links if link.upstream is not None)

    # ------------------------------------------------------------------ faults

    def cut(self) -> int:
        """Close every current connection with a reset; returns how many were cut."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close(reset=True)
        self._count("cuts", len(links))
        log.info("proxy %d: cut %d connection(s)", self.port, len(links))
        return len(links)

    def stall(self, *, new_connections: bool = False) -> int:
        """Stop forwarding on every current connection (and on new ones when asked), leaving
        the sockets open; returns how many connections were stalled."""
        with self._lock:
            links = list(self._links)
            self._stall_new = new_connections
        for link in links:
            link.flowing.clear()
        self._count("stalls", len(links))
        log.info("proxy %d: stalled %d connection(s)", self.port, len(links))
        return len(links)

    def hold_upstream(self) -> int:
        """Stop forwarding client -> broker on every current connection (broker -> client
        still flows); returns how many connections hold."""
        with self._lock:
            links = list(self._links)
        for link in links:
            link.upstream_flowing.clear()
        return len(links)

    def resume(self) -> None:
        """Forward again on stalled or held connections; new connections flow."""
        with self._lock:
            links = list(self._links)
            self._stall_new = False
        for link in links:
            link.flowing.set()
            link.upstream_flowing.set()

    def fragment(self, size: int | None) -> None:
        """Forward in writes of at most ``size`` bytes (None or 0: whole reads)."""
        self.fragment_size = size or 0

    def blackhole(self, on: bool) -> None:
        """New connections are accepted and never answered (no CONNACK) while on."""
        self._blackhole = on

    def refuse(self, on: bool) -> None:
        """New connections are closed at once while on."""
        self._refuse = on

    def inject(self, frame: bytes) -> int:
        """Insert ``frame`` once into each current broker -> client stream, after the next
        PUBLISH frame; returns how many connections will get it."""
        with self._lock:
            links = [link for link in self._links if link.upstream is not None]
        for link in links:
            with link.lock:
                link.pending_injection = frame
        return len(links)

    # ------------------------------------------------------------------ plumbing

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            setattr(self.stats, name, getattr(self.stats, name) + amount)

    def _forget(self, link: _Link) -> None:
        with self._lock:
            self._links.discard(link)

    def _accept(self) -> None:
        self._server.settimeout(0.1)
        while not self._closing.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self._refuse:
                self._count("refused")
                with contextlib.suppress(OSError):
                    client.close()
                continue
            link = _Link(self, next(self._numbers), client)
            with self._lock:
                self._links.add(link)
                self.stats.connections += 1
                stalled = self._stall_new
                if self._blackhole:
                    self.stats.blackholed += 1
            link.start(stalled=stalled, blackhole=self._blackhole)

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closing.set()
        with contextlib.suppress(OSError):
            self._server.close()
        self._acceptor.join(timeout=5)
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()

    def __enter__(self) -> ChaosProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
