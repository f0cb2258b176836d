"""The ingest job's flags: one row each, the only place where a flag's name, kind, default,
config-file key and help are written. ``python -m streaming_jobs.ingest_flags`` prints
``docs/options.md`` (this table and the source's, :mod:`connector.options.table`).

Rules of a row: a flag that sets a source ``option`` takes that row's choices, type, default and
help unless it gives its own; ``also`` names other options it stands for in error messages.
``kind`` is ``value``, ``list`` (repeatable), ``pairs`` (repeatable ``KEY=VALUE``; a TOML table
too), ``names`` (comma-separated; a TOML list too), ``switch`` (``--x``/``--no-x``) or ``action``
(no value). The config-file key is the flag without its dashes (``-`` or ``_`` inside), unless
``config`` is false. ``shown`` is the default as ``--help`` and the docs give it; ``to_option``
turns the flag's value into the option's text (None: the option is left out).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from connector.mqtt.message_properties import FIELDS as PROPERTY_FIELDS
from connector.mqtt.negotiated import DEFAULT_MAXIMUM_PACKET_SIZE
from connector.options.table import OPTIONS, SPARK_KEYS, Option, markdown_cell
from connector.options.table import markdown as options_markdown
from streaming_jobs.compaction_policy import DEFAULT_SMALL_FILES, DEFAULT_TARGET_BYTES, parse_size

KINDS = ("value", "list", "pairs", "names", "switch", "action")
PAYLOAD_FORMATS = ("binary", "text", "json", "variant", "sparkplug")
_UNSET: Any = object()
"""``Flag.default`` not given: the option's default (a switch: on when that is true), or None."""


def _size(text: str) -> int:
    """A size flag's value (:func:`~streaming_jobs.compaction_policy.parse_size`)."""
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def interval(text: str) -> float | None:
    """``off``, or a duration such as ``24h``, ``30m``, ``90s``, ``1d``, in seconds."""
    value = text.strip().lower()
    if value == "off":
        return None
    try:
        seconds = float(value[:-1]) * _SECONDS[value[-1]]
    except (KeyError, ValueError, IndexError):
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (e.g. 24h, 30m, 90s, 1d, or off)"
        ) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive, got {text!r}")
    return seconds


def _text(value: Any) -> str | None:
    """The default ``to_option``: a value as option text; a false value (None, False, 0, empty)
    means none."""
    if not value:
        return None
    if value is True:
        return "true"
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag of the ingest job (rules in the module docstring)."""

    name: str
    group: str
    help: str = ""
    option: str | None = None
    also: tuple[str, ...] = ()
    kind: str = "value"
    metavar: str | None = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] = ()
    default: Any = _UNSET
    shown: str | None = None
    required: bool = False
    config: bool = True
    to_option: Callable[[Any], str | None] = _text

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"flag {self.name}: unknown kind {self.kind!r}")
        if self.option is not None and self.option not in OPTIONS:
            raise ValueError(f"flag {self.name}: no source option {self.option!r}")

    @property
    def dest(self) -> str:
        """The argparse name: the attribute of the job's settings."""
        return self.name[2:].replace("-", "_")

    @property
    def key(self) -> str | None:
        """The config-file key (also spelled with underscores); None: command line only."""
        return self.name[2:] if self.config else None

    @property
    def row(self) -> Option | None:
        """The source option's row, when the flag sets an option."""
        return OPTIONS[self.option] if self.option else None

    @property
    def values(self) -> tuple[str, ...]:
        """The accepted values, when they are few."""
        if self.choices or self.row is None or self.kind != "value":
            return self.choices
        return self.row.values

    @property
    def value_type(self) -> Callable[[str], Any] | None:
        """What argparse converts the value with: the flag's own, or the option's number kind."""
        if self.type is not None or self.values or self.row is None:
            return self.type
        return {"int": int, "seconds": float}.get(self.row.kind)

    @property
    def initial(self) -> Any:
        """The built-in default: the flag's own, or the option's (switches: off)."""
        if self.default is not _UNSET:
            return self.default
        if self.kind == "action":
            return False
        if self.kind == "switch":
            return self.row is not None and self.row.default == "true"
        if self.kind == "value" and self.row is not None:
            return self.row.default
        return None

    @property
    def help_text(self) -> str:
        """One line of Markdown: the flag's own help, or the option's."""
        if self.help or self.row is None:
            return self.help
        return self.row.help

    @property
    def default_text(self) -> str | None:
        """The default as the docs show it; None when there is none."""
        if self.required:
            return "required"
        if self.shown is not None or self.kind == "action":
            return self.shown
        value = self.initial
        if isinstance(value, bool):
            return "on" if value else "off"
        if value is None:
            return None
        return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"

    @property
    def synopsis(self) -> str:
        """The flag as the docs write it, e.g. ``--qos 0|1|2`` (Markdown)."""
        if self.kind == "switch":
            return f"`{self.name}` / `--no-{self.name[2:]}`"
        if self.kind == "action":
            return f"`{self.name}`"
        shown = "\\|".join(self.values) or self.metavar or self.dest.upper()
        return f"`{self.name} {shown}`"

    def add_to(self, group: argparse._ActionsContainer) -> None:
        """Add the flag to an argparse group. Its help is the Markdown help without backticks,
        then "(required)" or "(default: ...)"."""
        plain = self.help_text.replace("`", "").replace("%", "%%")
        if self.required:
            plain += " (required)"
        elif self.default_text is not None:
            plain += f" (default: {self.default_text.replace('`', '')})"
        kwargs: dict[str, Any] = {"help": plain}
        if self.kind == "switch":
            kwargs.update(action=argparse.BooleanOptionalAction, default=self.initial)
        elif self.kind == "action":
            kwargs.update(action="store_true")
        else:
            if self.kind in ("list", "pairs"):
                kwargs["action"] = "append"
            if self.initial is not None:
                kwargs["default"] = self.initial
            for name, value in (
                ("metavar", self.metavar),
                ("type", self.value_type),
                ("choices", list(self.values)),
            ):
                if value:
                    kwargs[name] = value
        group.add_argument(self.name, **kwargs)


def _on_off(on: Any) -> str:
    return "true" if on else "false"


def _number(value: Any) -> str | None:
    """A number flag as option text, 0 included (None: not given)."""
    return None if value is None else str(value)


def _sparkplug_only(value: Any) -> str | None:
    """``--payload-format`` as the source's ``payloadFormat``: only ``sparkplug`` changes the
    source's rows (binary, text and json are decoded by the job from the raw payload)."""
    return "sparkplug" if value == "sparkplug" else None


def _mqtt5_default(option: str) -> str:
    """How the docs give the default of an MQTT 5 option's flag: the option's (one home, the
    option table), which applies with ``--mqtt-version 5``; unset otherwise."""
    return f"with `--mqtt-version 5`: {OPTIONS[option].default_text}"


def _verify(insecure: Any) -> str | None:
    return "false" if insecure else None


MQTT, OUTPUT, RUN = "MQTT", "output", "run"

FLAGS: tuple[Flag, ...] = (
    Flag("--broker", MQTT, option="brokerUrl", metavar="URL", required=True),
    Flag("--topic", MQTT, "topic filter (`+` and `#` wildcards, `$share/group/filter`); repeat "
         "for several", option="topics", also=("topic",), kind="list", metavar="FILTER",
         required=True),
    Flag("--qos", MQTT, option="qos"),
    Flag("--client-id", MQTT, "MQTT client id (1 to 23 characters with `--mqtt-version 3.1`)",
         option="clientId", metavar="ID",
         shown="stable, derived from broker, topics and checkpoint"),
    Flag("--clean-session", MQTT, "no persistent session: the broker keeps nothing while the "
         "job is down", option="cleanSession", kind="switch", shown="a persistent session",
         to_option=_on_off),
    Flag("--mqtt-version", MQTT, option="mqttVersion"),
    Flag("--receive-maximum", MQTT, option="receiveMaximum", metavar="N", default=None,
         shown=_mqtt5_default("receiveMaximum"), to_option=_number),
    Flag("--session-expiry", MQTT, option="sessionExpiryInterval", metavar="SECONDS",
         default=None, shown=_mqtt5_default("sessionExpiryInterval"), to_option=_number),
    Flag("--topic-alias-maximum", MQTT, option="topicAliasMaximum", metavar="N", default=None,
         shown=_mqtt5_default("topicAliasMaximum"), to_option=_number),
    Flag("--max-packet-size", MQTT, option="maxPacketSize", metavar="BYTES", default=None,
         shown=f"`{DEFAULT_MAXIMUM_PACKET_SIZE}` (16 MiB) with `--mqtt-version 5`, else the "
         "protocol's largest", to_option=_number),
    Flag("--username", MQTT, option="username", metavar="NAME", shown="`$MQTT_USERNAME`"),
    Flag("--password-env", MQTT, "environment variable holding the password (never a flag: it "
         "would show in `ps`)", option="password", metavar="NAME", default="MQTT_PASSWORD"),
    Flag("--password-file", MQTT, "file whose first line is the password (e.g. a mounted "
         "secret); wins over `--password-env`", option="password", metavar="FILE"),
    Flag("--allow-password-over-plain-tcp", MQTT, "send the password over plain `tcp://` (any "
         "host, loopback included)", option="allowPasswordOverPlainTcp", kind="switch",
         shown="refused: use `ssl://`"),
    Flag("--cafile", MQTT, "CA bundle that signed the broker (TLS; needs an `ssl://`, "
         "`mqtts://` or `wss://` `--broker`, as `--certfile` and `--keyfile` do)",
         option="tls.caFile",
         metavar="FILE"),
    Flag("--certfile", MQTT, "client certificate (mutual TLS)", option="tls.certFile",
         metavar="FILE"),
    Flag("--keyfile", MQTT, "client private key (mutual TLS)", option="tls.keyFile",
         metavar="FILE"),
    Flag("--insecure", MQTT, "TLS without verifying the broker's certificate and host name "
         "(testing only; source option `tls.verify=false`)", option="tls.verify", kind="switch",
         default=False, to_option=_verify),
    Flag("--alpn", MQTT, "TLS ALPN protocols to offer, comma-separated, e.g. `x-amzn-mqtt-ca` "
         "(AWS IoT Core, MQTT on port 443)", option="tls.alpn", kind="names",
         metavar="PROTOCOLS"),
    Flag("--source-option", MQTT, "any other option of `format('mqtt')` (those without a job "
         "flag in the table of options), e.g. `keepAlive=30`; repeatable", kind="pairs",
         metavar="KEY=VALUE"),
    Flag("--table", OUTPUT, "Delta table of the messages", metavar="PATH", required=True),
    Flag("--checkpoint", OUTPUT, "checkpoint directory; also holds the write-ahead log "
         "(`<checkpoint>/mqtt-wal`)", metavar="PATH", required=True),
    Flag("--payload-format", OUTPUT, "binary: raw bytes in 'payload'; text: UTF-8 in 'text'; "
         "json: typed columns from `--schema` (with `--mqtt-version 5`, a message whose "
         "`contentType` is not JSON does not parse); variant: any JSON as a VARIANT column "
         "'payload' (query it with `variant_get` or `payload:path`; the raw bytes, when kept, "
         "in 'mqtt_payload'); sparkplug: Sparkplug B, one row per "
         "metric with names and datatypes from the births (docs/sparkplug.md)",
         option="payloadFormat", choices=PAYLOAD_FORMATS, default="binary",
         to_option=_sparkplug_only),
    Flag("--schema", OUTPUT, "with `--payload-format json` (required there): the payload's "
         "fields as Spark DDL, e.g. `'temp DOUBLE, status STRING, seq BIGINT NOT NULL'` (NOT "
         "NULL: a row lacking the field is a parse error)", metavar="DDL"),
    Flag("--keep-payload", OUTPUT, "text/json/variant: also keep the raw payload for rows "
         "that parsed", kind="switch", shown="only for rows that did not"),
    Flag("--topic-columns", OUTPUT, "topic levels as string columns, by position: `site,device` "
         "makes level 0 'site' and level 1 'device'; an empty name or `_` skips a level; a "
         "missing level is null", kind="names", metavar="NAMES"),
    Flag("--property-columns", OUTPUT, "with `--mqtt-version 5`: fields of the `properties` "
         f"column ({', '.join(f'`{name}`' for name in PROPERTY_FIELDS)}) copied to top-level "
         "columns of `--table` under the same names, e.g. `contentType,userProperties`; the "
         "table keeps `properties` as well", kind="names", metavar="NAMES"),
    Flag("--events-table", OUTPUT, "with `--payload-format sparkplug`: Delta table of the "
         "births, deaths and host STATE messages, one row each, with whether a death matched "
         "the session's bdSeq", metavar="PATH"),
    Flag("--sparkplug-reorder-timeout", OUTPUT, option="sparkplugReorderTimeout",
         metavar="SECONDS", type=float, default=None,
         shown=OPTIONS["sparkplugReorderTimeout"].default_text, to_option=_number),
    Flag("--sparkplug-host-id", OUTPUT, option="sparkplugHostId", metavar="ID"),
    Flag("--sparkplug-rebirth-interval", OUTPUT, option="sparkplugRebirthInterval",
         metavar="SECONDS", type=float, default=None,
         shown=OPTIONS["sparkplugRebirthInterval"].default_text, to_option=_number),
    Flag("--dead-letter-table", OUTPUT, "text/json/sparkplug: Delta table for rows whose "
         "payload does not parse (raw payload, MQTT columns, reason); without it they stay in "
         "`--table` with '_parse_error' (sparkplug: 'reason' and 'payload') set",
         metavar="PATH"),
    Flag("--partition-by", OUTPUT, "comma-separated partition columns of `--table`; 'date' "
         "adds the UTC receive date", kind="names", metavar="COLUMNS"),
    Flag("--cluster-by", OUTPUT, "comma-separated liquid clustering columns of a `--table` the "
         "job creates (instead of --partition-by; compaction clusters as it merges); 'date' "
         "adds the UTC receive date", kind="names", metavar="COLUMNS"),
    Flag("--table-checkpoint-interval", OUTPUT, "`delta.checkpointInterval` of the tables the "
         "job creates (the job checkpoints every 10 versions in the background); existing "
         "tables keep theirs", type=int, metavar="N",
         shown="`1000`, or the session's "
         "`spark.databricks.delta.properties.defaults.checkpointInterval` when set"),
    Flag("--log-retention", OUTPUT, "hours of history the Delta log of a table the job "
         "creates keeps (`delta.logRetentionDuration`): time travel and a downstream "
         "`readStream` reach that far back; the job removes older log files as it runs "
         "(docs/operations.md#table-maintenance); existing tables keep theirs. Below 168 the "
         "table's `delta.deletedFileRetentionDuration` gets the same (Delta keeps no log "
         "shorter than it), so VACUUM may delete replaced files that soon",
         type=float, metavar="HOURS", shown="`168`, or the session's "
         "`spark.databricks.delta.properties.defaults.logRetentionDuration` when set"),
    Flag("--compaction", OUTPUT, "compact the job's tables while it runs: tiered, with "
         "Delta's OPTIMIZE on a background thread (docs/operations.md#table-maintenance)",
         choices=("on", "off"), default="on"),
    Flag("--target-file-size", OUTPUT, "the file size compaction aims at (bytes, or with "
         "KiB, MiB, GiB)", type=_size, metavar="SIZE", default=DEFAULT_TARGET_BYTES,
         shown="`128MiB`"),
    Flag("--small-files", OUTPUT, "at most this many files below half the target size per "
         "partition, whatever the run's length, when no compaction is due", type=int,
         metavar="N", default=DEFAULT_SMALL_FILES),
    Flag("--vacuum-every", OUTPUT, "run VACUUM on the job's tables this often (e.g. 24h, 30m), "
         "or off: it deletes the files compaction replaced once no version within the "
         "retention names them", type=interval, metavar="DURATION", default=86400.0,
         shown="`24h`"),
    Flag("--vacuum-retention", OUTPUT, "hours a replaced file is kept for readers and time "
         "travel; below 168 Delta refuses unless `--spark-conf "
         "spark.databricks.delta.retentionDurationCheck.enabled=false`", type=float,
         metavar="HOURS", shown="each table's `delta.deletedFileRetentionDuration` (7 days)"),
    Flag("--merge-schema", OUTPUT, "let new `--schema` fields add columns to existing tables",
         kind="switch", shown="refuse"),
    Flag("--trigger", RUN, "`available-now` (drain what is queued, WAL and broker, then exit) "
         "or `processing-time=INTERVAL`", default="processing-time=1 second"),
    Flag("--progress", RUN, "with `--trigger available-now`: a line on stderr, rewritten in "
         "place, with the drain's messages, percent, rate and time left; `auto`: when stderr "
         "is a terminal (the log has the figures at most every 5 s either way)",
         choices=("auto", "always", "never"), default="auto"),
    Flag("--max-messages-per-trigger", RUN, option="maxMessagesPerTrigger", metavar="N",
         to_option=_number),
    Flag("--partition-data", RUN, "how tasks get the records: `inline` in the partitions (any "
         "cluster) or from the `wal` files (executors share the driver's disk)",
         option="partitionData", default=None, shown="`wal` in local mode, else `inline`"),
    Flag("--stop-timeout", RUN, "on SIGTERM/Ctrl-C, how long to wait for the batch in flight",
         type=float, default=60.0, metavar="SECONDS"),
    Flag("--metrics-port", RUN, "serve Prometheus metrics at `http://HOST:PORT/metrics` "
         "(docs/operations.md; 0: a free port, logged)", type=int, metavar="PORT"),
    Flag("--metrics-host", RUN, "the address `--metrics-port` listens on; `0.0.0.0` for "
         "every interface", metavar="HOST", default="127.0.0.1"),
    Flag("--master", RUN, "Spark master when spark-submit did not set one", metavar="URL",
         shown="spark-submit's, else `local[2]`"),
    Flag("--spark-conf", RUN, "Spark setting for the session; repeatable", kind="pairs",
         metavar="KEY=VALUE"),
    Flag("--log-level", RUN, "the job's own log: `INFO` gives progress lines and a summary, "
         "`DEBUG` adds Spark's stack traces and per-write timings", type=str.upper,
         choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO"),
    Flag("--spark-log-level", RUN, "Spark's log level", type=str.upper,
         choices=("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"), default="WARN"),
    Flag("--config", RUN, "TOML file of settings (keys: flag names without the dashes)",
         metavar="FILE", config=False),
    Flag("--print-config", RUN, "print the effective settings as JSON and exit (no password "
         "in it)", kind="action", config=False),
)  # fmt: skip
"""Every flag, in ``--help`` order; ``-h``/``--help`` is argparse's own."""

BY_DEST: Mapping[str, Flag] = {flag.dest: flag for flag in FLAGS}


def option_flags() -> dict[str, list[str]]:
    """The job's flags per source option they set or stand for."""
    out: dict[str, list[str]] = {}
    for flag in FLAGS:
        for option in (flag.option, *flag.also) if flag.option else ():
            out.setdefault(option, []).append(flag.name)
    return out


def _toml_form(flag: Flag) -> str:
    """The TOML values a config key takes, when more than one string or number."""
    return {
        "list": " (string or list)",
        "pairs": " (string, list or table)",
        "names": " (string or list)",
        "switch": " (true or false)",
    }.get(flag.kind, "")


def markdown() -> str:
    """``docs/options.md``: the source's options, then the job's flags and config keys."""
    required = ", ".join(f"`{f.name}`" for f in FLAGS if f.required)
    lines = [
        "# Options and flags",
        "",
        "<!-- Generated from connector/options/table.py and streaming_jobs/ingest_flags.py"
        " by `python -m streaming_jobs.ingest_flags > docs/options.md`; edit those, not this"
        " file. -->",
        "",
        '## Options of `format("mqtt")`',
        "",
        "Every invalid, missing or unknown option fails at `load()`, naming the option and the "
        "accepted values (for an unknown one, the closest names), before any connection is "
        "made. Names are case-insensitive. Spark itself passes "
        + ", ".join(f"`{key}`" for key in SPARK_KEYS)
        + " (from `load(path)`, `save(path)`, `start(path)` and a streaming write): they are "
        "accepted and not used. The job flag column names the ingest job's flag for the "
        "option; the job takes the others with `--source-option KEY=VALUE`.",
        "",
        options_markdown(option_flags()),
        '## Options of the MQTT writer (`write` and `writeStream` `.format("mqtt")`)',
        "",
        "Every invalid or unknown option, and every column the writer does not take, fails "
        "on the driver, naming it, before a message is sent: at `save()`, or with a streaming "
        "query's first batch; an option of the reader alone is refused. The columns and the "
        "delivery guarantees are in "
        'docs/delivery.md, "Writing to MQTT".',
        "",
        options_markdown(writer=True),
        "## Flags of the ingest job",
        "",
        f"Required: {required} (on the command line or in the config file). "
        "`python streaming_jobs/ingest.py --help` gives the same list.",
        "",
        "| flag | default | config key | meaning |",
        "|---|---|---|---|",
    ]
    for flag in FLAGS:
        key = f"`{flag.key}`{_toml_form(flag)}" if flag.key else "— (command line only)"
        cells = [flag.default_text or "—", key, flag.help_text]
        lines.append(f"| {flag.synopsis} | " + " | ".join(map(markdown_cell, cells)) + " |")
    lines += [
        "",
        "## Config file",
        "",
        "`--config FILE` reads settings from TOML. Keys are flag names without the leading "
        "dashes, spelled with dashes or underscores (`dead-letter-table` or "
        "`dead_letter_table`); the config key column gives each key and the TOML values it "
        "takes. Flags on the command line win over the file, the file over `MQTT_USERNAME`, "
        "and that over the defaults. An unknown key is an error naming it; a `password` key is "
        "refused (the password comes from the variable named by `password-env` or from "
        "`password-file`).",
        "",
        "The file may also hold `[[routes]]`: one subscription into many tables, each route a "
        "topic filter, a table and that table's keys (`payload_format`, `schema`, ...); see "
        '[ingest-job.md, "Routes"](ingest-job.md#routes).',
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown())
