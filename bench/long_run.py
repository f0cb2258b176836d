"""A week in an hour (``python -m bench.long_run``): one steady publisher into the ingest job
with a short trigger for a long run, four jobs side by side on the same messages: no
maintenance, Delta's auto compaction switched on as it comes, the job's default compaction, and
that default with liquid clustering (when the job has ``--cluster-by``).

Every ``--sample-every`` seconds each job's stores are sampled (live and on-disk data files,
table bytes, ``_delta_log`` files and bytes, WAL and checkpoint bytes, RSS, open fds and threads
of its processes); every ``--read-every`` seconds two reads of each table are timed through
Spark and delta-rs: a full ``count(*)`` and a filtered count of one topic and hour. At the end
the same reads of a fully OPTIMIZEd copy of a table. Write amplification is the bytes that
maintenance commits (``OPTIMIZE``, auto or not) added over the bytes the stream's commits
added, read from each table's log. The goals are issue-level: docs/operations.md, "Table
maintenance"."""

from __future__ import annotations

import itertools
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from connector.wal import DEFAULT_SEGMENT_MAX_BYTES
from devtools.delta_log import file_rows, read_commit
from devtools.demo.job import INGEST_SCRIPT, LONG_SUBMIT_ARGS, IngestJob
from devtools.disk_usage import tree_size
from devtools.process_tree import process_figures
from streaming_jobs.compaction_policy import DEFAULT_SMALL_FILES, DEFAULT_TARGET_BYTES

from . import common
from .render import Charts, Lines, goals_table, md_table, num

TOPICS = 4
TOPIC_FILTER = "week/+"
AUTO_COMPACT = "spark.databricks.delta.autoCompact.enabled=true"
CONFIGS: dict[str, tuple[str, ...]] = {
    "none": ("--compaction", "off"),
    "auto_compact": ("--compaction", "off", "--spark-conf", AUTO_COMPACT),
    "default": (),
    "clustered": ("--cluster-by", "topic,timestamp"),
}
"""Each way of running the job: its extra flags."""
MAINTENANCE_OPERATIONS = frozenset({"OPTIMIZE"})
"""Commits whose added bytes count as maintenance (auto compaction commits as OPTIMIZE too)."""
FLAT_GROWTH = 0.10
WAL_BOUND = DEFAULT_SEGMENT_MAX_BYTES + (1 << 20)
"""The WAL deletes a segment once all of it is committed: it holds the segment being written
(up to 64 MiB) and what is not committed yet; it grows, then drops, rather than staying flat."""
"""A store is flat when it grew at most this much over the last half of the run."""


def topic(index: int) -> str:
    return f"week/dev{index}"


@dataclass
class LogTally:
    """A table's ``_delta_log`` read commit by commit as it grows: live files, bytes added by
    the stream and by maintenance, commits by operation."""

    table: Path
    version: int = -1
    live: dict[str, int] = field(default_factory=dict)
    ingested_bytes: int = 0
    maintenance_bytes: int = 0
    rows: int = 0
    """Rows the stream's commits added (from each file's statistics)."""
    batches: int = 0
    """Commits of a stream's batch: those with a ``txn`` (SetTransaction) action."""
    operations: dict[str, int] = field(default_factory=dict)

    def catch_up(self) -> None:
        while True:
            try:
                actions = read_commit(self.table, self.version + 1)
            except ValueError:
                return  # a commit file being written: read next time
            if actions is None:
                return
            self.add(actions)
            self.version += 1

    def add(self, actions: Sequence[Mapping[str, Any]]) -> None:
        operation = next(
            (a["commitInfo"].get("operation", "?") for a in actions if "commitInfo" in a), "?"
        )
        self.operations[operation] = self.operations.get(operation, 0) + 1
        self.batches += any("txn" in action for action in actions)
        for action in actions:
            if "add" in action:
                size = int(action["add"].get("size", 0))
                self.live[action["add"]["path"]] = size
                if operation in MAINTENANCE_OPERATIONS:
                    self.maintenance_bytes += size
                else:
                    self.ingested_bytes += size
                    self.rows += file_rows(action["add"]) or 0
            elif "remove" in action:
                self.live.pop(action["remove"]["path"], None)


@dataclass
class RunningJob:
    name: str
    base: Path
    job: IngestJob
    tally: LogTally
    samples: list[dict[str, Any]] = field(default_factory=list)
    reads: list[dict[str, Any]] = field(default_factory=list)

    @property
    def table(self) -> Path:
        return self.base / "table"

    @property
    def checkpoint(self) -> Path:
        return self.base / "checkpoint"

    def sample(self, elapsed: float) -> dict[str, Any]:
        self.tally.catch_up()
        proc = self.job.proc
        data_files, data_bytes = tree_size(self.table, ".parquet")
        log_files, log_bytes = tree_size(self.table / "_delta_log")
        wal_files, wal_bytes = tree_size(self.checkpoint / "mqtt-wal")
        checkpoint_files, checkpoint_bytes = tree_size(self.checkpoint)
        row = {
            "t": round(elapsed, 1),
            "commits": self.tally.version + 1,
            "batches": self.tally.batches,
            "rows": self.tally.rows,
            "live_files": len(self.tally.live),
            "live_bytes": sum(self.tally.live.values()),
            "disk_files": data_files,
            "disk_bytes": data_bytes,
            "log_files": log_files,
            "log_bytes": log_bytes,
            "wal_bytes": wal_bytes,
            "checkpoint_files": checkpoint_files - wal_files,
            "checkpoint_bytes": checkpoint_bytes - wal_bytes,
            "ingested_bytes": self.tally.ingested_bytes,
            "maintenance_bytes": self.tally.maintenance_bytes,
            **(process_figures(proc.pid) if proc is not None and proc.poll() is None else {}),
        }
        self.samples.append(row)
        return row


# --------------------------------------------------------------------------------------- reads


def timed(run: Callable[[], int]) -> tuple[float, int]:
    began = time.perf_counter()
    rows = run()
    return time.perf_counter() - began, rows


def read_times(spark: Any, table: Path, hour: datetime) -> dict[str, float]:
    """Seconds of the two reads, through Spark and delta-rs (their row counts checked equal)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable
    from pyspark.sql import functions as F

    low, high = hour, hour + timedelta(hours=1)
    frame = spark.read.format("delta").load(str(table))
    one = (F.col("topic") == topic(0)) & (F.col("timestamp") >= low) & (F.col("timestamp") < high)
    spark_full, full_rows = timed(lambda: frame.count())
    spark_filtered, filtered_rows = timed(lambda: frame.where(one).count())

    def rs(filtered: bool) -> int:
        dataset = DeltaTable(str(table)).to_pyarrow_dataset()
        condition = (
            (pc.field("topic") == topic(0))
            & (pc.field("timestamp") >= pc.scalar(low))
            & (pc.field("timestamp") < pc.scalar(high))
        )
        return int(dataset.count_rows(filter=condition if filtered else None))

    rs_full, rs_full_rows = timed(lambda: rs(False))
    rs_filtered, rs_filtered_rows = timed(lambda: rs(True))
    if rs_full_rows < full_rows or rs_filtered_rows < filtered_rows:
        raise common.BenchError(f"{table}: delta-rs counted fewer rows than Spark")
    return {
        "spark_full": round(spark_full, 3),
        "spark_filtered": round(spark_filtered, 3),
        "delta_rs_full": round(rs_full, 3),
        "delta_rs_filtered": round(rs_filtered, 3),
        "rows": full_rows,
    }


def optimized_copy(spark: Any, table: Path, target: Path) -> Path:
    """A copy of ``table``'s live files as they are, then fully OPTIMIZEd."""
    from delta.tables import DeltaTable

    shutil.copytree(table, target)
    DeltaTable.forPath(spark, str(target)).optimize().executeCompaction()
    return target


# ------------------------------------------------------------------------------------ the run


def job_command(name: str, base: Path, broker_url: str, args: Any) -> list[str]:
    return [
        sys.executable, str(INGEST_SCRIPT),
        "--broker", broker_url, "--topic", TOPIC_FILTER, "--qos", "1",
        "--client-id", f"week-{name}", "--table", str(base / "table"),
        "--checkpoint", str(base / "checkpoint"),
        "--trigger", f"processing-time={args.trigger_ms} milliseconds",
        "--log-level", "WARNING",
        *CONFIGS[name],
        *(["--log-retention", str(args.log_retention)] if args.log_retention else []),
    ]  # fmt: skip


def publishers(broker_url: str, args: Any) -> list[subprocess.Popen[bytes]]:
    """One ``python -m connector.mqtt pub`` per topic, together ``--rate`` messages a second
    for the run's length."""
    per_topic = args.rate / TOPICS
    count = int(per_topic * args.minutes * 60)
    return [
        subprocess.Popen(
            [
                *common.pub_command(broker_url, topic(i), 1, count, args.size),
                "--rate",
                str(per_topic),
            ],
            cwd=common.REPO_ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(TOPICS)
    ]


def measure(args: Any) -> dict[str, Any]:
    from devtools.mosquitto import MosquittoBroker

    from .ingest import spark_session

    names = [n for n in args.configs if n in CONFIGS]
    work = Path(tempfile.mkdtemp(prefix="week-"))
    broker = MosquittoBroker(work / "broker", max_queued_messages=1_000_000).start()
    jobs: list[RunningJob] = []
    spark = spark_session("bench-long-run", master="local[1]")
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    pubs: list[subprocess.Popen[bytes]] = []
    began = time.monotonic()
    try:
        for name in names:
            base = work / name
            base.mkdir()
            common.create_session(broker.url, f"week-{name}", TOPIC_FILTER, 1)
            job = IngestJob(
                job_command(name, base, broker.url, args), base / "job.log", LONG_SUBMIT_ARGS
            )
            job.start()
            jobs.append(RunningJob(name, base, job, LogTally(base / "table")))
        pubs = publishers(broker.url, args)
        began = time.monotonic()
        end = began + args.minutes * 60
        next_read = began + args.read_every
        while (now := time.monotonic()) < end:
            common.check_broker(broker)
            for running in jobs:
                if running.job.exit_code() is not None:
                    raise common.BenchError(f"{running.name} ended:\n{running.job.log_tail()}")
                running.sample(now - began)
            if now >= next_read:
                next_read = now + args.read_every
                for running in jobs:
                    reads = read_times(spark, running.table, hour)
                    running.reads.append({"t": round(time.monotonic() - began, 1), **reads})
            print(f"{now - began:7.0f} s: " + ", ".join(
                f"{r.name} {r.samples[-1]['batches']} batches {r.samples[-1]['live_files']} files"
                for r in jobs), flush=True)  # fmt: skip
            time.sleep(max(0.0, min(end, now + args.sample_every) - time.monotonic()))
        elapsed = time.monotonic() - began
        for running in jobs:
            running.sample(elapsed)
        finals = {r.name: [read_times(spark, r.table, hour) for _ in range(3)] for r in jobs}
        copy = optimized_copy(spark, jobs[0].table, work / "optimized")
        optimized = [read_times(spark, copy, hour) for _ in range(3)]
    finally:
        for pub in pubs:
            pub.kill()
        for running in jobs:
            running.job.stop(90.0)
        broker.close()
        spark.stop()
    result = {
        "machine": common.machine("pyspark", "delta-spark", "deltalake"),
        "parameters": {
            "minutes": args.minutes,
            "trigger_ms": args.trigger_ms,
            "rate": args.rate,
            "size": args.size,
            "topics": TOPICS,
            "target_bytes": DEFAULT_TARGET_BYTES,
            "small_files": DEFAULT_SMALL_FILES,
            "configs": {n: list(CONFIGS[n]) for n in names},
            "log_retention_hours": args.log_retention,
        },
        "seconds": round(elapsed, 1),
        "jobs": {
            r.name: {
                "samples": r.samples,
                "reads": r.reads,
                "final_reads": finals[r.name],
                "operations": r.tally.operations,
            }
            for r in jobs
        },
        "optimized_reads": optimized,
    }
    shutil.rmtree(work, ignore_errors=True)
    result["goals"] = goals(result)
    return result


# ---------------------------------------------------------------------------------- the goals

READS = ("spark_full", "spark_filtered", "delta_rs_full", "delta_rs_filtered")
STORES = ("checkpoint_bytes", "checkpoint_files", "jvm_rss_kib", "python_rss_kib",
          "fds", "threads")  # fmt: skip


def median_read(reads: Sequence[Mapping[str, Any]], kind: str) -> float:
    return statistics.median(float(r[kind]) for r in reads)


def growth(samples: Sequence[Mapping[str, Any]], key: str) -> float | None:
    """(last - value at half time) / value at half time, of the highest value so far (a store
    that breathes is judged by its peaks); None without the figure."""
    values = [(s["t"], s[key]) for s in samples if key in s]
    if len(values) < 4:
        return None
    half = values[-1][0] / 2
    at_half = max(v for t, v in values if t <= half)
    last = max(v for _, v in values)
    return (last - at_half) / at_half if at_half else None


def quarter_rates(samples: Sequence[Mapping[str, Any]]) -> list[float]:
    """Batches a second in each quarter of the run (by the samples nearest the quarters'
    ends); [] with too few samples. A rate that falls as the table ages shows here."""
    if len(samples) < 8:
        return []
    marks = [samples[len(samples) * k // 4 - 1] if k else samples[0] for k in range(5)]
    return [
        (b["batches"] - a["batches"]) / (b["t"] - a["t"]) if b["t"] > a["t"] else 0.0
        for a, b in itertools.pairwise(marks)
    ]


def ceiling(ratio: str, target: float, measured: float) -> dict[str, Any]:
    """A goal that ``measured`` stays at or below ``target``."""
    return {"ratio": ratio, "target": f"<= {target}", "measured": round(measured, 3),
            "met": measured <= target}  # fmt: skip


def goals(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The run's goals (module docstring), per job that maintains its table."""
    out: list[dict[str, Any]] = []
    params = result["parameters"]
    jobs = result["jobs"]
    none_rate = _rows_per_second(jobs.get("none"))
    optimized = result["optimized_reads"]
    for name, job in jobs.items():
        last = job["samples"][-1]
        if name in ("default", "clustered"):
            for kind in READS:
                ratio = median_read(job["final_reads"], kind) / median_read(optimized, kind)
                out.append(ceiling(f"{name}: {kind} read / the OPTIMIZEd copy's", 1.5, ratio))
            allowed = last["live_bytes"] / params["target_bytes"] + params["small_files"]
            files = last["live_files"] / allowed
            out.append(ceiling(f"{name}: live data files / (bytes / target + tail)", 1.0, files))
        if name != "none" and last["ingested_bytes"]:
            amplification = last["maintenance_bytes"] / last["ingested_bytes"]
            out.append(ceiling(f"{name}: maintenance bytes / ingested bytes", 4.0, amplification))
        wal = max(sample.get("wal_bytes", 0) for sample in job["samples"])
        out.append(ceiling(f"{name}: largest WAL / (a segment + 1 MiB)", 1.0, wal / WAL_BOUND))
        log_kept = ("log_files", "log_bytes") if params.get("log_retention_hours") else ()
        for key in (*STORES, *log_kept):
            grew = growth(job["samples"], key)
            if grew is not None:
                out.append(ceiling(f"{name}: {key} growth, last half", FLAT_GROWTH, grew))
        rates = quarter_rates(job["samples"])
        if rates and rates[1]:
            out.append(common.goal(f"{name}: batches a second, last quarter / second quarter's",
                                   0.8, rates[3] / rates[1]))  # fmt: skip
        rate = _rows_per_second(job)
        if name != "none" and none_rate and rate is not None:
            out.append(
                common.goal(f"{name}: ingest rate / no maintenance's", 0.8, rate / none_rate)
            )
    return {goal["ratio"]: goal for goal in out}


def _rows_per_second(job: Mapping[str, Any] | None) -> float | None:
    """Rows the job committed by its last sample, per second of the run (the last samples
    of all jobs are taken together)."""
    if not job:
        return None
    last = job["samples"][-1]
    return float(last["rows"]) / last["t"] if last["t"] and "rows" in last else None


# ---------------------------------------------------------------------------------- the report


WEEK_BATCHES = 10_000
"""The batches a week in an hour asks a run for (docs/operations.md, "Table maintenance")."""


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    params, jobs = data["parameters"], data["jobs"]
    who = (
        f"{len(jobs)} ingest jobs side by side for {num(data['seconds'] / 60, 1)} minutes, each "
        "subscribed to the same"
        if len(jobs) > 1
        else f"One ingest job ({next(iter(jobs))}) alone for {num(data['seconds'] / 60, 1)} "
        "minutes, subscribed to"
    )
    out = [
        f"{who} {params['rate']:.0f} messages a second of {params['size']} bytes "
        f"over {params['topics']} topics (QoS 1), trigger {params['trigger_ms']} ms, the "
        f"job's default `local[2]`{' each' if len(jobs) > 1 else ''}; compaction's target "
        f"{params['target_bytes'] // (1 << 20)} MiB, tail {params['small_files']} files"
        + (
            f"; `--log-retention {params['log_retention_hours']:g}` (a week's log compressed "
            "as the run compresses time)."
            if params.get("log_retention_hours")
            else "."
        ),
        "",
    ]
    rows = []
    for name, job in jobs.items():
        last = job["samples"][-1]
        amplification = (
            last["maintenance_bytes"] / last["ingested_bytes"] if last["ingested_bytes"] else 0
        )
        rows.append([
            name, str(last["batches"]), str(last["live_files"]), str(last["disk_files"]),
            num(last["live_bytes"] / (1 << 20), 1), num(amplification, 2), str(last["log_files"]),
            *(num(median_read(job["final_reads"], kind) * 1000) for kind in READS),
        ])  # fmt: skip
    optimized = data["optimized_reads"]
    rows.append(["OPTIMIZEd copy", "", "1+", "", "", "", "",
                 *(num(median_read(optimized, kind) * 1000) for kind in READS)])  # fmt: skip
    out += md_table(
        ["job", "batches", "live files", "files on disk", "live MiB", "write ampl.", "log files",
         "Spark full ms", "Spark filtered ms", "delta-rs full ms", "delta-rs filtered ms"],
        rows,
    )  # fmt: skip
    out += ["", *batches_line(data), "Write amplification over the run (bytes maintenance "
            "wrote / bytes the stream wrote), at each quarter:", ""]  # fmt: skip
    quarters = []
    for name, job in jobs.items():
        samples = job["samples"]
        cells = []
        for k in (1, 2, 3, 4):
            at = samples[len(samples) * k // 4 - 1]
            ratio = at["maintenance_bytes"] / at["ingested_bytes"] if at["ingested_bytes"] else 0
            cells.append(f"{num(ratio, 2)} ({num(at['t'] / 60)} min)")
        quarters.append([name, *cells])
    out += md_table(["job", "1st quarter", "half", "3rd quarter", "end"], quarters)
    out += ["", "Batches a second in each quarter of the run:", ""]
    out += md_table(
        ["job", "1st quarter", "2nd", "3rd", "4th"],
        [[name, *(num(r, 2) for r in quarter_rates(job["samples"]))] for name, job in jobs.items()],
    )
    out += ["", *goals_table(data["goals"])]

    def paint(plt: Any) -> None:
        left = plt.subplot(1, 2, 1)
        right = plt.subplot(1, 2, 2)
        for name, job in jobs.items():
            left.plot([s["t"] / 60 for s in job["samples"]],
                      [s["live_files"] for s in job["samples"]], label=name)  # fmt: skip
            right.plot([r["t"] / 60 for r in job["reads"]],
                       [r["delta_rs_full"] * 1000 for r in job["reads"]], label=name)  # fmt: skip
        left.set_xlabel("minutes")
        left.set_ylabel("live data files")
        left.set_yscale("log")
        right.set_xlabel("minutes")
        right.set_ylabel("delta-rs full read, ms")
        right.set_yscale("log")
        left.legend()

    name = "long_run" if len(jobs) > 1 else f"long_run_{next(iter(jobs))}"
    return [*out, "", *charts.draw(name, "Data files and read time over the run", paint)]


def batches_line(data: Mapping[str, Any]) -> Lines:
    """How many batches each job committed, against :data:`WEEK_BATCHES`."""
    jobs = data["jobs"]
    batches = [job["samples"][-1]["batches"] for job in jobs.values()]
    low, high = min(batches), max(batches)
    counted = f"{low:,}" if low == high else f"{low:,} to {high:,}"
    seconds = data["seconds"] / low if low else 0.0
    if low >= WEEK_BATCHES:
        return [f"Batches: {counted}, at least the {WEEK_BATCHES:,} a week in an hour asks for."]
    why = (
        "the machine ran every job's batches side by side"
        if len(jobs) > 1
        else f"a batch took {num(seconds, 2)} s on average on this machine, trigger, commit and "
        "compaction together"
    )
    return [
        f"Batches: {counted}, fewer than the {WEEK_BATCHES:,} a week in an hour asks for: {why}."
    ]


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = common.arguments("long_run", __doc__.splitlines()[0], size=64)
    parser.add_argument("--minutes", type=float, default=60.0, help="length of the run")
    parser.add_argument("--trigger-ms", type=int, default=200, help="the jobs' trigger")
    parser.add_argument("--rate", type=float, default=200.0, help="messages a second, all topics")
    parser.add_argument("--sample-every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--read-every", type=float, default=300.0, help="seconds between reads")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument(
        "--log-retention", type=float, default=None, metavar="HOURS",
        help="the jobs' --log-retention (a week's 168 hours compressed into the run's time)",
    )  # fmt: skip
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return common.finish("long_run", lambda: measure(args), args.output, section)


if __name__ == "__main__":
    sys.exit(main())
