"""A paho-mqtt 2.x client wrapper with waitable state, for driving test brokers.

The network loop runs in paho's background thread; callbacks record CONNACKs,
SUBACKs, messages and disconnects, and the methods wait for them with
deadlines instead of sleeping.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import paho.mqtt.client as mqtt
from paho.mqtt.reasoncodes import ReasonCode

from tests.support.ids import unique_id
from tests.support.waiting import wait_until

if TYPE_CHECKING:
    from devtools.broker_process import BrokerProcess

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10.0
RECONNECT_MIN_DELAY = 0.05


@dataclass(frozen=True)
class Received:
    """One message delivered to the client."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Any = None
    """MQTT 5: paho's Properties of the PUBLISH (None below level 5)."""


@dataclass(frozen=True)
class ConnectOutcome:
    """How a connection attempt ended: a CONNACK, or a drop before one."""

    reason_code: ReasonCode | None
    session_present: bool
    disconnect_reason: ReasonCode | None

    @property
    def accepted(self) -> bool:
        """True when the broker sent a successful CONNACK."""
        return self.reason_code is not None and not self.reason_code.is_failure


class PahoClient:
    """paho-mqtt client (CallbackAPIVersion.VERSION2) whose events can be awaited."""

    def __init__(
        self,
        client_id: str = "",
        *,
        protocol: mqtt.MQTTProtocolVersion = mqtt.MQTTv311,
        clean_session: bool = True,
        username: str | None = None,
        password: str | None = None,
    ) -> None:
        session: dict[str, Any] = {}
        if protocol != mqtt.MQTTv5:
            session["clean_session"] = clean_session
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol, **session
        )
        if username is not None:
            self.client.username_pw_set(username, password)
        # paho's loop thread sleeps out a reconnect delay before noticing
        # loop_stop(); short delays keep refused connections and broker restarts quick.
        self.client.reconnect_delay_set(min_delay=RECONNECT_MIN_DELAY, max_delay=1)  # type: ignore[arg-type]
        self._lock = threading.Lock()
        self._connacks: list[tuple[ReasonCode, bool]] = []
        self._disconnects: list[ReasonCode] = []
        self._subacks: dict[int, list[ReasonCode]] = {}
        self._messages: list[Received] = []
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self._loop_running = False

    def tls(
        self,
        ca_certs: Path | str,
        certfile: Path | str | None = None,
        keyfile: Path | str | None = None,
    ) -> None:
        """Use TLS, trusting `ca_certs`, optionally presenting a client certificate."""
        self.client.tls_set(
            ca_certs=str(ca_certs),
            certfile=None if certfile is None else str(certfile),
            keyfile=None if keyfile is None else str(keyfile),
        )

    # -- callbacks (paho's network thread) -------------------------------------

    def _on_connect(
        self,
        client: mqtt.Client,
        userdata: Any,
        flags: mqtt.ConnectFlags,
        reason_code: ReasonCode,
        properties: Any,
    ) -> None:
        with self._lock:
            self._connacks.append((reason_code, bool(flags.session_present)))

    def _on_disconnect(
        self,
        client: mqtt.Client,
        userdata: Any,
        flags: mqtt.DisconnectFlags,
        reason_code: ReasonCode,
        properties: Any,
    ) -> None:
        with self._lock:
            self._disconnects.append(reason_code)

    def _on_subscribe(
        self,
        client: mqtt.Client,
        userdata: Any,
        mid: int,
        reason_codes: list[ReasonCode],
        properties: Any,
    ) -> None:
        with self._lock:
            self._subacks[mid] = list(reason_codes)

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        with self._lock:
            self._messages.append(
                Received(
                    message.topic,
                    bytes(message.payload),
                    message.qos,
                    bool(message.retain),
                    getattr(message, "properties", None),
                )
            )

    # -- actions ---------------------------------------------------------------

    def connect(
        self, host: str, port: int, *, timeout: float = DEFAULT_TIMEOUT, keepalive: int = 60
    ) -> ConnectOutcome:
        """Connect and wait for the CONNACK or for the connection to drop first.

        TCP and TLS handshake errors propagate from paho's `connect`. After a
        refusal the network loop is stopped, so paho does not keep retrying.
        """
        with self._lock:
            seen_connacks, seen_disconnects = len(self._connacks), len(self._disconnects)
        self.client.connect(host, port, keepalive=keepalive)
        self.client.loop_start()
        self._loop_running = True

        def settled() -> bool:
            with self._lock:
                return (
                    len(self._connacks) > seen_connacks or len(self._disconnects) > seen_disconnects
                )

        wait_until(settled, timeout, message=f"no CONNACK from {host}:{port}")
        with self._lock:
            connack = self._connacks[seen_connacks] if len(self._connacks) > seen_connacks else None
            dropped = (
                self._disconnects[seen_disconnects]
                if len(self._disconnects) > seen_disconnects
                else None
            )
        outcome = ConnectOutcome(
            reason_code=connack[0] if connack else None,
            session_present=connack[1] if connack else False,
            disconnect_reason=dropped,
        )
        if not outcome.accepted:
            self._stop_loop()
        log.debug("connect to %s:%s: %s", host, port, outcome)
        return outcome

    def subscribe(
        self, topic: str, qos: int = 1, *, timeout: float = DEFAULT_TIMEOUT
    ) -> list[ReasonCode]:
        """Subscribe and wait for the SUBACK; return its reason codes."""
        result, mid = self.client.subscribe(topic, qos)
        if result != mqtt.MQTT_ERR_SUCCESS:
            raise AssertionError(f"subscribe to {topic!r} failed: {mqtt.error_string(result)}")
        assert mid is not None  # paho gives no mid only when the subscribe failed

        def suback() -> list[ReasonCode] | None:
            with self._lock:
                return self._subacks.get(mid)

        return wait_until(suback, timeout, message=f"no SUBACK for {topic!r}")

    def publish(
        self,
        topic: str,
        payload: bytes | str,
        qos: int = 1,
        *,
        retain: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        """Publish and, for QoS 1 and 2, wait until the broker acknowledged it."""
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            raise AssertionError(f"publish to {topic!r} failed: {mqtt.error_string(info.rc)}")
        info.wait_for_publish(timeout)
        if not info.is_published():
            raise AssertionError(f"publish to {topic!r} not acknowledged within {timeout}s")

    def wait_for_messages(self, count: int, *, timeout: float = DEFAULT_TIMEOUT) -> list[Received]:
        """Wait until at least `count` messages arrived; return all received so far."""

        def enough() -> bool:
            with self._lock:
                return len(self._messages) >= count

        wait_until(
            enough, timeout, message=lambda: f"expected {count} messages, got {len(self.messages)}"
        )
        return self.messages

    def wait_for_payloads(
        self, payloads: set[bytes], *, timeout: float = DEFAULT_TIMEOUT
    ) -> list[Received]:
        """Wait until every payload of `payloads` arrived (repeats do not count towards it, as
        they do for `wait_for_messages`); return all received so far."""

        def missing() -> list[bytes]:
            return sorted(payloads - {m.payload for m in self.messages})

        wait_until(lambda: not missing(), timeout, message=lambda: f"missing {missing()[:10]}")
        return self.messages

    @property
    def messages(self) -> list[Received]:
        """Messages received so far, in arrival order."""
        with self._lock:
            return list(self._messages)

    def disconnect(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Send DISCONNECT, wait for the connection to close and stop the loop."""
        with self._lock:
            seen = len(self._disconnects)
        if self.client.is_connected():
            self.client.disconnect()

            def closed() -> bool:
                with self._lock:
                    return len(self._disconnects) > seen

            wait_until(closed, timeout, message="connection did not close after DISCONNECT")
        self._stop_loop()

    def close(self) -> None:
        """Best-effort disconnect and loop shutdown."""
        try:
            if self.client.is_connected():
                self.client.disconnect()
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        if self._loop_running:
            self.client.loop_stop()
            self._loop_running = False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@contextmanager
def connected_paho(
    broker: BrokerProcess,
    client_id: str = "",
    *,
    clean_session: bool = True,
    username: str | None = None,
    password: str | None = None,
) -> Iterator[PahoClient]:
    """A :class:`PahoClient` connected to ``broker`` (a refusal fails the test), with a client
    id of its own unless given one; DISCONNECT at the end. Its QoS 1/2 publishes wait for the
    broker's acknowledgement."""
    name = client_id or unique_id("paho-")
    with PahoClient(
        name, clean_session=clean_session, username=username, password=password
    ) as client:
        assert client.connect(broker.host, broker.port).accepted, f"{name} refused by {broker!r}"
        yield client
        client.disconnect()
