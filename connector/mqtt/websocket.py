"""MQTT over WebSocket (MQTT 3.1.1 and 5.0 section 6): a WebSocket connection seen by the driver
as the byte stream it reads and writes on a plain or TLS socket.

The framing is wsproto's (RFC 6455); this module only adapts it. :func:`open_websocket` makes
the opening handshake (an HTTP/1.1 Upgrade offering the subprotocol ``mqtt``, which the server
must select, [MQTT-6.0.0-3] and [MQTT-6.0.0-4]) on a connected socket and returns a
:class:`WebSocketStream`, whose ``recv``/``send``/``settimeout``/``shutdown``/``close`` are the
socket methods the driver calls. Each ``send`` is one binary message; ``recv`` returns the
payload bytes of the binary messages as they arrive, whatever their framing: an MQTT packet may
span messages and a message may hold several packets ([MQTT-6.0.0-2]), and the driver's stream
decoder does not care. A text frame ([MQTT-6.0.0-1]) or broken framing is a broker fault: the
stream answers with a Close frame and raises :class:`FrameViolation`. A Close frame from
the broker ends the stream with :class:`WebSocketClosed` (code and reason in the message).
Pings are answered with pongs.

The session and the codec know nothing of this: the tcp:// path never goes through here.
"""

from __future__ import annotations

import contextlib
import http
import socket
import time
from typing import cast

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import RemoteProtocolError

SUBPROTOCOL = "mqtt"
"""The WebSocket subprotocol of MQTT, offered by the client and selected by the server
(section 6, [MQTT-6.0.0-3], [MQTT-6.0.0-4])."""

READ_SIZE = 1 << 16
"""Bytes the stream asks the socket for at least, whatever the caller's ``bufsize``."""

PONG_TIMEOUT = 10.0
"""Seconds a pong may wait for room in the socket's send buffer."""

RETRYABLE_STATUSES = frozenset({408, 429})
"""HTTP statuses below 500 after which the same request may succeed later."""


class HandshakeFailed(Exception):
    """The opening handshake did not give an MQTT WebSocket. ``retryable``: the same request
    may succeed later (5xx, 408, 429, the connection closed or cut); ``status``: the HTTP
    status when the server answered with one. The message never holds the request target."""

    def __init__(self, message: str, *, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class WebSocketClosed(ConnectionError):
    """The broker closed the WebSocket connection with a Close frame (RFC 6455 section 5.5.1)."""

    def __init__(self, code: int, reason: str | None) -> None:
        self.code = code
        self.reason = reason or ""
        try:
            name = CloseReason(code).name.lower().replace("_", " ")
        except ValueError:
            name = "application code"
        text = f"the broker closed the WebSocket connection (close code {code}, {name}"
        super().__init__(text + (f": {self.reason!r})" if self.reason else ")"))


class FrameViolation(ConnectionError):
    """The broker broke the WebSocket transport's rules (a text frame, broken framing); the
    stream sent a Close frame with ``code`` and is unusable."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def host_header(host: str, port: int, default_port: int) -> str:
    """The Host header of the request (RFC 7230 section 5.4): the host (an IPv6 literal in
    brackets) and the port unless it is the scheme's default."""
    name = f"[{host}]" if ":" in host else host
    return name if port == default_port else f"{name}:{port}"


def _status_text(status: int) -> str:
    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def open_websocket(
    sock: socket.socket, host: str, target: str, timeout: float | None
) -> WebSocketStream:
    """Make the opening handshake (RFC 6455 section 4.1) on connected ``sock`` for request
    ``target`` (path and query) at ``host`` (the Host header), within ``timeout`` seconds.

    Raises HandshakeFailed; OSError (TimeoutError, ssl.SSLError, ...) from the socket as is.
    The messages never repeat ``target``: its query may hold a signature."""
    connection = WSConnection(ConnectionType.CLIENT)
    deadline = None if timeout is None else time.monotonic() + timeout
    request = Request(host=host, target=target, subprotocols=[SUBPROTOCOL])
    sock.settimeout(timeout)
    sock.sendall(connection.send(request))
    while True:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            sock.settimeout(left)
        data = sock.recv(READ_SIZE)
        if not data:
            raise HandshakeFailed(
                "the server closed the connection before answering; is it a WebSocket "
                "(HTTP) listener?",
                retryable=True,
            )
        try:
            connection.receive_data(data)
        except RemoteProtocolError as exc:
            raise HandshakeFailed(
                f"the answer is not a WebSocket handshake ({exc}); is it a WebSocket (HTTP) "
                "listener?",
                retryable=False,
            ) from None
        # Frames that came with the answer stay in the connection for the stream (events are
        # parsed as they are taken).
        for event in connection.events():
            if isinstance(event, AcceptConnection):
                if event.subprotocol != SUBPROTOCOL:
                    raise HandshakeFailed(
                        "the server accepted the WebSocket without selecting the subprotocol "
                        f"{SUBPROTOCOL!r} (MQTT section 6, [MQTT-6.0.0-4]): it is not an MQTT "
                        "WebSocket endpoint; check the path",
                        retryable=False,
                    )
                return WebSocketStream(sock, connection)
            if isinstance(event, RejectConnection):
                status = event.status_code
                retryable = status >= 500 or status in RETRYABLE_STATUSES
                hint = {
                    400: "; is it an MQTT WebSocket endpoint?",
                    401: "; check the credentials or the signature of the URL",
                    403: "; check the credentials or the signature of the URL",
                    404: "; check the path (the default is /mqtt)",
                }.get(status, "")
                raise HandshakeFailed(
                    f"the server refused the upgrade with {_status_text(status)}{hint}",
                    retryable=retryable,
                    status=status,
                )


class WebSocketStream:
    """An open WebSocket connection with the socket methods the driver calls.

    ``recv`` returns message payload bytes (at most ``bufsize``), ``b""`` at the end of the
    stream (the TCP connection closed, or the Close frame answering ours), and raises what the
    socket raises (timeouts included), :class:`WebSocketClosed` or :class:`FrameViolation`.
    ``send`` frames its data as one binary message and returns the bytes of it that went out.
    """

    __slots__ = ("_broken", "_closed", "_connection", "_eof", "_pending", "_sock", "_timeout")

    def __init__(self, sock: socket.socket, connection: WSConnection) -> None:
        self._sock = sock
        self._connection = connection
        self._timeout: float | None = sock.gettimeout()
        self._pending = b""
        """Payload bytes received beyond what the last ``recv`` could return."""
        self._closed: OSError | None = None
        """The broker's Close or violation, raised once the payload before it is returned."""
        self._eof = False
        self._broken: OSError | None = None
        """A send failed in the middle of a frame: the stream cannot frame anything more."""
        self._pending = self._events()  # frames that came with the handshake's answer

    def settimeout(self, timeout: float | None) -> None:
        self._timeout = timeout
        self._sock.settimeout(timeout)

    def fileno(self) -> int:
        return self._sock.fileno()

    def recv(self, bufsize: int) -> bytes:
        if self._pending:
            return self._take(self._pending, bufsize)
        if self._closed is not None:
            raise self._closed
        if self._eof:
            return b""
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        try:
            while True:
                data = self._sock.recv(max(bufsize, READ_SIZE))
                if not data:
                    self._eof = True
                    return b""
                self._connection.receive_data(data)
                payload = self._events()
                if payload:
                    return self._take(payload, bufsize)
                if self._closed is not None:
                    raise self._closed
                if self._eof:
                    return b""
                # Only control frames, or part of a frame's header: read on, in the time left.
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise TimeoutError("timed out")
                    self._sock.settimeout(left)
        finally:
            if deadline is not None:
                self._sock.settimeout(self._timeout)

    def _take(self, payload: bytes, bufsize: int) -> bytes:
        if len(payload) <= bufsize:
            self._pending = b""
            return payload
        self._pending = payload[bufsize:]
        return payload[:bufsize]

    def _events(self) -> bytes:
        """Act on the events of the data received; return the binary payload among them."""
        chunks: list[bytes] = []
        connection = self._connection
        for event in connection.events():
            if isinstance(event, BytesMessage):
                chunks.append(bytes(event.data))
            elif isinstance(event, Ping):
                if connection.state is ConnectionState.OPEN:
                    self._send_control(connection.send(event.response()))
            elif isinstance(event, TextMessage):
                self._violation(
                    "a text frame, but MQTT packets travel in binary frames only (MQTT 3.1.1 "
                    "and 5.0 section 6, [MQTT-6.0.0-1])",
                    CloseReason.UNSUPPORTED_DATA,
                )
                break
            elif isinstance(event, CloseConnection):
                state = connection.state
                if state in (ConnectionState.OPEN, ConnectionState.LOCAL_CLOSING):
                    # wsproto reports frames it cannot parse as a Close without changing state.
                    self._violation(
                        f"broken WebSocket framing ({event.reason})",
                        event.code,
                    )
                elif state is ConnectionState.REMOTE_CLOSING:
                    # Answer the Close (RFC 6455 section 5.5.1), then report it.
                    with contextlib.suppress(OSError):
                        self._send_control(connection.send(event.response()))
                    self._closed = WebSocketClosed(event.code, event.reason)
                else:
                    self._eof = True  # the answer to our Close, or the TCP connection closed
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _violation(self, what: str, code: int) -> None:
        """Close with ``code`` (best effort) and keep the violation to raise."""
        if self._connection.state is ConnectionState.OPEN:
            with contextlib.suppress(OSError):
                self._send_control(self._connection.send(CloseConnection(code=code)))
        self._closed = FrameViolation(
            f"protocol violation by the broker: {what}; closed with WebSocket code {code}", code
        )

    def _send_control(self, frame: bytes) -> None:
        """Send a control frame whole, waiting for room at most ``PONG_TIMEOUT`` seconds; a
        failure is a ConnectionError (never a timeout, which the caller takes for a quiet read)."""
        self._sock.settimeout(PONG_TIMEOUT)
        try:
            self._sock.sendall(frame)
        except OSError as exc:
            self._broken = ConnectionError(f"sending a WebSocket control frame failed: {exc}")
            raise self._broken from exc
        finally:
            self._sock.settimeout(self._timeout)

    def send(self, data: bytes | memoryview) -> int:
        """Send ``data`` as one binary message (RFC 6455 section 5.6) and return ``len(data)``.

        When the socket fails after part of the message's payload went out, the count of it is
        returned and the next call raises: a stream cannot go on after half a frame."""
        if self._broken is not None:
            raise self._broken
        if self._connection.state is not ConnectionState.OPEN:
            # The broker's Close (or a violation) arrived with the data just returned.
            raise ConnectionError(str(self._closed or "the WebSocket connection is closing"))
        # wsproto frames any bytes-like payload (memoryview included), whatever its hint says.
        frame = self._connection.send(BytesMessage(data=cast(bytes, data)))
        header = len(frame) - len(data)
        view = memoryview(frame)
        sent = 0
        try:
            while sent < len(frame):
                sent += self._sock.send(view[sent:])
        except OSError as exc:
            self._broken = exc
            if sent <= header:
                raise
            return sent - header
        return len(data)

    def shutdown(self, how: int) -> None:
        """Start the closing handshake (a Close frame, code 1000) before shutting ``how``:
        the broker answers with its Close and closes the connection (RFC 6455 section 7)."""
        connection = self._connection
        if how != socket.SHUT_RD and connection.state is ConnectionState.OPEN:
            frame = connection.send(CloseConnection(code=CloseReason.NORMAL_CLOSURE))
            self._sock.sendall(frame)
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()
