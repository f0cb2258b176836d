"""How cost grows with work: ``python -m bench.scale [payload] [topics] [backlog]``.

Three sweeps, each point on a fresh Mosquitto (``devtools.mosquitto``, unlimited queue
bytes, a message limit above the backlog), QoS 1 throughout:

* ``payload``: a persistent session's backlog of numbered messages of 10 B .. 64 KiB (as many as
  ``--messages``, at most ``--payload-budget`` bytes, at least 2,000), drained by
  ``bench.drainer``'s ``ours`` (our client) and ``paho`` (paho-mqtt 2.x) workers and
  ``mosquitto_sub -c -q 1 -C N``. Messages/s and MB/s over each drain process's wall time
  (start -> exit, the same clock for the three), plus the process's peak RSS (its ``VmHWM``,
  read every 10 ms). Ours and paho also report connect -> last message inside the process,
  and check every sequence number arrived.
* ``topics``: the same three peers, 100-byte payloads spread round-robin over 1 .. 100,000
  distinct topic names (``plant/line-<k / 1000>/sensor-<k>/telemetry``, at least one message
  per topic): the decoder's per-connection topic cache must not make memory grow with it.
* ``backlog``: the source's receiver (``connector.receiver.receiver.Receiver``, in a subprocess
  that samples its own RSS every 50 ms) while 10^4 .. 10^7 100-byte messages wait, two ways:
  ``at the broker`` (``maxBacklogMessages`` 10,000: the receiver stops reading, TCP pushes back,
  the broker holds the rest) and ``in the WAL`` (a bound above the backlog: the receiver stores
  every message in its write-ahead log, which nothing consumes). The backlog is queued for the
  receiver's persistent session first, then the receiver connects. Figures: RSS before
  connecting (modules loaded, WAL opened) and peak; the WAL variant's first -> last append
  rate. RSS must stay flat as the backlog grows. Sizes whose estimated time (from the previous
  size's) exceeds what is left of ``--backlog-budget`` seconds are skipped and listed as such;
  ``--backlog-max`` caps the sizes.

Writes ``bench/results/scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import drainer
from .common import REPO_ROOT, BenchError, Stats, create_session, finish, machine, publish_windowed
from .payloads import numbered
from .render import Charts, Lines, md_table, mib, num, times

SWEEPS = ("payload", "topics", "backlog")
PEER_COLOURS = {"ours": "tab:blue", "paho": "tab:orange", "mosquitto_sub": "tab:green"}
PEERS = tuple(PEER_COLOURS)
TOPIC_FILTER = drainer.TOPIC_FILTER
PAYLOAD_SIZES = (10, 100, 1024, 16 * 1024, 64 * 1024)
TOPIC_COUNTS = (1, 100, 10_000, 100_000)
BACKLOG_SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
BACKLOG_BOUND = 10_000
BACKLOG_TOPIC = "rss/a"
RECEIVER_ID = "bench-scale-receiver"


def topic_name(k: int) -> str:
    return f"plant/line-{k // 1000}/sensor-{k}/telemetry"


# ------------------------------------------------------------------------------ backlogs


def publish(url: str, count: int, size: int, topics: int, timeout: float) -> float:
    """Publish ``count`` QoS 1 messages (payload: 10-digit sequence number, filler to ``size``
    bytes) round-robin over ``topics`` topic names; returns the rate."""
    names = [topic_name(k) for k in range(topics)]
    return publish_windowed(
        url, count, lambda seq: (names[seq % topics], numbered(seq, size)), timeout
    )


def status_kib(pid: int | str, field: str) -> int | None:
    """A ``/proc/<pid>/status`` memory field (``VmRSS``, ``VmHWM``) in KiB, if there is one."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def run_measured(
    command: list[str], timeout: float, keep_stdout: bool = True
) -> tuple[float, int, int, str, str]:
    """Run ``command``; (wall seconds, exit status, peak RSS in KiB, stdout, stderr).

    Peak RSS: the process's own high-water mark (``VmHWM``), read every 10 ms until it exits
    (``wait4``'s ``ru_maxrss`` would also count the forked parent's pages before ``exec``)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        target = out if keep_stdout else subprocess.DEVNULL
        proc = subprocess.Popen(command, stdout=target, stderr=err, cwd=REPO_ROOT)
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


def drain(peer: str, url: str, client_id: str, count: int, timeout: float) -> dict[str, Any]:
    """One peer drains the session's ``count`` queued messages."""
    command = drainer.command(peer, url, client_id, count, timeout)
    wall, code, rss, out, err = run_measured(command, timeout + 30, peer != "mosquitto_sub")
    if peer == "mosquitto_sub":
        # -C N: exits 0 only after N messages (written to /dev/null, as bench.drain does).
        if code != 0:
            raise BenchError(f"mosquitto_sub failed ({code}): {err[-2000:]}")
        return {"wall_seconds": wall, "peak_rss_kib": rss}
    lines = out.strip().splitlines()
    if code != 0 or not lines:
        raise BenchError(f"{peer} worker failed ({code}): {out[-500:]} {err[-2000:]}")
    details = json.loads(lines[-1])
    return {
        "wall_seconds": wall,
        "peak_rss_kib": rss,
        "in_process_seconds": details["drain_seconds"],
        "distinct": details["distinct"],
    }


def drain_point(peer: str, count: int, size: int, topics: int, timeout: float) -> dict[str, Any]:
    """Fresh broker, backlog of ``count`` messages, drained by ``peer``."""
    client_id = f"bench-scale-{peer}"
    queued = drainer.backlog(
        count,
        [(client_id, TOPIC_FILTER)],
        lambda url: publish(url, count, size, topics, timeout),
        inflight=20,
    )
    publish_rate = queued.publish_rate
    with queued.broker as broker:
        result = drain(peer, broker.url, client_id, count, timeout)
        if broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{broker.log_text()[-2000:]}")
    if "distinct" in result and result["distinct"] != count:
        raise BenchError(f"{peer} got {result['distinct']} of {count} distinct messages")
    wall = result["wall_seconds"]
    point = {
        "peer": peer,
        "messages": count,
        "payload_bytes": size,
        "topics": topics,
        "backlog_publish_rate": round(publish_rate),
        "wall_seconds": round(wall, 4),
        "rate": round(count / wall, 1),
        "mb_per_s": round(count * size / wall / 1e6, 3),
        "peak_rss_kib": result["peak_rss_kib"],
    }
    if "in_process_seconds" in result:
        point["in_process_rate"] = round(count / result["in_process_seconds"], 1)
    return point


def _with_ratios(points: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Median rate and RSS per (x, peer) over repetitions, and ours / peer ratios of the
    wall-clock rates paired by repetition."""
    table: dict[str, dict[str, Any]] = {}
    for x in sorted({p[key] for p in points}):
        here = [p for p in points if p[key] == x]
        row: dict[str, Any] = {}
        for peer in PEERS:
            mine = [p for p in here if p["peer"] == peer]
            if not mine:
                continue
            row[peer] = {
                "messages": mine[0]["messages"],
                "rate": Stats.of(p["rate"] for p in mine).as_dict(1),
                "mb_per_s": round(Stats.of(p["mb_per_s"] for p in mine).median, 3),
                "peak_rss_kib": round(Stats.of(p["peak_rss_kib"] for p in mine).median),
            }
            if all("in_process_rate" in p for p in mine):
                row[peer]["in_process_rate"] = round(
                    Stats.of(p["in_process_rate"] for p in mine).median, 1
                )
        ours = [p["rate"] for p in here if p["peer"] == "ours"]
        for peer in PEERS[1:]:
            theirs = [p["rate"] for p in here if p["peer"] == peer]
            if ours and len(theirs) == len(ours):
                row[f"ours/{peer}"] = round(
                    Stats.of(a / b for a, b in zip(ours, theirs, strict=True)).median, 3
                )
        table[str(x)] = row
    return table


def sweep_drains(
    key: str, values: Sequence[int], count_of: Any, size_of: Any, topics_of: Any, args: Any
) -> dict[str, Any]:
    points = []
    for x in values:
        for _ in range(args.repeat):
            for peer in args.peers:
                point = drain_point(peer, count_of(x), size_of(x), topics_of(x), args.timeout)
                points.append(point)
                print(f"  {key} {x:,}: {peer} {num(point['rate'])} msg/s", flush=True)
    return {"points": points, "by_" + key: _with_ratios(points, key)}


# ------------------------------------------------------------------------------ backlog


def rss_kib() -> int:
    """Resident set size of this process in KiB (Linux)."""
    value = status_kib("self", "VmRSS")
    if value is None:
        raise RuntimeError("no VmRSS in /proc/self/status")
    return value


def run_receiver(argv: Sequence[str]) -> int:
    """``python -m bench.scale receiver URL WAL BOUND TARGET IDLE``: run a Receiver and sample
    its RSS every 50 ms; stop once TARGET messages are stored (TARGET > 0) or nothing new
    was stored for IDLE seconds; one JSON line out."""
    from connector.options.source import SourceOptions
    from connector.receiver.receiver import Receiver

    url, wal, bound, target, idle = argv[0], argv[1], int(argv[2]), int(argv[3]), float(argv[4])
    options = SourceOptions.parse(
        {
            "brokerUrl": url,
            "topic": "rss/#",
            "qos": "1",
            "clientId": RECEIVER_ID,
            "walPath": wal,
            "maxBacklogMessages": str(bound),
        }
    )
    receiver = Receiver(options)
    baseline = rss_kib()
    samples: list[tuple[float, int, int]] = []
    start = time.monotonic()
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
        samples.append((round(now - start, 3), stored, rss_kib()))
        if target and stored >= target:
            break
        if stored and changed_at is not None and now - changed_at > idle:
            break
        receiver.check()
        time.sleep(0.05)
    receiver.stop()
    peak = max(status_kib("self", "VmHWM") or 0, *(s[2] for s in samples))
    result = {
        "stored": stored,
        "baseline_rss_kib": baseline,
        "peak_rss_kib": peak,
        "store_seconds": (changed_at - first_at) if first_at and changed_at else None,
        "samples": samples[:: max(1, len(samples) // 40)],
    }
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


def backlog_point(count: int, where: str, timeout: float) -> dict[str, Any]:
    """Receiver RSS while ``count`` messages wait ``where`` ("broker" or "wal"): the backlog
    is queued for the receiver's persistent session first, then the receiver connects."""
    from devtools.mosquitto import MosquittoBroker

    bound = BACKLOG_BOUND if where == "broker" else count + BACKLOG_BOUND
    target = 0 if where == "broker" else count
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp,
        MosquittoBroker(
            Path(tmp) / "broker", max_queued_messages=2 * count, max_inflight_messages=20
        ) as broker,
    ):
        create_session(broker.url, RECEIVER_ID, "rss/#")
        publish_rate = drainer.publish_numbered(
            broker.url, count, 100, timeout, topic=BACKLOG_TOPIC
        )
        done = subprocess.run(
            [
                sys.executable, "-m", "bench.scale", "receiver", broker.url,
                str(Path(tmp) / "wal"), str(bound), str(target), "2.0",
            ],
            capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
        )  # fmt: skip
        if broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{broker.log_text()[-2000:]}")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise BenchError(f"the receiver worker failed ({done.returncode}): {done.stderr[-2000:]}")
    result = json.loads(lines[-1])
    if where == "wal" and result["stored"] != count:
        raise BenchError(f"the receiver stored {result['stored']} of {count}")
    store = result.pop("store_seconds")
    return {
        "backlog": count,
        "waiting": where,
        "max_backlog_messages": bound,
        "stored_in_wal": result["stored"],
        "waiting_at_broker": count - result["stored"],
        "publish_rate": publish_rate,
        "store_rate": round(result["stored"] / store) if where == "wal" and store else None,
        "baseline_rss_kib": result["baseline_rss_kib"],
        "peak_rss_kib": result["peak_rss_kib"],
        "rss_growth_kib": result["peak_rss_kib"] - result["baseline_rss_kib"],
        "seconds": round(time.monotonic() - began, 1),
        "samples": result["samples"],
    }


def sweep_backlog(args: Any) -> dict[str, Any]:
    sizes = [s for s in args.backlog_sizes if s <= args.backlog_max]
    points: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    started = time.monotonic()
    per_message = 0.0  # seconds per message of both variants, from the last size measured
    for count in sizes:
        left = args.backlog_budget - (time.monotonic() - started)
        estimate = per_message * count
        if points and estimate > left:
            skipped.append(
                {"backlog": count, "reason": f"estimated {estimate:.0f} s > {left:.0f} s left"}
            )
            continue
        spent = 0.0
        for where in args.backlog_where:
            point = backlog_point(count, where, args.timeout + count / 5_000)
            points.append(point)
            spent += point["seconds"]
        per_message = spent / count
    reached = max((p["backlog"] for p in points), default=0)
    return {"points": points, "skipped": skipped, "largest_reached": reached}


# ------------------------------------------------------------------------------ main


def _sweep_table(sweep: Mapping[str, Any], key: str, label: str) -> Lines:
    rows = []
    for x, row in sweep[key].items():
        for peer in PEER_COLOURS:
            cell = row.get(peer)
            if not isinstance(cell, Mapping):
                continue
            rows.append(
                [
                    num(int(x)),
                    peer,
                    num(cell.get("messages")),
                    num(cell["rate"]["median"]),
                    num(cell.get("in_process_rate")),
                    num(cell.get("mb_per_s"), 1),
                    mib(cell.get("peak_rss_kib")),
                    times(row.get("ours/paho")) if peer == "ours" else "",
                    times(row.get("ours/mosquitto_sub")) if peer == "ours" else "",
                ]
            )
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

    def paint(plt: Any) -> None:
        left = plt.subplot(1, 2, 1)
        right = plt.subplot(1, 2, 2)
        for peer, colour in PEER_COLOURS.items():
            pts = [(x, by_x[str(x)][peer]) for x in xs if peer in by_x[str(x)]]
            if not pts:
                continue
            left.plot(
                [x for x, _ in pts], [c["rate"]["median"] for _, c in pts], "o-",
                color=colour, label=peer,
            )  # fmt: skip
            if key == "by_payload_bytes":
                right.plot(
                    [x for x, _ in pts], [c["mb_per_s"] for _, c in pts], "o-",
                    color=colour, label=peer,
                )  # fmt: skip
            else:
                right.plot(
                    [x for x, _ in pts], [c["peak_rss_kib"] / 1024 for _, c in pts], "o-",
                    color=colour, label=peer,
                )  # fmt: skip
        for axes in (left, right):
            axes.set_xscale("log")
            axes.set_xlabel(xlabel)
            axes.grid(True, alpha=0.3)
        left.set_yscale("log")
        left.set_ylabel("messages/s (drain process wall time)")
        right.set_ylabel("MB/s" if key == "by_payload_bytes" else "peak RSS (MiB)")
        right.set_ylim(bottom=0)
        left.legend()

    return charts.draw(name, title, paint)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    out: Lines = []
    payload = data.get("payload")
    if isinstance(payload, Mapping):
        out += [
            "### Payload size",
            "",
            "A persistent session's backlog (QoS 1, one topic) drained by each peer; rates "
            "over the drain process's wall time (start → exit, the same clock for the three "
            "peers); in-process: connect → last message; peak RSS of the drain process.",
            "",
            *_sweep_table(payload, "by_payload_bytes", "payload bytes"),
            "",
            *_sweep_chart(
                charts, payload, "by_payload_bytes", "throughput_vs_payload",
                "Drain throughput vs payload size", "payload size (bytes)",
            ),
        ]  # fmt: skip
    topics = data.get("topics")
    if isinstance(topics, Mapping):
        out += [
            "### Distinct topics",
            "",
            "100-byte payloads spread round-robin over N distinct topic names, drained as above.",
            "",
            *_sweep_table(topics, "by_topics", "topics"),
            "",
            *_sweep_chart(
                charts, topics, "by_topics", "topics_scale",
                "Drain rate and memory vs distinct topics", "distinct topics",
            ),
        ]  # fmt: skip
    backlog = data.get("backlog")
    if isinstance(backlog, Mapping):
        out += _backlog_section(backlog, charts)
    return out


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
        [
            num(p["backlog"]),
            p["waiting"],
            num(p["stored_in_wal"]),
            num(p["waiting_at_broker"]),
            num(p.get("store_rate")),
            mib(p["baseline_rss_kib"]),
            mib(p["peak_rss_kib"]),
            mib(p["rss_growth_kib"]),
        ]
        for p in points
    ]
    out += md_table(
        ["backlog", "waiting", "in WAL", "at broker", "store msg/s", "RSS before connect MiB",
         "peak MiB", "growth MiB"],
        rows,
    )  # fmt: skip
    for where, label in (("broker", "at the broker"), ("wal", "in the WAL")):
        mine = sorted((p["backlog"], p["peak_rss_kib"]) for p in points if p["waiting"] == where)
        if len(mine) > 1:
            (low, low_kib), (high, high_kib) = mine[0], mine[-1]
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
            pts = sorted((p["backlog"], p["peak_rss_kib"] / 1024) for p in points
                         if p["waiting"] == where)  # fmt: skip
            if pts:
                axes.plot(
                    [x for x, _ in pts], [y for _, y in pts], "o-", color=colour,
                    label=label,
                )  # fmt: skip
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
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("sweeps", nargs="*", help=f"any of {', '.join(SWEEPS)} (default: all)")
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--repeat", type=int, default=1, help="repetitions per point")
    parser.add_argument("--messages", type=int, default=100_000, help="payload sweep backlog")
    parser.add_argument("--payload-sizes", type=int, nargs="+", default=list(PAYLOAD_SIZES))
    parser.add_argument(
        "--payload-budget", type=int, default=256 << 20, help="bytes per payload-sweep backlog"
    )
    parser.add_argument("--topic-counts", type=int, nargs="+", default=list(TOPIC_COUNTS))
    parser.add_argument("--topic-messages", type=int, default=100_000)
    parser.add_argument("--backlog-sizes", type=int, nargs="+", default=list(BACKLOG_SIZES))
    parser.add_argument("--backlog-max", type=int, default=10_000_000)
    parser.add_argument(
        "--backlog-budget",
        type=float,
        default=900.0,
        help="seconds for the backlog sweep (the default reaches 10^7 on a 2-core machine)",
    )
    parser.add_argument(
        "--backlog-where", nargs="+", choices=["broker", "wal"], default=["broker", "wal"]
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--quick", action="store_true", help="small backlogs, for smoke tests")
    parser.add_argument("--output", type=Path, help="results file")
    args = parser.parse_args(argv)
    args.sweeps = args.sweeps or list(SWEEPS)
    if unknown := set(args.sweeps) - set(SWEEPS):
        parser.error(f"unknown sweep(s): {', '.join(sorted(unknown))}")
    if args.quick:
        args.messages, args.topic_messages = 10_000, 10_000
        args.topic_counts = [c for c in args.topic_counts if c <= 10_000]
        args.payload_budget = 32 << 20
        args.backlog_max = min(args.backlog_max, 100_000)
    info = machine()
    results: dict[str, Any] = {"benchmark": "scale", "machine": info}
    if "payload" in args.sweeps:
        print("payload size sweep (wall clock of each drain process):")
        results["payload"] = {
            "parameters": {"max_messages": args.messages, "byte_budget": args.payload_budget},
            **sweep_drains(
                "payload_bytes",
                args.payload_sizes,
                lambda s: min(args.messages, max(2_000, args.payload_budget // s)),
                lambda s: s,
                lambda s: 1,
                args,
            ),
        }
    if "topics" in args.sweeps:
        print("distinct topics sweep (100-byte payloads):")
        results["topics"] = {
            "parameters": {"messages": args.topic_messages, "payload_bytes": 100},
            **sweep_drains(
                "topics",
                args.topic_counts,
                lambda k: max(args.topic_messages, k),
                lambda k: 100,
                lambda k: k,
                args,
            ),
        }
    if "backlog" in args.sweeps:
        print("backlog sweep (receiver process RSS):")
        results["backlog"] = {
            "parameters": {
                "sizes": args.backlog_sizes,
                "max": args.backlog_max,
                "budget_seconds": args.backlog_budget,
                "bound_when_waiting_at_broker": BACKLOG_BOUND,
                "payload_bytes": 100,
            },
            **sweep_backlog(args),
        }
    info["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    return finish("scale", results, args.output, section)


if __name__ == "__main__":
    sys.exit(main())
