"""The receiving side of a session: what the broker delivers, what the caller stores, and the
acknowledgements that follow (3.1.1 section 4.3; MQTT 5.0 section 4.3). The redelivery rule
applies here, once (docs/delivery.md):

* a QoS 2 PUBLISH whose packet id is pending (stored, PUBREL not yet received; section 4.3.3,
  method B, [MQTT-4.3.3-2]) is the resend, answered with PUBREC again;
* a QoS 1 PUBLISH whose id belongs to a message stored on an earlier connection of this
  process whose PUBACK was never written (the connection was gone when it was acknowledged):
  the broker cannot have reused that id (section 2.3.1), so it is the resend (section 4.4).

Once an acknowledgement was written, the next PUBLISH with that id is new whatever its DUP
flag says ([MQTT-4.3.2-2], section 4.3.3 after PUBCOMP), and after the broker's PUBREL it must
not resend the PUBLISH ([MQTT-4.3.3-1]): a PUBLISH then is new too. A resend whose content
differs from the message stored with its id is a new message. Nothing is ever withheld because
its topic and payload equal an earlier message's. Rules the broker breaks on the way are
counted (:mod:`connector.mqtt.faults`) and the message delivered, so nothing is lost.

A QoS 2 exchange has one state from the caller's ``ack`` to PUBCOMP, in
:class:`~connector.mqtt.exchanges.Exchanges`; until ``ack`` its message is one of the
connection's deliveries here. Methods return the acknowledgement words to send
(``ACK_WORDS[kind] | packet_id``, :func:`connector.mqtt.encode.encode_acks`); the session
writes them.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from .encode import ACK_WORDS
from .errors import InvalidArgument
from .exchanges import Exchanges
from .faults import BrokerFault, BrokerFaults
from .packets import PacketType, Publish

log = logging.getLogger("connector.mqtt.session")

_PUBACK = ACK_WORDS[PacketType.PUBACK]
_PUBREC = ACK_WORDS[PacketType.PUBREC]
_PUBCOMP = ACK_WORDS[PacketType.PUBCOMP]


def _reused(packet: Publish) -> str:
    return (
        f"PUBLISH QoS {packet.qos} with DUP=0 reuses packet id {packet.packet_id} while its "
        "exchange is still open on this connection (section 2.3.1)"
    )


def _same_content(a: Publish, b: Publish) -> bool:
    """Whether two PUBLISH packets carry the same message (topic and payload)."""
    return a.topic == b.topic and a.payload == b.payload


class Inbound:
    """The deliveries of a session, its stored QoS 2 exchanges and the QoS 1 messages whose
    PUBACK never left, across connections."""

    __slots__ = (
        "_delivered",
        "_ids_here",
        "_later",
        "_lost",
        "_session_present",
        "_unacked",
        "exchanges",
        "faults",
        "matches_stored",
        "max_qos",
        "pubrel",
        "receive_maximum",
        "redeliveries",
        "shared_id_resends",
    )

    def __init__(
        self,
        pubrec_window: int,
        receive_maximum: int,
        matches_stored: Callable[[Publish], bool | None] | None,
    ) -> None:
        self.exchanges = Exchanges(pubrec_window)
        """QoS 2 exchanges from the caller's ``ack`` to PUBCOMP: one state per id."""
        self.pubrel = self.exchanges.released
        """PUBREL (section 3.6): whether a stored id is released (the caller persists that
        and calls ``complete``; from here on a PUBLISH with the id is new, [MQTT-4.3.3-1]); a
        PUBREL again before ``complete`` is released again. False: the id is unknown, and
        PUBCOMP goes at once so the broker can free it (section 4.3.3)."""
        self.receive_maximum = receive_maximum
        """Our Receive Maximum at level 5 (0: not checked)."""
        self.matches_stored = matches_stored
        """Whether a PUBLISH equals the message the caller stored with its packet id (None:
        unknown). Tells a resend of a pending QoS 2 id from another message that a faulty
        broker gave the same id; without it a pending id's PUBLISH is taken as the resend."""
        self.faults = BrokerFaults()
        self.max_qos: int | None = None
        """The highest QoS this client subscribed with; a delivery above it is a fault."""
        self.redeliveries = 0
        """PUBLISH packets withheld as resends of stored messages (all connections)."""
        self.shared_id_resends = 0
        """Resends on this connection that shared a pending packet id (see ``publish``)."""
        self._unacked: dict[int, Publish] = {}
        """QoS 1 messages stored on an earlier connection whose PUBACK was never written: by
        message, apart from the QoS 2 exchanges, since a resend is told by its content, and a
        broker past 65,535 messages in flight may give a QoS 1 and a QoS 2 message one id."""
        self._lost: dict[int, Publish] = {}
        """Deliveries of connections that are gone, not yet acknowledged by the caller."""
        self._delivered: dict[int, Publish] = {}
        """QoS 1/2 messages delivered on the current connection and not yet acknowledged."""
        self._later: dict[int, deque[Publish]] = {}
        """Further QoS 1 resends (DUP=1) of an id still pending in ``_delivered``, oldest
        first."""
        self._session_present = True
        self._ids_here: set[int] = set()
        """Packet ids delivered on this connection, kept while the broker has no earlier
        session (the DUP=1-on-first-delivery check)."""

    # ------------------------------------------------------------------ connections

    def connected(self, session_present: bool) -> tuple[int, ...]:
        """A new connection's CONNACK. Without a session present the broker holds no QoS 2
        state for us and will send no PUBREL for ids we still hold, nor resend anything
        (section 3.2.2.2; [MQTT-3.2.2-5]: the client discards its session state): returns
        the QoS 2 ids forgotten."""
        self._session_present = session_present
        if session_present:
            return ()
        self._unacked.clear()
        self._lost.clear()
        return self.exchanges.session_lost()

    def connection_lost(self) -> None:
        """Forget what belonged to the connection: its deliveries not acknowledged become
        lost ones (the broker resends them). Stored exchanges stay: a QoS 2 id stays pending
        until its PUBREL, and a QoS 1 message whose PUBACK was never written keeps its id
        reserved for the broker's resend."""
        self._lost.update(self._delivered)
        self.exchanges.connection_lost()
        self._ids_here = set()
        self.faults.new_connection()
        self._delivered.clear()
        self._later.clear()
        self.shared_id_resends = 0

    @property
    def in_flight(self) -> int:
        """QoS 1/2 messages of this connection the broker counts against our Receive
        Maximum: delivered and not acknowledged, or QoS 2 ones without PUBCOMP (section 4.9)."""
        exchanges = self.exchanges
        return len(self._delivered) + exchanges.room_taken + len(exchanges.queue)

    # ------------------------------------------------------------------ the broker's packets

    def publish(self, packet: Publish, events: list[Any], acks: list[int]) -> str | None:
        """A QoS 1/2 PUBLISH from the broker: delivered (added to ``events``), or withheld as
        the resend of a stored message (its acknowledgement added to ``acks``); returns the
        violation that ends the connection, or None.

        A QoS 1/2 PUBLISH with DUP=0 that reuses the id of an exchange first delivered on this
        connection and still open breaks section 2.3.1, and acknowledging it would acknowledge
        the other: the read ends unacknowledged, and the broker resends both on the next
        connection. An identical copy of a message not yet stored is taken for a resend with a
        missing DUP flag."""
        pid = packet.packet_id
        assert pid is not None  # the decoder gives a PUBLISH its id exactly at QoS 1/2
        qos = packet.qos
        faults = self.faults
        if self.max_qos is not None and qos > self.max_qos:
            faults.record(BrokerFault.QOS_ABOVE_GRANTED, packet, self.max_qos)
        if self.receive_maximum and self.in_flight >= self.receive_maximum:
            faults.record(BrokerFault.RECEIVE_MAXIMUM_EXCEEDED, packet)
        if packet.dup and not self._session_present and pid not in self._ids_here:
            faults.record(BrokerFault.DUP_ON_FIRST_DELIVERY, packet)
        delivered = self._delivered
        if qos == 2:
            pending = delivered.get(pid)
            if pending is not None and pending.qos == 2:  # delivered, not stored yet
                if not _same_content(pending, packet):
                    return _reused(packet)
                self.redeliveries += 1  # its ack comes with the first copy's
                return None
            state = self.exchanges.states.get(pid)
            if state is not None:
                if state.released:
                    faults.record(BrokerFault.ID_REUSED_BEFORE_PUBCOMP, packet)
                elif state.here and not packet.dup:
                    return _reused(packet)
                elif self._same_as_stored(packet):
                    self.redeliveries += 1
                    if self.exchanges.resent(pid):
                        acks.append(_PUBREC | pid)
                    return None
                else:
                    faults.record(BrokerFault.PENDING_ID_REUSED, packet)
                    self.exchanges.id_reused(pid)  # the new message takes the id
        else:
            pending = delivered.get(pid)
            if pending is None:
                stored = self._unacked.pop(pid, None) if self._unacked else None
                if stored is not None:
                    if _same_content(stored, packet):
                        self.redeliveries += 1
                        acks.append(_PUBACK | pid)
                        return None
                    faults.record(BrokerFault.PENDING_ID_REUSED, packet)
            elif not packet.dup and not _same_content(pending, packet):
                return _reused(packet)
        if not self._session_present:
            self._ids_here.add(pid)
        if self._lost:
            self._lost.pop(pid, None)  # a late ack of the lost delivery must not claim the id
        if qos == 1 and packet.dup and pid in delivered:
            # A broker with more than 65,535 messages in flight resends several with one id
            # after a reconnect (docs/brokers.md). Each gets its own PUBACK, in order: the
            # broker releases its oldest message with that id.
            self._later.setdefault(pid, deque()).append(packet)
            self.shared_id_resends += 1
            if self.shared_id_resends == 1:
                log.warning(
                    "the broker resent two messages with packet id %d on one connection: it "
                    "kept more than one message per id in flight (section 2.3.1; "
                    "docs/brokers.md). Each is acknowledged, in order",
                    pid,
                )
        else:
            delivered[pid] = packet
        events.append(packet)
        return None

    def _same_as_stored(self, packet: Publish) -> bool:
        """Whether ``packet`` equals the stored message with its id (True when unknown: the
        standard's rule then decides alone)."""
        check = self.matches_stored
        return check is None or check(packet) is not False

    # ------------------------------------------------------------------ the caller's stores

    def ack_many(self, messages: list[Publish], connected: bool) -> list[int]:
        """The caller stored ``messages``: their acknowledgement words (PUBACK, PUBREC).

        Only a message delivered on this connection and not yet acknowledged is answered: an
        ack for one from an earlier connection could acknowledge a different message that the
        broker sent with the same packet id. A QoS 2 message counts as recorded from here on
        (a resend of its id is a duplicate), but its PUBREC goes out only while the window
        has room (``Exchanges.stored``); the others wait, in order, for ``complete_many``.
        Not ``connected``: nothing is written, and the messages are kept as stored with their
        acknowledgement never written (the broker's resend of each is then withheld)."""
        words: list[int] = []
        if not connected:
            for message in messages:
                self._stored_unacknowledged(message, connected)
            return words
        stored_here = self.exchanges.stored
        delivered = self._delivered
        later = self._later
        for message in messages:
            pid = message.packet_id
            if pid is None:  # QoS 0: only a QoS 1/2 PUBLISH has a packet id (section 2.3.1)
                continue
            stored = delivered.get(pid)
            if stored is not message and (stored is None or stored != message):
                if not later or self._pop_later(pid, message) is None:
                    # Delivered on an earlier connection: its ack can no longer be written.
                    self._stored_unacknowledged(message, connected)
                    continue
            elif later and pid in later:
                delivered[pid] = self._pop_oldest_later(pid)
            else:
                del delivered[pid]
            if message.qos == 1:
                words.append(_PUBACK | pid)
            elif stored_here(pid):
                words.append(_PUBREC | pid)
        return words

    def acks_not_written(self, messages: Iterable[Publish]) -> None:
        """The write that carried the acknowledgements of ``messages`` failed before the
        connection took a byte of it: they never left. Their ids wait for the broker's resend
        as if acknowledged after the connection was gone (a QoS 2 id stays pending anyway)."""
        for message in messages:
            if message.qos == 1 and message.packet_id is not None:
                self._unacked[message.packet_id] = message

    def _stored_unacknowledged(self, message: Publish, connected: bool) -> None:
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
        elif not connected and self._delivered.get(pid) == message:
            del self._delivered[pid]
        else:
            return
        if message.qos == 2:
            self.exchanges.stored_late(pid)
        else:
            self._unacked[pid] = message

    def complete_many(self, packet_ids: list[int], connected: bool) -> list[int]:
        """The caller stored the releases of ``packet_ids``: their PUBCOMP words, each
        followed by the PUBRECs its freed room in the window lets out, oldest first (section
        4.3.3; section 4.6: PUBRECs in the order their PUBLISH packets arrived). Not
        ``connected``: the exchanges end, nothing is written (the broker's PUBREL again meets
        an unknown id and gets PUBCOMP)."""
        exchanges = self.exchanges
        words: list[int] = []
        if not connected:
            for pid in packet_ids:
                exchanges.completed_offline(pid)
            return words
        completed = exchanges.completed
        append = words.append
        for pid in packet_ids:
            freed = completed(pid)
            append(_PUBCOMP | pid)
            if freed:
                words.extend(_PUBREC | held for held in freed)
        return words

    def _pop_later(self, pid: int, message: Publish) -> Publish | None:
        """Take ``message`` from the later resends of ``pid``; None when it is not one."""
        queue = self._later.get(pid)
        if queue is None or message not in queue:
            return None
        queue.remove(message)
        if not queue:
            del self._later[pid]
        return message

    def _pop_oldest_later(self, pid: int) -> Publish:
        """Take the oldest of the later resends of ``pid``, which has some (an emptied queue
        is deleted)."""
        queue = self._later[pid]
        message = queue.popleft()
        if not queue:
            del self._later[pid]
        return message

    # ------------------------------------------------------------------ QoS 2 state export

    def export_qos2_pending(self) -> set[int]:
        """Packet ids of stored QoS 2 messages whose PUBREL has not arrived, plus those whose
        PUBREL arrived and whose PUBCOMP is not sent yet."""
        return set(self.exchanges.states)

    def restore_qos2_pending(self, packet_ids: Iterable[int]) -> None:
        """Restore pending QoS 2 ids saved by ``export_qos2_pending`` (e.g. after a restart);
        an id whose exchange the session knows already keeps its state."""
        ids = list(packet_ids)
        for pid in ids:
            if not 1 <= pid <= 0xFFFF:
                raise InvalidArgument(f"invalid packet id {pid}")
        self.exchanges.restored(ids)
