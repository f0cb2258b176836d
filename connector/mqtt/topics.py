"""Topic names and topic filters (3.1.1 section 4.7).

A topic name (in PUBLISH) never holds wildcards; a topic filter (in SUBSCRIBE) may hold ``+``
as a whole level and ``#`` as the whole last level. Both are non-empty UTF-8 without U+0000,
at most 65535 bytes encoded.

The validators check what the caller gives (:class:`~connector.mqtt.errors.InvalidTopic`);
the codec's readers turn their verdict on a received topic into a ``MalformedFrame``.
"""

from __future__ import annotations

from .errors import InvalidArgument, InvalidTopic, MalformedFrame

MAX_STRING_BYTES = 65535


def _check_common(text: str, what: str) -> None:
    if not text:
        raise InvalidTopic(f"{what} must be at least one character long (section 4.7.3)")
    if "\x00" in text:
        raise InvalidTopic(f"{what} must not contain U+0000 (section 1.5.3)")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_STRING_BYTES:
        raise InvalidTopic(f"{what} is longer than 65535 bytes in UTF-8 (section 1.5.3)")


def validate_topic_name(topic: str) -> str:
    """Return ``topic`` if it is a valid topic name, else raise InvalidTopic (4.7.3, 3.3.2.1)."""
    _check_common(topic, "a topic name")
    if "+" in topic or "#" in topic:
        raise InvalidTopic(
            f"the topic name {topic!r} contains a wildcard; a PUBLISH topic must not "
            "(section 3.3.2.1)"
        )
    return topic


def validate_topic_filter(topic_filter: str) -> str:
    """Return ``topic_filter`` if valid, else raise InvalidTopic (section 4.7.1)."""
    _check_common(topic_filter, "a topic filter")
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            raise InvalidTopic(
                f"in topic filter {topic_filter!r}, '#' must be the whole last level "
                "(section 4.7.1.2)"
            )
        if "+" in level and level != "+":
            raise InvalidTopic(
                f"in topic filter {topic_filter!r}, '+' must occupy a whole level (section 4.7.1.3)"
            )
    return topic_filter


SHARE_PREFIX = "$share/"
"""The prefix of a Shared Subscription's topic filter (MQTT 5.0 section 4.8.2)."""


def topic_matches(topic_filter: str, topic: str) -> bool:
    """True if ``topic`` matches ``topic_filter`` (section 4.7).

    Wildcards at the first level do not match topics starting with ``$`` (section 4.7.2).
    A shared subscription ``$share/<group>/<filter>`` matches as ``<filter>``.
    """
    if topic_filter.startswith(SHARE_PREFIX):
        parts = topic_filter.split("/", 2)
        topic_filter = parts[2] if len(parts) == 3 else ""
    f_levels = topic_filter.split("/")
    t_levels = topic.split("/")
    if topic.startswith("$") and f_levels[0] in ("+", "#"):
        return False
    for index, level in enumerate(f_levels):
        if level == "#":
            return True
        if index >= len(t_levels):
            return False
        if level != "+" and level != t_levels[index]:
            return False
    return len(f_levels) == len(t_levels)


def filter_covers(outer: str, inner: str) -> bool:
    """True if every topic that filter ``inner`` matches, filter ``outer`` matches too (the
    rules of :func:`topic_matches`: ``#`` also matches the parent level, section 4.7.1.2, and a
    wildcard at the first level no topic starting with ``$``, section 4.7.2)."""
    outer_levels, inner_levels = outer.split("/"), inner.split("/")
    wild = ("+", "#")
    if outer_levels[0] in wild and inner_levels[0] not in wild and inner.startswith("$"):
        return False
    for index, level in enumerate(inner_levels):
        if index >= len(outer_levels):
            return False
        if outer_levels[index] == "#":
            return True
        if level == "#" and index == 0 and outer_levels == ["+", "#"]:
            return True  # every topic has a first level: "#" matches what "+/#" does
        if level == "#" or (level == "+" and outer_levels[index] != "+"):
            return False
        if outer_levels[index] not in ("+", level):
            return False
    rest = outer_levels[len(inner_levels) :]
    return rest in ([], ["#"])


def check_shared(topic_filter: str, error: type[MalformedFrame] | type[InvalidArgument]) -> bool:
    """Whether ``topic_filter`` is a Shared Subscription, checking its form: ``$share/``, a
    ShareName of one or more characters without ``/``, ``+`` or ``#``, ``/``, a topic filter
    (MQTT 5.0 section 4.8.2)."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return False
    share_name, slash, rest = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not share_name or "+" in share_name or "#" in share_name or not slash or not rest:
        raise error(
            f"shared subscription {topic_filter!r} must be $share/<ShareName>/<filter>, the "
            "ShareName at least one character without '/', '+' or '#' (MQTT 5.0 section 4.8.2)"
        )
    return True


def check_subscription(
    topic_filter: str, options: int, error: type[MalformedFrame] | type[InvalidArgument]
) -> None:
    """An MQTT 5.0 topic filter and its Subscription Options byte (MQTT 5.0 section 3.8.3.1)."""
    if error is InvalidArgument:
        validate_topic_filter(topic_filter)
    shared = check_shared(topic_filter, InvalidTopic if error is InvalidArgument else error)
    if type(options) is not int or not 0 <= options <= 0xFF:
        raise error(f"Subscription Options {options!r} is not a byte (MQTT 5.0 section 3.8.3.1)")
    if options & 0xC0:
        raise error(
            f"Subscription Options {options:#04x}: bits 6 and 7 are reserved and must be 0 "
            "(MQTT 5.0 section 3.8.3.1)"
        )
    if options & 0x03 == 3:
        raise error(
            f"Subscription Options {options:#04x}: maximum QoS 3 is not allowed "
            "(MQTT 5.0 section 3.8.3.1)"
        )
    if options & 0x30 == 0x30:
        raise error(
            f"Subscription Options {options:#04x}: Retain Handling 3 is not allowed "
            "(MQTT 5.0 section 3.8.3.1)"
        )
    if shared and options & 0x04:
        raise error(
            f"No Local set on the shared subscription {topic_filter!r} is a Protocol Error "
            "(MQTT 5.0 section 3.8.3.1)"
        )
