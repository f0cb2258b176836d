"""The client side of an MQTT session as a sans-I/O state machine.

Bytes in (``receive_data``), events out; bytes to send accumulate until ``data_to_send()``.
Time comes from the caller (``now`` arguments), so keep-alive is testable with a fake clock.

Inbound QoS 1/2 messages are acknowledged only when the caller says so (``ack``): the Spark
source acknowledges after its write-ahead log is durable (3.1.1 section 4.3: the receiver
takes ownership when it sends PUBACK/PUBREC).

The redelivery rule lives here, once (docs/delivery.md). A PUBLISH is withheld as a resend
only when the standard makes it one:

* a QoS 2 PUBLISH whose packet id is pending: stored, PUBREL not yet received (section 4.3.3,
  method B, [MQTT-4.3.3-2]); it is answered with PUBREC again;
* a QoS 1 PUBLISH whose id belongs to a message stored on an earlier connection of this
  process whose PUBACK was never written (the connection was gone when it was acknowledged):
  the broker cannot have reused that id (section 2.3.1), so it is the resend (section 4.4).

Once an acknowledgement was written, the next PUBLISH with that id is new whatever its DUP
flag says ([MQTT-4.3.2-2], section 4.3.3 after PUBCOMP), and after the broker's PUBREL it
must not resend the PUBLISH ([MQTT-4.3.3-1]): a PUBLISH then is new too. A resend whose
content differs from the message stored with its id is a new message. Nothing is ever
withheld because its topic and payload equal an earlier message's. Rules the broker breaks on
the way (:class:`BrokerFault`) are counted in ``faults`` and logged once per connection; the
message is delivered, so nothing is lost.

An inbound QoS 2 exchange has one state from the caller's ``ack`` to PUBCOMP
(:mod:`connector.mqtt.exchanges`: stored, PUBREC held or sent, releasing); until ``ack`` its
message is one of the connection's deliveries. The frames the session writes come from the
codec, acknowledgements included (``encode_acks``).
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Protocol

from .codec import (
    ACK_WORDS,
    encode,
    encode_ack,
    encode_acks,
    encode_publish,
)
from .decoder import StreamDecoder
from .errors import (
    InvalidArgument,
    KeepAliveTimeout,
    MalformedFrame,
    PacketTooLarge,
    ProtocolError,
    RepeatedProtocolViolation,
    connack_error,
)
from .exchanges import (
    PUBREC_HELD,
    PUBREC_SENT,
    RELEASING,
    RELEASING_IN_WINDOW,
    RESEND_PUBREC_HELD,
    RESEND_PUBREC_SENT,
    STORED,
    Exchange,
    Exchanges,
)
from .negotiated import (
    DEFAULT_MAXIMUM_PACKET_SIZE,
    MAX_RECEIVE_MAXIMUM,
    MIN_MAXIMUM_PACKET_SIZE,
    PROTOCOL_MAXIMUM_PACKET_SIZE,
    SESSION_NEVER_EXPIRES,
    BrokerLimits,
    TopicAliases,
    largest_remaining_length,
)
from .packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    ProtocolLevel,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
    Will,
)
from .properties import Properties
from .reasons import is_failure, reason_name
from .topics import validate_topic_filter, validate_topic_name

log = logging.getLogger(__name__)


def _reason_string(props: Properties | None) -> str:
    """``": <Reason String>"`` when the broker gave one (section 3.14.2.2.3 and alike)."""
    return f": {props.reason_string}" if props is not None and props.reason_string else ""


# Acknowledgement words of the codec (``ACK_WORDS[kind] | packet_id``), for the hot path.
_PUBACK = ACK_WORDS[PacketType.PUBACK]
_PUBREC = ACK_WORDS[PacketType.PUBREC]
_PUBCOMP = ACK_WORDS[PacketType.PUBCOMP]


@dataclass(slots=True)
class SessionConfig:
    """What the client sends in CONNECT, plus local limits. The password is never shown."""

    client_id: str
    clean_session: bool = False
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = field(default=None, repr=False)
    level: ProtocolLevel = ProtocolLevel.MQTT_3_1_1
    will: Will | None = None
    maximum_packet_size: int | None = None
    """The largest packet, all of it, this client takes from the broker (MQTT 5.0 section
    3.1.2.11.4), sent as Maximum Packet Size at level 5; a larger one is refused (DISCONNECT
    0x95 at level 5) and never acknowledged. None: :data:`DEFAULT_MAXIMUM_PACKET_SIZE` at
    level 5, the protocol's largest below (see ``packet_limit``)."""
    max_violations_in_a_row: int = 5
    """Protocol violations on consecutive connections, with no message delivered in between,
    after which ``receive_data`` raises :class:`RepeatedProtocolViolation` instead of asking
    for one more reconnect."""
    pubrec_window: int = 256
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
that sends a message on a new connection with an alias of an old one (seen with mochi-mqtt
2.7.9, against [MQTT-3.3.2-7]) leaves it without a topic: the session must then close the
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


# --------------------------------------------------------------------------------------------
# Events


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
    a PUBREC with a reason code >= 0x80). ``reason_code`` >= 0x80: the broker refused it."""

    packet_id: int
    reason_code: int = 0


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


_PROGRESS = (Publish, Released, PublishDone)
"""Events that show the broker doing its job: they end a run of protocol violations."""


def _reused(packet: Publish) -> str:
    return (
        f"PUBLISH QoS {packet.qos} with DUP=0 reuses packet id {packet.packet_id} while its "
        "exchange is still open on this connection (section 2.3.1)"
    )


def _same_content(a: Publish, b: Publish) -> bool:
    """Whether two PUBLISH packets carry the same message (topic and payload)."""
    return a.topic == b.topic and a.payload == b.payload


class BrokerFault(StrEnum):
    """Rules a broker breaks that the session survives by delivering the message (losing
    nothing); each is counted in ``ClientSession.faults`` and logged once per connection."""

    PENDING_ID_REUSED = "pending-id-reused"
    """A PUBLISH reuses the id of a stored message still open (QoS 2 before PUBREL, QoS 1
    before its PUBACK was written) with a different topic or payload (section 2.3.1)."""
    ID_REUSED_BEFORE_PUBCOMP = "id-reused-before-pubcomp"
    """A PUBLISH after the broker's PUBREL for its id and before our PUBCOMP: the id is free
    only after PUBCOMP (section 2.3.1), and the PUBLISH cannot be a resend ([MQTT-4.3.3-1])."""
    DUP_ON_FIRST_DELIVERY = "dup-on-first-delivery"
    """DUP=1 on a connection whose broker held no earlier session, for an id not sent before
    on it: DUP=1 marks a resend only (section 3.3.1.1, [MQTT-3.3.1-1])."""
    QOS_ABOVE_GRANTED = "qos-above-granted"
    """A message delivered at a QoS above every QoS this client subscribed with (section
    3.8.4: the delivery QoS is at most the granted maximum)."""
    RECEIVE_MAXIMUM_EXCEEDED = "receive-maximum-exceeded"
    """MQTT 5: a QoS 1/2 PUBLISH beyond our Receive Maximum of unacknowledged ones
    ([MQTT-3.3.4-9]). The standard lets us disconnect with 0x93; the session takes the
    message instead (the window is our request for memory, and backpressure still stops the
    socket), so a broker that counts differently costs nothing."""


_FAULT_TEXT = {
    BrokerFault.PENDING_ID_REUSED: (
        "PUBLISH with packet id {pid} carries another message than the one stored with that "
        "id, whose exchange is still open (section 2.3.1); stored as a new message"
    ),
    BrokerFault.ID_REUSED_BEFORE_PUBCOMP: (
        "PUBLISH reuses packet id {pid} after its PUBREL and before our PUBCOMP (section "
        "2.3.1; [MQTT-4.3.3-1] forbids resending after PUBREL); stored as a new message"
    ),
    BrokerFault.DUP_ON_FIRST_DELIVERY: (
        "PUBLISH with DUP=1 and packet id {pid} on a connection without an earlier session "
        "(section 3.3.1.1: DUP=1 only on a resend); stored"
    ),
    BrokerFault.QOS_ABOVE_GRANTED: (
        "PUBLISH with packet id {pid} delivered at QoS {qos}, above the QoS {granted} this "
        "client subscribed with (section 3.8.4); stored and acknowledged at QoS {qos}"
    ),
    BrokerFault.RECEIVE_MAXIMUM_EXCEEDED: (
        "PUBLISH with packet id {pid} exceeds the Receive Maximum sent in CONNECT "
        "([MQTT-3.3.4-9]); stored"
    ),
}


class State(Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


class ClientSession:
    """One MQTT client session, spanning any number of network connections.

    Call ``connect(now)`` when a connection is up, feed it with ``receive_data``, send what
    ``data_to_send()`` returns, call ``tick(now)`` by ``next_deadline()``, and
    ``connection_lost()`` when the connection goes away. Packet ids and QoS 2 state persist
    across connections (section 4.4: resend unacknowledged PUBLISH and PUBREL on reconnect).
    """

    def __init__(
        self,
        config: SessionConfig,
        *,
        matches_stored: Callable[[Publish], bool | None] | None = None,
    ) -> None:
        self.config = config
        self.state = State.DISCONNECTED
        self._decoder = self._new_decoder()
        self._v5 = config.level == ProtocolLevel.MQTT_5
        self.client_id = config.client_id
        """The client id sent in CONNECT: the configured one, or the one the broker assigned
        for an empty one at level 5 (section 3.2.2.3.7), reused on every reconnect."""
        self.keep_alive = config.keep_alive
        """Keep alive in force: ours, or the broker's Server Keep Alive (section 3.2.2.3.14)."""
        self.limits = BrokerLimits()
        """The broker's limits for the current connection (level 5; defaults otherwise)."""
        self._receive_maximum = (config.receive_maximum or MAX_RECEIVE_MAXIMUM) if self._v5 else 0
        """Our Receive Maximum at level 5 (0: not checked)."""
        self._aliases = TopicAliases(0)
        self._out: list[bytes] = []
        self.expect_session_present = False
        """Set True when a persistent session should exist (e.g. restored after a restart)."""
        self.matches_stored = matches_stored
        """Whether a PUBLISH equals the message the caller stored with its packet id (None:
        unknown). Tells a resend of a pending QoS 2 id from another message that a faulty
        broker gave the same id; without it a pending id's PUBLISH is taken as the resend."""
        self._exchanges = Exchanges()
        """Inbound QoS 2 exchanges from the caller's ``ack`` to PUBCOMP: one state per id."""
        self._unacked: dict[int, Publish] = {}
        """QoS 1 messages stored on an earlier connection whose PUBACK was never written: by
        message, apart from the QoS 2 exchanges, since a resend is told by its content, and a
        broker past 65,535 messages in flight may give a QoS 1 and a QoS 2 message one id."""
        self._lost: dict[int, Publish] = {}
        """Deliveries of connections that are gone, not yet acknowledged by the caller."""
        self.faults: Counter[str] = Counter()
        """Broker faults survived (:class:`BrokerFault` values), all connections."""
        self._faults_logged: set[str] = set()
        self.redeliveries = 0
        """PUBLISH packets withheld as resends of stored messages (all connections)."""
        self.max_qos: int | None = None
        """The highest QoS this client subscribed with (``subscribe``, or set by the caller
        for a session made earlier); a delivery above it is a broker fault."""
        self._session_present = True
        self._ids_here: set[int] = set()
        """Packet ids delivered on this connection, kept while the broker has no earlier
        session (the DUP=1-on-first-delivery check)."""
        self._inbound: dict[int, Publish] = {}
        """QoS 1/2 messages delivered on the current connection and not yet acknowledged."""
        self._inbound_later: dict[int, deque[Publish]] = {}
        """Further QoS 1 resends (DUP=1) of an id still pending in ``_inbound``, oldest first."""
        self.shared_id_resends = 0
        """Resends on this connection that shared a pending packet id (see ``_on_publish``)."""
        self._outbound: dict[int, Publish | None] = {}
        """Outbound QoS 1/2 exchanges by id: the message until PUBACK or PUBREC (resent with
        DUP=1 on a new connection, section 4.4), then None for a QoS 2 one until PUBCOMP: its
        PUBREL went out and the message is discarded (section 4.3.3, method A)."""
        self._subscribing: dict[int, list[str]] = {}
        self._unsubscribing: set[int] = set()
        self._next_id = 1
        self._last_sent = 0.0
        self._last_received = 0.0
        self._ping_sent_at: float | None = None
        self.violations_in_a_row = 0
        """Violations since a read last delivered a message, release or outbound ack."""

    def _new_decoder(self) -> StreamDecoder:
        """A decoder for a new connection, refusing packets above ``packet_limit``."""
        config = self.config
        return StreamDecoder(config.level, largest_remaining_length(config.packet_limit))

    # ---------------------------------------------------------------- connection lifecycle

    def connect(self, now: float) -> None:
        """Queue CONNECT; the next event expected is CONNACK."""
        if self.state not in (State.DISCONNECTED, State.CLOSED):
            raise ProtocolError(f"connect() while {self.state.value}")
        cfg = self.config
        self._decoder = self._new_decoder()
        self._reset_connection_state()
        self.keep_alive = cfg.keep_alive
        self.limits = BrokerLimits()
        properties = None
        if self._v5:
            properties = cfg.connect_properties()
            self._aliases = TopicAliases(properties.topic_alias_maximum or 0)
        self._send(
            encode(
                Connect(
                    client_id=self.client_id,
                    clean_session=cfg.clean_session,
                    keep_alive=cfg.keep_alive,
                    username=cfg.username,
                    password=cfg.password,
                    will=cfg.will,
                    protocol_level=cfg.level,
                    properties=properties,
                ),
                cfg.level,
            ),
            now,
        )
        self._last_received = now
        self._ping_sent_at = None
        self.state = State.CONNECTING

    def disconnect(self, now: float) -> None:
        """Queue DISCONNECT (section 3.14); the caller then closes the connection."""
        if self.state is State.CONNECTED:
            self._send(encode(Disconnect(), self.config.level), now)
        self.state = State.CLOSED

    def connection_lost(self) -> None:
        """The network connection is gone. Unsent bytes and unacknowledged deliveries drop:
        the broker resends those on the next connection of a persistent session."""
        self._reset_connection_state()
        self.state = State.DISCONNECTED

    def _reset_connection_state(self) -> None:
        """Forget what belonged to the previous network connection (if any). Stored
        exchanges stay: a QoS 2 id stays pending until its PUBREL, and a stored QoS 1 message
        whose PUBACK was never written keeps its id reserved for the broker's resend."""
        self._out = []
        self._lost.update(self._inbound)
        self._exchanges.carry_over()
        self._ids_here = set()
        self._faults_logged = set()
        self._inbound.clear()
        self._inbound_later.clear()
        self.shared_id_resends = 0
        self._subscribing.clear()
        self._unsubscribing.clear()
        self._ping_sent_at = None

    # ---------------------------------------------------------------- sending

    def data_to_send(self) -> bytes:
        """Bytes queued for the broker since the last call (one write per read)."""
        if not self._out:
            return b""
        data = b"".join(self._out)
        self._out = []
        return data

    def _send(self, data: bytes, now: float) -> None:
        self._out.append(data)
        self._last_sent = now

    def _require_connected(self, what: str) -> None:
        if self.state is not State.CONNECTED:
            raise ProtocolError(f"{what} needs a connected session (state: {self.state.value})")

    def _allocate_id(self) -> int:
        """Next free packet id: never 0, wraps after 65535, skips ids in use (section 2.3.1)."""
        # The three tables never share an id, so their sizes add up to the ids in use. Membership
        # tests instead of a union keep this O(1) however many messages are in flight.
        outbound, subscribing, unsubscribing = (
            self._outbound,
            self._subscribing,
            self._unsubscribing,
        )
        if len(outbound) + len(subscribing) + len(unsubscribing) >= 0xFFFF:
            raise ProtocolError("all 65535 packet identifiers are in use")
        pid = self._next_id
        while pid in outbound or pid in subscribing or pid in unsubscribing:
            pid = pid % 0xFFFF + 1
        self._next_id = pid % 0xFFFF + 1
        return pid

    def subscribe(
        self,
        subscriptions: list[tuple[str, int]],
        now: float,
        properties: Properties | None = None,
    ) -> int:
        """Queue SUBSCRIBE for (filter, qos) pairs; returns its packet id. At level 5 the
        number may be a whole Subscription Options byte (``packets.subscription_options``:
        No Local, Retain As Published, Retain Handling; section 3.8.3.1), and ``properties``
        may carry a Subscription Identifier and User Properties (section 3.8.2.1)."""
        self._require_connected("subscribe")
        if not subscriptions:
            raise InvalidArgument("SUBSCRIBE needs at least one topic filter (section 3.8.3)")
        limit = 0xFF if self._v5 else 2
        for topic_filter, options in subscriptions:
            validate_topic_filter(topic_filter)
            if not 0 <= options <= limit or options & 3 == 3:
                raise InvalidArgument(
                    f"QoS must be 0, 1 or 2, got {options!r}"
                    if not self._v5
                    else f"subscription options {options!r}: QoS 3 or not a byte (section 3.8.3.1)"
                )
        if properties is not None and not self._v5:
            raise InvalidArgument("SUBSCRIBE properties need MQTT 5 (protocol level 5)")
        packet = Subscribe(pid := self._allocate_id(), list(subscriptions), properties)
        try:
            frame = encode(packet, self.config.level)
        except Exception:
            self._next_id = pid  # nothing was sent: the id stays free
            raise
        self._subscribing[pid] = [f for f, _ in subscriptions]
        self.max_qos = max(self.max_qos or 0, *(options & 3 for _, options in subscriptions))
        self._send(frame, now)
        return pid

    def unsubscribe(self, filters: list[str], now: float) -> int:
        """Queue UNSUBSCRIBE; returns its packet id."""
        self._require_connected("unsubscribe")
        if not filters:
            raise InvalidArgument("UNSUBSCRIBE needs at least one topic filter (section 3.10.3)")
        for topic_filter in filters:
            validate_topic_filter(topic_filter)
        pid = self._allocate_id()
        self._unsubscribing.add(pid)
        self._send(encode(Unsubscribe(pid, list(filters)), self.config.level), now)
        return pid

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        now: float,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> int | None:
        """Queue an outbound PUBLISH; returns its packet id (None for QoS 0). At level 5 it
        carries ``properties`` and keeps to the broker's limits (``send_quota``, Maximum QoS,
        Retain Available, Maximum Packet Size: section 3.2.2.3), refused with InvalidArgument
        or ProtocolError before anything is queued."""
        self._require_connected("publish")
        validate_topic_name(topic)
        if qos not in (0, 1, 2):
            raise InvalidArgument(f"QoS must be 0, 1 or 2, got {qos!r} (section 3.3.1.2)")
        if properties is not None and not self._v5:
            raise InvalidArgument("PUBLISH properties need MQTT 5 (protocol level 5)")
        if self._v5:
            self._check_broker_limits(qos, retain)
        if qos == 0:
            self._send(self._publish_frame(topic, payload, 0, None, retain, properties), now)
            return None
        pid = self._allocate_id()
        # Encode before recording, so a payload that cannot be sent leaves no state behind.
        frame = self._publish_frame(topic, payload, qos, pid, retain, properties)
        self._outbound[pid] = Publish(topic, payload, qos, retain, False, pid, properties)
        self._send(frame, now)
        return pid

    def _check_broker_limits(self, qos: int, retain: bool) -> None:
        limits = self.limits
        if qos > limits.maximum_qos:
            raise InvalidArgument(
                f"the broker accepts PUBLISH up to QoS {limits.maximum_qos} (CONNACK Maximum "
                f"QoS, section 3.2.2.3.4); QoS {qos} was asked for"
            )
        if retain and not limits.retain_available:
            raise InvalidArgument(
                "the broker does not support retained messages (CONNACK Retain Available 0, "
                "section 3.2.2.3.5)"
            )
        if qos and self.send_quota <= 0:
            raise ProtocolError(
                f"{len(self._outbound)} QoS 1/2 messages await the broker's acknowledgement, "
                f"its Receive Maximum (section 4.9); wait for one (send_quota)"
            )

    def _publish_frame(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        pid: int | None,
        retain: bool,
        properties: Properties | None,
        dup: bool = False,
    ) -> bytes:
        """One PUBLISH frame at this session's level; at level 5 none larger than the
        broker's Maximum Packet Size ([MQTT-3.1.2-24])."""
        if not self._v5:
            return encode_publish(topic, payload, qos, pid, retain, dup)
        frame = encode(
            Publish(topic, payload, qos, retain, dup, pid, properties), ProtocolLevel.MQTT_5
        )
        limit = self.limits.maximum_packet_size
        if limit is not None and len(frame) > limit:
            raise InvalidArgument(
                f"PUBLISH of {len(frame)} bytes exceeds the broker's Maximum Packet Size of "
                f"{limit} bytes (section 3.2.2.3.6, [MQTT-3.1.2-24])"
            )
        return frame

    @property
    def send_quota(self) -> int:
        """QoS 1/2 messages this client may still send before the broker acknowledges one:
        the broker's Receive Maximum less those in flight (section 4.9; 65,535 below level
        5, where the packet identifiers are the only limit)."""
        return self.limits.receive_maximum - len(self._outbound)

    @property
    def outbound_in_flight(self) -> int:
        """Outbound QoS 1/2 messages not yet finished."""
        return len(self._outbound)

    def ack(self, message: Publish, now: float) -> None:
        """Acknowledge an inbound message: PUBACK (QoS 1) or PUBREC (QoS 2)."""
        self.ack_many([message], now)

    def ack_many(self, messages: list[Publish], now: float) -> None:
        """Acknowledge many inbound messages with one queued write. Acks are dropped when
        the connection they arrived on is gone (the broker redelivers those).

        A QoS 2 message counts as recorded from here on (a resend of its id is a duplicate),
        but its PUBREC goes out only while fewer than ``pubrec_window`` exchanges of this
        connection await their PUBCOMP; the others wait, in order, for ``complete``. Section
        4.3.3 sets no deadline for PUBREC, and a broker that keeps to an inflight limit below
        the window never sees a delay. The window bounds the exchanges a broker tracks at once
        when it does not: Mosquitto 2.0.11 exceeds ``max_inflight_messages`` on a backlog and
        searches its in-flight list linearly for each PUBREC and PUBCOMP, so thousands of
        PUBRECs in a row cost it seconds of CPU.

        Called while the connection is gone, nothing is sent and the messages are kept as
        stored with their acknowledgement never written: the broker's resend of each on the
        next connection is then withheld and acknowledged (see the module docstring)."""
        if self.state is not State.CONNECTED:
            for message in messages:
                self._stored_unacknowledged(message)
            return
        words: list[int] = []
        exchanges = self._exchanges
        states = exchanges.states
        queue = exchanges.queue
        window = self.config.pubrec_window
        inbound = self._inbound
        later = self._inbound_later
        for message in messages:
            pid = message.packet_id
            # Only a message delivered on this connection and not yet acknowledged: an ack for
            # one from an earlier connection could acknowledge a different message that the
            # broker sent with the same packet id.
            if pid is None:  # QoS 0: only a QoS 1/2 PUBLISH has a packet id (section 2.3.1)
                continue
            stored = inbound.get(pid)
            if stored is not message and (stored is None or stored != message):
                if not later or self._pop_later(pid, message) is None:
                    # Delivered on an earlier connection: its ack can no longer be written.
                    self._stored_unacknowledged(message)
                    continue
            elif later and pid in later:
                inbound[pid] = self._pop_oldest_later(pid)
            else:
                del inbound[pid]
            if message.qos == 1:
                words.append(_PUBACK | pid)
                continue
            # A state here: a release of the id is not complete yet (a broker reused the id
            # before PUBCOMP; the new exchange takes over the release and its room in the
            # window), or the id was restored meanwhile (its resend gets the PUBREC).
            state = states.get(pid)
            if state is None or state is RELEASING:
                # Exchanges.has_room, inlined: one call less per message
                if not window or (not queue and exchanges.room_taken < window):
                    exchanges.move(pid, PUBREC_SENT)
                    words.append(_PUBREC | pid)
                else:
                    exchanges.move(pid, PUBREC_HELD)
            elif state is RELEASING_IN_WINDOW:
                exchanges.move(pid, PUBREC_SENT)
                words.append(_PUBREC | pid)
        self._send_acks(words, now)

    def acks_not_written(self, messages: Iterable[Publish]) -> None:
        """The write that carried the acknowledgements of ``messages`` (queued by
        ``ack_many``) failed before the connection took a byte of it: they never left. Their
        ids wait for the broker's resend as if acknowledged after the connection was gone (a
        QoS 2 id stays pending in any case)."""
        for message in messages:
            if message.qos == 1 and message.packet_id is not None:
                self._unacked[message.packet_id] = message

    def _stored_unacknowledged(self, message: Publish) -> None:
        """``message`` is stored, and its acknowledgement can no longer be written on the
        connection it came on: a QoS 2 id stays pending (its PUBREC goes out when the broker
        resends), a QoS 1 id is reserved for the broker's resend. Only a delivery of a lost
        connection not acknowledged before counts (an ack asked for twice changes nothing)."""
        pid = message.packet_id
        if pid is None or not message.qos:
            return
        lost = self._lost.get(pid)
        if lost is message or lost == message:
            del self._lost[pid]
        elif self.state is not State.CONNECTED and self._inbound.get(pid) == message:
            del self._inbound[pid]
        else:
            return
        if message.qos == 2:
            self._exchanges.move(pid, STORED)
        else:
            self._unacked[pid] = message

    @property
    def topic_aliases(self) -> int:
        """Topic aliases the broker set on the current connection (level 5)."""
        return len(self._aliases)

    @property
    def open_pubrecs(self) -> int:
        """QoS 2 exchanges of the current connection answered with PUBREC whose PUBCOMP is
        not sent yet: the PUBRELs the broker owes, plus those received and not yet completed
        (at most ``pubrec_window`` when the window is on)."""
        return self._exchanges.room_taken

    @property
    def pubrecs_held(self) -> int:
        """PUBRECs that had to wait for room in the window (all connections)."""
        return self._exchanges.pubrecs_held

    def _answer_resend(self, pid: int, state: Exchange, words: list[int]) -> None:
        """Add PUBREC for the resend of stored exchange ``pid`` to ``words``: again when this
        connection sent it (no new room taken), in its turn when it waits for room; a STORED
        one takes room in the window, or waits for it."""
        if state.room:
            words.append(_PUBREC | pid)
        elif state is STORED:
            exchanges = self._exchanges
            if exchanges.has_room(self.config.pubrec_window):
                exchanges.move(pid, RESEND_PUBREC_SENT)
                words.append(_PUBREC | pid)
            else:
                exchanges.move(pid, RESEND_PUBREC_HELD)

    def _send_acks(self, words: list[int], now: float) -> None:
        if words:
            self._send(encode_acks(words), now)

    def _pop_later(self, pid: int, message: Publish) -> Publish | None:
        """Take ``message`` from the later resends of ``pid``; None when it is not one."""
        queue = self._inbound_later.get(pid)
        if queue is None or message not in queue:
            return None
        queue.remove(message)
        if not queue:
            del self._inbound_later[pid]
        return message

    def _pop_oldest_later(self, pid: int) -> Publish:
        """Take the oldest of the later resends of ``pid``, which has some (an emptied queue
        is deleted)."""
        queue = self._inbound_later[pid]
        message = queue.popleft()
        if not queue:
            del self._inbound_later[pid]
        return message

    def complete(self, packet_id: int, now: float) -> None:
        """Send PUBCOMP for a released QoS 2 id (after the release is persisted), then the
        PUBRECs that the freed room in the window lets out (section 4.3.3)."""
        self.complete_many([packet_id], now)

    def complete_many(self, packet_ids: list[int], now: float) -> None:
        """``complete`` each of ``packet_ids`` in order, with one queued write.

        The bytes are those of one ``complete`` call per id, in the same order: each id's
        PUBCOMP, then the PUBRECs its freed room in the window lets out, oldest first (section
        4.3.3; section 4.6: PUBRECs in the order their PUBLISH packets arrived)."""
        exchanges = self._exchanges
        states = exchanges.states
        if self.state is not State.CONNECTED:
            for pid in packet_ids:
                state = states.get(pid)
                if state is not None and state.released:
                    exchanges.move(pid, None)
            return
        queue = exchanges.queue
        window = self.config.pubrec_window
        words: list[int] = []
        for pid in packet_ids:
            # An exchange not released (one a faulty broker opened on the id before this
            # PUBCOMP, stored first) keeps its state.
            state = states.get(pid)
            if state is not None and state.released:
                exchanges.move(pid, None)
            words.append(_PUBCOMP | pid)
            while queue and exchanges.room_taken < window:
                free = next(iter(queue))
                exchanges.move(free, PUBREC_SENT if states[free].here else RESEND_PUBREC_SENT)
                words.append(_PUBREC | free)
        self._send_acks(words, now)

    # ---------------------------------------------------------------- QoS 2 state export

    def export_qos2_pending(self) -> set[int]:
        """Packet ids of stored QoS 2 messages whose PUBREL has not arrived, plus those whose
        PUBREL arrived and whose PUBCOMP is not sent yet."""
        return set(self._exchanges.states)

    def restore_qos2_pending(self, packet_ids: Iterable[int]) -> None:
        """Restore pending QoS 2 ids saved by ``export_qos2_pending`` (e.g. after a restart);
        an id whose exchange the session knows already keeps its state."""
        exchanges = self._exchanges
        for pid in packet_ids:
            if not 1 <= pid <= 0xFFFF:
                raise InvalidArgument(f"invalid packet id {pid}")
            if pid not in exchanges.states:
                exchanges.move(pid, STORED)

    # ---------------------------------------------------------------- time

    def next_deadline(self) -> float | None:
        """When ``tick`` next has work: a PINGREQ to send or a PINGRESP overdue."""
        keep_alive = self.keep_alive
        if not keep_alive or self.state is not State.CONNECTED:
            if self.state is State.CONNECTING and keep_alive:
                return self._last_sent + keep_alive
            return None
        if self._ping_sent_at is not None:
            return self._ping_sent_at + keep_alive / 2
        return min(self._last_sent, self._last_received) + keep_alive

    def send_ping(self, now: float) -> None:
        """Queue a PINGREQ whose answer is not awaited: keeps the connection alive (section
        3.1.2.10) while the caller deliberately leaves the socket unread (backpressure)."""
        if self.state is State.CONNECTED:
            self._send(encode(Pingreq()), now)

    def tick(self, now: float) -> None:
        """Keep-alive (section 3.1.2.10): send PINGREQ when nothing was sent or received for
        a keep-alive interval; raise KeepAliveTimeout when its answer is half an interval
        late, so a dead broker is detected within 1.5 x keep-alive of its last packet."""
        keep_alive = self.keep_alive
        if not keep_alive:
            return
        if self.state is State.CONNECTING:
            if now - self._last_sent >= keep_alive:
                raise KeepAliveTimeout(f"no CONNACK within {keep_alive} s")
            return
        if self.state is not State.CONNECTED:
            return
        if self._ping_sent_at is not None:
            if now - self._ping_sent_at >= keep_alive / 2:
                raise KeepAliveTimeout(
                    f"no packet from the broker for {now - self._last_received:.1f} s "
                    f"(keep alive {keep_alive} s; PINGREQ unanswered)"
                )
            return
        if now - self._last_sent >= keep_alive or now - self._last_received >= keep_alive:
            self._send(encode(Pingreq()), now)
            self._ping_sent_at = now

    # ---------------------------------------------------------------- receiving

    def receive_data(self, data: bytes, now: float) -> list[Event]:
        """Decode ``data`` and return the events it produces, in order.

        A protocol violation ends the list with :class:`ProtocolViolation`; the packets that
        preceded it in ``data`` are still processed. The ``max_violations_in_a_row``-th
        violation with no message, release or outbound ack delivered since the first one raises
        :class:`RepeatedProtocolViolation` instead: the broker keeps breaking the protocol and
        reconnecting again will not help (3.1.1 section 4.8 only asks to close the connection).
        """
        self._last_received = now
        self._ping_sent_at = None
        violation: str | None = None
        code = 0x82  # Protocol Error, unless the frame itself was bad
        try:
            packets = self._decoder.feed(data)
        except PacketTooLarge as exc:
            packets = list(exc.packets)
            violation = (
                f"0x95 Packet too large: {exc}, above the Maximum Packet Size of "
                f"{self.config.packet_limit} bytes in all this client takes (MQTT 5.0 section "
                "3.1.2.11.4); the message is not acknowledged"
            )
        except MalformedFrame as exc:
            packets = list(exc.packets)
            violation = str(exc)
            code = 0x81
        events: list[Event] = []
        if self.state is State.CONNECTED:
            for packet in packets:
                if type(packet) is Publish:
                    problem = self._on_publish(packet, events, now)
                    if problem:
                        violation = problem
                        break
                    continue
                if type(packet) is Pubrel:  # the QoS 2 release phase: skip _handle's chain
                    self._on_pubrel(packet.packet_id, events, now)
                    continue
                problem = self._handle(packet, events, now)
                if problem:
                    violation = problem
                    break
        else:
            for packet in packets:
                problem = self._handle(packet, events, now)
                if problem:
                    violation = problem
                    break
        if violation is not None:
            if violation.startswith("0x"):
                code = int(violation[2:4], 16)
            if self._v5 and self.state is State.CONNECTED:
                # Section 4.13.2: say why before closing; the driver writes it if it can.
                self._send(encode(Disconnect(code), ProtocolLevel.MQTT_5), now)
            self._count_violation(violation, code)
            events.append(ProtocolViolation(violation))
        elif self.violations_in_a_row and any(type(e) in _PROGRESS for e in events):
            self.violations_in_a_row = 0
        return events

    def transport_violation(self, reason: str) -> None:
        """The transport under the session broke its own rules (a WebSocket text frame or
        broken framing, MQTT section 6): the connection is over, and the violation counts
        toward ``max_violations_in_a_row`` like one in the MQTT bytes (section 4.8)."""
        self._count_violation(reason, 0x82)

    def _count_violation(self, violation: str, code: int) -> None:
        """Close the session for a violation, then raise RepeatedProtocolViolation when it is
        the ``max_violations_in_a_row``-th with no progress since the first."""
        self.state = State.CLOSED
        self.violations_in_a_row += 1
        if self.violations_in_a_row >= self.config.max_violations_in_a_row:
            raise RepeatedProtocolViolation(self.violations_in_a_row, violation, code=code)

    def _handle(self, packet: Packet, events: list[Event], now: float) -> str | None:
        """Process one non-PUBLISH packet (or any packet before CONNACK). Returns a
        violation reason, or None."""
        if self.state is State.CONNECTING:
            if isinstance(packet, Auth):
                return self._on_auth(packet, now)
            if isinstance(packet, Disconnect) and self._v5:  # refused without a CONNACK
                return self._on_disconnect(packet, events)
            if not isinstance(packet, Connack):
                return (
                    f"expected CONNACK as the first packet from the broker, got "
                    f"{type(packet).__name__.upper()} (section 3.2)"
                )
            return self._on_connack(packet, events, now)
        if self.state is not State.CONNECTED:
            return (
                f"{type(packet).__name__.upper()} received while {self.state.value} "
                "(section 4.8: nothing is read after a violation closed the connection)"
            )
        if isinstance(packet, Publish):  # e.g. in the same read as CONNACK
            return self._on_publish(packet, events, now)
        elif isinstance(packet, Puback | Pubcomp):
            expected_qos = 1 if isinstance(packet, Puback) else 2
            if self._outbound_qos(packet.packet_id) != expected_qos:
                log.warning(
                    "ignoring %s for packet id %d, which has no QoS %d publish in flight",
                    type(packet).__name__.upper(),
                    packet.packet_id,
                    expected_qos,
                )
                return None
            del self._outbound[packet.packet_id]
            self._publish_done(packet.packet_id, packet.reason_code, packet, events)
        elif isinstance(packet, Pubrec):
            if self._outbound_qos(packet.packet_id) != 2:
                log.warning(
                    "ignoring PUBREC for packet id %d: no QoS 2 publish in flight", packet.packet_id
                )
                return None
            if is_failure(packet.reason_code):  # the exchange ends here (section 4.3.3)
                del self._outbound[packet.packet_id]
                self._publish_done(packet.packet_id, packet.reason_code, packet, events)
                return None
            self._outbound[packet.packet_id] = None
            self._send(encode_ack(PacketType.PUBREL, packet.packet_id), now)
        elif isinstance(packet, Pubrel):
            self._on_pubrel(packet.packet_id, events, now)
        elif isinstance(packet, Suback):
            filters = self._subscribing.pop(packet.packet_id, None)
            if filters is None:
                return (
                    f"SUBACK for packet id {packet.packet_id}, which no SUBSCRIBE in flight used "
                    "(section 3.9.2)"
                )
            if len(filters) != len(packet.return_codes):
                return (
                    f"SUBACK has {len(packet.return_codes)} return codes for "
                    f"{len(filters)} topic filters (section 3.9.3)"
                )
            events.append(Subscribed(packet.packet_id, filters, list(packet.return_codes)))
        elif isinstance(packet, Unsuback):
            if packet.packet_id not in self._unsubscribing:
                return (
                    f"UNSUBACK for packet id {packet.packet_id}, which no UNSUBSCRIBE in flight "
                    "used (section 3.11.2)"
                )
            self._unsubscribing.discard(packet.packet_id)
            for code in packet.reason_codes:
                if is_failure(code):
                    log.warning(
                        "UNSUBACK %d: %s", packet.packet_id, reason_name(code, PacketType.UNSUBACK)
                    )
            events.append(Unsubscribed(packet.packet_id))
        elif isinstance(packet, Pingresp):
            events.append(Pong())
        elif isinstance(packet, Disconnect) and self._v5:
            return self._on_disconnect(packet, events)
        elif isinstance(packet, Auth):
            return (
                "AUTH after CONNACK: this client never starts re-authentication, and a broker "
                "must not (section 4.12.1)"
            )
        elif isinstance(packet, Connack):
            return "a second CONNACK on one connection (section 3.2)"
        else:
            return (
                f"a broker must not send {type(packet).__name__.upper()} to a client "
                "(section 2.2.1)"
            )
        return None

    def _publish_done(
        self, pid: int, code: int, packet: Puback | Pubrec | Pubcomp, events: list[Event]
    ) -> None:
        if is_failure(code):
            log.warning(
                "the broker refused our PUBLISH %d: %s%s",
                pid,
                reason_name(code, packet.type),
                _reason_string(packet.properties),
            )
        events.append(PublishDone(pid, code))

    def _on_disconnect(self, packet: Disconnect, events: list[Event]) -> str | None:
        """A broker's DISCONNECT (level 5, section 3.14): the connection is over; logged
        with its reason code's name, and reported as an event for the driver to decide."""
        (log.info if packet.reason_code < 0x80 else log.warning)(
            "the broker disconnected: %s%s",
            reason_name(packet.reason_code, PacketType.DISCONNECT),
            _reason_string(packet.properties),
        )
        self.state = State.CLOSED
        events.append(ServerDisconnect(packet.reason_code, packet.properties))
        return None

    def _on_auth(self, packet: Auth, now: float) -> str | None:
        """AUTH before CONNACK: a step of the enhanced authentication that our
        Authentication Method began (section 4.12); the authenticator answers it."""
        authenticator = self.config.authenticator
        props = packet.properties
        method = props.authentication_method if props is not None else None
        if authenticator is None or method != authenticator.method:
            return (
                f"AUTH with method {method!r} on a connection that "
                + (f"authenticates with {authenticator.method!r}" if authenticator else "sent none")
                + " (section 4.12, [MQTT-4.12.0-1])"
            )
        if packet.reason_code != 0x18:
            return (
                f"AUTH before CONNACK with {reason_name(packet.reason_code, PacketType.AUTH)}; "
                "only 0x18 Continue authentication may come then (section 4.12)"
            )
        data = authenticator.step(props.authentication_data if props is not None else None)
        reply = Properties(authentication_method=method, authentication_data=data)
        self._send(encode(Auth(0x18, reply), ProtocolLevel.MQTT_5), now)
        return None

    def _outbound_qos(self, packet_id: int) -> int | None:
        """The QoS of the outbound exchange in flight on ``packet_id`` (None: none)."""
        if packet_id not in self._outbound:
            return None
        message = self._outbound[packet_id]
        return 2 if message is None else message.qos

    def _on_pubrel(self, packet_id: int, events: list[Event], now: float) -> None:
        """PUBREL (section 3.6): a stored id is released once the caller persists that and
        calls ``complete``; from here on a PUBLISH with the id is new ([MQTT-4.3.3-1]). An
        unknown id gets PUBCOMP at once so the broker can free it (section 4.3.3); a PUBREL
        again before ``complete`` is released again (its PUBCOMP too waits for the store)."""
        exchanges = self._exchanges
        state = exchanges.states.get(packet_id)
        if state is None:
            self._send(encode_ack(PacketType.PUBCOMP, packet_id), now)
            return
        if not state.released:
            exchanges.move(packet_id, RELEASING_IN_WINDOW if state.room else RELEASING)
        events.append(Released(packet_id))

    def _fault(self, fault: BrokerFault, packet: Publish) -> None:
        """Count a broker fault; log it once per connection and kind."""
        self.faults[fault] += 1
        if fault not in self._faults_logged:
            self._faults_logged.add(fault)
            log.warning(
                "broker fault %s: %s (logged once per connection; %d so far)",
                fault.value,
                _FAULT_TEXT[fault].format(
                    pid=packet.packet_id, qos=packet.qos, granted=self.max_qos
                ),
                self.faults[fault],
            )

    def _same_as_stored(self, packet: Publish) -> bool:
        """Whether ``packet`` equals the stored message with its id (True when unknown: the
        standard's rule then decides alone)."""
        check = self.matches_stored
        return check is None or check(packet) is not False

    def _on_publish(self, packet: Publish, events: list[Event], now: float) -> str | None:
        """Deliver an inbound PUBLISH, or withhold it as the resend of a stored message (the
        module docstring's rule). Returns a violation that ends the connection, or None.

        A QoS 1/2 PUBLISH with DUP=0 that reuses the id of an exchange first delivered on this
        connection and still open breaks section 2.3.1, and acknowledging it would acknowledge
        the other: the read ends unacknowledged, and the broker resends both on the next
        connection. An identical copy of a message not yet stored is taken for a resend with a
        missing DUP flag."""
        if packet.properties is not None:  # level 5 only
            problem = self._aliases.resolve(packet, packet.properties)
            if problem:
                return problem
        pid = packet.packet_id
        qos = packet.qos
        if pid is None:  # QoS 0: the decoder gives a PUBLISH its packet id exactly at QoS 1/2
            events.append(packet)
            return None
        if self.max_qos is not None and qos > self.max_qos:
            self._fault(BrokerFault.QOS_ABOVE_GRANTED, packet)
        if self._receive_maximum and self._inbound_in_flight() >= self._receive_maximum:
            self._fault(BrokerFault.RECEIVE_MAXIMUM_EXCEEDED, packet)
        if packet.dup and not self._session_present and pid not in self._ids_here:
            self._fault(BrokerFault.DUP_ON_FIRST_DELIVERY, packet)
        if qos == 2:
            pending = self._inbound.get(pid)
            if pending is not None and pending.qos == 2:  # delivered, not stored yet
                if not _same_content(pending, packet):
                    return _reused(packet)
                self.redeliveries += 1  # its ack comes with the first copy's
                return None
            state = self._exchanges.states.get(pid)
            if state is not None:
                if state.released:
                    self._fault(BrokerFault.ID_REUSED_BEFORE_PUBCOMP, packet)
                elif state.here and not packet.dup:
                    return _reused(packet)
                elif self._same_as_stored(packet):
                    self.redeliveries += 1
                    words: list[int] = []
                    self._answer_resend(pid, state, words)
                    self._send_acks(words, now)
                    return None
                else:
                    self._fault(BrokerFault.PENDING_ID_REUSED, packet)
                    self._exchanges.move(pid, None)  # the new message takes the id
        else:
            pending = self._inbound.get(pid)
            if pending is None:
                stored = self._unacked.pop(pid, None) if self._unacked else None
                if stored is not None:
                    if _same_content(stored, packet):
                        self.redeliveries += 1
                        self._send(encode_ack(PacketType.PUBACK, pid), now)
                        return None
                    self._fault(BrokerFault.PENDING_ID_REUSED, packet)
            elif not packet.dup and not _same_content(pending, packet):
                return _reused(packet)
        if not self._session_present:
            self._ids_here.add(pid)
        if self._lost:
            self._lost.pop(pid, None)  # a late ack of the lost delivery must not claim the id
        if qos == 1 and packet.dup and pid in self._inbound:
            # A broker with more than 65,535 messages in flight (Mosquitto 2.0.11 ignores
            # max_inflight_messages) resends several with one id after a reconnect. Each gets
            # its own PUBACK, in order: the broker releases its oldest message with that id.
            self._inbound_later.setdefault(pid, deque()).append(packet)
            self.shared_id_resends += 1
            if self.shared_id_resends == 1:
                log.warning(
                    "the broker resent two messages with packet id %d on one connection: it "
                    "kept more than one message per id in flight (section 2.3.1; Mosquitto "
                    "2.0.11 does so with more than 65,535 messages queued for a session, "
                    "fixed in 2.0.12). Each is acknowledged, in order",
                    pid,
                )
        else:
            self._inbound[pid] = packet
        events.append(packet)
        return None

    def _inbound_in_flight(self) -> int:
        """QoS 1/2 messages of this connection the broker counts against our Receive
        Maximum: delivered and not acknowledged, or QoS 2 ones without PUBCOMP (section 4.9)."""
        exchanges = self._exchanges
        return len(self._inbound) + exchanges.room_taken + len(exchanges.queue)

    def _on_connack(self, packet: Connack, events: list[Event], now: float) -> str | None:
        if packet.return_code:
            self.state = State.CLOSED
            raise connack_error(packet.return_code, self.config.level, packet.properties)
        self.state = State.CONNECTED  # from here a violation is said with DISCONNECT (level 5)
        if packet.session_present and self.config.clean_session:
            return (
                "0x82 Protocol Error: CONNACK with Session Present 1 answers a CONNECT that "
                "asked for a clean session: this client holds no session state and must close "
                "the connection (MQTT 5.0 [MQTT-3.2.2-4]; the broker must send 0, "
                "[MQTT-3.2.2-2], 3.1.1 [MQTT-3.2.2-1])"
            )
        limits: BrokerLimits | None = None
        if self._v5:
            limits = self.limits = BrokerLimits.from_connack(packet.properties)
            self._apply_limits(limits)
        expected = self.expect_session_present and not self.config.clean_session
        # A 3.1 CONNACK has no session-present flag: the broker keeps a session for
        # clean_session=False, and nothing on the wire says otherwise.
        unknown = self.config.level == ProtocolLevel.MQTT_3_1 and not self.config.clean_session
        lost = expected and not packet.session_present and not unknown
        forgotten: tuple[int, ...] = ()
        self._session_present = packet.session_present or unknown
        if not self._session_present:
            # Section 3.2.2.2: without a session present the broker holds no QoS 2 state for
            # us and will send no PUBREL for ids we still hold, nor resend anything: forget
            # them.
            forgotten = self._exchanges.forget_stored()
            self._unacked.clear()
            self._lost.clear()
        self.expect_session_present = not self.config.clean_session
        events.append(Connected(packet.session_present, lost, forgotten, limits, packet.properties))
        # Section 4.4: resend unacknowledged PUBLISH (DUP=1) and PUBREL, original ids, in order.
        for pid, message in self._outbound.items():
            if message is None:
                self._send(encode_ack(PacketType.PUBREL, pid), now)
            else:
                self._send(
                    self._publish_frame(
                        message.topic,
                        message.payload,
                        message.qos,
                        pid,
                        message.retain,
                        message.properties,
                        dup=True,
                    ),
                    now,
                )
        return None

    def _apply_limits(self, limits: BrokerLimits) -> None:
        """Take CONNACK's assignments (section 3.2.2.3): a client id for an empty one, kept
        for every reconnect; the Server Keep Alive in place of ours; a shorter session."""
        if limits.assigned_client_identifier is not None:
            if self.client_id and limits.assigned_client_identifier != self.client_id:
                log.warning(
                    "the broker assigned client id %r although %r was sent (section 3.2.2.3.7)",
                    limits.assigned_client_identifier,
                    self.client_id,
                )
            else:
                log.info("the broker assigned client id %r", limits.assigned_client_identifier)
            self.client_id = limits.assigned_client_identifier
        if limits.server_keep_alive is not None and limits.server_keep_alive != self.keep_alive:
            log.info(
                "the broker set keep alive to %d s in place of %d s (Server Keep Alive)",
                limits.server_keep_alive,
                self.keep_alive,
            )
            self.keep_alive = limits.server_keep_alive
        asked = self.config.expiry
        given = limits.session_expiry_interval
        if given is not None and given != asked:
            (log.warning if given < asked else log.info)(
                "the broker keeps this session %d s after a disconnect, not the %d s asked for "
                "(section 3.2.2.3.2): messages that arrive while the job is stopped longer "
                "are dropped by the broker",
                given,
                asked,
            )
