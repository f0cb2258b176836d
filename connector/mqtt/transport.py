"""The byte stream under a session: TCP, then TLS, then the WebSocket handshake (MQTT section
6), as the broker's URL says, each failure typed for the caller (BrokerUnreachable, TlsError,
WebSocketRefused); and what a broker that closes before CONNACK most likely means."""

from __future__ import annotations

import logging
import socket
import ssl
from typing import Protocol

from .address import DEFAULT_PORTS, BrokerAddress
from .config import SessionConfig
from .errors import BrokerUnreachable, WebSocketRefused
from .tls import TlsOptions, tls_failure

log = logging.getLogger("connector.mqtt.driver")


class ByteStream(Protocol):
    """What the driver calls on its connection: a socket (``tcp://``, ``ssl://``) or a
    :class:`connector.mqtt.websocket.WebSocketStream` (``ws://``, ``wss://``)."""

    def settimeout(self, value: float | None, /) -> None: ...
    def recv(self, bufsize: int, /) -> bytes: ...
    def send(self, data: memoryview, /) -> int: ...
    def shutdown(self, how: int, /) -> None: ...
    def close(self) -> None: ...


def open_stream(broker: BrokerAddress, tls: TlsOptions | None, timeout: float) -> ByteStream:
    """The connection to the broker: TCP, then TLS, then the WebSocket handshake, as the
    URL says. Over TCP and TLS the driver calls the socket itself."""
    sock = _open_tcp_tls(broker, tls, timeout)
    if not broker.websocket:
        return sock
    return _open_websocket(sock, broker, tls, timeout)


def _open_websocket(
    sock: socket.socket, broker: BrokerAddress, tls: TlsOptions | None, timeout: float
) -> ByteStream:
    """The opening handshake on ``sock``; typed errors as in ``connect`` (section 6)."""
    from .websocket import HandshakeFailed, host_header, open_websocket

    default_port = DEFAULT_PORTS["wss" if broker.tls else "ws"]
    host = host_header(broker.host, broker.port, default_port)
    try:
        return open_websocket(sock, host, broker.request_target, timeout)
    except HandshakeFailed as exc:
        sock.close()
        message = f"WebSocket handshake with {broker} failed: {exc}"
        if exc.retryable:
            raise BrokerUnreachable(message) from None
        raise WebSocketRefused(message, exc.status) from None
    except TimeoutError as exc:
        sock.close()
        raise BrokerUnreachable(
            f"no answer to the WebSocket handshake from {broker} within {timeout} s"
        ) from exc
    except ssl.SSLError as exc:
        sock.close()
        assert tls is not None  # TLS errors come only over wss://
        raise tls_failure(exc, broker, tls, after="WebSocket handshake") from exc
    except OSError as exc:
        sock.close()
        raise BrokerUnreachable(
            f"WebSocket handshake with {broker} failed: {exc.strerror or exc}"
        ) from exc


def _open_tcp_tls(broker: BrokerAddress, tls: TlsOptions | None, timeout: float) -> socket.socket:
    address = (broker.host, broker.port)
    try:
        sock = socket.create_connection(address, timeout=timeout)
    except TimeoutError as exc:
        raise BrokerUnreachable(f"no answer from {broker} within {timeout} s") from exc
    except OSError as exc:
        raise BrokerUnreachable(f"cannot connect to {broker}: {exc.strerror or exc}") from exc
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is None:
        return sock
    try:
        wrapped = tls.context().wrap_socket(sock, server_hostname=broker.host)
    except OSError as exc:
        sock.close()
        raise tls_failure(exc, broker, tls) from exc
    if tls.alpn:
        log.info(
            "TLS with %s: ALPN protocol %s selected (offered: %s)",
            broker,
            wrapped.selected_alpn_protocol(),
            ", ".join(tls.alpn),
        )
    return wrapped


def closed_before_connack_causes(
    config: SessionConfig, broker: BrokerAddress, tls: TlsOptions | None
) -> str:
    """Why a broker closes after CONNECT without a CONNACK: the protocol level we sent,
    the credentials (whether a user name went with it), and, over plain TCP, a TLS port."""
    level = config.level
    if config.username is None:
        sent = "no user name was sent"
    else:
        sent = f"user name {config.username!r}"
        sent += " and a password were sent" if config.password is not None else " was sent"
    causes = [
        f"the broker may not accept MQTT {level} (protocol level {int(level)}; choose 3.1 "
        "or 3.1.1 with --mqtt-version or the source option mqttVersion)",
        f"it may have refused the credentials without a CONNACK ({sent})",
    ]
    if tls is None:
        causes.append(f"{broker.host}:{broker.port} may be a TLS listener (use an ssl:// URL)")
    elif not tls.alpn and not broker.websocket and broker.port == 443:
        causes.append(
            "MQTT on port 443 may need an ALPN protocol (tls.alpn / --alpn; AWS IoT Core: "
            "x-amzn-mqtt-ca)"
        )
    return "likely causes: " + "; ".join(causes)
