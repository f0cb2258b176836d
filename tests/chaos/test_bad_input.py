"""Bad options and bad payloads, counted with the other faults: every invalid option is refused
at ``load()`` with an error naming it, and every malformed JSON payload lands in the dead-letter
rows with a reason while every good one lands in the table: good + dead-letter = all."""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest
from pyspark.sql import SparkSession

from connector.options.source import InvalidOptionError, SourceOptions
from connector.spark.schema import SCHEMA_DDL
from streaming_jobs.ingest import parse_schema
from streaming_jobs.payloads import REASON, dead_letter_rows, decode, make_plan, table_rows
from tests.chaos.harness import rng_for, sized
from tests.support.ledger import Tally

pytestmark = pytest.mark.chaos

BASE = {"brokerUrl": "tcp://127.0.0.1:1883", "topic": "plant/#"}
BAD_VALUES = {
    "qos": ["3", "-1", "one", ""],
    "keepAlive": ["-5", "65536", "1.5s"],
    "connectTimeout": ["0", "soon", "nan"],
    "maxMessagesPerTrigger": ["0", "-3", "many"],
    "minMessagesPerTrigger": ["0", "x"],
    "maxTriggerDelay": ["-1", "later"],
    "maxBacklogMessages": ["0", "lots"],
    "failOnDataLoss": ["maybe", "2"],
    "cleanSession": ["perhaps"],
    "mqttVersion": ["6", "3.2", "5.1"],
    "receiveMaximum": ["0", "65536", "8"],  # 8: valid, but an MQTT 5 setting on 3.1.1
    "sessionExpiryInterval": ["-1", "4294967296", "60"],
    "topicAliasMaximum": ["-1", "65536", "x"],
    "partitionData": ["s3", "both"],
    "recordsPerPartition": ["0"],
    "availableNowIdleTimeout": ["0", "-2"],
    "receivers": ["0", "65", "two"],
    "shardBy": ["hash"],
    "brokerUrl": ["http://broker", "tcp://", "tcp://user:s3cr3t@host:1883"],
    "topic": ["a/#/b", "a+/b", ""],
}
SCHEMA = "seq BIGINT NOT NULL, temp DOUBLE, status STRING"
RECEIVED = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_every_bad_option_is_refused_naming_it(tally: Tally) -> None:
    refused = 0
    for name, values in BAD_VALUES.items():
        for value in values:
            with pytest.raises(InvalidOptionError) as caught:
                SourceOptions.parse({**BASE, name: value})
            message = str(caught.value)
            assert name.lower() in message.lower() or "topic" in message, (name, value, message)
            assert "s3cr3t" not in message, "credentials in a URL are never echoed"
            refused += 1
    tally.add("bad_options_refused", refused)


def _payload(rng: random.Random, seq: int) -> tuple[bytes, bool]:
    """A payload and whether it is valid for SCHEMA."""
    good = {"seq": seq, "temp": round(rng.uniform(-20, 40), 2), "status": rng.choice("abc")}
    kind = rng.randrange(8)
    if kind < 4:
        return json.dumps(good).encode(), True
    text = json.dumps(good).encode()
    bad = [
        text[: rng.randrange(1, len(text) - 1)],  # truncated
        b"\xff" + text,  # not UTF-8
        json.dumps({**good, "temp": "hot"}).encode(),  # wrong type
        json.dumps({"temp": 1.0}).encode(),  # required field missing
    ][kind - 4]
    return bad, False


def test_malformed_payloads_are_dead_lettered_and_good_ones_kept(
    spark: SparkSession, tally: Tally, request: pytest.FixtureRequest
) -> None:
    rng = rng_for(request.node.name)
    count = sized(400, 4000)
    cases = [_payload(rng, seq) for seq in range(count)]
    rows = [
        ("plant/s/d", payload, 1, False, False, 1 + i % 65535, RECEIVED, i, 0)
        for i, (payload, _) in enumerate(cases)
    ]
    frame = spark.createDataFrame(
        rows, SCHEMA_DDL.replace("timestamp TIMESTAMP NOT NULL", "timestamp TIMESTAMP")
    )
    plan = make_plan("json", parse_schema(SCHEMA), dead_letters=True)
    decoded = decode(frame, plan)
    good = {r.offset for r in table_rows(decoded, plan).select("offset").collect()}
    bad = {
        r.offset: r.reason for r in dead_letter_rows(decoded).select("offset", "reason").collect()
    }
    assert good | set(bad) == set(range(count)) and not good & set(bad), "each row exactly once"
    assert good == {i for i, (_, ok) in enumerate(cases) if ok}
    assert all(reason for reason in bad.values()), "every dead letter has a reason"
    assert REASON not in table_rows(decoded, plan).columns
    tally.add("bad_payloads_dead_lettered", len(bad))
