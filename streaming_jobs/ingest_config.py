"""Flags of the ingest job, the ``--config`` TOML file, and their validation.

Precedence, highest first: flags on the command line, keys of the ``--config`` file, the
environment (``MQTT_USERNAME``; the password only ever comes from the environment variable
named by ``--password-env`` or from ``--password-file``), built-in defaults. TOML keys are flag
names without the leading dashes, with dashes or underscores (``dead-letter-table`` or
``dead_letter_table``); an unknown key is an error naming it.

Everything here runs before Spark starts, so a bad flag fails in well under a second. Only
``--schema`` (Spark's DDL parser lives in the JVM) and column names that depend on it are
checked once the session is up.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from connector.source.options import KNOWN_OPTIONS, InvalidOptionError, SourceOptions

PAYLOAD_FORMATS = ("binary", "text", "json")
TRIGGER_RE = re.compile(r"^(available-now|processing-time=(?P<interval>.+))$")
COLUMN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SKIP_LEVEL = "_"
"""A ``--topic-columns`` name that skips its topic level (an empty name does too)."""
DATE_COLUMN = "date"
"""``--partition-by date`` adds this column: the UTC date the message was received."""
CLI_ONLY = frozenset({"config", "print_config", "help"})
SECRET_KEYS = frozenset({"password"})

EXAMPLES = """\
examples:
  # raw payloads (binary), QoS 2, from a local broker
  spark-submit streaming_jobs/ingest.py --broker tcp://localhost:1883 --topic 'plant/#' \\
      --qos 2 --table ./data/tables/raw --checkpoint ./data/checkpoints/raw

  # typed JSON columns, topic levels as columns, bad payloads to a dead-letter table,
  # partitioned by receive date
  python streaming_jobs/ingest.py --broker tcp://localhost:1883 --topic 'plant/+/+/telemetry' \\
      --payload-format json --schema 'device_ts TIMESTAMP, temp DOUBLE, status STRING' \\
      --topic-columns _,site,device --partition-by date \\
      --dead-letter-table ./data/tables/telemetry_dead_letters \\
      --table ./data/tables/telemetry --checkpoint ./data/checkpoints/telemetry

  # TLS with a client certificate, user name and password from the environment
  MQTT_USERNAME=ingest MQTT_PASSWORD=... python streaming_jobs/ingest.py \\
      --broker ssl://broker.example.com:8883 --cafile ca.pem --certfile client.pem \\
      --keyfile client.key --topic 'plant/#' --table ... --checkpoint ...

  # settings from a TOML file (keys are flag names), one of them overridden
  python streaming_jobs/ingest.py --config ingest.toml --trigger available-now

  # ingest.toml
  broker = "tcp://localhost:1883"
  topic = ["plant/+/telemetry", "plant/+/alarms"]
  table = "./data/tables/telemetry"
  checkpoint = "./data/checkpoints/telemetry"
  payload-format = "json"
  schema = "temp DOUBLE, status STRING"
  dead-letter-table = "./data/tables/telemetry_dead_letters"

SIGTERM or Ctrl-C stops after the batch in flight (a second one stops at once) and exits 0.
Exit status: 0 done, 1 the query or the broker connection failed, 2 bad flags or config.
"""


class UsageError(ValueError):
    """A flag, a config key or a combination of them is invalid (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that raises :class:`UsageError` instead of printing usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the epilog's layout; wider help column."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=36, width=100)


def build_parser() -> argparse.ArgumentParser:
    """The job's flags. ``parse_args`` of the result gives every flag its built-in default."""
    parser = _Parser(
        prog="python streaming_jobs/ingest.py",
        description=(
            "Stream MQTT messages into a Delta table with exactly-once delivery. Messages go\n"
            "to a write-ahead log in <checkpoint>/mqtt-wal before the broker gets their\n"
            "acknowledgement. Runs under spark-submit or plain python."
        ),
        epilog=EXAMPLES,
        formatter_class=_HelpFormatter,
    )
    mqtt = parser.add_argument_group("MQTT")
    mqtt.add_argument(
        "--broker", help="broker URL: tcp://HOST:PORT (1883), ssl:// or mqtts://HOST:PORT (8883)"
    )
    mqtt.add_argument(
        "--topic",
        action="append",
        metavar="FILTER",
        help="topic filter (+ and # wildcards, $share/GROUP/FILTER); repeat for several",
    )
    mqtt.add_argument(
        "--qos", default="1", choices=["0", "1", "2"], help="subscription QoS (default 1)"
    )
    mqtt.add_argument(
        "--client-id",
        help="MQTT client id (default: stable, derived from broker, topics and checkpoint)",
    )
    mqtt.add_argument(
        "--clean-session",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="no persistent session: the broker keeps nothing while the job is down "
        "(default: persistent)",
    )
    mqtt.add_argument(
        "--mqtt-version", default="3.1.1", choices=["3.1", "3.1.1"], help="default 3.1.1"
    )
    mqtt.add_argument("--username", help="user name (default: $MQTT_USERNAME)")
    mqtt.add_argument(
        "--password-env",
        default="MQTT_PASSWORD",
        metavar="NAME",
        help="environment variable holding the password (default MQTT_PASSWORD)",
    )
    mqtt.add_argument(
        "--password-file",
        metavar="FILE",
        help="file whose first line is the password (e.g. a mounted secret); wins over "
        "--password-env",
    )
    mqtt.add_argument(
        "--allow-password-over-plain-tcp",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="send the password over plain tcp:// (default: refused; use ssl:// instead)",
    )
    mqtt.add_argument("--cafile", metavar="FILE", help="CA bundle that signed the broker (TLS)")
    mqtt.add_argument("--certfile", metavar="FILE", help="client certificate (mutual TLS)")
    mqtt.add_argument("--keyfile", metavar="FILE", help="client private key (mutual TLS)")
    mqtt.add_argument(
        "--insecure",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="TLS without verifying the broker's certificate and host name (testing only)",
    )
    mqtt.add_argument(
        "--source-option",
        action="append",
        metavar="KEY=VALUE",
        help="any other option of format('mqtt'), e.g. keepAlive=30; repeatable",
    )

    out = parser.add_argument_group("output")
    out.add_argument("--table", metavar="PATH", help="Delta table of the messages (required)")
    out.add_argument(
        "--checkpoint",
        metavar="PATH",
        help="checkpoint directory; also holds the write-ahead log (required)",
    )
    out.add_argument(
        "--payload-format",
        default="binary",
        choices=PAYLOAD_FORMATS,
        help="binary: raw bytes in 'payload'; text: UTF-8 in 'text'; json: typed columns "
        "from --schema (default binary)",
    )
    out.add_argument(
        "--schema",
        metavar="DDL",
        help="with --payload-format json: the payload's fields as Spark DDL, e.g. "
        "'temp DOUBLE, status STRING, seq BIGINT NOT NULL' (NOT NULL: a row lacking the "
        "field is a parse error)",
    )
    out.add_argument(
        "--keep-payload",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="text/json: also keep the raw 'payload' column for rows that parsed "
        "(default: only for rows that did not)",
    )
    out.add_argument(
        "--topic-columns",
        metavar="NAMES",
        help="topic levels as string columns, by position: site,device makes level 0 'site' "
        "and level 1 'device'; an empty name or _ skips a level",
    )
    out.add_argument(
        "--dead-letter-table",
        metavar="PATH",
        help="text/json: Delta table for rows whose payload does not parse (raw payload, "
        "MQTT columns, reason); without it they stay in --table with '_parse_error' set",
    )
    out.add_argument(
        "--partition-by",
        metavar="COLUMNS",
        help="comma-separated partition columns of --table; 'date' adds the UTC receive date",
    )
    out.add_argument(
        "--table-checkpoint-interval",
        type=int,
        metavar="N",
        help="delta.checkpointInterval of the tables the job creates (default 1000, or the "
        "session's spark.databricks.delta.properties.defaults.checkpointInterval when set; "
        "the job checkpoints every 10 versions in the background); existing tables keep theirs",
    )
    out.add_argument(
        "--merge-schema",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="let new --schema fields add columns to existing tables (default: refuse)",
    )

    run = parser.add_argument_group("run")
    run.add_argument(
        "--trigger",
        default="processing-time=1 second",
        help="available-now (drain what is queued, then exit) or processing-time=INTERVAL "
        "(default: processing-time=1 second)",
    )
    run.add_argument(
        "--max-messages-per-trigger", type=int, metavar="N", help="at most N rows per batch"
    )
    run.add_argument(
        "--partition-data",
        choices=["inline", "wal"],
        help="how tasks get the records: inline in the partitions (any cluster) or read from "
        "the WAL (executors share the driver's disk; the default in local mode)",
    )
    run.add_argument(
        "--stop-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="on SIGTERM/Ctrl-C, how long to wait for the batch in flight (default 60)",
    )
    run.add_argument("--master", help="Spark master when spark-submit did not set one")
    run.add_argument(
        "--spark-conf",
        action="append",
        metavar="KEY=VALUE",
        help="Spark setting for the session; repeatable",
    )
    run.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the job's own log (default INFO: progress lines and summary)",
    )
    run.add_argument(
        "--spark-log-level",
        default="WARN",
        type=str.upper,
        choices=["ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"],
        help="Spark's log level (default WARN)",
    )
    run.add_argument("--config", metavar="FILE", help="TOML file of settings (keys: flag names)")
    run.add_argument(
        "--print-config",
        action="store_true",
        help="print the effective settings as JSON and exit",
    )
    return parser


@dataclass(frozen=True)
class IngestConfig:
    """The job's validated settings; attribute names are the flags' argparse names."""

    broker: str
    topic: tuple[str, ...]
    table: str
    checkpoint: str
    qos: str = "1"
    client_id: str | None = None
    clean_session: bool = False
    mqtt_version: str = "3.1.1"
    username: str | None = None
    password_env: str = "MQTT_PASSWORD"
    password_file: str | None = None
    allow_password_over_plain_tcp: bool = False
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    insecure: bool = False
    source_option: tuple[str, ...] = ()
    payload_format: str = "binary"
    schema: str | None = None
    keep_payload: bool = False
    topic_columns: tuple[str | None, ...] = ()
    dead_letter_table: str | None = None
    partition_by: tuple[str, ...] = ()
    merge_schema: bool = False
    table_checkpoint_interval: int | None = None
    trigger: str = "processing-time=1 second"
    max_messages_per_trigger: int | None = None
    partition_data: str | None = None
    stop_timeout: float = 60.0
    master: str | None = None
    spark_conf: tuple[str, ...] = ()
    log_level: str = "INFO"
    spark_log_level: str = "WARN"

    @property
    def trigger_interval(self) -> str | None:
        """The processing-time interval, or None for available-now."""
        match = TRIGGER_RE.match(self.trigger)
        assert match is not None  # checked by validate()
        return match.group("interval")

    @property
    def spark_settings(self) -> dict[str, str]:
        """``--spark-conf`` as a mapping."""
        return dict(_key_value("--spark-conf", item) for item in self.spark_conf)

    def as_dict(self) -> dict[str, Any]:
        """The settings keyed by flag name, for ``--print-config`` (no secret in it)."""
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "topic_columns":
                value = ",".join(name or "" for name in value) or None
            elif isinstance(value, tuple):
                value = list(value)
            out[item.name.replace("_", "-")] = value
        return out


def _key_value(flag: str, item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"{flag} {item!r}: expected KEY=VALUE")
    return key.strip(), value.strip()


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's options by destination (argparse has no public accessor for them)."""
    return {
        action.dest: action
        for action in parser._actions
        if action.option_strings and action.dest not in CLI_ONLY
    }


def _given_on_command_line(
    parser: argparse.ArgumentParser, argv: Sequence[str]
) -> argparse.Namespace:
    """Parse ``argv`` keeping only the flags it gives (no defaults)."""
    actions = list(_actions(parser).values())
    saved = [action.default for action in actions]
    for action in actions:
        action.default = argparse.SUPPRESS
    try:
        return parser.parse_args(argv)
    finally:
        for action, default in zip(actions, saved, strict=True):
            action.default = default


def _toml_tokens(action: argparse.Action, key: str, value: Any) -> list[str]:
    """Command-line tokens equivalent to TOML ``key = value`` for ``action``."""
    flag = action.option_strings[0]
    if isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise UsageError(f"key {key!r} must be true or false, got {value!r}")
        return [flag if value else "--no-" + flag[2:]]
    if isinstance(value, dict) and action.dest in ("source_option", "spark_conf"):
        value = [f"{k}={_scalar(key, v)}" for k, v in value.items()]
    if isinstance(value, list):
        if action.dest in ("topic_columns", "partition_by"):
            return [flag, ",".join(_scalar(key, v) for v in value)]
        if not isinstance(action, argparse._AppendAction):
            raise UsageError(f"key {key!r} takes one value, got a list")
        return [token for v in value for token in (flag, _scalar(key, v))]
    return [flag, _scalar(key, value)]


def _scalar(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UsageError(f"key {key!r}: expected a string or a number, got {value!r}")
    return str(value)


def load_config_file(parser: argparse.ArgumentParser, path: str) -> dict[str, Any]:
    """The settings of TOML file ``path`` as argparse values, checked like flags."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--config {path}: {exc.strerror or exc}") from None
    actions = _actions(parser)
    values: dict[str, Any] = {}
    for key, value in document.items():
        dest = key.replace("-", "_")
        if dest in SECRET_KEYS:
            raise UsageError(
                f"--config {path}: key {key!r} is not supported: put the password in the "
                "environment variable named by password-env, or in password-file"
            )
        action = actions.get(dest)
        if action is None:
            known = [d.replace("_", "-") for d in actions]
            close = difflib.get_close_matches(key.replace("_", "-"), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "keys are the flag names"
            raise UsageError(f"--config {path}: unknown key {key!r} ({hint})")
        try:
            values.update(vars(_given_on_command_line(parser, _toml_tokens(action, key, value))))
        except UsageError as exc:
            message = re.sub(r"^argument [^:]+: ", "", str(exc))
            if not message.startswith("key "):
                message = f"key {key!r}: {message}"
            raise UsageError(f"--config {path}: {message}") from None
    return values


def parse_config(
    argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> tuple[IngestConfig, bool]:
    """Flags, config file and environment merged and validated; and whether
    ``--print-config`` was given. Raises :class:`UsageError`."""
    environ = os.environ if environ is None else environ
    parser = build_parser()
    given = vars(_given_on_command_line(parser, argv))
    print_config = bool(given.pop("print_config", False))
    config_path = given.pop("config", None)
    merged = {dest: action.default for dest, action in _actions(parser).items()}
    if config_path:
        merged.update(load_config_file(parser, config_path))
    merged.update(given)
    if not merged.get("username"):
        merged["username"] = environ.get("MQTT_USERNAME") or None
    return validate(merged), print_config


def _names(flag: str, text: str | None, *, allow_skips: bool) -> tuple[str | None, ...]:
    if text is None:
        return ()
    names: list[str | None] = []
    for raw in text.split(","):
        name = raw.strip()
        if allow_skips and name in ("", SKIP_LEVEL):
            names.append(None)
        elif not COLUMN_NAME_RE.match(name):
            raise UsageError(
                f"{flag}: {name!r} is not a column name (letters, digits, _; not first a digit)"
            )
        else:
            names.append(name)
    while names and names[-1] is None:
        names.pop()
    if not names:
        raise UsageError(f"{flag}: names no column")
    picked = [n.lower() for n in names if n is not None]
    duplicates = sorted({n for n in picked if picked.count(n) > 1})
    if duplicates:
        raise UsageError(f"{flag}: {', '.join(duplicates)} given twice")
    return tuple(names)


def validate(values: Mapping[str, Any]) -> IngestConfig:
    """Check one merged set of settings; raise :class:`UsageError` naming the flag."""
    for required in ("broker", "topic", "table", "checkpoint"):
        if not values.get(required):
            flag = "--" + required.replace("_", "-")
            raise UsageError(f"{flag} is required (on the command line or in --config)")
    if not TRIGGER_RE.match(values["trigger"]):
        raise UsageError(
            f"--trigger {values['trigger']!r}: use available-now or processing-time=INTERVAL, "
            "e.g. processing-time='5 seconds'"
        )
    payload_format = values["payload_format"]
    if payload_format == "json" and not values.get("schema"):
        raise UsageError("--payload-format json needs --schema, e.g. --schema 'temp DOUBLE'")
    if values.get("schema") and payload_format != "json":
        raise UsageError("--schema goes with --payload-format json")
    if values.get("dead_letter_table") and payload_format == "binary":
        raise UsageError(
            "--dead-letter-table needs --payload-format text or json (binary payloads "
            "cannot fail to parse)"
        )
    table = Path(values["table"]).resolve()
    dead_letter = values.get("dead_letter_table")
    if dead_letter and Path(dead_letter).resolve() == table:
        raise UsageError("--dead-letter-table must differ from --table")
    interval = values.get("table_checkpoint_interval")
    if interval is not None and interval < 1:
        raise UsageError("--table-checkpoint-interval must be at least 1")
    if (values.get("max_messages_per_trigger") or 1) < 1:
        raise UsageError("--max-messages-per-trigger must be at least 1")
    if values["stop_timeout"] < 0:
        raise UsageError("--stop-timeout must be >= 0")
    for item in values.get("spark_conf") or ():
        _key_value("--spark-conf", item)
    for item in values.get("source_option") or ():
        _check_source_option(*_key_value("--source-option", item))
    if values.get("password_file") and not values.get("username"):
        raise UsageError("--password-file needs --username (or MQTT_USERNAME)")
    if values.get("insecure") and not str(values["broker"]).startswith(("ssl://", "mqtts://")):
        raise UsageError("--insecure needs an ssl:// or mqtts:// --broker")
    topic_columns = _names("--topic-columns", values.get("topic_columns"), allow_skips=True)
    partition_by = _names("--partition-by", values.get("partition_by"), allow_skips=False)
    config = IngestConfig(
        **{
            **{k: v for k, v in values.items() if k in IngestConfig.__dataclass_fields__},
            "topic": tuple(values["topic"]),
            "source_option": tuple(values.get("source_option") or ()),
            "spark_conf": tuple(values.get("spark_conf") or ()),
            "topic_columns": topic_columns,
            "partition_by": tuple(n for n in partition_by if n is not None),
        }
    )
    try:
        SourceOptions.parse(source_options(config))
    except InvalidOptionError as exc:
        raise UsageError(flag_names(str(exc))) from None
    return config


def _check_source_option(key: str, value: str) -> None:
    """``--source-option`` takes the options no flag covers, spelled as the source knows them."""
    canonical = {name.lower(): name for name in KNOWN_OPTIONS}.get(key.lower())
    if canonical is None:
        raise UsageError(
            f"--source-option {key}={value}: format('mqtt') has no option {key!r} "
            "(the README lists them)"
        )
    if canonical in SECRET_KEYS:
        raise UsageError("--source-option password: use --password-env or --password-file")
    flag = _OPTION_FLAGS.get(canonical)
    if flag is not None:
        raise UsageError(f"--source-option {key}: use {flag} instead")


# Source option names in messages, as the job's flags.
_OPTION_FLAGS = {
    "brokerUrl": "--broker",
    "topic": "--topic",
    "topics": "--topic",
    "clientId": "--client-id",
    "mqttVersion": "--mqtt-version",
    "username": "--username",
    "password": "the password",
    "maxMessagesPerTrigger": "--max-messages-per-trigger",
    "tls.caFile": "--cafile",
    "tls.certFile": "--certfile",
    "tls.keyFile": "--keyfile",
    "tls.verify": "--insecure",
    "allowPasswordOverPlainTcp": "--allow-password-over-plain-tcp",
    "partitionData": "--partition-data",
    "qos": "--qos",
    "cleanSession": "--clean-session",
}


def flag_names(message: str) -> str:
    """``message`` of an :class:`InvalidOptionError` with option names given as flags."""
    message = message.replace("tls.* options", "TLS flags (--cafile, --certfile, --keyfile)")
    message = message.replace(
        "set option 'allowPasswordOverPlainTcp' to true", "pass --allow-password-over-plain-tcp"
    )
    for option, flag in _OPTION_FLAGS.items():
        message = message.replace(f"options '{option}'", flag)
        message = message.replace(f"option '{option}'", flag)
        message = message.replace(f"'{option}'", flag)
    return message


def read_password(config: IngestConfig, environ: Mapping[str, str] | None = None) -> str | None:
    """The password from ``--password-file`` or the ``--password-env`` variable, if any."""
    environ = os.environ if environ is None else environ
    if config.password_file:
        try:
            with open(config.password_file, encoding="utf-8") as handle:
                return handle.readline().rstrip("\r\n")
        except OSError as exc:
            raise UsageError(
                f"--password-file {config.password_file}: {exc.strerror or exc}"
            ) from None
    return environ.get(config.password_env)


def source_options(args: IngestConfig | argparse.Namespace) -> dict[str, str]:
    """The ``mqtt`` source options for the job's settings; ``args`` may also be a namespace
    from ``build_parser().parse_args``. The WAL goes to ``<checkpoint>/mqtt-wal``."""
    username = args.username or os.environ.get("MQTT_USERNAME") or None
    options = {
        "brokerUrl": args.broker,
        "topics": ",".join(args.topic),
        "qos": str(args.qos),
        "walPath": str(Path(args.checkpoint).resolve() / "mqtt-wal"),
        "mqttVersion": args.mqtt_version,
        "cleanSession": str(bool(args.clean_session)).lower(),
    }
    for item in getattr(args, "source_option", None) or ():
        key, value = _key_value("--source-option", item)
        options[key] = value
    if args.client_id:
        options["clientId"] = args.client_id
    if args.max_messages_per_trigger:
        options["maxMessagesPerTrigger"] = str(args.max_messages_per_trigger)
    if username:
        options["username"] = username
        password = (
            read_password(args)
            if isinstance(args, IngestConfig)
            else os.environ.get(args.password_env)
        )
        if password is not None:
            options["password"] = password
    if getattr(args, "allow_password_over_plain_tcp", False):
        options["allowPasswordOverPlainTcp"] = "true"
    for flag, key in (
        ("cafile", "tls.caFile"),
        ("certfile", "tls.certFile"),
        ("keyfile", "tls.keyFile"),
    ):
        if getattr(args, flag, None):
            options[key] = getattr(args, flag)
    if getattr(args, "insecure", False):
        options["tls.verify"] = "false"
    if args.partition_data:
        options["partitionData"] = args.partition_data
    return options


def describe(config: IngestConfig) -> str:
    """``--print-config`` output: the effective settings as JSON."""
    return json.dumps(config.as_dict(), indent=2)
