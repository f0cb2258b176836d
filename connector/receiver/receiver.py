"""The receiver: one MQTT connection feeding the write-ahead log, acking only what is durable.

It runs as a thread in the process that hosts the stream reader (Spark's Python streaming
source runner on the driver) for the lifetime of the query. Per socket read
(``Receiver._read``): read, store what the session delivered with one fsync, then
acknowledge it (PUBCOMP / PUBACK / PUBREC) in one write (``_persist_then_ack``). A read of
QoS 2 releases alone may first wait a moment for more (``_gather_releases``). At MQTT 5 each
message's properties are stored in its WAL record (:mod:`.wal_properties`), under the same
rule: acknowledged only once durable.

Which PUBLISH packets are resends of stored messages is decided once, by the session
(:mod:`connector.mqtt.session`, docs/delivery.md), from the pending QoS 2 ids this WAL holds
and from what it stored on the connection before. The receiver keeps nothing back on its own:
a message equal (packet id, topic, payload) to the latest stored with its id is stored and
counted as a possible duplicate (``ReceiverStats.possible_duplicates``), never dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from connector.mqtt.driver import MqttClient, Read
from connector.mqtt.errors import RepeatedProtocolViolation
from connector.mqtt.events import Connected
from connector.mqtt.packets import Publish
from connector.mqtt.session import ClientSession, State
from connector.options.source import SourceOptions
from connector.receiver.broker_session import read_record, session_config, write_record
from connector.receiver.broker_session import subscriptions as broker_subscriptions
from connector.receiver.figures import ArrivalIndex, RateMeter
from connector.receiver.sparkplug_host import HostRole
from connector.receiver.wal_properties import encode_for_wal
from connector.wal import RecordTuple, WalError, WalLockedError, record_digest
from connector.wal.opening import AnyWalWriter, open_reader, open_writer

log = logging.getLogger(__name__)

STOP_JOIN_SECONDS = 30.0
"""How long ``stop`` waits for the receiver loop to end before it disconnects anyway."""

PACKET_TOO_LARGE = 0x95
"""The reason code of a violation of our Maximum Packet Size (MQTT 5.0 section 3.1.2.11.4)."""

LOCK_WAIT_SECONDS = 15.0
"""How long a starting query waits for the WAL lock of a query that is still shutting down."""


def _open_wal(path: str) -> AnyWalWriter:
    """Open the WAL, waiting briefly while a stopping query's process still holds the lock
    (Spark ends the old source process asynchronously after ``query.stop()``)."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            return open_writer(path)
        except WalLockedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _join_read(poll: Callable[[float], Read], read: Read, timeout: float) -> Read:
    """Read once more on the same connection and add what came to ``read`` (its messages
    and releases are then stored and acknowledged with it); returns that read."""
    more = poll(timeout)
    read.messages.extend(more.messages)
    read.released.extend(more.released)
    return more


RELEASE_GATHER = 64
"""A read that brought QoS 2 releases and no message waits for more releases, up to this
many in hand, while at least this many further PUBRELs are owed (see ``_gather_releases``)."""

RELEASE_GATHER_WAIT = 0.001
"""The longest a read of releases waits for more before its append and PUBCOMPs."""


def _gather_releases(
    client: MqttClient, read: Read, poll: Callable[[float], Read] | None = None
) -> bool:
    """Join further reads to ``read`` (releases only so far) while many PUBRELs are still
    owed, so that one append, one fsync and one write complete them together; ``poll`` reads
    (default ``client.poll``). Returns whether it waited.

    Each release is persisted before its PUBCOMP (docs/architecture.md, decision 3: after
    PUBCOMP the broker may reuse the id), so every read of releases costs an fsync.
    A broker that sends a QoS 2 backlog at once, past its own inflight limit (docs/brokers.md),
    answers the PUBREC window's exchanges one PUBREL per write, and a read without waiting
    holds a few of them (figures in decision 29). A broker that keeps fewer exchanges
    open than ``RELEASE_GATHER`` (e.g. an inflight limit of 20) is never waited for, and the
    wait ends at the first message, so a live stream is not delayed."""
    owed = client.session.open_pubrecs - len(read.released)
    if owed < RELEASE_GATHER or read.messages:
        return False
    deadline = time.monotonic() + RELEASE_GATHER_WAIT
    while len(read.released) < RELEASE_GATHER and not read.messages and client.connected:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        _join_read(poll or client.poll, read, left)
    return True


class ReceiverFailed(RuntimeError):
    """The receiver stopped on an error (the broker's, the WAL's, the connection's), which
    its message names."""


class ReceiverStats:
    """Counters the receiver keeps for progress reports and tests."""

    __slots__ = (
        "_session",
        "appended",
        "connections",
        "possible_duplicates",
        "release_reads_gathered",
        "sessions_lost",
    )

    def __init__(self, session: ClientSession) -> None:
        self._session = session
        self.appended = 0
        self.possible_duplicates = 0
        """Messages stored that equal (packet id, topic, payload) the latest message stored
        before with their id: a broker's resend of a message whose acknowledgement it had not
        read when a connection dropped, or a repeated payload under a reused id."""
        self.sessions_lost = 0
        self.connections = 0
        self.release_reads_gathered = 0
        """Reads of QoS 2 releases that waited for more (``_gather_releases``)."""

    @property
    def duplicates_dropped(self) -> int:
        """Resends of stored messages the session withheld (the standard's rule)."""
        return self._session.redeliveries

    @property
    def broker_faults(self) -> dict[str, int]:
        """Broker faults survived, by rule (:class:`connector.mqtt.session.BrokerFault`)."""
        return {str(rule): count for rule, count in self._session.faults.items()}

    def as_dict(self) -> dict[str, object]:
        """The delivery counters and connection state (the rest: ``Receiver.figures``)."""
        return {
            "duplicatesDropped": self.duplicates_dropped,
            "possibleDuplicates": self.possible_duplicates,
            "brokerFaults": self.broker_faults,
            "connections": self.connections,
            "connected": self._session.state is State.CONNECTED,
        }


def sum_delivery(counters: list[dict[str, Any]]) -> dict[str, Any]:
    """Several receivers' ``ReceiverStats.as_dict`` counters added up."""
    faults: dict[str, int] = {}
    for one in counters:
        for rule, count in (one.get("brokerFaults") or {}).items():
            faults[rule] = faults.get(rule, 0) + int(count)
    return {
        "duplicatesDropped": sum(int(c.get("duplicatesDropped", 0)) for c in counters),
        "possibleDuplicates": sum(int(c.get("possibleDuplicates", 0)) for c in counters),
        "brokerFaults": faults,
    }


class Receiver:
    """Owns the WAL writer and the MQTT client of one ``mqtt`` stream.

    ``drop_retained``: PUBLISHes flagged retained are acknowledged as they are read and never
    stored (a shard that leaves them to another: :func:`.shards.drops_retained`).
    """

    def __init__(
        self, options: SourceOptions, *, drop_retained: bool = False, ahead: bool = False
    ) -> None:
        self.options = options
        self.drop_retained = drop_retained
        self.ahead = ahead
        """Making the session ahead of the query's first run (:mod:`.first_run`): no
        Sparkplug host role (no STATE birth and death), the subscription logged as such."""
        self.wal = _open_wal(options.wal_path)
        self.error: BaseException | None = None
        self.committed = self.wal.first_offset
        self.last_activity = time.monotonic()
        self._storing = False
        """A read that brought messages is being stored and acknowledged (``wait_idle``)."""
        self.frozen = False
        """``freeze`` ended the loop: the WAL takes nothing more."""
        self._duplicates_logged = -1
        """``stats.connections`` when possible duplicates were last logged."""
        self.arrivals = ArrivalIndex()
        """Receive times of this process's appends (the age of the oldest uncommitted)."""
        self._rate = RateMeter(time.monotonic())
        self._stored_stamp: tuple[int, int] | None = None
        self.subscribed = False
        """The broker holds this receiver's subscriptions (since its SUBACK, or found in a
        present session): it queues for the query from then on, even while disconnected
        unless the session is clean."""
        """(offset, receive time) of a record stored before this process, read once."""
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        config = session_config(options)
        host = options.sparkplug_host_id is not None and not ahead
        self.host = HostRole(options) if host else None
        """``sparkplugHostId``: the receiver is a Sparkplug host (:mod:`.sparkplug_host`)."""
        subscriptions = broker_subscriptions(options)
        session = ClientSession(config, matches_stored=self._matches_stored)
        session.restore_qos2_pending(self.wal.qos2_pending)
        session.expect_session_present = self.wal.next_offset > 0 and not options.clean_session
        self.stats = ReceiverStats(session)
        self.client = MqttClient(
            options.broker,
            session,
            subscriptions,
            tls=options.tls,
            connect_timeout=options.connect_timeout,
            on_connect=self._on_connect,
            stop_event=self._stop,
            will=None if self.host is None else self.host.will,
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
        self._end_loop(STOP_JOIN_SECONDS)
        try:
            if self.host is not None and not self.frozen:
                self.host.goodbye(self.client)
            self.client.disconnect()
        finally:
            self.wal.close()

    def freeze(self) -> int:
        """Stop taking messages for good and return the WAL's next offset: nothing is stored
        or acknowledged past it (the end of a ``Trigger.AvailableNow`` run).

        The loop ends after the read in hand is made durable and acknowledged; then the
        client sends DISCONNECT and closes, dropping unacknowledged what the socket still
        holds (``MqttClient.disconnect``). The broker keeps a persistent session's
        unacknowledged QoS 1 and 2 messages and sends them on the next connection (MQTT
        3.1.1 sections 3.1.2.4 and 4.4); QoS 0 messages in flight are lost, as QoS 0 allows.
        The WAL stays open for Spark's reads and commits until ``stop``. Raises the
        receiver's error, if any, or when the loop does not end in time."""
        client = self.client
        timeout = max(STOP_JOIN_SECONDS, 2 * (client.write_stall_timeout + client.connect_timeout))
        if not self._end_loop(timeout):
            raise RuntimeError(
                f"the MQTT receiver did not stop taking messages within {timeout:.0f} s"
            )
        self.check()
        self.frozen = True
        if self.host is not None:
            self.host.goodbye(client)
        client.disconnect()
        return self.wal.next_offset

    def _end_loop(self, timeout: float) -> bool:
        """Ask the receiver loop to end and wait up to ``timeout`` s; whether it ended (a
        loop ends only between reads: the read in hand is stored and acknowledged first)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _matches_stored(self, message: Publish) -> bool | None:
        """Whether ``message`` equals the latest message stored with its packet id (None:
        none stored). The session's question for a PUBLISH on a pending QoS 2 id."""
        pid = message.packet_id
        digest = None if pid is None else self.wal.latest_digest(pid)
        return None if digest is None else digest == record_digest(message.topic, message.payload)

    def _on_connect(self, connected: Connected) -> None:
        self.stats.connections += 1
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
        if connected.forgotten_qos2:
            # The broker forgot the session: it will never send PUBREL for these ids.
            self.wal.append([], released_qos2=connected.forgotten_qos2)
        if self.host is not None:
            self.host.born(self.client)

    def _subscribe_new_filters(self, connected: Connected) -> None:
        """With a session present the driver does not subscribe again (that would make the
        broker resend retained messages on every restart). Filters added to the options since
        the session was made are subscribed here; the set is recorded beside the WAL
        (:func:`.broker_session.write_record`)."""
        wanted = dict(self.client.subscriptions)
        known = read_record(self.options.wal_path)
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
        write_record(self.options.wal_path, wanted)
        self._report_subscribed(connected, first=known is None)

    def _report_subscribed(self, connected: Connected, *, first: bool) -> None:
        """Log that the broker now queues for this receiver; on a persistent session's first
        connection without a session made ahead, warn that nothing was queued before
        (docs/delivery.md, "The first run")."""
        self.subscribed = True
        filters = ", ".join(topic for topic, _ in self.client.subscriptions)
        if self.ahead:  # :func:`.first_run.create_session` says so
            log.debug(
                "subscribed to %s as %r ahead of the first run", filters, self.options.client_id
            )
        elif connected.session_present:
            log.info(
                "subscribed to %s at %s as %r (session present): the broker queues for this "
                "query while it is down",
                filters,
                self.options.broker,
                self.options.client_id,
            )
        elif self.options.clean_session:
            log.info(
                "subscribed to %s at %s as %r (clean session: nothing is queued while the "
                "query is down)",
                filters,
                self.options.broker,
                self.options.client_id,
            )
        elif not first and self.wal.next_offset == 0:
            log.warning(
                "the MQTT broker %s had no session for client id %r although one was made "
                "before: messages published while the query was down may have been dropped by "
                "the broker; subscribed to %s again",
                self.options.broker,
                self.options.client_id,
                filters,
            )
        elif first and self.wal.next_offset == 0:
            log.warning(
                "new MQTT session for client id %r at %s: the broker queued nothing for this "
                "query before now, so messages published to %s before this moment are not in "
                "the stream; to have the broker queue from before the first run, create the "
                "session ahead (connector.source.create_session, docs/delivery.md#the-first-run)",
                self.options.client_id,
                self.options.broker,
                filters,
            )
        else:
            log.info(
                "subscribed to %s at %s as %r: the broker queues for this query from now on",
                filters,
                self.options.broker,
                self.options.client_id,
            )

    def committed_to(self, offset: int) -> None:
        """Spark committed everything below ``offset``: free the WAL and lift backpressure."""
        with self._cond:
            self.committed = max(self.committed, offset)
            self._cond.notify_all()
        self.arrivals.forget_below(self.committed)
        self.check()  # a failed receiver reports its own error, not the writer's refusal
        self.wal.truncate_before(self.committed)

    def figures(self) -> dict[str, object]:
        """The counters and figures a progress report carries
        (:mod:`connector.spark.reader.progress_report`):
        ``ReceiverStats.as_dict`` and ``received`` (messages stored by this process),
        ``receiveRate`` (messages per second, :class:`.figures.RateMeter`),
        ``oldestUncommittedSeconds`` (0 with no backlog; None when unknown) and ``walBytes``."""
        figures = self.stats.as_dict()
        figures["received"] = self.stats.appended
        figures["receiveRate"] = round(self._rate.rate(time.monotonic()), 3)
        figures["oldestUncommittedSeconds"] = self._oldest_uncommitted_seconds()
        figures["walBytes"] = self.wal.stored_bytes
        figures["subscribed"] = self.subscribed and (
            not self.options.clean_session or self.client.connected
        )
        return figures

    def _oldest_uncommitted_seconds(self) -> float | None:
        """Seconds since the record at ``committed`` was received (0.0 when none waits)."""
        committed = self.committed
        if self.wal.next_offset <= committed:
            return 0.0
        stamp = self.arrivals.stamp_at(committed)
        if stamp is None:
            stamp = self._stamp_of_stored(committed)
        if stamp is None:
            return None
        return round(max(0.0, (time.time_ns() // 1000 - stamp) / 1e6), 3)

    def _stamp_of_stored(self, offset: int) -> int | None:
        """The receive time of a record stored before this process started, read from the
        WAL once per offset (None when the read fails: the figure is then unknown)."""
        if self._stored_stamp is not None and self._stored_stamp[0] == offset:
            return self._stored_stamp[1]
        try:
            columns = open_reader(self.options.wal_path).read(offset, offset + 1)
        except (OSError, WalError) as exc:
            log.debug("no receive time for WAL offset %d: %s", offset, exc)
            return None
        if not columns.pieces:
            return None
        piece = columns.pieces[0]
        stamp = int(piece.timestamps[piece.lo])
        self._stored_stamp = (offset, stamp)
        return stamp

    def check(self) -> None:
        """Raise the receiver's fatal error, if any, in the caller's thread."""
        error = self.error
        if error is None:
            return
        hint = ""
        if isinstance(error, RepeatedProtocolViolation) and error.code == PACKET_TOO_LARGE:
            hint = (
                f" (the broker keeps sending a message above the maximum packet size of "
                f"{self.client.session.config.packet_limit} bytes: raise the source option "
                "'maxPacketSize' above the largest message)"
            )
        raise ReceiverFailed(f"the MQTT receiver failed: {error}{hint}") from error

    def wait_idle(self, idle: float, timeout: float | None = None) -> None:
        """Block until nothing arrived for ``idle`` seconds (the broker's queue is drained), or
        until the backlog bound pauses the receiver (the rest waits for the next run), or at
        once when ``freeze`` ended the loop.

        A read whose messages are still being stored counts as arriving: the quiet time starts
        once they are acknowledged, so a slow append (large payloads, a slow disk) is not taken
        for a pause of the broker."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                self.check()
                now = time.monotonic()
                quiet_for = now - self.last_activity
                if (quiet_for >= idle and not self._storing) or self._backlogged() or self.frozen:
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
        client = self.client
        try:
            while not self._stop.is_set():
                if self._backlogged():
                    # Backpressure: leave the socket unread so TCP pushes back on the broker.
                    with self._cond:
                        self._cond.wait(0.5)
                    client.keep_alive_while_paused()
                    continue
                read = self._read()
                if read is not None:
                    self._persist_then_ack(read)
                if self.host is not None:
                    self.host.tick(client)
        except BaseException as exc:  # reported to Spark through check()
            log.error("MQTT receiver stopped: %s", exc)
            with self._cond:
                self.error = exc
                self._cond.notify_all()
            client.close()
        # On a normal stop the connection stays open for stop() to send DISCONNECT.

    def _read(self) -> Read | None:
        """One socket read (a read of QoS 2 releases alone may join more reads, see
        ``_gather_releases``); None when it brought nothing to store."""
        read = self._poll(0.2)
        if read.messages:
            self._storing = True
        elif not read.released:
            return None
        elif _gather_releases(self.client, read, self._poll):
            self.stats.release_reads_gathered += 1
        return read

    def _poll(self, timeout: float) -> Read:
        """One socket read; with ``drop_retained`` its retained PUBLISHes are acknowledged at
        once and left out. They are never stored, so acknowledging them first is safe; a QoS 2
        one's PUBREL then releases an id the WAL never held."""
        read = self.client.poll(timeout)
        if self.drop_retained:
            retained = [m for m in read.messages if m.retain]
            if retained:
                self.client.acknowledge(retained)
                read.messages = [m for m in read.messages if not m.retain]
                log.debug("dropped %d retained message(s) another shard stores", len(retained))
        return read

    def _persist_then_ack(self, read: Read) -> None:
        """Acknowledge only what is durable: the read's messages and QoS 2 releases are
        appended with one fsync, then acknowledged in one write (PUBCOMP, PUBACK, PUBREC).
        The only caller of ``MqttClient.acknowledge`` but for the retained messages ``_poll``
        drops."""
        messages = read.messages
        now_us = time.time_ns() // 1000
        if any(m.dup or m.qos == 2 for m in messages):
            self._count_possible_duplicates(messages)
        # Plain tuples in NewRecord's field order: cheaper to build than NamedTuples.
        records: list[RecordTuple]
        if self.options.mqtt5:
            records = _records_with_properties(messages, now_us)
        else:
            records = [
                (m.topic, m.payload, m.qos, m.retain, m.dup, m.packet_id, now_us) for m in messages
            ]
        first = self.wal.next_offset
        self.wal.append(records, released_qos2=read.released)
        self.stats.appended += len(records)
        if records:
            self.arrivals.note(first, now_us)
            self._rate.note(len(records), time.monotonic())
        self.client.acknowledge(messages, read.released)
        if self.host is not None and messages:
            self.host.stored(self.client, messages, now_us)
        with self._cond:
            if messages:  # a QoS 2 release is not a message: the queue may be empty
                self.last_activity = time.monotonic()
                self._storing = False
            self._cond.notify_all()

    def _count_possible_duplicates(self, messages: list[Publish]) -> None:
        """Count the resends (DUP=1) and QoS 2 messages about to be stored that equal the
        latest message stored with their packet id. They are stored all the same: after an
        acknowledgement was written a PUBLISH with its id is new (3.1.1 section 4.3), and
        payloads repeat. Logged once per connection."""
        matches = self._matches_stored
        found = sum(1 for m in messages if (m.dup or m.qos == 2) and matches(m))
        if not found:
            return
        self.stats.possible_duplicates += found
        if self._duplicates_logged != self.stats.connections:
            self._duplicates_logged = self.stats.connections
            log.info(
                "stored %d message(s) equal to the latest message stored with the same packet "
                "id: possible duplicates (a broker resends what it had not seen acknowledged "
                "when a connection dropped; a repeated payload under a reused id looks the "
                "same). Counted in possibleDuplicates (%d this run)",
                found,
                self.stats.possible_duplicates,
            )


def _records_with_properties(messages: list[Publish], now_us: int) -> list[RecordTuple]:
    """MQTT 5 messages as WAL records with their properties (:func:`.encode_for_wal`, MQTT
    5.0 section 3.3.2.3). The stream decoder shares one :class:`Properties` between the
    messages of a connection whose property bytes are equal, so each distinct one is encoded
    once per read (the messages keep the objects, and so their ids, alive meanwhile)."""
    encoded: dict[int, bytes] = {}
    records: list[RecordTuple] = []
    for m in messages:
        props = m.properties
        if props is None:
            raw = b""
        else:
            found = encoded.get(id(props))
            raw = encoded[id(props)] = encode_for_wal(props) if found is None else found
        records.append((m.topic, m.payload, m.qos, m.retain, m.dup, m.packet_id, now_us, raw))
    return records
