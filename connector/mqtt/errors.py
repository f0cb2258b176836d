"""Error types of the MQTT layer.

Every malformed frame raises :class:`MalformedPacket` whose message names the rule broken and
the spec section (MQTT 3.1.1, OASIS Standard, unless it says 3.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .packets import Packet


class MqttError(Exception):
    """Base class of every error raised by :mod:`connector.mqtt`."""


class MalformedPacket(MqttError):
    """Bytes on the wire that break the MQTT packet format.

    The connection that produced them must be closed (3.1.1 section 4.8: on a protocol
    violation the receiver closes the Network Connection). When raised by the stream decoder,
    ``packets`` holds the well-formed packets that preceded the bad frame in the same read.
    """

    packets: Sequence[Packet] = ()


class PacketTooLarge(MalformedPacket):
    """A packet whose Remaining Length is above the configured maximum."""


class ProtocolError(MqttError):
    """A well-formed packet that is not allowed in the current session state."""


class RepeatedProtocolViolation(ProtocolError):
    """The broker broke the protocol on ``count`` connections in a row with no message or
    release delivered in between: reconnecting again would not help, so the client gives up.

    ``reason`` is the last rule broken (with its spec section); ``broker`` is filled in by the
    driver, which knows the address.
    """

    def __init__(self, count: int, reason: str, broker: str | None = None) -> None:
        self.count = count
        self.reason = reason
        self.broker = broker
        super().__init__(
            f"{broker or 'the broker'} broke the MQTT protocol {count} times in a row without "
            f"delivering a message in between; giving up. Last violation: {reason}"
        )


class ConnectionRefused(MqttError):
    """CONNACK carried a non-zero return code (3.1.1 section 3.2.2.3, table 3.1)."""

    return_code: int = 0
    reason: str = "connection refused"

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


class SubscriptionRefused(MqttError):
    """SUBACK returned 0x80 (failure) for one or more topic filters (section 3.9.3)."""

    def __init__(self, filters: list[str]) -> None:
        self.filters = filters
        super().__init__(
            "the broker refused the subscription (SUBACK 0x80) for: " + ", ".join(filters)
        )


class KeepAliveTimeout(MqttError):
    """No packet from the broker within 1.5 x keep-alive after a PINGREQ (section 3.1.2.10)."""


class ConnectionLost(MqttError):
    """The network connection closed or failed."""

    nothing_sent: bool = False
    """Raised by a write that the connection took no byte of: what it carried never left."""
