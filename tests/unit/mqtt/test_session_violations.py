"""Hostile bytes from the broker at the session level: every violation ends the connection
with a reason that cites the rule, a broker that keeps violating is given up on, and a reused
packet id is refused rather than acknowledged twice."""

from __future__ import annotations

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import RepeatedProtocolViolation
from connector.mqtt.events import Connected, ProtocolViolation, Released
from connector.mqtt.packets import (
    Connack,
    Connect,
    Packet,
    Pingreq,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    Unsubscribe,
)
from connector.mqtt.session import ClientSession, State

CONNACK = encode(Connack(False, 0))


def connected_session(**config: object) -> ClientSession:
    session = ClientSession(SessionConfig("hostile", **config))  # type: ignore[arg-type]
    session.connect(0.0)
    session.data_to_send()
    assert session.receive_data(CONNACK, 0.0) == [Connected(False, False)]
    return session


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# (bytes after CONNACK, a fragment of the reason, the section it cites)
VIOLATIONS = [
    pytest.param(h("36 05 00 01 61 00 01"), "QoS 3", "3.3.1.2", id="publish-qos3"),
    pytest.param(h("32 05 00 01 61 00 00"), "packet identifier 0", "2.3.1", id="packet-id-0"),
    pytest.param(h("30 04 00 02 C3 28"), "UTF-8", "1.5.3", id="invalid-utf8-topic"),
    pytest.param(h("30 04 00 02 61 00"), "U+0000", "1.5.3", id="nul-in-topic"),
    pytest.param(h("30 05 00 03 61 2F 23"), "wildcard", "3.3.2.1", id="wildcard-topic"),
    pytest.param(h("38 03 00 01 61"), "DUP must be 0", "3.3.1.1", id="dup-on-qos0"),
    pytest.param(h("30 FF FF FF FF 01"), "more than 4 bytes", "2.2.3", id="length-5-bytes"),
    pytest.param(h("30 01 00"), "past the end", "3.3.2", id="topic-length-truncated"),
    pytest.param(h("41 02 00 01"), "flags", "2.2.2", id="puback-wrong-flags"),
    pytest.param(h("60 02 00 01"), "flags", "2.2.2", id="pubrel-wrong-flags"),
    pytest.param(h("D1 00"), "flags", "2.2.2", id="pingresp-wrong-flags"),
    pytest.param(h("00 00"), "reserved", "2.2.1", id="reserved-type-0"),
    pytest.param(h("F0 00"), "reserved", "2.2.1", id="reserved-type-15"),
    pytest.param(h("40 03 00 01 00"), "remaining length 2", "3.4", id="puback-too-long"),
    pytest.param(h("D0 01 00"), "remaining length 0", "3.13", id="pingresp-with-body"),
    pytest.param(h("90 03 00 01 07"), "return code", "3.9.3", id="suback-bad-code"),
    pytest.param(CONNACK, "second CONNACK", "3.2", id="second-connack"),
    pytest.param(encode(Connect("x", clean_session=True)), "CONNECT", "2.2.1", id="connect"),
    pytest.param(encode(Subscribe(1, [("a", 0)])), "SUBSCRIBE", "2.2.1", id="subscribe"),
    pytest.param(encode(Unsubscribe(1, ["a"])), "UNSUBSCRIBE", "2.2.1", id="unsubscribe"),
    pytest.param(encode(Pingreq()), "PINGREQ", "2.2.1", id="pingreq"),
    pytest.param(encode(Suback(9, [0])), "SUBACK for packet id 9", "3.9.2", id="stray-suback"),
    pytest.param(h("B0 02 00 09"), "UNSUBACK for packet id 9", "3.11.2", id="stray-unsuback"),
]


@pytest.mark.parametrize(("data", "rule", "section"), VIOLATIONS)
@pytest.mark.parametrize("split", [False, True], ids=["one-read", "byte-by-byte"])
def test_violation_closes_with_the_rule_and_keeps_earlier_messages(
    data: bytes, rule: str, section: str, split: bool
) -> None:
    session = connected_session()
    good = Publish("a/good", b"before", qos=1, packet_id=5)
    stream = encode_publish("a/good", b"before", 1, 5) + data
    events: list[object] = []
    for chunk in [stream[i : i + 1] for i in range(len(stream))] if split else [stream]:
        events.extend(session.receive_data(chunk, 1.0))
        if events and isinstance(events[-1], ProtocolViolation):
            break
    assert events[0] == good, events  # the message before the bad frame is still delivered
    violation = events[-1]
    assert isinstance(violation, ProtocolViolation), events
    assert rule in violation.reason and f"section {section}" in violation.reason, violation
    assert session.state is State.CLOSED
    assert session.violations_in_a_row == 1


def test_a_connack_that_is_not_first_is_a_violation_before_connected() -> None:
    session = ClientSession(SessionConfig("hostile"))
    session.connect(0.0)
    [event] = session.receive_data(encode(Suback(1, [0])), 0.0)
    assert isinstance(event, ProtocolViolation) and "section 3.2" in event.reason


def test_garbage_in_the_same_read_as_connack() -> None:
    session = ClientSession(SessionConfig("hostile"))
    session.connect(0.0)
    events = session.receive_data(CONNACK + h("FF FF FF FF FF"), 0.0)
    assert events[0] == Connected(False, False)
    assert isinstance(events[1], ProtocolViolation) and "2.2" in events[1].reason


def test_the_limit_counts_violations_across_connections() -> None:
    session = ClientSession(SessionConfig("hostile", max_violations_in_a_row=3))
    for attempt in (1, 2):
        session.connect(0.0)
        events = session.receive_data(CONNACK + h("00 00"), 0.0)
        assert isinstance(events[-1], ProtocolViolation)
        assert session.violations_in_a_row == attempt
        session.connection_lost()
    session.connect(0.0)
    with pytest.raises(RepeatedProtocolViolation) as gave_up:
        session.receive_data(CONNACK + h("00 00"), 0.0)
    error = gave_up.value
    assert error.count == 3 and "reserved (section 2.2.1)" in error.reason
    assert "3 times in a row" in str(error) and "section 2.2.1" in str(error)
    assert session.state is State.CLOSED


def test_a_delivered_message_ends_a_run_of_violations() -> None:
    session = ClientSession(SessionConfig("hostile", max_violations_in_a_row=2))
    for _ in range(5):  # never gives up: every connection delivers something first
        session.connect(0.0)
        events = session.receive_data(CONNACK + encode_publish("t", b"m", 0, None), 0.0)
        assert session.violations_in_a_row == 0, events
        events = session.receive_data(h("00 00"), 0.0)
        assert isinstance(events[-1], ProtocolViolation)
        assert session.violations_in_a_row == 1
        session.connection_lost()


def test_a_suback_alone_does_not_end_a_run_of_violations() -> None:
    session = ClientSession(SessionConfig("hostile", max_violations_in_a_row=2))
    session.connect(0.0)
    session.receive_data(CONNACK + h("00 00"), 0.0)
    session.connection_lost()
    session.connect(0.0)
    session.receive_data(CONNACK, 0.0)
    session.subscribe([("t", 1)], 0.0)
    assert session.receive_data(encode(Suback(1, [1])), 0.0)[0].granted == [1]  # type: ignore[union-attr]
    with pytest.raises(RepeatedProtocolViolation):
        session.receive_data(h("00 00"), 0.0)


@pytest.mark.parametrize("bad", [0, -1])
def test_the_limit_must_be_positive(bad: int) -> None:
    with pytest.raises(ValueError, match="max_violations_in_a_row"):
        SessionConfig("c", max_violations_in_a_row=bad)


# ------------------------------------------------------------------------- packet id reuse


def test_qos2_id_reused_for_another_message_while_pending_is_a_violation() -> None:
    session = connected_session()
    first = Publish("a", b"one", qos=2, packet_id=7)
    other = Publish("a", b"two", qos=2, packet_id=7)
    events = session.receive_data(encode(first) + encode(other), 1.0)
    assert events[0] == first
    assert isinstance(events[1], ProtocolViolation)
    assert "reuses packet id 7" in events[1].reason and "section 2.3.1" in events[1].reason
    session.ack(first, 1.0)
    assert session.data_to_send() == b""  # nothing acknowledged on a closed connection


def test_qos2_id_reused_after_pubrec_before_pubcomp_is_a_violation() -> None:
    session = connected_session()
    first = Publish("a", b"one", qos=2, packet_id=7)
    assert session.receive_data(encode(first), 1.0) == [first]
    session.ack(first, 1.0)
    assert session.data_to_send() == encode(Pubrec(7))
    [event] = session.receive_data(encode(Publish("a", b"two", qos=2, packet_id=7)), 1.0)
    assert isinstance(event, ProtocolViolation) and "section 2.3.1" in event.reason


def test_qos2_resend_with_dup_while_pending_is_answered_not_delivered() -> None:
    session = connected_session()
    first = Publish("a", b"one", qos=2, packet_id=7)
    session.receive_data(encode(first), 1.0)
    session.ack(first, 1.0)
    session.data_to_send()
    assert session.receive_data(encode(Publish("a", b"one", 2, dup=True, packet_id=7)), 1.0) == []
    assert session.data_to_send() == encode(Pubrec(7))
    assert session.receive_data(encode(Pubrel(7)), 1.0) == [Released(7)]
    session.complete(7, 1.0)
    assert session.data_to_send() == encode(Pubcomp(7))
    # After PUBCOMP the id is free again: a new message with it is delivered.
    again = Publish("a", b"three", qos=2, packet_id=7)
    assert session.receive_data(encode(again), 1.0) == [again]


def test_qos1_id_reused_for_another_message_before_puback_is_a_violation() -> None:
    session = connected_session()
    first = Publish("a", b"one", qos=1, packet_id=3)
    events = session.receive_data(encode(first) + encode(Publish("b", b"x", 1, packet_id=3)), 1.0)
    assert events[0] == first
    assert isinstance(events[1], ProtocolViolation) and "section 2.3.1" in events[1].reason


def test_qos1_id_reused_after_puback_is_fine() -> None:
    session = connected_session()
    first = Publish("a", b"one", qos=1, packet_id=3)
    session.receive_data(encode(first), 1.0)
    session.ack(first, 1.0)
    assert session.data_to_send() == encode(Puback(3))
    second = Publish("b", b"two", qos=1, packet_id=3)
    assert session.receive_data(encode(second), 1.0) == [second]


def test_qos1_resends_sharing_an_id_are_each_acknowledged_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A broker with more than 65,535 messages in flight resends several with one id after a
    reconnect (all DUP=1): every one is delivered and gets its own PUBACK, so none stays
    unacknowledged at the broker (which would resend it on every later connection)."""
    session = ClientSession(SessionConfig("hostile"))
    session.connect(0.0)
    session.data_to_send()
    session.receive_data(encode(Connack(True, 0)), 0.0)  # resends come with a session
    resends = [Publish("a", bytes([n]), qos=1, dup=True, packet_id=9) for n in range(3)]
    other = Publish("b", b"x", qos=1, dup=True, packet_id=10)
    wire = b"".join(encode(p) for p in (resends[0], other, resends[1], resends[2]))
    assert session.receive_data(wire, 1.0) == [resends[0], other, resends[1], resends[2]]
    assert session.shared_id_resends == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "packet id 9" in warnings[0] and "2.3.1" in warnings[0]
    session.ack_many([resends[0], other, resends[1]], 1.0)
    assert session.data_to_send() == encode(Puback(9)) + encode(Puback(10)) + encode(Puback(9))
    session.ack(resends[2], 1.0)
    assert session.data_to_send() == encode(Puback(9))
    session.ack(resends[2], 1.0)  # acknowledged once only
    assert session.data_to_send() == b""
    fresh = Publish("c", b"new", qos=1, packet_id=9)  # the id is free again
    assert session.receive_data(encode(fresh), 1.0) == [fresh]


def test_pubrel_for_an_unknown_id_is_completed_not_a_violation() -> None:
    session = connected_session()
    assert session.receive_data(encode(Pubrel(42)), 1.0) == []
    assert session.data_to_send() == encode(Pubcomp(42))
    assert session.state is State.CONNECTED and session.violations_in_a_row == 0


# ------------------------------------------------------------------------- slow senders


def test_a_partial_frame_never_completes_a_packet_or_raises() -> None:
    session = connected_session(keep_alive=10)
    header = h("30 FF FF FF 7F")  # announces 268435455 bytes, the protocol maximum
    packets: list[Packet | object] = []
    for i, byte in enumerate(header + b"\x00\x01t" + b"x" * 200):
        packets.extend(session.receive_data(bytes([byte]), 1.0 + i * 0.01))
    assert packets == []
    assert session.state is State.CONNECTED


def test_a_lower_max_packet_size_refuses_an_oversized_announcement_at_once() -> None:
    session = connected_session(maximum_packet_size=1 + 2 + 1024)
    [event] = session.receive_data(h("30 81 08"), 1.0)  # 1025 bytes announced, none sent
    assert isinstance(event, ProtocolViolation)
    assert "exceeds the maximum of 1024" in event.reason
    assert "Maximum Packet Size of 1027 bytes" in event.reason
