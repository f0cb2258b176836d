"""The options of ``spark.readStream.format("mqtt")``: one row each, the only place where an
option's name, kind, default, range or choices, help, field and requirement are written.

:mod:`connector.options.source` parses with these rows (names, defaults, ranges, choices, the
fields they fill, the options refused where their requirement fails, what ``redacted`` shows);
the ingest job's flags (:mod:`streaming_jobs.ingest_flags`) name the option they set and take
its choices, default and help from here; ``docs/options.md`` is generated from both tables
(``python -m streaming_jobs.ingest_flags > docs/options.md``).

Rules of a row: ``default`` is the text the source parses when the option is absent (``None``:
no value, or one worked out at parse time, which ``shown`` describes); ``low``/``high`` bound
``int`` and ``seconds`` options; ``choices`` are the accepted values of ``choice`` and
``version`` options; ``help`` is one line of Markdown. ``side`` says who takes the option:
the reader (``format("mqtt")`` as a source), the writer (``write``/``writeStream``), or both;
``write_help`` is what a shared option means to the writer when that differs. ``field`` is the
attribute of ``SourceOptions`` (a reader's option) or ``SinkOptions`` (a writer's) that the
option fills, the same name in both for a shared option unless ``write_field`` names the
writer's; none where the option only takes part in a value of several (``tls.*``). ``requires``
names what the option applies only with (:data:`REQUIREMENTS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from connector.mqtt.config import (
    DEFAULT_KEEP_ALIVE,
    DEFAULT_PUBLISH_WINDOW,
    DEFAULT_TOPIC_ALIAS_MAXIMUM,
)
from connector.mqtt.driver import DEFAULT_CONNECT_TIMEOUT
from connector.mqtt.negotiated import (
    DEFAULT_MAXIMUM_PACKET_SIZE,
    MAX_RECEIVE_MAXIMUM,
    MIN_MAXIMUM_PACKET_SIZE,
    PROTOCOL_MAXIMUM_PACKET_SIZE,
    SESSION_NEVER_EXPIRES,
)

KINDS = ("url", "filter", "filters", "text", "secret", "path", "file", "bool", "int", "seconds",
         "choice", "version")  # fmt: skip
"""How an option's value is read; ``accepted`` describes each for the docs."""

SIDES = ("read", "write", "both")
"""Who takes an option: the reader, the writer, or both."""

RECORDS_PER_PARTITION = 100_000
"""Default ``recordsPerPartition``: the most WAL records one Spark task reads (decision 30)."""

REQUIREMENTS: Mapping[str, str | None] = {
    "mqtt5": None,
    "sparkplug": None,
    "sparkplugHostId": "sparkplug",
    "shards": None,
    "shared": "shards",
}
"""What a row's ``requires`` may name, each with the requirement it has in turn: ``mqtt5``
(``mqttVersion`` 5: the option sets an MQTT 5.0 CONNECT property), ``sparkplug``
(``payloadFormat`` ``sparkplug``), ``sparkplugHostId`` (that option given, so Sparkplug too),
``shards`` (``receivers`` > 1) and ``shared`` (``shardBy`` ``share`` with several receivers).
The reader refuses an option given where its ``mqtt5``, ``sparkplug`` or ``sparkplugHostId``
fails; ``shardBy`` and ``shareGroup`` with one receiver are taken and unused (the shard check
refuses ``shareGroup`` with ``shardBy`` ``topics``). ``SourceOptions.redacted`` leaves out an
option whose requirement fails."""


@dataclass(frozen=True, slots=True)
class Option:
    """One option of the ``mqtt`` source (rules in the module docstring)."""

    name: str
    kind: str
    help: str
    default: str | None = None
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    shown: str | None = None
    secret: bool = False
    side: str = "read"
    write_help: str | None = None
    write_shown: str | None = None
    write_accepted: str | None = None
    field: str | None = None
    write_field: str | None = None
    requires: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name!r}: unknown kind {self.kind!r}")
        if self.side not in SIDES:
            raise ValueError(f"option {self.name!r}: unknown side {self.side!r}")
        if self.requires is not None and self.requires not in REQUIREMENTS:
            raise ValueError(f"option {self.name!r}: unknown requirement {self.requires!r}")

    @property
    def source_field(self) -> str | None:
        """The ``SourceOptions`` attribute the option fills (a reader's option only)."""
        return self.field if self.reads else None

    @property
    def sink_field(self) -> str | None:
        """The ``SinkOptions`` attribute the option fills (a writer's option only)."""
        return (self.write_field or self.field) if self.writes else None

    @property
    def requirements(self) -> tuple[str, ...]:
        """``requires`` and what it requires in turn: ``("sparkplugHostId", "sparkplug")``."""
        chain: list[str] = []
        need = self.requires
        while need is not None:
            chain.append(need)
            need = REQUIREMENTS[need]
        return tuple(chain)

    @property
    def reads(self) -> bool:
        return self.side in ("read", "both")

    @property
    def writes(self) -> bool:
        return self.side in ("write", "both")

    @property
    def bounds(self) -> str:
        """The range as validation messages give it: ``0..2`` or ``>= 1``."""
        if self.high is not None:
            return f"{self.low}..{self.high}"
        return f">= {self.low}"

    @property
    def values(self) -> tuple[str, ...]:
        """The accepted values as text when there are few: choices, or a small integer range."""
        if self.choices:
            return self.choices
        low, high = self.low, self.high
        if self.kind == "int" and low is not None and high is not None and high - low < 10:
            return tuple(str(n) for n in range(int(low), int(high) + 1))
        return ()

    @property
    def accepted(self) -> str:
        """What the option takes, in Markdown, for the docs."""
        if self.values:
            return " \\| ".join(f"`{value}`" for value in self.values)
        if self.kind == "int":
            return f"integer {self.bounds}"
        if self.kind == "seconds":
            return f"seconds >= {self.low:g}"
        return {
            "url": "URL",
            "filter": "topic filter",
            "filters": "topic filters, comma-separated",
            "text": "text",
            "secret": "text (secret)",
            "path": "directory or URI",
            "file": "file",
            "bool": "`true` \\| `false`",
        }[self.kind]

    @property
    def default_text(self) -> str:
        """The default as the docs show it."""
        if self.shown is not None:
            return self.shown
        return "none" if self.default is None else f"`{self.default}`"


OPTIONS: Mapping[str, Option] = {
    row.name: row
    for row in (
        Option("brokerUrl", "url",
               "broker URL: `tcp://host:port` (1883), `ssl://` or `mqtts://host:port` (8883); "
               "MQTT over WebSocket: `ws://host:port/path` (80) or `wss://` (443, TLS), path "
               "`/mqtt` when none is given, a query string sent but never shown",
               shown="required", side="both", field="broker"),
        Option("topic", "filter",
               "one topic filter (`+` and `#` wildcards, `$share/group/filter`)",
               shown="`topic` or `topics` required", side="both",
               write_help="the topic of every row; it wins over a `topic` column, as Kafka's "
               "`topic` option does", write_shown="a `topic` column or this option",
               write_accepted="topic name (no wildcards)", write_field="topic"),
        Option("topics", "filters", "several topic filters, comma-separated, as in `topic`",
               shown="`topic` or `topics` required", field="topics"),
        Option("qos", "int", "subscription QoS", default="1", low=0, high=2, side="both",
               write_help="QoS of the PUBLISH for rows without a `qos` column", field="qos"),
        Option("clientId", "text",
               "MQTT client id; 1 to 23 characters with `mqttVersion` 3.1",
               shown="derived: `spark-mqtt-` + a hash of broker, topics and WAL path (23 chars, "
               "valid for 3.1), the same on every run", side="both",
               write_help="prefix of the client ids of the writing tasks (one per task attempt, "
               "clean sessions)", write_shown="`spark-mqtt-w`",
               field="client_id", write_field="client_id_prefix"),
        Option("cleanSession", "bool",
               "`false`: a persistent session, the broker queues messages while the query is "
               "down; `true`: it keeps nothing", default="false", field="clean_session"),
        Option("mqttVersion", "version",
               "`3.1` (`MQIsdp`, level 3), `3.1.1` (`MQTT`, level 4) or `5` (MQTT 5.0, level "
               "5; also `5.0`), which adds the `properties` column (the output schema in the "
               "README)", default="3.1.1", choices=("3.1", "3.1.1", "5"), side="both",
               write_help="`3.1`, `3.1.1` or `5` (also `5.0`); with `5` the rows may have a "
               "`properties` column and carry the idempotency key", field="mqtt_version"),
        Option("payloadFormat", "choice",
               "`mqtt`: one row per message (the README's schema); `sparkplug`: Sparkplug B "
               "(topics `spBv1.0/...`), one row per metric with names and datatypes resolved "
               "from the births, and a row per event (docs/sparkplug.md)",
               default="mqtt", choices=("mqtt", "sparkplug"), field="payload_format"),
        Option("sparkplugReorderTimeout", "seconds",
               "with `payloadFormat` `sparkplug`: how long a skipped sequence number may take to "
               "arrive before the next message of its edge node is flagged (`seq_gap`, "
               "Sparkplug's Reorder Timeout), on the receive times stored in the WAL, so a "
               "replay flags the same rows", default="5", low=0.0,
               field="sparkplug_reorder_timeout", requires="sparkplug"),
        Option("sparkplugHostId", "text",
               "with `payloadFormat` `sparkplug`: act as the Sparkplug host application with "
               "this id (no `/`, `+`, `#`): publish STATE on `spBv1.0/STATE/<id>` (birth "
               "after each connect, death as the Will and on a clean stop) and ask edge nodes "
               "for a rebirth (NCMD `Node Control/Rebirth`) when their data cannot be resolved "
               "or sequence numbers stay missing (docs/sparkplug.md); one receiver only",
               shown="none: the source only reads",
               field="sparkplug_host_id", requires="sparkplug"),
        Option("sparkplugRebirthInterval", "seconds",
               "with `sparkplugHostId`: the least time between two rebirth requests to one "
               "edge node", default="30", low=0.0,
               field="sparkplug_rebirth_interval", requires="sparkplugHostId"),
        Option("receiveMaximum", "int",
               "MQTT 5 flow control (Receive Maximum, MQTT 5.0 section 3.1.2.11.3): the broker "
               "sends at most this many unacknowledged QoS 1/2 messages; the WAL's group commit "
               "acknowledges a socket read at a time, and nothing else caps what the receiver "
               "holds unacknowledged (`maxBacklogMessages` counts stored, acknowledged records "
               "and pauses reading the socket), hence the protocol's largest window",
               default=str(MAX_RECEIVE_MAXIMUM), low=1, high=MAX_RECEIVE_MAXIMUM,
               field="receive_maximum", requires="mqtt5"),
        Option("sessionExpiryInterval", "int",
               "MQTT 5: seconds the broker keeps the session (and queues messages for it) after "
               "the connection ends (MQTT 5.0 section 3.1.2.11.2); brokers may cap it; `0` "
               "(the session ends with each connection) only with `cleanSession` `true`",
               low=0, high=SESSION_NEVER_EXPIRES,
               shown=f"`0` with `cleanSession` `true`, else `{SESSION_NEVER_EXPIRES}` (never "
               "expires, the lifetime of a 3.1.1 persistent session)",
               field="session_expiry_interval", requires="mqtt5"),
        Option("topicAliasMaximum", "int",
               "MQTT 5: topic aliases the broker may set on the connection (MQTT 5.0 section "
               "3.1.2.11.5); a repeated topic then costs two bytes on the wire; off by default, "
               "as some brokers send stale aliases after a reconnect (docs/mqtt5.md)",
               default=str(DEFAULT_TOPIC_ALIAS_MAXIMUM), low=0, high=0xFFFF,
               field="topic_alias_maximum", requires="mqtt5"),
        Option("maxPacketSize", "int",
               "the largest MQTT packet, all of it, the receiver takes; with `mqttVersion` 5 "
               "it is sent as Maximum Packet Size and the broker discards a larger message "
               "for this client instead of sending it (MQTT 5.0 section 3.1.2.11.4, "
               "[MQTT-3.1.2-25]); a larger packet that comes anyway is refused (DISCONNECT "
               "0x95 at level 5), never acknowledged, and the query fails once the broker "
               "repeats it (docs/mqtt5.md)",
               low=MIN_MAXIMUM_PACKET_SIZE, high=PROTOCOL_MAXIMUM_PACKET_SIZE,
               shown=f"`{DEFAULT_MAXIMUM_PACKET_SIZE}` (16 MiB) with `mqttVersion` 5, else the "
               f"protocol's largest (`{PROTOCOL_MAXIMUM_PACKET_SIZE}`)", field="max_packet_size"),
        Option("username", "text", "user name", side="both", field="username"),
        Option("password", "secret",
               "password, with `username`; never logged, shown in plans or written to the WAL",
               secret=True, side="both", field="password"),
        Option("keepAlive", "int",
               "seconds; a dead broker is detected within 1.5 times the keep-alive",
               default=str(DEFAULT_KEEP_ALIVE), low=0, high=65535, side="both", field="keep_alive"),
        Option("connectTimeout", "seconds", "seconds for TCP, TLS and CONNACK",
               default=f"{DEFAULT_CONNECT_TIMEOUT:g}", low=0.001, side="both",
               field="connect_timeout"),
        Option("walPath", "path",
               "where the write-ahead log lives: a local directory (the ingest job puts it in "
               "the checkpoint) or shared storage, `s3://`, `gs://`, `abfs://`, `hdfs://`, "
               "`/Volumes/...` (docs/wal-storage.md)",
               shown="`$MQTT_WAL_ROOT/<clientId>` or `~/.cache/spark-mqtt-wal/<clientId>`",
               field="wal_path"),
        Option("maxMessagesPerTrigger", "int",
               "admission control: at most this many rows per micro-batch", low=1,
               field="max_messages_per_trigger"),
        Option("minMessagesPerTrigger", "int",
               "skip a trigger while fewer messages wait (bigger, cheaper batches), unless the "
               "last batch is `maxTriggerDelay` old; at most `maxMessagesPerTrigger`; not "
               "applied under `Trigger.AvailableNow`", low=1, field="min_messages_per_trigger"),
        Option("maxTriggerDelay", "seconds",
               "with `minMessagesPerTrigger`, the longest wait before a smaller batch runs anyway",
               default="15", low=0.0, field="max_trigger_delay"),
        Option("firstBatchWait", "seconds",
               "before a run's first batch, wait until the receivers' first burst (what the "
               "broker queued for the session while no query ran) pauses for 0.1 s (counted "
               "from the end of the last stored read, so a slow append is no pause), at most "
               "this long, so the first batch takes the queue instead of the few messages "
               "stored when Spark first asked; `0` turns it off; not applied under "
               "`Trigger.AvailableNow` (which waits for the queue anyway)",
               default="0.5", low=0.0, field="first_batch_wait"),
        Option("failOnDataLoss", "bool",
               "fail when the checkpoint points at WAL records that are gone (wiped or replaced "
               "WAL); `false` logs and continues from the oldest record", default="true",
               field="fail_on_data_loss"),
        Option("maxBacklogMessages", "int",
               "WAL records not yet committed by Spark before the receiver stops reading the "
               "socket (TCP backpressure)", default="1000000", low=1, field="max_backlog_messages"),
        Option("availableNowIdleTimeout", "seconds",
               "seconds without a message after which `Trigger.AvailableNow` considers the "
               "broker's queue drained", default="2", low=0.01, field="available_now_idle_timeout"),
        Option("availableNowMaxWait", "seconds",
               "`Trigger.AvailableNow` waits at most this long for that quiet moment (with "
               "steady traffic there is none) and then takes what the WAL holds",
               default="60", low=0.01, field="available_now_max_wait"),
        Option("partitionData", "choice",
               "`inline`: records travel inside the partitions, through the driver (any "
               "cluster); `wal`: tasks read the WAL themselves (a WAL on shared storage, or "
               "executors that see the driver's disk: local mode, a shared volume)",
               choices=("inline", "wal"),
               shown="`wal` for a WAL on shared storage, else `inline`", field="partition_data"),
        Option("recordsPerPartition", "int",
               "split a batch into the fewest near-equal partitions (tasks) of at most this "
               "many records: a batch of up to 100,000 is one task, since a second task on the "
               "same cores costs more CPU than it wins back (decision 30); lower it when "
               "executors elsewhere have idle cores",
               default=str(RECORDS_PER_PARTITION), low=1, field="records_per_partition"),
        Option("tls.caFile", "file",
               "CA bundle that signed the broker's certificate (needs an `ssl://`, `mqtts://` "
               "or `wss://` `brokerUrl`, as every `tls.*` option)", side="both"),
        Option("tls.certFile", "file", "client certificate for mutual TLS, with `tls.keyFile`",
               side="both"),
        Option("tls.keyFile", "file", "client private key for mutual TLS, with `tls.certFile`",
               side="both"),
        Option("tls.verify", "bool", "verify the broker's certificate and host name",
               default="true", side="both"),
        Option("tls.alpn", "text",
               "ALPN protocols the TLS handshake offers, comma-separated (1 to 255 printable "
               "ASCII characters each), e.g. `x-amzn-mqtt-ca` for AWS IoT Core's MQTT on port "
               "443 with a client certificate", side="both"),
        Option("allowPasswordOverPlainTcp", "bool",
               "a password over plain `tcp://` or `ws://` is refused, loopback included, unless "
               "this is `true`", default="false", side="both"),
        Option("receivers", "int",
               "receivers (processes) for this query, each with its own connection and WAL; see "
               "\"Scaling past one core\" in docs/operations.md", default="1", low=1, high=64,
               field="receivers"),
        Option("shardBy", "choice",
               "with `receivers` > 1: `share` (MQTT shared subscriptions, needs `mqttVersion` "
               "3.1.1 or 5) or `topics` (each filter to one receiver; `receivers` ≤ number of "
               "filters)", default="share", choices=("share", "topics"),
               field="shard_by", requires="shards"),
        Option("shareGroup", "text",
               "with `shardBy` `share`: the group in `$share/<group>/<filter>` (no `/`, `+`, "
               "`#`)", shown="the client id, `/`, `+` and `#` replaced by `_`",
               field="share_group", requires="shared"),
        Option("ignoreExtraColumns", "bool",
               "columns other than `topic`, `payload`, `qos`, `retain` and (with `mqttVersion` "
               "5) `properties` are an error unless this is `true`", default="false",
               side="write", field="ignore_extra_columns"),
        Option("idempotencyKey", "bool",
               "with `mqttVersion` 5: each message carries the user property `spark-mqtt-key` "
               "(`<write id>:<batch>:<partition>:<row>`), the same when a retried task or "
               "batch publishes the row again, so a consumer can drop the repeat "
               "(docs/delivery.md)", default="true", side="write", field="idempotency_key"),
        Option("maxInflight", "int",
               "QoS 1 and 2 messages a writing task keeps unacknowledged, at most; the "
               "broker's Receive Maximum lowers it with `mqttVersion` 5. A broker may "
               "acknowledge and drop what a 3.1.1 client sends over its own limit (Mosquitto's "
               "`max_inflight_messages`, 20 by default; docs/brokers.md)",
               default=str(DEFAULT_PUBLISH_WINDOW), low=1, high=65535, side="write",
               field="max_inflight"),
        Option("publishTimeout", "seconds",
               "how long a writing task waits for the broker to take its messages (a "
               "connection, the acknowledgements of QoS 1 and 2) before it fails",
               default="60", low=0.001, side="write", field="publish_timeout"),
    )
}  # fmt: skip
"""Every option by its canonical name, in the order the docs list them."""

SPARK_KEYS = ("path", "paths", "checkpointLocation", "queryName")
"""Keys Spark itself puts among a Python data source's options (it lower-cases every key):
``path``/``paths`` from ``load(path)``, ``save(path)`` and ``start(path)``, ``checkpointLocation``
and ``queryName`` on a streaming write. Accepted and not used; any other key the table does not
know is refused (tests/spark/test_source_options.py checks this list against Spark)."""

KNOWN_OPTIONS = tuple(OPTIONS)
SECRET_OPTIONS = frozenset(row.name for row in OPTIONS.values() if row.secret)


def requiring(requirement: str) -> tuple[str, ...]:
    """The options that apply only with ``requirement`` (directly or in turn), in table order:
    ``requiring("mqtt5")`` are the MQTT 5 options, ``requiring("sparkplug")`` Sparkplug's."""
    return tuple(name for name, row in OPTIONS.items() if requirement in row.requirements)


def canonical_name(key: str) -> str | None:
    """The option's canonical spelling (names are case-insensitive); None for unknown keys."""
    return _CANONICAL.get(key.lower())


_CANONICAL = {name.lower(): name for name in OPTIONS}


def markdown_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table: its ``|`` escaped."""
    return text.replace("|", "\\|")


def markdown(flags: Mapping[str, Iterable[str]] | None = None, *, writer: bool = False) -> str:
    """The reader's options as a Markdown table (``writer``: the writer's); ``flags`` adds a
    column: the job's flags per option."""
    flags = flags or {}
    head = ["option", "accepted", "default", *(["job flag"] if flags else []), "meaning"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in OPTIONS.values():
        if not (row.writes if writer else row.reads):
            continue
        default = row.write_shown if writer and row.write_shown else row.default_text
        accepted = row.write_accepted if writer and row.write_accepted else row.accepted
        cells = [f"`{row.name}`", accepted, markdown_cell(default)]
        if flags:
            cells.append(", ".join(f"`{flag}`" for flag in flags.get(row.name, ())) or "—")
        cells.append(markdown_cell(row.write_help if writer and row.write_help else row.help))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
