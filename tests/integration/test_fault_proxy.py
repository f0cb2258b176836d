"""The fault proxy (devtools/fault_proxy.py) between a socket and an echo server on 127.0.0.1.

As a separate process adding a delay (:class:`DelayProxy`): a round trip takes at least twice
the one-way delay, large transfers arrive intact and in order, many writes in a row are not held
back one delay each, a close on either side closes the other, and nothing but IPv4 loopback
addresses is accepted. In this process (:class:`FaultProxy`): each fault does what it says,
and the counters count it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from devtools.fault_proxy import DelayProxy, FaultProxy, loopback_address
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
DELAY_MS = 10.0
DELAY = DELAY_MS / 1000
TIMEOUT = 20.0


@dataclass
class EchoServer:
    """A TCP echo server on 127.0.0.1 (a thread per connection); counts connections ended."""

    sock: socket.socket = field(default_factory=lambda: socket.create_server(("127.0.0.1", 0)))
    ended: int = 0
    connections: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.connections.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    def _echo(self, conn: socket.socket) -> None:
        try:
            while data := conn.recv(1 << 16):
                conn.sendall(data)
        except OSError:
            pass
        finally:
            with self.lock:
                self.ended += 1
            conn.close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    threading.Thread(target=server.serve, daemon=True).start()
    yield server
    server.sock.close()


@pytest.fixture
def proxy(echo: EchoServer, tmp_path: Path) -> Iterator[DelayProxy]:
    with DelayProxy(echo.port, DELAY_MS, log_path=tmp_path / "delay-proxy.log") as running:
        yield running


def connect(proxy: DelayProxy) -> socket.socket:
    sock = socket.create_connection((proxy.host, proxy.port), timeout=TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def receive(sock: socket.socket, count: int) -> bytes:
    """Exactly ``count`` bytes (the socket's timeout bounds each read)."""
    got = bytearray()
    while len(got) < count:
        chunk = sock.recv(min(1 << 20, count - len(got)))
        assert chunk, f"connection closed after {len(got)} of {count} bytes"
        got += chunk
    return bytes(got)


def test_a_round_trip_takes_at_least_twice_the_delay(proxy: DelayProxy) -> None:
    with connect(proxy) as sock:
        for _ in range(5):
            start = time.perf_counter()
            sock.sendall(b"ping")
            assert receive(sock, 4) == b"ping"
            rtt = time.perf_counter() - start
            assert rtt >= 2 * DELAY, f"round trip of {rtt * 1000:.2f} ms through a 10 ms proxy"


def test_a_large_transfer_arrives_intact_and_in_order(proxy: DelayProxy) -> None:
    data = os.urandom(8 << 20)
    with connect(proxy) as sock:
        # Writes of varying sizes from another thread while this one reads the echo.
        def send() -> None:
            offset, size = 0, 1
            while offset < len(data):
                sock.sendall(data[offset : offset + size])
                offset += size
                size = size * 7 % 65_521 + 1

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        assert receive(sock, len(data)) == data
        sender.join(TIMEOUT)


def test_many_writes_in_a_row_share_one_delay(proxy: DelayProxy) -> None:
    """200 writes back to back come back about one round trip later, not 200 round trips
    (the proxy delays the bytes, it does not serialize or throttle them)."""
    writes = 200
    with connect(proxy) as sock:
        start = time.perf_counter()
        for i in range(writes):
            sock.sendall(i.to_bytes(4, "big") * 25)
        echoed = receive(sock, writes * 100)
        elapsed = time.perf_counter() - start
    assert echoed == b"".join(i.to_bytes(4, "big") * 25 for i in range(writes))
    assert elapsed >= 2 * DELAY
    assert elapsed < writes * 2 * DELAY / 4, f"{writes} writes took {elapsed:.3f} s"


def test_a_client_close_reaches_the_server(proxy: DelayProxy, echo: EchoServer) -> None:
    sock = connect(proxy)
    sock.sendall(b"hello")
    assert receive(sock, 5) == b"hello"
    before = echo.ended
    sock.close()
    wait_until(lambda: echo.ended > before, TIMEOUT, message="the echo server never saw EOF")


def test_a_server_close_reaches_the_client(proxy: DelayProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        sock.sendall(b"hello")
        assert receive(sock, 5) == b"hello"  # the server side exists now
        with echo.lock:
            conn = echo.connections[-1]
        conn.shutdown(socket.SHUT_RDWR)
        assert sock.recv(16) == b"", "the proxy kept the client's side open"


def test_a_target_that_refuses_closes_the_client(tmp_path: Path) -> None:
    # Bound, not listening: connections are refused, and no other process can take the port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with (
            DelayProxy(port, DELAY_MS, log_path=tmp_path / "proxy.log") as proxy,
            connect(proxy) as sock,
        ):
            assert sock.recv(16) == b""
    assert "could not connect" in (tmp_path / "proxy.log").read_text()


@pytest.mark.parametrize(
    "address",
    ["0.0.0.0:1883", "10.0.0.1:1883", "localhost:1883", "[::1]:1883", "::1:1883", "127.0.0.1"],
)
def test_only_ipv4_loopback_addresses_are_accepted(address: str) -> None:
    with pytest.raises(ValueError):
        loopback_address(address)
    for flag in ("--listen", "--target"):
        other = "--target" if flag == "--listen" else "--listen"
        done = subprocess.run(
            [sys.executable, "-m", "devtools.fault_proxy", flag, address,
             other, "127.0.0.1:1", "--delay-ms", "1"],
            capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO,
        )  # fmt: skip
        assert done.returncode == 2, done
        assert done.stdout == ""


def test_loopback_addresses_parse() -> None:
    assert loopback_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert loopback_address("127.1.2.3:1883") == ("127.1.2.3", 1883)
    with pytest.raises(ValueError):
        loopback_address("127.0.0.1:65536")
    with pytest.raises(ValueError):
        DelayProxy(1883, -1.0)


# ---------------------------------------------------------------------------- in this process


@pytest.fixture
def faults(echo: EchoServer) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", echo.port)) as running:
        yield running


def forwarding(proxy: FaultProxy) -> socket.socket:
    """A connection through ``proxy`` that has reached the echo server."""
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=TIMEOUT)
    sock.sendall(b"hello")
    assert receive(sock, 5) == b"hello"
    return sock


def silent(sock: socket.socket, seconds: float = 0.3) -> bool:
    """Nothing arrives on ``sock`` for ``seconds``."""
    sock.settimeout(seconds)
    try:
        sock.recv(16)
    except TimeoutError:
        return True
    finally:
        sock.settimeout(TIMEOUT)
    return False


def test_a_cut_closes_every_connection(faults: FaultProxy) -> None:
    with forwarding(faults) as one, forwarding(faults) as two:
        assert faults.forwarding_links == 2
        assert faults.cut() == 2
        for sock in (one, two):
            with pytest.raises(OSError):
                sock.sendall(b"x")
                assert sock.recv(16) == b""
                sock.sendall(b"x")  # a reset connection fails at the latest here
        wait_until(lambda: faults.open_links == 0, TIMEOUT, message="links left after the cut")
    assert faults.stats.cuts == 2
    assert faults.stats.connections == 2


def test_a_stall_holds_both_ways_until_resumed(faults: FaultProxy) -> None:
    with forwarding(faults) as sock:
        assert faults.stall() == 1
        sock.sendall(b"held")
        assert silent(sock)
        faults.resume()
        assert receive(sock, 4) == b"held"
    assert faults.stats.stalls == 1


def test_a_stall_of_new_connections_holds_them_from_the_start(faults: FaultProxy) -> None:
    faults.stall(new_connections=True)
    with socket.create_connection(("127.0.0.1", faults.port), timeout=TIMEOUT) as sock:
        sock.sendall(b"held")
        assert silent(sock)
        faults.resume()
        assert receive(sock, 4) == b"held"


def test_a_held_upstream_holds_what_the_client_sends(faults: FaultProxy, echo: EchoServer) -> None:
    with forwarding(faults) as sock:
        assert faults.hold_upstream() == 1
        sock.sendall(b"held")
        assert silent(sock)
        with echo.lock:
            server_side = echo.connections[-1]
        server_side.sendall(b"down")  # the broker's side still reaches the client
        assert receive(sock, 4) == b"down"
        faults.resume()
        assert receive(sock, 4) == b"held"


def test_fragments_arrive_whole_and_are_counted(faults: FaultProxy) -> None:
    faults.fragment(1)
    assert faults.fragment_size == 1
    with forwarding(faults) as sock:
        sock.sendall(b"abcdef")
        assert receive(sock, 6) == b"abcdef"
    wait_until(  # each byte, both ways
        lambda: faults.stats.fragments >= 2 * (5 + 6), TIMEOUT, message=str(faults.stats)
    )


def test_refused_and_blackholed_connections(faults: FaultProxy) -> None:
    faults.refuse(True)
    with socket.create_connection(("127.0.0.1", faults.port), timeout=TIMEOUT) as sock:
        assert sock.recv(16) == b""
    faults.refuse(False)
    faults.blackhole(True)
    with socket.create_connection(("127.0.0.1", faults.port), timeout=TIMEOUT) as sock:
        sock.sendall(b"CONNECT")
        assert silent(sock)
        assert faults.forwarding_links == 0
    faults.blackhole(False)
    with forwarding(faults):
        pass
    assert (faults.stats.refused, faults.stats.blackholed, faults.stats.connections) == (1, 1, 2)


def test_an_injected_frame_follows_the_next_publish(faults: FaultProxy, echo: EchoServer) -> None:
    publish = bytes([0x30, 5, 0, 1, ord("t"), ord("h"), ord("i")])
    frame = bytes([0x36, 0x05, 0x00, 0x01, 0x61, 0x00, 0x01])
    with socket.create_connection(("127.0.0.1", faults.port), timeout=TIMEOUT) as sock:
        wait_until(lambda: faults.forwarding_links == 1, TIMEOUT, message="not forwarding")
        assert faults.inject(frame) == 1
        sock.sendall(publish + publish)
        assert receive(sock, 2 * len(publish) + len(frame)) == publish + frame + publish
    assert faults.stats.malformed_frames == 1
