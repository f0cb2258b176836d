"""``filter_covers``: one topic filter matches every topic another matches (section 4.7),
checked against ``topic_matches`` over every small filter and topic."""

from __future__ import annotations

import itertools

import pytest

from connector.mqtt.topics import filter_covers, topic_matches

TOPICS = [
    "/".join(levels)
    for depth in range(1, 5)
    for levels in itertools.product(["a", "b", "$s", "", "z"], repeat=depth)
]
"""Every topic of up to four levels; ``z`` appears in no filter below, so it stands for any
level a ``+`` or ``#`` takes."""
FILTERS = sorted(
    {"#"}
    | {
        "/".join(levels) + tail
        for depth in range(1, 4)
        for levels in itertools.product(["a", "b", "$s", "", "+"], repeat=depth)
        for tail in ("", "/#")
    }
)


def test_a_filter_covers_another_exactly_when_it_matches_every_topic_the_other_does() -> None:
    matched = {f: {t for t in TOPICS if topic_matches(f, t)} for f in FILTERS}
    wrong = [
        (outer, inner)
        for outer in FILTERS
        for inner in FILTERS
        if filter_covers(outer, inner) != (matched[inner] <= matched[outer])
    ]
    assert not wrong, wrong[:10]


@pytest.mark.parametrize(
    ("outer", "inner", "covers"),
    [
        ("plant/#", "plant/+/telemetry", True),
        ("plant/#", "plant", True),  # "#" also matches the parent level
        ("plant/+/telemetry", "plant/#", False),
        ("#", "$SYS/broker/load", False),  # no wildcard at the first level matches "$..."
        ("+/#", "#", True),
        ("plant/+", "plant/+/x", False),
    ],
)
def test_examples(outer: str, inner: str, covers: bool) -> None:
    assert filter_covers(outer, inner) is covers
