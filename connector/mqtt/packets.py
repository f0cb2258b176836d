"""The MQTT control packets as plain value objects (3.1.1 section 2.2.1, 3.1 "Message types";
MQTT 5.0 section 2.1.2 adds AUTH).

Packets carry decoded field values only; :mod:`connector.mqtt.encode` turns them into bytes and
back. Packet identifiers are ``int`` in 1..65535; ``None`` where the packet has none.

The MQTT 5.0 fields have defaults that mean "none" (``properties=None``, ``reason_code=0``), so
packets built for 3.1 / 3.1.1 are unchanged; the codec refuses them on a 3.1 / 3.1.1 connection
when they are set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import InvalidArgument
from .packet_types import PacketType, ProtocolLevel
from .properties import Properties


@dataclass(slots=True)
class Will:
    """The Will Message of a CONNECT (section 3.1.2.5); ``properties`` are its Will Properties
    (MQTT 5.0 section 3.1.3.2)."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties | None = None


@dataclass(slots=True)
class Connect:
    """CONNECT (section 3.1). The password is never shown by ``repr``."""

    client_id: str
    clean_session: bool = True
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = field(default=None, repr=False)
    will: Will | None = None
    protocol_level: int = ProtocolLevel.MQTT_3_1_1
    properties: Properties | None = None
    type = PacketType.CONNECT


@dataclass(slots=True)
class Connack:
    """CONNACK (section 3.2); ``session_present`` is always False on 3.1. On MQTT 5.0
    ``return_code`` holds the Connect Reason Code (MQTT 5.0 section 3.2.2.2)."""

    session_present: bool
    return_code: int
    properties: Properties | None = None
    type = PacketType.CONNACK


@dataclass(slots=True)
class Publish:
    """PUBLISH (section 3.3). ``packet_id`` is None exactly when ``qos`` is 0."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties | None = None
    type = PacketType.PUBLISH


@dataclass(slots=True)
class Puback:
    """PUBACK (section 3.4): QoS 1 acknowledgement.

    ``reason_code`` and ``properties``: MQTT 5.0 only (MQTT 5.0 section 3.4.2)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None
    type = PacketType.PUBACK


@dataclass(slots=True)
class Pubrec:
    """PUBREC (section 3.5): QoS 2 delivery, part 1.

    ``reason_code`` and ``properties``: MQTT 5.0 only (MQTT 5.0 section 3.5.2)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None
    type = PacketType.PUBREC


@dataclass(slots=True)
class Pubrel:
    """PUBREL (section 3.6): QoS 2 delivery, part 2.

    ``reason_code`` and ``properties``: MQTT 5.0 only (MQTT 5.0 section 3.6.2)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None
    type = PacketType.PUBREL


@dataclass(slots=True)
class Pubcomp:
    """PUBCOMP (section 3.7): QoS 2 delivery, part 3.

    ``reason_code`` and ``properties``: MQTT 5.0 only (MQTT 5.0 section 3.7.2)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None
    type = PacketType.PUBCOMP


@dataclass(slots=True)
class Subscribe:
    """SUBSCRIBE (section 3.8): (topic filter, requested QoS) pairs. On MQTT 5.0 the number is
    the whole Subscription Options byte (MQTT 5.0 section 3.8.3.1, see
    :func:`subscription_options`)."""

    packet_id: int
    subscriptions: list[tuple[str, int]]
    properties: Properties | None = None
    type = PacketType.SUBSCRIBE


def subscription_options(
    qos: int,
    no_local: bool = False,
    retain_as_published: bool = False,
    retain_handling: int = 0,
) -> int:
    """The Subscription Options byte of an MQTT 5.0 SUBSCRIBE (MQTT 5.0 section 3.8.3.1):
    maximum QoS in bits 0-1, No Local in bit 2, Retain As Published in bit 3, Retain Handling
    in bits 4-5; bits 6-7 are reserved (0)."""
    if qos not in (0, 1, 2):
        raise InvalidArgument(
            f"subscription QoS must be 0, 1 or 2, got {qos!r} (MQTT 5.0 section 3.8.3.1)"
        )
    if retain_handling not in (0, 1, 2):
        raise InvalidArgument(
            f"Retain Handling must be 0, 1 or 2, got {retain_handling!r} (MQTT 5.0 section 3.8.3.1)"
        )
    return qos | (4 if no_local else 0) | (8 if retain_as_published else 0) | retain_handling << 4


SUBACK_FAILURE = 0x80


@dataclass(slots=True)
class Suback:
    """SUBACK (section 3.9): one return code per filter, 0-2 granted QoS or 0x80 failure; on
    MQTT 5.0 the reason codes of MQTT 5.0 section 3.9.3."""

    packet_id: int
    return_codes: list[int]
    properties: Properties | None = None
    type = PacketType.SUBACK


@dataclass(slots=True)
class Unsubscribe:
    """UNSUBSCRIBE (section 3.10)."""

    packet_id: int
    topics: list[str]
    properties: Properties | None = None
    type = PacketType.UNSUBSCRIBE


@dataclass(slots=True)
class Unsuback:
    """UNSUBACK (section 3.11). ``reason_codes`` (one per topic filter) and ``properties``:
    MQTT 5.0 only (MQTT 5.0 section 3.11)."""

    packet_id: int
    reason_codes: list[int] = field(default_factory=list)
    properties: Properties | None = None
    type = PacketType.UNSUBACK


@dataclass(slots=True)
class Pingreq:
    """PINGREQ (section 3.12)."""

    type = PacketType.PINGREQ


@dataclass(slots=True)
class Pingresp:
    """PINGRESP (section 3.13)."""

    type = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    """DISCONNECT (section 3.14). ``reason_code`` and ``properties``: MQTT 5.0 only (MQTT 5.0
    section 3.14.2)."""

    reason_code: int = 0
    properties: Properties | None = None
    type = PacketType.DISCONNECT


@dataclass(slots=True)
class Auth:
    """AUTH (MQTT 5.0 section 3.15): a step of enhanced authentication; MQTT 5.0 only."""

    reason_code: int = 0
    properties: Properties | None = None
    type = PacketType.AUTH


Packet = (
    Connect
    | Connack
    | Publish
    | Puback
    | Pubrec
    | Pubrel
    | Pubcomp
    | Subscribe
    | Suback
    | Unsubscribe
    | Unsuback
    | Pingreq
    | Pingresp
    | Disconnect
    | Auth
)


__all__ = [
    "SUBACK_FAILURE",
    "Auth",
    "Connack",
    "Connect",
    "Disconnect",
    "Packet",
    "PacketType",
    "Pingreq",
    "Pingresp",
    "ProtocolLevel",
    "Puback",
    "Pubcomp",
    "Publish",
    "Pubrec",
    "Pubrel",
    "Suback",
    "Subscribe",
    "Unsuback",
    "Unsubscribe",
    "Will",
    "subscription_options",
]
