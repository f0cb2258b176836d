"""The client side of an MQTT session as a sans-I/O state machine: the connection and the
packets on it.

Bytes in (``receive_data``), events out (:mod:`connector.mqtt.events`); bytes to send
accumulate until ``data_to_send()``. Time comes from the caller (``now`` arguments), so
keep-alive is testable with a fake clock. The session keeps its parts by role: what it is
configured with (:mod:`.config`), what the broker delivers and the caller stores, with the
redelivery rule (:mod:`.inbound`, its QoS 2 exchanges in :mod:`.exchanges`), the packet ids this
client uses (:mod:`.outbound`), the broker faults it survives (:mod:`.faults`) and what one
MQTT 5 connection agreed (:mod:`.negotiated`).

Inbound QoS 1/2 messages are acknowledged only when the caller says so (``ack``): the Spark
source acknowledges after its write-ahead log is durable (3.1.1 section 4.3: the receiver
takes ownership when it sends PUBACK/PUBREC). The frames the session writes come from the
codec, acknowledgements included (``encode_acks``).

This module holds the connection's life (CONNECT to DISCONNECT, keep-alive, violations) and
the dispatch of every packet type the broker may send; what each packet does lives in the
modules above.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from enum import Enum
from typing import cast

from connector.mqtt.receive_buffer import ReceiveBuffer

from .config import SessionConfig
from .encode import encode, encode_ack, encode_acks
from .errors import (
    KeepAliveTimeout,
    LocalProtocolError,
    MalformedFrame,
    PacketTooLarge,
    RepeatedProtocolViolation,
)
from .events import (
    PROGRESS,
    Connected,
    Event,
    Pong,
    ProtocolViolation,
    Released,
    ServerDisconnect,
)
from .faults import BrokerFault
from .inbound import Inbound
from .negotiated import MAX_RECEIVE_MAXIMUM, BrokerLimits, TopicAliases, largest_remaining_length
from .outbound import Outbound, reason_string
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
    Unsuback,
    Will,
)
from .properties import Properties
from .reasons import connack_error, reason_allowed, reason_name

log = logging.getLogger(__name__)


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
        self._aliases = TopicAliases(0)
        self._out: list[bytes] = []
        self.expect_session_present = False
        """Set True when a persistent session should exist (e.g. restored after a restart)."""
        receive_maximum = (config.receive_maximum or MAX_RECEIVE_MAXIMUM) if self._v5 else 0
        self._inbound = Inbound(config.pubrec_window, receive_maximum, matches_stored)
        """What the broker delivers and the caller stores, across connections."""
        self._outbound = Outbound(config.level)
        self._pubrel = self._inbound.pubrel  # the QoS 2 release path, looked up once
        self._acks: list[int] = []
        """Acknowledgement words ``Inbound.publish`` asks for, written after each PUBLISH."""
        """The packet ids this client uses and what each waits for."""
        self._last_sent = 0.0
        self._last_received = 0.0
        self._ping_sent_at: float | None = None
        self.violations_in_a_row = 0
        """Violations since a read last delivered a message, release or outbound ack."""

    def _new_decoder(self) -> ReceiveBuffer:
        """A decoder for a new connection, refusing packets above ``packet_limit``."""
        config = self.config
        return ReceiveBuffer(config.level, largest_remaining_length(config.packet_limit))

    # ---------------------------------------------------------------- what the session counts

    @property
    def faults(self) -> Counter[str]:
        """Broker faults survived (:class:`~connector.mqtt.faults.BrokerFault` values), all
        connections."""
        return self._inbound.faults.counts

    @property
    def redeliveries(self) -> int:
        """PUBLISH packets withheld as resends of stored messages (all connections)."""
        return self._inbound.redeliveries

    @property
    def shared_id_resends(self) -> int:
        """Resends on this connection that shared a pending packet id."""
        return self._inbound.shared_id_resends

    @property
    def max_qos(self) -> int | None:
        """The highest QoS this client subscribed with (``subscribe``, or set by the caller
        for a session made earlier); a delivery above it is a broker fault."""
        return self._inbound.max_qos

    @max_qos.setter
    def max_qos(self, value: int | None) -> None:
        self._inbound.max_qos = value

    @property
    def matches_stored(self) -> Callable[[Publish], bool | None] | None:
        """Whether a PUBLISH equals the message the caller stored with its packet id."""
        return self._inbound.matches_stored

    @property
    def open_pubrecs(self) -> int:
        """QoS 2 exchanges of the current connection answered with PUBREC whose PUBCOMP is
        not sent yet: the PUBRELs the broker owes, plus those received and not yet completed
        (at most ``pubrec_window`` when the window is on)."""
        return self._inbound.exchanges.room_taken

    @property
    def pubrecs_held(self) -> int:
        """PUBRECs that had to wait for room in the window (all connections)."""
        return self._inbound.exchanges.pubrecs_held

    @property
    def topic_aliases(self) -> int:
        """Topic aliases the broker set on the current connection (level 5)."""
        return len(self._aliases)

    @property
    def limits(self) -> BrokerLimits:
        """The broker's limits for the current connection (level 5; defaults otherwise)."""
        return self._outbound.limits

    @property
    def send_quota(self) -> int:
        """QoS 1/2 messages this client may still send before the broker acknowledges one
        (``Outbound.send_quota``, section 4.9)."""
        return self._outbound.send_quota

    @property
    def outbound_in_flight(self) -> int:
        """Outbound QoS 1/2 messages not yet finished."""
        return len(self._outbound)

    # ---------------------------------------------------------------- connection lifecycle

    def connect(self, now: float, will: Will | None = None) -> None:
        """Queue CONNECT (with ``will``, else the config's Will); the next event expected is
        CONNACK."""
        if self.state not in (State.DISCONNECTED, State.CLOSED):
            raise LocalProtocolError(f"connect() while {self.state.value}")
        cfg = self.config
        self._decoder = self._new_decoder()
        self._reset_connection_state()
        self.keep_alive = cfg.keep_alive
        self._outbound.limits = BrokerLimits()
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
                    will=will if will is not None else cfg.will,
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
        """Forget what belonged to the previous network connection (if any); what the
        session keeps across connections stays (``Inbound.connection_lost``)."""
        self._out = []
        self._inbound.connection_lost()
        self._outbound.connection_lost()
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

    def _send_acks(self, words: list[int], now: float) -> None:
        if words:
            self._send(encode_acks(words), now)

    def _require_connected(self, what: str) -> None:
        if self.state is not State.CONNECTED:
            raise LocalProtocolError(
                f"{what} needs a connected session (state: {self.state.value})"
            )

    def subscribe(
        self,
        subscriptions: list[tuple[str, int]],
        now: float,
        properties: Properties | None = None,
    ) -> int:
        """Queue SUBSCRIBE for (filter, qos) pairs; returns its packet id
        (``Outbound.subscribe``: the options a filter may carry at level 5)."""
        self._require_connected("subscribe")
        pid, frame = self._outbound.subscribe(subscriptions, properties)
        self.max_qos = max(self.max_qos or 0, *(options & 3 for _, options in subscriptions))
        self._send(frame, now)
        return pid

    def unsubscribe(self, filters: list[str], now: float) -> int:
        """Queue UNSUBSCRIBE; returns its packet id."""
        self._require_connected("unsubscribe")
        pid, frame = self._outbound.unsubscribe(filters)
        self._send(frame, now)
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
        """Queue an outbound PUBLISH; returns its packet id (None for QoS 0). Refused with
        InvalidArgument or LocalProtocolError before anything is queued (``Outbound.publish``:
        the standard's rules and, at level 5, the broker's limits)."""
        self._require_connected("publish")
        pid, frame = self._outbound.publish(topic, payload, qos, retain, properties)
        self._send(frame, now)
        return pid

    # ---------------------------------------------------------------- the caller's stores

    def ack(self, message: Publish, now: float) -> None:
        """Acknowledge an inbound message: PUBACK (QoS 1) or PUBREC (QoS 2)."""
        self.ack_many([message], now)

    def ack_many(self, messages: list[Publish], now: float) -> None:
        """Acknowledge many inbound messages with one queued write (``Inbound.ack_many``:
        which are answered, and when a QoS 2 PUBREC goes out). Called while the connection is
        gone, nothing is sent and the messages are kept as stored with their acknowledgement
        never written: the broker's resend of each is then withheld and acknowledged.

        A QoS 2 PUBREC goes out only while fewer than ``pubrec_window`` exchanges of this
        connection await their PUBCOMP; the others wait, in order, for ``complete``. Section
        4.3.3 sets no deadline for PUBREC, and a broker that keeps to an inflight limit below
        the window never sees a delay. The window bounds the exchanges a broker tracks at once
        when it does not (docs/brokers.md: a broker that exceeds its inflight limit on a
        backlog and searches it linearly for each PUBREC)."""
        self._send_acks(self._inbound.ack_many(messages, self.state is State.CONNECTED), now)

    def acks_not_written(self, messages: Iterable[Publish]) -> None:
        """The write that carried the acknowledgements of ``messages`` (queued by
        ``ack_many``) failed before the connection took a byte of it: they never left."""
        self._inbound.acks_not_written(messages)

    def complete(self, packet_id: int, now: float) -> None:
        """Send PUBCOMP for a released QoS 2 id (after the release is persisted), then the
        PUBRECs that the freed room in the window lets out (section 4.3.3)."""
        self.complete_many([packet_id], now)

    def complete_many(self, packet_ids: list[int], now: float) -> None:
        """``complete`` each of ``packet_ids`` in order, with one queued write: each id's
        PUBCOMP, then the PUBRECs its freed room lets out, oldest first (section 4.6)."""
        self._send_acks(self._inbound.complete_many(packet_ids, self.state is State.CONNECTED), now)

    def export_qos2_pending(self) -> set[int]:
        """Packet ids of stored QoS 2 messages whose PUBREL has not arrived, plus those whose
        PUBREL arrived and whose PUBCOMP is not sent yet."""
        return self._inbound.export_qos2_pending()

    def restore_qos2_pending(self, packet_ids: Iterable[int]) -> None:
        """Restore pending QoS 2 ids saved by ``export_qos2_pending`` (e.g. after a restart);
        an id whose exchange the session knows already keeps its state."""
        self._inbound.restore_qos2_pending(packet_ids)

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
            packets = cast("list[Packet]", list(exc.packets))
            violation = (
                f"0x95 Packet too large: {exc}, above the Maximum Packet Size of "
                f"{self.config.packet_limit} bytes in all this client takes (MQTT 5.0 section "
                "3.1.2.11.4); the message is not acknowledged"
            )
        except MalformedFrame as exc:
            packets = cast("list[Packet]", list(exc.packets))
            violation = str(exc)
            code = 0x81
        events: list[Event] = []
        if self.state is State.CONNECTED:
            inbound_publish = self._inbound.publish  # the per-message path, looked up once
            acks = self._acks
            for packet in packets:
                if type(packet) is Publish:
                    if packet.properties is not None or packet.packet_id is None:
                        problem = self._on_publish(packet, events, now)
                    else:
                        problem = inbound_publish(packet, events, acks)
                        if acks:
                            self._send_acks(acks, now)
                            acks.clear()
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
        elif self.violations_in_a_row and any(type(e) in PROGRESS for e in events):
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
        elif isinstance(packet, Puback | Pubrec | Pubcomp):
            if packet.reason_code and not reason_allowed(packet.reason_code, packet.type):
                # a success-class code the decoder let through (decode._TOLERATED_ACK_CODES)
                self._inbound.faults.record(BrokerFault.ACK_REASON_NOT_ALLOWED, packet)
            frame = self._outbound.acknowledged(packet, events)
            if frame:
                self._send(frame, now)
        elif isinstance(packet, Pubrel):
            self._on_pubrel(packet.packet_id, events, now)
        elif isinstance(packet, Suback):
            return self._outbound.subscribed(packet, events)
        elif isinstance(packet, Unsuback):
            return self._outbound.unsubscribed(packet, events)
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

    def _on_disconnect(self, packet: Disconnect, events: list[Event]) -> str | None:
        """A broker's DISCONNECT (level 5, section 3.14): the connection is over; logged
        with its reason code's name, and reported as an event for the driver to decide."""
        (log.info if packet.reason_code < 0x80 else log.warning)(
            "the broker disconnected: %s%s",
            reason_name(packet.reason_code, PacketType.DISCONNECT),
            reason_string(packet.properties),
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

    def _on_pubrel(self, packet_id: int, events: list[Event], now: float) -> None:
        """PUBREL (section 3.6): a stored id is released (``Inbound.pubrel``); an unknown id
        gets PUBCOMP at once so the broker can free it (section 4.3.3)."""
        if self._pubrel(packet_id):
            events.append(Released(packet_id))
        else:
            self._send(encode_ack(PacketType.PUBCOMP, packet_id), now)

    def _on_publish(self, packet: Publish, events: list[Event], now: float) -> str | None:
        """Deliver an inbound PUBLISH, or withhold it as the resend of a stored message
        (``Inbound.publish``, the redelivery rule). Returns a violation that ends the
        connection, or None."""
        if packet.properties is not None:  # level 5 only
            problem = self._aliases.resolve(packet, packet.properties)
            if problem:
                return problem
        if packet.packet_id is None:  # QoS 0: a PUBLISH has its packet id exactly at QoS 1/2
            events.append(packet)
            return None
        acks = self._acks
        problem = self._inbound.publish(packet, events, acks)
        if acks:
            self._send_acks(acks, now)
            acks.clear()
        return problem

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
            limits = self._outbound.limits = BrokerLimits.from_connack(packet.properties)
            self.client_id, self.keep_alive = limits.assignments(
                self.client_id, self.keep_alive, self.config.expiry
            )
        expected = self.expect_session_present and not self.config.clean_session
        # A 3.1 CONNACK has no session-present flag: the broker keeps a session for
        # clean_session=False, and nothing on the wire says otherwise.
        unknown = self.config.level == ProtocolLevel.MQTT_3_1 and not self.config.clean_session
        lost = expected and not packet.session_present and not unknown
        forgotten = self._inbound.connected(packet.session_present or unknown)
        self.expect_session_present = not self.config.clean_session
        events.append(Connected(packet.session_present, lost, forgotten, limits, packet.properties))
        for frame in self._outbound.resends(packet.session_present or unknown):  # 4.4
            self._send(frame, now)
        return None
