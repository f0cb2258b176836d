"""A receiver's broker session: its settings, its subscriptions, and the record of the
subscriptions the session holds, kept beside the WAL (``SUBSCRIPTIONS_FILE``): with a session
present the receiver subscribes only to filters the record lacks, so the broker does not resend
retained messages on every restart (MQTT 3.1.1 section 3.8.4).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from connector.mqtt.config import SessionConfig
from connector.options.source import SourceOptions
from connector.receiver.sparkplug_host import HostRole
from connector.wal.opening import read_sidecar, write_sidecar

SUBSCRIPTIONS_FILE = "subscriptions.json"
"""The subscriptions the broker session holds, kept beside the WAL as JSON ``{filter: qos}``."""


def session_config(options: SourceOptions) -> SessionConfig:
    """The MQTT session of one receiver with ``options``."""
    return SessionConfig(
        client_id=options.client_id,
        clean_session=options.clean_session,
        keep_alive=options.keep_alive,
        username=options.username,
        password=options.password.encode() if options.password is not None else None,
        level=options.mqtt_version,
        receive_maximum=options.receive_maximum,
        session_expiry_interval=options.session_expiry_interval,
        topic_alias_maximum=options.topic_alias_maximum,
        maximum_packet_size=options.max_packet_size,
    )


def subscriptions(options: SourceOptions) -> list[tuple[str, int]]:
    """(filter, QoS) of one receiver with ``options``: its filters and, as a Sparkplug host,
    its own STATE topic (:meth:`.sparkplug_host.HostRole.subscriptions`)."""
    wanted = [(topic, options.qos) for topic in options.topics]
    if options.sparkplug_host_id is not None:
        wanted += HostRole(options).subscriptions(options.topics, options.qos)
    return wanted


def read_record(wal_path: str) -> dict[str, int] | None:
    """The subscriptions recorded beside the WAL at ``wal_path``; None when none are, or the
    record cannot be read."""
    try:
        raw = read_sidecar(wal_path, SUBSCRIPTIONS_FILE)
        known = None if raw is None else json.loads(raw)
    except (OSError, ValueError):
        return None
    return known if isinstance(known, dict) else None


def write_record(wal_path: str, wanted: Mapping[str, int]) -> None:
    """Record the subscriptions the broker session holds beside the WAL at ``wal_path``."""
    write_sidecar(wal_path, SUBSCRIPTIONS_FILE, json.dumps(dict(wanted), sort_keys=True).encode())
