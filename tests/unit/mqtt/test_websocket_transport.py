"""MQTT over WebSocket (``connector.mqtt.websocket``) against scripted WebSocket servers on
127.0.0.1, built with wsproto's server side, so that every framing case is exact.

Rules (MQTT 3.1.1 and 5.0 section 6; RFC 6455): the client offers the subprotocol ``mqtt`` and
the server must select it; each write of the driver is one binary message; the bytes of binary
messages are one stream whatever their framing (several packets in a message, a packet across
messages and across the frames of a fragmented message); a text frame is a broker fault
(Close 1003, ``WebSocketViolation``: a ConnectionLost and a RemoteProtocolError); a Close frame ends
the connection with its code and reason in the error; pings get pongs. A refused upgrade is a
``WebSocketRefused`` (a ConnectionRefused, not retried) unless a later attempt may pass (5xx:
``BrokerUnreachable``, retried); no error message shows the URL's query.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from connector.mqtt.config import SessionConfig
from connector.mqtt.driver import MqttClient, Read
from connector.mqtt.errors import (
    BrokerUnreachable,
    ConnectionLost,
    ConnectionRefused,
    RemoteProtocolError,
    RepeatedProtocolViolation,
    WebSocketRefused,
    WebSocketViolation,
)
from connector.mqtt.websocket import FrameViolation, WebSocketStream
from tests.support.waiting import wait_until

TIMEOUT = 5.0
SECRET = "X-Amz-Signature=0123456789abcdef"
CONNACK = b"\x20\x02\x00\x00"


def publish(topic: str, payload: bytes, packet_id: int | None = None) -> bytes:
    """A PUBLISH packet: QoS 0 without ``packet_id``, QoS 1 with it."""
    body = struct.pack("!H", len(topic)) + topic.encode()
    header = 0x30
    if packet_id is not None:
        header |= 0x02
        body += struct.pack("!H", packet_id)
    body += payload
    length = len(body)
    encoded = bytearray()
    while True:
        byte, length = length % 128, length // 128
        encoded.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([header]) + bytes(encoded) + body


class ServerSide:
    """The server's end of one WebSocket connection, for a test's script."""

    def __init__(self, conn: socket.socket, ws: WSConnection) -> None:
        self.conn = conn
        self.ws = ws
        self.messages: list[bytes] = []
        """The client's binary messages, whole."""
        self.partial = b""
        self.stream = b""
        self.events: list[object] = []

    def send(self, event: object) -> None:
        self.conn.sendall(self.ws.send(event))  # type: ignore[arg-type]

    def send_bytes(self, data: bytes, *, finished: bool = True) -> None:
        self.send(BytesMessage(data=data, message_finished=finished))

    def _pump(self) -> None:
        data = self.conn.recv(65536)
        self.ws.receive_data(data or None)
        for event in self.ws.events():
            self.events.append(event)
            if isinstance(event, BytesMessage):
                self.partial += bytes(event.data)
                if event.message_finished:
                    self.messages.append(self.partial)
                    self.stream += self.partial
                    self.partial = b""

    def read_packet(self) -> bytes:
        """The client's next MQTT packet (whole)."""
        while True:
            if len(self.stream) >= 2:
                length, shift, index = 0, 0, 1
                while index < len(self.stream):
                    byte = self.stream[index]
                    length |= (byte & 0x7F) << shift
                    shift += 7
                    index += 1
                    if not byte & 0x80:
                        if len(self.stream) >= index + length:
                            packet = self.stream[: index + length]
                            self.stream = self.stream[index + length :]
                            return packet
                        break
            self._pump()

    def wait_for(self, kind: type, timeout: float = TIMEOUT) -> object:
        """The client's first event of ``kind`` (Pong, CloseConnection, ...)."""
        self.conn.settimeout(timeout)
        while True:
            found = next((e for e in self.events if isinstance(e, kind)), None)
            if found is not None:
                return found
            self._pump()

    def connack_and_suback(self) -> None:
        """Answer CONNECT and, when it comes, SUBSCRIBE."""
        assert self.read_packet()[0] == 0x10
        self.conn.sendall(self.ws.send(BytesMessage(data=CONNACK)))
        subscribe = self.read_packet()
        assert subscribe[0] == 0x82
        packet_id = subscribe[2:4]
        self.conn.sendall(self.ws.send(BytesMessage(data=b"\x90\x03" + packet_id + b"\x01")))


Script = Callable[[ServerSide], None]


@dataclass
class FakeBroker:
    """A WebSocket server on 127.0.0.1 that serves one connection after the other:
    ``handshake`` answers the upgrade request (default: accept with ``mqtt``), or
    ``raw_answer`` is sent instead of any HTTP; then ``script`` runs."""

    script: Script | None = None
    handshake: Callable[[WSConnection, Request], bytes] | None = None
    raw_answer: bytes | None = None
    requests: list[Request] = field(default_factory=list)
    side: ServerSide | None = None
    error: BaseException | None = None

    def serve(self, server: socket.socket, stop: threading.Event) -> None:
        server.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(TIMEOUT)
                try:
                    self._serve(conn)
                except BaseException as exc:  # surfaced by the test
                    self.error = exc
                    return

    def _serve(self, conn: socket.socket) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        request = None
        while request is None:
            data = conn.recv(65536)
            if not data:
                return
            if self.raw_answer is not None:
                conn.sendall(self.raw_answer)
                return
            ws.receive_data(data)
            request = next((e for e in ws.events() if isinstance(e, Request)), None)
        self.requests.append(request)
        if self.handshake is not None:
            conn.sendall(self.handshake(ws, request))
        else:
            conn.sendall(ws.send(AcceptConnection(subprotocol="mqtt")))
        if ws.connection is None or self.script is None:
            return
        self.side = ServerSide(conn, ws)
        self.script(self.side)
        # Keep the connection until the client closes it.
        with suppress(OSError):
            while conn.recv(65536):
                pass


@contextmanager
def fake_broker(broker: FakeBroker) -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    thread = threading.Thread(target=broker.serve, args=(server, stop), daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(TIMEOUT)
        server.close()
    if broker.error is not None:
        raise broker.error


def client(url: str, *, subscribe: bool = True) -> MqttClient:
    subscriptions = [("t/#", 1)] if subscribe else []
    return MqttClient(url, SessionConfig("ws-unit"), subscriptions, connect_timeout=TIMEOUT)


def poll_messages(mqtt: MqttClient, count: int) -> list[tuple[str, bytes]]:
    got: list[tuple[str, bytes]] = []

    def arrived() -> bool:
        read = mqtt.poll(0.05)
        got.extend((m.topic, m.payload) for m in read.messages)
        mqtt.acknowledge(read.messages, read.released)
        return len(got) >= count

    wait_until(arrived, TIMEOUT, interval=0, message=lambda: f"got {got}")
    return got


# --------------------------------------------------------------------------------- framing


def test_the_handshake_offers_mqtt_with_host_path_and_query() -> None:
    broker = FakeBroker(script=ServerSide.connack_and_suback)
    with fake_broker(broker) as port, client(f"ws://127.0.0.1:{port}/ws/v1?{SECRET}") as mqtt:
        mqtt.connect()
    [request] = broker.requests
    assert request.subprotocols == ["mqtt"]
    assert request.host == f"127.0.0.1:{port}"
    assert request.target == f"/ws/v1?{SECRET}"
    assert str(mqtt.broker) == f"ws://127.0.0.1:{port}/ws/v1"


def test_every_write_is_one_binary_message() -> None:
    def script(side: ServerSide) -> None:
        side.connack_and_suback()
        side.send_bytes(publish("t/a", b"one", 7))
        assert side.read_packet() == b"\x40\x02\x00\x07"  # PUBACK

    broker = FakeBroker(script=script)
    with fake_broker(broker) as port, client(f"ws://127.0.0.1:{port}") as mqtt:
        mqtt.connect()
        assert poll_messages(mqtt, 1) == [("t/a", b"one")]
        wait_until(lambda: broker.side is not None and len(broker.side.messages) >= 3, TIMEOUT)
    assert broker.side is not None
    connect, subscribe, puback = broker.side.messages[:3]
    assert (connect[0], subscribe[0], puback) == (0x10, 0x82, b"\x40\x02\x00\x07")
    assert not [e for e in broker.side.events if isinstance(e, TextMessage)]


def test_packets_arrive_whatever_the_framing_and_pings_get_pongs() -> None:
    """Two packets and half a third in one message, the rest of it in a message of two
    frames with a ping between them (control frames may interleave, RFC 6455 section 5.4)."""
    big = publish("t/c", bytes(range(256)) * 40)
    middle = len(big) // 2

    def script(side: ServerSide) -> None:
        side.connack_and_suback()
        side.send_bytes(publish("t/a", b"first") + publish("t/b", b"second") + big[:100])
        side.send_bytes(big[100:middle], finished=False)
        side.send(Ping(payload=b"are you there"))
        side.send_bytes(big[middle:])
        pong = side.wait_for(Pong)
        assert isinstance(pong, Pong) and pong.payload == b"are you there"

    broker = FakeBroker(script=script)
    with fake_broker(broker) as port, client(f"ws://127.0.0.1:{port}") as mqtt:
        mqtt.connect()
        got = poll_messages(mqtt, 3)
    assert got == [("t/a", b"first"), ("t/b", b"second"), ("t/c", bytes(range(256)) * 40)]


def test_a_text_frame_is_a_broker_fault_closed_with_1003() -> None:
    def script(side: ServerSide) -> None:
        side.read_packet()  # CONNECT
        side.send(TextMessage(data="not MQTT"))
        close = side.wait_for(CloseConnection)
        assert isinstance(close, CloseConnection) and close.code == 1003

    broker = FakeBroker(script=script)
    with fake_broker(broker) as port:
        mqtt = client(f"ws://127.0.0.1:{port}")
        with pytest.raises(WebSocketViolation) as violation:
            mqtt.connect()
    assert isinstance(violation.value, ConnectionLost)
    assert isinstance(violation.value, RemoteProtocolError)
    assert "text frame" in str(violation.value) and "MQTT-6.0.0-1" in str(violation.value)
    assert not mqtt.connected


def test_text_frames_on_every_connection_give_up_like_tcp_violations() -> None:
    """Each WebSocket fault counts toward ``max_violations_in_a_row``, as a violation in the
    MQTT bytes does: a broker that sends a text frame after every CONNACK is given up
    (RepeatedProtocolViolation naming the WebSocket rule) instead of reconnected forever."""

    def script(side: ServerSide) -> None:
        side.connack_and_suback()
        side.send(TextMessage(data="not MQTT"))

    broker = FakeBroker(script=script)
    with fake_broker(broker) as port:
        mqtt = MqttClient(
            f"ws://127.0.0.1:{port}",
            SessionConfig("ws-unit", max_violations_in_a_row=3),
            [("t/#", 1)],
            connect_timeout=TIMEOUT,
        )
        mqtt.reconnect_policy.initial = mqtt.reconnect_policy.maximum = 0.01
        with pytest.raises(RepeatedProtocolViolation) as given_up:
            wait_until(lambda: mqtt.poll(0.05) and False, TIMEOUT, interval=0)
        mqtt.close()
    assert given_up.value.count == 3
    assert "WebSocket" in given_up.value.reason and "MQTT-6.0.0-1" in given_up.value.reason
    assert f"127.0.0.1:{port}" in str(given_up.value)
    assert len(broker.requests) == 3


def test_a_close_frame_is_a_lost_connection_naming_code_and_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def script(side: ServerSide) -> None:
        side.connack_and_suback()
        side.send_bytes(publish("t/a", b"last words"))
        side.send(CloseConnection(code=1001, reason="server restarting"))
        answer = side.wait_for(CloseConnection)
        assert isinstance(answer, CloseConnection) and answer.code == 1001

    broker = FakeBroker(script=script)
    with fake_broker(broker) as port:
        mqtt = client(f"ws://127.0.0.1:{port}")
        mqtt.reconnect_policy.initial = 60.0  # no reconnect within the test
        mqtt.connect()
        assert poll_messages(mqtt, 1) == [("t/a", b"last words")]
        with caplog.at_level(logging.WARNING, logger="connector.mqtt.driver"):
            wait_until(lambda: not mqtt.poll(0.05).messages and not mqtt.connected, TIMEOUT)
    assert "close code 1001, going away: 'server restarting'" in caplog.text


def test_acknowledging_what_came_with_a_close_is_a_lost_connection_not_a_crash() -> None:
    """Data and the broker's Close in one read: the messages are returned, and their
    acknowledgement finds the connection closing (nothing sent: the broker redelivers)."""

    def script(side: ServerSide) -> None:
        side.connack_and_suback()
        data = side.ws.send(BytesMessage(data=publish("t/a", b"acked?", 3)))
        side.conn.sendall(data + side.ws.send(CloseConnection(code=1001)))
        side.wait_for(CloseConnection)

    broker = FakeBroker(script=script)
    with fake_broker(broker) as port:
        mqtt = client(f"ws://127.0.0.1:{port}")
        mqtt.reconnect_policy.initial = 60.0
        mqtt.connect()
        reads: list[Read] = []

        def arrived() -> bool:
            reads.append(mqtt.poll(0.05))
            return bool(reads[-1].messages)

        wait_until(arrived, TIMEOUT, interval=0)
        read = reads[-1]
        mqtt.acknowledge(read.messages, read.released)  # no exception
        assert not mqtt.connected
    assert [m.payload for m in read.messages] == [b"acked?"]


def test_disconnect_sends_disconnect_then_a_normal_close() -> None:
    def script(side: ServerSide) -> None:
        side.connack_and_suback()
        assert side.read_packet() == b"\xe0\x00"
        close = side.wait_for(CloseConnection)
        assert isinstance(close, CloseConnection) and close.code == 1000
        side.send(close.response())

    broker = FakeBroker(script=script)
    with fake_broker(broker) as port:
        mqtt = client(f"ws://127.0.0.1:{port}")
        mqtt.connect()
        mqtt.disconnect()


# ------------------------------------------------------------------------------ handshake


def reject(status: int) -> Callable[[WSConnection, Request], bytes]:
    def answer(ws: WSConnection, request: Request) -> bytes:
        head = ws.send(RejectConnection(status_code=status, has_body=True))
        return head + ws.send(RejectData(data=f"no: {request.target}".encode()))

    return answer


def test_a_refused_upgrade_names_the_url_and_status_not_the_query() -> None:
    broker = FakeBroker(handshake=reject(404))
    with fake_broker(broker) as port:
        mqtt = client(f"ws://127.0.0.1:{port}/wrong?{SECRET}")
        with pytest.raises(WebSocketRefused) as refused:
            mqtt.poll(TIMEOUT)  # not retried: a ConnectionRefused propagates
    message = str(refused.value)
    assert isinstance(refused.value, ConnectionRefused)
    assert refused.value.status == 404
    assert f"ws://127.0.0.1:{port}/wrong" in message and "HTTP 404 Not Found" in message
    assert "check the path" in message
    assert SECRET not in message and "0123456789abcdef" not in repr(mqtt.broker)


def test_a_server_error_is_unreachable_and_retried() -> None:
    broker = FakeBroker(handshake=reject(503))
    with fake_broker(broker) as port:
        mqtt = client(f"ws://127.0.0.1:{port}")
        with pytest.raises(BrokerUnreachable, match="HTTP 503 Service Unavailable"):
            mqtt.connect()
        assert mqtt.poll(0.2).messages == []  # poll retries instead of raising


def accept_without_subprotocol(ws: WSConnection, request: Request) -> bytes:
    return ws.send(AcceptConnection())


@pytest.mark.parametrize(
    ("broker", "error", "fragment"),
    [
        pytest.param(
            FakeBroker(handshake=accept_without_subprotocol),
            WebSocketRefused,
            "without selecting the subprotocol 'mqtt'",
            id="no-subprotocol",
        ),
        pytest.param(
            FakeBroker(raw_answer=b"\x20\x02\x00\x00garbage\r\n\r\n"),
            WebSocketRefused,
            "not a WebSocket handshake",
            id="not-http",
        ),
        pytest.param(
            FakeBroker(raw_answer=b""),
            BrokerUnreachable,
            "closed the connection before answering",
            id="closed",
        ),
    ],
)
def test_a_server_that_is_no_mqtt_websocket_is_named(
    broker: FakeBroker, error: type[Exception], fragment: str
) -> None:
    with fake_broker(broker) as port:
        mqtt = client(f"ws://127.0.0.1:{port}/mqtt?{SECRET}")
        with pytest.raises(error) as failed:
            mqtt.connect()
    assert fragment in str(failed.value)
    assert f"ws://127.0.0.1:{port}/mqtt" in str(failed.value)
    assert SECRET not in str(failed.value)


def test_no_answer_to_the_upgrade_is_unreachable_after_the_connect_timeout() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:  # listens, never answers
        port = server.getsockname()[1]
        url = f"ws://127.0.0.1:{port}/mqtt?{SECRET}"
        mqtt = MqttClient(url, SessionConfig("ws-unit"), connect_timeout=0.3)
        with pytest.raises(BrokerUnreachable, match="no answer to the WebSocket handshake") as e:
            mqtt.connect()
    assert f"ws://127.0.0.1:{port}/mqtt within 0.3 s" in str(e.value)
    assert SECRET not in str(e.value)


# ------------------------------------------------------------------------ the stream itself


def open_pair() -> tuple[WSConnection, WSConnection]:
    """A client and a server connection after an in-memory handshake."""
    client_ws, server_ws = WSConnection(ConnectionType.CLIENT), WSConnection(ConnectionType.SERVER)
    server_ws.receive_data(client_ws.send(Request(host="h", target="/", subprotocols=["mqtt"])))
    list(server_ws.events())
    client_ws.receive_data(server_ws.send(AcceptConnection(subprotocol="mqtt")))
    list(client_ws.events())
    return client_ws, server_ws


class ScriptedSocket:
    """The socket methods a WebSocketStream calls, with scripted reads and write limits."""

    def __init__(self, reads: list[bytes], accept: list[int | Exception] | None = None) -> None:
        self.reads = reads
        self.accept = accept or []
        self.written = b""

    def gettimeout(self) -> float | None:
        return None

    def settimeout(self, value: float | None) -> None:
        pass

    def recv(self, size: int) -> bytes:
        return self.reads.pop(0) if self.reads else b""

    def send(self, data: memoryview) -> int:
        step = self.accept.pop(0) if self.accept else len(data)
        if isinstance(step, Exception):
            raise step
        self.written += bytes(data[:step])
        return min(step, len(data))

    def sendall(self, data: bytes) -> None:
        self.written += data


def test_recv_returns_at_most_bufsize_and_keeps_the_rest() -> None:
    client_ws, server_ws = open_pair()
    sock = ScriptedSocket([server_ws.send(BytesMessage(data=b"abcdefgh"))])
    stream = WebSocketStream(sock, client_ws)  # type: ignore[arg-type]
    assert [stream.recv(3), stream.recv(3), stream.recv(3), stream.recv(3)] == [
        b"abc",
        b"def",
        b"gh",
        b"",
    ]


def test_a_send_cut_mid_frame_reports_the_payload_sent_and_then_fails() -> None:
    """Like socket.send: the count of what went out, so the driver knows that something of
    its write was sent; the next call fails, as a stream cannot go on after half a frame."""
    client_ws, _ = open_pair()
    sock = ScriptedSocket([])
    stream = WebSocketStream(sock, client_ws)  # type: ignore[arg-type]
    payload = memoryview(bytes(300))
    assert stream.send(payload) == 300
    # 300 bytes go in a frame of a 2-byte header, a 2-byte length, a 4-byte mask, the payload.
    assert len(sock.written) == 8 + 300
    sock.accept = [3, 5 + 50, BrokenPipeError("gone")]
    assert stream.send(payload) == 50
    with pytest.raises(BrokenPipeError):
        stream.send(payload[50:])


def test_a_send_cut_within_the_header_sent_nothing() -> None:
    client_ws, _ = open_pair()
    sock = ScriptedSocket([], accept=[3, ConnectionResetError("reset")])
    stream = WebSocketStream(sock, client_ws)  # type: ignore[arg-type]
    with pytest.raises(ConnectionResetError):
        stream.send(memoryview(bytes(300)))


def test_a_frame_the_client_cannot_parse_is_a_violation() -> None:
    client_ws, _ = open_pair()
    masked = b"\x82\x81abcd\x00"  # a masked frame from the server (RFC 6455 section 5.1)
    sock = ScriptedSocket([masked])
    stream = WebSocketStream(sock, client_ws)  # type: ignore[arg-type]
    with pytest.raises(FrameViolation) as violation:
        stream.recv(100)
    assert violation.value.code == 1002
    assert sock.written.startswith(b"\x88")  # a Close frame went out
