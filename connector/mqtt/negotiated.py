"""What one MQTT 5 connection agreed: the broker's limits from CONNACK and the topic aliases
the broker set (MQTT 5.0 sections 3.2.2.3 and 3.3.2.3.4). Sans-I/O values the session keeps
per connection; at 3.1/3.1.1 the defaults below hold and nothing else applies."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from .packets import Publish
from .properties import Properties

log = logging.getLogger("connector.mqtt.session")

MAX_RECEIVE_MAXIMUM = 0xFFFF
"""Receive Maximum when CONNACK or CONNECT gives none (section 3.1.2.11.3, 3.2.2.3.3)."""

SESSION_NEVER_EXPIRES = 0xFFFF_FFFF
"""Session Expiry Interval that means the session does not expire (section 3.1.2.11.2)."""

PROTOCOL_MAXIMUM_PACKET_SIZE = 1 + 4 + 268_435_455
"""The largest packet the protocol can frame, all of it: the first byte, four bytes of
Remaining Length and a Remaining Length of 268,435,455 (section 2.2.3)."""

DEFAULT_MAXIMUM_PACKET_SIZE = 16 * 1024 * 1024
"""The Maximum Packet Size a level 5 session sends unless told otherwise (section
3.1.2.11.4): 16 MiB, above the limits common brokers set on what they accept (docs/mqtt5.md),
so one message cannot make the receiver buffer hundreds of megabytes. A broker does not send
a larger packet to this client: it discards that message ([MQTT-3.1.2-25]). Below level 5
nothing is sent and the protocol's largest holds unless the caller sets a limit."""

MIN_MAXIMUM_PACKET_SIZE = 64
"""The smallest Maximum Packet Size a session accepts as a setting: room for CONNACK, SUBACK
and the acknowledgements of any broker (a value this low is for tests)."""


def largest_remaining_length(packet_size: int) -> int:
    """The largest Remaining Length of a packet of at most ``packet_size`` bytes in all: one
    byte of type and flags, the Remaining Length in 1 to 4 bytes, then that many (sections
    2.1.1 and 2.2.3; MQTT 5.0 section 3.1.2.11.4 counts the whole packet)."""
    for digits, most in ((1, 0x7F), (2, 0x3FFF), (3, 0x1F_FFFF), (4, 0xFFF_FFFF)):
        length = packet_size - 1 - digits
        if length <= most:
            return length
    return 0xFFF_FFFF


@dataclass(slots=True)
class BrokerLimits:
    """The broker's limits for this connection from its CONNACK properties (section
    3.2.2.3), each at the standard's default when absent."""

    receive_maximum: int = MAX_RECEIVE_MAXIMUM
    """QoS 1/2 PUBLISH packets we may have unacknowledged at the broker (3.2.2.3.3)."""
    maximum_qos: int = 2
    """Highest QoS the broker accepts in our PUBLISH (3.2.2.3.4)."""
    retain_available: bool = True
    """Whether the broker accepts retained PUBLISH (3.2.2.3.5)."""
    maximum_packet_size: int | None = None
    """Largest packet, all of it, the broker accepts from us; None: no limit (3.2.2.3.6)."""
    topic_alias_maximum: int = 0
    """Topic aliases we may use towards the broker (3.2.2.3.8); the session uses none."""
    server_keep_alive: int | None = None
    """Keep alive the broker set in place of ours (3.2.2.3.14)."""
    session_expiry_interval: int | None = None
    """Session Expiry Interval the broker set in place of ours (3.2.2.3.2)."""
    assigned_client_identifier: str | None = None
    """The client id the broker gave for an empty one (3.2.2.3.7)."""
    shared_subscription_available: bool = True
    wildcard_subscription_available: bool = True
    subscription_identifier_available: bool = True

    @classmethod
    def from_connack(cls, props: Properties | None) -> BrokerLimits:
        """The limits CONNACK's properties set (the codec has checked their values)."""
        if props is None:
            return cls()
        limits = cls()
        if props.receive_maximum is not None:
            limits.receive_maximum = props.receive_maximum
        if props.maximum_qos is not None:
            limits.maximum_qos = props.maximum_qos
        if props.retain_available is not None:
            limits.retain_available = bool(props.retain_available)
        limits.maximum_packet_size = props.maximum_packet_size
        if props.topic_alias_maximum is not None:
            limits.topic_alias_maximum = props.topic_alias_maximum
        limits.server_keep_alive = props.server_keep_alive
        limits.session_expiry_interval = props.session_expiry_interval
        limits.assigned_client_identifier = props.assigned_client_identifier
        if props.shared_subscription_available is not None:
            limits.shared_subscription_available = bool(props.shared_subscription_available)
        if props.wildcard_subscription_available is not None:
            limits.wildcard_subscription_available = bool(props.wildcard_subscription_available)
        if props.subscription_identifier_available is not None:
            limits.subscription_identifier_available = bool(props.subscription_identifier_available)
        return limits

    def assignments(self, client_id: str, keep_alive: int, expiry: int) -> tuple[str, int]:
        """What CONNACK assigned (section 3.2.2.3), logged: the client id (the broker's for
        an empty one, kept for every reconnect) and the keep alive (the Server Keep Alive in
        place of ours) to use; a session kept for less than the ``expiry`` asked for is a
        warning (messages that arrive while the job is stopped longer are lost)."""
        assigned = self.assigned_client_identifier
        if assigned is not None:
            if client_id and assigned != client_id:
                log.warning(
                    "the broker assigned client id %r although %r was sent (section 3.2.2.3.7)",
                    assigned,
                    client_id,
                )
            else:
                log.info("the broker assigned client id %r", assigned)
            client_id = assigned
        if self.server_keep_alive is not None and self.server_keep_alive != keep_alive:
            log.info(
                "the broker set keep alive to %d s in place of %d s (Server Keep Alive)",
                self.server_keep_alive,
                keep_alive,
            )
            keep_alive = self.server_keep_alive
        given = self.session_expiry_interval
        if given is not None and given != expiry:
            (log.warning if given < expiry else log.info)(
                "the broker keeps this session %d s after a disconnect, not the %d s asked for "
                "(section 3.2.2.3.2): messages that arrive while the job is stopped longer "
                "are dropped by the broker",
                given,
                expiry,
            )
        return client_id, keep_alive


class TopicAliases:
    """The inbound topic aliases of one connection (section 3.3.2.3.4): a PUBLISH with a
    topic name and a Topic Alias sets the alias; one with an empty topic name and the alias
    uses it. Aliases end with the connection ([MQTT-3.3.2-7]); at most ``maximum`` of them,
    the Topic Alias Maximum we sent in CONNECT."""

    __slots__ = ("_topics", "maximum")

    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self._topics: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._topics)

    def resolve(self, packet: Publish, props: Properties) -> str | None:
        """Set ``packet.topic`` from its alias, or record the alias; returns the violation
        (reason code and rule) when the broker broke section 3.3.2.3.4, else None."""
        alias = props.topic_alias
        if alias is None:
            return None
        if alias > self.maximum:
            return (
                f"0x94 Topic Alias invalid: PUBLISH with Topic Alias {alias}, above the Topic "
                f"Alias Maximum {self.maximum} sent in CONNECT (section 3.3.2.3.4, "
                "[MQTT-3.3.2-9])"
            )
        if packet.topic:
            self._topics[alias] = packet.topic
            return None
        topic = self._topics.get(alias)
        if topic is None:
            return (
                f"0x82 Protocol Error: PUBLISH with an empty topic name and Topic Alias "
                f"{alias}, which this connection never set (section 3.3.2.3.4)"
            )
        packet.topic = topic
        return None
