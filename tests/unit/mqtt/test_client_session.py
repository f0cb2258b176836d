"""ClientSession: the client state machine driven with broker bytes and a fake clock (floats)."""

from __future__ import annotations

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import (
    BadUsernameOrPassword,
    ConnectionRefused,
    IdentifierRejected,
    KeepAliveTimeout,
    LocalProtocolError,
    MalformedPacket,
    NotAuthorized,
    ServerUnavailable,
    UnacceptableProtocolVersion,
)
from connector.mqtt.events import (
    Connected,
    Event,
    Pong,
    ProtocolViolation,
    PublishDone,
    Released,
    Subscribed,
    Unsubscribed,
)
from connector.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
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
from connector.mqtt.receive_buffer import ReceiveBuffer
from connector.mqtt.session import ClientSession, State

V3 = ProtocolLevel.MQTT_3_1
V4 = ProtocolLevel.MQTT_3_1_1


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def wire(*packets: Packet, level: int = V4) -> bytes:
    return b"".join(encode(p, level) for p in packets)


def sent_packets(session: ClientSession) -> list[Packet]:
    """Decode what the session queued for the broker."""
    return ReceiveBuffer(session.config.level).feed(session.data_to_send())


def connect(session: ClientSession, now: float = 0.0, session_present: bool = False) -> list[Event]:
    session.connect(now)
    assert sent_packets(session)[0].type == Connect.type
    return session.receive_data(encode(Connack(session_present, 0), session.config.level), now)


def connected(
    level: ProtocolLevel = V4,
    keep_alive: int = 60,
    clean_session: bool = False,
    now: float = 0.0,
    session_present: bool = False,
) -> ClientSession:
    session = ClientSession(
        SessionConfig("client-1", clean_session=clean_session, keep_alive=keep_alive, level=level)
    )
    assert connect(session, now, session_present)[0] == Connected(session_present, False)
    assert session.state is State.CONNECTED
    assert session.data_to_send() == b""
    return session


# ---------------------------------------------------------------------------------------------
# CONNECT and CONNACK


def test_connect_bytes_3_1_1() -> None:
    session = ClientSession(SessionConfig("c1", clean_session=True, keep_alive=60))
    assert session.state is State.DISCONNECTED
    session.connect(0.0)
    assert session.state is State.CONNECTING
    assert session.data_to_send() == h("10 0E 00 04 4D 51 54 54 04 02 00 3C 00 02 63 31")
    assert session.data_to_send() == b""


def test_connect_bytes_3_1() -> None:
    session = ClientSession(SessionConfig("c1", clean_session=True, keep_alive=60, level=V3))
    session.connect(0.0)
    assert session.data_to_send() == h("10 10 00 06 4D 51 49 73 64 70 03 02 00 3C 00 02 63 31")


def test_connect_bytes_with_will_user_and_password() -> None:
    config = SessionConfig(
        "id",
        clean_session=False,
        keep_alive=30,
        username="u",
        password=b"pw",
        will=Will("w/t", b"bye", qos=1, retain=True),
    )
    session = ClientSession(config)
    session.connect(0.0)
    assert session.data_to_send() == h(
        "10 1F 00 04 4D 51 54 54 04 EC 00 1E"
        " 00 02 69 64 00 03 77 2F 74 00 03 62 79 65 00 01 75 00 02 70 77"
    )


def test_persistent_session_is_the_default() -> None:
    session = ClientSession(SessionConfig("c"))
    session.connect(0.0)
    (packet,) = sent_packets(session)
    assert isinstance(packet, Connect)
    assert packet.clean_session is False and packet.keep_alive == 60


def test_connect_twice_is_an_error() -> None:
    session = ClientSession(SessionConfig("c"))
    session.connect(0.0)
    with pytest.raises(LocalProtocolError, match="connecting"):
        session.connect(1.0)


@pytest.mark.parametrize("level", [V3, V4])
def test_connack_accepted(level: ProtocolLevel) -> None:
    session = ClientSession(SessionConfig("c", level=level))
    assert connect(session) == [Connected(False, False)]
    assert session.state is State.CONNECTED


@pytest.mark.parametrize(
    ("code", "error", "text"),
    [
        (1, UnacceptableProtocolVersion, "does not support the requested MQTT protocol version"),
        (2, IdentifierRejected, "identifier rejected"),
        (3, ServerUnavailable, "server unavailable"),
        (4, BadUsernameOrPassword, "bad user name or password"),
        (5, NotAuthorized, "not authorized"),
    ],
)
@pytest.mark.parametrize("level", [V3, V4])
def test_connack_refusals_raise_typed_errors(
    code: int, error: type[ConnectionRefused], text: str, level: ProtocolLevel
) -> None:
    session = ClientSession(SessionConfig("c", level=level))
    session.connect(0.0)
    with pytest.raises(error) as info:
        session.receive_data(bytes((0x20, 2, 0, code)), 0.0)
    assert isinstance(info.value, ConnectionRefused)
    assert info.value.return_code == code
    assert text in str(info.value)
    assert f"CONNACK return code {code}" in str(info.value)
    assert session.state is State.CLOSED


@pytest.mark.parametrize(
    "packet",
    [
        Publish("t", b"x"),
        Pingresp(),
        Suback(1, [0]),
        Puback(1),
    ],
    ids=lambda p: type(p).__name__,
)
def test_first_packet_not_connack_is_a_violation(packet: Packet) -> None:
    session = ClientSession(SessionConfig("c"))
    session.connect(0.0)
    session.data_to_send()
    events = session.receive_data(wire(packet), 0.0)
    assert len(events) == 1
    assert isinstance(events[0], ProtocolViolation)
    assert "expected CONNACK as the first packet" in events[0].reason
    assert type(packet).__name__.upper() in events[0].reason
    assert session.state is State.CLOSED


def test_malformed_bytes_are_a_violation_citing_the_rule() -> None:
    session = connected()
    events = session.receive_data(wire(Puback(1)) + h("40 02 00 00"), 1.0)
    assert isinstance(events[-1], ProtocolViolation)
    assert "2.3.1" in events[-1].reason
    assert session.state is State.CLOSED


def test_second_connack_is_a_violation() -> None:
    session = connected()
    (event,) = session.receive_data(wire(Connack(False, 0)), 1.0)
    assert isinstance(event, ProtocolViolation) and "second CONNACK" in event.reason


@pytest.mark.parametrize(
    "packet",
    [
        Connect("broker"),
        Subscribe(1, [("a", 0)]),
        Unsubscribe(1, ["a"]),
        Pingreq(),
        Disconnect(),
    ],
    ids=lambda p: type(p).__name__,
)
def test_client_only_packets_from_the_broker_are_violations(packet: Packet) -> None:
    session = connected()
    events = session.receive_data(wire(packet), 1.0)
    assert len(events) == 1 and isinstance(events[0], ProtocolViolation)
    assert f"must not send {type(packet).__name__.upper()}" in events[0].reason
    assert session.state is State.CLOSED


def test_packets_before_a_violation_are_still_processed() -> None:
    session = connected()
    message = Publish("t", b"1", qos=1, packet_id=3)
    events = session.receive_data(wire(Pingresp(), message, Pingreq(), Puback(9)), 1.0)
    assert events[:2] == [Pong(), message]
    assert isinstance(events[2], ProtocolViolation) and len(events) == 3


def test_publish_in_the_same_read_as_connack() -> None:
    session = ClientSession(SessionConfig("c"))
    session.connect(0.0)
    session.data_to_send()
    message = Publish("t", b"x", qos=2, packet_id=5)
    events = session.receive_data(wire(Connack(False, 0), message, message), 0.0)
    # Delivered once; the copy in the same read is a duplicate of a pending QoS 2 id.
    assert events == [Connected(False, False), message]
    assert session.data_to_send() == b""
    session.ack(message, 1.0)
    assert session.data_to_send() == wire(Pubrec(5))


def test_restored_qos2_duplicate_in_the_same_read_as_connack() -> None:
    session = ClientSession(SessionConfig("c"))
    session.restore_qos2_pending({5})
    session.connect(0.0)
    session.data_to_send()
    dup = Publish("t", b"x", qos=2, dup=True, packet_id=5)
    events = session.receive_data(wire(Connack(True, 0), dup, Pubrel(5)), 0.0)
    assert events == [Connected(True, False), Released(5)]
    assert session.data_to_send() == wire(Pubrec(5))


def test_disconnect() -> None:
    session = connected()
    session.disconnect(1.0)
    assert session.data_to_send() == h("E0 00")
    assert session.state is State.CLOSED
    connect(session, 2.0)
    assert session.state is State.CONNECTED


# ---------------------------------------------------------------------------------------------
# SUBSCRIBE / UNSUBSCRIBE


def test_subscribe_and_suback_with_a_refusal() -> None:
    session = connected()
    pid = session.subscribe([("a/+", 1), ("b/#", 2)], 1.0)
    assert pid == 1
    assert session.data_to_send() == h("82 0E 00 01 00 03 61 2F 2B 01 00 03 62 2F 23 02")
    events = session.receive_data(wire(Suback(1, [1, 0x80])), 2.0)
    assert events == [Subscribed(1, ["a/+", "b/#"], [1, 0x80])]
    assert events[0].refused == ["b/#"]  # type: ignore[union-attr]


def test_suback_all_granted_refuses_nothing() -> None:
    session = connected()
    pid = session.subscribe([("x", 2)], 1.0)
    (event,) = session.receive_data(wire(Suback(pid, [2])), 1.0)
    assert isinstance(event, Subscribed) and event.refused == [] and event.granted == [2]


def test_suback_for_an_unknown_id_is_a_violation() -> None:
    session = connected()
    session.subscribe([("x", 0)], 1.0)
    (event,) = session.receive_data(wire(Suback(2, [0])), 1.0)
    assert isinstance(event, ProtocolViolation)
    assert "SUBACK for packet id 2" in event.reason


def test_suback_answered_twice_is_a_violation() -> None:
    session = connected()
    pid = session.subscribe([("x", 0)], 1.0)
    assert len(session.receive_data(wire(Suback(pid, [0])), 1.0)) == 1
    (event,) = session.receive_data(wire(Suback(pid, [0])), 1.0)
    assert isinstance(event, ProtocolViolation)


def test_suback_with_the_wrong_number_of_codes_is_a_violation() -> None:
    session = connected()
    pid = session.subscribe([("x", 0), ("y", 1)], 1.0)
    (event,) = session.receive_data(wire(Suback(pid, [0])), 1.0)
    assert isinstance(event, ProtocolViolation) and "3.9.3" in event.reason


def test_unsubscribe_and_unsuback() -> None:
    session = connected()
    pid = session.unsubscribe(["a/+", "b"], 1.0)
    assert session.data_to_send() == h("A2 0A") + h("00 01") + h("00 03 61 2F 2B 00 01 62")
    assert session.receive_data(wire(Unsuback(pid)), 2.0) == [Unsubscribed(pid)]
    (event,) = session.receive_data(wire(Unsuback(pid)), 3.0)
    assert isinstance(event, ProtocolViolation) and "UNSUBACK for packet id 1" in event.reason


def test_subscribe_on_3_1_uses_qos1_flags() -> None:
    session = connected(level=V3)
    session.subscribe([("a", 0)], 1.0)
    session.unsubscribe(["a"], 1.0)
    data = session.data_to_send()
    assert data[0] == 0x82 and data[8] == 0xA2


def test_invalid_subscribe_requests_leave_no_state() -> None:
    session = connected()
    with pytest.raises(ValueError):
        session.subscribe([], 1.0)
    with pytest.raises(MalformedPacket, match=r"4\.7\.1\.2"):
        session.subscribe([("a/#/b", 0)], 1.0)
    with pytest.raises(ValueError):
        session.subscribe([("a", 3)], 1.0)
    with pytest.raises(ValueError):
        session.unsubscribe([], 1.0)
    with pytest.raises(MalformedPacket, match=r"4\.7\.1\.3"):
        session.unsubscribe(["a+"], 1.0)
    assert session.data_to_send() == b""
    # No packet id was taken by the failed calls.
    assert session.subscribe([("a", 0)], 1.0) == 1
    assert session.unsubscribe(["a"], 1.0) == 2


@pytest.mark.parametrize("state", ["new", "connecting", "lost"])
def test_requests_need_a_connected_session(state: str) -> None:
    session = ClientSession(SessionConfig("c"))
    if state == "connecting":
        session.connect(0.0)
    elif state == "lost":
        connect(session)
        session.connection_lost()
    with pytest.raises(LocalProtocolError, match="needs a connected session"):
        session.subscribe([("a", 0)], 1.0)
    with pytest.raises(LocalProtocolError):
        session.unsubscribe(["a"], 1.0)
    with pytest.raises(LocalProtocolError):
        session.publish("a", b"", 1, 1.0)


# ---------------------------------------------------------------------------------------------
# Keep-alive (section 3.1.2.10)


def test_next_deadline_before_and_while_connecting() -> None:
    session = ClientSession(SessionConfig("c", keep_alive=10))
    assert session.next_deadline() is None
    session.connect(100.0)
    assert session.next_deadline() == 110.0
    session.tick(109.9)
    with pytest.raises(KeepAliveTimeout, match="no CONNACK within 10 s"):
        session.tick(110.0)


def test_pingreq_after_keep_alive_idle_and_timeout_at_one_and_a_half() -> None:
    session = connected(keep_alive=10, now=100.0)
    assert session.next_deadline() == 110.0
    session.tick(109.999)
    assert session.data_to_send() == b""
    session.tick(110.0)
    assert session.data_to_send() == h("C0 00")
    assert session.next_deadline() == 115.0
    session.tick(112.0)  # no second PINGREQ while one is outstanding
    session.tick(114.999)
    assert session.data_to_send() == b""
    with pytest.raises(KeepAliveTimeout, match=r"no packet from the broker for 15\.0 s"):
        session.tick(115.0)


def test_pingresp_clears_the_timeout() -> None:
    session = connected(keep_alive=10, now=0.0)
    session.tick(10.0)
    assert session.data_to_send() == h("C0 00")
    assert session.receive_data(h("D0 00"), 12.0) == [Pong()]
    session.tick(15.0)  # would have timed out without the PINGRESP
    assert session.next_deadline() == 20.0  # last sent 10, last received 12
    session.tick(20.0)
    assert session.data_to_send() == h("C0 00")
    assert session.next_deadline() == 25.0


def test_any_bytes_from_the_broker_count_as_an_answer() -> None:
    session = connected(keep_alive=10)
    session.tick(10.0)
    session.data_to_send()
    assert session.receive_data(h("30"), 14.0) == []  # first byte of a frame
    session.tick(16.0)
    assert session.data_to_send() == b""
    assert session.next_deadline() == 20.0


def test_client_traffic_does_not_hide_a_silent_broker() -> None:
    session = connected(keep_alive=10)
    for now in (3.0, 6.0, 9.0):
        session.publish("t", b"x", 0, now)
    session.data_to_send()
    assert session.next_deadline() == 10.0  # last received at 0
    session.tick(10.0)
    assert session.data_to_send() == h("C0 00")
    with pytest.raises(KeepAliveTimeout):
        session.tick(15.0)


def test_broker_traffic_does_not_replace_client_pings() -> None:
    session = connected(keep_alive=10)
    for now in (3.0, 6.0, 9.0):
        session.receive_data(wire(Publish("t", b"x")), now)
    assert session.next_deadline() == 10.0  # last sent (CONNECT) at 0
    session.tick(10.0)
    assert session.data_to_send() == h("C0 00")


def test_keep_alive_zero_disables_pings() -> None:
    session = connected(keep_alive=0)
    assert session.next_deadline() is None
    session.tick(1e9)
    assert session.data_to_send() == b""


def test_connection_lost_forgets_the_outstanding_ping() -> None:
    session = connected(keep_alive=10)
    session.tick(10.0)
    session.connection_lost()
    assert session.next_deadline() is None
    session.tick(100.0)  # nothing to time out while disconnected
    connect(session, 200.0)
    assert session.next_deadline() == 210.0


# ---------------------------------------------------------------------------------------------
# Inbound QoS 0, 1, 2


def test_inbound_qos0_needs_no_ack() -> None:
    session = connected()
    message = Publish("t", b"x")
    assert session.receive_data(wire(message), 1.0) == [message]
    session.ack(message, 1.0)
    assert session.data_to_send() == b""


def test_inbound_qos1_puback_only_after_ack() -> None:
    session = connected()
    message = Publish("t", b"x", qos=1, packet_id=7)
    assert session.receive_data(wire(message), 1.0) == [message]
    assert session.data_to_send() == b""
    session.ack(message, 2.0)
    assert session.data_to_send() == h("40 02 00 07")
    session.ack(message, 2.0)  # once only
    assert session.data_to_send() == b""


def test_inbound_qos2_flow() -> None:
    session = connected()
    message = Publish("t", b"x", qos=2, packet_id=9)
    dup = Publish("t", b"x", qos=2, dup=True, packet_id=9)
    assert session.receive_data(wire(message), 1.0) == [message]
    assert session.data_to_send() == b""
    # A duplicate before the ack: not delivered again, nothing sent.
    assert session.receive_data(wire(dup), 1.5) == []
    assert session.data_to_send() == b""
    session.ack(message, 2.0)
    assert session.data_to_send() == h("50 02 00 09")
    assert session.export_qos2_pending() == {9}
    # A duplicate after the ack: not delivered, PUBREC again.
    assert session.receive_data(wire(dup), 3.0) == []
    assert session.data_to_send() == h("50 02 00 09")
    # PUBREL: the caller persists the release, then completes.
    assert session.receive_data(h("62 02 00 09"), 4.0) == [Released(9)]
    assert session.data_to_send() == b""
    session.complete(9, 5.0)
    assert session.data_to_send() == h("70 02 00 09")
    assert session.export_qos2_pending() == set()
    # The id is free again: a new message with it is delivered.
    again = Publish("t", b"new", qos=2, packet_id=9)
    assert session.receive_data(wire(again), 6.0) == [again]


def test_unknown_pubrel_gets_pubcomp_at_once() -> None:
    session = connected()
    assert session.receive_data(h("62 02 01 00"), 1.0) == []
    assert session.data_to_send() == h("70 02 01 00")


def test_repeated_pubrel_is_released_again() -> None:
    session = connected()
    message = Publish("t", b"x", qos=2, packet_id=3)
    session.receive_data(wire(message), 1.0)
    session.ack(message, 1.0)
    session.data_to_send()
    assert session.receive_data(wire(Pubrel(3), Pubrel(3)), 2.0) == [Released(3), Released(3)]


def test_ack_many_sends_all_acks_in_one_write() -> None:
    session = connected()
    messages = [
        Publish("a", b"1", qos=1, packet_id=1),
        Publish("b", b"2", qos=0),
        Publish("c", b"3", qos=2, packet_id=2),
        Publish("d", b"4", qos=1, packet_id=3),
    ]
    assert session.receive_data(wire(*messages), 1.0) == messages
    session.ack_many(messages, 2.0)
    assert session.data_to_send() == h("40 02 00 01  50 02 00 02  40 02 00 03")
    session.ack_many([], 3.0)
    assert session.data_to_send() == b""


def test_ack_of_a_message_never_delivered_is_ignored() -> None:
    session = connected()
    session.ack(Publish("t", b"x", qos=1, packet_id=4), 1.0)
    session.ack(Publish("t", b"x", qos=2, packet_id=5), 1.0)
    assert session.data_to_send() == b""


def test_acks_after_connection_lost_are_not_sent_and_the_ids_wait_for_the_resend() -> None:
    session = connected()
    q1 = Publish("t", b"1", qos=1, packet_id=4)
    q2 = Publish("t", b"2", qos=2, packet_id=5)
    session.receive_data(wire(q1, q2), 1.0)
    session.connection_lost()
    session.ack_many([q1, q2], 2.0)
    assert session.data_to_send() == b""
    assert session.export_qos2_pending() == {5}, "stored, PUBREC never written: still pending"


def test_acks_from_an_earlier_connection_are_not_sent_and_their_resends_are_withheld() -> None:
    """Stored messages whose acks could not be written (the connection was gone): the
    broker cannot have reused their ids, so its resends are the same messages, answered and
    not delivered again; after that the ids are free (section 2.3.1)."""
    session = connected()
    q1 = Publish("t", b"1", qos=1, packet_id=4)
    q2 = Publish("t", b"2", qos=2, packet_id=5)
    session.receive_data(wire(q1, q2), 1.0)
    session.connection_lost()
    connect(session, 2.0, session_present=True)
    session.ack_many([q1, q2], 3.0)
    assert session.data_to_send() == b""
    # The broker redelivers them (DUP) with the same ids: answered, not delivered.
    d1 = Publish("t", b"1", qos=1, dup=True, packet_id=4)
    d2 = Publish("t", b"2", qos=2, dup=True, packet_id=5)
    assert session.receive_data(wire(d1, d2), 4.0) == []
    assert session.data_to_send() == wire(Puback(4), Pubrec(5))
    assert session.redeliveries == 2
    session.ack_many([q1, q2], 5.0)  # acknowledged already: nothing more
    assert session.data_to_send() == b""
    # A new message with the QoS 1 id, identical content included, is delivered.
    again = Publish("t", b"1", qos=1, dup=True, packet_id=4)
    assert session.receive_data(wire(again), 6.0) == [again]


def test_ack_while_connecting_is_dropped() -> None:
    session = connected()
    message = Publish("t", b"1", qos=1, packet_id=4)
    session.receive_data(wire(message), 1.0)
    session.connection_lost()
    session.connect(2.0)
    session.data_to_send()
    session.ack(message, 3.0)
    assert session.data_to_send() == b""


def test_complete_after_connection_lost_sends_nothing_and_forgets_the_id() -> None:
    session = connected()
    message = Publish("t", b"x", qos=2, packet_id=8)
    session.receive_data(wire(message), 1.0)
    session.ack(message, 1.0)
    session.receive_data(wire(Pubrel(8)), 2.0)
    session.data_to_send()
    session.connection_lost()
    session.complete(8, 3.0)
    assert session.data_to_send() == b""
    assert session.export_qos2_pending() == set()


def acknowledged(window: int, *ids: int) -> tuple[ClientSession, list[Publish], bytes]:
    """A session with ``pubrec_window`` ``window`` that received QoS 2 messages ``ids`` and
    acknowledged them all; the bytes it sent for them."""
    session = ClientSession(SessionConfig("client-1", pubrec_window=window))
    connect(session)
    session.data_to_send()
    messages = [Publish("t", pid.to_bytes(2, "big"), qos=2, packet_id=pid) for pid in ids]
    assert session.receive_data(wire(*messages), 1.0) == messages
    session.ack_many(messages, 1.0)
    return session, messages, session.data_to_send()


def test_pubrecs_beyond_the_window_wait_for_pubcomps_in_order() -> None:
    session, _, sent = acknowledged(2, 1, 2, 3, 4, 5)
    assert sent == wire(Pubrec(1), Pubrec(2))
    # every acknowledged id is recorded: a resend of a held one is not delivered again
    assert session.export_qos2_pending() == {1, 2, 3, 4, 5}
    dup = Publish("t", (4).to_bytes(2, "big"), qos=2, dup=True, packet_id=4)
    assert session.receive_data(wire(dup), 2.5) == []
    assert session.data_to_send() == b""  # its PUBREC still waits its turn

    assert session.receive_data(wire(Pubrel(2)), 3.0) == [Released(2)]
    session.complete(2, 3.0)
    assert session.data_to_send() == wire(Pubcomp(2), Pubrec(3))
    assert session.receive_data(wire(Pubrel(1), Pubrel(3)), 4.0) == [Released(1), Released(3)]
    session.complete(1, 4.0)
    session.complete(3, 4.0)
    assert session.data_to_send() == wire(Pubcomp(1), Pubrec(4), Pubcomp(3), Pubrec(5))
    for pid in (4, 5):
        assert session.receive_data(wire(Pubrel(pid)), 5.0) == [Released(pid)]
        session.complete(pid, 5.0)
    assert session.data_to_send() == wire(Pubcomp(4), Pubcomp(5))
    assert session.export_qos2_pending() == set()
    assert session.pubrecs_held == 3


def test_open_pubrecs_counts_answered_exchanges_until_their_pubcomp() -> None:
    session, _, _ = acknowledged(2, 1, 2, 3)
    assert session.open_pubrecs == 2, "the held PUBREC is not open"
    session.receive_data(wire(Pubrel(1)), 2.0)
    assert session.open_pubrecs == 2, "released but not completed: still open"
    session.complete(1, 2.0)  # lets PUBREC 3 out
    assert session.open_pubrecs == 2
    for pid in (2, 3):
        session.receive_data(wire(Pubrel(pid)), 3.0)
        session.complete(pid, 3.0)
    assert session.open_pubrecs == 0


def test_a_resend_of_an_answered_id_gets_its_pubrec_again_without_taking_room() -> None:
    session, _, sent = acknowledged(1, 1, 2)
    assert sent == wire(Pubrec(1))
    dup = Publish("t", (1).to_bytes(2, "big"), qos=2, dup=True, packet_id=1)
    assert session.receive_data(wire(dup), 2.0) == []
    assert session.data_to_send() == wire(Pubrec(1))
    session.receive_data(wire(Pubrel(1)), 3.0)
    session.complete(1, 3.0)
    assert session.data_to_send() == wire(Pubcomp(1), Pubrec(2))


def test_held_pubrecs_are_not_sent_on_a_new_connection_until_the_broker_resends() -> None:
    session, messages, sent = acknowledged(1, 1, 2, 3)
    assert sent == wire(Pubrec(1))
    session.connection_lost()
    assert session.export_qos2_pending() == {1, 2, 3}

    connect(session, 2.0, session_present=True)
    assert session.data_to_send() == b""
    # the broker resends PUBREL for 1 and the PUBLISHes it never saw a PUBREC for
    resent = [
        Publish(m.topic, m.payload, qos=2, dup=True, packet_id=m.packet_id) for m in messages[1:]
    ]
    assert session.receive_data(wire(Pubrel(1), *resent), 3.0) == [Released(1)]
    assert session.data_to_send() == wire(Pubrec(2))  # 3 waits: the window holds 2
    session.complete(1, 3.0)  # 1 was answered on the previous connection: frees no room
    assert session.data_to_send() == wire(Pubcomp(1))
    session.receive_data(wire(Pubrel(2)), 4.0)
    session.complete(2, 4.0)
    assert session.data_to_send() == wire(Pubcomp(2), Pubrec(3))


def test_window_zero_sends_every_pubrec_at_once() -> None:
    _, _, sent = acknowledged(0, *range(1, 301))
    assert sent == wire(*(Pubrec(pid) for pid in range(1, 301)))


def test_a_pubrel_for_a_held_id_completes_it_and_drops_its_pubrec() -> None:
    session, _, sent = acknowledged(1, 1, 2)
    assert sent == wire(Pubrec(1))
    # a broker releasing an id it got no PUBREC for: the message is recorded, so complete it
    assert session.receive_data(wire(Pubrel(2)), 2.0) == [Released(2)]
    session.complete(2, 2.0)
    assert session.data_to_send() == wire(Pubcomp(2))
    session.receive_data(wire(Pubrel(1)), 3.0)
    session.complete(1, 3.0)
    assert session.data_to_send() == wire(Pubcomp(1))  # no PUBREC for 2 any more


def qos2_state(session: ClientSession) -> tuple[object, ...]:
    """Everything ``complete`` may change, for comparing two sessions."""
    return (
        session.state,
        session.export_qos2_pending(),
        dict(session._inbound.exchanges.states),
        list(session._inbound.exchanges.queue),
        session.open_pubrecs,
        session.pubrecs_held,
        session._last_sent,
    )


@pytest.mark.parametrize("window", [0, 1, 2, 3, 256])
@pytest.mark.parametrize("lost", [False, True], ids=["connected", "connection-lost"])
def test_complete_many_matches_a_loop_of_complete(window: int, lost: bool) -> None:
    """Both sessions see the same bytes; one completes id by id, the other in one call."""
    ids = [1, 2, 3, 4, 5, 6, 7]
    released = [2, 99, 1, 6, 3, 2, 4, 0xFFFF]  # 99 and 0xFFFF unknown, 2 twice, 6 held
    pubrels = wire(*(Pubrel(pid) for pid in released))
    one_by_one, _, first_sent = acknowledged(window, *ids)
    batched, _, batch_sent = acknowledged(window, *ids)
    assert first_sent == batch_sent
    events = one_by_one.receive_data(pubrels, 2.0)
    assert batched.receive_data(pubrels, 2.0) == events
    assert one_by_one.data_to_send() == batched.data_to_send()  # PUBCOMPs for unknown ids
    if lost:
        one_by_one.connection_lost()
        batched.connection_lost()
    for pid in released:
        one_by_one.complete(pid, 3.0)
    batched.complete_many(released, 3.0)
    expected = one_by_one.data_to_send()
    assert batched.data_to_send() == expected
    assert qos2_state(batched) == qos2_state(one_by_one)
    if not lost:
        assert expected  # the comparison covered bytes on the wire
    if window in (1, 2) and not lost:
        assert one_by_one.pubrecs_held  # ... and PUBRECs let out of a full window


def test_complete_many_sends_each_pubcomp_then_the_pubrecs_it_frees_in_one_write() -> None:
    session, _, sent = acknowledged(2, 1, 2, 3, 4, 5)
    assert sent == wire(Pubrec(1), Pubrec(2))
    session.receive_data(wire(Pubrel(2), Pubrel(1)), 2.0)
    session.complete_many([2, 42, 1], 3.0)
    expected = wire(Pubcomp(2), Pubrec(3), Pubcomp(42), Pubcomp(1), Pubrec(4))
    assert session._out == [expected]  # one queued write
    assert session.data_to_send() == expected
    assert session.export_qos2_pending() == {3, 4, 5}
    session.complete_many([], 4.0)
    assert session.data_to_send() == b""


def test_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="pubrec_window must be >= 0"):
        SessionConfig("client-1", pubrec_window=-1)


# ---------------------------------------------------------------------------------------------
# QoS 2 state across connections and restarts


def test_connection_lost_keeps_recorded_and_drops_received_qos2_ids() -> None:
    session = connected()
    unacked = Publish("t", b"1", qos=2, packet_id=1)
    acked = Publish("t", b"2", qos=2, packet_id=2)
    session.receive_data(wire(unacked, acked), 1.0)
    session.ack(acked, 1.0)
    assert session.export_qos2_pending() == {2}
    session.connection_lost()
    assert session.state is State.DISCONNECTED
    assert session.export_qos2_pending() == {2}
    connect(session, 2.0, session_present=True)
    redelivered = [
        Publish("t", b"1", qos=2, dup=True, packet_id=1),
        Publish("t", b"2", qos=2, dup=True, packet_id=2),
    ]
    # Id 1 was never acknowledged: delivered again. Id 2 was: only PUBREC again.
    assert session.receive_data(wire(*redelivered), 3.0) == [redelivered[0]]
    assert session.data_to_send() == wire(Pubrec(2))


def test_export_and_restore_across_a_new_session() -> None:
    first = connected()
    messages = [Publish("t", bytes([i]), qos=2, packet_id=i) for i in (10, 11, 12)]
    first.receive_data(wire(*messages), 1.0)
    first.ack_many(messages[:2], 2.0)
    saved = first.export_qos2_pending()
    assert saved == {10, 11}

    second = ClientSession(SessionConfig("client-1"))
    second.restore_qos2_pending(sorted(saved))
    second.expect_session_present = True
    assert second.export_qos2_pending() == {10, 11}
    assert connect(second, 10.0, session_present=True) == [Connected(True, False)]
    dup = Publish("t", bytes([10]), qos=2, dup=True, packet_id=10)
    assert second.receive_data(wire(dup), 11.0) == []
    assert second.data_to_send() == wire(Pubrec(10))
    assert second.receive_data(wire(Pubrel(11)), 12.0) == [Released(11)]
    second.complete(11, 13.0)
    assert second.data_to_send() == wire(Pubcomp(11))
    assert second.export_qos2_pending() == {10}


@pytest.mark.parametrize("bad", [0, 65536, -1])
def test_restore_rejects_invalid_ids(bad: int) -> None:
    session = ClientSession(SessionConfig("c"))
    with pytest.raises(ValueError):
        session.restore_qos2_pending([bad])


def test_session_lost_clears_pending_qos2_ids() -> None:
    session = ClientSession(SessionConfig("c"))
    session.restore_qos2_pending({1, 2})
    session.expect_session_present = True
    assert connect(session, 0.0, session_present=False) == [Connected(False, True, (1, 2))]
    assert session.export_qos2_pending() == set()
    # Id 1 now names a new message.
    message = Publish("t", b"new", qos=2, packet_id=1)
    assert session.receive_data(wire(message), 1.0) == [message]


def test_session_lost_is_reported_only_when_a_session_was_expected() -> None:
    session = ClientSession(SessionConfig("c"))
    assert connect(session, 0.0, session_present=False) == [Connected(False, False)]
    assert session.expect_session_present is True
    session.connection_lost()
    assert connect(session, 1.0, session_present=True) == [Connected(True, False)]
    session.connection_lost()
    assert connect(session, 2.0, session_present=False) == [Connected(False, True)]


def test_clean_session_never_reports_a_lost_session() -> None:
    session = ClientSession(SessionConfig("c", clean_session=True))
    session.expect_session_present = True
    assert connect(session) == [Connected(False, False)]
    assert session.expect_session_present is False
    session.connection_lost()
    assert connect(session, 1.0) == [Connected(False, False)]


# ---------------------------------------------------------------------------------------------
# Outbound PUBLISH


def test_outbound_qos0() -> None:
    session = connected()
    assert session.publish("a/b", b"hi", 0, 1.0) is None
    assert session.data_to_send() == h("30 07 00 03 61 2F 62 68 69")
    assert session.outbound_in_flight == 0


def test_outbound_qos1_flow() -> None:
    session = connected()
    pid = session.publish("a/b", b"hi", 1, 1.0, retain=True)
    assert pid == 1
    assert session.data_to_send() == h("33 09 00 03 61 2F 62 00 01 68 69")
    assert session.outbound_in_flight == 1
    assert session.receive_data(wire(Puback(1)), 2.0) == [PublishDone(1)]
    assert session.outbound_in_flight == 0
    assert session.receive_data(wire(Puback(1)), 3.0) == []  # late duplicate: ignored


def test_outbound_qos2_flow() -> None:
    session = connected()
    pid = session.publish("a/b", b"hi", 2, 1.0)
    assert pid is not None
    assert session.data_to_send() == h("34 09 00 03 61 2F 62 00 01 68 69")
    assert session.receive_data(wire(Puback(pid)), 1.5) == []  # wrong ack for QoS 2
    assert session.receive_data(wire(Pubrec(pid)), 2.0) == []
    assert session.data_to_send() == h("62 02 00 01")
    assert session.outbound_in_flight == 1
    assert session.receive_data(wire(Pubcomp(pid)), 3.0) == [PublishDone(pid)]
    assert session.outbound_in_flight == 0
    assert session.data_to_send() == b""


def test_acks_for_unknown_outbound_ids_are_ignored() -> None:
    session = connected()
    assert session.receive_data(wire(Puback(5), Pubrec(6), Pubcomp(7)), 1.0) == []
    assert session.data_to_send() == b""
    assert session.state is State.CONNECTED


def test_outbound_publish_validates_before_taking_an_id() -> None:
    session = connected()
    with pytest.raises(MalformedPacket, match=r"3\.3\.2\.1"):
        session.publish("a/#", b"", 1, 1.0)
    with pytest.raises(ValueError, match="QoS"):
        session.publish("a", b"", 3, 1.0)
    assert session.outbound_in_flight == 0
    assert session.data_to_send() == b""
    assert session.publish("a", b"", 1, 1.0) == 1


def test_unacked_outbound_is_resent_on_reconnect() -> None:
    session = connected()
    assert session.publish("q/1", b"one", 1, 1.0) == 1
    assert session.publish("q/2", b"two", 2, 1.0) == 2
    assert session.publish("q/3", b"three", 2, 1.0) == 3
    assert session.publish("q/0", b"zero", 0, 1.0) is None
    session.receive_data(wire(Pubrec(3)), 2.0)
    assert session.data_to_send()[-4:] == wire(Pubrel(3))
    session.connection_lost()
    session.connect(5.0)
    session.data_to_send()
    assert session.receive_data(wire(Connack(True, 0)), 6.0) == [Connected(True, False)]
    assert session.data_to_send() == (
        encode_publish("q/1", b"one", 1, 1, dup=True)
        + encode_publish("q/2", b"two", 2, 2, dup=True)
        + wire(Pubrel(3))
    )
    events = session.receive_data(wire(Puback(1), Pubrec(2), Pubcomp(3)), 7.0)
    assert events == [PublishDone(1), PublishDone(3)]
    assert session.data_to_send() == wire(Pubrel(2))
    assert session.receive_data(wire(Pubcomp(2)), 8.0) == [PublishDone(2)]
    assert session.outbound_in_flight == 0


@pytest.mark.parametrize("clean_session", [True, False])
def test_a_released_qos2_message_is_published_again_when_the_broker_lost_the_session(
    clean_session: bool,
) -> None:
    """Method A (section 4.3.3): after PUBREC the broker holds the message and may deliver it
    only on PUBREL. A broker without our session on the next connection (Session Present 0)
    lost it with the session, so the PUBLISH goes again in place of the PUBREL (at least
    once); with the session there, the PUBREL goes, as section 4.4 says."""
    session = connected(clean_session=clean_session)
    assert session.publish("q/2", b"two", 2, 1.0) == 1
    session.data_to_send()
    session.receive_data(wire(Pubrec(1)), 2.0)
    assert session.data_to_send() == wire(Pubrel(1))
    session.connection_lost()
    connect(session, 3.0, session_present=False)
    assert session.data_to_send() == encode_publish("q/2", b"two", 2, 1, dup=True)
    assert session.receive_data(wire(Pubrec(1)), 4.0) == []
    assert session.data_to_send() == wire(Pubrel(1))
    if not clean_session:
        session.connection_lost()
        connect(session, 5.0, session_present=True)
        assert session.data_to_send() == wire(Pubrel(1))
    assert session.receive_data(wire(Pubcomp(1)), 6.0) == [PublishDone(1)]
    assert session.outbound_in_flight == 0
    session.connection_lost()
    connect(session, 7.0, session_present=False)
    assert session.data_to_send() == b""  # nothing is kept after PUBCOMP


def test_resent_publish_has_the_dup_flag() -> None:
    session = connected()
    session.publish("t", b"", 1, 1.0)
    session.data_to_send()
    session.connection_lost()
    connect(session, 2.0, session_present=True)
    (packet,) = sent_packets(session)
    assert packet == Publish("t", b"", qos=1, dup=True, packet_id=1)


# ---------------------------------------------------------------------------------------------
# Packet identifiers (section 2.3.1)


def test_packet_ids_never_0_wrap_after_65535_skip_busy_and_run_out() -> None:
    session = connected()
    # 65535 QoS 1 messages in flight use every id, in order.
    for expected in range(1, 0x10000):
        assert session.publish("t", b"", 1, 1.0) == expected
        if expected % 4096 == 0:
            session.data_to_send()
    session.data_to_send()
    assert session.outbound_in_flight == 0xFFFF
    with pytest.raises(LocalProtocolError, match="all 65535 packet identifiers are in use"):
        session.publish("t", b"", 1, 1.0)
    with pytest.raises(LocalProtocolError):
        session.subscribe([("t", 0)], 1.0)
    # Free 300, 5 and 1: after 65535 the ids wrap to 1 (never 0), then skip the busy ones.
    events = session.receive_data(wire(Puback(300), Puback(5), Puback(1)), 2.0)
    assert events == [PublishDone(300), PublishDone(5), PublishDone(1)]
    assert session.publish("t", b"", 1, 3.0) == 1
    assert session.publish("t", b"", 2, 3.0) == 5
    assert session.subscribe([("t", 0)], 3.0) == 300
    with pytest.raises(LocalProtocolError):
        session.unsubscribe(["t"], 3.0)


def test_packet_ids_skip_ids_in_use_by_subscribe() -> None:
    session = connected()
    assert session.publish("t", b"", 1, 1.0) == 1
    assert session.subscribe([("t", 0)], 1.0) == 2
    assert session.unsubscribe(["t"], 1.0) == 3
    session.receive_data(wire(Puback(1)), 2.0)
    assert session.publish("t", b"", 2, 2.0) == 4


# ---------------------------------------------------------------------------------------------
# SessionConfig


def test_mqtt_3_1_client_id_at_most_23_characters() -> None:
    assert SessionConfig("c" * 23, level=V3).client_id == "c" * 23
    with pytest.raises(ValueError, match="1 to 23 characters"):
        SessionConfig("c" * 24, level=V3)
    with pytest.raises(ValueError, match="1 to 23 characters"):
        SessionConfig("", clean_session=True, level=V3)
    assert SessionConfig("c" * 24, level=V4).client_id == "c" * 24


def test_config_rules() -> None:
    with pytest.raises(ValueError, match=r"3\.1\.3\.1"):
        SessionConfig("", clean_session=False)
    assert SessionConfig("", clean_session=True).client_id == ""
    with pytest.raises(ValueError, match=r"3\.1\.2\.9"):
        SessionConfig("c", password=b"pw")
    with pytest.raises(ValueError, match="keep alive"):
        SessionConfig("c", keep_alive=65536)


def test_password_never_in_repr() -> None:
    secret = b"s3cr3t-pa55"
    config = SessionConfig("c", username="user", password=secret)
    packet = Connect("c", username="user", password=secret)
    for text in (repr(config), str(config), repr(packet), str(packet)):
        assert "s3cr3t" not in text
        assert "user" in text
    session = ClientSession(config)
    session.connect(0.0)
    assert secret in session.data_to_send()  # it is sent, just never shown


def test_mqtt_3_1_connack_cannot_say_the_session_is_gone() -> None:
    # A 3.1 CONNACK has no session-present flag: pending QoS 2 ids of a persistent session
    # are kept and no loss is reported.
    session = ClientSession(SessionConfig("c", level=V3))
    session.restore_qos2_pending({4})
    session.expect_session_present = True
    assert connect(session) == [Connected(False, False)]
    assert session.export_qos2_pending() == {4}
    dup = Publish("t", b"x", qos=2, dup=True, packet_id=4)
    assert session.receive_data(wire(dup, level=V3), 1.0) == []
    assert session.data_to_send() == wire(Pubrec(4))


def test_mqtt_3_1_clean_session_forgets_pending_ids() -> None:
    session = ClientSession(SessionConfig("c", level=V3, clean_session=True))
    session.restore_qos2_pending({4})
    assert connect(session) == [Connected(False, False, (4,))]
    assert session.export_qos2_pending() == set()


def test_send_ping_does_not_arm_the_timeout() -> None:
    session = ClientSession(SessionConfig("c", keep_alive=10))
    session.send_ping(0.0)  # not connected: nothing
    assert session.data_to_send() == b""
    connect(session)
    session.send_ping(4.0)
    assert session.data_to_send() == h("C0 00")
    assert session.next_deadline() == 10.0  # still from the last packet received, at 0
    session.tick(9.0)  # no timeout: that ping's answer is not awaited
    assert session.data_to_send() == b""
