"""``streaming_jobs/ingest.py --payload-format sparkplug`` killed with SIGKILL while an edge node
sends alias-only DATA, then restarted with no new birth: every metric resolved, none twice, the
same rows as the pure decoder makes of the same messages in one pass; the births and the host's
STATE in the events table once each; a payload that is not Sparkplug in the dead-letter table.

The edge node's messages go at QoS 2 into the job's persistent session so that the broker keeps
them while the job is down (Sparkplug's own DATA is QoS 0: docs/sparkplug.md says what that
means for loss), and every delivery is exactly once: only the replay of state is under test.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row, SparkSession

from connector.sparkplug.messages import Message as Stored
from connector.sparkplug.messages import decode_messages
from connector.sparkplug.state import SparkplugState
from devtools.delta_log import delta_row_count, txn_versions
from devtools.sparkplug_payloads import birth, data, row_key
from tests.support.brokers import BrokerFactory
from tests.support.ingest_job import LAND_TIMEOUT, START_TIMEOUT, TRIGGER, Job, batch_files
from tests.support.publishing import PacedPublisher, as_messages, publish
from tests.support.waiting import wait_subscribed

N = "spBv1.0/plant/{}/edge1"
D = "spBv1.0/plant/{}/edge1/pump"
PACED = 400  # alias-only DATA from just before the kill on, at RATE per second
RATE = 20.0
BIRTHS = [
    (
        N.format("NBIRTH"),
        birth([("temp", 1, 10, "double_value", 0.0), ("n", 2, 4, "long_value", 0)], 0),
    ),
    (D.format("DBIRTH"), birth([("rpm", 3, 1, "int_value", 0)], bd_seq=-1, seq=1)),
    ("spBv1.0/STATE/scada", b'{"online": true, "timestamp": 1700000000000}'),
    (N.format("NDATA"), b"\x12\x09not protobuf"),  # a dead letter: does not decode
]


def data_message(i: int) -> tuple[str, bytes]:
    """The i-th DATA message (seq 2, 3, ... wrapping at 255): node metrics by alias, every
    fourth a device's Int8 (negative, sent as Tahu Java does: sign-extended to 32 bits)."""
    seq = (i + 2) % 256
    if i % 4 == 3:
        return D.format("DDATA"), data([(3, "int_value", -(i % 100) & 0xFFFFFFFF)], seq)
    return N.format("NDATA"), data([(1, "double_value", i / 4), (2, "long_value", i)], seq)


def _expected(messages: list[tuple[str, bytes]]) -> Counter[tuple[Any, ...]]:
    rows = decode_messages(
        [Stored(t, p, 2, 1_000 * i, i) for i, (t, p) in enumerate(messages)], SparkplugState()
    )
    kept = [i for i in range(len(rows)) if rows.columns["metric_index"][i] is not None]

    def key_of(i: int) -> tuple[Any, ...]:
        return row_key(lambda name: rows.columns[name][i])

    return Counter(key_of(i) for i in kept)


@pytest.mark.timeout(600)
def test_kill_9_during_alias_only_data_then_restart_without_a_birth(
    broker_factory: BrokerFactory, spark: SparkSession, tmp_path: Path
) -> None:
    broker = broker_factory(max_queued_messages=100_000)
    table, events, dead = tmp_path / "metrics", tmp_path / "events", tmp_path / "dead"
    checkpoint = tmp_path / "checkpoint"
    client_id = f"spb-{uuid.uuid4().hex[:12]}"
    args = [
        "--broker", broker.url, "--topic", "spBv1.0/#", "--client-id", client_id, "--qos", "2",
        "--table", str(table), "--checkpoint", str(checkpoint), "--trigger", TRIGGER,
        "--payload-format", "sparkplug", "--events-table", str(events),
        "--dead-letter-table", str(dead), "--max-messages-per-trigger", "40",
    ]  # fmt: skip
    first = [data_message(i) for i in range(40)]
    paced = [data_message(i) for i in range(40, 40 + PACED)]
    everything = BIRTHS + first + paced
    expected = _expected(everything)
    jobs: list[Job] = []
    publisher = PacedPublisher(broker, as_messages(paced, qos=2), RATE, hold_at=PACED // 2)
    try:
        jobs.append(Job.start(args, tmp_path, "run-1"))
        wait_subscribed(broker, client_id, "spBv1.0/#", 2, jobs[0])
        publish(broker, as_messages(BIRTHS + first, qos=2))
        publisher.start()
        jobs[0].wait_for(
            "a committed batch of alias-only DATA",
            lambda: batch_files(checkpoint, "commits") and delta_row_count(table) > 10,
            START_TIMEOUT,
        )
        jobs[0].kill_9()
        sent_at_kill = publisher.sent
        publisher.release()
        committed_at_kill = delta_row_count(table)

        jobs.append(Job.start(args, tmp_path, "run-2"))
        publisher.finish()
        jobs[1].wait_for(
            f"{sum(expected.values())} metric rows",
            lambda: delta_row_count(table) >= sum(expected.values()),
            LAND_TIMEOUT,
        )
        assert jobs[1].terminate() == 0, jobs[1].logs()
    finally:
        for job in jobs:
            job.cleanup()
        publisher.join(5)

    assert sent_at_kill < PACED, "the edge node was meant to be sending during the kill"
    assert committed_at_kill < sum(expected.values()), "the kill was meant to leave work"
    rows = spark.read.format("delta").load(str(table)).collect()

    def key_of(row: Row) -> tuple[Any, ...]:
        return row_key(lambda name: row[name])

    got = Counter(key_of(r) for r in rows)
    assert got == expected, (
        f"missing {list((expected - got).items())[:5]}, extra {list((got - expected).items())[:5]}"
    )
    keys = Counter((r["receiver"], r["offset"], r["metric_index"]) for r in rows)
    assert max(keys.values()) == 1
    assert all(r["metric_name"] is not None and r["reason"] is None for r in rows)
    negative = [r["long_value"] for r in rows if r["metric_name"] == "rpm" and r["seq"] != 1]
    assert negative and all(v <= 0 for v in negative) and min(negative) < 0

    kinds = sorted(
        (r["message_type"], r["host_id"], r["host_online"])
        for r in spark.read.format("delta").load(str(events)).collect()
    )
    assert kinds == [("DBIRTH", None, None), ("NBIRTH", None, None), ("STATE", "scada", True)]
    (letter,) = spark.read.format("delta").load(str(dead)).collect()
    assert bytes(letter["payload"]) == BIRTHS[3][1]
    assert letter["reason"].startswith("not a Sparkplug B payload")
    for path in (table, events, dead):
        versions = txn_versions(path)
        assert len(versions) == len(set(versions)), f"{path}: a batch written twice"
