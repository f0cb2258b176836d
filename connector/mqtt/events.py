"""What a session reports: the events ``ClientSession.receive_data`` returns, in order (a
delivered message is the :class:`~connector.mqtt.packets.Publish` itself)."""

from __future__ import annotations

from dataclasses import dataclass

from .negotiated import BrokerLimits
from .packets import PacketType, Publish
from .properties import Properties
from .reasons import is_failure, reason_name


@dataclass(slots=True)
class Connected:
    """CONNACK accepted. ``session_lost``: a persistent session was expected but absent.
    ``forgotten_qos2``: pending QoS 2 ids dropped because the broker holds no session (it will
    never send their PUBREL); a caller that stores pending ids releases them too."""

    session_present: bool
    session_lost: bool
    forgotten_qos2: tuple[int, ...] = ()
    limits: BrokerLimits | None = None
    """MQTT 5: the broker's limits and assignments from CONNACK (None below level 5)."""
    properties: Properties | None = None
    """MQTT 5: CONNACK's properties as sent (reason string, user properties, ...)."""


@dataclass(slots=True)
class Subscribed:
    """SUBACK for ``filters``; ``granted`` holds each filter's QoS or 0x80 for failure."""

    packet_id: int
    filters: list[str]
    granted: list[int]

    @property
    def refused(self) -> list[str]:
        """Filters the broker refused: 0x80 at 3.1.1, any reason code >= 0x80 at level 5."""
        return [f for f, code in zip(self.filters, self.granted, strict=True) if is_failure(code)]

    def reasons(self) -> list[str]:
        """Each refused filter with its reason code's name (section 3.9.3)."""
        return [
            f"{f} ({reason_name(code, PacketType.SUBACK)})"
            for f, code in zip(self.filters, self.granted, strict=True)
            if is_failure(code)
        ]


@dataclass(slots=True)
class Unsubscribed:
    packet_id: int


@dataclass(slots=True)
class Released:
    """PUBREL for a pending QoS 2 id: persist the release, then call ``complete(packet_id)``."""

    packet_id: int


@dataclass(slots=True)
class PublishDone:
    """An outbound QoS 1/2 message finished (PUBACK, or PUBCOMP for QoS 2; at level 5 also
    a PUBREC with a reason code >= 0x80). ``refused`` says why the broker refused the
    message itself (a PUBACK or PUBREC with a reason code >= 0x80, its topic and reason
    named); a PUBCOMP 0x92 (Packet Identifier not found, after a new session) ends an
    exchange whose message the broker had taken, and is no refusal."""

    packet_id: int
    reason_code: int = 0
    refused: str | None = None


@dataclass(slots=True)
class ServerDisconnect:
    """MQTT 5: the broker sent DISCONNECT with ``reason_code`` (section 3.14); the connection
    is over. ``properties`` may hold a Reason String or a Server Reference."""

    reason_code: int
    properties: Properties | None = None

    @property
    def name(self) -> str:
        return reason_name(self.reason_code, PacketType.DISCONNECT)


@dataclass(slots=True)
class Pong:
    """PINGRESP arrived."""


@dataclass(slots=True)
class ProtocolViolation:
    """The broker broke the protocol; the connection must be closed. ``reason`` cites the rule."""

    reason: str


Event = (
    Publish
    | Connected
    | Subscribed
    | Unsubscribed
    | Released
    | PublishDone
    | Pong
    | ProtocolViolation
    | ServerDisconnect
)


PROGRESS = (Publish, Released, PublishDone)
"""Events that show the broker doing its job: they end a run of protocol violations."""
