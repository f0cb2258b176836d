"""What a Sparkplug host knows of each edge node, folded from the messages in the order they were
stored, so that the same messages always decode the same way (Sparkplug 3.0 chapter 5).

Per edge node (``group_id``, ``edge_node_id``), :class:`NodeState` holds the session's bdSeq,
whether it is online, the metrics each birth defined (by alias and by name, for the node and
for each device) and the sequence numbers seen. :meth:`SparkplugState.apply` takes one message
and returns what its rows need (:class:`Context`); it is a pure function of the state and the
message (its receive time included), so a range of stored messages replayed from the state
before them gives the same rows every time: after a crash, after older WAL segments were
deleted, and when a birth and its data share a micro-batch.

Rules, each with its Sparkplug 3.0 test assertion:

* NBIRTH starts a new session: it replaces the node's metrics and forgets its devices
  ([tck-id-topics-nbirth-bdseq-included], [tck-id-topics-nbirth-metrics]); a rebirth may assign
  other aliases. DBIRTH defines a device's metrics ([tck-id-topics-dbirth-metrics]).
* A DATA or command metric that carries only an alias is resolved from the birth of its node or
  device; aliases are unique across the node ([tck-id-payloads-alias-uniqueness]). An alias no
  birth defined resolves to no name, with a reason: the row is kept, never dropped.
* NDEATH ends the session only when its bdSeq equals the current NBIRTH's
  ([tck-id-operational-behavior-edge-node-termination-host-action-ndeath-node-offline]); another
  one (a late Will, a duplicate) is recorded and not applied.
* ``seq`` runs 0 to 255 and wraps, over all the node's messages but NDEATH
  ([tck-id-topics-ndata-seq-num]). A message ahead of the one expected opens a gap; the first
  message of the node received at least ``reorder_timeout`` later, while numbers are still
  missing, is flagged with them ([tck-id-operational-behavior-host-reordering-start]); the
  receive times are the stored ones, so the flag is the same on replay.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .datatypes import DataType, integer
from .topics import MessageType, SparkplugTopic
from .wire import optional

if TYPE_CHECKING:  # protobuf is imported where payloads are decoded, not for the state alone
    from .payload import Metric, Payload, Template

BD_SEQ = "bdSeq"
"""The name of the birth/death sequence metric of NBIRTH and NDEATH."""

SEQ_MODULO = 256

Members = dict[str, tuple[int | None, "Members | None"]]
"""A Template's member metrics: name -> (datatype, the members of a member that is itself a
Template)."""


@dataclass(slots=True)
class Scope:
    """The metrics one birth defined: for the node (NBIRTH) or for one device (DBIRTH)."""

    aliases: dict[int, tuple[str, int | None]] = field(default_factory=dict)
    """alias -> (name, datatype)."""
    datatypes: dict[str, int | None] = field(default_factory=dict)
    """name -> datatype."""
    online: bool = True
    templates: dict[str, Members] = field(default_factory=dict)
    """A Template metric's (definition or instance) name -> its members' datatypes, which
    DATA messages leave out ([tck-id-payloads-metric-datatype-not-req]); definitions are in
    the NBIRTH only ([tck-id-payloads-template-definition-nbirth-only])."""


@dataclass(slots=True)
class NodeState:
    bd_seq: int | None = None
    """The bdSeq of the current session's NBIRTH (None: no NBIRTH seen)."""
    online: bool = False
    node: Scope | None = None
    """The node's metrics (None: no NBIRTH seen)."""
    devices: dict[str, Scope] = field(default_factory=dict)
    last_seq: int | None = None
    missing: list[int] = field(default_factory=list)
    """Sequence numbers skipped and not seen since, in order."""
    gap_deadline_us: int | None = None
    """When the missing numbers count as a gap (receive time, microseconds)."""


@dataclass(slots=True)
class Resolved:
    """One metric of a message, resolved: its name and datatype, and why not when they could
    not be found (the row still lands)."""

    name: str | None
    datatype: int | None
    reason: str | None = None
    members: Members | None = None
    """A Template metric's members' datatypes, from its birth."""


@dataclass(slots=True)
class Context:
    """What the rows of one message need beyond its payload."""

    metrics: list[Resolved] = field(default_factory=list)
    bd_seq: int | None = None
    """The session's bdSeq (for NDEATH: its own)."""
    death_matched: bool | None = None
    """NDEATH: whether its bdSeq was the current session's."""
    seq_gap: bool = False
    missing_seqs: list[int] = field(default_factory=list)
    reason: str | None = None
    """What is wrong with the message as a whole (e.g. DATA before any birth)."""
    lookup: bool = False
    """DATA and commands: ``metrics`` is left empty, each metric resolved on demand against
    ``scope`` (its birth) and ``node`` (the NBIRTH's) by :func:`resolve`."""
    scope: Scope | None = None
    node: Scope | None = None

    def resolved(self, metrics: Iterable[Metric]) -> list[Resolved]:
        """The name and datatype of each of the message's ``metrics``."""
        if not self.lookup:
            return self.metrics
        return [resolve(self.scope, metric, self.node) for metric in metrics]


class SparkplugState:
    """Every edge node's state; ``reorder_timeout_us`` the Reorder Timeout
    ([tck-id-operational-behavior-host-reordering-param]), in microseconds."""

    def __init__(self, reorder_timeout_us: int = 0) -> None:
        self.reorder_timeout_us = reorder_timeout_us
        self.nodes: dict[tuple[str, str], NodeState] = {}

    # ------------------------------------------------------------------ the fold

    def apply(self, topic: SparkplugTopic, payload: Payload | None, received_us: int) -> Context:
        """Take one message (``payload`` None for STATE, or one that did not decode) and
        return the context of its rows."""
        kind = topic.message_type
        if kind is MessageType.STATE or payload is None:
            return Context()
        node = self.nodes.setdefault(topic.node_key, NodeState())
        if kind is MessageType.NBIRTH:
            return self._nbirth(node, payload, received_us)
        if kind is MessageType.NDEATH:
            return self._ndeath(node, payload)
        context = Context(bd_seq=node.bd_seq)
        if kind is not MessageType.NCMD and kind is not MessageType.DCMD:
            self._seq(node, optional(payload, "seq"), received_us, context)
        if node.node is None:
            context.reason = f"{kind.value} before any NBIRTH of the edge node"
        if kind is MessageType.DBIRTH:
            assert topic.device_id is not None
            born = node.devices[topic.device_id] = Scope()
            self._define(born, payload.metrics, context, node.node)
            return context
        device = topic.device_id
        if kind is MessageType.DDEATH:
            assert device is not None
            if device in node.devices:
                node.devices[device].online = False
            return context
        scope = node.node if device is None else node.devices.get(device)
        if scope is None and device is not None and context.reason is None:
            context.reason = f"{kind.value} for device {device!r} before its DBIRTH"
        context.lookup, context.scope, context.node = True, scope, node.node
        return context

    def _nbirth(self, node: NodeState, payload: Payload, received_us: int) -> Context:
        bd_seq = _bd_seq(payload)
        node.bd_seq = bd_seq
        node.online = True
        node.node = Scope()
        node.devices = {}
        seq = optional(payload, "seq")
        seq = seq if seq is not None and 0 <= seq < SEQ_MODULO else None
        node.last_seq, node.missing, node.gap_deadline_us = seq, [], None
        context = Context(bd_seq=bd_seq)
        if bd_seq is None:
            context.reason = "NBIRTH without a bdSeq metric ([tck-id-topics-nbirth-bdseq-included])"
        self._define(node.node, payload.metrics, context)
        return context

    def _ndeath(self, node: NodeState, payload: Payload) -> Context:
        bd_seq = _bd_seq(payload)
        matched = bd_seq is not None and node.bd_seq is not None and bd_seq == node.bd_seq
        if matched:
            node.online = False
            for scope in node.devices.values():
                scope.online = False
        context = Context(bd_seq=bd_seq, death_matched=matched)
        context.metrics = [
            Resolved(optional(m, "name"), optional(m, "datatype")) for m in payload.metrics
        ]
        if not matched:
            context.reason = (
                f"NDEATH with bdSeq {bd_seq}, not the current session's ({node.bd_seq}): "
                "recorded, not applied"
            )
        return context

    @staticmethod
    def _define(
        scope: Scope, metrics: list[Metric], context: Context, node: Scope | None = None
    ) -> None:
        """A birth's metrics: each defines its name, datatype and alias
        ([tck-id-payloads-alias-birth-requirement]); a Template its members' datatypes (an
        instance's missing ones from the definition, in ``node`` for a DBIRTH)."""
        definitions = scope.templates if node is None else node.templates
        for metric in sorted(metrics, key=_definitions_first):
            if metric.HasField("name") and metric.WhichOneof("value") == "template_value":
                ref = metric.template_value.template_ref
                scope.templates[metric.name] = members_of(
                    metric.template_value, definitions.get(ref) if ref else None
                )
        for metric in metrics:
            datatype = optional(metric, "datatype")
            if not metric.HasField("name"):
                context.metrics.append(Resolved(None, datatype, "a birth metric without a name"))
                continue
            name = metric.name
            scope.datatypes[name] = datatype
            if metric.HasField("alias"):
                scope.aliases[metric.alias] = (name, datatype)
            context.metrics.append(Resolved(name, datatype, members=scope.templates.get(name)))

    def _seq(self, node: NodeState, seq: int | None, received_us: int, context: Context) -> None:
        """The sequence rules (module docstring); a message without a ``seq``, or with one
        outside 0-255, changes nothing."""
        if seq is None or not 0 <= seq < SEQ_MODULO:
            return  # the row says why (connector.sparkplug.rows)
        if node.missing and seq in node.missing:
            node.missing.remove(seq)  # arrived late, within or after the timeout
        elif node.last_seq is not None:
            expected = (node.last_seq + 1) % SEQ_MODULO
            ahead = (seq - expected) % SEQ_MODULO
            if 0 < ahead < SEQ_MODULO // 2:
                node.missing.extend((expected + k) % SEQ_MODULO for k in range(ahead))
                if node.gap_deadline_us is None:
                    node.gap_deadline_us = received_us + self.reorder_timeout_us
            if ahead < SEQ_MODULO // 2:
                node.last_seq = seq
        else:
            node.last_seq = seq
        if not node.missing:
            node.gap_deadline_us = None
        elif node.gap_deadline_us is not None and received_us >= node.gap_deadline_us:
            context.seq_gap = True
            context.missing_seqs = list(node.missing)
            node.missing, node.gap_deadline_us = [], None

    # ------------------------------------------------------------------ persistence

    def to_json(self) -> str:
        """The state as JSON (stable: nodes and scopes sorted)."""
        return json.dumps(
            {
                "reorder_timeout_us": self.reorder_timeout_us,
                "nodes": [
                    [list(key), _node_json(node)] for key, node in sorted(self.nodes.items())
                ],
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> SparkplugState:
        data = json.loads(text)
        state = cls(int(data["reorder_timeout_us"]))
        for key, node in data["nodes"]:
            state.nodes[(key[0], key[1])] = _node_from(node)
        return state


def resolve(scope: Scope | None, metric: Metric, node: Scope | None) -> Resolved:
    """A DATA or command metric's name and datatype, from itself or from the birth (``scope``;
    ``node``: the NBIRTH's, for a Template's definition)."""
    own = optional(metric, "datatype")
    if metric.HasField("name"):
        name = metric.name
        datatype = own
        if datatype is None and scope is not None:
            datatype = scope.datatypes.get(name)
        if datatype is None:
            return Resolved(name, None, f"no datatype for metric {name!r}")
        return Resolved(name, datatype, members=members_in(scope, name, metric, node))
    if not metric.HasField("alias"):
        return Resolved(None, own, "a metric with neither name nor alias")
    alias = metric.alias
    found = None if scope is None else scope.aliases.get(alias)
    if found is None:
        return Resolved(None, own, f"alias {alias} is in no birth of this session")
    name, datatype = found
    return Resolved(
        name,
        own if own is not None else datatype,
        members=members_in(scope, name, metric, node),
    )


def members_in(
    scope: Scope | None, name: str, metric: Metric, node: Scope | None
) -> Members | None:
    """The member datatypes of a Template metric: from its birth, else from the definition
    it refers to (in the NBIRTH)."""
    if scope is None or metric.WhichOneof("value") != "template_value":
        return None
    found = scope.templates.get(name)
    ref = metric.template_value.template_ref
    if found is None and ref and node is not None:
        found = node.templates.get(ref)
    return found


def members_of(template: Template, fallback: Members | None = None) -> Members:
    """The datatypes of ``template``'s members (recursively); a member without one takes the
    one ``fallback`` (its definition's) gives."""
    out: Members = {}
    for member in template.metrics:
        if not member.HasField("name"):
            continue
        known = (fallback or {}).get(member.name, (None, None))
        datatype = optional(member, "datatype")
        if datatype is None:
            datatype = known[0]
        nested = None
        if member.WhichOneof("value") == "template_value":
            nested = members_of(member.template_value, known[1])
        out[member.name] = (datatype, nested if nested is not None else known[1])
    return out


def _definitions_first(metric: Metric) -> int:
    if metric.WhichOneof("value") == "template_value" and metric.template_value.is_definition:
        return 0
    return 1


_INTEGER_FIELDS = frozenset({"int_value", "long_value", "boolean_value"})
"""The value fields whose value is an int to Python (a bool is one)."""


def _bd_seq(payload: Payload) -> int | None:
    """The bdSeq metric's value, read as the Int64 it is ([tck-id-payloads-nbirth-bdseq])."""
    for metric in payload.metrics:
        which = metric.WhichOneof("value")
        if metric.name == BD_SEQ and which in _INTEGER_FIELDS:
            return integer(DataType.Int64, getattr(metric, which))
    return None


def _scope_json(scope: Scope) -> dict[str, Any]:
    return {
        "aliases": sorted([alias, name, dt] for alias, (name, dt) in scope.aliases.items()),
        "datatypes": sorted([name, dt] for name, dt in scope.datatypes.items()),
        "online": scope.online,
        "templates": sorted([name, _members_json(m)] for name, m in scope.templates.items()),
    }


def _members_json(members: Members) -> list[Any]:
    return sorted(
        [name, dt, None if nested is None else _members_json(nested)]
        for name, (dt, nested) in members.items()
    )


def _members_from(data: list[Any]) -> Members:
    return {
        name: (dt, None if nested is None else _members_from(nested)) for name, dt, nested in data
    }


def _scope_from(data: dict[str, Any]) -> Scope:
    return Scope(
        {int(alias): (name, dt) for alias, name, dt in data["aliases"]},
        {name: dt for name, dt in data["datatypes"]},
        bool(data["online"]),
        {name: _members_from(m) for name, m in data.get("templates", [])},
    )


def _node_json(node: NodeState) -> dict[str, Any]:
    return {
        "bd_seq": node.bd_seq,
        "online": node.online,
        "node": None if node.node is None else _scope_json(node.node),
        "devices": sorted([name, _scope_json(s)] for name, s in node.devices.items()),
        "last_seq": node.last_seq,
        "missing": node.missing,
        "gap_deadline_us": node.gap_deadline_us,
    }


def _node_from(data: dict[str, Any]) -> NodeState:
    return NodeState(
        data["bd_seq"],
        bool(data["online"]),
        None if data["node"] is None else _scope_from(data["node"]),
        {name: _scope_from(s) for name, s in data["devices"]},
        data["last_seq"],
        list(data["missing"]),
        data["gap_deadline_us"],
    )
