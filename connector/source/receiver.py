"""The receiver: one MQTT connection feeding the write-ahead log, acking only what is durable.

It runs as a thread in the process that hosts the stream reader (Spark's Python streaming
source runner on the driver) for the lifetime of the query. Per socket read: drop broker
redeliveries already in the WAL, append the rest with one fsync, then acknowledge everything
(PUBACK / PUBREC / PUBCOMP) in one write. A read of QoS 2 releases alone may first wait a
moment for more (``_gather_releases``), and a QoS 1 resend may read on for its confirmation
(``_qos1_resends``); the reads joined that way count as one.

Duplicate rules (documented in the README, "Delivery guarantees"):

* QoS 2: a PUBLISH whose packet id is pending in the WAL (stored, PUBREL not yet seen) is a
  redelivery; it is acknowledged again and not appended. Pending ids live in the WAL.
* QoS 1 and 2: a PUBLISH with DUP=1 whose packet id, topic and payload match (32-bit digest)
  the latest QoS 1 or 2 message stored with that id is a redelivery (section 4.3: DUP=1 marks
  a resend). For QoS 2 this catches a broker resending a message whose exchange we completed
  but whose PUBCOMP it lost (a broker crash restoring older state). Limit: a genuinely new
  message with the same id, topic and payload, first sent on a connection that dropped before
  it reached us, would be taken for a redelivery.
* QoS 1 also: the broker resends in order, so a DUP=1 message equal to a stored message
  whose packet id a later stored message reused is matched against the WAL in send order,
  per socket read: a match found by searching the WAL counts only when the resends after it
  confirm it, and the receiver reads on (joining those reads to the batch) while they are
  still to come (:mod:`connector.source.resend_run`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from connector.mqtt.driver import Batch, MqttClient
from connector.mqtt.packets import ProtocolLevel, Publish
from connector.mqtt.session import ClientSession, Connected, SessionConfig
from connector.wal import RecordTuple, WalLockedError, WalWriter, record_digest

from .options import SourceOptions
from .resend_run import ResendRun

log = logging.getLogger(__name__)

SUBSCRIPTIONS_FILE = "subscriptions.json"


LOCK_WAIT_SECONDS = 15.0
"""How long a starting query waits for the WAL lock of a query that is still shutting down."""


def _open_wal(path: str) -> WalWriter:
    """Open the WAL, waiting briefly while a stopping query's process still holds the lock
    (Spark ends the old source process asynchronously after ``query.stop()``)."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            return WalWriter.open(path)
        except WalLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


CONFIRM_READ_WAIT = 0.05
"""Seconds to wait for the next read while the resends after a WAL search hit are still to
come (a broker resends its in-flight list at once, so they follow within microseconds)."""


def _join_read(client: MqttClient, batch: Batch, timeout: float) -> Batch:
    """Read once more on the same connection and add what came to ``batch`` (its messages
    and releases are then stored and acknowledged with it); returns that read."""
    more = client.poll(timeout)
    batch.messages.extend(more.messages)
    batch.released.extend(more.released)
    return more


def _resend_pairs(messages: list[Publish]) -> list[tuple[int, int]]:
    return [
        (m.packet_id, record_digest(m.topic, m.payload))  # type: ignore[misc]
        for m in messages
        if m.dup and m.qos == 1
    ]


def _qos1_resends(resends: ResendRun, client: MqttClient, batch: Batch) -> Iterator[bool]:
    """Verdicts (True: already stored) on the DUP=1 QoS 1 messages of ``batch``, in order.
    They are decided together: a run found by the WAL search must be confirmed by the
    resends that follow its start. While the read ends before that, the next reads on the
    same connection join ``batch`` (their messages are stored and acknowledged with it);
    when none brings a further resend, the hit stays unconfirmed and is stored."""
    pairs = _resend_pairs(batch.messages)
    while True:
        verdicts = resends.classify(pairs, final=False)
        if verdicts is not None:
            return iter(verdicts)
        more = _join_read(client, batch, CONFIRM_READ_WAIT) if client.connected else Batch()
        added = _resend_pairs(more.messages)
        if not added:
            return iter(resends.classify(pairs))  # type: ignore[arg-type]
        pairs.extend(added)


RELEASE_GATHER = 64
"""A read that brought QoS 2 releases and no message waits for more releases, up to this
many in hand, while at least this many further PUBRELs are owed (see ``_gather_releases``)."""

RELEASE_GATHER_WAIT = 0.001
"""The longest a read of releases waits for more before its append and PUBCOMPs."""


def _gather_releases(client: MqttClient, batch: Batch) -> bool:
    """Join further reads to ``batch`` (releases only so far) while many PUBRELs are still
    owed, so that one append, one fsync and one write complete them together. Returns whether
    it waited.

    Each release is persisted before its PUBCOMP (docs/architecture.md, decision 3: after
    PUBCOMP the broker may reuse the id), so every read of releases costs an fsync.
    A broker that sends a QoS 2 backlog at once (Mosquitto 2.0.11 exceeds its inflight limit
    then) answers the PUBREC window's exchanges one PUBREL per write, and a read without
    waiting holds a few dozen (figures in decision 29). A broker that keeps fewer exchanges
    open than ``RELEASE_GATHER`` (e.g. an inflight limit of 20) is never waited for, and the
    wait ends at the first message, so a live stream is not delayed."""
    owed = client.session.open_pubrecs - len(batch.released)
    if owed < RELEASE_GATHER or batch.messages:
        return False
    deadline = time.monotonic() + RELEASE_GATHER_WAIT
    while len(batch.released) < RELEASE_GATHER and not batch.messages and client.connected:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        _join_read(client, batch, left)
    return True


class ReceiverStats:
    """Counters the receiver keeps for progress reports and tests."""

    __slots__ = (
        "appended",
        "connections",
        "duplicates_dropped",
        "release_reads_gathered",
        "sessions_lost",
    )

    def __init__(self) -> None:
        self.appended = 0
        self.duplicates_dropped = 0
        self.sessions_lost = 0
        self.connections = 0
        self.release_reads_gathered = 0
        """Reads of QoS 2 releases that waited for more (``_gather_releases``)."""


class Receiver:
    """Owns the WAL writer and the MQTT client of one ``mqtt`` stream."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.wal = _open_wal(options.wal_path)
        self.stats = ReceiverStats()
        self.error: BaseException | None = None
        self.committed = self.wal.first_offset
        self.resends = ResendRun(self.wal)
        self.last_activity = time.monotonic()
        self._storing = False
        """A read that brought messages is being stored and acknowledged (``wait_idle``)."""
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        config = SessionConfig(
            client_id=options.client_id,
            clean_session=options.clean_session,
            keep_alive=options.keep_alive,
            username=options.username,
            password=options.password.encode() if options.password is not None else None,
            level=options.mqtt_version,
        )
        session = ClientSession(config)
        session.restore_qos2_pending(set(self.wal.qos2_pending))
        session.expect_session_present = self.wal.next_offset > 0 and not options.clean_session
        self.client = MqttClient(
            options.broker,
            session,
            [(topic, options.qos) for topic in options.topics],
            tls=options.tls,
            connect_timeout=options.connect_timeout,
            on_connect=self._on_connect,
            stop_event=self._stop,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect (errors propagate: bad credentials, TLS, unreachable) and start the thread."""
        try:
            self.client.connect()
        except BaseException:
            self.wal.close()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"mqtt-receiver-{self.options.client_id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop receiving, send DISCONNECT (never UNSUBSCRIBE), release the WAL."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
        try:
            self.client.disconnect()
        finally:
            self.wal.close()

    def _on_connect(self, connected: Connected) -> None:
        self.stats.connections += 1
        self.resends.connection_started(self.wal.next_offset)
        self.last_activity = time.monotonic()
        if connected.session_lost:
            self.stats.sessions_lost += 1
            log.warning(
                "MQTT broker %s had no session for client id %r although one was expected: "
                "messages published while the query was down may have been dropped by the "
                "broker (possible gap before WAL offset %d)",
                self.options.broker,
                self.options.client_id,
                self.wal.next_offset,
            )
        self._subscribe_new_filters(connected)
        pending = self.wal.qos2_pending
        # A 3.1 CONNACK carries no session-present flag: a persistent 3.1 session is assumed
        # to survive, as the session state machine assumes.
        unknown = (
            self.options.mqtt_version == ProtocolLevel.MQTT_3_1 and not self.options.clean_session
        )
        if not connected.session_present and not unknown and pending:
            # The broker forgot the session: it will never send PUBREL for these ids.
            self.wal.append([], released_qos2=sorted(pending))

    def _subscribe_new_filters(self, connected: Connected) -> None:
        """With a session present the driver does not subscribe again (that would make the
        broker resend retained messages on every restart). Filters added to the options since
        the session was made are subscribed here; the set lives in the WAL directory."""
        record = Path(self.options.wal_path) / SUBSCRIPTIONS_FILE
        wanted = {topic: self.options.qos for topic in self.options.topics}
        try:
            known = json.loads(record.read_text()) if record.exists() else None
        except (OSError, ValueError):
            known = None
        if connected.session_present and known is not None:
            missing = [(t, q) for t, q in wanted.items() if known.get(t) != q]
            if missing:
                log.info("subscribing to filters new to this session: %s", missing)
                self.client.session.subscribe(missing, self.client.clock())
                self.client.flush()
            dropped = sorted(set(known) - set(wanted))
            if dropped:
                log.warning(
                    "the broker session still holds subscriptions no longer in the options "
                    "(%s); use a new clientId to drop them",
                    ", ".join(dropped),
                )
        elif connected.session_present and known is None and self.options.topics:
            # A session we know nothing about (e.g. a new WAL): make sure the filters exist.
            self.client.session.subscribe(list(wanted.items()), self.client.clock())
            self.client.flush()
        tmp = record.with_suffix(".tmp")
        # Owner-only, like every file of the WAL directory.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(wanted, sort_keys=True))
        os.replace(tmp, record)

    def committed_to(self, offset: int) -> None:
        """Spark committed everything below ``offset``: free the WAL and lift backpressure."""
        with self._cond:
            self.committed = max(self.committed, offset)
            self._cond.notify_all()
        self.wal.truncate_before(self.committed)

    def check(self) -> None:
        """Raise the receiver's fatal error, if any, in the caller's thread."""
        if self.error is not None:
            raise RuntimeError(f"the MQTT receiver failed: {self.error}") from self.error

    def wait_idle(self, idle: float, timeout: float | None = None) -> None:
        """Block until nothing arrived for ``idle`` seconds (the broker's queue is drained), or
        until the backlog bound pauses the receiver (the rest waits for the next run).

        A read whose messages are still being stored counts as arriving: the quiet time starts
        once they are acknowledged, so a slow append (large payloads, a slow disk) is not taken
        for a pause of the broker."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self.check()
                now = time.monotonic()
                quiet_for = now - self.last_activity
                if (quiet_for >= idle and not self._storing) or self._backlogged():
                    return
                if deadline is not None and now >= deadline:
                    return
                # While a read is stored, the end of its cycle notifies.
                wait = None if self._storing else idle - quiet_for
                if deadline is not None:
                    wait = deadline - now if wait is None else min(wait, deadline - now)
                self._cond.wait(wait)

    # ------------------------------------------------------------------ the loop

    def _backlogged(self) -> bool:
        return self.wal.next_offset - self.committed >= self.options.max_backlog_messages

    def _run(self) -> None:
        wal = self.wal
        client = self.client
        stats = self.stats
        resends = self.resends
        try:
            while not self._stop.is_set():
                if self._backlogged():
                    # Backpressure: leave the socket unread so TCP pushes back on the broker.
                    with self._cond:
                        self._cond.wait(0.5)
                    client.keep_alive_while_paused()
                    continue
                batch = client.poll(0.2)
                messages = batch.messages
                if messages:
                    self._storing = True
                else:
                    if not batch.released:
                        continue
                    if _gather_releases(client, batch):
                        stats.release_reads_gathered += 1
                records: list[RecordTuple]
                if any(m.dup or m.qos == 2 for m in messages):
                    # Verdicts on the DUP=1 QoS 1 messages, in order; confirming a WAL search
                    # hit may read on, adding to ``messages``.
                    resent = (
                        _qos1_resends(resends, client, batch)
                        if any(m.dup and m.qos == 1 for m in messages)
                        else None
                    )
                    now_us = time.time_ns() // 1000
                    records = []
                    for m in messages:
                        if m.qos == 2 and wal.is_qos2_pending(m.packet_id):  # type: ignore[arg-type]
                            stats.duplicates_dropped += 1
                            continue
                        if m.dup and m.qos:
                            if m.qos == 1:
                                stored = next(resent)  # type: ignore[arg-type]
                            else:
                                digest = record_digest(m.topic, m.payload)
                                stored = wal.latest_digest(m.packet_id) == digest  # type: ignore[arg-type]
                            if stored:
                                stats.duplicates_dropped += 1
                                continue
                        records.append(
                            (m.topic, m.payload, m.qos, m.retain, m.dup, m.packet_id, now_us)
                        )
                else:  # nothing to check: QoS 0/1 first deliveries
                    now_us = time.time_ns() // 1000
                    # Plain tuples in NewRecord's field order: a NamedTuple costs 5x more to build.
                    records = [
                        (m.topic, m.payload, m.qos, m.retain, False, m.packet_id, now_us)
                        for m in messages
                    ]
                wal.append(records, released_qos2=batch.released)
                stats.appended += len(records)
                client.acknowledge(messages, batch.released)
                with self._cond:
                    if messages:  # a QoS 2 release is not a message: the queue may be empty
                        self.last_activity = time.monotonic()
                        self._storing = False
                    self._cond.notify_all()
        except BaseException as exc:  # reported to Spark through check()
            log.error("MQTT receiver stopped: %s", exc)
            with self._cond:
                self.error = exc
                self._cond.notify_all()
            client.close()
        # On a normal stop the connection stays open for stop() to send DISCONNECT.
