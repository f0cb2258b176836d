"""The Sparkplug host role (Sparkplug 3.0 sections 4.2.3 and 5.x): what a host publishes, and when
it asks an edge node to send its births again. Sans-I/O: :class:`SparkplugHost` takes the
stored messages and the time, and returns the messages to publish; the receiver sends them.

* STATE ([tck-id-host-topic-phid-birth-topic]): ``spBv1.0/STATE/<host_id>``, JSON
  ``{"online": ..., "timestamp": ...}``, QoS 1, retained. The death is the CONNECT's Will, with
  the time of that CONNECT ([tck-id-host-topic-phid-death-payload-connect]); the birth follows
  the subscriptions with the same timestamp ([tck-id-host-topic-phid-birth-payload-timestamp]);
  a clean stop publishes the death with the time of the stop before DISCONNECT
  ([tck-id-host-topic-phid-death-payload-disconnect-clean]).
* Rebirth requests ([tck-id-operational-behavior-data-commands-ncmd-rebirth-verb] to
  [...-ncmd-rebirth-value]): an NCMD with the Boolean metric ``Node Control/Rebirth`` true, a
  timestamp and no seq ([tck-id-payloads-ncmd-timestamp], [tck-id-payloads-ncmd-seq]), QoS 0,
  not retained ([tck-id-payloads-ncmd-qos]). Sent when a node's DATA, DBIRTH or DDEATH comes
  before its NBIRTH, a DATA metric's alias is in no birth, a device's DATA comes before
  its DBIRTH, a payload does not decode, or missing sequence numbers are still missing after
  the Reorder Timeout ([tck-id-operational-behavior-host-reordering-rebirth]); at most one per
  edge node per ``rebirth_interval``.

The host's own state is live (what this process saw since it started, the births it missed
included), not the replay-consistent state the rows are decoded with (:mod:`.state`): a
request is about now, and a restarted host asks the nodes whose births it does not know.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .state import SparkplugState
from .topics import NAMESPACE, MessageType, TopicError, parse_topic
from .wire import LENGTH, VARINT, WireError, fields, key, length_delimited, varint

if TYPE_CHECKING:
    from .payload import Payload

REBIRTH_METRIC = "Node Control/Rebirth"
_BOOLEAN = 11
"""The Boolean datatype (section 6.4.16)."""


def state_topic(host_id: str) -> str:
    """The host's STATE topic ([tck-id-host-topic-phid-birth-topic])."""
    return f"{NAMESPACE}/{MessageType.STATE.value}/{host_id}"


def state_payload(online: bool, timestamp_ms: int) -> bytes:
    """A STATE birth (``online`` true) or death ([tck-id-host-topic-phid-birth-payload])."""
    return json.dumps({"online": online, "timestamp": timestamp_ms}).encode()


def rebirth_request(timestamp_ms: int) -> bytes:
    """The payload of an NCMD asking for a rebirth: a timestamp, no seq, and the metric
    ``Node Control/Rebirth`` (Boolean) true."""
    metric = (
        length_delimited(1, REBIRTH_METRIC.encode())
        + key(3, VARINT)
        + varint(timestamp_ms)
        + key(4, VARINT)
        + varint(_BOOLEAN)
        + key(14, VARINT)
        + varint(1)
    )
    return key(1, VARINT) + varint(timestamp_ms) + length_delimited(2, metric)


def ncmd_topic(group_id: str, edge_node_id: str) -> str:
    return f"{NAMESPACE}/{group_id}/{MessageType.NCMD.value}/{edge_node_id}"


@dataclass
class SparkplugHost:
    """One host's live view and its rebirth requests; times in microseconds (``now_us``: a
    wall clock, since requests carry UTC timestamps)."""

    host_id: str
    reorder_timeout_us: int
    rebirth_interval_us: int
    state: SparkplugState = field(init=False)
    last_request_us: dict[tuple[str, str], int] = field(default_factory=dict)
    requests_sent: int = 0

    def __post_init__(self) -> None:
        self.state = SparkplugState(self.reorder_timeout_us)

    def observe(self, topic: str, data: bytes, now_us: int) -> list[tuple[str, bytes]]:
        """Take one stored message; the NCMDs (topic, payload) to publish now, if any."""
        try:
            parsed = parse_topic(topic)
        except TopicError:
            return []
        kind = parsed.message_type
        if kind in (MessageType.STATE, MessageType.NCMD, MessageType.DCMD):
            return []
        payload = _light(kind, data)
        context = self.state.apply(parsed, payload, now_us)
        why = None
        if payload is None:
            why = "a payload that does not decode"
        elif context.reason is not None and kind is not MessageType.NDEATH:
            why = context.reason
        elif any(m.name is None for m in context.resolved(payload.metrics)):
            why = "a metric alias in no birth of the session"
        elif context.seq_gap:
            why = f"sequence numbers {context.missing_seqs} missing past the Reorder Timeout"
        if why is None:
            return []
        return self._request(parsed.node_key, now_us)

    def tick(self, now_us: int) -> list[tuple[str, bytes]]:
        """Requests for nodes whose missing sequence numbers passed the Reorder Timeout with no
        message since ([tck-id-operational-behavior-host-reordering-rebirth])."""
        out = []
        for node_key, node in self.state.nodes.items():
            deadline = node.gap_deadline_us
            if node.missing and deadline is not None and now_us >= deadline:
                out.extend(self._request(node_key, now_us))
        return out

    def _request(self, node_key: tuple[str, str], now_us: int) -> list[tuple[str, bytes]]:
        last = self.last_request_us.get(node_key)
        if last is not None and now_us - last < self.rebirth_interval_us:
            return []
        self.last_request_us[node_key] = now_us
        self.requests_sent += 1
        return [(ncmd_topic(*node_key), rebirth_request(now_us // 1000))]


def _light(kind: MessageType, data: bytes) -> Payload | None:
    """What the live view needs: births and deaths whole; DATA's seq and each metric's name
    and alias, not their values (the host runs on the receiver's thread). The decoder (and
    protobuf) is imported with the first message a host role sees: a receiver without one
    starts without it."""
    from .payload import PayloadError, decode_message

    try:
        if kind.birth or kind.death:
            return decode_message(data)
        return _names_and_aliases(data)
    except PayloadError:
        return None


def _names_and_aliases(data: bytes) -> Payload | None:
    from .payload import Payload, decode_message

    payload = Payload()
    try:
        for number, wire, value in fields(data):
            if number == 3 and wire == VARINT:
                assert isinstance(value, int)
                payload.seq = value
            elif number == 4:  # a uuid: maybe a compressed payload
                return decode_message(data)
            elif number == 2 and wire == LENGTH:
                assert not isinstance(value, int)
                metric = payload.metrics.add()
                for n, w, v in fields(value):
                    if n == 1 and w == LENGTH:
                        assert not isinstance(v, int)
                        metric.name = bytes(v).decode("utf-8", errors="replace")
                    elif n == 2 and w == VARINT:
                        assert isinstance(v, int)
                        metric.alias = v
    except WireError:
        return None
    return payload
