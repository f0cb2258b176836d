"""The sending side of a session: the packet identifiers this client uses (section 2.3.1) and
the exchanges they name until the broker ends them: outbound QoS 1/2 PUBLISH (section 4.3,
method A for QoS 2), SUBSCRIBE and UNSUBSCRIBE. :class:`Outbound` checks what the caller asks
to send against the standard and the broker's limits, builds the frames, and takes the
broker's acknowledgements; the session writes the frames and reports the events.
"""

from __future__ import annotations

import logging

from .encode import encode, encode_ack, encode_publish
from .errors import InvalidArgument, LocalProtocolError
from .events import Event, PublishDone, Subscribed, Unsubscribed
from .negotiated import BrokerLimits
from .packets import (
    PacketType,
    ProtocolLevel,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Suback,
    Subscribe,
    Unsuback,
    Unsubscribe,
)
from .properties import Properties
from .reasons import is_failure, reason_name
from .topics import validate_topic_filter, validate_topic_name

log = logging.getLogger("connector.mqtt.session")


def reason_string(props: Properties | None) -> str:
    """``": <Reason String>"`` when the broker gave one (section 3.14.2.2.3 and alike)."""
    return f": {props.reason_string}" if props is not None and props.reason_string else ""


class Outbound:
    """Packet ids in use by this client and what each one waits for, at protocol ``level``
    and within the broker's ``limits`` of the current connection (level 5)."""

    __slots__ = (
        "_next_id",
        "level",
        "limits",
        "publishes",
        "released",
        "subscribing",
        "unsubscribing",
    )

    def __init__(self, level: int) -> None:
        self.level = level
        self.limits = BrokerLimits()
        """The broker's limits for the current connection (level 5; defaults otherwise)."""
        self.publishes: dict[int, Publish] = {}
        """Outbound QoS 1/2 exchanges by id, each message until PUBACK, or PUBCOMP for QoS 2
        (resent with DUP=1 on a new connection, section 4.4)."""
        self.released: set[int] = set()
        """QoS 2 exchanges whose PUBREC came and PUBREL went out (section 4.3.3, method A),
        until PUBCOMP. Their messages are kept: a broker may deliver a QoS 2 message onwards
        only on PUBREL, and one that lost this client's session (Session Present 0: a clean
        session, an expired one, a broker restarted without it) lost such a message with it;
        :meth:`resends` then sends it again."""
        self.subscribing: dict[int, list[str]] = {}
        """SUBSCRIBE packets awaiting SUBACK on this connection: their filters, by id."""
        self.unsubscribing: set[int] = set()
        """UNSUBSCRIBE packets awaiting UNSUBACK on this connection."""
        self._next_id = 1

    @property
    def _v5(self) -> bool:
        return self.level == ProtocolLevel.MQTT_5

    def __len__(self) -> int:
        """Outbound QoS 1/2 messages not yet finished."""
        return len(self.publishes)

    @property
    def send_quota(self) -> int:
        """QoS 1/2 messages this client may still send before the broker acknowledges one:
        the broker's Receive Maximum less those in flight (section 4.9; 65,535 below level
        5, where the packet identifiers are the only limit)."""
        return self.limits.receive_maximum - len(self.publishes)

    def connection_lost(self) -> None:
        """SUBSCRIBE and UNSUBSCRIBE in flight end with their connection; publishes stay
        for the resend (section 4.4)."""
        self.subscribing.clear()
        self.unsubscribing.clear()

    # ------------------------------------------------------------------ packet ids

    def _allocate(self) -> int:
        """Next free packet id: never 0, wraps after 65535, skips ids in use (section 2.3.1).
        LocalProtocolError when all are in use."""
        # The three tables never share an id, so their sizes add up to the ids in use.
        # Membership tests instead of a union keep this O(1) however many are in flight.
        publishes, subscribing, unsubscribing = (
            self.publishes,
            self.subscribing,
            self.unsubscribing,
        )
        if len(publishes) + len(subscribing) + len(unsubscribing) >= 0xFFFF:
            raise LocalProtocolError("all 65535 packet identifiers are in use")
        pid = self._next_id
        while pid in publishes or pid in subscribing or pid in unsubscribing:
            pid = pid % 0xFFFF + 1
        self._next_id = pid % 0xFFFF + 1
        return pid

    # ------------------------------------------------------------------ what the caller sends

    def subscribe(
        self, subscriptions: list[tuple[str, int]], properties: Properties | None
    ) -> tuple[int, bytes]:
        """SUBSCRIBE for (filter, qos) pairs: its packet id and frame. At level 5 the number
        may be a whole Subscription Options byte (``packets.subscription_options``: No Local,
        Retain As Published, Retain Handling; section 3.8.3.1), and ``properties`` may carry
        a Subscription Identifier and User Properties (section 3.8.2.1)."""
        if not subscriptions:
            raise InvalidArgument("SUBSCRIBE needs at least one topic filter (section 3.8.3)")
        v5 = self._v5
        limit = 0xFF if v5 else 2
        for topic_filter, options in subscriptions:
            validate_topic_filter(topic_filter)
            if not 0 <= options <= limit or options & 3 == 3:
                raise InvalidArgument(
                    f"subscription options {options!r}: QoS 3 or not a byte (section 3.8.3.1)"
                    if v5
                    else f"QoS must be 0, 1 or 2, got {options!r}"
                )
        if properties is not None and not v5:
            raise InvalidArgument("SUBSCRIBE properties need MQTT 5 (protocol level 5)")
        pid = self._allocate()
        frame = encode(Subscribe(pid, list(subscriptions), properties), self.level)
        self.subscribing[pid] = [f for f, _ in subscriptions]  # after a frame that encoded
        return pid, frame

    def unsubscribe(self, filters: list[str]) -> tuple[int, bytes]:
        """UNSUBSCRIBE: its packet id and frame."""
        if not filters:
            raise InvalidArgument("UNSUBSCRIBE needs at least one topic filter (section 3.10.3)")
        for topic_filter in filters:
            validate_topic_filter(topic_filter)
        pid = self._allocate()
        self.unsubscribing.add(pid)
        return pid, encode(Unsubscribe(pid, list(filters)), self.level)

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        retain: bool,
        properties: Properties | None,
    ) -> tuple[int | None, bytes]:
        """A PUBLISH: its packet id (None for QoS 0) and frame. At level 5 it carries
        ``properties`` and keeps to the broker's limits (``send_quota``, Maximum QoS, Retain
        Available, Maximum Packet Size: section 3.2.2.3), refused with InvalidArgument or
        LocalProtocolError before anything is recorded."""
        validate_topic_name(topic)
        if qos not in (0, 1, 2):
            raise InvalidArgument(f"QoS must be 0, 1 or 2, got {qos!r} (section 3.3.1.2)")
        if properties is not None and not self._v5:
            raise InvalidArgument("PUBLISH properties need MQTT 5 (protocol level 5)")
        if self._v5:
            self._check_broker_limits(qos, retain)
        if qos == 0:
            return None, self._frame(topic, payload, 0, None, retain, properties)
        pid = self._allocate()
        # Encode before recording, so a payload that cannot be sent leaves no state behind.
        frame = self._frame(topic, payload, qos, pid, retain, properties)
        self.publishes[pid] = Publish(topic, payload, qos, retain, False, pid, properties)
        return pid, frame

    def resends(self, session_present: bool) -> list[bytes]:
        """What a new connection sends again, in order (section 4.4): each PUBLISH not
        acknowledged, with DUP=1 and its original id, and each PUBREL not completed; when the
        broker has no session for us (``session_present`` false) a PUBLISH again in place of
        each PUBREL (see ``released``): at least once, as the broker may have delivered it."""
        frames = []
        released = self.released
        for pid, message in self.publishes.items():
            if pid in released and session_present:
                frames.append(encode_ack(PacketType.PUBREL, pid))
            else:
                released.discard(pid)
                frames.append(
                    self._frame(
                        message.topic,
                        message.payload,
                        message.qos,
                        pid,
                        message.retain,
                        message.properties,
                        dup=True,
                    )
                )
        return frames

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
            raise LocalProtocolError(
                f"{len(self.publishes)} QoS 1/2 messages await the broker's acknowledgement, "
                f"its Receive Maximum (section 4.9); wait for one (send_quota)"
            )

    def _frame(
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

    # ------------------------------------------------------------------ the broker's answers

    def qos_in_flight(self, packet_id: int) -> int | None:
        """The QoS of the outbound PUBLISH in flight on ``packet_id`` (None: none)."""
        message = self.publishes.get(packet_id)
        return None if message is None else message.qos

    def acknowledged(self, packet: Puback | Pubcomp | Pubrec, events: list[Event]) -> bytes:
        """PUBACK, PUBREC or PUBCOMP for one of our PUBLISH packets: the exchange ends
        (:class:`PublishDone`), or, for an accepting PUBREC, goes on with PUBREL (the frame
        returned; section 4.3.3, method A). One for no exchange of its QoS is logged and
        ignored."""
        pid = packet.packet_id
        expected = 1 if isinstance(packet, Puback) else 2
        if self.qos_in_flight(pid) != expected:
            log.warning(
                "ignoring %s for packet id %d, which has no QoS %d publish in flight",
                type(packet).__name__.upper(),
                pid,
                expected,
            )
            return b""
        if isinstance(packet, Pubrec) and not is_failure(packet.reason_code):
            self.released.add(pid)
            return encode_ack(PacketType.PUBREL, pid)
        # PUBACK, PUBCOMP, or a refusing PUBREC: the exchange ends here (section 4.3.3).
        message = self.publishes.pop(pid)
        was_released = pid in self.released
        self.released.discard(pid)
        refused = None
        if is_failure(packet.reason_code):
            why = reason_name(packet.reason_code, packet.type) + reason_string(packet.properties)
            log.warning("the broker refused our PUBLISH %d: %s", pid, why)
            if not was_released:  # not a PUBCOMP: the message itself was refused
                name = type(packet).__name__.upper()
                refused = f"{name} {why} for a PUBLISH to {message.topic!r}"
        events.append(PublishDone(pid, packet.reason_code, refused))
        return b""

    def subscribed(self, packet: Suback, events: list[Event]) -> str | None:
        """SUBACK: the :class:`Subscribed` event, or the rule it breaks."""
        filters = self.subscribing.pop(packet.packet_id, None)
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
        return None

    def unsubscribed(self, packet: Unsuback, events: list[Event]) -> str | None:
        """UNSUBACK: the :class:`Unsubscribed` event (refused filters logged by reason), or
        the rule it breaks."""
        if packet.packet_id not in self.unsubscribing:
            return (
                f"UNSUBACK for packet id {packet.packet_id}, which no UNSUBSCRIBE in flight "
                "used (section 3.11.2)"
            )
        self.unsubscribing.discard(packet.packet_id)
        for code in packet.reason_codes:
            if is_failure(code):
                log.warning(
                    "UNSUBACK %d: %s", packet.packet_id, reason_name(code, PacketType.UNSUBACK)
                )
        events.append(Unsubscribed(packet.packet_id))
        return None
