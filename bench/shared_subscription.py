"""One ingest job against several sharing a subscription (``python -m bench.shared_subscription``):
msg/s from the first publish to the Delta commit completing the table, one job and ``--jobs``
jobs alternating, paired per round; all on this machine's cores."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import common
from bench.drainer import TableTail
from bench.render import Charts, Lines, md_table, num, per_repetition, stats_cells, times
from connector.mqtt.topics import SHARE_PREFIX

SHARED = f"{SHARE_PREFIX}bench/bench/shared/+"
TOPICS = 8
PAYLOAD = b"x" * 100
START_TIMEOUT = 300.0
STOP_TIMEOUT = 120.0
INGEST = common.REPO_ROOT / "streaming_jobs" / "ingest.py"
SUMMARY = re.compile(r"stopped: \d+ batch(?:es)?, (\d+) rows")


class IngestJob:
    """One ``spark-submit`` of the ingest job in a process group of its own."""

    def __init__(self, base: Path, index: int, url: str, table: Path, trigger: str) -> None:
        from streaming_jobs.spark_session import delta_jars

        self.client_id = f"bss-{os.getpid()}-{base.name}-{index}"
        self.out = base / f"job-{index}.log"
        command = [
            str(Path(sys.executable).parent / "spark-submit"), "--jars", ",".join(delta_jars()),
            "--conf", "spark.ui.enabled=false", str(INGEST),
            "--broker", url, "--topic", SHARED, "--qos", "1", "--client-id", self.client_id,
            "--table", str(table), "--checkpoint", str(base / f"checkpoint-{index}"),
            "--trigger", trigger,
        ]  # fmt: skip
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        with self.out.open("wb") as log:
            self.proc = subprocess.Popen(
                command, cwd=common.REPO_ROOT, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip

    def check_alive(self) -> bool:
        code = self.proc.poll()
        if code is not None:
            tail = self.out.read_text(errors="replace")[-3000:]
            raise common.BenchError(f"job {self.client_id} exited with {code}:\n{tail}")
        return True

    def stop(self) -> int:
        """SIGTERM to the JVM (it stops after the batch in flight); the rows it wrote."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise common.BenchError(f"job {self.client_id} did not stop") from None
        found = SUMMARY.search(self.out.read_text(errors="replace"))
        return int(found[1]) if found else -1

    def kill(self) -> None:
        from devtools.process_tree import process_groups

        for group in process_groups(self.proc.pid) | {self.proc.pid}:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        self.proc.wait(timeout=30)


def one_run(workdir: Path, args: Any, jobs: int, tag: str) -> dict[str, Any]:
    """Messages per second into Delta for ``--messages`` messages with ``jobs`` jobs."""
    from devtools.mosquitto import MosquittoBroker

    count, base = args.messages, workdir / tag
    base.mkdir(parents=True)
    table = base / "table"
    started: list[IngestJob] = []
    try:
        with MosquittoBroker(base / "broker", max_queued_messages=2 * count + 1000) as broker:
            for index in range(jobs):
                started.append(IngestJob(base, index, broker.url, table, args.trigger))
            lines = [f": {job.client_id} 1 {SHARED}\n" for job in started]
            common.wait_for(
                lambda: all(job.check_alive() for job in started)
                and all(line in broker.log_text() for line in lines),
                START_TIMEOUT, lambda: "the jobs did not subscribe in time", 0.2,
            )  # fmt: skip
            began = time.time()
            published = common.publish_windowed(
                broker.url, count, lambda seq: (f"bench/shared/{seq % TOPICS}", PAYLOAD),
                args.timeout,
            )  # fmt: skip
            landed = TableTail(table)
            common.wait_for(
                lambda: all(job.check_alive() for job in started) and landed.poll() >= count,
                args.timeout, lambda: f"only {landed.rows} of {count} rows landed", 0.2,
            )  # fmt: skip
            elapsed = landed.committed_at - began
            per_job = [job.stop() for job in started]
        if landed.poll() != count:
            raise common.BenchError(f"{landed.rows} rows in the table, expected {count}")
        return {"rate": count / elapsed, "publish_rate": published, "rows_per_job": per_job}
    finally:
        for job in started:
            if job.proc.poll() is None:
                job.kill()
        shutil.rmtree(base, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = common.arguments("shared_subscription", __doc__, messages=50_000, timeout=900.0)
    parser.add_argument("--jobs", type=int, default=2, help="jobs sharing the subscription")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--trigger", default="processing-time=500 milliseconds")
    args = parser.parse_args(argv)
    if args.jobs < 2:
        parser.error("--jobs must be at least 2")

    def measure() -> dict[str, Any]:
        workdir = Path(tempfile.mkdtemp(prefix="bench-shared-"))
        one: list[dict[str, Any]] = []
        many: list[dict[str, Any]] = []
        loads = []
        try:
            for r in range(args.rounds):
                loads.append(os.getloadavg()[0])
                one.append(one_run(workdir, args, 1, f"r{r}a"))
                many.append(one_run(workdir, args, args.jobs, f"r{r}b"))
                print(
                    f"round {r}: 1 job {num(one[-1]['rate'])} msg/s, {args.jobs} jobs "
                    f"{num(many[-1]['rate'])} msg/s (rows per job {many[-1]['rows_per_job']})",
                    flush=True,
                )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        ratio = common.paired_ratio([r["rate"] for r in many], [r["rate"] for r in one])
        return {
            "machine": common.machine_info(), "load_average_1min": loads, "messages": args.messages,
            "payload_bytes": len(PAYLOAD), "qos": 1, "jobs": args.jobs, "trigger": args.trigger,
            **{
                f"{figure}_{n}": common.Stats.of(r[figure] for r in runs).as_dict()
                for figure in ("rate", "publish_rate")
                for n, runs in (("one", one), ("many", many))
            },
            "rows_per_job_many": [r["rows_per_job"] for r in many],
            "ratio": ratio.as_dict(),
        }  # fmt: skip

    return common.finish("shared_subscription", measure, args.output, section)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    """One ingest job against several on one shared subscription, into one Delta table."""
    jobs = data["jobs"]
    machine = data.get("machine", {})
    ratio = data["ratio"]
    out = [
        f"{num(data.get('messages'))} QoS {data.get('qos')} messages of "
        f"{data.get('payload_bytes')} bytes published (our client, Mosquitto's window of 20 "
        f"unacknowledged) once the ingest jobs (`spark-submit streaming_jobs/ingest.py`, "
        "`local[2]` each, each with its own client id, checkpoint and WAL, trigger "
        f"{data.get('trigger')}) have subscribed to `$share/<group>/<filter>`, all writing one "
        "Delta table; a fresh Mosquitto per run. Clock: the first publish → the Delta commit "
        f"that completes the table. One job and {jobs} jobs alternate for "
        f"{len(ratio.get('runs', []))} rounds; the ratio is paired per round.",
        "",
        f"Every job ran on this one machine, so all of them shared its "
        f"{machine.get('cores', '?')} cores: the ratio is what running {jobs} jobs side by side "
        "costs or gains here, not how they scale over machines of their own. Load average "
        "(1 min) at each round's start: "
        + ", ".join(f"{v:.2f}" for v in data.get("load_average_1min", []))
        + ".",
        "",
    ]
    rows = [
        [str(n), *stats_cells(data[f"rate_{key}"]), num(data[f"publish_rate_{key}"]["median"])]
        for n, key in ((1, "one"), (jobs, "many"))
    ]
    out += md_table(
        ["jobs", "msg/s into Delta median", "min", "max", "publisher msg/s median"], rows
    )
    headroom = min(data[f"publish_rate_{k}"]["median"] / data[f"rate_{k}"]["median"]
                   for k in ("one", "many"))  # fmt: skip
    out += [
        "",
        f"{jobs} jobs / 1 job: {times(ratio['median'])} (per round {per_repetition(ratio)})."
        + (
            f" The publisher sent at least {headroom:.1f} times as fast as the rows landed, so it "
            "was not the limit."
            if headroom >= 2
            else f" The publisher sent only {headroom:.1f} times as fast as the rows landed: it "
            "may be the limit."
        ),
    ]
    per_round = data.get("rows_per_job_many")
    if per_round:
        out += [
            "",
            *md_table(
                ["round", *(f"rows, job {i}" for i in range(jobs)), "total"],
                [[str(r), *(num(n) if n >= 0 else "—" for n in counts),
                  num(sum(counts)) if min(counts) >= 0 else "—"]
                 for r, counts in enumerate(per_round)],
            ),
        ]  # fmt: skip
    return out


if __name__ == "__main__":
    raise SystemExit(main())
