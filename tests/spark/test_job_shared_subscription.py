"""Two ingest jobs on one MQTT shared subscription, writing one Delta table.

Two ``spark-submit streaming_jobs/ingest.py`` applications, each with its own client id, WAL and
checkpoint, subscribe ``$share/<group>/<filter>`` on a real Mosquitto (which shares it among
MQTT 3.1.1 clients too) and append to the same table. The broker gives each message to one
member of the group; Delta's optimistic concurrency lets two applications' blind appends (each
with its own ``SetTransaction`` app id, the query's id) commit one after the other. Started
together, both jobs also create the table at the same moment.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import TypedDict

from devtools.delta_log import DeltaSnapshot, delta_commits, delta_version, file_rows
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ingest_job import LAND_TIMEOUT, TRIGGER, Job, spark_submit
from tests.support.publishing import Message, publish
from tests.support.waiting import wait_subscribed

GROUP = "ingest"
FILTER = "shr/+/data"
SHARED = f"$share/{GROUP}/{FILTER}"
COUNT = 300
ROUND = 50
SUMMARY = re.compile(r"stopped: \d+ batch(?:es)?, (\d+) rows(?P<rest>.*)$", re.MULTILINE)


class LoopbackEnv(TypedDict):
    SPARK_LOCAL_IP: str


LOOPBACK_ENV: LoopbackEnv = {"SPARK_LOCAL_IP": "127.0.0.1"}
"""Spark's driver binds loopback, not the machine's first interface."""
POSSIBLE_DUPLICATES = re.compile(r"(\d+) possible duplicates")


def messages(count: int = COUNT) -> list[Message]:
    """QoS 1 and QoS 2 in turn over four topics the filter matches, distinct payloads."""
    return [
        Message(f"shr/dev-{n % 4}/data", f"shared-{n}".encode(), qos=1 + n % 2)
        for n in range(count)
    ]


def summary(job: Job) -> tuple[int, int]:
    """Rows and possible duplicates in the job's summary line at exit."""
    found = SUMMARY.search(job.stdout)
    assert found is not None, f"no summary line\n{job.logs()}"
    duplicates = POSSIBLE_DUPLICATES.search(found["rest"])
    return int(found[1]), int(duplicates[1]) if duplicates else 0


def rows_per_app(table: Path) -> Counter[str]:
    """Rows each ``SetTransaction`` app id (each query) committed to the table."""
    per_app: Counter[str] = Counter()
    for commit in delta_commits(table):
        apps = [a["txn"]["appId"] for a in commit["actions"] if "txn" in a]
        added = sum(file_rows(a["add"]) or 0 for a in commit["actions"] if "add" in a)
        if added:
            assert len(apps) == 1, f"commit {commit['version']} has app ids {apps}"
            per_app[apps[0]] += added
    return per_app


def commits_per_app(table: Path) -> Counter[str]:
    """Commits that added rows, per ``SetTransaction`` app id."""
    return Counter(
        a["txn"]["appId"]
        for commit in delta_commits(table)
        if any("add" in a for a in commit["actions"])
        for a in commit["actions"]
        if "txn" in a
    )


def table_payloads(table: Path) -> dict[str, list]:
    """Columns ``payload``, ``topic``, ``qos`` and ``duplicate`` of every row of the table."""
    data = DeltaSnapshot.load(table).read()
    if data.num_rows == 0:
        return {"payload": [], "topic": [], "qos": [], "duplicate": []}
    return data.select(["payload", "topic", "qos", "duplicate"]).to_pydict()


def test_two_jobs_share_a_subscription_into_one_table(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    table = tmp_path / "table"
    ids = [unique_id("share-a-"), unique_id("share-b-")]
    jobs = []
    try:
        for index, client_id in enumerate(ids):
            args = [
                "--broker", broker.url, "--topic", SHARED, "--qos", "2",
                "--client-id", client_id, "--table", str(table),
                "--checkpoint", str(tmp_path / f"checkpoint-{index}"), "--trigger", TRIGGER,
            ]  # fmt: skip
            jobs.append(
                Job.start(args, tmp_path, f"job-{index}", launcher=spark_submit(), **LOOPBACK_ENV)
            )
        for job, client_id in zip(jobs, ids, strict=True):
            wait_subscribed(broker, client_id, SHARED, 2, job)
        sent = messages()
        seen: dict = {"version": -1, "payloads": set()}

        def landed(wanted: set[bytes]) -> bool:
            for other in jobs:
                other.alive_or_fail()
            version = delta_version(table)
            if version != seen["version"]:
                seen["version"] = version
                seen["payloads"] = {bytes(p) for p in table_payloads(table)["payload"]}
            return seen["payloads"] >= wanted

        # In rounds, each landing before the next: both jobs get a share of every round, so
        # their appends to the table fall at the same moments again and again.
        for start in range(0, COUNT, ROUND):
            publish(broker, sent[start : start + ROUND])
            wanted = {m.payload for m in sent[: start + ROUND]}

            def round_landed(w: set[bytes] = wanted) -> bool:
                return landed(w)

            jobs[0].wait_for(f"{len(wanted)} messages in {table}", round_landed, LAND_TIMEOUT)
        # SIGTERM to the JVMs: each stops after its batch in flight, a Java process's 143.
        statuses = [job.terminate() for job in jobs]
        assert statuses == [128 + 15] * 2, "\n".join(job.logs() for job in jobs)
    finally:
        for job in jobs:
            job.cleanup()

    columns = table_payloads(table)
    got = Counter(bytes(p) for p in columns["payload"])
    wanted = {m.payload for m in sent}
    assert set(got) == wanted, f"unexpected rows: {sorted(set(got) - wanted)[:10]}"
    by_payload = {m.payload: m for m in sent}
    twice = {p: n for p, n in got.items() if n > 1}
    assert all(by_payload[p].qos == 1 for p in twice), f"QoS 2 messages stored twice: {twice}"
    for payload, topic, qos in zip(
        columns["payload"], columns["topic"], columns["qos"], strict=True
    ):
        message = by_payload[bytes(payload)]
        assert (topic, qos) == (message.topic, message.qos), "the PUBLISH's topic, not the filter"
    first = Counter(bytes(p) for p, d in zip(columns["payload"], columns["duplicate"], strict=True)
                    if not d)  # fmt: skip
    assert all(n == 1 for n in first.values()), "a first delivery stored twice"

    # Each job received a share; together they wrote every row, and QoS 1 extras are the
    # possible duplicates they reported.
    (rows_a, duplicates_a), (rows_b, duplicates_b) = (summary(job) for job in jobs)
    assert rows_a > 0 and rows_b > 0, f"one job got nothing: {rows_a}, {rows_b}"
    assert rows_a + rows_b == sum(got.values())
    assert sum(got.values()) - len(wanted) == duplicates_a + duplicates_b
    per_app = rows_per_app(table)
    assert sorted(per_app.values()) == sorted([rows_a, rows_b]), per_app
    commits = commits_per_app(table)
    assert len(commits) == 2 and min(commits.values()) >= 2, commits
