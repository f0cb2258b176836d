"""One writing task: its identity and the publisher that sends its rows and waits for the
broker to take them.

Delivery (docs/delivery.md, "Writing to MQTT"): a task ends only when the broker acknowledged
every QoS 1 message (PUBACK) and completed every QoS 2 one (PUBCOMP), so a committed write has
all its rows at the broker. A lost connection is made again with the session's backoff and
every unacknowledged message is sent again with DUP=1 (section 4.4): at least once. QoS 0 rows
in flight when a connection drops are lost, as QoS 0 allows. A refused PUBLISH (MQTT 5 PUBACK
or PUBREC with a reason code >= 0x80) fails the task with the reason; so does a broker that
takes no message for ``publishTimeout`` seconds.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from connector.mqtt.driver import MqttClient
from connector.mqtt.errors import ConnectionLost, MqttError
from connector.mqtt.message_properties import publish_properties
from connector.spark.writer.options import SinkOptions
from connector.spark.writer.rows import OutMessage, RowError

log = logging.getLogger(__name__)

IDEMPOTENCY_KEY = "spark-mqtt-key"
"""The user property that carries a row's idempotency key (``idempotencyKey``, MQTT 5)."""

FLUSH_EVERY = 256
"""Messages queued in the session before they are written to the socket in one send."""

POLL_SECONDS = 0.2
"""The longest one wait for the broker's acknowledgements lasts before the deadline is
checked again."""


class PublishRefused(MqttError):
    """The broker refused a PUBLISH (MQTT 5 reason code >= 0x80)."""


class PublishTimeout(MqttError):
    """The broker took no message for ``publishTimeout`` seconds."""


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Who publishes: the write (a query id, or one id per ``df.write``), its micro-batch (0
    for ``df.write``), the Spark partition and the task attempt."""

    write_id: str
    batch_id: int
    partition: int
    attempt: int
    task_attempt_id: int

    def client_id(self, prefix: str) -> str:
        """One client id per task attempt: two tasks never share one, so the broker never
        takes one task's connection over for another ([MQTT-3.1.4-3])."""
        seed = f"{self.write_id}:{self.batch_id}:{self.partition}:{self.attempt}:"
        seed += str(self.task_attempt_id)
        return f"{prefix}-{hashlib.blake2b(seed.encode(), digest_size=5).hexdigest()}"

    def key(self, row: int) -> str:
        """Row ``row``'s idempotency key: the same for every attempt of the task and every run
        of the micro-batch, as long as the partition holds the same rows."""
        return f"{self.write_id}:{self.batch_id}:{self.partition}:{row}"


@dataclass(frozen=True, slots=True)
class TaskTally:
    """What one task published."""

    rows: int
    by_qos: tuple[int, int, int]
    connections: int


class TaskPublisher:
    """Publishes one task's messages with our own client and waits for the broker."""

    def __init__(
        self,
        options: SinkOptions,
        identity: TaskIdentity,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.identity = identity
        self.client = MqttClient(
            options.broker,
            options.session_config(identity.client_id(options.client_id_prefix)),
            tls=options.tls,
            connect_timeout=options.connect_timeout,
            clock=clock,
        )
        self.clock = clock
        self.rows = 0
        self.by_qos = [0, 0, 0]
        self._queued = 0
        self._progress_at = clock()

    def run(self, batches: Iterable[Iterable[OutMessage]]) -> TaskTally:
        """Connect, publish the messages of ``batches`` and wait until the broker has taken
        every one. What a batch queued is sent before the next batch is asked for: Spark may
        take its time to make it."""
        client = self.client
        try:
            for batch in batches:
                for message in batch:
                    self.publish(message)
                self._flush()
            if self.rows:
                self.finish()
        except BaseException:
            client.close()
            raise
        client.disconnect()
        return TaskTally(self.rows, (self.by_qos[0], self.by_qos[1], self.by_qos[2]),
                         client.connections)  # fmt: skip

    def publish(self, message: OutMessage) -> None:
        """Queue one message, waiting first for a connection and for room in the window."""
        client = self.client
        session = client.session
        qos = message.qos
        if not client.connections:
            client.connect()  # a wrong address or refused credentials fail here, at once
            self._progress_at = self.clock()
        window = self.options.max_inflight
        if not client.connected or (
            qos and (session.outbound_in_flight >= window or session.send_quota <= 0)
        ):
            self._progress_at = self.clock()  # the wait for the broker starts now
            while not client.connected or (
                qos and (session.outbound_in_flight >= window or session.send_quota <= 0)
            ):
                self._wait()
        row = self.rows
        extra = ((IDEMPOTENCY_KEY, self.identity.key(row)),) if self._keyed else ()
        try:
            props = publish_properties(message.properties, extra) if self.options.mqtt5 else None
            session.publish(message.topic, message.payload, qos, self.clock(), message.retain,
                            props)  # fmt: skip
        except (MqttError, ValueError, TypeError) as exc:
            raise RowError(
                f"row {row} of partition {self.identity.partition} (topic {message.topic!r}) "
                f"cannot be published: {exc}"
            ) from exc
        self.rows = row + 1
        self.by_qos[qos] += 1
        self._queued += 1
        if self._queued >= FLUSH_EVERY:
            self._flush()

    @property
    def _keyed(self) -> bool:
        return self.options.mqtt5 and self.options.idempotency_key

    def finish(self) -> None:
        """Send what is queued and wait until no QoS 1/2 message is in flight."""
        self._flush()
        self._progress_at = self.clock()
        while self.client.session.outbound_in_flight:  # QoS 0 needs no connection after
            self._wait()
        self._check_refused()

    def _flush(self) -> None:
        self._queued = 0
        try:
            self.client.flush()
        except ConnectionLost as exc:  # unacknowledged messages go again on reconnect
            log.warning("MQTT writer: %s; reconnecting", exc)
            self.client.close()

    def _wait(self) -> None:
        """Read the broker's acknowledgements once (reconnecting when the connection is
        gone); PublishTimeout when nothing moved for ``publishTimeout`` seconds of this wait
        (the time Spark took to hand over rows is not the broker's)."""
        self._flush()
        self._check_refused()
        client = self.client
        timeout = self.options.publish_timeout
        left = self._progress_at + timeout - self.clock()
        if left <= 0:
            raise PublishTimeout(
                f"the broker {client.broker} took no message for {timeout:g} s "
                f"({client.session.outbound_in_flight} in flight, "
                f"{'connected' if client.connected else 'not connected'}); see option "
                "'publishTimeout'"
            )
        was_connected = client.connected
        if client.pump(min(POLL_SECONDS, left)) or (client.connected and not was_connected):
            self._progress_at = self.clock()

    def _check_refused(self) -> None:
        refused = self.client.publish_refused
        if refused:
            raise PublishRefused(
                f"the broker {self.client.broker} refused a message: {refused[0]}"
                + (f" (and {len(refused) - 1} more)" if len(refused) > 1 else "")
            )
