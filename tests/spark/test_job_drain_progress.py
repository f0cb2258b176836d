"""``--trigger available-now`` shows its drain's progress towards the frozen target: with
``--progress always`` a line on stderr (a pipe here) rewritten with ``\\r``, batch by batch, that
ends at 100% of the messages queued for the job's session; with the default (``auto``) nothing
of it on a pipe, and the log has the final line either way. The run's end sends DISCONNECT.

Messages are queued for the job's persistent session before it starts
(:func:`tests.support.publishing.queue_for_session`), so each run drains a known number, in
several micro-batches (``--max-messages-per-trigger``), and exits by itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from devtools import REPO_ROOT
from devtools.delta_log import delta_row_count
from tests.support.brokers import BrokerFactory, MosquittoBroker
from tests.support.ids import unique_id
from tests.support.ingest_job import EXIT_TIMEOUT, INGEST, START_TIMEOUT, Job, job_env
from tests.support.publishing import numbered, publish, queue_for_session
from tests.support.waiting import wait_disconnected

TOPIC = "drain/t"
FIRST, SECOND = 150, 90
"""Messages queued before the first run and before the second."""
PER_BATCH = 30
RUN_TIMEOUT = START_TIMEOUT + EXIT_TIMEOUT
DRAINING = re.compile(r"draining: ([\d,]+) / ([\d,]+) messages \(([\d.]+)%\)")
DRAINED = re.compile(r"drained: ([\d,]+) / ([\d,]+) messages \(([\d.]+)%\) in ")


def _drain(broker: MosquittoBroker, tmp_path: Path, client_id: str, *extra: str) -> tuple[str, str]:
    """One available-now run to its exit, stdout and stderr through pipes; (stdout, stderr)."""
    args = [
        "--broker", broker.url, "--topic", "drain/#", "--client-id", client_id,
        "--table", str(tmp_path / "table"), "--checkpoint", str(tmp_path / "checkpoint"),
        "--trigger", "available-now", "--max-messages-per-trigger", str(PER_BATCH), *extra,
    ]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, str(INGEST), *args],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=job_env(),
        start_new_session=True,
    )
    job = Job(proc, tmp_path / "unused.out", tmp_path / "unused.err")
    try:
        raw_out, raw_err = proc.communicate(timeout=RUN_TIMEOUT)
    finally:
        job.cleanup()  # a run past its deadline, or a JVM still shutting down
    # bytes: text mode would turn the line's "\r" into "\n"
    out, err = raw_out.decode(errors="replace"), raw_err.decode(errors="replace")
    assert proc.returncode == 0, f"exit {proc.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
    return out, err


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def test_an_available_now_run_shows_its_progress_towards_the_target(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory()
    client_id = unique_id("drain-")
    queue_for_session(broker, client_id, "drain/#", 1, numbered(TOPIC, FIRST))

    out, err = _drain(broker, tmp_path, client_id, "--progress", "always")
    detail = f"--- stdout\n{out}\n--- stderr\n{err!r}"
    segments = [s.strip() for s in re.split(r"[\r\n]", err) if s.strip()]
    shown = [m for m in map(DRAINING.match, segments) if m]
    assert shown, f"no progress line on stderr\n{detail}"
    assert "\rdraining: " in err, f"the line is not rewritten in place\n{detail}"
    counts = [(_number(m[1]), _number(m[2])) for m in shown]
    assert {total for _, total in counts} == {FIRST}, detail
    assert [done for done, _ in counts] == sorted(done for done, _ in counts), detail
    assert all(done % PER_BATCH == 0 for done, _ in counts), detail  # whole batches
    ends = [m for m in map(DRAINED.match, segments) if m]
    assert [(m[1], m[2], m[3]) for m in ends] == [(str(FIRST), str(FIRST), "100.0")], detail
    assert err.index(ends[0].string) > err.rindex("draining: "), "the line ends at 100%"
    assert re.search(rf" INFO drained: {FIRST} / {FIRST} messages \(100\.0%\) in ", out), detail
    assert delta_row_count(tmp_path / "table") == FIRST

    # The default, on a pipe: no terminal line, the log has the drain.
    publish(broker, numbered(TOPIC, SECOND, start=FIRST))  # queued while no job runs
    out, err = _drain(broker, tmp_path, client_id)
    detail = f"--- stdout\n{out}\n--- stderr\n{err!r}"
    assert "\r" not in err and "draining:" not in err and "drained:" not in err, detail
    assert re.search(rf" INFO drained: {SECOND} / {SECOND} messages \(100\.0%\) in ", out), detail
    assert delta_row_count(tmp_path / "table") == FIRST + SECOND
    wait_disconnected(broker, [client_id])  # the end of the run sends DISCONNECT
