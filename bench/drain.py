"""Backlog drain rate: a persistent session's queued QoS 1 messages, read and acknowledged.

``python -m bench.drain [--messages N] [--repeat R] [--inflight K] [--peers ...] [--profile]``

For every peer and repetition a fresh Mosquitto (``tests.brokers.MosquittoBroker``) gets a
fresh backlog: a ``clean_session=False`` client connects, subscribes with QoS 1 and leaves;
``python -m connector.mqtt pub --qos 1`` publishes N numbered 100-byte messages and exits once
every one is acknowledged, i.e. queued for the offline session. Then one peer drains it:

* ``ours``: ``connector.mqtt.driver.MqttClient``, a poll/acknowledge loop (subprocess);
* ``ours-wal``: the source's receiver (``connector.source.receiver.Receiver``, subprocess):
  every socket read is appended to a write-ahead log with one fsync before its PUBACKs go
  out, i.e. the drain into durable storage that the Spark source relies on;
* ``paho``: a paho-mqtt 2.x client (subprocess) with automatic PUBACKs, run by the same
  select / ``loop_read`` / ``loop_write`` / ``loop_misc`` cycle as ``loop_forever`` so that it
  can stop after its last PUBACK has gone out;
* ``mosquitto_sub``: ``mosquitto_sub -c -i ID -q 1 -C N`` writing to /dev/null.

Three clocks: ``connect -> last message`` inside the process (ours and paho print it as JSON);
``process start -> exit`` for every peer; ``process start -> broker done``, until the broker
has logged the end of the drain's connection, i.e. it has read every acknowledgement (a fast
reader can leave the broker working through its PUBACKs after the process has gone).

Checks: ours and paho verify the payload sequence numbers (N distinct, each in 0..N-1);
ours-wal reads its WAL back after the drain and checks the same on what it stored;
after each drain, once the broker is done, a client resumes the session and counts what is
still queued, which must be 0 (every message was acknowledged).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .common import (
    REPO_ROOT,
    BenchError,
    Stats,
    create_session,
    describe_machine,
    format_table,
    machine_info,
    paho_loop,
    paired_ratio,
    profile_report,
    rate,
    ratio,
    write_results,
)

TOPIC = "plant/line-3/sensor-17/telemetry"
TOPIC_FILTER = "plant/+/+/telemetry"
PEERS = ("ours", "ours-wal", "paho", "mosquitto_sub")
GOAL_VS_PAHO = 2.5
GOAL_VS_MOSQUITTO_SUB = 0.7
GOAL_WAL_VS_MOSQUITTO_SUB = 0.8
SEQUENCE_DIGITS = 10  # the pub tool starts each payload with a 10-digit sequence number


# ------------------------------------------------------------------------------ worker side


def _sequence_checker(count: int) -> tuple[bytearray, list[int]]:
    """A seen-flag per sequence number and [received, distinct, out of range] counters."""
    return bytearray(count), [0, 0, 0]


def _note(seen: bytearray, counters: list[int], payload: bytes) -> None:
    counters[0] += 1
    try:
        seq = int(payload[:SEQUENCE_DIGITS])
    except ValueError:
        counters[2] += 1
        return
    if 0 <= seq < len(seen):
        if not seen[seq]:
            seen[seq] = 1
            counters[1] += 1
    else:
        counters[2] += 1


def worker_ours(
    url: str, client_id: str, count: int, timeout: float, stall: float
) -> dict[str, Any]:
    """Drain with our driver: poll, check, acknowledge; stop at ``count`` distinct messages."""
    from connector.mqtt.driver import MqttClient
    from connector.mqtt.session import SessionConfig

    seen, counters = _sequence_checker(count)
    client = MqttClient(url, SessionConfig(client_id, clean_session=False), [(TOPIC_FILTER, 1)])
    start = time.perf_counter()
    deadline = start + timeout
    client.connect()
    connected = time.perf_counter()
    last = connected
    while counters[1] < count:
        now = time.perf_counter()
        if now > deadline or now - last > stall:
            break
        batch = client.poll(min(1.0, deadline - now))
        messages = batch.messages
        if messages:
            for message in messages:
                _note(seen, counters, message.payload)
            last = time.perf_counter()
        client.acknowledge(messages, batch.released)
    client.disconnect()
    return _worker_result(counters, start, connected, last, client.connections)


def worker_paho(
    url: str, client_id: str, count: int, timeout: float, stall: float
) -> dict[str, Any]:
    """Drain with paho-mqtt 2.x: on_message checks, paho sends each PUBACK itself."""
    from urllib.parse import urlsplit

    from paho.mqtt import client as paho

    parts = urlsplit(url)
    seen, counters = _sequence_checker(count)
    state = {"last": 0.0, "connected": 0.0}

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        state["connected"] = time.perf_counter()
        client.subscribe(TOPIC_FILTER, qos=1)

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        _note(seen, counters, message.payload)
        state["last"] = time.perf_counter()

    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2,
        client_id=client_id,
        clean_session=False,
        protocol=paho.MQTTv311,
    )
    client.on_connect = on_connect
    client.on_message = on_message
    start = time.perf_counter()
    client.connect(parts.hostname or "127.0.0.1", parts.port or 1883, keepalive=60)
    paho_loop(client, lambda: counters[1] >= count, lambda: state["last"], start, timeout, stall)
    client.disconnect()
    connected = state["connected"] or start
    return _worker_result(counters, start, connected, state["last"] or connected, 1)


def worker_ours_wal(
    url: str, client_id: str, count: int, timeout: float, stall: float
) -> dict[str, Any]:
    """Drain with the source's receiver into a fresh WAL (fsync per socket read, acks after
    it); the clock stops once ``count`` records are durable, then the WAL is read back."""
    import shutil
    import tempfile

    from connector.source.options import SourceOptions
    from connector.source.receiver import Receiver
    from connector.wal import WalReader

    wal_dir = Path(tempfile.mkdtemp(prefix="bench-drain-wal-")) / "wal"
    options = SourceOptions.parse(
        {"brokerUrl": url, "topic": TOPIC_FILTER, "qos": "1", "clientId": client_id,
         "walPath": str(wal_dir), "maxBacklogMessages": str(max(count, 10_000) * 2)}
    )  # fmt: skip
    seen, counters = _sequence_checker(count)
    try:
        start = time.perf_counter()
        receiver = Receiver(options)
        receiver.start()  # connects, then runs its loop in a thread
        connected = time.perf_counter()
        deadline = start + timeout
        last, stored = connected, 0
        try:
            while receiver.wal.next_offset < count:
                now = time.perf_counter()
                if now > deadline or now - last > stall or receiver.error is not None:
                    break
                if receiver.wal.next_offset != stored:
                    stored, last = receiver.wal.next_offset, now
                time.sleep(0.0005)
            last = time.perf_counter()
        finally:
            receiver.stop()
        stored = receiver.wal.next_offset
        for payload in WalReader(wal_dir).read(0, stored).payloads:
            _note(seen, counters, payload)
    finally:
        shutil.rmtree(wal_dir.parent, ignore_errors=True)
    result = _worker_result(counters, start, connected, last, receiver.stats.connections)
    result["wal_records"] = stored
    return result


def _worker_result(
    counters: list[int], start: float, connected: float, last: float, connections: int
) -> dict[str, Any]:
    received, distinct, bad = counters
    return {
        "received": received,
        "distinct": distinct,
        "out_of_range": bad,
        "duplicates": received - distinct - bad,
        "connect_seconds": connected - start,
        "drain_seconds": last - start,
        "connections": connections,
    }


WORKERS = {"ours": worker_ours, "ours-wal": worker_ours_wal, "paho": worker_paho}


def run_worker(argv: Sequence[str]) -> int:
    """``python -m bench.drain worker {ours,ours-wal,paho} URL CLIENT_ID COUNT``: one JSON
    line out."""
    parser = argparse.ArgumentParser(prog="python -m bench.drain worker")
    parser.add_argument("peer", choices=sorted(WORKERS))
    parser.add_argument("url")
    parser.add_argument("client_id")
    parser.add_argument("count", type=int)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--stall", type=float, default=5.0, help="give up after a silence")
    parser.add_argument("--profile", help="write a cProfile of the drain to this file")
    args = parser.parse_args(argv)
    work = WORKERS[args.peer]
    if args.profile:
        profiler = cProfile.Profile()
        result = profiler.runcall(
            work, args.url, args.client_id, args.count, args.timeout, args.stall
        )
        profiler.dump_stats(args.profile)
    else:
        result = work(args.url, args.client_id, args.count, args.timeout, args.stall)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["distinct"] == args.count else 1


# ------------------------------------------------------------------------------ parent side


@dataclass(slots=True)
class Drain:
    """One peer's drain of one backlog."""

    peer: str
    process_seconds: float
    drain_seconds: float | None
    broker_lag_seconds: float
    publish_rate: float
    left_queued: int
    details: dict[str, Any]

    @property
    def acknowledged_seconds(self) -> float:
        """Process start until the broker logged the end of the drain's connection."""
        return self.process_seconds + self.broker_lag_seconds


def _publish_backlog(url: str, count: int, size: int, timeout: float) -> float:
    """Publish ``count`` QoS 1 messages with our pub tool; returns its rate. It exits only
    once every message was acknowledged, i.e. queued for the offline session."""
    done = subprocess.run(
        [
            sys.executable, "-m", "connector.mqtt", "pub", "--broker", url, "--topic", TOPIC,
            "--qos", "1", "--count", str(count), "--size", str(size),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise BenchError(f"publishing the backlog failed ({done.returncode}): {done.stderr}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report.get("published") != count:
        raise BenchError(f"the pub tool published {report.get('published')} of {count}")
    return float(report["rate"])


def _left_queued(url: str, client_id: str, wait: float = 0.3) -> int:
    """Messages the broker still holds for the session: reconnect, count, leave unacked."""
    from connector.mqtt.driver import MqttClient
    from connector.mqtt.session import SessionConfig

    client = MqttClient(url, SessionConfig(client_id, clean_session=False), [])
    client.connect()
    found = 0
    deadline = time.monotonic() + wait
    while (remaining := deadline - time.monotonic()) > 0:
        found += len(client.poll(remaining).messages)
    client.close()  # no DISCONNECT needed; nothing was acknowledged
    return found


def _drain_worker(
    peer: str, url: str, client_id: str, count: int, timeout: float, profile: str | None
) -> tuple[float, dict[str, Any]]:
    command = [sys.executable, "-m", "bench.drain", "worker", peer, url, client_id, str(count)]
    command += ["--timeout", str(timeout)]
    if profile:
        command += ["--profile", profile]
    start = time.perf_counter()
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout + 30, cwd=REPO_ROOT
    )
    wall = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise BenchError(f"{peer} worker printed nothing ({done.returncode}): {done.stderr}")
    details = json.loads(lines[-1])
    if done.returncode != 0:
        raise BenchError(
            f"{peer} got {details['distinct']} of {count} distinct messages before it stalled "
            f"or timed out (exit {done.returncode}): {details}\n{done.stderr}"
        )
    return wall, details


def _drain_mosquitto_sub(url: str, client_id: str, count: int, timeout: float) -> float:
    from urllib.parse import urlsplit

    from streaming_jobs.local_broker import find_tool

    parts = urlsplit(url)
    command = [
        find_tool("mosquitto_sub"), "-h", str(parts.hostname), "-p", str(parts.port),
        "-c", "-i", client_id, "-q", "1", "-t", TOPIC_FILTER, "-C", str(count),
    ]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=timeout
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise BenchError(f"mosquitto_sub failed ({done.returncode}): {done.stderr}")
    return wall


def _connections_ended(broker: Any, client_id: str) -> int:
    """How many connections of ``client_id`` the broker has logged as ended."""
    name = re.escape(client_id)
    pattern = rf"Client {name} (?:disconnected|closed its connection)|Socket error on client {name}"
    return len(re.findall(pattern, broker.log_text()))


def _wait_connection_ended(broker: Any, client_id: str, before: int, timeout: float) -> float:
    """Wait until the broker logged one more ended connection of ``client_id``; seconds waited."""
    start = time.perf_counter()
    while _connections_ended(broker, client_id) <= before:
        if time.perf_counter() - start > timeout:
            raise BenchError(f"the broker never logged the end of {client_id}'s connection")
        time.sleep(0.005)
    return time.perf_counter() - start


def drain_once(
    peer: str,
    count: int,
    size: int,
    inflight: int,
    timeout: float,
    profile: str | None = None,
) -> Drain:
    """Fresh broker, fresh backlog of ``count`` messages, drained by ``peer``."""
    from streaming_jobs.local_broker import MosquittoBroker

    client_id = f"bench-drain-{peer}"
    broker = MosquittoBroker(
        max_queued_messages=max(1_000_000, 2 * count), max_inflight_messages=inflight
    )
    with broker:
        create_session(broker.url, client_id, TOPIC_FILTER)
        publish_rate = _publish_backlog(broker.url, count, size, timeout)
        details: dict[str, Any] = {}
        drain_seconds = None
        gone_before = _connections_ended(broker, client_id)
        if peer == "mosquitto_sub":
            wall = _drain_mosquitto_sub(broker.url, client_id, count, timeout)
        else:
            wall, details = _drain_worker(peer, broker.url, client_id, count, timeout, profile)
            drain_seconds = details["drain_seconds"]
        # The broker may still be working through the last acknowledgements: a new connection
        # with the same client id before it has seen the drain's connection end would take
        # the session over and discard those.
        lag = _wait_connection_ended(broker, client_id, gone_before, timeout)
        left = _left_queued(broker.url, client_id)
        if broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{broker.log_text()}")
    return Drain(peer, wall, drain_seconds, lag, publish_rate, left, details)


def _check(drain: Drain, count: int) -> None:
    d = drain.details
    if "distinct" in d and (d["distinct"] != count or d["out_of_range"]):
        raise BenchError(f"{drain.peer} received {d}, expected {count} distinct messages")
    if drain.left_queued:
        raise BenchError(f"{drain.peer} left {drain.left_queued} message(s) unacknowledged")


# Metrics: what the clock covers. Every peer has the last two; mosquitto_sub reports no
# internal timing.
IN_PROCESS = "connect -> last message"
PROCESS = "process start -> exit"
ACKNOWLEDGED = "process start -> broker done"
METRICS = (IN_PROCESS, PROCESS, ACKNOWLEDGED)


def _rates(drains: list[Drain], count: int) -> dict[str, list[float]]:
    rates = {
        PROCESS: [count / d.process_seconds for d in drains],
        ACKNOWLEDGED: [count / d.acknowledged_seconds for d in drains],
    }
    inside = [count / d.drain_seconds for d in drains if d.drain_seconds]
    if len(inside) == len(drains):
        rates[IN_PROCESS] = inside
    return rates


def _ratios(rates: dict[str, dict[str, list[float]]]) -> dict[str, Stats]:
    """ours/peer per metric, paired by repetition, plus the goal's mixed comparison."""
    ratios: dict[str, Stats] = {}
    for mine in ("ours", "ours-wal"):
        if mine not in rates:
            continue
        ours = rates[mine]
        for peer in ("paho", "mosquitto_sub"):
            if peer not in rates:
                continue
            for metric in METRICS:
                if metric in ours and metric in rates[peer]:
                    ratios[f"{mine}/{peer}, {metric}"] = paired_ratio(
                        ours[metric], rates[peer][metric]
                    )
        if IN_PROCESS in ours and "mosquitto_sub" in rates:
            ratios[f"{mine} ({IN_PROCESS}) / mosquitto_sub ({PROCESS})"] = paired_ratio(
                ours[IN_PROCESS], rates["mosquitto_sub"][PROCESS]
            )
    return ratios


def _goals(ratios: dict[str, Stats]) -> list[tuple[str, float, str, Stats]]:
    """(goal, target, ratio name, measured) for the project's drain goals."""
    goals = []
    paho = f"ours/paho, {IN_PROCESS}"
    if paho in ratios:
        goals.append(("ours/paho", GOAL_VS_PAHO, paho, ratios[paho]))
    mosq = f"ours ({IN_PROCESS}) / mosquitto_sub ({PROCESS})"
    if mosq in ratios:
        goals.append(("ours/mosquitto_sub", GOAL_VS_MOSQUITTO_SUB, mosq, ratios[mosq]))
    wal = f"ours-wal ({IN_PROCESS}) / mosquitto_sub ({PROCESS})"
    if wal in ratios:
        goals.append(("ours-wal/mosquitto_sub", GOAL_WAL_VS_MOSQUITTO_SUB, wal, ratios[wal]))
    return goals


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return run_worker(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m bench.drain", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--messages", type=int, default=100_000, help="backlog size")
    parser.add_argument("--repeat", type=int, default=5, help="backlogs per peer")
    parser.add_argument("--size", type=int, default=100, help="payload bytes (>= 10)")
    parser.add_argument(
        "--inflight", type=int, default=20, help="mosquitto max_inflight_messages (default 20)"
    )
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--timeout", type=float, default=120.0, help="per step, in seconds")
    parser.add_argument("--output", help="results file (default bench/results/drain.json)")
    parser.add_argument(
        "--profile", action="store_true", help="print a cProfile of one extra drain by ours"
    )
    args = parser.parse_args(argv)
    if args.messages < 1 or args.repeat < 1 or args.size < SEQUENCE_DIGITS or args.inflight < 0:
        parser.error("--messages and --repeat must be >= 1, --size >= 10, --inflight >= 0")
    peers: list[str] = list(dict.fromkeys(args.peers))
    n = args.messages

    info = machine_info()
    runs: dict[str, list[Drain]] = {peer: [] for peer in peers}
    try:
        for rep in range(args.repeat):
            order = peers[rep % len(peers) :] + peers[: rep % len(peers)]
            for peer in order:
                drain = drain_once(peer, n, args.size, args.inflight, args.timeout)
                _check(drain, n)
                runs[peer].append(drain)
    except (BenchError, subprocess.TimeoutExpired, RuntimeError) as exc:
        # RuntimeError covers the broker helpers' errors (e.g. a missing mosquitto_sub).
        sys.stderr.write(f"bench.drain: {exc}\n")
        return 1

    rates = {peer: _rates(runs[peer], n) for peer in peers}
    ratios = _ratios(rates)
    goals = _goals(ratios)

    print(f"bench.drain: {describe_machine(info)}")
    print(
        f"backlog of {n:,} QoS 1 messages ({args.size}-byte payloads) per drain, "
        f"max_inflight_messages {args.inflight}, median of {args.repeat}; every drain "
        "verified (N distinct sequence numbers, nothing left queued)"
    )
    print()
    rows = []
    for metric in METRICS:
        for peer in peers:
            if metric in rates[peer]:
                st = Stats.of(rates[peer][metric])
                rows.append([metric, peer, rate(st.median), rate(st.min), rate(st.max)])
    print(format_table(["clock", "peer", "msg/s median", "min", "max"], rows))
    print()
    if ratios:
        print(
            format_table(
                ["ratio (paired by repetition)", "median", "min", "max"],
                [[name, ratio(r.median), ratio(r.min), ratio(r.max)] for name, r in ratios.items()],
            )
        )
        print()
    for name, target, _, measured in goals:
        verdict = "met" if measured.median >= target else "NOT met"
        print(f"goal {name} >= {target:g}x: {ratio(measured.median)} -> {verdict}")
    publish = Stats.of(d.publish_rate for p in peers for d in runs[p])
    print(f"(backlogs published by the pub tool at {rate(publish.median)} msg/s median)")

    if args.profile and "ours" in peers:
        path = Path("/tmp") / f"bench-drain-ours-{time.time_ns()}.prof"
        drain_once("ours", n, args.size, args.inflight, args.timeout, profile=str(path))
        print()
        print(profile_report(str(path)))
        path.unlink(missing_ok=True)

    results = {
        "benchmark": "drain",
        "machine": info,
        "parameters": {
            "messages": n,
            "qos": 1,
            "payload_bytes": args.size,
            "max_inflight_messages": args.inflight,
            "repeat": args.repeat,
            "topic": TOPIC,
            "topic_filter": TOPIC_FILTER,
            "publisher": "python -m connector.mqtt pub --qos 1",
        },
        "unit": "messages/s",
        "clocks": {
            IN_PROCESS: "inside the drain process, from the connect call to the last message",
            PROCESS: "wall time of the drain process",
            ACKNOWLEDGED: "process start until the broker logged the end of its connection, "
            "i.e. it had read every acknowledgement",
        },
        "peers": {
            peer: {
                "rates": {metric: Stats.of(v).as_dict(1) for metric, v in rates[peer].items()},
                "runs": [
                    {
                        "process_seconds": round(d.process_seconds, 4),
                        "drain_seconds": (
                            None if d.drain_seconds is None else round(d.drain_seconds, 4)
                        ),
                        "broker_lag_seconds": round(d.broker_lag_seconds, 4),
                        "left_queued": d.left_queued,
                        "backlog_publish_rate": round(d.publish_rate),
                        **{
                            k: round(v, 4) if isinstance(v, float) else v
                            for k, v in d.details.items()
                            if k != "drain_seconds"
                        },
                    }
                    for d in runs[peer]
                ],
            }
            for peer in peers
        },
        "ratios": {name: r.as_dict(3) for name, r in ratios.items()},
        "goals": {
            name: {
                "ratio": key,
                "target": target,
                "measured": round(m.median, 3),
                "met": m.median >= target,
            }
            for name, target, key, m in goals
        },
    }
    path = write_results("drain", results, None if args.output is None else Path(args.output))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
