"""Error types of the MQTT layer, in two families that say who broke a rule.

* :class:`PeerViolation`: the peer (the broker) broke the protocol. Bytes that break the
  packet format raise :class:`MalformedFrame`; the connection that carried them must be
  closed (3.1.1 section 4.8). A session turns a violation into a ``ProtocolViolation`` event
  and raises :class:`RepeatedProtocolViolation` only when reconnecting keeps failing.
* :class:`UsageError`: the caller misused the API, and no connection is at fault: an argument
  the standard or the API refuses (:class:`InvalidArgument`, also a ``ValueError``;
  :class:`InvalidTopic` for a topic name or filter), or a call the session's state does not
  allow (:class:`ProtocolError`).

:class:`MalformedPacket` is the packet format broken, by either side: a ``MalformedFrame`` is
one received, an ``InvalidTopic`` one the caller asked to send. Every message names the rule
and its section of the MQTT 3.1.1 standard (the 3.1 text where the versions differ). The
other errors (a refused connection or subscription, a lost connection, a silent broker) are
outcomes of the network and the broker's configuration, in neither family.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .packets import Packet
    from .properties import Properties


class MqttError(Exception):
    """Base class of every error raised by :mod:`connector.mqtt`."""


class PeerViolation(MqttError):
    """The peer broke the MQTT protocol; the connection must be closed (section 4.8)."""


class UsageError(MqttError):
    """The caller misused the API; the connection and the peer are not at fault."""


class MalformedPacket(MqttError):
    """A packet that breaks the packet format, received (:class:`MalformedFrame`) or to be
    sent (:class:`InvalidTopic`); the message names the rule and its section."""


class MalformedFrame(MalformedPacket, PeerViolation):
    """Bytes received that break the packet format.

    When raised by the stream decoder, ``packets`` holds the well-formed packets that
    preceded the bad frame in the same read.
    """

    packets: Sequence[Packet] = ()


class PacketTooLarge(MalformedFrame):
    """A packet larger than the client's maximum (its Remaining Length is above the one that
    maximum leaves, MQTT 5.0 section 3.1.2.11.4)."""


class RepeatedProtocolViolation(PeerViolation):
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


class InvalidArgument(UsageError, ValueError):
    """An argument that the standard or the API refuses (a ``ValueError`` too)."""


class InvalidTopic(InvalidArgument, MalformedPacket):
    """A topic name or filter given by the caller that breaks section 4.7 (or 1.5.3)."""


class ProtocolError(UsageError):
    """A call the session's state does not allow (e.g. ``publish`` before CONNACK), or one
    past the protocol's limits (every packet identifier in use, section 2.3.1)."""


class ConnectionRefused(MqttError):
    """CONNACK carried a non-zero return code (3.1.1 section 3.2.2.3, table 3.1)."""

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


CONNACK_ERRORS: dict[int, type[ConnectionRefused]] = {
    cls.return_code: cls
    for cls in (
        UnacceptableProtocolVersion,
        IdentifierRejected,
        ServerUnavailable,
        BadUsernameOrPassword,
        NotAuthorized,
    )
}


class BrokerBusy(ConnectionRefused):
    """MQTT 5: the broker refused the connection for now (0x89 Server busy, 0x97 Quota
    exceeded, 0x9F Connection rate exceeded): a later attempt may succeed, so the driver
    retries it with backoff."""

    reason = "the broker is busy"
    retryable = True


_CONNACK_ERRORS_5: dict[int, type[ConnectionRefused]] = {
    0x84: UnacceptableProtocolVersion,
    0x85: IdentifierRejected,
    0x86: BadUsernameOrPassword,
    0x87: NotAuthorized,
    0x88: ServerUnavailable,
    0x89: BrokerBusy,
    0x97: BrokerBusy,
    0x9F: BrokerBusy,
}


def connack_error(code: int, level: int, properties: Properties | None = None) -> ConnectionRefused:
    """The error for a CONNACK that refused the connection with ``code`` at protocol
    ``level``: at level 5 its message names the reason code (MQTT 5.0 section 3.2.2.2, e.g.
    "0x86 Bad User Name or Password") with the broker's Reason String and Server Reference."""
    if level < 5:
        return CONNACK_ERRORS.get(code, ConnectionRefused)()
    from .packets import PacketType
    from .reasons import reason_name

    text = f"the broker refused the connection: CONNACK {reason_name(code, PacketType.CONNACK)}"
    reason_string = properties.reason_string if properties is not None else None
    reference = properties.server_reference if properties is not None else None
    if reason_string:
        text += f" ({reason_string})"
    if reference:
        text += f"; the broker names another server to use: {reference}"
    error = _CONNACK_ERRORS_5.get(code, ConnectionRefused)(text)
    error.return_code = code
    return error


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


FATAL_DISCONNECTS = frozenset(
    {0x81, 0x82, 0x87, 0x8C, 0x8E, 0x90, 0x93, 0x94, 0x95, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E}
    | {0xA1, 0xA2}
)
"""Reason codes of a broker's DISCONNECT (MQTT 5.0 section 3.14.2.1) after which the client
stops instead of reconnecting, because the next connection would meet them again: our packets
broke a rule (0x81, 0x82, 0x90, 0x93-0x95, 0x99, 0x9A, 0x9B), the broker refuses us (0x87 Not
authorized, 0x8C Bad authentication method, 0x9E/0xA1/0xA2 a subscription feature it lacks),
it sends us elsewhere (0x9C Use another server, 0x9D Server moved), or 0x8E Session taken
over: another client connected with our client id, and reconnecting would take the session
back and forth between two jobs. Every other code (0x00, 0x8B Server shutting down, 0x89
Server busy, 0x97 Quota exceeded, 0x98 Administrative action, ...) is followed by a reconnect
with backoff."""


class BrokerDisconnected(MqttError):
    """MQTT 5: the broker ended the connection with a reason code in
    :data:`FATAL_DISCONNECTS`; the message names it (and the broker's Reason String)."""

    def __init__(self, reason_code: int, message: str) -> None:
        self.reason_code = reason_code
        super().__init__(message)


class KeepAliveTimeout(MqttError):
    """No packet from the broker within 1.5 x keep-alive after a PINGREQ (section 3.1.2.10)."""


class ConnectionLost(MqttError):
    """The network connection closed or failed."""

    nothing_sent: bool = False
    """Raised by a write that the connection took no byte of: what it carried never left."""
