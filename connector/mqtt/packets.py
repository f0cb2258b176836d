"""The 14 MQTT control packets as plain value objects (3.1.1 section 2.2.1, 3.1 "Message types").

Packets carry decoded field values only; :mod:`connector.mqtt.codec` turns them into bytes and
back. Packet identifiers are ``int`` in 1..65535; ``None`` where the packet has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from .errors import InvalidArgument


class PacketType(IntEnum):
    """Control packet type: the high nibble of the fixed header's first byte (section 2.2.1)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14


class ProtocolLevel(IntEnum):
    """Protocol level byte of CONNECT: 3 is MQTT 3.1 (``MQIsdp``), 4 is MQTT 3.1.1 (``MQTT``)."""

    MQTT_3_1 = 3
    MQTT_3_1_1 = 4

    @property
    def protocol_name(self) -> str:
        return "MQIsdp" if self is ProtocolLevel.MQTT_3_1 else "MQTT"

    @classmethod
    def parse(cls, text: str) -> ProtocolLevel:
        """``"3.1"`` or ``"3.1.1"`` (also ``"3"``/``"4"``) to a level; InvalidArgument (a
        ValueError) otherwise."""
        names = {
            "3.1": cls.MQTT_3_1,
            "3": cls.MQTT_3_1,
            "3.1.1": cls.MQTT_3_1_1,
            "4": cls.MQTT_3_1_1,
        }
        try:
            return names[str(text).strip()]
        except KeyError:
            raise InvalidArgument(f"unsupported MQTT version {text!r}: use 3.1 or 3.1.1") from None

    def __str__(self) -> str:
        return "3.1" if self is ProtocolLevel.MQTT_3_1 else "3.1.1"


@dataclass(slots=True)
class Will:
    """The Will Message of a CONNECT (section 3.1.2.5)."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False


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
    type = PacketType.CONNECT


@dataclass(slots=True)
class Connack:
    """CONNACK (section 3.2); ``session_present`` is always False on 3.1."""

    session_present: bool
    return_code: int
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
    type = PacketType.PUBLISH


@dataclass(slots=True)
class Puback:
    """PUBACK (section 3.4): QoS 1 acknowledgement."""

    packet_id: int
    type = PacketType.PUBACK


@dataclass(slots=True)
class Pubrec:
    """PUBREC (section 3.5): QoS 2 delivery, part 1."""

    packet_id: int
    type = PacketType.PUBREC


@dataclass(slots=True)
class Pubrel:
    """PUBREL (section 3.6): QoS 2 delivery, part 2."""

    packet_id: int
    type = PacketType.PUBREL


@dataclass(slots=True)
class Pubcomp:
    """PUBCOMP (section 3.7): QoS 2 delivery, part 3."""

    packet_id: int
    type = PacketType.PUBCOMP


@dataclass(slots=True)
class Subscribe:
    """SUBSCRIBE (section 3.8): (topic filter, requested QoS) pairs."""

    packet_id: int
    subscriptions: list[tuple[str, int]]
    type = PacketType.SUBSCRIBE


SUBACK_FAILURE = 0x80


@dataclass(slots=True)
class Suback:
    """SUBACK (section 3.9): one return code per filter, 0-2 granted QoS or 0x80 failure."""

    packet_id: int
    return_codes: list[int]
    type = PacketType.SUBACK


@dataclass(slots=True)
class Unsubscribe:
    """UNSUBSCRIBE (section 3.10)."""

    packet_id: int
    topics: list[str]
    type = PacketType.UNSUBSCRIBE


@dataclass(slots=True)
class Unsuback:
    """UNSUBACK (section 3.11)."""

    packet_id: int
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
    """DISCONNECT (section 3.14)."""

    type = PacketType.DISCONNECT


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
)
