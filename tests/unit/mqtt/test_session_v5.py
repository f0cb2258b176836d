"""ClientSession at protocol level 5: CONNECT properties, the broker's limits from CONNACK,
topic aliases, reason codes, server DISCONNECT and enhanced authentication (MQTT 5.0)."""

from __future__ import annotations

import pytest

from connector.mqtt.config import DEFAULT_TOPIC_ALIAS_MAXIMUM, SessionConfig
from connector.mqtt.encode import encode
from connector.mqtt.errors import (
    BadUsernameOrPassword,
    BrokerBusy,
    ConnectionRefused,
    InvalidArgument,
    LocalProtocolError,
)
from connector.mqtt.events import (
    Connected,
    Event,
    ProtocolViolation,
    PublishDone,
    ServerDisconnect,
    Subscribed,
)
from connector.mqtt.faults import BrokerFault
from connector.mqtt.negotiated import DEFAULT_MAXIMUM_PACKET_SIZE, SESSION_NEVER_EXPIRES
from connector.mqtt.packets import (
    Auth,
    Connack,
    Connect,
    Disconnect,
    Packet,
    ProtocolLevel,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Suback,
    Subscribe,
    subscription_options,
)
from connector.mqtt.properties import Properties
from connector.mqtt.receive_buffer import ReceiveBuffer
from connector.mqtt.session import ClientSession, State

V5 = ProtocolLevel.MQTT_5


def wire(*packets: Packet) -> bytes:
    return b"".join(encode(p, V5) for p in packets)


def sent(session: ClientSession) -> list[Packet]:
    return ReceiveBuffer(V5).feed(session.data_to_send())


def config(**kwargs: object) -> SessionConfig:
    kwargs.setdefault("client_id", "job")
    return SessionConfig(level=V5, **kwargs)  # type: ignore[arg-type]


def connect(
    session: ClientSession, props: Properties | None = None, code: int = 0, now: float = 0.0
) -> list[Event]:
    session.connect(now)
    assert isinstance(sent(session)[0], Connect)
    return session.receive_data(wire(Connack(False, code, props)), now)


def connected(props: Properties | None = None, **kwargs: object) -> ClientSession:
    session = ClientSession(config(**kwargs))
    events = connect(session, props)
    assert isinstance(events[0], Connected)
    return session


def test_connect_carries_the_session_settings_as_properties() -> None:
    session = ClientSession(
        config(
            receive_maximum=500,
            topic_alias_maximum=16,
            user_properties=[("job", "ingest"), ("job", "again")],
        )
    )
    session.connect(0.0)
    (packet,) = sent(session)
    assert isinstance(packet, Connect) and packet.protocol_level == 5
    props = packet.properties
    assert props is not None
    assert props.session_expiry_interval == SESSION_NEVER_EXPIRES  # persistent by default
    assert props.receive_maximum == 500
    assert props.topic_alias_maximum == 16
    assert props.maximum_packet_size == DEFAULT_MAXIMUM_PACKET_SIZE  # 16 MiB unless set
    assert props.user_properties == [("job", "ingest"), ("job", "again")]


def test_a_clean_session_expires_at_once_and_sends_no_expiry() -> None:
    assert DEFAULT_TOPIC_ALIAS_MAXIMUM == 0  # no aliases unless asked for (see its docstring)
    session = ClientSession(config(clean_session=True))
    session.connect(0.0)
    (packet,) = sent(session)
    assert isinstance(packet, Connect) and packet.properties is not None
    assert packet.properties.session_expiry_interval is None
    assert packet.properties.topic_alias_maximum is None


@pytest.mark.parametrize(
    ("name", "value"),
    [("receive_maximum", 10), ("session_expiry_interval", 5), ("topic_alias_maximum", 3)],
)
def test_mqtt5_settings_are_refused_below_level_5(name: str, value: int) -> None:
    with pytest.raises(InvalidArgument, match=f"{name} needs MQTT 5"):
        SessionConfig("job", level=ProtocolLevel.MQTT_3_1_1, **{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "value"),
    [("receive_maximum", 0), ("receive_maximum", 65_536), ("topic_alias_maximum", -1)],
)
def test_mqtt5_settings_out_of_range_are_refused(name: str, value: int) -> None:
    with pytest.raises(InvalidArgument, match=name):
        config(**{name: value})


def test_an_assigned_client_id_is_reused_on_reconnect() -> None:
    session = ClientSession(config(client_id=""))  # persistent: allowed at level 5
    events = connect(session, Properties(assigned_client_identifier="auto-17"))
    assert isinstance(events[0], Connected) and events[0].limits is not None
    assert session.client_id == "auto-17"
    session.connection_lost()
    session.connect(1.0)
    (packet,) = sent(session)
    assert isinstance(packet, Connect) and packet.client_id == "auto-17"


def test_the_server_keep_alive_replaces_ours() -> None:
    session = connected(Properties(server_keep_alive=10), keep_alive=60)
    assert session.keep_alive == 10
    assert session.next_deadline() == 10.0


def test_a_refused_connack_names_its_reason_code() -> None:
    session = ClientSession(config(username="u", password=b"secret"))
    with pytest.raises(BadUsernameOrPassword, match="0x86 Bad User Name or Password") as caught:
        connect(session, Properties(reason_string="token expired"), code=0x86)
    assert "token expired" in str(caught.value) and "secret" not in str(caught.value)
    assert session.state is State.CLOSED


def test_a_busy_broker_is_a_refusal_worth_retrying() -> None:
    with pytest.raises(BrokerBusy, match="0x97 Quota exceeded") as caught:
        connect(ClientSession(config()), code=0x97)
    assert caught.value.retryable


def test_another_server_is_named() -> None:
    with pytest.raises(ConnectionRefused, match=r"0x9C Use another server.*other:1883"):
        connect(ClientSession(config()), Properties(server_reference="other:1883"), code=0x9C)


def test_topic_aliases_are_set_then_resolved() -> None:
    session = connected(topic_alias_maximum=16)
    first = Publish("plant/a", b"1", 1, packet_id=1, properties=Properties(topic_alias=7))
    second = Publish("", b"2", 1, packet_id=2, properties=Properties(topic_alias=7))
    events = session.receive_data(wire(first, second), 1.0)
    assert [(e.topic, e.payload) for e in events if isinstance(e, Publish)] == [
        ("plant/a", b"1"),
        ("plant/a", b"2"),
    ]


def test_an_unknown_alias_ends_the_connection_with_0x82() -> None:
    session = connected(topic_alias_maximum=16)
    events = session.receive_data(
        wire(Publish("", b"x", 0, properties=Properties(topic_alias=3))), 1.0
    )
    assert isinstance(events[-1], ProtocolViolation) and "never set" in events[-1].reason
    (disconnect,) = sent(session)
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x82


def test_without_aliases_allowed_any_alias_is_above_the_maximum() -> None:
    session = connected()
    events = session.receive_data(
        wire(Publish("a/b", b"x", 0, properties=Properties(topic_alias=1))), 1.0
    )
    assert isinstance(events[-1], ProtocolViolation) and "Maximum 0" in events[-1].reason


def test_an_alias_above_our_maximum_ends_the_connection_with_0x94() -> None:
    session = connected(topic_alias_maximum=2)
    events = session.receive_data(
        wire(Publish("a/b", b"x", 0, properties=Properties(topic_alias=3))), 1.0
    )
    assert isinstance(events[-1], ProtocolViolation) and "0x94" in events[-1].reason
    (disconnect,) = sent(session)
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x94


def test_aliases_end_with_the_connection() -> None:
    session = connected(topic_alias_maximum=16)
    session.receive_data(wire(Publish("a/b", b"x", 0, properties=Properties(topic_alias=1))), 1)
    session.connection_lost()
    connect(session, now=2.0)
    events = session.receive_data(
        wire(Publish("", b"y", 0, properties=Properties(topic_alias=1))), 3
    )
    assert isinstance(events[-1], ProtocolViolation)


def test_a_malformed_frame_is_answered_with_disconnect_0x81() -> None:
    session = connected()
    events = session.receive_data(bytes.fromhex("40 03 0001 8f"), 1.0)  # PUBACK, reason 0x8F
    assert isinstance(events[-1], ProtocolViolation)
    (disconnect,) = sent(session)
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x81


@pytest.mark.parametrize(("kind", "code"), [(0x40, 0x01), (0x50, 0x02), (0x40, 0x05)])
def test_a_success_code_an_ack_may_not_carry_is_counted_and_taken(kind: int, code: int) -> None:
    """A PUBACK or PUBREC for our PUBLISH with a code below 0x80 that is not in its table
    ([MQTT-3.4.2-1], [MQTT-3.5.2-1]) ends the exchange as the success it says, counted as a
    broker fault; the connection stays."""
    session = connected()
    qos = 1 if kind == 0x40 else 2
    pid = session.publish("t", b"x", qos, 1.0)
    sent(session)
    assert pid is not None
    events = session.receive_data(bytes([kind, 3, 0, pid, code]), 2.0)
    assert session.faults[BrokerFault.ACK_REASON_NOT_ALLOWED] == 1
    assert session.state is State.CONNECTED
    if qos == 1:
        assert events == [PublishDone(pid, code, None)]
    else:
        assert events == [] and [type(p) for p in sent(session)] == [Pubrel]
    assert not [e for e in events if isinstance(e, ProtocolViolation)]


def test_a_failure_code_an_ack_may_not_carry_is_a_protocol_violation() -> None:
    session = connected()
    pid = session.publish("t", b"x", 2, 1.0)
    sent(session)
    assert pid is not None
    events = session.receive_data(bytes([0x50, 3, 0, pid, 0x8F]), 2.0)  # PUBREC 0x8F
    assert isinstance(events[-1], ProtocolViolation)
    assert "not one the PUBREC packet may carry" in events[-1].reason


def test_messages_beyond_our_receive_maximum_are_counted_and_delivered() -> None:
    session = connected(receive_maximum=2)
    messages = [Publish("t", b"%d" % i, 1, packet_id=i + 1) for i in range(3)]
    events = session.receive_data(wire(*messages), 1.0)
    assert [e for e in events if isinstance(e, Publish)] == messages
    assert session.faults[BrokerFault.RECEIVE_MAXIMUM_EXCEEDED] == 1
    session.ack_many(messages[:2], 1.0)
    assert len(sent(session)) == 2
    session.receive_data(wire(Publish("t", b"4", 1, packet_id=4)), 2.0)
    assert session.faults[BrokerFault.RECEIVE_MAXIMUM_EXCEEDED] == 1  # room again


def test_user_properties_reach_the_caller_in_wire_order() -> None:
    session = connected()
    props = Properties(content_type="application/json", user_properties=[("k", "1"), ("k", "2")])
    (message,) = session.receive_data(
        wire(Publish("t", b"{}", 1, packet_id=9, properties=props)), 1
    )
    assert isinstance(message, Publish) and message.properties == props


def test_a_server_disconnect_is_an_event_naming_its_reason() -> None:
    session = connected()
    props = Properties(reason_string="maintenance")
    (event,) = session.receive_data(wire(Disconnect(0x8B, props)), 1.0)
    assert isinstance(event, ServerDisconnect) and event.name == "0x8B Server shutting down"
    assert event.properties == props and session.state is State.CLOSED


def test_the_broker_receive_maximum_bounds_our_publishes() -> None:
    session = connected(Properties(receive_maximum=2))
    assert session.send_quota == 2
    first = session.publish("t", b"1", 1, 1.0)
    session.publish("t", b"2", 2, 1.0)
    assert session.send_quota == 0
    with pytest.raises(LocalProtocolError, match="Receive Maximum"):
        session.publish("t", b"3", 1, 1.0)
    session.publish("t", b"qos0", 0, 1.0)  # QoS 0 is not counted (section 4.9)
    assert first is not None
    (done,) = session.receive_data(wire(Puback(first)), 2.0)
    assert isinstance(done, PublishDone) and session.send_quota == 1


def test_the_broker_limits_refuse_a_publish_before_anything_is_sent() -> None:
    session = connected(Properties(maximum_qos=1, retain_available=0, maximum_packet_size=64))
    with pytest.raises(InvalidArgument, match="up to QoS 1"):
        session.publish("t", b"x", 2, 1.0)
    with pytest.raises(InvalidArgument, match="retained"):
        session.publish("t", b"x", 0, 1.0, retain=True)
    with pytest.raises(InvalidArgument, match="Maximum Packet Size of 64"):
        session.publish("t", b"x" * 100, 1, 1.0)
    assert session.outbound_in_flight == 0 and sent(session) == []


def test_refused_publishes_finish_with_their_reason_code() -> None:
    session = connected()
    one = session.publish("t", b"1", 1, 1.0)
    two = session.publish("t", b"2", 2, 1.0)
    sent(session)
    assert one is not None and two is not None
    events = session.receive_data(wire(Puback(one, 0x87), Pubrec(two, 0x97)), 2.0)
    assert events == [
        PublishDone(one, 0x87, "PUBACK 0x87 Not authorized for a PUBLISH to 't'"),
        PublishDone(two, 0x97, "PUBREC 0x97 Quota exceeded for a PUBLISH to 't'"),
    ]
    assert sent(session) == []  # no PUBREL after a refusing PUBREC (section 4.3.3)
    assert session.outbound_in_flight == 0


def test_a_pubcomp_for_an_id_the_broker_forgot_is_no_refusal() -> None:
    """After a new session the broker may answer a resent PUBREL with PUBCOMP 0x92: it had
    taken the message (its PUBREC was a success), so nothing was refused."""
    session = connected()
    pid = session.publish("t", b"2", 2, 1.0)
    sent(session)
    assert pid is not None
    assert session.receive_data(wire(Pubrec(pid, 0)), 2.0) == []
    events = session.receive_data(wire(Pubcomp(pid, 0x92)), 3.0)
    assert events == [PublishDone(pid, 0x92, None)]
    assert session.outbound_in_flight == 0


def test_publish_properties_survive_a_resend() -> None:
    session = connected()
    props = Properties(content_type="text/plain", user_properties=[("a", "b")])
    pid = session.publish("t", b"x", 1, 1.0, properties=props)
    sent(session)
    session.connection_lost()
    connect(session, now=2.0)
    resends: list[Publish | None] = [p for p in sent(session) if isinstance(p, Publish)]
    (resend,) = resends or [None]
    assert isinstance(resend, Publish) and resend.dup and resend.packet_id == pid
    assert resend.properties == props


def test_subscription_options_and_refusals_by_reason_code() -> None:
    session = connected()
    options = subscription_options(1, no_local=True, retain_handling=2)
    pid = session.subscribe(
        [("a/#", options), ("b", 2)], 1.0, Properties(subscription_identifiers=[5])
    )
    (packet,) = sent(session)
    assert isinstance(packet, Subscribe) and packet.subscriptions == [("a/#", options), ("b", 2)]
    assert packet.properties is not None and packet.properties.subscription_identifiers == [5]
    assert session.max_qos == 2
    (event,) = session.receive_data(wire(Suback(pid, [1, 0x97])), 2.0)
    assert isinstance(event, Subscribed) and event.refused == ["b"]
    assert event.reasons() == ["b (0x97 Quota exceeded)"]


class TokenExchange:
    method = "SCRAM-SHA-1"

    def __init__(self) -> None:
        self.seen: list[bytes | None] = []

    def initial_data(self) -> bytes | None:
        return b"client-first"

    def step(self, data: bytes | None) -> bytes | None:
        self.seen.append(data)
        return b"client-final"


def test_enhanced_authentication_is_driven_by_the_authenticator() -> None:
    authenticator = TokenExchange()
    session = ClientSession(config(authenticator=authenticator))
    session.connect(0.0)
    (packet,) = sent(session)
    assert isinstance(packet, Connect) and packet.properties is not None
    assert packet.properties.authentication_method == "SCRAM-SHA-1"
    assert packet.properties.authentication_data == b"client-first"
    challenge = Properties(authentication_method="SCRAM-SHA-1", authentication_data=b"server-first")
    assert session.receive_data(wire(Auth(0x18, challenge)), 0.5) == []
    (answer,) = sent(session)
    assert isinstance(answer, Auth) and answer.reason_code == 0x18
    assert (
        answer.properties is not None and answer.properties.authentication_data == b"client-final"
    )
    assert authenticator.seen == [b"server-first"]
    events = session.receive_data(
        wire(Connack(False, 0, Properties(authentication_method="SCRAM-SHA-1"))), 1.0
    )
    assert isinstance(events[0], Connected) and session.state is State.CONNECTED


def test_auth_for_another_method_is_a_violation() -> None:
    session = ClientSession(config(authenticator=TokenExchange()))
    session.connect(0.0)
    sent(session)
    challenge = Properties(authentication_method="OTHER", authentication_data=b"x")
    (event,) = session.receive_data(wire(Auth(0x18, challenge)), 0.5)
    assert isinstance(event, ProtocolViolation) and "OTHER" in event.reason


def test_a_persistent_session_that_expires_at_once_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="end the session with every connection"):
        config(clean_session=False, session_expiry_interval=0)
    assert config(clean_session=True, session_expiry_interval=0).expiry == 0
    assert config(clean_session=False, session_expiry_interval=60).expiry == 60
