"""The first run: making a query's broker session ahead of it, so that the broker queues for
the query from that moment.

A broker queues messages only for a session that exists (MQTT 3.1.1 section 3.1.2.4, MQTT 5.0
section 3.1.2.11.2): before a query's first connection there is none, and whatever is
published until its receiver's SUBACK is never delivered to it. :func:`create_session` runs
each receiver of the query for a moment: it connects with the receiver's client id and a
persistent session, subscribes, waits for SUBACK, stores and acknowledges what the broker sends
at once (retained messages) under the receiver's own rule (durable, then acknowledged), and
disconnects. The session then holds the subscriptions, recorded beside the WAL, and the broker
queues for the query; what was stored is in the WAL, read by the query's first batch. A
session whose WAL exists already was made by an earlier run and is left alone
(docs/delivery.md, "The first run").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from connector.options.source import InvalidOptionError, SourceOptions
from connector.receiver.receiver import Receiver
from connector.receiver.shards import drops_retained, shard_options
from connector.wal.opening import wal_identity

log = logging.getLogger(__name__)

SETTLE_IDLE_SECONDS = 0.2
"""After SUBACK, how long nothing must arrive before the session's first connection ends (the
broker sends retained messages right after SUBACK)."""

SETTLE_MAX_SECONDS = 2.0
"""The longest the first connection waits for that quiet; what is unacknowledged then comes
again to the query's receiver (QoS 1 and 2)."""


@dataclass(frozen=True, slots=True)
class SessionAhead:
    """One receiver's session as :func:`create_session` left it."""

    client_id: str
    filters: tuple[str, ...]
    created: bool
    """True: made now; False: an earlier run had made it (its WAL exists)."""
    stored: int = 0
    """Messages the broker sent at once (retained ones), stored in the WAL."""


def create_session(options: Mapping[str, str] | SourceOptions) -> list[SessionAhead]:
    """Make the broker session of a ``format("mqtt")`` query before its first run; once this
    returns, the broker queues every QoS 1 and 2 message on the query's filters for it.

    ``options`` are the query's options, as given to ``.options(...)`` (or parsed). Raises
    :class:`InvalidOptionError` for invalid options and for ``cleanSession`` true (the broker
    keeps no session then), and the client's errors (unreachable broker, refused
    credentials, refused subscription). Calling it again, or after the query ran, changes
    nothing."""
    parsed = options if isinstance(options, SourceOptions) else SourceOptions.parse(options)
    if parsed.clean_session:
        raise InvalidOptionError(
            "option 'cleanSession' is true: the broker keeps no session between connections, "
            "so none can be made ahead of the query"
        )
    if parsed.receivers == 1:
        return [_create_one(parsed, drop_retained=False)]
    return [
        _create_one(shard_options(parsed, index), drop_retained=drops_retained(parsed, index))
        for index in range(parsed.receivers)
    ]


def _create_one(options: SourceOptions, *, drop_retained: bool) -> SessionAhead:
    filters = tuple(options.topics)
    if wal_identity(options.wal_path) is not None:
        log.info(
            "the broker session of client id %r was made by an earlier run (WAL %s): the "
            "broker queues for this query",
            options.client_id,
            options.wal_path,
        )
        return SessionAhead(options.client_id, filters, created=False)
    receiver = Receiver(options, drop_retained=drop_retained, ahead=True)
    receiver.start()
    try:
        receiver.wait_idle(SETTLE_IDLE_SECONDS, SETTLE_MAX_SECONDS)
    finally:
        receiver.stop()
    receiver.check()
    log.info(
        "subscribed to %s at %s as %r (QoS %d): the broker now queues for this query",
        ", ".join(filters),
        options.broker,
        options.client_id,
        options.qos,
    )
    return SessionAhead(
        options.client_id,
        tuple(topic for topic, _ in receiver.client.subscriptions),
        created=True,
        stored=receiver.stats.appended,
    )
