"""The two numbers every MQTT packet is read by: its type (the high nibble of the fixed
header's first byte, 3.1.1 section 2.2.1) and the protocol level of the connection (the CONNECT
byte that tells 3.1, 3.1.1 and 5.0 apart). :mod:`connector.mqtt.packets` builds the packets on
them, :mod:`connector.mqtt.properties` the property rules per packet type."""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType

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
    AUTH = 15
    """MQTT 5.0 only (MQTT 5.0 section 3.15); type 15 is reserved in 3.1 and 3.1.1."""


class ProtocolLevel(IntEnum):
    """Protocol level byte of CONNECT: 3 is MQTT 3.1 (``MQIsdp``), 4 is MQTT 3.1.1 (``MQTT``),
    5 is MQTT 5.0 (``MQTT``, MQTT 5.0 section 3.1.2.2)."""

    MQTT_3_1 = 3
    MQTT_3_1_1 = 4
    MQTT_5 = 5

    @property
    def protocol_name(self) -> str:
        return "MQIsdp" if self is ProtocolLevel.MQTT_3_1 else "MQTT"

    @classmethod
    def parse(cls, text: str) -> ProtocolLevel:
        """``"3.1"``, ``"3.1.1"`` or ``"5"`` (also ``"3"``, ``"4"``, ``"5.0"``) to a level;
        InvalidArgument (a ValueError) otherwise."""
        names = {
            "3.1": cls.MQTT_3_1,
            "3": cls.MQTT_3_1,
            "3.1.1": cls.MQTT_3_1_1,
            "4": cls.MQTT_3_1_1,
            "5": cls.MQTT_5,
            "5.0": cls.MQTT_5,
        }
        try:
            return names[str(text).strip()]
        except KeyError:
            raise InvalidArgument(
                f"unsupported MQTT version {text!r}: use 3.1, 3.1.1 or 5"
            ) from None

    def __str__(self) -> str:
        if self is ProtocolLevel.MQTT_5:
            return "5"
        return "3.1" if self is ProtocolLevel.MQTT_3_1 else "3.1.1"


FIXED_FLAGS: Mapping[int, int] = MappingProxyType(
    {
        **{kind: 0 for kind in range(1, 16)},
        PacketType.PUBREL: 2,
        PacketType.SUBSCRIBE: 2,
        PacketType.UNSUBSCRIBE: 2,
    }
)
"""The flags nibble each packet type must carry (section 2.2.2, table 2.2); PUBLISH's
flags are its DUP, QoS and RETAIN (section 3.3.1), checked apart."""

SECTIONS: Mapping[int, str] = MappingProxyType(
    {kind.value: f"3.{kind.value}" for kind in PacketType}
)
"""The section of chapter 3 that defines each packet type, for error messages (the same
numbers in 3.1.1 and 5.0)."""
