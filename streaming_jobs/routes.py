"""Routes: one subscription, many tables (``[[routes]]`` in the ``--config`` file).

Each route names a topic filter and the table its messages go to, with that table's settings:
the keys of :data:`ROUTE_KEYS`, spelled as the job's flags without dashes (as every config key
is). The rules, each checked before Spark starts (exit status 2, naming the route):

* A message goes to the first route, in file order, whose filter matches its topic; a message
  no route takes goes to the dead-letter table with reason :data:`NO_ROUTE`.
* A route whose filter an earlier route's covers can never take a message: an error naming both.
* With routes, the table's keys live in the routes, not at the top (:data:`TABLE_KEYS`); a
  top-level ``dead_letter_table`` is every route's unless the route names its own.
* The job subscribes to the top-level ``topic`` when given, which must cover every route's
  filter; otherwise to the routes' filters, less those another route's filter covers.
* Two routes may write one table only with the same settings for it.

Each route's settings are validated as the job's flags are (:func:`.ingest_config.validate`,
with the route's keys in place of the top level's), so one rule has one home.
"""

from __future__ import annotations

import difflib
import functools
import operator
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from connector.mqtt.errors import InvalidTopic
from connector.mqtt.topics import filter_covers, validate_topic_filter

if TYPE_CHECKING:  # ingest_config imports this module
    from pyspark.sql import Column

    from .ingest_config import IngestConfig

ROUTES_KEY = "routes"
"""The config file's array of tables, ``[[routes]]``."""
ROUTE_KEYS = (
    "topic",
    "table",
    "payload_format",
    "schema",
    "topic_columns",
    "property_columns",
    "partition_by",
    "cluster_by",
    "keep_payload",
    "dead_letter_table",
    "events_table",
)
"""The keys a route may hold (flag names without dashes)."""
TABLE_KEYS = tuple(k for k in ROUTE_KEYS if k not in ("topic", "dead_letter_table"))
"""The keys that go into each route, never at the top level, once there are routes."""
NO_ROUTE = "no route"
"""The dead-letter reason of a message whose topic no route's filter matches."""


class RouteError(ValueError):
    """A route, or the routes together, cannot run; the message names the route."""


@dataclass(frozen=True)
class Route:
    """One route: its place in the file (1-based), its filter, and the job's settings as its
    table sees them (the top level's, with the route's keys in place)."""

    index: int
    topic: str
    config: IngestConfig

    @property
    def label(self) -> str:
        return f"route {self.index} (topic {self.topic!r})"

    @property
    def table(self) -> str:
        return self.config.table


def route_items(document: Any) -> list[dict[str, Any]]:
    """The raw routes of a config file's ``routes`` value: a list of tables with known keys
    (dashes or underscores), each keyed as :data:`ROUTE_KEYS`."""
    if not isinstance(document, list) or not document:
        raise RouteError("'routes' must be a non-empty array of tables: [[routes]] sections")
    items = []
    for index, raw in enumerate(document, start=1):
        if not isinstance(raw, dict):
            raise RouteError(f"route {index}: expected a table ([[routes]]), got {raw!r}")
        item: dict[str, Any] = {}
        for key, value in raw.items():
            name = key.replace("-", "_")
            if name not in ROUTE_KEYS:
                close = difflib.get_close_matches(name, ROUTE_KEYS, n=1)
                hint = f"did you mean {close[0]!r}?" if close else "keys: " + ", ".join(ROUTE_KEYS)
                raise RouteError(f"route {index}: unknown key {key!r} ({hint})")
            item[name] = value
        for required in ("topic", "table"):
            if not item.get(required):
                raise RouteError(f"route {index}: {required!r} is required")
        if not isinstance(item["topic"], str):
            raise RouteError(f"route {index}: 'topic' is one topic filter, got {item['topic']!r}")
        try:
            validate_topic_filter(item["topic"])
        except InvalidTopic as exc:
            raise RouteError(f"route {index}: {exc}") from None
        items.append(item)
    return items


def check_routes(routes: Sequence[Route], top_topics: Sequence[str]) -> None:
    """The rules between routes (module docstring): no route shadowed by an earlier one, the
    top-level filters covering every route's, one set of settings per table."""
    for j, later in enumerate(routes):
        for earlier in routes[:j]:
            if filter_covers(earlier.topic, later.topic):
                raise RouteError(
                    f"{later.label} can never take a message: {earlier.label} comes first and "
                    "its filter matches every topic this one does (put the narrower route first)"
                )
        if top_topics and not any(filter_covers(t, later.topic) for t in top_topics):
            raise RouteError(
                f"{later.label}: the top-level topic ({', '.join(top_topics)}) does not cover "
                "it, so the job would never receive its messages"
            )
    by_table: dict[Path, Route] = {}
    for route in routes:
        key = Path(route.table).resolve() if is_path(route.table) else Path(route.table)
        first = by_table.setdefault(key, route)
        if first is not route and table_settings(first.config) != table_settings(route.config):
            raise RouteError(
                f"{route.label} and {first.label} write one table, {route.table}, with "
                "different settings (payload format, schema, columns or layout): give each its "
                "own table, or the same settings"
            )


def table_settings(config: IngestConfig) -> tuple[Any, ...]:
    """What must agree between two routes writing one table."""
    return tuple(getattr(config, key) for key in TABLE_KEYS if key != "table")


def subscription(routes: Sequence[Route]) -> tuple[str, ...]:
    """The filters to subscribe to for ``routes``: theirs, less any another one covers (the
    wider filter takes those messages already), in file order, each once."""
    filters = list(dict.fromkeys(route.topic for route in routes))
    return tuple(f for f in filters if not any(o != f and filter_covers(o, f) for o in filters))


def top_level_table_keys(values: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[str]:
    """The table keys set at the top level (in the file or on the command line), which routes
    forbid: those whose value differs from the built-in default."""
    return [k for k in TABLE_KEYS if values.get(k) not in (None, (), defaults.get(k))]


CATALOG_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*){1,2}$")
"""A catalog table name: ``schema.table`` or ``catalog.schema.table``."""


def is_path(table: str) -> bool:
    """Whether a route's ``table`` is a path (or URI) rather than a catalog name such as
    ``main.iot.events`` (two or three names joined by dots, nothing else)."""
    return not CATALOG_NAME.match(table)


def check_catalog_name(spark: Any, name: str) -> None:
    """A catalog name the session can create a table under: its catalog configured
    (``spark.sql.catalog.<name>``, or Spark's own ``spark_catalog``) and its schema there.
    Raises :class:`RouteError` naming what is missing."""
    parts = name.split(".")
    catalog = parts[0] if len(parts) == 3 else "spark_catalog"
    if catalog != "spark_catalog" and spark.conf.get(f"spark.sql.catalog.{catalog}", None) is None:
        raise RouteError(
            f"table {name!r}: the session has no catalog {catalog!r} (set "
            f"spark.sql.catalog.{catalog} with --spark-conf, or use a path)"
        )
    schema = ".".join(parts[:-1])
    if not spark.catalog.databaseExists(schema):
        raise RouteError(
            f"table {name!r}: no schema {schema!r} in the catalog; create it (CREATE SCHEMA "
            f"{schema}) or name another"
        )


def topic_matches_column(topic: Column, topic_filter: str) -> Column:
    """Spark's test of ``topic`` against ``topic_filter``, the rules of
    :func:`connector.mqtt.topics.topic_matches` (section 4.7) on the topic's levels (no
    regular expression: a level is compared as it is, whatever characters it holds)."""
    from pyspark.sql import functions as F

    levels = F.split(topic, "/", -1)
    parts = topic_filter.split("/")
    fixed = parts[:-1] if parts[-1] == "#" else parts
    tests = [
        F.size(levels) >= max(len(fixed), 1) if parts[-1] == "#" else F.size(levels) == len(parts)
    ]
    if parts[0] in ("+", "#"):
        tests.append(~topic.startswith("$"))
    tests += [F.get(levels, i) == F.lit(level) for i, level in enumerate(fixed) if level != "+"]
    return functools.reduce(operator.and_, tests)


def route_index(topic: Column, topic_filters: Sequence[str]) -> Column:
    """The 0-based index of the first filter that matches ``topic``, or null when none does."""
    from pyspark.sql import functions as F

    index = F.lit(None).cast("int")
    for position, topic_filter in reversed(list(enumerate(topic_filters))):
        index = F.when(topic_matches_column(topic, topic_filter), F.lit(position)).otherwise(index)
    return index
