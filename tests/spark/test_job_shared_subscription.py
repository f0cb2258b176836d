"""Two ingest jobs on one MQTT shared subscription: a table each, or one Delta table for both.

Two ``spark-submit streaming_jobs/ingest.py`` applications, each with its own client id, WAL and
checkpoint, subscribe ``$share/<group>/<filter>`` on a real Mosquitto (which shares it among
MQTT 3.1.1 clients too) and append each to its own table (QoS 1 and 2 mixed: QoS 1 extras are
the possible duplicates the jobs report), or both to one table (the kill test, QoS 2). The
broker gives each message to one member of the group; Delta's optimistic concurrency lets two
applications' blind appends (each with its own ``SetTransaction`` app id, the query's id)
commit one after the other. Started together, both jobs also create the shared table at the
same moment.

The kill test ``kill -9``s one job's process tree while its batch of a round is planned and not
committed, publishes while it is down, and restarts it on its client id and checkpoint (so on
its WAL). Mosquitto 2.0 keeps the dead member's persistent session in the group: what the
session had in flight is sent to it again when it reconnects, and its turns of the round robin
are queued for it meanwhile (docs/deployment.md, "Scaling out across applications"). The test
asserts what holds whichever member a broker picks: every QoS 2 message once in the union of
the tables, and each job's WAL records once in its own rows, the killed job's from before the
kill included.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TypedDict

import pyarrow.parquet as pq

from devtools.broker_process import BrokerProcess
from devtools.delta_log import DeltaSnapshot, delta_commits, delta_version, file_rows
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ingest_job import LAND_TIMEOUT, TRIGGER, Job, batch_files, spark_submit
from tests.support.publishing import Message, publish
from tests.support.waiting import wait_subscribed

GROUP = "ingest"
FILTER = "shr/+/data"
SHARED = f"$share/{GROUP}/{FILTER}"
COUNT = 300
ROUND = 50
KILL_ROUNDS = 5
"""Rounds of the kill test: two land, one is in flight at the kill, one goes out while the job
is down, one after its restart."""
KILL_ROUND = 40
SUMMARY = re.compile(r"stopped: \d+ batch(?:es)?, (\d+) rows(?P<rest>.*)$", re.MULTILINE)
QUERY = re.compile(r" INFO query (\S+) started")


class LoopbackEnv(TypedDict):
    SPARK_LOCAL_IP: str


LOOPBACK_ENV: LoopbackEnv = {"SPARK_LOCAL_IP": "127.0.0.1"}
"""Spark's driver binds loopback, not the machine's first interface."""
POSSIBLE_DUPLICATES = re.compile(r"(\d+) possible duplicates")


def messages(count: int = COUNT, qos: int | None = None) -> list[Message]:
    """Over four topics the filter matches, distinct payloads; at ``qos``, else QoS 1 and QoS 2
    in turn."""
    return [
        Message(f"shr/dev-{n % 4}/data", f"shared-{n}".encode(), qos=qos or 1 + n % 2)
        for n in range(count)
    ]


def start_job(
    broker: BrokerProcess, client_id: str, table: Path, checkpoint: Path, name: str
) -> Job:
    """An ingest job under ``spark-submit`` on the shared subscription at QoS 2 (its WAL in
    the checkpoint); the same arguments start it again on the same session, WAL and query."""
    args = [
        "--broker", broker.url, "--topic", SHARED, "--qos", "2", "--client-id", client_id,
        "--table", str(table), "--checkpoint", str(checkpoint), "--trigger", TRIGGER,
    ]  # fmt: skip
    return Job.start(args, checkpoint.parent, name, launcher=spark_submit(), **LOOPBACK_ENV)


def summary(job: Job) -> tuple[int, int]:
    """Rows and possible duplicates in the job's summary line at exit."""
    found = SUMMARY.search(job.stdout)
    assert found is not None, f"no summary line\n{job.logs()}"
    duplicates = POSSIBLE_DUPLICATES.search(found["rest"])
    return int(found[1]), int(duplicates[1]) if duplicates else 0


def query_id(job: Job) -> str:
    """The id of the job's query (the app id of its commits), from its log."""
    found = QUERY.search(job.stdout)
    assert found is not None, f"no query started\n{job.logs()}"
    return found[1]


def payloads_per_app(*tables: Path) -> dict[str, Counter[bytes]]:
    """The payloads each ``SetTransaction`` app id (each query) committed to the tables."""
    per_app: dict[str, Counter[bytes]] = {}
    for table in dict.fromkeys(tables):
        snapshot = DeltaSnapshot(table)
        for commit in delta_commits(table):
            apps = [a["txn"]["appId"] for a in commit["actions"] if "txn" in a]
            files = [a["add"]["path"] for a in commit["actions"] if "add" in a]
            if files:
                assert len(apps) == 1, f"commit {commit['version']} has app ids {apps}"
                for path in files:
                    column = pq.read_table(snapshot.data_file(path), columns=["payload"])
                    per_app.setdefault(apps[0], Counter()).update(
                        bytes(p) for p in column["payload"].to_pylist()
                    )
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


class Tables:
    """The payloads in one table or several together, each read again only once it has a new
    version."""

    def __init__(self, *tables: Path) -> None:
        self.tables = list(dict.fromkeys(tables))
        self._read: dict[Path, tuple[int, Counter[bytes]]] = {}

    def __str__(self) -> str:
        return ", ".join(map(str, self.tables))

    def payloads(self) -> Counter[bytes]:
        together: Counter[bytes] = Counter()
        for table in self.tables:
            version = delta_version(table)
            read = self._read.get(table)
            if read is None or read[0] != version:
                payloads = table_payloads(table)["payload"]
                read = self._read[table] = (version, Counter(bytes(p) for p in payloads))
            together.update(read[1])
        return together

    def wait_for(self, wanted: Sequence[Message], jobs: Sequence[Job]) -> None:
        """Wait until every payload of ``wanted`` is in the tables, failing at once if one of
        ``jobs`` exits."""

        def landed() -> bool:
            for job in jobs:
                job.alive_or_fail()
            return self.payloads().keys() >= {m.payload for m in wanted}

        jobs[0].wait_for(f"{len(wanted)} messages in {self}", landed, LAND_TIMEOUT)

    def check_rows(self, sent: Sequence[Message]) -> Counter[bytes]:
        """Every row is a message of ``sent`` with its topic (not the filter) and QoS, and
        every message of ``sent`` has a row; how many rows each payload has."""
        by_payload = {m.payload: m for m in sent}
        got: Counter[bytes] = Counter()
        for table in self.tables:
            columns = table_payloads(table)
            for payload, topic, qos in zip(
                columns["payload"], columns["topic"], columns["qos"], strict=True
            ):
                message = by_payload.get(bytes(payload))
                assert message is not None, f"unexpected row {bytes(payload)!r} in {table}"
                assert (topic, qos) == (message.topic, message.qos), "the PUBLISH's topic and QoS"
                got[message.payload] += 1
        missing = by_payload.keys() - got.keys()
        assert not missing, f"{len(missing)} messages lost: {sorted(missing)[:10]}"
        return got


def wal_positions(checkpoint: Path) -> dict[int, tuple[str, int]]:
    """Batch id -> (WAL identity, WAL offset the batch ends at) from the checkpoint's offsets;
    the job's WAL holds one record per row, from offset 0."""
    positions = {}
    for batch in batch_files(checkpoint, "offsets"):
        source = json.loads((checkpoint / "offsets" / str(batch)).read_text().splitlines()[2])
        positions[batch] = (source["wal"], source["offset"])
    return positions


def planned_not_committed(checkpoint: Path, after: int) -> tuple[int, int, int] | None:
    """The latest planned batch, the WAL offsets it starts and ends at, when it ends past
    ``after`` and Spark has not committed it: messages stored in the WAL, acknowledged to the
    broker, that the checkpoint does not count as written."""
    positions = wal_positions(checkpoint)
    batch = max(positions, default=None)
    if batch is None or positions[batch][1] <= after:
        return None
    if batch in batch_files(checkpoint, "commits"):
        return None
    return batch, positions[batch - 1][1] if batch else 0, positions[batch][1]


def batch_commits(table: Path, app: str, batch: int) -> list[int]:
    """Rows of each commit of the table that added the micro-batch ``batch`` of query ``app``."""
    rows = []
    for commit in delta_commits(table):
        txns = [(a["txn"]["appId"], a["txn"]["version"]) for a in commit["actions"] if "txn" in a]
        if txns == [(app, batch)]:
            rows.append(sum(file_rows(a["add"]) or 0 for a in commit["actions"] if "add" in a))
    return rows


def committed_position(checkpoint: Path) -> tuple[str, int]:
    """The WAL identity and offset of the last batch Spark committed."""
    return wal_positions(checkpoint)[max(batch_files(checkpoint, "commits"))]


def test_two_jobs_share_a_subscription_each_into_a_table_of_its_own(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    table = Tables(tmp_path / "table-0", tmp_path / "table-1")
    ids = [unique_id("share-a-"), unique_id("share-b-")]
    jobs = []
    try:
        for index, client_id in enumerate(ids):
            checkpoint = tmp_path / f"checkpoint-{index}"
            path = table.tables[index]
            jobs.append(start_job(broker, client_id, path, checkpoint, f"job-{index}"))
        for job, client_id in zip(jobs, ids, strict=True):
            wait_subscribed(broker, client_id, SHARED, 2, job)
        sent = messages()
        # In rounds, each landing before the next: both jobs get a share of every round.
        for start in range(0, COUNT, ROUND):
            publish(broker, sent[start : start + ROUND])
            table.wait_for(sent[: start + ROUND], jobs)
        # SIGTERM to the JVMs: each stops after its batch in flight, a Java process's 143.
        statuses = [job.terminate() for job in jobs]
        assert statuses == [128 + 15] * 2, "\n".join(job.logs() for job in jobs)
    finally:
        for job in jobs:
            job.cleanup()

    got = table.check_rows(sent)
    by_payload = {m.payload: m for m in sent}
    twice = {p: n for p, n in got.items() if n > 1}
    assert all(by_payload[p].qos == 1 for p in twice), f"QoS 2 messages stored twice: {twice}"
    first: Counter[bytes] = Counter()
    for path in table.tables:
        columns = table_payloads(path)
        first.update(bytes(p) for p, d in zip(columns["payload"], columns["duplicate"],
                                               strict=True) if not d)  # fmt: skip
    assert all(n == 1 for n in first.values()), "a first delivery stored twice"

    # Each job received a share; together they wrote every row, and QoS 1 extras are the
    # possible duplicates they reported.
    (rows_a, duplicates_a), (rows_b, duplicates_b) = (summary(job) for job in jobs)
    assert rows_a > 0 and rows_b > 0, f"one job got nothing: {rows_a}, {rows_b}"
    assert rows_a + rows_b == got.total()
    assert got.total() - len(sent) == duplicates_a + duplicates_b
    per_app = {app: rows.total() for app, rows in payloads_per_app(*table.tables).items()}
    assert sorted(per_app.values()) == sorted([rows_a, rows_b]), per_app
    for path in table.tables:  # each table its own job's, in several batches
        commits = commits_per_app(path)
        assert len(commits) == 1 and min(commits.values()) >= 2, commits


def test_kill_9_of_one_job_writing_a_shared_table_then_restart_keeps_each_qos_2_message_once(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    paths = [tmp_path / "table"] * 2
    checkpoints = [tmp_path / "checkpoint-0", tmp_path / "checkpoint-1"]
    ids = [unique_id("kill-a-"), unique_id("kill-b-")]
    sent = messages(KILL_ROUNDS * KILL_ROUND, qos=2)
    rounds = [sent[n : n + KILL_ROUND] for n in range(0, len(sent), KILL_ROUND)]
    tables = Tables(*paths)
    runs: list[Job] = []  # every run, for the clean-up
    try:
        runs += [start_job(broker, ids[n], paths[n], checkpoints[n], f"job-{n}") for n in range(2)]
        live, killed = runs
        for job, client_id in zip(runs, ids, strict=True):
            wait_subscribed(broker, client_id, SHARED, 2, job)
        for n in range(2):
            publish(broker, rounds[n])
            tables.wait_for(sent[: (n + 1) * KILL_ROUND], [live, killed])

        # The kill: a batch of the killed job holding its share of round 2 is planned (so
        # stored in its WAL and acknowledged to the broker) and not committed.
        before = max((offset for _, offset in wal_positions(checkpoints[1]).values()), default=0)
        publish(broker, rounds[2])
        window: list[tuple[int, int, int]] = []

        def in_flight() -> bool:
            window[:] = filter(None, [planned_not_committed(checkpoints[1], before)])
            return bool(window)

        killed.wait_for("a batch of round 2 planned, not committed", in_flight, LAND_TIMEOUT)
        killed.kill_9()
        batch, start, stored = window[0]
        killed_query = query_id(killed)
        rows_at_kill = payloads_per_app(*paths).get(killed_query, Counter())
        assert rows_at_kill, "the killed job had no rows before the kill"

        # A round the broker shares out while the job is down (Mosquitto queues the dead
        # member's turns for its session), then the job again on the same client id,
        # checkpoint and WAL; the other job goes on meanwhile.
        publish(broker, rounds[3])
        restarted = start_job(broker, ids[1], paths[1], checkpoints[1], "job-1-restarted")
        runs.append(restarted)
        down = {m.payload for m in rounds[3]}
        live.wait_for(
            "the live job's rows of the round sent during the kill",
            lambda: not down.isdisjoint(tables.payloads()),
            LAND_TIMEOUT,
        )
        publish(broker, rounds[4])
        tables.wait_for(sent, [live, restarted])
        statuses = [job.terminate() for job in (live, restarted)]
        assert statuses == [128 + 15] * 2, "\n".join(job.logs() for job in runs)
    finally:
        for job in runs:
            job.cleanup()

    # Every QoS 2 message once in the union of the tables, wherever the broker sent it.
    got = tables.check_rows(sent)
    twice = sorted(p for p, n in got.items() if n > 1)
    assert not twice, f"QoS 2 messages stored twice: {twice[:10]}"

    # One query per job across its runs; each job's rows are its WAL's records, once. The
    # restarted run read the killed batch from the same WAL (the broker, acknowledged, has no
    # copy left) and it is in the table once, whole.
    per_app = payloads_per_app(*paths)
    assert query_id(restarted) == killed_query
    assert per_app.keys() == {query_id(live), killed_query}, per_app.keys()
    assert len({wal for wal, _ in wal_positions(checkpoints[1]).values()}) == 1, "a new WAL"
    assert batch_commits(paths[1], killed_query, batch) == [stored - start]
    for job, checkpoint in ((live, checkpoints[0]), (restarted, checkpoints[1])):
        rows = per_app[query_id(job)]
        assert rows.total() == committed_position(checkpoint)[1], f"{job.out}: rows != records"
        assert rows.total() > 0, f"{job.out}: no share"
    assert per_app[killed_query] >= rows_at_kill, "rows from before the kill are gone"
