"""The properties of an MQTT 5 PUBLISH that a consumer sees, by the names the CLI prints and
the Spark source's ``properties`` column uses (MQTT 5.0 section 3.3.2.3). Topic Alias is not
among them: the session resolves it into the topic (section 3.3.2.3.4)."""

from __future__ import annotations

from collections.abc import Mapping
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


def publish_properties(
    fields: Mapping[str, Any] | None, extra_user: tuple[tuple[str, str], ...] = ()
) -> Properties | None:
    """The PUBLISH properties a client sends for the consumer's view ``fields`` (a mapping of
    :data:`FIELDS`, as :func:`message_properties` makes, or any subset), with ``extra_user``
    after its User Properties; None when it sets none. A user property may be a (key, value)
    pair or a mapping with ``key`` and ``value``; text correlation data is sent as UTF-8.
    ``subscriptionIdentifiers`` are left out: the broker assigns them, and a client's PUBLISH
    must not carry one ([MQTT-3.3.4-6])."""
    get = (fields or {}).get
    user = [_pair(entry) for entry in get("userProperties") or ()]
    user.extend(extra_user)
    correlation = get("correlationData")
    if isinstance(correlation, str):
        correlation = correlation.encode()
    props = Properties(
        payload_format_indicator=get("payloadFormatIndicator"),
        message_expiry_interval=get("messageExpiryInterval"),
        content_type=get("contentType"),
        response_topic=get("responseTopic"),
        correlation_data=None if correlation is None else bytes(correlation),
        user_properties=user,
    )
    if props == Properties():
        return None
    return props


def _pair(entry: Any) -> tuple[str, str]:
    if isinstance(entry, Mapping):
        return str(entry["key"]), str(entry["value"])
    key, value = entry
    return str(key), str(value)
