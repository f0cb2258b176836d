"""The Sparkplug topic namespace (Sparkplug 3.0 chapter 4):
``spBv1.0/<group_id>/<message_type>/<edge_node_id>[/<device_id>]``, and the host's STATE topic,
``spBv1.0/STATE/<host_id>`` (3.0) or ``STATE/<host_id>`` (before 3.0).

:func:`parse_topic` reads a topic into a :class:`SparkplugTopic`, or says why it is none:
[tck-id-topic-structure]; the device id is there exactly for DBIRTH, DDEATH, DDATA and DCMD
([tck-id-topic-structure-namespace-device-id-associated-message-types],
[tck-id-topic-structure-namespace-device-id-non-associated-message-types]).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

NAMESPACE = "spBv1.0"
"""The namespace element of Sparkplug B ([tck-id-topic-structure-namespace-a])."""

STATE = "STATE"


class MessageType(StrEnum):
    NBIRTH = "NBIRTH"
    NDEATH = "NDEATH"
    DBIRTH = "DBIRTH"
    DDEATH = "DDEATH"
    NDATA = "NDATA"
    DDATA = "DDATA"
    NCMD = "NCMD"
    DCMD = "DCMD"
    STATE = "STATE"

    @property
    def device(self) -> bool:
        """Whether the topic of this type names a device."""
        return self in _DEVICE_TYPES

    @property
    def birth(self) -> bool:
        return self in (MessageType.NBIRTH, MessageType.DBIRTH)

    @property
    def death(self) -> bool:
        return self in (MessageType.NDEATH, MessageType.DDEATH)

    @property
    def data(self) -> bool:
        return self in (MessageType.NDATA, MessageType.DDATA)


_DEVICE_TYPES = frozenset(
    {MessageType.DBIRTH, MessageType.DDEATH, MessageType.DDATA, MessageType.DCMD}
)


@dataclass(frozen=True, slots=True)
class SparkplugTopic:
    """A Sparkplug topic, read. For STATE: ``host_id`` set, the rest empty (``legacy``: the
    pre-3.0 ``STATE/<host_id>`` form)."""

    message_type: MessageType
    group_id: str = ""
    edge_node_id: str = ""
    device_id: str | None = None
    host_id: str | None = None
    legacy: bool = False

    @property
    def node_key(self) -> tuple[str, str]:
        """The edge node, unique in the infrastructure
        ([tck-id-topic-structure-namespace-unique-edge-node-descriptor])."""
        return (self.group_id, self.edge_node_id)


class TopicError(ValueError):
    """A topic that is not in the Sparkplug namespace, or breaks its structure."""


def parse_topic(topic: str) -> SparkplugTopic:
    """The Sparkplug topic ``topic`` is; TopicError naming the rule otherwise."""
    parts = topic.split("/")
    if len(parts) == 2 and parts[0] == STATE and parts[1]:
        return SparkplugTopic(MessageType.STATE, host_id=parts[1], legacy=True)
    if parts[0] != NAMESPACE:
        raise TopicError(
            f"topic {topic!r} is not in the Sparkplug B namespace {NAMESPACE!r} "
            "([tck-id-topic-structure-namespace-a])"
        )
    if len(parts) == 3 and parts[1] == STATE and parts[2]:
        return SparkplugTopic(MessageType.STATE, host_id=parts[2])
    if len(parts) not in (4, 5) or not all(parts[1:]):
        raise TopicError(
            f"topic {topic!r} is not {NAMESPACE}/group_id/message_type/edge_node_id"
            "[/device_id] ([tck-id-topic-structure])"
        )
    try:
        kind = MessageType(parts[2])
    except ValueError:
        raise TopicError(
            f"topic {topic!r}: {parts[2]!r} is not a Sparkplug message type "
            f"({', '.join(t.value for t in MessageType if t is not MessageType.STATE)})"
        ) from None
    has_device = len(parts) == 5
    if kind is MessageType.STATE or has_device != kind.device:
        rule = (
            "tck-id-topic-structure-namespace-device-id-associated-message-types"
            if kind.device
            else "tck-id-topic-structure-namespace-device-id-non-associated-message-types"
        )
        raise TopicError(
            f"topic {topic!r}: a {kind.value} topic "
            + ("names" if kind.device else "does not name")
            + f" a device ([{rule}])"
        )
    return SparkplugTopic(kind, parts[1], parts[3], parts[4] if has_device else None)
