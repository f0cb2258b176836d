"""What a session is configured with: :class:`SessionConfig` (what the client sends in
CONNECT, plus local limits), its defaults, and the hook of an enhanced authentication
(MQTT 5.0 section 4.12). Each default is a constant here, the one home the source's option
table and the command line take it from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .errors import InvalidArgument
from .negotiated import (
    DEFAULT_MAXIMUM_PACKET_SIZE,
    MIN_MAXIMUM_PACKET_SIZE,
    PROTOCOL_MAXIMUM_PACKET_SIZE,
    SESSION_NEVER_EXPIRES,
)
from .packets import ProtocolLevel, Will
from .properties import Properties

DEFAULT_KEEP_ALIVE = 60
"""Keep alive in seconds unless told otherwise (section 3.1.2.10): a dead broker is noticed
within 1.5 times this."""

DEFAULT_PUBLISH_WINDOW = 20
"""Outbound QoS 1/2 messages a publisher keeps unacknowledged, at most, unless told otherwise.
Below MQTT 5 a broker announces no limit, and one may acknowledge and drop what goes over its
own (docs/brokers.md); at MQTT 5 the broker's Receive Maximum lowers it (section 4.9)."""

DEFAULT_PUBREC_WINDOW = 256
"""QoS 2 exchanges of one connection answered with PUBREC and not yet completed, at most,
unless told otherwise (``SessionConfig.pubrec_window``)."""

DEFAULT_MAX_VIOLATIONS_IN_A_ROW = 5
"""Protocol violations on consecutive connections, with no message delivered in between,
after which the session gives up (``SessionConfig.max_violations_in_a_row``)."""


@dataclass(slots=True)
class SessionConfig:
    """What the client sends in CONNECT, plus local limits. The password is never shown."""

    client_id: str
    clean_session: bool = False
    keep_alive: int = DEFAULT_KEEP_ALIVE
    username: str | None = None
    password: bytes | None = field(default=None, repr=False)
    level: ProtocolLevel = ProtocolLevel.MQTT_3_1_1
    will: Will | None = None
    maximum_packet_size: int | None = None
    """The largest packet, all of it, this client takes from the broker (MQTT 5.0 section
    3.1.2.11.4), sent as Maximum Packet Size at level 5; a larger one is refused (DISCONNECT
    0x95 at level 5) and never acknowledged. None: :data:`DEFAULT_MAXIMUM_PACKET_SIZE` at
    level 5, the protocol's largest below (see ``packet_limit``)."""
    max_violations_in_a_row: int = DEFAULT_MAX_VIOLATIONS_IN_A_ROW
    """Protocol violations on consecutive connections, with no message delivered in between,
    after which ``receive_data`` raises :class:`RepeatedProtocolViolation` instead of asking
    for one more reconnect."""
    pubrec_window: int = DEFAULT_PUBREC_WINDOW
    """Most QoS 2 exchanges this connection has answered with PUBREC and not yet completed
    with PUBCOMP (0: no limit). Further PUBRECs wait for a PUBCOMP (see ``ack_many``)."""
    receive_maximum: int | None = None
    """MQTT 5: QoS 1/2 messages the broker may send before we acknowledge them, the flow
    control window (section 3.1.2.11.3); None sends none, which means 65,535."""
    session_expiry_interval: int | None = None
    """MQTT 5: seconds the broker keeps the session after the connection ends (section
    3.1.2.11.2). None: 0 with ``clean_session``, else :data:`SESSION_NEVER_EXPIRES`, the
    lifetime of a 3.1.1 persistent session (until the broker's own limit), so a job stopped
    for a weekend finds the messages queued meanwhile (docs/mqtt5.md)."""
    topic_alias_maximum: int | None = None
    """MQTT 5: topic aliases the broker may set on this connection (section 3.1.2.11.5);
    None: :data:`DEFAULT_TOPIC_ALIAS_MAXIMUM`."""
    user_properties: list[tuple[str, str]] = field(default_factory=list)
    """MQTT 5: User Properties of CONNECT (section 3.1.2.11.8)."""
    authenticator: Authenticator | None = None
    """MQTT 5: drives an enhanced authentication exchange (section 4.12); None: none."""

    def __post_init__(self) -> None:
        v5 = self.level == ProtocolLevel.MQTT_5
        if self.level == ProtocolLevel.MQTT_3_1 and not 1 <= len(self.client_id) <= 23:
            raise InvalidArgument(
                f"MQTT 3.1 needs a client id of 1 to 23 characters; {self.client_id!r} has "
                f"{len(self.client_id)}"
            )
        if not self.client_id and not self.clean_session and not v5:
            raise InvalidArgument(
                "an empty client id needs clean_session=True (3.1.1 section 3.1.3.1; MQTT 5 "
                "lets the broker assign one)"
            )
        if not v5:
            for name in _V5_SETTINGS:
                if getattr(self, name) not in (None, []):
                    raise InvalidArgument(f"{name} needs MQTT 5 (protocol level 5)")
        _check_range("receive_maximum", self.receive_maximum, 1, 0xFFFF)
        _check_range("session_expiry_interval", self.session_expiry_interval, 0, 0xFFFF_FFFF)
        _check_range("topic_alias_maximum", self.topic_alias_maximum, 0, 0xFFFF)
        problem = persistent_session_problem(self.clean_session, self.session_expiry_interval)
        if problem:
            raise InvalidArgument(f"session_expiry_interval 0 with clean_session False: {problem}")
        if not 0 <= self.keep_alive <= 0xFFFF:
            raise InvalidArgument(f"keep alive must be 0..65535 seconds, got {self.keep_alive}")
        if self.password is not None and self.username is None:
            raise InvalidArgument("a password needs a user name (section 3.1.2.9)")
        if self.max_violations_in_a_row < 1:
            raise InvalidArgument(
                f"max_violations_in_a_row must be >= 1, got {self.max_violations_in_a_row}"
            )
        if self.pubrec_window < 0:
            raise InvalidArgument(f"pubrec_window must be >= 0, got {self.pubrec_window}")
        _check_range(
            "maximum_packet_size",
            self.maximum_packet_size,
            MIN_MAXIMUM_PACKET_SIZE,
            PROTOCOL_MAXIMUM_PACKET_SIZE,
        )

    @property
    def packet_limit(self) -> int:
        """The largest packet in force, all of it (``maximum_packet_size`` or its default)."""
        if self.maximum_packet_size is not None:
            return self.maximum_packet_size
        if self.level == ProtocolLevel.MQTT_5:
            return DEFAULT_MAXIMUM_PACKET_SIZE
        return PROTOCOL_MAXIMUM_PACKET_SIZE

    @property
    def expiry(self) -> int:
        """The Session Expiry Interval sent in CONNECT (see ``session_expiry_interval``)."""
        if self.session_expiry_interval is not None:
            return self.session_expiry_interval
        return 0 if self.clean_session else SESSION_NEVER_EXPIRES

    def connect_properties(self) -> Properties:
        """CONNECT's properties at level 5 (section 3.1.2.11); Maximum Packet Size is
        ``packet_limit``, what the decoder takes."""
        return Properties(
            session_expiry_interval=self.expiry or None,
            receive_maximum=self.receive_maximum,
            maximum_packet_size=self.packet_limit,
            topic_alias_maximum=(
                DEFAULT_TOPIC_ALIAS_MAXIMUM
                if self.topic_alias_maximum is None
                else self.topic_alias_maximum
            )
            or None,
            user_properties=list(self.user_properties),
            authentication_method=self.authenticator.method if self.authenticator else None,
            authentication_data=self.authenticator.initial_data() if self.authenticator else None,
        )


_V5_SETTINGS = (
    "receive_maximum",
    "session_expiry_interval",
    "topic_alias_maximum",
    "user_properties",
    "authenticator",
)

DEFAULT_TOPIC_ALIAS_MAXIMUM = 0
"""Topic aliases a level 5 session lets the broker set, unless told otherwise: none. An alias
saves only the topic's bytes on the wire (the WAL stores the topic name anyway), and a broker
that sends a message on a new connection with an alias of an old one (against [MQTT-3.3.2-7];
docs/brokers.md names one) leaves it without a topic: the session must then close the
connection, and the broker repeats it on every reconnect."""


def persistent_session_problem(clean_session: bool, session_expiry_interval: int | None) -> str:
    """Why a level 5 session asked to persist (not ``clean_session``) cannot, or ``""``: an
    expiry of 0 ends the session with each connection (section 3.1.2.11.2), so the messages
    published while the client reconnects, and its QoS 2 state, would be lost."""
    if clean_session or session_expiry_interval != 0:
        return ""
    return (
        "the broker would end the session with every connection (MQTT 5.0 section "
        "3.1.2.11.2) and drop the messages published while the client reconnects; leave the "
        "expiry unset (the session then never expires) or give a number of seconds above 0"
    )


def _check_range(name: str, value: int | None, low: int, high: int) -> None:
    if value is not None and not low <= value <= high:
        raise InvalidArgument(f"{name} must be {low}..{high}, got {value}")


class Authenticator(Protocol):
    """An enhanced authentication exchange (MQTT 5.0 section 4.12) that a caller drives:
    ``method`` goes in CONNECT's Authentication Method, ``initial_data()`` in its
    Authentication Data, and each AUTH with reason 0x18 (Continue authentication) from the
    broker is answered with ``step(data)``. A password such as a JWT needs none of this."""

    method: str

    def initial_data(self) -> bytes | None: ...

    def step(self, data: bytes | None) -> bytes | None: ...
