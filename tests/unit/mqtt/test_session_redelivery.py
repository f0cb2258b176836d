"""The redelivery rule (connector.mqtt.session's docstring), byte vector by byte vector.

A PUBLISH is withheld only when the standard makes it a resend: a QoS 2 id that is pending
(stored, PUBREL not received; section 4.3.3, [MQTT-4.3.3-2]), or an id whose acknowledgement
never left this client. Once an acknowledgement was written the next PUBLISH with the id is new
whatever its DUP flag ([MQTT-4.3.2-2]); after PUBREL a PUBLISH is new too ([MQTT-4.3.3-1]).
Broker faults are counted and logged once per connection, and their messages delivered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.encode import encode
from connector.mqtt.events import Connected, Released
from connector.mqtt.faults import BrokerFault
from connector.mqtt.packets import Connack, Packet, Puback, Pubcomp, Publish, Pubrec, Pubrel
from connector.mqtt.session import ClientSession


def wire(*packets: Packet) -> bytes:
    return b"".join(encode(p) for p in packets)


def connect(session: ClientSession, *, present: bool = True, now: float = 0.0) -> list[object]:
    session.connect(now)
    session.data_to_send()
    return list(session.receive_data(encode(Connack(present, 0)), now))


def session_with(
    *,
    pending: Iterable[int] = frozenset(),
    present: bool = True,
    matches_stored: Callable[[Publish], bool | None] | None = None,
) -> ClientSession:
    session = ClientSession(SessionConfig("c"), matches_stored=matches_stored)
    session.restore_qos2_pending(pending)
    session.expect_session_present = True
    connect(session, present=present)
    return session


def deliver_and_ack(session: ClientSession, message: Publish, now: float = 1.0) -> bytes:
    assert session.receive_data(encode(message), now) == [message]
    session.ack(message, now)
    return session.data_to_send()


# ------------------------------------------------------------------ QoS 1: after PUBACK, new


@pytest.mark.parametrize("reconnect", [False, True], ids=["same-connection", "next-connection"])
def test_identical_qos1_messages_after_puback_are_new_whatever_dup_says(reconnect: bool) -> None:
    """Observation 1 (a broker that marks first deliveries DUP=1 and restarts ids at 1):
    ten identical messages, then ten more with the same ids, topic, payload and DUP=1, after
    every PUBACK was written. [MQTT-4.3.2-2]: each is a new publication, all twenty land."""
    session = session_with()
    first = [Publish("x/a", b"ON", 1, dup=True, packet_id=n) for n in range(1, 11)]
    for message in first:
        assert message.packet_id is not None
        assert deliver_and_ack(session, message) == encode(Puback(message.packet_id))
    if reconnect:
        session.connection_lost()
        connect(session)
    second = [Publish("x/a", b"ON", 1, dup=True, packet_id=n) for n in range(1, 11)]
    assert session.receive_data(wire(*second), 2.0) == second
    assert session.redeliveries == 0


def test_identical_qos2_message_after_pubcomp_is_new() -> None:
    """Section 4.3.3: after PUBCOMP the id is free; the same id, topic and payload with DUP=1
    is a new message."""
    session = session_with()
    message = Publish("x/a", b"ON", 2, packet_id=1)
    assert deliver_and_ack(session, message) == encode(Pubrec(1))
    assert session.receive_data(encode(Pubrel(1)), 1.0) == [Released(1)]
    session.complete(1, 1.0)
    assert session.data_to_send() == encode(Pubcomp(1))
    again = Publish("x/a", b"ON", 2, dup=True, packet_id=1)
    assert session.receive_data(encode(again), 2.0) == [again]


# ------------------------------------------------------------------ QoS 2: id reused early


def test_pubrel_then_publish_with_the_same_id_delivers_the_new_message() -> None:
    """Observation 2, reproduced without a broker: a restored pending id, then PUBREL(1) and a
    new PUBLISH(1) in one read. After PUBREL the broker must not resend the PUBLISH
    ([MQTT-4.3.3-1]), so it is a new message, delivered, and the fault is counted. PUBCOMP
    for the old exchange goes out before PUBREC for the new one."""
    session = session_with(pending={1})
    new = Publish("t", b"new", 2, packet_id=1)
    assert session.receive_data(wire(Pubrel(1), new), 1.0) == [Released(1), new]
    assert session.faults == {BrokerFault.ID_REUSED_BEFORE_PUBCOMP: 1}
    assert session.data_to_send() == b"", "nothing is answered before the caller stores"
    session.complete(1, 1.0)
    session.ack(new, 1.0)
    assert session.data_to_send() == wire(Pubcomp(1), Pubrec(1))
    assert session.export_qos2_pending() == {1}, "the new exchange is open"
    # Its own resend is withheld, and its own PUBREL completes it.
    assert session.receive_data(encode(Publish("t", b"new", 2, dup=True, packet_id=1)), 2.0) == []
    assert session.receive_data(encode(Pubrel(1)), 2.0) == [Released(1)]
    session.complete(1, 2.0)
    assert session.export_qos2_pending() == set()


def test_a_repeated_pubrel_before_complete_is_released_again_not_completed_early() -> None:
    """The release must be stored before PUBCOMP (a PUBCOMP frees the id at the broker)."""
    session = session_with(pending={4})
    assert session.receive_data(encode(Pubrel(4)), 1.0) == [Released(4)]
    assert session.receive_data(encode(Pubrel(4)), 1.0) == [Released(4)]
    assert session.data_to_send() == b""


@pytest.mark.parametrize(
    ("stored", "delivered"),
    [(True, False), (None, False), (False, True)],
    ids=["same-content", "content-unknown", "other-content"],
)
def test_a_pending_id_from_an_earlier_connection(stored: bool | None, delivered: bool) -> None:
    """A PUBLISH on a pending QoS 2 id is the resend ([MQTT-4.3.3-2]) unless the caller's store
    says it carries another message (a broker that gave an open exchange's id to a new
    message after a stop): then it is stored as new and the fault counted."""
    seen: list[Publish] = []

    def matches(message: Publish) -> bool | None:
        seen.append(message)
        return stored

    session = session_with(pending={7}, matches_stored=matches)
    message = Publish("t", b"m", 2, packet_id=7)
    events = session.receive_data(encode(message), 1.0)
    assert seen == [message]
    if delivered:
        assert events == [message]
        assert session.faults == {BrokerFault.PENDING_ID_REUSED: 1}
        assert session.data_to_send() == b""
        session.ack(message, 1.0)
        assert session.data_to_send() == encode(Pubrec(7))
    else:
        assert events == []
        assert session.redeliveries == 1 and not session.faults
        assert session.data_to_send() == encode(Pubrec(7))


def test_a_dup_resend_with_other_content_on_this_connection_is_stored() -> None:
    session = session_with(matches_stored=lambda m: m.payload == b"one")
    first = Publish("t", b"one", 2, packet_id=3)
    assert deliver_and_ack(session, first) == encode(Pubrec(3))
    same = Publish("t", b"one", 2, dup=True, packet_id=3)
    assert session.receive_data(encode(same), 1.0) == []
    other = Publish("t", b"two", 2, dup=True, packet_id=3)
    assert session.receive_data(encode(other), 1.0) == [other]
    assert session.faults == {BrokerFault.PENDING_ID_REUSED: 1}


# ------------------------------------------------------------------ acks that never left


def test_a_qos1_resend_whose_ack_never_left_is_withheld_but_other_content_is_stored() -> None:
    session = session_with()
    a = Publish("t", b"a", 1, packet_id=1)
    b = Publish("t", b"b", 1, packet_id=2)
    assert session.receive_data(wire(a, b), 1.0) == [a, b]
    session.connection_lost()
    session.ack_many([a, b], 1.0)  # stored; the connection was gone: no PUBACK written
    connect(session)
    resend_a = Publish("t", b"a", 1, dup=True, packet_id=1)
    other_b = Publish("t", b"B", 1, dup=True, packet_id=2)
    assert session.receive_data(wire(resend_a, other_b), 2.0) == [other_b]
    assert session.data_to_send() == encode(Puback(1))
    assert session.redeliveries == 1
    assert session.faults == {BrokerFault.PENDING_ID_REUSED: 1}


def test_a_broker_without_the_session_forgets_what_waited_for_its_resend() -> None:
    session = session_with(pending={5})
    a = Publish("t", b"a", 1, packet_id=1)
    assert session.receive_data(encode(a), 1.0) == [a]
    session.connection_lost()
    session.ack(a, 1.0)
    assert connect(session, present=False) == [Connected(False, True, (5,))]
    again = Publish("t", b"a", 1, packet_id=1)
    assert session.receive_data(encode(again), 2.0) == [again]
    assert session.export_qos2_pending() == set()


# ------------------------------------------------------------------ faults reported


def test_dup_on_a_first_delivery_is_a_fault_only_without_an_earlier_session() -> None:
    session = session_with(present=False)
    message = Publish("t", b"x", 1, dup=True, packet_id=1)
    assert session.receive_data(encode(message), 1.0) == [message]
    assert session.faults == {BrokerFault.DUP_ON_FIRST_DELIVERY: 1}
    session.connection_lost()
    connect(session, present=True)
    resend = Publish("t", b"y", 1, dup=True, packet_id=2)
    assert session.receive_data(encode(resend), 2.0) == [resend]
    assert session.faults == {BrokerFault.DUP_ON_FIRST_DELIVERY: 1}


def test_a_delivery_above_the_subscribed_qos_is_stored_and_acknowledged_at_its_qos() -> None:
    session = session_with()
    session.max_qos = 1
    message = Publish("t", b"x", 2, packet_id=9)
    assert deliver_and_ack(session, message) == encode(Pubrec(9))
    assert session.faults == {BrokerFault.QOS_ABOVE_GRANTED: 1}


def test_a_fault_is_logged_once_per_connection_with_its_rule(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = session_with(present=False)
    with caplog.at_level(logging.WARNING, logger="connector.mqtt.session"):
        for n in (1, 2, 3):
            session.receive_data(encode(Publish("t", b"x", 1, dup=True, packet_id=n)), 1.0)
        session.connection_lost()
        connect(session, present=False)
        session.receive_data(encode(Publish("t", b"x", 1, dup=True, packet_id=4)), 2.0)
    warnings = [r.getMessage() for r in caplog.records if "dup-on-first-delivery" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "section 3.3.1.1" in warnings[0]
    assert session.faults[BrokerFault.DUP_ON_FIRST_DELIVERY] == 4


def test_acks_whose_write_failed_untaken_wait_for_the_resend() -> None:
    """The driver's write of the PUBACKs failed before the connection took a byte: they never
    left, so the broker's resends on the next connection are answered, not delivered."""
    session = session_with()
    messages = [Publish("t", bytes([n]), 1, packet_id=n) for n in (1, 2)]
    assert session.receive_data(wire(*messages), 1.0) == messages
    session.ack_many(messages, 1.0)
    assert session.data_to_send() == wire(Puback(1), Puback(2))  # handed to a dead socket
    session.acks_not_written(messages)
    session.connection_lost()
    connect(session)
    resends = [Publish("t", bytes([n]), 1, dup=True, packet_id=n) for n in (1, 2)]
    assert session.receive_data(wire(*resends), 2.0) == []
    assert session.data_to_send() == wire(Puback(1), Puback(2))
    assert session.redeliveries == 2


# ------------------------------------------------------------------ a read dropped, then a cut


def test_a_read_dropped_for_a_malformed_frame_then_a_cut_stores_each_qos2_message_once() -> None:
    """A read that a malformed frame ends is dropped whole (nothing of it stored or
    acknowledged): its QoS 2 PUBLISH, a resend of a stored exchange and a PUBREL. The
    connection after it is cut before anything more arrives, and the next one gets the
    broker's resends (section 4.4: PUBLISH with DUP=1 where no PUBREC came, PUBREL where one
    did). Each message is delivered, and so stored, once; each release comes once more and is
    completed after it is stored."""
    session = session_with()
    stored = Publish("t", b"stored", 2, packet_id=1)  # stored and answered on this connection
    released = Publish("t", b"released", 2, packet_id=2)
    assert deliver_and_ack(session, stored) == encode(Pubrec(1))
    assert deliver_and_ack(session, released) == encode(Pubrec(2))

    new = Publish("t", b"new", 2, packet_id=3)
    bad = bytes.fromhex("30 04 00 02 C3 28")  # a topic that is not UTF-8 (section 1.5.3)
    events = session.receive_data(wire(new, Pubrel(2)) + bad, 2.0)
    assert [type(e).__name__ for e in events] == ["Publish", "Released", "ProtocolViolation"]
    session.data_to_send()
    session.connection_lost()  # the driver drops the read: nothing stored, nothing acked

    assert connect(session, now=3.0) == [Connected(True, False)]
    session.connection_lost()  # cut before the broker resent anything

    assert connect(session, now=4.0) == [Connected(True, False)]
    new = Publish("t", b"new", 2, dup=True, packet_id=3)
    resends: list[Packet] = [
        Publish("t", b"stored", 2, dup=True, packet_id=1),
        Pubrel(2),
        new,
    ]
    events = session.receive_data(wire(*resends), 5.0)
    assert events == [Released(2), resends[2]]  # id 1 withheld: pending (section 4.3.3)
    assert session.data_to_send() == encode(Pubrec(1))
    session.ack(new, 6.0)
    session.complete(2, 6.0)
    assert session.data_to_send() == encode(Pubrec(3)) + encode(Pubcomp(2))
    assert session.export_qos2_pending() == {1, 3}
    assert session.redeliveries == 1
