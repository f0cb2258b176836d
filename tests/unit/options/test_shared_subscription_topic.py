"""A shared subscription given as the topic: ``$share/<group>/<filter>`` with one receiver, as
several applications sharing one subscription use it (no Spark, no broker)."""

from __future__ import annotations

import pytest

from connector.mqtt.topics import topic_matches
from connector.options.source import InvalidOptionError, SourceOptions
from streaming_jobs.ingest_config import parse_config, source_options

SHARED = "$share/ingest/plant/+/telemetry"
BASE = {"brokerUrl": "tcp://broker.example:1883", "topic": SHARED}


def test_the_topic_option_takes_a_shared_subscription_as_it_is() -> None:
    opts = SourceOptions.parse(BASE)
    assert opts.topics == (SHARED,)
    assert opts.receivers == 1
    # The broker delivers the PUBLISH's own topic, which the filter after the group matches.
    assert topic_matches(SHARED, "plant/north/telemetry")
    assert not topic_matches(SHARED, "ingest/plant/north/telemetry")


def test_two_jobs_on_one_shared_subscription_get_their_own_default_client_ids() -> None:
    argv = ["--broker", "tcp://127.0.0.1:1883", "--topic", SHARED, "--table", "t"]
    first, _ = parse_config([*argv, "--checkpoint", "/data/c1"], environ={})
    second, _ = parse_config([*argv, "--checkpoint", "/data/c2"], environ={})
    options = [SourceOptions.parse(source_options(c)) for c in (first, second)]
    assert [o.topics for o in options] == [(SHARED,), (SHARED,)]
    assert options[0].client_id != options[1].client_id
    assert options[0].wal_path != options[1].wal_path


@pytest.mark.parametrize("topic", ["$share/in+gest/a/#", "$share/ingest/a#"])
def test_a_shared_subscription_with_a_misplaced_wildcard_is_refused(topic: str) -> None:
    with pytest.raises(InvalidOptionError, match="option 'topic'"):
        SourceOptions.parse({**BASE, "topic": topic})
