"""The ingest job with ``[[routes]]`` against a real broker: one subscription into a JSON table,
a VARIANT table in the session's catalog, a text table and a Sparkplug route with its events
table, with a shared dead-letter table for what does not parse and what no route takes;
``kill -9`` between two tables' commits of one batch, then a restart: every table holds its
messages exactly once (QoS 2), and Sparkplug data is named from a birth of an earlier run.
And a bad routes file fails at start with exit status 2, naming the route, before Spark
starts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from devtools.delta_log import delta_row_count, txn_versions
from devtools.sparkplug_payloads import birth, data
from streaming_jobs.payloads import NOT_JSON
from streaming_jobs.routes import NO_ROUTE
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ingest_job import LAND_TIMEOUT, START_TIMEOUT, TRIGGER, Job, batch_files, run_job
from tests.support.publishing import PacedPublisher, as_messages, publish
from tests.support.waiting import wait_subscribed

BURST = 120  # before the kill
PACED = 360  # from just before the kill on, at RATE per second
RATE = 20.0
KINDS = ("json", "variant", "text", "sparkplug", "other")
NODE = "spBv1.0/plant/{}/edge1"
BIRTH = KINDS.index("sparkplug")
"""The first Sparkplug message, the node's birth: its metric ``value`` has alias 1."""


def message(seq: int) -> tuple[str, bytes]:
    """Each kind in turn; every fourth JSON payload and every seventh Sparkplug one is
    malformed; ``other`` has no route. Sparkplug data names its metric by alias only, so its
    rows are named only from the birth, which lies in an earlier batch."""
    kind = KINDS[seq % len(KINDS)]
    if kind == "sparkplug":
        if seq == BIRTH:
            return NODE.format("NBIRTH"), birth([("value", 1, 4, "long_value", seq)], 0)
        if seq % 7 == 0:
            return NODE.format("NDATA"), f"\xff{seq}".encode("latin-1")
        return NODE.format("NDATA"), data([(1, "long_value", seq)], (seq // len(KINDS)) % 256)
    topic = f"routes/{kind}/dev{seq % 3}"
    if kind == "json":
        malformed = (seq // len(KINDS)) % 4 == 0
        text = f'{{"seq": {seq}' if malformed else json.dumps({"seq": seq, "temp": seq / 2})
        return topic, text.encode()
    if kind == "variant":
        return topic, json.dumps({"seq": seq, "tags": ["a"] * (seq % 3)}).encode()
    return topic, str(seq).encode()


def config(tmp_path: Path, broker_url: str, client_id: str) -> Path:
    path = tmp_path / "routes.toml"
    path.write_text(
        f"""
broker = "{broker_url}"
client_id = "{client_id}"
topic = ["routes/#", "spBv1.0/plant/#"]
qos = 2
checkpoint = "{tmp_path / "checkpoint"}"
trigger = "{TRIGGER}"
dead_letter_table = "{tmp_path / "dead"}"
spark_conf = {{ "spark.sql.warehouse.dir" = "{tmp_path / "warehouse"}" }}

[[routes]]
topic = "routes/json/+"
table = "{tmp_path / "json"}"
payload_format = "json"
schema = "seq BIGINT NOT NULL, temp DOUBLE"

[[routes]]
topic = "routes/variant/+"
table = "default.routed_variants"
payload_format = "variant"

[[routes]]
topic = "routes/text/+"
table = "{tmp_path / "text"}"
payload_format = "text"
topic_columns = ["_", "_", "device"]

[[routes]]
topic = "spBv1.0/plant/#"
table = "{tmp_path / "metrics"}"
payload_format = "sparkplug"
events_table = "{tmp_path / "events"}"
"""
    )
    return path


def _kill_window(tmp_path: Path) -> int | None:
    """A batch the first route's table committed that the checkpoint has not, if any."""
    committed = set(batch_files(tmp_path / "checkpoint", "commits"))
    pending = [v for v in txn_versions(tmp_path / "json") if v not in committed]
    return max(pending) if pending else None


@pytest.mark.timeout(600)
def test_routes_land_each_message_once_per_table_through_a_kill_between_two_tables(
    broker_factory: BrokerFactory, spark: SparkSession, tmp_path: Path
) -> None:
    broker = broker_factory(max_queued_messages=100_000)
    client_id = unique_id("routes-")
    args = ["--config", str(config(tmp_path, broker.url, client_id))]
    total = BURST + PACED
    tables = {name: tmp_path / name for name in ("json", "text", "metrics", "dead")}
    tables["variant"] = tmp_path / "warehouse" / "routed_variants"

    def landed() -> int:
        # The birth has one more row (bdSeq); its event row is in the events table.
        rows = sum(delta_row_count(p) for p in tables.values() if (p / "_delta_log").is_dir())
        return rows - 1 if (tmp_path / "metrics" / "_delta_log").is_dir() else rows

    jobs: list[Job] = []
    publisher = PacedPublisher(
        broker, as_messages([message(s) for s in range(BURST, total)], qos=2), RATE,
        hold_at=PACED // 2,
    )  # fmt: skip
    try:
        jobs.append(Job.start(args, tmp_path, "run-1"))
        wait_subscribed(broker, client_id, "routes/#", 2, jobs[0])
        publish(broker, as_messages([message(s) for s in range(BURST)], qos=2))
        publisher.start()
        jobs[0].wait_for(
            "a batch in the first route's table but not yet in the checkpoint",
            lambda: _kill_window(tmp_path) is not None,
            START_TIMEOUT,
        )
        jobs[0].kill_9()
        killed_in = _kill_window(tmp_path)
        assert killed_in is not None, "the kill was meant to land between two tables' commits"
        publisher.release()
        jobs.append(Job.start(args, tmp_path, "run-2"))
        publisher.finish()
        jobs[1].wait_for(
            f"{total} rows in the five tables", lambda: landed() >= total, LAND_TIMEOUT
        )
        assert jobs[1].terminate() == 0, jobs[1].logs()
    finally:
        for job in jobs:
            job.cleanup()
        if publisher.ident is not None:
            publisher.join(5)

    def read(name: str) -> list[int]:
        frame = spark.read.format("delta").load(str(tables[name]))
        seq = {
            "json": F.col("seq"),
            "variant": F.expr("payload:seq::bigint"),
            "text": F.col("text").cast("bigint"),
            "metrics": F.col("long_value"),
            "dead": F.regexp_extract(F.col("payload").cast("string"), r"(\d+)", 1).cast("bigint"),
        }[name]
        if name == "metrics":
            frame = frame.where("metric_name is distinct from 'bdSeq'")
        return [int(r.s) for r in frame.select(seq.alias("s")).collect()]

    seqs = {name: read(name) for name in tables}
    every = Counter(s for values in seqs.values() for s in values)
    assert sorted(every) == list(range(total)) and set(every.values()) == {1}
    want = {kind: [s for s in range(total) if KINDS[s % len(KINDS)] == kind] for kind in KINDS}
    assert sorted(seqs["json"]) == [s for s in want["json"] if (s // len(KINDS)) % 4]
    assert sorted(seqs["variant"]) == want["variant"]
    assert sorted(seqs["text"]) == want["text"]
    assert sorted(seqs["metrics"]) == [s for s in want["sparkplug"] if s == BIRTH or s % 7]
    metrics = spark.read.format("delta").load(str(tables["metrics"]))
    names = Counter(r.metric_name for r in metrics.collect())
    assert names == {"bdSeq": 1, "value": len(seqs["metrics"])}, "a metric not resolved"
    events = spark.read.format("delta").load(str(tmp_path / "events")).collect()
    assert [(e.message_type, e.offset) for e in events] == [("NBIRTH", events[0].offset)]
    dead = spark.read.format("delta").load(str(tables["dead"]))
    reasons = Counter(
        "sparkplug" if r.reason.startswith("not a Sparkplug B payload") else r.reason
        for r in dead.select("reason").collect()
    )
    assert reasons == {
        NO_ROUTE: len(want["other"]),
        NOT_JSON: len(want["json"]) - len(seqs["json"]),
        "sparkplug": len(want["sparkplug"]) - len(seqs["metrics"]),
    }
    for name, path in tables.items():
        versions = txn_versions(path)
        assert len(versions) == len(set(versions)), f"{name}: a batch written twice"
        assert killed_in in versions, f"{name} lacks the batch replayed after the kill"
    devices = {r.device for r in spark.read.format("delta").load(str(tables["text"])).collect()}
    assert devices == {"dev0", "dev1", "dev2"}


def test_a_bad_route_fails_at_start_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        'broker = "tcp://127.0.0.1:1"\ncheckpoint = "/tmp/c"\n'
        '[[routes]]\ntopic = "a/#"\ntable = "/tmp/a"\n'
        '[[routes]]\ntopic = "a/b"\ntable = "/tmp/b"\npayload_format = "text"\n'
    )
    done = run_job(["--config", str(path)])
    assert done.returncode == 2, done.stderr
    assert "route 2 (topic 'a/b') can never take a message" in done.stderr
