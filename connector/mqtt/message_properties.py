"""The properties of an MQTT 5 PUBLISH that a consumer sees, by the names the CLI prints and
the Spark source's ``properties`` column uses (MQTT 5.0 section 3.3.2.3). Topic Alias is not
among them: the session resolves it into the topic (section 3.3.2.3.4)."""

from __future__ import annotations

from typing import Any

from .properties import Properties

FIELDS = (
    "payloadFormatIndicator",
    "messageExpiryInterval",
    "contentType",
    "responseTopic",
    "correlationData",
    "userProperties",
    "subscriptionIdentifiers",
)
"""The consumer's names, in column order."""


def message_properties(props: Properties | None) -> dict[str, Any]:
    """The consumer's view of ``props``: None where a property is absent, ``userProperties``
    as (key, value) pairs in wire order with repeats kept (section 3.3.2.3.7), and
    ``subscriptionIdentifiers`` as a list (both empty when absent)."""
    if props is None:
        return dict.fromkeys(FIELDS[:5]) | {"userProperties": [], "subscriptionIdentifiers": []}
    return {
        "payloadFormatIndicator": props.payload_format_indicator,
        "messageExpiryInterval": props.message_expiry_interval,
        "contentType": props.content_type,
        "responseTopic": props.response_topic,
        "correlationData": props.correlation_data,
        "userProperties": list(props.user_properties),
        "subscriptionIdentifiers": list(props.subscription_identifiers),
    }
