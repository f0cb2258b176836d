"""How cost grows with work (``python -m bench.scale [payload] [topics] [backlog]``): drain rate
and peak RSS of ``ours``, ``paho`` and ``mosquitto_sub`` over payload sizes and distinct topics,
and the receiver's RSS while 10^4 .. 10^7 messages wait at the broker or in its WAL."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import common, drainer
from .payloads import numbered
from .render import Charts, Lines, md_table, mib, num, times

SWEEPS = ("payload", "topics", "backlog")
PEER_COLOURS = {"ours": "tab:blue", "paho": "tab:orange", "mosquitto_sub": "tab:green"}
PEERS = tuple(PEER_COLOURS)
PAYLOAD_SIZES = (10, 100, 1024, 16 * 1024, 64 * 1024)
TOPIC_COUNTS = (1, 100, 10_000, 100_000)
BACKLOG_SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
BACKLOG_BOUND = 10_000
RECEIVER_ID = "bench-scale-receiver"


def status_kib(pid: int | str, field: str) -> int | None:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in KiB, if there is one."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def rss_kib() -> int:
    """Resident set size of this process in KiB (Linux)."""
    value = status_kib("self", "VmRSS")
    if value is None:
        raise common.BenchError("no VmRSS in /proc/self/status")
    return value


def run_measured(
    command: list[str], timeout: float, keep_stdout: bool = True
) -> tuple[float, int, int, str, str]:
    """Run ``command``: (wall seconds, exit status, peak RSS in KiB from its VmHWM, out, err)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        target = out if keep_stdout else subprocess.DEVNULL
        proc = subprocess.Popen(command, stdout=target, stderr=err, cwd=common.REPO_ROOT)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], status_kib(proc.pid, "VmHWM") or 0)
                done.wait(0.01)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            _, status = os.waitpid(proc.pid, 0)
        finally:
            timer.cancel()
            done.set()
            sampler.join()
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return wall, proc.returncode, peak[0], out.read().decode(), err.read().decode()


def drain_point(peer: str, count: int, size: int, topics: int, timeout: float) -> dict[str, Any]:
    """A fresh backlog of ``count`` messages over ``topics`` topics, drained by ``peer``."""
    client_id = f"bench-scale-{peer}"
    names = [f"plant/line-{k // 1000}/sensor-{k}/telemetry" for k in range(topics)]
    queued = drainer.backlog(
        count, [(client_id, drainer.TOPIC_FILTER)], inflight=20,
        publish=lambda url: common.publish_windowed(
            url, count, lambda seq: (names[seq % topics], numbered(seq, size)), timeout
        ),
    )  # fmt: skip
    with queued.broker as broker:
        command = drainer.command(peer, broker.url, client_id, count, timeout)
        # mosquitto_sub -C N exits 0 only after N messages (to /dev/null, as bench.drain does).
        wall, code, rss, out, err = run_measured(command, timeout + 30, peer != "mosquitto_sub")
        common.check_broker(broker)
    lines = out.strip().splitlines()
    if code != 0 or (peer != "mosquitto_sub" and not lines):
        raise common.BenchError(f"{peer} failed ({code}): {out[-500:]} {err[-2000:]}")
    point = {
        "peer": peer, "messages": count, "payload_bytes": size, "topics": topics,
        "rate": round(count / wall, 1), "mb_per_s": round(count * size / wall / 1e6, 3),
        "peak_rss_kib": rss,
    }  # fmt: skip
    if peer != "mosquitto_sub":
        details = json.loads(lines[-1])
        if details["distinct"] != count:
            raise common.BenchError(
                f"{peer} got {details['distinct']} of {count} distinct messages"
            )
        point["in_process_rate"] = round(count / details["drain_seconds"], 1)
    return point


def _with_ratios(points: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Medians per (x, peer) and ours / peer ratios paired by repetition."""
    table: dict[str, dict[str, Any]] = {}
    for x in sorted({p[key] for p in points}):
        here = [p for p in points if p[key] == x]
        mine = {peer: [p for p in here if p["peer"] == peer] for peer in PEERS}
        row: dict[str, Any] = {}
        for peer, found in ((peer, found) for peer, found in mine.items() if found):
            row[peer] = {
                "messages": found[0]["messages"],
                "rate": common.Stats.of(p["rate"] for p in found).as_dict(1),
                "mb_per_s": round(common.Stats.of(p["mb_per_s"] for p in found).median, 3),
                "peak_rss_kib": round(common.Stats.of(p["peak_rss_kib"] for p in found).median),
            }
            if all("in_process_rate" in p for p in found):
                rates = (p["in_process_rate"] for p in found)
                row[peer]["in_process_rate"] = round(common.Stats.of(rates).median, 1)
        for peer in PEERS[1:]:
            if mine["ours"] and len(mine[peer]) == len(mine["ours"]):
                ratios = (
                    a["rate"] / b["rate"] for a, b in zip(mine["ours"], mine[peer], strict=True)
                )
                row[f"ours/{peer}"] = round(common.Stats.of(ratios).median, 3)
        table[str(x)] = row
    return table


def sweep_drains(
    key: str, values: Sequence[int], shape: Callable[[int], tuple[int, int, int]], args: Any
) -> dict[str, Any]:
    """Every peer at every ``x`` of ``values``; ``shape(x)``: (messages, size, topics)."""
    points = []
    for x in values:
        for _ in range(args.repeat):
            for peer in args.peers:
                points.append(drain_point(peer, *shape(x), args.timeout))
                print(f"  {key} {x:,}: {peer} {num(points[-1]['rate'])} msg/s", flush=True)
    return {"points": points, "by_" + key: _with_ratios(points, key)}


def run_receiver(argv: Sequence[str]) -> int:
    """``receiver URL WAL BOUND TARGET IDLE``: a Receiver sampling its RSS; one JSON line out."""
    url, wal, bound, target, idle = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4])
    receiver = common.new_receiver(url, "rss/#", RECEIVER_ID, wal, maxBacklogMessages=str(bound))
    baseline = rss_kib()
    peak = 0
    receiver.start()
    first_at = changed_at = None
    stored = 0
    while True:
        now = time.monotonic()
        current = receiver.wal.next_offset
        if current and first_at is None:
            first_at = now
        if current != stored:
            stored, changed_at = current, now
        peak = max(peak, rss_kib())
        if (target and stored >= target) or (stored and changed_at and now - changed_at > idle):
            break
        receiver.check()
        time.sleep(0.05)
    receiver.stop()
    result = {
        "stored": stored,
        "baseline_rss_kib": baseline,
        "peak_rss_kib": max(status_kib("self", "VmHWM") or 0, peak),
        "store_seconds": (changed_at - first_at) if first_at and changed_at else None,
    }
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


def backlog_point(count: int, where: str, timeout: float) -> dict[str, Any]:
    """Receiver RSS while ``count`` messages wait ``where`` (broker or wal) for it."""
    from devtools.mosquitto import MosquittoBroker

    bound = BACKLOG_BOUND if where == "broker" else count + BACKLOG_BOUND
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp,
        MosquittoBroker(Path(tmp) / "broker", max_queued_messages=2 * count) as broker,
    ):
        common.create_session(broker.url, RECEIVER_ID, "rss/#")
        drainer.publish_numbered(broker.url, count, 100, timeout, topic="rss/a")
        found = common.json_line([
            sys.executable, "-m", "bench.scale", "receiver", broker.url, str(Path(tmp) / "wal"),
            str(bound), str(0 if where == "broker" else count), "2.0",
        ], timeout, "the receiver worker")  # fmt: skip
        common.check_broker(broker)
    stored, store = found["stored"], found["store_seconds"]
    if where == "wal" and stored != count:
        raise common.BenchError(f"the receiver stored {stored} of {count}")
    return {
        "backlog": count,
        "waiting": where,
        "max_backlog_messages": bound,
        "stored_in_wal": stored,
        "waiting_at_broker": count - stored,
        "store_rate": round(stored / store) if where == "wal" and store else None,
        "baseline_rss_kib": found["baseline_rss_kib"],
        "peak_rss_kib": found["peak_rss_kib"],
        "rss_growth_kib": found["peak_rss_kib"] - found["baseline_rss_kib"],
        "seconds": round(time.monotonic() - began, 1),
    }


def sweep_backlog(args: Any) -> dict[str, Any]:
    """Every size whose time, estimated from the previous one, fits in ``--backlog-budget``."""
    points: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    started = time.monotonic()
    per_message = 0.0  # seconds per message of both variants, from the last size measured
    for count in (s for s in args.backlog_sizes if s <= args.backlog_max):
        left = args.backlog_budget - (time.monotonic() - started)
        if points and per_message * count > left:
            reason = f"estimated {per_message * count:.0f} s > {left:.0f} s left"
            skipped.append({"backlog": count, "reason": reason})
            continue
        here = [backlog_point(count, w, args.timeout + count / 5_000) for w in args.backlog_where]
        points += here
        per_message = sum(p["seconds"] for p in here) / count
    reached = max((p["backlog"] for p in points), default=0)
    return {"points": points, "skipped": skipped, "largest_reached": reached}


def _sweep_table(sweep: Mapping[str, Any], key: str, label: str) -> Lines:
    rows = [
        [num(int(x)), peer, num(cell.get("messages")), num(cell["rate"]["median"]),
         num(cell.get("in_process_rate")), num(cell.get("mb_per_s"), 1),
         mib(cell.get("peak_rss_kib")), times(row.get("ours/paho")) if peer == "ours" else "",
         times(row.get("ours/mosquitto_sub")) if peer == "ours" else ""]
        for x, row in sweep[key].items()
        for peer in PEER_COLOURS
        if isinstance(cell := row.get(peer), Mapping)
    ]  # fmt: skip
    return md_table(
        [label, "peer", "messages", "msg/s (wall)", "msg/s (in process)", "MB/s",
         "peak RSS MiB", "ours/paho", "ours/mosquitto_sub"],
        rows,
    )  # fmt: skip


def _sweep_chart(
    charts: Charts, sweep: Mapping[str, Any], key: str, name: str, title: str, xlabel: str
) -> Lines:
    by_x = sweep[key]
    xs = sorted(int(x) for x in by_x)
    bytes_sweep = key == "by_payload_bytes"

    def paint(plt: Any) -> None:
        left = plt.subplot(1, 2, 1)
        right = plt.subplot(1, 2, 2)
        for peer, colour in PEER_COLOURS.items():
            pts = [(x, by_x[str(x)][peer]) for x in xs if peer in by_x[str(x)]]
            if not pts:
                continue
            xs_of = [x for x, _ in pts]
            rates = [c["rate"]["median"] for _, c in pts]
            left.plot(xs_of, rates, "o-", color=colour, label=peer)
            sizes = [c["mb_per_s"] if bytes_sweep else c["peak_rss_kib"] / 1024 for _, c in pts]
            right.plot(xs_of, sizes, "o-", color=colour, label=peer)
        for axes in (left, right):
            axes.set_xscale("log")
            axes.set_xlabel(xlabel)
            axes.grid(True, alpha=0.3)
        left.set_yscale("log")
        left.set_ylabel("messages/s (drain process wall time)")
        right.set_ylabel("MB/s" if bytes_sweep else "peak RSS (MiB)")
        right.set_ylim(bottom=0)
        left.legend()

    return charts.draw(name, title, paint)


SWEEP_SECTIONS = (
    ("payload", "by_payload_bytes", "Payload size", "payload bytes", "throughput_vs_payload",
     "Drain throughput vs payload size", "payload size (bytes)",
     "A persistent session's backlog (QoS 1, one topic) drained by each peer; rates over the "
     "drain process's wall time (start → exit, the same clock for the three peers); "
     "in-process: connect → last message; peak RSS of the drain process."),
    ("topics", "by_topics", "Distinct topics", "topics", "topics_scale",
     "Drain rate and memory vs distinct topics", "distinct topics",
     "100-byte payloads spread round-robin over N distinct topic names, drained as above."),
)  # fmt: skip


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    out: Lines = []
    for name, key, title, label, chart, chart_title, xlabel, text in SWEEP_SECTIONS:
        if isinstance(sweep := data.get(name), Mapping):
            out += [f"### {title}", "", text, "", *_sweep_table(sweep, key, label), ""]
            out += _sweep_chart(charts, sweep, key, chart, chart_title, xlabel)
    backlog = data.get("backlog")
    return out + _backlog_section(backlog, charts) if isinstance(backlog, Mapping) else out


def _backlog_section(backlog: Mapping[str, Any], charts: Charts) -> Lines:
    points = backlog["points"]
    params = backlog.get("parameters", {})
    out = [
        "### Backlog",
        "",
        "The source's receiver in its own process while N 100-byte QoS 1 messages wait: *at "
        f"the broker* (`maxBacklogMessages` {num(params.get('bound_when_waiting_at_broker'))}: "
        "the receiver stops reading and TCP pushes back) or *in the WAL* (the receiver stores "
        "every message; nothing consumes them). The backlog is queued for the receiver's "
        "session before it connects; store msg/s is its first → last WAL append. Largest "
        "backlog reached: "
        f"**{num(backlog.get('largest_reached'))}** messages.",
        "",
    ]
    rows = [
        [num(p["backlog"]), p["waiting"], num(p["stored_in_wal"]), num(p["waiting_at_broker"]),
         num(p.get("store_rate")), mib(p["baseline_rss_kib"]), mib(p["peak_rss_kib"]),
         mib(p["rss_growth_kib"])]
        for p in points
    ]  # fmt: skip
    out += md_table(
        ["backlog", "waiting", "in WAL", "at broker", "store msg/s", "RSS before connect MiB",
         "peak MiB", "growth MiB"],
        rows,
    )  # fmt: skip
    peaks = {
        where: sorted((p["backlog"], p["peak_rss_kib"]) for p in points if p["waiting"] == where)
        for where in ("broker", "wal")
    }
    for where, label in (("broker", "at the broker"), ("wal", "in the WAL")):
        if len(peaks[where]) > 1:
            (low, low_kib), (high, high_kib) = peaks[where][0], peaks[where][-1]
            out += [
                "",
                f"Peak RSS with {num(high)} rather than {num(low)} messages waiting {label}: "
                f"{(high_kib - low_kib) / 1024:+,.1f} MiB ({high / low:,.0f} times the backlog).",
            ]
    for skip in backlog.get("skipped", []):
        out += ["", f"Skipped {num(skip['backlog'])}: {skip['reason']}."]

    def paint(plt: Any) -> None:
        axes = plt.gca()
        for where, colour, label in (
            ("broker", "tab:blue", "peak RSS, waiting at the broker"),
            ("wal", "tab:red", "peak RSS, waiting in the WAL"),
        ):
            if pts := peaks[where]:
                axes.plot([x for x, _ in pts], [y / 1024 for _, y in pts], "o-", color=colour,
                          label=label)  # fmt: skip
        base = sorted((p["backlog"], p["baseline_rss_kib"] / 1024) for p in points)
        if base:
            axes.plot([x for x, _ in base], [y for _, y in base], "k:", label="RSS before connect")
        axes.set_xscale("log")
        axes.set_ylim(bottom=0)
        axes.set_xlabel("messages waiting")
        axes.set_ylabel("receiver process RSS (MiB)")
        axes.grid(True, alpha=0.3)
        axes.legend()

    return [*out, "", *charts.draw("rss_vs_backlog", "Receiver RSS vs backlog", paint)]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["receiver"]:
        return run_receiver(argv[1:])
    parser = common.arguments("scale", __doc__, messages=100_000, repeat=1, timeout=300.0)
    parser.add_argument("sweeps", nargs="*", help=f"any of {', '.join(SWEEPS)} (default: all)")
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--payload-sizes", type=int, nargs="+", default=list(PAYLOAD_SIZES))
    parser.add_argument("--topic-counts", type=int, nargs="+", default=list(TOPIC_COUNTS))
    parser.add_argument("--backlog-sizes", type=int, nargs="+", default=list(BACKLOG_SIZES))
    parser.add_argument("--payload-budget", type=int, default=256 << 20, help="bytes per backlog")
    parser.add_argument("--topic-messages", type=int, default=100_000)
    parser.add_argument("--backlog-max", type=int, default=10_000_000)
    parser.add_argument("--backlog-budget", type=float, default=900.0, help="seconds")
    parser.add_argument(
        "--backlog-where", nargs="+", choices=["broker", "wal"], default=["broker", "wal"]
    )
    parser.add_argument("--quick", action="store_true", help="small backlogs, for smoke tests")
    args = parser.parse_args(argv)
    args.sweeps = args.sweeps or list(SWEEPS)
    if unknown := set(args.sweeps) - set(SWEEPS):
        parser.error(f"unknown sweep(s): {', '.join(sorted(unknown))}")
    if args.quick:
        args.messages, args.topic_messages = 10_000, 10_000
        args.topic_counts = [c for c in args.topic_counts if c <= 10_000]
        args.payload_budget = 32 << 20
        args.backlog_max = min(args.backlog_max, 100_000)

    def measure() -> dict[str, Any]:
        info = common.machine()
        results: dict[str, Any] = {"machine": info}
        if "payload" in args.sweeps:
            print("payload size sweep (wall clock of each drain process):")
            results["payload"] = sweep_drains(
                "payload_bytes", args.payload_sizes,
                lambda s: (min(args.messages, max(2_000, args.payload_budget // s)), s, 1), args,
            )  # fmt: skip
        if "topics" in args.sweeps:
            print("distinct topics sweep (100-byte payloads):")
            results["topics"] = sweep_drains(
                "topics", args.topic_counts, lambda k: (max(args.topic_messages, k), 100, k), args
            )
        if "backlog" in args.sweeps:
            print("backlog sweep (receiver process RSS):")
            params = {"bound_when_waiting_at_broker": BACKLOG_BOUND, "payload_bytes": 100}
            results["backlog"] = {"parameters": params, **sweep_backlog(args)}
        info["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
        return results

    return common.finish("scale", measure, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
