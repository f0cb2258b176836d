"""Flags of the ingest job, the ``--config`` TOML file, and their validation. The flags, their
defaults, help and config keys come from the table in :mod:`streaming_jobs.ingest_flags`.

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
import dataclasses
import difflib
import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, NoReturn

from connector.mqtt.message_properties import FIELDS as PROPERTY_FIELDS
from connector.mqtt.packets import ProtocolLevel
from connector.mqtt.topics import filter_covers
from connector.options.source import InvalidOptionError, SourceOptions, check_sparkplug_sharding
from connector.options.table import SECRET_OPTIONS, canonical_name
from connector.wal.location import WalLocationError, parse_location
from streaming_jobs.compaction_policy import (
    RETENTION_CHECK_KEY,
    SAFE_RETENTION_HOURS,
    CompactionPolicy,
)
from streaming_jobs.ingest_flags import BY_DEST, FLAGS, option_flags
from streaming_jobs.ingest_flags import PAYLOAD_FORMATS as PAYLOAD_FORMATS
from streaming_jobs.routes import (
    NO_ROUTE,
    ROUTES_KEY,
    TABLE_KEYS,
    Route,
    RouteError,
    check_routes,
    route_items,
    subscription,
    top_level_table_keys,
)

TRIGGER_RE = re.compile(r"^(available-now|processing-time=(?P<interval>.+))$")
COLUMN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SKIP_LEVEL = "_"
"""A ``--topic-columns`` name that skips its topic level (an empty name does too)."""
DATE_COLUMN = "date"
"""``--partition-by date`` adds this column: the UTC date the message was received."""
CLI_ONLY = frozenset({flag.dest for flag in FLAGS if not flag.config} | {"help"})
SECRET_KEYS = SECRET_OPTIONS

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

  # MQTT 5: the properties struct, its content type and user properties as columns too;
  # a JSON payload whose content type is not JSON goes to the dead-letter table
  python streaming_jobs/ingest.py --broker tcp://localhost:1883 --topic 'plant/#' \\
      --mqtt-version 5 --property-columns contentType,userProperties \\
      --payload-format json --schema 'temp DOUBLE' --dead-letter-table ./data/tables/dead \\
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
    """The job's flags, from :data:`streaming_jobs.ingest_flags.FLAGS` in its order and groups.
    ``parse_args`` of the result gives every flag its built-in default."""
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
    groups: dict[str, argparse._ArgumentGroup] = {}
    for flag in FLAGS:
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(flag.group)
        flag.add_to(groups[flag.group])
    return parser


_DEFAULTS = {flag.dest: flag.initial for flag in FLAGS}


@dataclass(frozen=True)
class IngestConfig:
    """The job's validated settings; attribute names are the flags' argparse names, defaults
    the flag table's (None and () mean not given)."""

    broker: str
    topic: tuple[str, ...]
    table: str
    checkpoint: str
    qos: str = _DEFAULTS["qos"]
    client_id: str | None = None
    clean_session: bool = _DEFAULTS["clean_session"]
    mqtt_version: str = _DEFAULTS["mqtt_version"]
    receive_maximum: int | None = None
    session_expiry: int | None = None
    topic_alias_maximum: int | None = None
    max_packet_size: int | None = None
    username: str | None = None
    password_env: str = _DEFAULTS["password_env"]
    password_file: str | None = None
    allow_password_over_plain_tcp: bool = _DEFAULTS["allow_password_over_plain_tcp"]
    cafile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    insecure: bool = _DEFAULTS["insecure"]
    alpn: str | None = None
    source_option: tuple[str, ...] = ()
    payload_format: str = _DEFAULTS["payload_format"]
    schema: str | None = None
    keep_payload: bool = _DEFAULTS["keep_payload"]
    topic_columns: tuple[str | None, ...] = ()
    property_columns: tuple[str, ...] = ()
    dead_letter_table: str | None = None
    events_table: str | None = None
    sparkplug_reorder_timeout: float | None = None
    sparkplug_host_id: str | None = None
    sparkplug_rebirth_interval: float | None = None
    partition_by: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    merge_schema: bool = _DEFAULTS["merge_schema"]
    table_checkpoint_interval: int | None = None
    log_retention: float | None = None
    compaction: str = _DEFAULTS["compaction"]
    target_file_size: int = _DEFAULTS["target_file_size"]
    small_files: int = _DEFAULTS["small_files"]
    vacuum_every: float | None = _DEFAULTS["vacuum_every"]
    vacuum_retention: float | None = None
    trigger: str = _DEFAULTS["trigger"]
    progress: str = _DEFAULTS["progress"]
    max_messages_per_trigger: int | None = None
    partition_data: str | None = None
    stop_timeout: float = _DEFAULTS["stop_timeout"]
    metrics_port: int | None = None
    metrics_host: str = _DEFAULTS["metrics_host"]
    master: str | None = None
    spark_conf: tuple[str, ...] = ()
    log_level: str = _DEFAULTS["log_level"]
    spark_log_level: str = _DEFAULTS["spark_log_level"]
    routes: tuple[Route, ...] = ()
    """``[[routes]]`` of the config file (:mod:`streaming_jobs.routes`). With routes each route
    carries its table's settings; of the top level's, ``dead_letter_table`` is the table of the
    messages no route takes, and the others are not used."""

    @property
    def mqtt5(self) -> bool:
        """Whether the job reads MQTT 5.0 (``--mqtt-version 5``): the rows have ``properties``."""
        return _is_mqtt5(self.mqtt_version)

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
            elif item.name == "property_columns":
                value = ",".join(value) or None
            elif item.name == "routes":
                value = [_route_dict(route) for route in value] or None
            elif isinstance(value, tuple):
                value = list(value)
            out[item.name.replace("_", "-")] = value
        if self.routes:  # the table's settings are the routes'; the top level holds none
            for key in TABLE_KEYS:
                del out[key.replace("_", "-")]
        return out


def _route_dict(route: Route) -> dict[str, Any]:
    """One route for ``--print-config``: its filter and its table's settings."""
    settings = route.config.as_dict()
    keys = ("topic", *(k.replace("_", "-") for k in (*TABLE_KEYS, "dead_letter_table")))
    return {k: route.topic if k == "topic" else settings[k] for k in keys}


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
    kind = BY_DEST[action.dest].kind
    if kind == "switch":
        if not isinstance(value, bool):
            raise UsageError(f"key {key!r} must be true or false, got {value!r}")
        return [flag if value else "--no-" + flag[2:]]
    if isinstance(value, dict) and kind == "pairs":
        value = [f"{k}={_scalar(key, v)}" for k, v in value.items()]
    if isinstance(value, list):
        if kind == "names":
            return [flag, ",".join(_scalar(key, v) for v in value)]
        if kind not in ("list", "pairs"):
            raise UsageError(f"key {key!r} takes one value, got a list")
        return [token for v in value for token in (flag, _scalar(key, v))]
    return [flag, _scalar(key, value)]


def _scalar(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UsageError(f"key {key!r}: expected a string or a number, got {value!r}")
    return str(value)


def load_config_file(
    parser: argparse.ArgumentParser, path: str
) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """The settings of TOML file ``path`` as argparse values, checked like flags; and its
    routes (:mod:`streaming_jobs.routes`), each as argparse values, or None without
    ``[[routes]]``."""
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise UsageError(f"--config {path}: {exc.strerror or exc}") from None
    routes = None
    if ROUTES_KEY in document:
        try:
            items = route_items(document.pop(ROUTES_KEY))
        except RouteError as exc:
            raise UsageError(f"--config {path}: {exc}") from None
        routes = []
        for index, item in enumerate(items, start=1):
            topic = item.pop("topic")
            try:
                values = _config_values(parser, item)
            except UsageError as exc:
                raise UsageError(f"--config {path}: route {index}: {exc}") from None
            routes.append({**values, "topic": [topic]})
    try:
        return _config_values(parser, document), routes
    except UsageError as exc:
        raise UsageError(f"--config {path}: {exc}") from None


def _config_values(parser: argparse.ArgumentParser, document: Mapping[str, Any]) -> dict[str, Any]:
    """Config-file ``key = value`` pairs as argparse values, each checked as its flag is."""
    actions = _actions(parser)
    values: dict[str, Any] = {}
    for key, value in document.items():
        dest = key.replace("-", "_")
        if dest in SECRET_KEYS:
            raise UsageError(
                f"key {key!r} is not supported: put the password in the environment variable "
                "named by password-env, or in password-file"
            )
        action = actions.get(dest)
        if action is None:
            known = [d.replace("_", "-") for d in actions]
            close = difflib.get_close_matches(key.replace("_", "-"), known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "keys are the flag names"
            raise UsageError(f"unknown key {key!r} ({hint})")
        try:
            values.update(vars(_given_on_command_line(parser, _toml_tokens(action, key, value))))
        except UsageError as exc:
            message = re.sub(r"^argument [^:]+: ", "", str(exc))
            if not message.startswith("key "):
                message = f"key {key!r}: {message}"
            raise UsageError(message) from None
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
    routes = None
    if config_path:
        from_file, routes = load_config_file(parser, config_path)
        merged.update(from_file)
    merged.update(given)
    if not merged.get("username"):
        merged["username"] = environ.get("MQTT_USERNAME") or None
    if routes is not None:
        return _with_routes(merged, routes, config_path), print_config
    return validate(merged), print_config


def _with_routes(
    merged: Mapping[str, Any], routes: Sequence[Mapping[str, Any]], path: str | None
) -> IngestConfig:
    """The job's settings with ``[[routes]]`` (:mod:`streaming_jobs.routes`): each route
    validated as the job's flags are, with its keys in place of the top level's."""
    at_top = top_level_table_keys(merged, _DEFAULTS)
    if at_top:
        names = ", ".join(k.replace("_", "-") for k in at_top)
        raise UsageError(
            f"--config {path}: with [[routes]], {names} go into each route, not the top level "
            'or the command line (docs/ingest-job.md, "Routes")'
        )
    host_role = [k for k in SPARKPLUG_HOST_ROLE if merged.get(k) is not None]
    if host_role:
        names = ", ".join(k.replace("_", "-") for k in host_role)
        raise UsageError(
            f"--config {path}: {names}: the Sparkplug host role runs in a Sparkplug job of its "
            "own (--payload-format sparkplug), not in a job with [[routes]]"
        )
    top_topics = tuple(merged.get("topic") or ())
    shared_dead_letters = merged.get("dead_letter_table")
    # Sparkplug's other top-level settings (the reorder timeout) are the Sparkplug routes'.
    sparkplug = {k: merged[k] for k in SPARKPLUG_ONLY if merged.get(k) is not None}
    merged = {**merged, **dict.fromkeys(sparkplug)}
    built: list[Route] = []
    for index, own in enumerate(routes, start=1):
        # The source's options are the job's, checked with its whole subscription below.
        values = {**merged, **own, "source_option": ()}
        if values["payload_format"] == "sparkplug":
            values = {**merged, **sparkplug, **own, "source_option": ()}
        if "dead_letter_table" not in own and values["payload_format"] == "binary":
            values["dead_letter_table"] = None  # the shared table takes no binary route's rows
        try:
            config = validate(values)
        except UsageError as exc:
            label = f"route {index} (topic {own['topic'][0]!r})"
            raise UsageError(f"--config {path}: {label}: {exc}") from None
        built.append(Route(index, own["topic"][0], config))
    if sparkplug and not any(r.config.payload_format == "sparkplug" for r in built):
        names = ", ".join(k.replace("_", "-") for k in sparkplug)
        raise UsageError(f"--config {path}: {names} goes with a Sparkplug route; there is none")
    try:
        check_routes(built, top_topics)
    except RouteError as exc:
        raise UsageError(f"--config {path}: {exc}") from None
    filters = subscription(built)
    if top_topics and not shared_dead_letters:
        uncovered = [t for t in top_topics if not any(filter_covers(f, t) for f in filters)]
        if uncovered:
            raise UsageError(
                f"--config {path}: messages of {', '.join(uncovered)} that no route takes need "
                f"a top-level dead_letter_table (they land there with reason {NO_ROUTE!r})"
            )
    # The top level's own table settings are not used with routes: its table is the first
    # route's, its dead-letter table the one of messages no route takes.
    top = {**merged, "topic": list(top_topics or filters), "table": built[0].table}
    top["payload_format"] = "text" if shared_dead_letters else "binary"
    config = dataclasses.replace(validate(top), routes=tuple(built))
    _check_sparkplug_routes(config, path)
    return config


def _check_sparkplug_routes(config: IngestConfig, path: str | None) -> None:
    """A Sparkplug route needs every message of an edge node in one receiver, as a Sparkplug
    job does (:func:`connector.options.source.check_sparkplug_sharding`): the rule applied to
    the subscribed filters that carry the route's messages."""
    parsed = SourceOptions.parse(source_options(config))
    for route in config.routes:
        if route.config.payload_format != "sparkplug":
            continue
        carrying = tuple(
            t
            for t in parsed.topics
            if filter_covers(t, route.topic) or filter_covers(route.topic, t)
        )
        try:
            check_sparkplug_sharding(carrying, parsed.receivers, parsed.shard_by)
        except InvalidOptionError as exc:
            raise UsageError(f"--config {path}: {route.label}: {flag_names(str(exc))}") from None


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


SPARKPLUG_ONLY = (
    "events_table",
    *(f.dest for f in FLAGS if f.row is not None and "sparkplug" in f.row.requirements),
)
"""The flags that go only with ``--payload-format sparkplug``: ``--events-table`` and those
setting a source option that requires Sparkplug (the option table's ``requires``)."""
SPARKPLUG_HOST_ROLE = ("sparkplug_host_id", "sparkplug_rebirth_interval")
"""The flags of the Sparkplug host role (docs/sparkplug.md), which the receiver plays in a
Sparkplug job only."""


def _is_mqtt5(version: object) -> bool:
    try:
        return ProtocolLevel.parse(str(version)) == ProtocolLevel.MQTT_5
    except ValueError:
        return False


def _property_columns(text: str | None, mqtt5: bool) -> tuple[str, ...]:
    """``--property-columns``: fields of the source's ``properties`` column, each once; they
    exist with ``--mqtt-version 5`` only."""
    if text is None:
        return ()
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if name not in PROPERTY_FIELDS:
            raise UsageError(
                f"--property-columns: {name!r} is not a field of the MQTT 5 properties; use "
                + ", ".join(PROPERTY_FIELDS)
            )
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise UsageError(f"--property-columns: {', '.join(duplicates)} given twice")
    if not mqtt5:
        raise UsageError(
            "--property-columns needs --mqtt-version 5 (MQTT 3.1 and 3.1.1 messages have no "
            "properties)"
        )
    return tuple(names)


def validate(values: Mapping[str, Any]) -> IngestConfig:
    """Check one merged set of settings; raise :class:`UsageError` naming the flag."""
    for flag in FLAGS:
        if flag.required and not values.get(flag.dest):
            raise UsageError(f"{flag.name} is required (on the command line or in --config)")
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
            "--dead-letter-table needs --payload-format text, json or sparkplug (binary "
            "payloads cannot fail to parse)"
        )
    if payload_format != "sparkplug":
        for dest in SPARKPLUG_ONLY:
            if values.get(dest) is not None:
                raise UsageError(f"--{dest.replace('_', '-')} goes with --payload-format sparkplug")
    else:
        for dest in ("topic_columns", "property_columns"):
            if values.get(dest):
                raise UsageError(
                    f"--{dest.replace('_', '-')} does not go with --payload-format sparkplug "
                    "(its rows have group_id, edge_node_id and device_id; docs/sparkplug.md)"
                )
    paths = [
        (name, Path(values[key]).resolve())
        for name, key in (
            ("--table", "table"),
            ("--dead-letter-table", "dead_letter_table"),
            ("--events-table", "events_table"),
        )
        if values.get(key)
    ]
    for i, (name, path) in enumerate(paths):
        for other, other_path in paths[:i]:
            if path == other_path:
                raise UsageError(f"{name} must differ from {other}")
    interval = values.get("table_checkpoint_interval")
    if interval is not None and interval < 1:
        raise UsageError("--table-checkpoint-interval must be at least 1")
    log_retention = values.get("log_retention")
    if log_retention is not None and not log_retention > 0:
        raise UsageError("--log-retention must be more than 0 hours")
    try:
        CompactionPolicy(values["target_file_size"], values["small_files"])
    except ValueError as exc:
        raise UsageError(f"--target-file-size / --small-files: {exc}") from None
    retention = values.get("vacuum_retention")
    if retention is not None:
        checked = dict(_key_value("--spark-conf", item) for item in values.get("spark_conf") or ())
        if retention < 0:
            raise UsageError("--vacuum-retention must be >= 0 hours")
        if retention < SAFE_RETENTION_HOURS and checked.get(RETENTION_CHECK_KEY) != "false":
            raise UsageError(
                f"--vacuum-retention {retention:g} is below Delta's safe {SAFE_RETENTION_HOURS:g} "
                "hours (a reader or writer older than that may find its files gone); to accept "
                f"that, add --spark-conf {RETENTION_CHECK_KEY}=false"
            )
    if values["stop_timeout"] < 0:
        raise UsageError("--stop-timeout must be >= 0")
    port = values.get("metrics_port")
    if port is not None and not 0 <= port <= 65535:
        raise UsageError(f"--metrics-port must be 0 to 65535, got {port}")
    for item in values.get("spark_conf") or ():
        _key_value("--spark-conf", item)
    for item in values.get("source_option") or ():
        _check_source_option(*_key_value("--source-option", item))
    if values.get("password_file") and not values.get("username"):
        raise UsageError("--password-file needs --username (or MQTT_USERNAME)")
    if values.get("insecure") and not str(values["broker"]).startswith(
        ("ssl://", "mqtts://", "wss://")
    ):
        raise UsageError("--insecure needs an ssl://, mqtts:// or wss:// --broker")
    topic_columns = _names("--topic-columns", values.get("topic_columns"), allow_skips=True)
    partition_by = _names("--partition-by", values.get("partition_by"), allow_skips=False)
    cluster_by = _names("--cluster-by", values.get("cluster_by"), allow_skips=False)
    if partition_by and cluster_by:
        raise UsageError(
            "--partition-by and --cluster-by: a Delta table is partitioned or clustered, not "
            'both; choose one (docs/operations.md, "Layout")'
        )
    property_columns = _property_columns(
        values.get("property_columns"), _is_mqtt5(values["mqtt_version"])
    )
    config = IngestConfig(
        **{
            **{k: v for k, v in values.items() if k in IngestConfig.__dataclass_fields__},
            "topic": tuple(values["topic"]),
            "source_option": tuple(values.get("source_option") or ()),
            "spark_conf": tuple(values.get("spark_conf") or ()),
            "topic_columns": topic_columns,
            "property_columns": property_columns,
            "partition_by": tuple(n for n in partition_by if n is not None),
            "cluster_by": tuple(n for n in cluster_by if n is not None),
        }
    )
    try:
        SourceOptions.parse(source_options(config))
    except InvalidOptionError as exc:
        raise UsageError(flag_names(str(exc))) from None
    return config


def _check_source_option(key: str, value: str) -> None:
    """``--source-option`` takes the options no flag covers, spelled as the source knows them."""
    canonical = canonical_name(key)
    if canonical is None:
        raise UsageError(
            f"--source-option {key}={value}: format('mqtt') has no option {key!r} "
            "(docs/options.md lists them)"
        )
    if canonical in SECRET_KEYS:
        raise UsageError("--source-option password: use --password-env or --password-file")
    flag = _OPTION_FLAGS.get(canonical)
    if flag is not None:
        raise UsageError(f"--source-option {key}: use {flag} instead")


# Source option names in messages, as the job's flags (the password has two: "the password").
_OPTION_FLAGS = {
    option: "the password" if option in SECRET_KEYS else flags[0]
    for option, flags in option_flags().items()
}


def flag_names(message: str) -> str:
    """``message`` of an :class:`InvalidOptionError` with option names given as flags."""
    message = message.replace(
        "tls.* options", "TLS flags (--cafile, --certfile, --keyfile, --alpn)"
    )
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
    from ``build_parser().parse_args``. The WAL goes to :func:`default_wal_path`. Each flag
    that sets an option gives it ``to_option`` of its value; ``--source-option`` items come
    after the options every run sets (their flags are required or have a default) and before
    the others; the user name falls back to ``$MQTT_USERNAME``."""
    first: dict[str, str] = {}  # set by every run: the flag is required or has a default
    rest: dict[str, str] = {}
    for flag in FLAGS:
        if flag.option is None or flag.option in ("username", *SECRET_KEYS):
            continue  # credentials below
        always = flag.required or flag.to_option(flag.initial) is not None
        text = flag.to_option(getattr(args, flag.dest, None))
        if text:
            (first if always else rest)[flag.option] = text
    options = dict(first)
    for item in getattr(args, "source_option", None) or ():
        key, value = _key_value("--source-option", item)
        options[key] = value
    if "walPath" not in options:
        options["walPath"] = default_wal_path(args.checkpoint)
    options.update(rest)
    username = args.username or os.environ.get("MQTT_USERNAME") or None
    if username:
        options["username"] = username
        password = (
            read_password(args)
            if isinstance(args, IngestConfig)
            else os.environ.get(args.password_env)
        )
        if password is not None:
            options["password"] = password
    return options


def default_wal_path(checkpoint: str) -> str:
    """``<checkpoint>/mqtt-wal``: the WAL lives where the checkpoint does (a local directory, a
    store URI the WAL supports, or a FUSE mount of one; docs/wal-storage.md). A checkpoint URI
    the WAL cannot use (``s3a://``, ``dbfs:/``) needs ``--source-option walPath=...``."""
    try:
        location = parse_location(checkpoint)
    except WalLocationError as exc:
        raise UsageError(
            f"--checkpoint {checkpoint}: the WAL cannot live beside it ({exc}); give it a "
            "location with --source-option walPath=... (docs/wal-storage.md)"
        ) from None
    if location.scheme:
        base, sep, query = checkpoint.partition("?")
        return f"{base.rstrip('/')}/mqtt-wal{sep}{query}"
    return str(Path(checkpoint).resolve() / "mqtt-wal")


def describe(config: IngestConfig) -> str:
    """``--print-config`` output: the effective settings as JSON."""
    return json.dumps(config.as_dict(), indent=2)
