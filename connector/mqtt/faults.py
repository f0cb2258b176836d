"""The rules a broker breaks that the session survives by delivering the message (losing
nothing): their names, what the log says of each, and the count the session keeps
(:class:`BrokerFaults`, reported by the source as ``brokerFaults``)."""

from __future__ import annotations

import logging
from collections import Counter
from enum import StrEnum

from .packets import Puback, Pubcomp, Publish, Pubrec

log = logging.getLogger("connector.mqtt.session")


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
    ACK_REASON_NOT_ALLOWED = "ack-reason-not-allowed"
    """MQTT 5: a PUBACK or PUBREC for our PUBLISH with a reason code below 0x80 that the
    packet may not carry ([MQTT-3.4.2-1], [MQTT-3.5.2-1]); taken as the success it says."""
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
    BrokerFault.ACK_REASON_NOT_ALLOWED: (
        "acknowledgement of our PUBLISH {pid} with a success reason code the packet may not "
        "carry ([MQTT-3.4.2-1], [MQTT-3.5.2-1]); taken as a success"
    ),
    BrokerFault.RECEIVE_MAXIMUM_EXCEEDED: (
        "PUBLISH with packet id {pid} exceeds the Receive Maximum sent in CONNECT "
        "([MQTT-3.3.4-9]); stored"
    ),
}


class BrokerFaults:
    """Broker faults survived, counted over all connections (``counts``), each kind logged
    once per connection (the count in the log line says how many so far)."""

    __slots__ = ("_logged", "counts")

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._logged: set[str] = set()

    def record(
        self,
        fault: BrokerFault,
        packet: Publish | Puback | Pubrec | Pubcomp,
        granted: int | None = None,
    ) -> None:
        """Count ``fault``, committed by the broker with ``packet``; log it once per
        connection and kind."""
        self.counts[fault] += 1
        if fault not in self._logged:
            self._logged.add(fault)
            log.warning(
                "broker fault %s: %s (logged once per connection; %d so far)",
                fault.value,
                _FAULT_TEXT[fault].format(
                    pid=packet.packet_id, qos=getattr(packet, "qos", None), granted=granted
                ),
                self.counts[fault],
            )

    def new_connection(self) -> None:
        """Each kind is logged again on the next connection."""
        self._logged = set()
