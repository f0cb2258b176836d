"""What the session does with a CONNACK's Session Present flag and with packets above its
Maximum Packet Size, at levels 3.1.1 and 5, driven with byte vectors: a Session Present 1 that
answers a clean start closes the connection (MQTT 5.0 [MQTT-3.2.2-4]); a Session Present 0 that
answers a persistent session discards the session state ([MQTT-3.2.2-5]); a PUBLISH above the
Maximum Packet Size is refused with DISCONNECT 0x95 and never acknowledged (section
3.1.2.11.4)."""

from __future__ import annotations

import re

import pytest

from connector.mqtt.config import SessionConfig
from connector.mqtt.encode import encode, encode_publish
from connector.mqtt.errors import InvalidArgument, RepeatedProtocolViolation
from connector.mqtt.events import Connected, ProtocolViolation
from connector.mqtt.negotiated import (
    DEFAULT_MAXIMUM_PACKET_SIZE,
    PROTOCOL_MAXIMUM_PACKET_SIZE,
    largest_remaining_length,
)
from connector.mqtt.packets import (
    Connack,
    Connect,
    Disconnect,
    Packet,
    ProtocolLevel,
    Puback,
    Publish,
    Pubrec,
)
from connector.mqtt.receive_buffer import ReceiveBuffer
from connector.mqtt.session import ClientSession, State

V4 = ProtocolLevel.MQTT_3_1_1
V5 = ProtocolLevel.MQTT_5
LEVELS = pytest.mark.parametrize("level", [V4, V5], ids=["3.1.1", "5"])


def h(text: str) -> bytes:
    return bytes.fromhex(text)


def sent(session: ClientSession) -> list[Packet]:
    return ReceiveBuffer(session.config.level).feed(session.data_to_send())


def connecting(level: int, **config: object) -> ClientSession:
    session = ClientSession(SessionConfig("rules", level=level, **config))  # type: ignore[arg-type]
    session.connect(0.0)
    [packet] = sent(session)
    assert isinstance(packet, Connect)
    return session


def connack(level: int, session_present: bool) -> bytes:
    return encode(Connack(session_present, 0), level)


# ---------------------------------------------------------------------------- Session Present


def test_session_present_on_a_clean_start_is_closed_with_disconnect_0x82_at_level_5() -> None:
    session = connecting(V5, clean_session=True)
    [event] = session.receive_data(connack(V5, True), 1.0)
    assert isinstance(event, ProtocolViolation)
    assert "Session Present 1" in event.reason and "MQTT-3.2.2-4" in event.reason
    assert session.state is State.CLOSED
    assert sent(session) == [Disconnect(0x82)]  # said why before closing (section 4.13.2)
    assert session.violations_in_a_row == 1


def test_session_present_on_a_clean_session_is_closed_at_3_1_1() -> None:
    """The broker breaks [MQTT-3.2.2-1] (it must answer CleanSession 1 with 0): the client
    holds no session and closes as at level 5; 3.1.1 has no DISCONNECT from the client."""
    session = connecting(V4, clean_session=True)
    [event] = session.receive_data(connack(V4, True), 1.0)
    assert isinstance(event, ProtocolViolation) and "MQTT-3.2.2-1" in event.reason
    assert session.state is State.CLOSED
    assert session.data_to_send() == b""


@LEVELS
def test_session_present_on_a_clean_start_never_delivers_what_came_with_it(level: int) -> None:
    session = connecting(level, clean_session=True)
    stale = encode(Publish("t", b"old", qos=1, packet_id=3), level)
    events = session.receive_data(connack(level, True) + stale, 1.0)
    assert [type(e) for e in events] == [ProtocolViolation]
    assert not any(isinstance(p, Puback) for p in sent(session))


@LEVELS
def test_a_clean_start_that_keeps_answering_session_present_1_is_given_up(
    level: ProtocolLevel,
) -> None:
    session = ClientSession(
        SessionConfig("rules", level=level, clean_session=True, max_violations_in_a_row=3)
    )
    for attempt in range(2):
        session.connect(float(attempt))
        session.data_to_send()
        [event] = session.receive_data(connack(level, True), float(attempt))
        assert isinstance(event, ProtocolViolation)
        session.connection_lost()
    session.connect(2.0)
    with pytest.raises(RepeatedProtocolViolation, match="Session Present 1") as given_up:
        session.receive_data(connack(level, True), 2.0)
    assert given_up.value.code == 0x82


@LEVELS
def test_session_present_on_a_persistent_session_is_the_session_resumed(level: int) -> None:
    session = connecting(level, clean_session=False)
    [event] = session.receive_data(connack(level, True), 1.0)
    assert isinstance(event, Connected) and event.session_present
    assert session.state is State.CONNECTED


@LEVELS
def test_session_present_0_on_a_persistent_session_discards_its_state(level: int) -> None:
    """[MQTT-3.2.2-5]: a pending QoS 2 exchange and a QoS 1 message whose PUBACK was never
    written are dropped, the loss is reported, and their ids name new messages again."""
    session = connecting(level, clean_session=False)
    assert isinstance(session.receive_data(connack(level, True), 1.0)[0], Connected)
    qos2 = Publish("t", b"stored", qos=2, packet_id=7)
    qos1 = Publish("t", b"kept", qos=1, packet_id=8)
    session.receive_data(encode(qos2, level) + encode(qos1, level), 2.0)
    session.connection_lost()
    session.ack_many([qos2, qos1], 3.0)  # stored after the connection was gone: none written
    assert session.export_qos2_pending() == {7}

    session.connect(4.0)
    session.data_to_send()
    [connected] = session.receive_data(connack(level, False), 5.0)
    assert isinstance(connected, Connected)
    assert (connected.session_present, connected.session_lost) == (False, True)
    assert connected.forgotten_qos2 == (7,)  # the caller releases it in its store
    assert session.export_qos2_pending() == set()
    again = [
        Publish("t", b"new 7", qos=2, packet_id=7),
        Publish("t", b"kept", qos=1, packet_id=8),  # same content: still a new message
    ]
    assert session.receive_data(b"".join(encode(p, level) for p in again), 6.0) == again


# ---------------------------------------------------------------------------- Maximum Packet Size


@pytest.mark.parametrize(
    "size", [64, 127, 129, 130, 131, 16_386, 16_387, 2_097_155, 2_097_156, 16 << 20]
)
def test_largest_remaining_length_fills_the_packet_size_exactly_or_to_one_byte_less(
    size: int,
) -> None:
    length = largest_remaining_length(size)
    whole = len(encode_publish("t", b"x" * (length - 3), 0, None))  # topic length 2 + "t"
    assert whole <= size
    assert len(encode_publish("t", b"x" * (length - 2), 0, None)) > size


def test_largest_remaining_length_of_the_protocol_maximum_is_the_protocol_maximum() -> None:
    assert largest_remaining_length(PROTOCOL_MAXIMUM_PACKET_SIZE) == 268_435_455


def test_the_maximum_packet_size_defaults_to_16_mib_at_level_5_only() -> None:
    assert SessionConfig("a", level=V5).packet_limit == DEFAULT_MAXIMUM_PACKET_SIZE == 16 << 20
    assert SessionConfig("a", level=V4).packet_limit == PROTOCOL_MAXIMUM_PACKET_SIZE
    assert SessionConfig("a", level=V4, maximum_packet_size=1000).packet_limit == 1000


@pytest.mark.parametrize("bad", [63, 0, PROTOCOL_MAXIMUM_PACKET_SIZE + 1])
def test_a_maximum_packet_size_out_of_range_is_refused_naming_it(bad: int) -> None:
    expected = f"maximum_packet_size must be 64..268435460, got {bad}"
    with pytest.raises(InvalidArgument, match=re.escape(expected)):
        SessionConfig("a", level=V5, maximum_packet_size=bad)


def test_connect_at_level_5_sends_the_maximum_packet_size_in_force() -> None:
    session = ClientSession(SessionConfig("a", level=V5, maximum_packet_size=4096))
    session.connect(0.0)
    [packet] = sent(session)
    assert isinstance(packet, Connect) and packet.properties is not None
    assert packet.properties.maximum_packet_size == 4096


@LEVELS
@pytest.mark.parametrize("qos", [1, 2])
def test_a_publish_of_exactly_the_maximum_is_taken_and_one_byte_more_is_refused(
    level: int, qos: int
) -> None:
    limit = 200
    session = connecting(level, maximum_packet_size=limit)
    session.receive_data(connack(level, False), 0.0)
    sizes = {
        len(encode(Publish("t", b"f" * n, qos=qos, packet_id=1), level)): n for n in range(250)
    }
    fits = Publish("t", b"f" * sizes[limit], qos=qos, packet_id=1)
    [message] = session.receive_data(encode(fits, level), 1.0)
    assert isinstance(message, Publish)
    session.ack(message, 1.0)
    assert sent(session) == [Puback(1) if qos == 1 else Pubrec(1)]

    too_big = Publish("t", b"g" * (sizes[limit] + 1), qos=qos, packet_id=2)
    [event] = session.receive_data(encode(too_big, level), 2.0)
    assert isinstance(event, ProtocolViolation)
    assert event.reason.startswith("0x95 Packet too large")
    assert f"Maximum Packet Size of {limit} bytes" in event.reason
    assert session.state is State.CLOSED
    # Nothing acknowledges it; level 5 says why (MQTT 5.0 section 3.1.2.11.4, 4.13.2).
    assert sent(session) == ([Disconnect(0x95)] if level == V5 else [])


def test_a_publish_announced_above_the_limit_is_refused_before_its_bytes_arrive() -> None:
    session = connecting(V5)
    session.receive_data(connack(V5, False), 0.0)
    header = h("32 80 80 80 08")  # a QoS 1 PUBLISH of 16 MiB + 5 bytes, announced
    [event] = session.receive_data(header, 1.0)
    assert isinstance(event, ProtocolViolation) and "0x95" in event.reason
    assert sent(session) == [Disconnect(0x95)]


def test_oversized_packets_on_every_connection_give_up_with_code_0x95() -> None:
    session = ClientSession(
        SessionConfig("a", level=V5, maximum_packet_size=100, max_violations_in_a_row=2)
    )
    big = encode(Publish("t", b"z" * 200, qos=1, packet_id=1), V5)
    session.connect(0.0)
    session.receive_data(connack(V5, False), 0.0)
    assert isinstance(session.receive_data(big, 1.0)[0], ProtocolViolation)
    session.connection_lost()
    session.connect(2.0)
    session.receive_data(connack(V5, True), 2.0)
    with pytest.raises(RepeatedProtocolViolation, match="Packet too large") as given_up:
        session.receive_data(big, 3.0)
    assert given_up.value.code == 0x95


# ---------------------------------------------------------------------------- the transport


def test_transport_violations_count_toward_giving_up_and_progress_resets_them() -> None:
    session = ClientSession(SessionConfig("a", level=V4, max_violations_in_a_row=2))
    session.connect(0.0)
    session.receive_data(connack(V4, False), 0.0)
    session.transport_violation("WebSocket: a text frame")
    assert session.state is State.CLOSED and session.violations_in_a_row == 1
    session.connection_lost()
    session.connect(1.0)
    session.receive_data(connack(V4, True), 1.0)
    message = Publish("t", b"progress", qos=1, packet_id=1)
    assert session.receive_data(encode(message, V4), 2.0) == [message]
    assert session.violations_in_a_row == 0
    session.transport_violation("WebSocket: a text frame")
    session.connection_lost()
    session.connect(3.0)
    session.receive_data(connack(V4, True), 3.0)
    with pytest.raises(RepeatedProtocolViolation, match="WebSocket: broken framing"):
        session.transport_violation("WebSocket: broken framing")
