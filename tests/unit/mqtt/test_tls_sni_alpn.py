"""What the client's TLS handshake sends, seen by a loopback TLS server: SNI and ALPN.

Rules: the URL's host name goes as SNI (RFC 6066 section 3) with verification on or off, an IP
address never does; ``TlsOptions.alpn`` is offered in order (RFC 7301) and the server's choice
is logged; over ``wss://`` the same TLS handshake happens before the WebSocket one, SNI
included. The servers accept, finish the TLS handshake, note what they saw and close.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient
from connector.mqtt.errors import BrokerUnreachable, ConnectionLost
from connector.mqtt.tls import TlsOptions
from tests.support.brokers import Pki


@contextmanager
def tls_server(pki: Pki, alpn: list[str] | None = None) -> Iterator[tuple[int, list[object]]]:
    """A loopback TLS server; yields its port and the (SNI, ALPN) of each handshake."""
    seen: list[object] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    if alpn:
        context.set_alpn_protocols(alpn)
    names: list[str | None] = []
    context.sni_callback = lambda _sock, name, _ctx: names.append(name)
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn, suppress(OSError):
                conn.settimeout(5)
                wrapped = context.wrap_socket(conn, server_side=True)
                seen.append((names[-1] if names else None, wrapped.selected_alpn_protocol()))
                wrapped.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], seen
    finally:
        stop.set()
        thread.join(5)
        server.close()


def handshake(url: str, tls: TlsOptions) -> None:
    """Connect (the server closes after TLS: that error is expected)."""
    with pytest.raises((ConnectionLost, BrokerUnreachable)):
        MqttClient(url, SessionConfig("sni"), tls=tls, connect_timeout=5.0).connect()


@pytest.mark.parametrize("verify", [True, False], ids=["verified", "unverified"])
def test_the_host_name_goes_as_sni_and_an_ip_address_does_not(pki: Pki, verify: bool) -> None:
    tls = TlsOptions(str(pki.ca_cert), verify=verify)
    with tls_server(pki) as (port, seen):
        handshake(f"ssl://localhost:{port}", tls)
        handshake(f"ssl://127.0.0.1:{port}", tls)
        handshake(f"wss://localhost:{port}/mqtt", tls)
    assert seen == [("localhost", None), (None, None), ("localhost", None)]


def test_alpn_is_offered_and_the_choice_logged(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    tls = TlsOptions(str(pki.ca_cert), alpn=("x-amzn-mqtt-ca", "mqtt"))
    with tls_server(pki, alpn=["mqtt"]) as (port, seen), caplog.at_level(logging.INFO):
        handshake(f"ssl://localhost:{port}", tls)
    assert seen == [("localhost", "mqtt")]
    assert "ALPN protocol mqtt selected (offered: x-amzn-mqtt-ca, mqtt)" in caplog.text
