"""Options of ``spark.readStream.format("mqtt")``, parsed once into a typed object.

Every invalid or missing option raises :class:`InvalidOptionError` naming the option and the
accepted values, before any connection is made. Option names are case-insensitive (Spark passes
them lower-cased). The password is kept out of ``repr`` and is never logged. Names, kinds,
defaults, ranges, choices, the field each option fills and what it applies only with come from
:mod:`connector.options.table`: the simple options are read, refused where their
requirement fails and shown by ``redacted`` in loops over its rows. What depends on several
options (topics, client id, credentials, TLS, receivers, Sparkplug's sharding and host, the
persistent session) is checked here.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from connector.mqtt.address import ACCEPTED_URLS, BrokerAddress
from connector.mqtt.config import persistent_session_problem
from connector.mqtt.errors import MalformedPacket
from connector.mqtt.packets import ProtocolLevel
from connector.mqtt.tls import TlsOptions, validate_alpn
from connector.mqtt.topics import SHARE_PREFIX, validate_topic_filter
from connector.options.table import (
    OPTIONS,
    SPARK_KEYS,
    Option,
    canonical_name,
    requiring,
)
from connector.options.table import RECORDS_PER_PARTITION as RECORDS_PER_PARTITION
from connector.wal.location import WalLocationError, parse_location


class InvalidOptionError(ValueError):
    """An option of the ``mqtt`` source is missing or has an invalid value."""


def _bool(row: Option, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"option {row.name!r} must be true or false, got {value!r}")


def _int(row: Option, value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise InvalidOptionError(f"option {row.name!r} must be an integer, got {value!r}") from None
    low, high = row.low, row.high
    if (low is not None and number < low) or (high is not None and number > high):
        raise InvalidOptionError(f"option {row.name!r} must be {row.bounds}, got {number}")
    return number


def _seconds(row: Option, value: str) -> float:
    try:
        number = float(value.strip())
    except ValueError:
        raise InvalidOptionError(
            f"option {row.name!r} must be a number of seconds, got {value!r}"
        ) from None
    low = row.low if row.low is not None else 0.0
    if number < low or number != number:
        raise InvalidOptionError(f"option {row.name!r} must be >= {low} seconds, got {value!r}")
    return number


def _choice(row: Option, value: str) -> str:
    text = value.strip().lower()
    if text not in row.choices:
        raise InvalidOptionError(
            f"option {row.name!r} must be one of {', '.join(row.choices)}, got {value!r}"
        )
    return text


def _version(row: Option, value: str) -> ProtocolLevel:
    try:
        return ProtocolLevel.parse(value)
    except ValueError:
        choices = f"{', '.join(row.choices[:-1])} or {row.choices[-1]}"
        raise InvalidOptionError(f"option {row.name!r} must be {choices}, got {value!r}") from None


_READERS: dict[str, Callable[[Option, str], Any]] = {
    "bool": _bool,
    "int": _int,
    "seconds": _seconds,
    "choice": _choice,
    "version": _version,
}


def typed_option(opts: Mapping[str, str], name: str) -> Any:
    """Option ``name`` read as its row says (kind, range or choices). Absent, or empty when the
    row has no default, it is the row's default; None when there is none. Text kinds are
    returned as given."""
    row = OPTIONS[name]
    text = opts.get(name)
    if text is None or (not text and row.default is None):
        text = row.default
    if text is None:
        return None
    reader = _READERS.get(row.kind)
    return text if reader is None else reader(row, text)


_TYPED_KINDS = frozenset((*_READERS, "text"))
"""The kinds :func:`typed_option` reads by themselves; the fields of the others (URL, topic
filters, secret, WAL path, files) are worked out from several options."""

_CONDITIONS: Mapping[str, Callable[[Callable[[str], Any]], bool]] = {
    "mqtt5": lambda value: bool(value("mqtt_version") == ProtocolLevel.MQTT_5),
    "sparkplug": lambda value: bool(value("payload_format") == "sparkplug"),
    "sparkplugHostId": lambda value: value("sparkplug_host_id") is not None,
    "shards": lambda value: bool(value("receivers") > 1),
    "shared": lambda value: bool(value("shard_by") == "share"),
}
"""When each requirement of the table (``connector.options.table.REQUIREMENTS``) holds, on the
values of the SourceOptions fields (``value(field)``)."""


def _applies(row: Option, value: Callable[[str], Any]) -> bool:
    """Whether option ``row`` applies: each of its requirements holds on the fields' values."""
    return all(_CONDITIONS[need](value) for need in row.requirements)


def table_fields(
    opts: Mapping[str, str], worked_out: Mapping[str, Any], *, writer: bool = False
) -> dict[str, Any]:
    """The fields of ``SourceOptions`` (``writer``: ``SinkOptions``): ``worked_out``, what the
    checks made of several options, and the field of every other option of that side, read as
    its row says (:func:`typed_option`). A field whose option does not apply (its requirement
    fails) is left out, to its default: None for the MQTT 5 options below level 5."""
    values = dict(worked_out)
    read: list[tuple[Option, str]] = []
    for row in OPTIONS.values():
        name = row.sink_field if writer else row.source_field
        if name is None or name in worked_out:
            continue
        if row.kind not in _TYPED_KINDS:
            raise TypeError(f"option {row.name!r} ({row.kind}): field {name!r} is not worked out")
        values[name] = typed_option(opts, row.name)
        read.append((row, name))
    for name in [name for row, name in read if not _applies(row, values.__getitem__)]:
        del values[name]
    return values


def _refuse_unmet(opts: Mapping[str, str], requirement: str, why: str) -> None:
    """Refuse the first option given that applies only with ``requirement``, which fails:
    "option <name> <why>"."""
    for name in requiring(requirement):
        if name in opts:
            raise InvalidOptionError(f"option {name!r} {why}")


def _default(name: str) -> Any:
    """Option ``name``'s default from the table, parsed: the field defaults of SourceOptions."""
    return typed_option({}, name)


def default_client_id(broker: str, topics: tuple[str, ...], wal_path: str | None) -> str:
    """A stable client id (23 characters, valid for 3.1) derived from what identifies the query."""
    seed = "\n".join([broker, *topics, wal_path or ""]).encode()
    return "spark-mqtt-" + hashlib.sha256(seed).hexdigest()[:12]


_SPARK_KEYS = frozenset(key.lower() for key in SPARK_KEYS)


def _unknown(key: str, writer: bool) -> InvalidOptionError:
    """The error for an option the table does not know, with the closest names of its side."""
    names = [name for name, row in OPTIONS.items() if (row.writes if writer else row.reads)]

    def squeezed(name: str) -> str:
        return re.sub(r"[^a-z0-9]", "", name.lower())

    by_squeezed = {squeezed(name): name for name in names}
    close = [by_squeezed[n] for n in difflib.get_close_matches(squeezed(key), by_squeezed, n=3)]
    side = "writer" if writer else "reader"
    hint = f" (did you mean {' or '.join(repr(n) for n in close)}?)" if close else ""
    return InvalidOptionError(
        f"unknown option {key!r}{hint}: the {side}'s options are listed in docs/options.md"
    )


def canonical_options(raw: Mapping[str, str], *, writer: bool = False) -> dict[str, str]:
    """``raw`` under the table's names (any key case). A key the table does not know is
    refused, with the closest known names, except the keys Spark passes itself
    (``connector.options.table.SPARK_KEYS``), which are left out; so is an option of the other
    side (a reader's option given to the writer, or the other way round)."""
    opts: dict[str, str] = {}
    for key, value in raw.items():
        canonical = canonical_name(key)
        if canonical is None:
            if key.lower() in _SPARK_KEYS:
                continue
            raise _unknown(key, writer)
        row = OPTIONS[canonical]
        if not (row.writes if writer else row.reads):
            theirs, ours = ("reader", "writer") if writer else ("writer", "reader")
            raise InvalidOptionError(
                f"option {canonical!r} is an option of the {theirs} (docs/options.md); the "
                f"{ours} does not take it"
            )
        opts[canonical] = value
    return opts


def parse_broker(opts: Mapping[str, str]) -> BrokerAddress:
    """``brokerUrl``, required."""
    url = opts.get("brokerUrl")
    if not url:
        raise InvalidOptionError(
            "option 'brokerUrl' is required, e.g. tcp://broker:1883 or ssl://broker:8883"
        )
    if "://" not in url:
        # A bare host:port would mean plain TCP, which a user of a TLS port did not ask for.
        raise InvalidOptionError(
            f"option 'brokerUrl' {url!r} has no scheme: give tcp://{url} (plain TCP) or "
            f"ssl://{url} (TLS); accepted: {ACCEPTED_URLS}"
        )
    try:
        return BrokerAddress.parse(url)
    except ValueError as exc:
        raise InvalidOptionError(f"option 'brokerUrl': {exc}") from None


def parse_credentials(
    opts: Mapping[str, str], broker: BrokerAddress
) -> tuple[str | None, str | None]:
    """``username`` and ``password``; a password goes only over TLS unless
    ``allowPasswordOverPlainTcp``."""
    username = opts.get("username") or None
    password = opts.get("password")
    if password is not None and username is None:
        raise InvalidOptionError("option 'password' needs option 'username'")
    allow_plain = typed_option(opts, "allowPasswordOverPlainTcp")
    # No exemption, not even for loopback: a tunnel or a proxy can make a local port reach
    # another machine, and the rule is simpler to state and audit.
    if password is not None and not broker.tls and not allow_plain:
        raise InvalidOptionError(
            f"option 'password' would be sent unencrypted to {broker}; use an ssl://, "
            "mqtts:// or wss:// 'brokerUrl', or set option 'allowPasswordOverPlainTcp' to "
            "true to send it over plain TCP anyway"
        )
    return username, password


def parse_tls(opts: Mapping[str, str], broker: BrokerAddress) -> TlsOptions | None:
    """The ``tls.*`` options: only with a TLS ``brokerUrl``; the files must exist."""
    tls_keys = [name for name in OPTIONS if name.startswith("tls.")]
    if not broker.tls:
        if any(key in opts for key in tls_keys):
            raise InvalidOptionError(
                "tls.* options need an ssl://, mqtts:// or wss:// 'brokerUrl', got " + str(broker)
            )
        return None
    for key in ("tls.caFile", "tls.certFile", "tls.keyFile"):
        if key in opts and not Path(opts[key]).is_file():
            raise InvalidOptionError(f"option {key!r}: no such file {opts[key]!r}")
    if ("tls.certFile" in opts) != ("tls.keyFile" in opts):
        raise InvalidOptionError("options 'tls.certFile' and 'tls.keyFile' go together")
    alpn: tuple[str, ...] = ()
    if "tls.alpn" in opts:
        try:
            alpn = validate_alpn(name.strip() for name in opts["tls.alpn"].split(","))
        except ValueError as exc:
            raise InvalidOptionError(f"option 'tls.alpn': {exc}") from None
    return TlsOptions(
        opts.get("tls.caFile"),
        opts.get("tls.certFile"),
        opts.get("tls.keyFile"),
        typed_option(opts, "tls.verify"),
        alpn,
    )


def default_wal_root() -> Path:
    """Where WALs go when ``walPath`` is not given: ``$MQTT_WAL_ROOT`` or ~/.cache/..."""
    root = os.environ.get("MQTT_WAL_ROOT")
    if root:
        return Path(root)
    return Path.home() / ".cache" / "spark-mqtt-wal"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Validated options of one ``mqtt`` stream; field defaults are the table's defaults."""

    broker: BrokerAddress
    topics: tuple[str, ...]
    qos: int = _default("qos")
    client_id: str = ""
    clean_session: bool = _default("cleanSession")
    mqtt_version: ProtocolLevel = field(default=_default("mqttVersion"))
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    keep_alive: int = _default("keepAlive")
    connect_timeout: float = _default("connectTimeout")
    wal_path: str = ""
    wal_path_given: bool = True
    """False: ``walPath`` was not given and ``wal_path`` is the local default
    (:func:`default_wal_root`), which does not move with the checkpoint."""
    max_messages_per_trigger: int | None = None
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float = _default("maxTriggerDelay")
    first_batch_wait: float = _default("firstBatchWait")
    fail_on_data_loss: bool = _default("failOnDataLoss")
    max_backlog_messages: int = _default("maxBacklogMessages")
    available_now_idle_timeout: float = _default("availableNowIdleTimeout")
    available_now_max_wait: float = _default("availableNowMaxWait")
    partition_data: str = "inline"
    records_per_partition: int = _default("recordsPerPartition")
    tls: TlsOptions | None = None
    receivers: int = _default("receivers")
    shard_by: str = _default("shardBy")
    share_group: str = ""
    receive_maximum: int | None = None
    """MQTT 5 only (None below level 5): the option's value or the table's default."""
    session_expiry_interval: int | None = None
    """MQTT 5 only; None when not given: ``SessionConfig.expiry`` then follows
    ``cleanSession``."""
    topic_alias_maximum: int | None = None
    """MQTT 5 only (None below level 5): the option's value or the table's default."""
    max_packet_size: int | None = None
    """``maxPacketSize``; None when not given: ``SessionConfig.packet_limit`` then follows
    ``mqttVersion``."""
    payload_format: str = _default("payloadFormat")
    sparkplug_reorder_timeout: float = _default("sparkplugReorderTimeout")
    sparkplug_host_id: str | None = None
    """``sparkplugHostId``: the receiver acts as this Sparkplug host (None: it only reads)."""
    sparkplug_rebirth_interval: float = _default("sparkplugRebirthInterval")

    @property
    def sparkplug(self) -> bool:
        """Whether the rows are Sparkplug B metrics (``payloadFormat`` ``sparkplug``)."""
        return self.payload_format == "sparkplug"

    @property
    def mqtt5(self) -> bool:
        """Whether the stream speaks MQTT 5.0 (its rows then have a ``properties`` column)."""
        return self.mqtt_version == ProtocolLevel.MQTT_5

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SourceOptions:
        """Validate raw string options (any key case)."""
        opts = canonical_options(raw)
        broker = parse_broker(opts)

        topics = _parse_topics(opts)
        typed_option(opts, "qos")  # a bad QoS is reported before what follows, as always
        version = typed_option(opts, "mqttVersion")
        clean = typed_option(opts, "cleanSession")
        wal_path = opts.get("walPath") or ""
        if wal_path:
            try:
                parse_location(wal_path)
            except WalLocationError as exc:
                raise InvalidOptionError(f"option 'walPath': {exc}") from None
        client_id = opts.get("clientId") or default_client_id(str(broker), topics, wal_path)
        one = OPTIONS["receivers"].default or "1"
        several = opts.get("receivers", one).strip() != one
        if not opts.get("clientId") and version == ProtocolLevel.MQTT_3_1 and several:
            client_id = client_id[:20]  # room for the receivers' "-<i>" (3.1: 23 at most)
        if version == ProtocolLevel.MQTT_3_1 and not 1 <= len(client_id) <= 23:
            raise InvalidOptionError(
                f"option 'clientId' must be 1 to 23 characters with mqttVersion 3.1, "
                f"got {len(client_id)}"
            )
        if len(client_id.encode()) > 65535 or "\x00" in client_id:
            raise InvalidOptionError(
                "option 'clientId' must be UTF-8 up to 65535 bytes without U+0000"
            )
        wal_path_given = bool(wal_path)
        if not wal_path:
            wal_path = str(default_wal_root() / re.sub(r"[^A-Za-z0-9._-]", "_", client_id))

        username, password = parse_credentials(opts, broker)
        tls = parse_tls(opts, broker)

        min_messages = typed_option(opts, "minMessagesPerTrigger")
        max_messages = typed_option(opts, "maxMessagesPerTrigger")
        if min_messages and max_messages and min_messages > max_messages:
            raise InvalidOptionError(
                f"option 'minMessagesPerTrigger' ({min_messages}) must not exceed "
                f"'maxMessagesPerTrigger' ({max_messages})"
            )
        partition_data = typed_option(opts, "partitionData") or (
            "wal" if parse_location(wal_path).objects else "inline"
        )
        receivers, shard_by, share_group = _parse_shards(opts, topics, version, client_id)
        if typed_option(opts, "payloadFormat") == "sparkplug":
            check_sparkplug_sharding(topics, receivers, shard_by)
            _check_sparkplug_host(opts, receivers)
        else:
            _refuse_unmet(opts, "sparkplug", "applies only with option 'payloadFormat' sparkplug")
        for name in requiring("mqtt5"):
            typed_option(opts, name)  # each value against its range first, whatever the version
        if version != ProtocolLevel.MQTT_5:
            _refuse_unmet(
                opts,
                "mqtt5",
                f"is an MQTT 5 setting: it needs option 'mqttVersion' 5 (got {version})",
            )
        problem = persistent_session_problem(clean, typed_option(opts, "sessionExpiryInterval"))
        if problem:
            raise InvalidOptionError(
                f"option 'sessionExpiryInterval' 0 with 'cleanSession' false: {problem}"
            )
        worked_out = {
            "broker": broker,
            "topics": topics,
            "client_id": client_id,
            "wal_path": wal_path,
            "wal_path_given": wal_path_given,
            "username": username,
            "password": password,
            "tls": tls,
            "partition_data": partition_data,
            "receivers": receivers,
            "shard_by": shard_by,
            "share_group": share_group,
        }
        return cls(**table_fields(opts, worked_out))

    def applies(self, row: Option) -> bool:
        """Whether option ``row`` applies to this stream: what it requires holds (MQTT 5,
        Sparkplug, a Sparkplug host, several receivers, shared subscriptions)."""
        return _applies(row, partial(getattr, self))

    def redacted(self) -> dict[str, str]:
        """The options as text for logs and plans: every reader's option with a field, but
        those that do not apply or have no value; secrets (the password) masked."""
        out = {}
        for row in OPTIONS.values():
            name = row.source_field
            if name is None or not self.applies(row):
                continue
            value = getattr(self, name)
            if value is not None:
                out[row.name] = REDACTED if row.secret else _text(value)
        return out


REDACTED = "*********(redacted)"
"""What ``SourceOptions.redacted`` shows for a secret."""


def _text(value: object) -> str:
    """A field's value as ``redacted`` shows it: ``true``/``false``, seconds as ``%g``, filters
    comma-separated."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def default_share_group(client_id: str) -> str:
    """The shared-subscription group of a query: its client id without ``/ + #``."""
    return re.sub(r"[/+#]", "_", client_id)


def _parse_shards(
    opts: Mapping[str, str], topics: tuple[str, ...], version: ProtocolLevel, client_id: str
) -> tuple[int, str, str]:
    """``receivers``, ``shardBy`` and ``shareGroup``, validated together: what is valid depends
    on the filters, the protocol level and the client id."""
    receivers = typed_option(opts, "receivers")
    shard_by = typed_option(opts, "shardBy")
    group = opts.get("shareGroup")
    if group is not None and (not group or any(c in group for c in "/+#\0")):
        raise InvalidOptionError(
            f"option 'shareGroup' must be a non-empty name without '/', '+', '#', got {group!r}"
        )
    if receivers == 1:
        return 1, shard_by, group or ""
    shared = [t for t in topics if t.startswith(SHARE_PREFIX)]
    if shared:
        raise InvalidOptionError(
            f"with option 'receivers' > 1 give plain topic filters, not {shared[0]!r}: the "
            "source makes the shared subscriptions itself (options 'shardBy', 'shareGroup')"
        )
    if shard_by == "share":
        if version == ProtocolLevel.MQTT_3_1:
            raise InvalidOptionError(
                "option 'shardBy' share (shared subscriptions, '$share/<group>/<filter>') needs "
                "option 'mqttVersion' 3.1.1 or 5; use shardBy=topics with MQTT 3.1"
            )
        return receivers, shard_by, group or default_share_group(client_id)
    if group is not None:
        raise InvalidOptionError("option 'shareGroup' applies only with option 'shardBy' share")
    if receivers > len(topics):
        raise InvalidOptionError(
            f"option 'shardBy' topics gives each receiver its own filters: option 'receivers' "
            f"({receivers}) must not exceed the number of filters in option 'topics' "
            f"({len(topics)})"
        )
    longest = f"{client_id}-{receivers - 1}"
    if version == ProtocolLevel.MQTT_3_1 and len(longest) > 23:
        raise InvalidOptionError(
            f"option 'clientId': receiver client ids such as {longest!r} must be at most 23 "
            "characters with mqttVersion 3.1; give a shorter clientId"
        )
    return receivers, shard_by, ""


def _check_sparkplug_host(opts: Mapping[str, str], receivers: int) -> None:
    """A host id is a topic level of its own ([tck-id-host-topic-phid-birth-topic]); one MQTT
    client is the host, so one receiver."""
    host_id = opts.get("sparkplugHostId")
    if host_id is None:
        _refuse_unmet(opts, "sparkplugHostId", "applies only with option 'sparkplugHostId'")
        return
    if not host_id or any(c in host_id for c in "/+#"):
        raise InvalidOptionError(
            f"option 'sparkplugHostId' must be a non-empty name without '/', '+', '#', got "
            f"{host_id!r}"
        )
    if receivers > 1:
        raise InvalidOptionError(
            "option 'sparkplugHostId' needs one receiver: a Sparkplug host is one MQTT client "
            f"(its STATE and its Will), and 'receivers' is {receivers}"
        )


def check_sparkplug_sharding(topics: tuple[str, ...], receivers: int, shard_by: str) -> None:
    """Sparkplug decodes an edge node's data from its births, in the order stored: every
    message of one edge node must reach one receiver (one WAL). A shared subscription spreads
    them over the group's members; with several receivers each filter must take whole edge
    nodes: every message type of the node and its devices (``spBv1.0/<group>/#``,
    ``spBv1.0/<group>/+/<edge node>/#``), or only STATE."""
    shared = [t for t in topics if t.startswith(SHARE_PREFIX)]
    if shared or (receivers > 1 and shard_by == "share"):
        raise InvalidOptionError(
            "option 'payloadFormat' sparkplug needs every message of an edge node in one "
            "receiver, and a shared subscription spreads them over its members"
            + (f" ({shared[0]!r})" if shared else " (shardBy share)")
            + ": use one receiver, or shardBy=topics with filters that take whole edge nodes "
            "(e.g. spBv1.0/<group>/#)"
        )
    if receivers == 1:
        return
    for topic in topics:
        levels = topic.split("/")
        state_only = "STATE" in levels[:2]
        whole_nodes = levels[-1] == "#" and (
            len(levels) <= 3 or (len(levels) <= 5 and levels[2] == "+")
        )
        if not (state_only or whole_nodes):
            raise InvalidOptionError(
                f"option 'topics': {topic!r} does not take whole edge nodes (every message "
                "type, the node's and its devices'), so with several receivers an edge node's "
                "births and data could reach different ones; give filters such as "
                "spBv1.0/<group>/# or spBv1.0/<group>/+/<edge node>/#"
            )


def _parse_topics(opts: Mapping[str, str]) -> tuple[str, ...]:
    if "topic" in opts and "topics" in opts:
        raise InvalidOptionError("give either option 'topic' or option 'topics', not both")
    if "topic" in opts:
        filters = [opts["topic"]]
    elif "topics" in opts:
        filters = [t.strip() for t in opts["topics"].split(",") if t.strip()]
    else:
        filters = []
    if not filters:
        raise InvalidOptionError(
            "option 'topic' (one filter) or 'topics' (comma-separated filters) is required, "
            "e.g. plant/+/telemetry"
        )
    for topic_filter in filters:
        try:
            validate_topic_filter(topic_filter)
        except MalformedPacket as exc:
            raise InvalidOptionError(f"option 'topic': {exc}") from None
    return tuple(filters)
