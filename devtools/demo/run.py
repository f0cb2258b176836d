"""One demo run, start to end: broker, the job (which makes its session first), the publishers
until the tables hold what the broker acknowledged, the job's stop, the report."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from devtools.delta_log import delta_row_count
from devtools.demo.errors import DemoFailed
from devtools.demo.fleet import INFLIGHT, Publisher, join_all, plan_fleet
from devtools.demo.job import (
    ABORT_STOP_TIMEOUT,
    INGEST_SCRIPT,
    JOB_READY_TIMEOUT,
    JOB_STOP_TIMEOUT,
    READY,
    REPO_ROOT,
    IngestJob,
    ingest_command,
)
from devtools.demo.paths import DemoPaths, clear_previous_run
from devtools.demo.report import build_report
from devtools.demo.tables import read_tables
from devtools.mosquitto import MosquittoBroker

MAX_QUEUED = 1_000_000


class Interrupted(Exception):
    """Ctrl-C or SIGTERM reached the demo."""


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, every: Callable[[], None]
) -> None:
    """Check ``condition`` until it holds, calling ``every`` every 2 s; fail at the deadline.
    ``condition`` raises DemoFailed itself when waiting has become pointless."""
    deadline = time.monotonic() + timeout
    next_tick = 0.0
    while not condition():
        now = time.monotonic()
        if now > deadline:
            raise DemoFailed(f"{what} within {timeout:.0f} s")
        if now >= next_tick:
            every()
            next_tick = now + 2.0
        time.sleep(0.2)


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """Turn SIGTERM (and Ctrl-C) into ``Interrupted`` so every cleanup step runs."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def run(args: argparse.Namespace, paths: DemoPaths) -> dict[str, Any]:
    """Run the demo in ``paths.root`` (the previous run's data removed first); return the
    report."""
    if clear_previous_run(paths.root):
        print(f"data        {paths.root}: the previous run's data removed, starting fresh")
    paths.root.mkdir(parents=True)
    routes = bool(getattr(args, "routes", False))
    fleet = plan_fleet(args.messages, args.devices, statuses=routes)
    planned = sum(len(d.messages()) for d in fleet)
    started = time.monotonic()
    timings: dict[str, float] = {}

    def mark(name: str) -> None:
        timings[name] = round(time.monotonic() - started, 1)

    broker = MosquittoBroker(
        paths.broker,
        persistence=True,
        max_queued_messages=MAX_QUEUED,
        max_inflight_messages=INFLIGHT,
    )
    stop_publishers = threading.Event()
    with contextlib.ExitStack() as cleanup:  # in reverse: publishers, job, broker
        cleanup.callback(broker.close)
        broker.start()
        print(
            f"broker      {broker.url} (Mosquitto, persistence on, "
            f"max_queued_messages {MAX_QUEUED}, max_inflight_messages {INFLIGHT})"
        )

        job = IngestJob(ingest_command(broker.url, paths, routes), paths.job_log)
        cleanup.callback(job.stop, ABORT_STOP_TIMEOUT)
        job.start()
        mark("job_started")
        print(f"ingest job  {INGEST_SCRIPT.relative_to(REPO_ROOT)}, output in {paths.job_log}")

        def ready() -> bool:
            code = job.exit_code()
            if code is not None:
                raise DemoFailed(f"the ingest job exited with status {code}:\n{job.log_tail()}")
            return job.said(READY)

        # From the job's line on, the broker queues for it: nothing published is lost.
        wait_for(ready, JOB_READY_TIMEOUT, "the ingest job did not make its session", lambda: None)
        mark("job_ready")

        publishers = [Publisher(d, broker.url, args.duration, stop_publishers) for d in fleet]
        cleanup.callback(join_all, publishers, stop_publishers)
        for publisher in publishers:
            publisher.start()
        by_qos = {q: sum(len(d.messages()) for d in fleet if d.qos == q) for q in (1, 2)}
        print(
            f"publishing  {planned} messages from {len(fleet)} sensors at "
            f"{len({d.site for d in fleet})} sites over ~{args.duration:g} s (QoS 1: "
            f"{by_qos[1]}, QoS 2: {by_qos[2]}; {sum(d.malformed for d in fleet)} malformed"
            + (f"; {sum(len(d.statuses) for d in fleet)} status messages)" if routes else ")")
        )

        def acked() -> int:
            return sum(p.acked for p in publishers)

        def landed() -> tuple[int, int]:
            rows = delta_row_count(paths.table)
            if routes:
                rows += delta_row_count(paths.status_table)
            return rows, delta_row_count(paths.dead_letter)

        def check_alive() -> None:
            failed = [p.error for p in publishers if p.error]
            if failed:
                raise DemoFailed("publishing failed: " + "; ".join(failed))
            code = job.exit_code()
            if code is not None:
                raise DemoFailed(
                    f"the ingest job exited with status {code}; last lines of "
                    f"{paths.job_log}:\n{job.log_tail()}"
                )

        def progress() -> None:
            for line in job.new_progress_lines():
                print(f"  job: {line}")
            rows, dead = landed()
            print(
                f"  {time.monotonic() - started:5.1f} s  published {acked():>6}/{planned}"
                f"  landed {rows:>6}  dead letter {dead:>4}",
                flush=True,
            )

        def published_all() -> bool:
            check_alive()
            return not any(p.is_alive() for p in publishers)

        wait_for(published_all, args.duration + 60.0, "the publishers did not finish", progress)
        check_alive()
        published = acked()
        mark("published")

        def all_landed() -> bool:
            check_alive()
            return sum(landed()) >= published

        wait_for(all_landed, args.timeout, "the tables did not catch up", progress)
        progress()
        mark("landed")
        print("stopping    the ingest job (SIGTERM)")
        job_code = job.stop(JOB_STOP_TIMEOUT)
        mark("job_stopped")
        for line in job.new_progress_lines():
            print(f"  job: {line}")
    if job_code != 0:
        raise DemoFailed(
            f"the ingest job exited with status {job_code} after SIGTERM; "
            f"last lines of {paths.job_log}:\n{job.log_tail()}"
        )
    tables = read_tables(paths.table, paths.dead_letter, paths.status_table if routes else None)
    mark("report")
    report = build_report(paths, fleet, published, tables, timings)
    report["job_summary"] = job.summary()
    return report
