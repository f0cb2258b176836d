"""The errors of the MQTT layer, named for who is at fault. A leaf: it imports nothing of the
MQTT layer (which CONNACK code raises which error, and which DISCONNECT codes stop the client,
is reason-code policy, in :mod:`connector.mqtt.reasons`).

* :class:`LocalProtocolError`: this side broke a rule, and no connection is at fault: an
  argument the standard or the API refuses (:class:`InvalidArgument`, also a ``ValueError``;
  :class:`InvalidTopic` for a topic name or filter), or a call the session's state does not
  allow or past the protocol's limits (a ``LocalProtocolError`` itself).
* :class:`RemoteProtocolError`: the broker broke the protocol. Bytes that break the packet
  format raise :class:`MalformedFrame` (:class:`PacketTooLarge` above our Maximum Packet
  Size); the connection that carried them must be closed (section 4.8), which the driver
  reports as :class:`BrokerViolation` (:class:`WebSocketViolation` for the transport's rules);
  a broker that keeps at it is given up with :class:`RepeatedProtocolViolation`.

:class:`MalformedPacket` is the packet format broken, by either side: a ``MalformedFrame`` is
one received, an ``InvalidTopic`` one the caller asked to send. Every message names the rule
and its section. The other errors are outcomes of the network and of the broker's
configuration, in neither family: a refused connection (:class:`ConnectionRefused`) or
subscription (:class:`SubscriptionRefused`), a broker out of reach (:class:`BrokerUnreachable`)
or a failed TLS handshake (:class:`TlsError`), a lost connection (:class:`ConnectionLost`; the
broker's DISCONNECT is :class:`ServerDisconnected`), a silent broker (:class:`KeepAliveTimeout`).
"""

from __future__ import annotations

from collections.abc import Sequence


class MqttError(Exception):
    """Base class of every error raised by :mod:`connector.mqtt`."""


class LocalProtocolError(MqttError):
    """This side broke a rule: the caller misused the API, or asked for something the
    session's state or the protocol's limits do not allow (e.g. ``publish`` before CONNACK,
    every packet identifier in use, section 2.3.1). The connection and the broker are not at
    fault."""


class RemoteProtocolError(MqttError):
    """The broker broke the MQTT protocol; the connection must be closed (section 4.8)."""


class MalformedPacket(MqttError):
    """A packet that breaks the packet format, received (:class:`MalformedFrame`) or to be
    sent (:class:`InvalidTopic`); the message names the rule and its section."""


class MalformedFrame(MalformedPacket, RemoteProtocolError):
    """Bytes received that break the packet format.

    When raised by the stream decoder, ``packets`` holds the well-formed packets that
    preceded the bad frame in the same read.
    """

    packets: Sequence[object] = ()


class PacketTooLarge(MalformedFrame):
    """A packet larger than the client's maximum (its Remaining Length is above the one that
    maximum leaves, MQTT 5.0 section 3.1.2.11.4)."""


class RepeatedProtocolViolation(RemoteProtocolError):
    """The broker broke the protocol on ``count`` connections in a row with no message or
    release delivered in between: reconnecting again would not help, so the client gives up.

    ``reason`` is the last rule broken (with its spec section); ``code`` the MQTT 5 reason
    code that names it (0x81 Malformed Packet, 0x82 Protocol Error, 0x94 Topic Alias invalid,
    0x95 Packet too large; the level 5 DISCONNECT sends it); ``broker`` is filled in by the
    driver, which knows the address.
    """

    def __init__(
        self, count: int, reason: str, broker: str | None = None, *, code: int = 0x82
    ) -> None:
        self.count = count
        self.reason = reason
        self.broker = broker
        self.code = code
        super().__init__(
            f"{broker or 'the broker'} broke the MQTT protocol {count} times in a row without "
            f"delivering a message in between; giving up. Last violation: {reason}"
        )


class InvalidArgument(LocalProtocolError, ValueError):
    """An argument that the standard or the API refuses (a ``ValueError`` too)."""


class InvalidTopic(InvalidArgument, MalformedPacket):
    """A topic name or filter given by the caller that breaks section 4.7 (or 1.5.3)."""


# ------------------------------------------------------------------------ refused connections


class ConnectionRefused(MqttError):
    """The broker refused the connection: CONNACK carried a non-zero return code (3.1.1
    section 3.2.2.3, table 3.1; a reason code of 0x80 or more at level 5), or the WebSocket
    upgrade was refused (:class:`WebSocketRefused`)."""

    return_code: int = 0
    reason: str = "connection refused"
    retryable: bool = False
    """Whether a later attempt may succeed (the driver then retries with backoff)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or f"{self.reason} (CONNACK return code {self.return_code})")


class UnacceptableProtocolVersion(ConnectionRefused):
    return_code = 1
    reason = "the broker does not support the requested MQTT protocol version"


class IdentifierRejected(ConnectionRefused):
    return_code = 2
    reason = "identifier rejected: the broker does not accept this client id"


class ServerUnavailable(ConnectionRefused):
    return_code = 3
    reason = "server unavailable: the MQTT service is not available"


class BadUsernameOrPassword(ConnectionRefused):
    return_code = 4
    reason = "bad user name or password"


class NotAuthorized(ConnectionRefused):
    return_code = 5
    reason = "not authorized"


class BrokerBusy(ConnectionRefused):
    """MQTT 5: the broker refused the connection for now (0x89 Server busy, 0x97 Quota
    exceeded, 0x9F Connection rate exceeded): a later attempt may succeed, so the driver
    retries it with backoff."""

    reason = "the broker is busy"
    retryable = True


class WebSocketRefused(ConnectionRefused):
    """The server refused the WebSocket upgrade (an HTTP status other than 101 and than the
    ones a later attempt may pass: 408, 429, 5xx), answered without the subprotocol ``mqtt``
    (MQTT section 6, [MQTT-6.0.0-4]) or not as a WebSocket server. Like a refusing CONNACK,
    reconnecting does not help; the URL, path or credentials need fixing. ``status`` is the
    HTTP status, None when the server did not answer with one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class SubscriptionRefused(MqttError):
    """SUBACK returned 0x80 (failure) for one or more topic filters (section 3.9.3)."""

    def __init__(self, filters: list[str], reasons: list[str] | None = None) -> None:
        self.filters = filters
        if reasons:  # MQTT 5: each filter with its reason code's name
            super().__init__("the broker refused the subscription for: " + ", ".join(reasons))
        else:
            super().__init__(
                "the broker refused the subscription (SUBACK 0x80) for: " + ", ".join(filters)
            )


# ------------------------------------------------------------------------ the network


class BrokerUnreachable(MqttError):
    """The broker's address could not be reached (refused, unknown host, timeout), or it hung
    up during the TLS or WebSocket handshake, or answered it with a server error: a later
    attempt may succeed."""


class TlsError(MqttError):
    """The TLS handshake failed (e.g. the broker's certificate is not trusted)."""


class KeepAliveTimeout(MqttError):
    """No packet from the broker within 1.5 x keep-alive after a PINGREQ (section 3.1.2.10)."""


class ConnectionLost(MqttError):
    """The network connection closed or failed."""

    nothing_sent: bool = False
    """Raised by a write that the connection took no byte of: what it carried never left."""


class BrokerViolation(ConnectionLost, RemoteProtocolError):
    """The broker broke the protocol and the client closed the connection (section 4.8): a
    lost connection, followed by a reconnect, and the broker is at fault. The session counts
    each toward giving up (:class:`RepeatedProtocolViolation`)."""


class WebSocketViolation(BrokerViolation):
    """The broker broke the WebSocket transport's rules: a text frame (MQTT section 6,
    [MQTT-6.0.0-1]) or broken framing. The client closed the connection with a Close frame."""


class ServerDisconnected(ConnectionLost):
    """MQTT 5: the broker ended the connection with DISCONNECT and ``reason_code`` (section
    3.14); the message names the code and the broker's Reason String. ``fatal``: a code after
    which the next connection would meet the same answer (``reasons.FATAL_DISCONNECTS``), so
    the client stops instead of reconnecting."""

    def __init__(self, reason_code: int, message: str, *, fatal: bool) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.fatal = fatal
