"""Send -> visible latency into Delta (``python -m bench.latency``): per (rate, trigger) a
publisher at a fixed rate into the ingest job's query; a row's latency is when its Delta commit
was first seen minus the send time in its payload. A goal run also on Delta's checkpoint
interval (10) besides the job's (1000)."""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools import delta_log

from .common import BenchError, arguments, check_broker, finish, json_line, machine, wait_for
from .drainer import TOPIC, TOPIC_FILTER, TableTail
from .ingest import JOB_SINK, job_sink, job_source, spark_session
from .payloads import TIMED_HEADER, parse_timed, timed
from .render import Charts, Lines, md_table, num

RATES = (1_000, 10_000)
TRIGGERS = ("500 milliseconds", "2 seconds")
WARMUP_RUN_SECONDS = 30.0
DELTA_CHECKPOINT_INTERVAL = 10  # Delta's default delta.checkpointInterval
JOB_CHECKPOINT_INTERVAL = 1000  # that of the tables the ingest job creates (decision 23)
GOAL: dict[str, Any] = {"rate": 10_000, "trigger": "500 milliseconds", "p99_seconds": 2.0}
POLL_SECONDS = 0.005
INFLIGHT = 100
CDF_POINTS = (*range(0, 100), 99.5, 99.9, 100)


def quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of sorted values, interpolated linearly."""
    if not ordered:
        raise ValueError("no values")
    at = (len(ordered) - 1) * q / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def publish_at_rate(
    url: str, rate: float, duration: float, size: int, client_id: str
) -> dict[str, Any]:
    """``rate * duration`` QoS 1 messages on a token-bucket schedule; the achieved rate."""
    from connector.mqtt.config import SessionConfig
    from connector.mqtt.driver import MqttClient

    total = round(rate * duration)
    client = MqttClient(url, SessionConfig(client_id), [])
    behind = 0.0
    with client:
        client.connect()
        session = client.session
        start = time.monotonic()
        sent = 0
        while sent < total:
            now = time.monotonic()
            due = min(total, int((now - start) * rate) + 1)
            burst = min(due - sent, INFLIGHT - session.outbound_in_flight)
            if burst <= 0:
                wait = start + sent / rate - now if due <= sent else 0.01
                client.pump(max(0.0, min(wait, 0.01)))
                continue
            behind = max(behind, now - (start + sent / rate))
            for seq in range(sent, sent + burst):
                session.publish(TOPIC, timed(seq, time.time_ns(), size), 1, now)
            sent += burst
            client.flush()
            if not client.connected:
                raise BenchError(f"lost the connection to {url} while publishing")
        sent_seconds = time.monotonic() - start
        deadline = time.monotonic() + 30
        while session.outbound_in_flight and time.monotonic() < deadline:
            client.pump(1.0)
        unacknowledged = session.outbound_in_flight
    return {
        "published": sent,
        "achieved_rate": round(sent / sent_seconds, 1),
        "max_behind_schedule_ms": round(behind * 1000, 2),
        "unacknowledged": unacknowledged,
    }


def _latencies(tail: TableTail) -> tuple[dict[int, float], int]:
    """Sequence number -> latency in seconds, and how many rows were duplicates."""
    import pyarrow.parquet as pq

    latency: dict[int, float] = {}
    duplicates = 0
    for commit in tail.commits:
        for name in commit.files:
            for value in pq.read_table(tail.table / name, columns=["payload"])[0].to_pylist():
                seq, sent_ns = parse_timed(value)
                if seq in latency:
                    duplicates += 1
                else:
                    latency[seq] = commit.seen - sent_ns / 1e9
    return latency, duplicates


def run_once(
    spark: Any, rate: int, trigger: str, args: Any, workdir: Path,
    checkpoint_interval: int = JOB_CHECKPOINT_INTERVAL, duration: float = 0.0, warmup: float = 0.0,
) -> dict[str, Any]:  # fmt: skip
    """One (rate, trigger) pair on a fresh broker and table."""
    from devtools.mosquitto import MosquittoBroker

    duration, warmup = duration or args.duration, warmup or args.warmup
    tag = f"{rate}-{trigger.replace(' ', '')}"
    client_id = f"bench-latency-{tag}"
    table, checkpoint = workdir / f"table-{tag}", workdir / f"checkpoint-{tag}"
    with MosquittoBroker(max_queued_messages=max(1_000_000, 2 * round(rate * duration))) as broker:
        frame = job_source(spark, [
            "--broker", broker.url, "--topic", TOPIC_FILTER, "--qos", "1", "--table", str(table),
            "--checkpoint", str(checkpoint), "--client-id", client_id,
        ])  # fmt: skip
        writer, _ = job_sink(frame, table, checkpoint, trigger, "binary", checkpoint_interval)
        with TableTail(table).watching(POLL_SECONDS) as tail:
            query = writer.start()
            try:
                # Messages published before the source subscribed would not be queued for it.
                subscribed = re.compile(rf"{re.escape(client_id)} \d {re.escape(TOPIC_FILTER)}")
                wait_for(
                    lambda: subscribed.search(broker.log_text()), args.timeout,
                    lambda: f"the source never subscribed:\n{broker.log_text()[-2000:]}",
                )  # fmt: skip
                published = json_line([
                    sys.executable, "-m", "bench.latency", "publish", broker.url, str(rate),
                    str(duration), str(args.size), f"bench-latency-pub-{tag}",
                ], duration + 120, "the publisher")  # fmt: skip
                count = published["published"]

                def visible() -> bool:
                    if not query.isActive:
                        raise BenchError(f"the query stopped: {query.exception()}")
                    return tail.rows >= count

                wait_for(visible, args.timeout, lambda: f"{tail.rows} of {count} rows visible")
                durations = [p.batchDuration for p in query.recentProgress if p.numInputRows > 0]
            finally:
                query.stop()
        check_broker(broker)
    latency, duplicates = _latencies(tail)
    if len(latency) != count or set(latency) != set(range(count)):
        raise BenchError(f"{len(latency)} distinct sequence numbers in the table, sent {count}")
    skip = round(rate * warmup)
    measured = sorted(v for seq, v in latency.items() if seq >= skip)
    data_commits = [c for c in tail.commits if c.rows]
    run = {
        "rate": rate, "trigger": trigger, "publisher": published, "rows": count,
        "duplicates": duplicates, "measured_rows": len(measured),
        "latency_seconds": {
            k: round(quantile(measured, q), 4) for k, q in (("p50", 50), ("p95", 95), ("p99", 99))
        }
        | {"max": round(measured[-1], 4)},
        "cdf": [[q, round(quantile(measured, q), 4)] for q in CDF_POINTS],
        "rows_per_commit_median": round(quantile(sorted(c.rows for c in data_commits), 50)),
        "batch_duration_ms": {"p50": round(quantile(sorted(durations), 50))} if durations else None,
        "table_checkpoint_interval": checkpoint_interval,
    }  # fmt: skip
    lat = run["latency_seconds"]
    print(
        f"{run_label(run)}: p50 {lat['p50']:.3f} s, p95 {lat['p95']:.3f} s, p99 {lat['p99']:.3f} s "
        f"(achieved {published['achieved_rate']:,.0f} msg/s)",
        flush=True,
    )
    return run


def run_label(run: Mapping[str, Any]) -> str:
    """``10,000 msg/s, 500 milliseconds``, plus the table's interval when it is not the job's."""
    interval = run["table_checkpoint_interval"]
    other = f", table interval {interval}" if interval != JOB_CHECKPOINT_INTERVAL else ""
    return f"{run['rate']:,} msg/s, {run['trigger']}{other}"


def goal_verdicts(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The goal, with the p99 of its run on the job's table and on one with Delta's interval."""
    goal: dict[str, Any] = dict(GOAL)
    for run in runs:
        if (run["rate"], run["trigger"]) != (GOAL["rate"], GOAL["trigger"]):
            continue
        p99 = run["latency_seconds"]["p99"]
        verdict = {"p99_measured_seconds": p99, "met": p99 <= GOAL["p99_seconds"]}
        if run["table_checkpoint_interval"] == JOB_CHECKPOINT_INTERVAL:
            goal.update(verdict)
        elif run["table_checkpoint_interval"] == DELTA_CHECKPOINT_INTERVAL:
            other = {"table_checkpoint_interval": DELTA_CHECKPOINT_INTERVAL, **verdict}
            goal["with_other_checkpoint_interval"] = other
    return goal


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["publish"]:  # the publisher's process: URL RATE DURATION SIZE CLIENT_ID
        url, rate, duration, size, client_id = argv[1:6]
        result = publish_at_rate(url, float(rate), float(duration), int(size), client_id)
        sys.stdout.write(json.dumps(result) + "\n")
        return 0 if result["unacknowledged"] == 0 else 1
    parser = arguments("latency", __doc__, size=100, timeout=120.0)
    parser.add_argument("--rates", type=int, nargs="+", default=list(RATES))
    parser.add_argument("--triggers", nargs="+", default=list(TRIGGERS))
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of publishing")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds left out")
    parser.add_argument("--quick", action="store_true", help="8 s runs, 2 s warm-up")
    parser.add_argument("--no-warmup-run", action="store_true", help="no throwaway run first")
    parser.add_argument(
        "--no-delta-interval-run", action="store_true",
        help=f"no goal run on a table with checkpoint interval {DELTA_CHECKPOINT_INTERVAL}",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = 8.0, 2.0
    if args.size < TIMED_HEADER or args.warmup >= args.duration:
        parser.error(f"--size must be >= {TIMED_HEADER} and --warmup < --duration")

    def measure() -> dict[str, Any]:
        info = machine("pyspark", "delta-spark")
        spark = spark_session("bench-latency", progress_updates=2000)
        runs = []
        warm_checkpoint: bool | None = None
        with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
            if not args.no_warmup_run:  # JVM, Delta and Python workers, not on the first pair
                warm = Path(tmp) / "warm"
                interval = JOB_CHECKPOINT_INTERVAL
                run_once(
                    spark, RATES[0], args.triggers[0], args, warm, interval, WARMUP_RUN_SECONDS, 1.0
                )
                checkpointed = delta_log.commit_name(DELTA_CHECKPOINT_INTERVAL)
                warm_checkpoint = any(warm.rglob(f"{delta_log.LOG_DIR}/{checkpointed}"))
            for rate in args.rates:
                for trigger in args.triggers:
                    runs.append(run_once(spark, rate, trigger, args, Path(tmp)))
            if not args.no_delta_interval_run:
                other = Path(tmp) / "delta-interval"
                interval = DELTA_CHECKPOINT_INTERVAL
                runs.append(run_once(spark, GOAL["rate"], GOAL["trigger"], args, other, interval))
        spark.stop()
        info["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
        params = {
            "duration_seconds": args.duration, "warmup_seconds": args.warmup,
            "warmup_run_seconds": None if args.no_warmup_run else WARMUP_RUN_SECONDS,
            "warmup_run_reached_a_delta_checkpoint": warm_checkpoint,
            "payload_bytes": args.size, "qos": 1, "master": "local[2]", "sink": JOB_SINK,
            "publisher": f"our client in a subprocess, token bucket, {INFLIGHT} in flight",
        }  # fmt: skip
        clock = (
            "send time in the payload (publisher's time.time_ns() just before the PUBLISH is "
            "written) -> wall-clock time this process first saw the Delta commit file that "
            f"added the row (polled every {POLL_SECONDS * 1000:.0f} ms)"
        )
        return {
            "machine": info, "parameters": params, "clock": clock, "runs": runs,
            "goal": goal_verdicts(runs),
        }  # fmt: skip

    return finish("latency", measure, args.output, section)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    params = data.get("parameters", {})
    runs = data["runs"]
    warm_up = ""
    if params.get("warmup_run_seconds"):
        reached = params.get("warmup_run_reached_a_delta_checkpoint")
        warm_up = (
            f" A throwaway {params['warmup_run_seconds']:g}-second run warmed the JVM up first"
            + (" (it reached Delta's first checkpoint)." if reached else ".")
        )
    out = [
        f"A publisher ({params.get('publisher')}) sends {params.get('payload_bytes')}-byte "
        f"QoS {params.get('qos')} messages at a fixed rate for {params.get('duration_seconds')} "
        f"s into the ingest job's query ({params.get('master')}, {params.get('sink')}); the "
        f"first {params.get('warmup_seconds')} s of each run are left out of the percentiles."
        + warm_up,
        "",
        f"Clock: {data.get('clock')}.",
        "",
    ]
    rows = [
        [num(r["rate"]), r["trigger"], num(r["table_checkpoint_interval"]),
         num(r["publisher"].get("achieved_rate")), num(r["measured_rows"]),
         *(num(r["latency_seconds"][k], 3) for k in ("p50", "p95", "p99", "max")),
         num(r.get("rows_per_commit_median")), num((r.get("batch_duration_ms") or {}).get("p50"))]
        for r in runs
    ]  # fmt: skip
    out += md_table(
        ["msg/s", "trigger", "table's checkpoint interval", "achieved msg/s", "rows measured",
         "p50 s", "p95 s", "p99 s", "max s", "rows/commit", "batch ms p50"],
        rows,
    )  # fmt: skip
    goal = data["goal"]
    verdicts = [(goal, "")]
    if other := goal.get("with_other_checkpoint_interval"):
        verdicts.append((other, f", table interval {other['table_checkpoint_interval']}"))
    goal_rows = [
        [
            f"p99 at {num(goal['rate'])} msg/s, trigger {goal['trigger']}{table}",
            f"≤ {goal['p99_seconds']} s",
            f"{verdict['p99_measured_seconds']:.3f} s",
            "met" if verdict["met"] else "**not met**",
        ]
        for verdict, table in verdicts
        if "met" in verdict
    ]
    if goal_rows:
        out += ["", *md_table(["goal", "target", "measured", "verdict"], goal_rows)]

    def paint(plt: Any) -> None:
        axes = plt.gca()
        for r in runs:
            axes.plot([v for _, v in r["cdf"]], [q / 100 for q, _ in r["cdf"]], label=run_label(r))
        axes.set_xlabel("send → visible in Delta (s)")
        axes.set_ylabel("fraction of messages")
        axes.set_ylim(0, 1.01)
        axes.grid(True, alpha=0.3)
        axes.legend()

    return [*out, "", *charts.draw("latency_cdf", "Latency distribution (CDF)", paint)]


if __name__ == "__main__":
    sys.exit(main())
