"""The thin blocking driver: sockets, TLS, clocks and reconnects around :class:`ClientSession`.

All protocol decisions live in the session; this module moves bytes. One socket read is
decoded at once and the acknowledgements for it go out in one write. Over ``ws://`` and
``wss://`` the bytes go through :mod:`connector.mqtt.websocket`, which gives the driver the
same socket methods; ``tcp://`` and ``ssl://`` use the socket itself. Where the broker is:
:mod:`connector.mqtt.address`; TLS settings and failures: :mod:`connector.mqtt.tls`.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .address import BrokerAddress
from .config import SessionConfig
from .errors import (
    BrokerUnreachable,
    BrokerViolation,
    ConnectionLost,
    ConnectionRefused,
    KeepAliveTimeout,
    MqttError,
    RepeatedProtocolViolation,
    ServerDisconnected,
    SubscriptionRefused,
    WebSocketViolation,
)
from .events import (
    Connected,
    Event,
    ProtocolViolation,
    PublishDone,
    Released,
    ServerDisconnect,
    Subscribed,
)
from .packets import Publish, Will
from .properties import Properties
from .reasons import FATAL_DISCONNECTS
from .session import ClientSession, State
from .tls import TlsOptions, is_rejection, tls_failure
from .transport import ByteStream, closed_before_connack_causes, open_stream

log = logging.getLogger(__name__)

_Awaited = TypeVar("_Awaited", Connected, Subscribed)

DISCONNECT_DRAIN = 0.5
"""Seconds ``disconnect`` waits for the broker to close the connection after DISCONNECT."""

DEFAULT_CONNECT_TIMEOUT = 30.0
"""Seconds for TCP, TLS, the WebSocket handshake and CONNACK unless told otherwise (the
source option ``connectTimeout`` and the command line take this default)."""


@dataclass(slots=True)
class ReconnectPolicy:
    """Exponential backoff with equal jitter: the n-th delay is drawn uniformly from the upper
    half of ``min(maximum, initial * multiplier**n)`` seconds, so attempts spread out but
    never come sooner than half the exponential step."""

    initial: float = 0.1
    maximum: float = 30.0
    multiplier: float = 2.0
    attempt: int = 0

    def next_delay(self) -> float:
        ceiling = min(self.maximum, self.initial * self.multiplier**self.attempt)
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


def _drain_until_closed(sock: ByteStream, timeout: float) -> None:
    """Shut the write side of ``sock`` and read (dropping it) until the peer closes, at
    most ``timeout`` seconds; socket errors end it quietly."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(OSError, ValueError):
        sock.shutdown(socket.SHUT_WR)
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(65536):
                return


@dataclass(slots=True)
class Read:
    """What one socket read delivered: messages to persist, QoS 2 releases to persist."""

    messages: list[Publish] = field(default_factory=list)
    released: list[int] = field(default_factory=list)


class MqttClient:
    """A blocking MQTT client over one ``ClientSession``: connect, subscribe, poll, ack.

    ``poll()`` returns the messages of one socket read; the caller makes them durable and then
    calls ``acknowledge()``. Lost connections are re-established with backoff; when the broker
    has no session for us the subscriptions are made again. Refused connections (bad
    credentials, not authorized, ...) and TLS failures raise typed errors.
    """

    def __init__(
        self,
        broker: BrokerAddress | str,
        session: ClientSession | SessionConfig,
        subscriptions: list[tuple[str, int]] | None = None,
        *,
        tls: TlsOptions | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        reconnect: ReconnectPolicy | None = None,
        read_size: int = 1 << 20,
        on_connect: Callable[[Connected], None] | None = None,
        stop_event: threading.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
        will: Callable[[], Will] | None = None,
    ) -> None:
        self.broker = BrokerAddress.parse(broker) if isinstance(broker, str) else broker
        self.session = session if isinstance(session, ClientSession) else ClientSession(session)
        self.subscriptions = list(subscriptions or [])
        if self.subscriptions:
            # The session may already exist at the broker (no SUBSCRIBE this time): these
            # are the QoS a delivery may not exceed.
            requested = max(qos for _, qos in self.subscriptions)
            self.session.max_qos = max(self.session.max_qos or 0, requested)
        self.tls = tls if tls is not None else (TlsOptions() if self.broker.tls else None)
        self.connect_timeout = connect_timeout
        self.reconnect_policy = reconnect or ReconnectPolicy()
        self.read_size = read_size
        self.on_connect = on_connect
        self.will = will
        """Makes each CONNECT's Will (a Will that carries the time of its CONNECT); None: the
        session config's."""
        self.stop_event = stop_event or threading.Event()
        self.clock = clock
        self.connections = 0
        self.publish_done: list[int] = []
        self.publish_refused: list[str] = []
        """Why the broker refused each PUBLISH it refused (``PublishDone.refused``, MQTT 5)."""
        self._sock: ByteStream | None = None
        self._backlog: list[Event] = []
        """Events read while ``connect()`` waited for CONNACK/SUBACK, for the next ``poll()``."""
        self._retry_at = 0.0
        """``clock()`` time before which ``poll()`` makes no reconnect attempt (backoff)."""
        self._last_paused_ping = 0.0

    # ------------------------------------------------------------------ connection

    @property
    def connected(self) -> bool:
        return self._sock is not None and self.session.state is State.CONNECTED

    def connect(self) -> Connected:
        """Open the connection, CONNECT, and subscribe when the broker has no session for us.

        Raises BrokerUnreachable, TlsError, ConnectionRefused subclasses, SubscriptionRefused,
        or ConnectionLost/KeepAliveTimeout when the broker stops answering.
        """
        self.close()
        sock = open_stream(self.broker, self.tls, self.connect_timeout)
        self._sock = sock
        deadline = self.clock() + self.connect_timeout
        try:
            try:
                self.session.connect(self.clock(), None if self.will is None else self.will())
                self.flush()
                connected = self._wait_for(Connected, deadline, "CONNACK")
            except (BrokerViolation, ServerDisconnected):
                raise
            except ConnectionLost as exc:
                # TLS 1.3 finishes the client's handshake before the broker has checked the
                # client certificate; its rejection arrives as an alert on the first I/O.
                rejection = self._tls_rejection(exc, deadline)
                if rejection is not None:
                    raise rejection from exc.__cause__
                causes = closed_before_connack_causes(self.session.config, self.broker, self.tls)
                raise ConnectionLost(f"{exc} before CONNACK; {causes}") from exc.__cause__
            if connected.session_lost:
                log.warning(
                    "the broker had no session for client %r although one was expected: "
                    "messages queued while disconnected may have been lost",
                    self.session.client_id,
                )
            if self.subscriptions and (
                not connected.session_present or self.session.config.clean_session
            ):
                self._subscribe_until(self.subscriptions, deadline)
        except BaseException:
            self.close()
            raise
        self.connections += 1
        self.reconnect_policy.reset()
        self._retry_at = 0.0
        log.info(
            "connected to %s as %r (session present: %s)",
            self.broker,
            self.session.client_id,
            connected.session_present,
        )
        if self.on_connect is not None:
            self.on_connect(connected)
        return connected

    def subscribe_and_wait(self, subscriptions: list[tuple[str, int]]) -> None:
        """Subscribe on the open connection and wait for SUBACK (up to ``connect_timeout``).

        Raises SubscriptionRefused, or ConnectionLost/KeepAliveTimeout."""
        self._subscribe_until(subscriptions, self.clock() + self.connect_timeout)

    def _subscribe_until(self, subscriptions: list[tuple[str, int]], deadline: float) -> None:
        self.session.subscribe(subscriptions, self.clock())
        self.flush()
        subscribed = self._wait_for(Subscribed, deadline, "SUBACK")
        if subscribed.refused:
            raise SubscriptionRefused(subscribed.refused, subscribed.reasons())

    def _tls_rejection(self, lost: ConnectionLost, deadline: float) -> MqttError | None:
        """A TlsError when ``lost`` (before CONNACK) was the broker refusing our TLS
        credentials with an alert; None when it was anything else."""
        sock = self._sock
        cause = lost.__cause__
        if self.tls is None or sock is None or not isinstance(cause, OSError):
            return None
        if not is_rejection(cause):
            # A failed write leaves the broker's alert unread: read it to learn why.
            try:
                sock.settimeout(max(0.05, min(1.0, deadline - self.clock())))
                sock.recv(1)
                return None
            except ssl.SSLError as exc:
                if not is_rejection(exc):
                    return None
                cause = exc
            except OSError:
                return None
        return tls_failure(cause, self.broker, self.tls, after="CONNECT")

    def _wait_for(self, kind: type[_Awaited], deadline: float, what: str) -> _Awaited:
        while True:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise KeepAliveTimeout(
                    f"{self.broker} did not answer with {what} within {self.connect_timeout} s"
                )
            events = self._read(remaining)
            for event in events:
                if isinstance(event, ProtocolViolation):
                    self._say_why()
                    raise BrokerViolation(f"protocol violation by {self.broker}: {event.reason}")
                if isinstance(event, ServerDisconnect):
                    raise self._server_disconnect(event)
            found = next((event for event in events if isinstance(event, kind)), None)
            # Messages and releases may share a read with CONNACK/SUBACK (a persistent
            # session's queue, retained messages): keep them for poll().
            self._backlog.extend(event for event in events if event is not found)
            if found is not None:
                return found

    def _say_why(self) -> None:
        """Write what the session queued on a violation (MQTT 5: DISCONNECT with a reason
        code, section 4.13) before the connection closes; a failed write changes nothing."""
        with contextlib.suppress(ConnectionLost):
            self.flush()

    def _server_disconnect(self, event: ServerDisconnect) -> ServerDisconnected:
        """The error for a broker's DISCONNECT (MQTT 5, section 3.14), fatal for a reason
        code in FATAL_DISCONNECTS (the client stops; logged as an error here), else followed
        by a reconnect with backoff."""
        props = event.properties
        text = f"{self.broker} disconnected us: {event.name}"
        if props is not None and props.reason_string:
            text += f" ({props.reason_string})"
        if props is not None and props.server_reference:
            text += f"; it names another server to use: {props.server_reference}"
        fatal = event.reason_code in FATAL_DISCONNECTS
        if fatal:
            log.error("%s; not reconnecting", text)
        return ServerDisconnected(event.reason_code, text, fatal=fatal)

    def close(self) -> None:
        """Close the socket without DISCONNECT (the session stays for a persistent client)."""
        sock, self._sock = self._sock, None
        # Unacknowledged deliveries of this connection: the broker resends them.
        self._backlog.clear()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        if self.session.state is not State.DISCONNECTED:
            self.session.connection_lost()

    def disconnect(self) -> None:
        """Send DISCONNECT and close (section 3.14). Never unsubscribes.

        The close is graceful: after DISCONNECT the write side is shut and what the broker
        still sends is read and dropped until it closes (it does on DISCONNECT, section
        3.14.4), at most ``DISCONNECT_DRAIN`` seconds. Closing a socket that holds unread
        data sends a reset, and a broker may drop a reset connection without reading what
        it has not read yet, the last acknowledgements and the DISCONNECT itself, and resend
        those messages on the next connection (docs/brokers.md, "Known broker bugs")."""
        sock = self._sock
        if sock is not None and self.session.state is State.CONNECTED:
            self.session.disconnect(self.clock())
            with contextlib.suppress(MqttError):
                self.flush()
                _drain_until_closed(sock, DISCONNECT_DRAIN)
        self.close()

    # ------------------------------------------------------------------ I/O

    @property
    def write_stall_timeout(self) -> float:
        """Seconds the broker may take no byte of ours before the connection counts as dead:
        1.5 x keep-alive (the rule a broker applies to us, section 3.1.2.10), at least
        ``connect_timeout``."""
        return max(self.connect_timeout, 1.5 * self.session.keep_alive)

    def flush(self) -> None:
        """Send what the session has queued.

        A broker that floods us may read our acknowledgements slowly (docs/brokers.md), so a
        write may wait for room for a long time: that is progress, not a dead connection.
        Only ``write_stall_timeout`` without a byte taken ends it; the timeout left on the
        socket by the last read does not apply."""
        data = self.session.data_to_send()
        sock = self._sock
        if not data or sock is None:
            return
        view = memoryview(data)
        try:
            sock.settimeout(self.write_stall_timeout)
            while view:
                view = view[sock.send(view) :]
        except OSError as exc:
            lost = ConnectionLost(f"sending to {self.broker} failed: {exc}")
            lost.nothing_sent = len(view) == len(data)
            raise lost from exc

    def _read(self, timeout: float | None) -> list[Event]:
        """One socket read (waiting at most ``timeout``), decoded into session events."""
        sock = self._sock
        if sock is None:
            raise ConnectionLost("not connected")
        now = self.clock()
        deadline = self.session.next_deadline()
        wait = timeout
        if deadline is not None:
            wait = max(0.0, deadline - now) if wait is None else min(wait, max(0.0, deadline - now))
        sock.settimeout(wait)
        try:
            data = sock.recv(self.read_size)
        except (TimeoutError, BlockingIOError, ssl.SSLWantReadError):
            self.session.tick(self.clock())
            self.flush()
            return []
        except OSError as exc:
            if self.broker.websocket:
                self._websocket_error(exc)
            raise ConnectionLost(f"reading from {self.broker} failed: {exc}") from exc
        if not data:
            raise ConnectionLost(f"{self.broker} closed the connection")
        now = self.clock()
        try:
            events = self.session.receive_data(data, now)
        except RepeatedProtocolViolation as exc:
            self._say_why()
            raise self._giving_up(exc) from None
        self.session.tick(now)
        return events

    def _giving_up(self, exc: RepeatedProtocolViolation) -> RepeatedProtocolViolation:
        """``exc`` logged, and again with the broker's address for the caller."""
        log.error("giving up on %s: %s", self.broker, exc.reason)
        return RepeatedProtocolViolation(exc.count, exc.reason, str(self.broker), code=exc.code)

    def _websocket_error(self, exc: OSError) -> None:
        """Raise WebSocketViolation when ``exc`` is the broker breaking the WebSocket rules,
        counted by the session like a violation in the MQTT bytes (RepeatedProtocolViolation
        at the limit)."""
        from .websocket import FrameViolation

        if isinstance(exc, FrameViolation):
            try:
                self.session.transport_violation(f"WebSocket: {exc}")
            except RepeatedProtocolViolation as repeated:
                raise self._giving_up(repeated) from exc
            raise WebSocketViolation(f"reading from {self.broker} failed: {exc}") from exc

    def poll(self, timeout: float | None = None) -> Read:
        """Wait up to ``timeout`` for one read; return the messages and releases it carried.

        Acknowledgements queued by the session (PUBREC resends, PUBCOMP for unknown ids,
        pings) go out at once; message acks wait for ``acknowledge``. Reconnects on
        connection loss, protocol violation or keep-alive timeout, with backoff; while the
        broker stays unreachable an empty read comes back after ``timeout`` (each attempt
        may itself take up to ``connect_timeout``).
        """
        read = Read()
        deadline = None if timeout is None else self.clock() + timeout
        if not self.connected:
            self._reconnect(deadline)
            if not self.connected:
                return read
        try:
            if self._backlog:
                events, self._backlog = self._backlog, []
            else:
                remaining = None if deadline is None else max(0.0, deadline - self.clock())
                events = self._read(remaining)
            for event in events:
                if type(event) is Publish:
                    read.messages.append(event)
                elif isinstance(event, Released):
                    read.released.append(event.packet_id)
                elif isinstance(event, PublishDone):
                    self.publish_done.append(event.packet_id)
                    if event.refused is not None:
                        self.publish_refused.append(event.refused)
                elif isinstance(event, ProtocolViolation):
                    # Drop the whole read: nothing of it was persisted or acknowledged, so the
                    # broker redelivers the good messages on the next connection.
                    log.warning(
                        "protocol violation by %s: %s; closing the connection (%d in a row)",
                        self.broker,
                        event.reason,
                        self.session.violations_in_a_row,
                    )
                    self._say_why()
                    self.close()
                    return Read()
                elif isinstance(event, ServerDisconnect):
                    # The messages of this read stay: the caller stores and acknowledges them;
                    # acks for a closed connection are kept for the broker's resend.
                    error = self._server_disconnect(event)
                    self.close()
                    if error.fatal:
                        raise error
                    log.warning("%s; reconnecting", error)
                    return read
            self.flush()
        except (ConnectionLost, KeepAliveTimeout) as exc:
            if isinstance(exc, ServerDisconnected) and exc.fatal:
                raise  # the client stops (closed above)
            log.warning("connection to %s lost: %s", self.broker, exc)
            self.close()
        return read

    def acknowledge(self, messages: list[Publish], released: list[int] | None = None) -> None:
        """Acknowledge persisted released ids (PUBCOMP) and messages (PUBACK/PUBREC) in one
        write, releases first: their PUBRELs came before any PUBLISH that reuses their ids.
        When the connection they came on is gone nothing is sent, and the session keeps the
        messages as stored with their acknowledgement never written."""
        now = self.clock()
        if released:
            self.session.complete_many(released, now)
        self.session.ack_many(messages, now)
        try:
            self.flush()
        except ConnectionLost as exc:
            log.warning("connection to %s lost while acknowledging: %s", self.broker, exc)
            if exc.nothing_sent:
                self.session.acks_not_written(messages)
            self.close()

    def _reconnect(self, deadline: float | None = None) -> None:
        """Reconnect with backoff until connected, stopped or past ``deadline`` (a ``clock()``
        time). The backoff carries over to the next call. Typed refusals propagate."""
        while not self.stop_event.is_set():
            wait = self._retry_at - self.clock()
            if deadline is not None and deadline - self.clock() < wait:
                self.stop_event.wait(max(0.0, deadline - self.clock()))
                return
            if wait > 0 and self.stop_event.wait(wait):
                return
            try:
                self.connect()
                return
            except (BrokerUnreachable, ConnectionLost, KeepAliveTimeout, ConnectionRefused) as exc:
                if isinstance(exc, ConnectionRefused) and not exc.retryable:
                    raise
                if isinstance(exc, ServerDisconnected) and exc.fatal:
                    raise
                delay = self.reconnect_policy.next_delay()
                self._retry_at = self.clock() + delay
                log.warning(
                    "reconnect to %s failed (%s); retrying in %.2f s", self.broker, exc, delay
                )

    def keep_alive_while_paused(self) -> None:
        """Send PINGREQ when the keep-alive interval is half gone, without reading: used
        while backpressure leaves the socket unread, so the broker keeps the connection."""
        keep_alive = self.session.keep_alive
        if not keep_alive or not self.connected:
            return
        now = self.clock()
        if now - self._last_paused_ping >= keep_alive / 2:
            self._last_paused_ping = now
            self.session.send_ping(now)
            try:
                self.flush()
            except ConnectionLost as exc:
                log.warning("connection to %s lost while paused: %s", self.broker, exc)
                self.close()

    # ------------------------------------------------------------------ publishing

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
        timeout: float = 60.0,
    ) -> int | None:
        """Queue a PUBLISH and send it; returns its packet id (None for QoS 0). A QoS 1/2
        message waits, reading acknowledgements, while the broker's Receive Maximum is used
        up (MQTT 5 section 4.9), at most ``timeout`` seconds (then LocalProtocolError)."""
        if qos and self.session.send_quota <= 0:
            deadline = self.clock() + timeout
            while self.session.send_quota <= 0 and self.clock() < deadline:
                self.pump(max(0.0, min(1.0, deadline - self.clock())))
        pid = self.session.publish(topic, payload, qos, self.clock(), retain, properties)
        self.flush()
        return pid

    def pump(self, timeout: float) -> int:
        """Read once (for outbound acknowledgements) and return how many finished."""
        before = len(self.publish_done)
        read = self.poll(timeout)
        if read.messages or read.released:
            self.acknowledge(read.messages, read.released)
        return len(self.publish_done) - before

    def __enter__(self) -> MqttClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


__all__ = ["DEFAULT_CONNECT_TIMEOUT", "ByteStream", "MqttClient", "Read", "ReconnectPolicy"]
