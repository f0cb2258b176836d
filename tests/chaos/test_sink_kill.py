"""kill -9 of a query that writes to MQTT, in the middle of its batches, and its restart on
the same checkpoint: every row reaches the broker at least once, and no batch that Spark had
committed before the kill is published again (docs/delivery.md, "Writing to MQTT").

The query (``tests/chaos/sink_query.py``, its own process) writes one file per micro-batch
at MQTT 5, so each message carries its idempotency key ``<query>:<batch>:<partition>:<row>``.
A subscriber counts the keys. After the kill the checkpoint's ``commits`` folder names the
batches Spark committed: each of their keys arrived exactly once; a batch cut short by the kill
may arrive twice (at least once), never not at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest

from connector.spark.writer.task import IDEMPOTENCY_KEY
from devtools import REPO_ROOT
from devtools.process_tree import alive_in
from tests.chaos.sink_query import TOPIC_PREFIX
from tests.support.brokers import BrokerFactory
from tests.support.ids import unique_id
from tests.support.ingest_job import job_env
from tests.support.ledger import Tally
from tests.support.paho_client import PahoClient
from tests.support.waiting import wait_until

FILES = 12
ROWS_PER_FILE = 25
START_TIMEOUT = 180.0
ARRIVE_TIMEOUT = 180.0


def start_query(url: str, folder: Path, checkpoint: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.sink_query", url, str(folder), str(checkpoint)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=job_env(),
            start_new_session=True,
        )


def kill_9(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the query's process group and wait until none of it is left."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_until(lambda: not alive_in({proc.pid}), 30, message="the killed query lives on")


def keys(sub: PahoClient) -> Counter[str]:
    """How often each idempotency key arrived."""
    counts: Counter[str] = Counter()
    for message in sub.messages:
        counts.update(v for k, v in message.properties.UserProperty if k == IDEMPOTENCY_KEY)
    return counts


def committed(checkpoint: Path) -> set[int]:
    folder = checkpoint / "commits"
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()} if folder.exists() else set()


@pytest.mark.timeout(900)
def test_kill_9_mid_stream_and_restart_loses_nothing_and_republishes_no_committed_batch(
    broker_factory: BrokerFactory, tmp_path: Path, tally: Tally
) -> None:
    broker = broker_factory()
    folder, checkpoint, log = tmp_path / "in", tmp_path / "checkpoint", tmp_path / "query.log"
    folder.mkdir()
    for number in range(FILES):
        rows = range(number * ROWS_PER_FILE, (number + 1) * ROWS_PER_FILE)
        (folder / f"part-{number:03d}.json").write_text(
            "".join(json.dumps({"id": i}) + "\n" for i in rows)
        )
    everything = {str(i).encode() for i in range(FILES * ROWS_PER_FILE)}

    sub = PahoClient(unique_id("sub-"), protocol=mqtt.MQTTv5)
    assert sub.connect(broker.host, broker.port).accepted
    sub.subscribe(TOPIC_PREFIX + "#", 1)
    procs = []
    try:
        first = start_query(broker.url, folder, checkpoint, log)
        procs.append(first)
        wait_until(
            lambda: len(committed(checkpoint)) >= 3 or first.poll() is not None,
            START_TIMEOUT,
            interval=0.01,
            message=lambda: f"no three batches committed:\n{log.read_text()[-3000:]}",
        )
        assert first.poll() is None, log.read_text()[-3000:]
        kill_9(first)
        done_before_kill = committed(checkpoint)
        tally.add("sink_kills")

        second = start_query(broker.url, folder, checkpoint, log)
        procs.append(second)
        wait_until(
            lambda: everything <= {m.payload for m in sub.messages} or second.poll() is not None,
            ARRIVE_TIMEOUT,
            message=lambda: (
                f"missing {len(everything - {m.payload for m in sub.messages})} rows:\n"
                + log.read_text()[-3000:]
            ),
        )
        assert second.poll() is None, log.read_text()[-3000:]
        wait_until(
            lambda: len(committed(checkpoint)) >= FILES,
            ARRIVE_TIMEOUT,
            message="the restarted query did not commit every batch",
        )
    finally:
        for proc in procs:
            if proc.poll() is None:
                kill_9(proc)
        sub.close()

    counts = keys(sub)
    assert len(counts) == FILES * ROWS_PER_FILE, "a row arrived without its key or never"
    batches = Counter(int(key.split(":")[1]) for key in counts)
    assert sorted(batches) == list(range(FILES)), batches  # one file per batch
    again = sorted({int(key.split(":")[1]) for key, n in counts.items() if n > 1})
    assert not set(again) & done_before_kill, (
        f"batches {sorted(set(again) & done_before_kill)} were committed before the kill "
        "and published again"
    )
    tally.add("sink_rows", FILES * ROWS_PER_FILE)
    tally.add("sink_rows_again", sum(n - 1 for n in counts.values()))
    print(
        f"sink kill -9: {len(done_before_kill)} batches committed before the kill, "
        f"batches {again} published twice (cut short by the kill)"
    )
