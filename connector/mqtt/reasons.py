"""MQTT 5.0 reason codes: their names and which packet may carry each (MQTT 5.0 section 2.4,
table 2-6, and the reason code table of each packet).

A reason code is one byte; below 0x80 it reports success, from 0x80 on a failure (section 2.4).
One code may have a different name on different packets: 0x00 is "Success", "Normal
disconnection" on DISCONNECT and "Granted QoS 0" on SUBACK.

The policy that follows from a code lives here too: which error a refusing CONNACK raises
(:func:`connack_error`, the 3.1 / 3.1.1 return codes 1 to 5 of 3.1.1 section 3.2.2.3 included)
and after which DISCONNECT codes the client stops (:data:`FATAL_DISCONNECTS`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from .errors import (
    BadUsernameOrPassword,
    BrokerBusy,
    ConnectionRefused,
    IdentifierRejected,
    InvalidArgument,
    MalformedFrame,
    NotAuthorized,
    ServerUnavailable,
    UnacceptableProtocolVersion,
)
from .packet_types import PacketType

if TYPE_CHECKING:
    from .properties import Properties

FAILURE = 0x80
"""Reason codes from this value on report a failure (MQTT 5.0 section 2.4)."""

_CONNACK = PacketType.CONNACK
_PUBACK = PacketType.PUBACK
_PUBREC = PacketType.PUBREC
_PUBREL = PacketType.PUBREL
_PUBCOMP = PacketType.PUBCOMP
_SUBACK = PacketType.SUBACK
_UNSUBACK = PacketType.UNSUBACK
_DISCONNECT = PacketType.DISCONNECT
_AUTH = PacketType.AUTH

# Table 2-6 of MQTT 5.0 section 2.4: (code, name, packets that may carry it under that name).
_TABLE: tuple[tuple[int, str, tuple[PacketType, ...]], ...] = (
    (0x00, "Success", (_CONNACK, _PUBACK, _PUBREC, _PUBREL, _PUBCOMP, _UNSUBACK, _AUTH)),
    (0x00, "Normal disconnection", (_DISCONNECT,)),
    (0x00, "Granted QoS 0", (_SUBACK,)),
    (0x01, "Granted QoS 1", (_SUBACK,)),
    (0x02, "Granted QoS 2", (_SUBACK,)),
    (0x04, "Disconnect with Will Message", (_DISCONNECT,)),
    (0x10, "No matching subscribers", (_PUBACK, _PUBREC)),
    (0x11, "No subscription existed", (_UNSUBACK,)),
    (0x18, "Continue authentication", (_AUTH,)),
    (0x19, "Re-authenticate", (_AUTH,)),
    (0x80, "Unspecified error", (_CONNACK, _PUBACK, _PUBREC, _SUBACK, _UNSUBACK, _DISCONNECT)),
    (0x81, "Malformed Packet", (_CONNACK, _DISCONNECT)),
    (0x82, "Protocol Error", (_CONNACK, _DISCONNECT)),
    (
        0x83,
        "Implementation specific error",
        (_CONNACK, _PUBACK, _PUBREC, _SUBACK, _UNSUBACK, _DISCONNECT),
    ),
    (0x84, "Unsupported Protocol Version", (_CONNACK,)),
    (0x85, "Client Identifier not valid", (_CONNACK,)),
    (0x86, "Bad User Name or Password", (_CONNACK,)),
    (0x87, "Not authorized", (_CONNACK, _PUBACK, _PUBREC, _SUBACK, _UNSUBACK, _DISCONNECT)),
    (0x88, "Server unavailable", (_CONNACK,)),
    (0x89, "Server busy", (_CONNACK, _DISCONNECT)),
    (0x8A, "Banned", (_CONNACK,)),
    (0x8B, "Server shutting down", (_DISCONNECT,)),
    (0x8C, "Bad authentication method", (_CONNACK, _DISCONNECT)),
    (0x8D, "Keep Alive timeout", (_DISCONNECT,)),
    (0x8E, "Session taken over", (_DISCONNECT,)),
    (0x8F, "Topic Filter invalid", (_SUBACK, _UNSUBACK, _DISCONNECT)),
    (0x90, "Topic Name invalid", (_CONNACK, _PUBACK, _PUBREC, _DISCONNECT)),
    (0x91, "Packet Identifier in use", (_PUBACK, _PUBREC, _SUBACK, _UNSUBACK)),
    (0x92, "Packet Identifier not found", (_PUBREL, _PUBCOMP)),
    (0x93, "Receive Maximum exceeded", (_DISCONNECT,)),
    (0x94, "Topic Alias invalid", (_DISCONNECT,)),
    (0x95, "Packet too large", (_CONNACK, _DISCONNECT)),
    (0x96, "Message rate too high", (_DISCONNECT,)),
    (0x97, "Quota exceeded", (_CONNACK, _PUBACK, _PUBREC, _SUBACK, _DISCONNECT)),
    (0x98, "Administrative action", (_DISCONNECT,)),
    (0x99, "Payload format invalid", (_CONNACK, _PUBACK, _PUBREC, _DISCONNECT)),
    (0x9A, "Retain not supported", (_CONNACK, _DISCONNECT)),
    (0x9B, "QoS not supported", (_CONNACK, _DISCONNECT)),
    (0x9C, "Use another server", (_CONNACK, _DISCONNECT)),
    (0x9D, "Server moved", (_CONNACK, _DISCONNECT)),
    (0x9E, "Shared Subscriptions not supported", (_SUBACK, _DISCONNECT)),
    (0x9F, "Connection rate exceeded", (_CONNACK, _DISCONNECT)),
    (0xA0, "Maximum connect time", (_DISCONNECT,)),
    (0xA1, "Subscription Identifiers not supported", (_SUBACK, _DISCONNECT)),
    (0xA2, "Wildcard Subscriptions not supported", (_SUBACK, _DISCONNECT)),
)

REASON_CODE_SECTIONS: Mapping[PacketType, str] = MappingProxyType(
    {
        _CONNACK: "3.2.2.2",
        _PUBACK: "3.4.2.1",
        _PUBREC: "3.5.2.1",
        _PUBREL: "3.6.2.1",
        _PUBCOMP: "3.7.2.1",
        _SUBACK: "3.9.3",
        _UNSUBACK: "3.11.3",
        _DISCONNECT: "3.14.2.1",
        _AUTH: "3.15.2.1",
    }
)
"""The MQTT 5.0 section holding each packet's table of reason codes."""

REASON_CODES: Mapping[PacketType, frozenset[int]] = MappingProxyType(
    {
        kind: frozenset(code for code, _, kinds in _TABLE if kind in kinds)
        for kind in REASON_CODE_SECTIONS
    }
)
"""The reason codes each packet that carries one may use (MQTT 5.0 section 2.4, table 2-6)."""

_NAMES: dict[tuple[int, int], str] = {
    (code, kind): name for code, name, kinds in _TABLE for kind in kinds
}
_ANY_NAME: dict[int, str] = {}
for _code, _name, _ in _TABLE:
    _ANY_NAME.setdefault(_code, _name)


def reason_name(code: int, packet_type: int) -> str:
    """``code`` with its name on ``packet_type``, e.g. ``"0x86 Bad User Name or Password"``
    (MQTT 5.0 section 2.4, table 2-6); ``"0x?? unknown reason code"`` for a code the table
    lacks, and the table's name plus a note for one that ``packet_type`` may not carry."""
    name = _NAMES.get((code, packet_type))
    if name is not None:
        return f"0x{code:02X} {name}"
    other = _ANY_NAME.get(code)
    if other is None:
        return f"0x{code:02X} unknown reason code"
    kind = _packet_name(packet_type)
    return f"0x{code:02X} {other} (not a {kind} reason code)"


def is_failure(code: int) -> bool:
    """Whether reason code ``code`` reports a failure: 0x80 or above (MQTT 5.0 section 2.4)."""
    return code >= FAILURE


def reason_allowed(code: int, packet_type: PacketType) -> bool:
    """Whether ``packet_type`` may carry reason code ``code`` (MQTT 5.0 section 2.4)."""
    return code in REASON_CODES[packet_type]


def check_reason(code: int, packet_type: PacketType, *, received: bool) -> int:
    """Return ``code`` if ``packet_type`` may carry it (MQTT 5.0 section 2.4 and the packet's
    reason code table), else raise: :class:`MalformedFrame` for a code ``received`` from the
    peer, :class:`InvalidArgument` for one the caller asks to send."""
    if reason_allowed(code, packet_type):
        return code
    kind = packet_type.name
    section = REASON_CODE_SECTIONS[packet_type]
    if not received and not (isinstance(code, int) and 0 <= code <= 0xFF):
        raise InvalidArgument(
            f"{kind} reason code {code!r} is not a byte (MQTT 5.0 section 2.4, {section})"
        )
    message = (
        f"{kind} reason code {reason_name(code, packet_type)} is not one the {kind} packet "
        f"may carry (MQTT 5.0 section {section})"
    )
    if received:
        raise MalformedFrame(message)
    raise InvalidArgument(message)


def _packet_name(packet_type: int) -> str:
    try:
        return PacketType(packet_type).name
    except ValueError:
        return f"packet type {packet_type}"


# ------------------------------------------------------------------------ policy

CONNACK_ERRORS: Mapping[int, type[ConnectionRefused]] = MappingProxyType(
    {
        cls.return_code: cls
        for cls in (
            UnacceptableProtocolVersion,
            IdentifierRejected,
            ServerUnavailable,
            BadUsernameOrPassword,
            NotAuthorized,
        )
    }
)
"""The error of each refusing CONNACK return code of MQTT 3.1 / 3.1.1 (3.1.1 section 3.2.2.3)."""

_CONNACK_ERRORS_5: Mapping[int, type[ConnectionRefused]] = MappingProxyType(
    {
        0x84: UnacceptableProtocolVersion,
        0x85: IdentifierRejected,
        0x86: BadUsernameOrPassword,
        0x87: NotAuthorized,
        0x88: ServerUnavailable,
        0x89: BrokerBusy,
        0x97: BrokerBusy,
        0x9F: BrokerBusy,
    }
)


def connack_error(code: int, level: int, properties: Properties | None = None) -> ConnectionRefused:
    """The error for a CONNACK that refused the connection with ``code`` at protocol
    ``level``: at level 5 its message names the reason code (MQTT 5.0 section 3.2.2.2, e.g.
    "0x86 Bad User Name or Password") with the broker's Reason String and Server Reference."""
    if level < 5:
        return CONNACK_ERRORS.get(code, ConnectionRefused)()
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
