"""Backlog drain rate: a persistent session's queued QoS 1 (or 2) messages, read and acknowledged.

``python -m bench.drain [--qos {1,2}] [--messages N] [--repeat R] [--inflight K] [--peers ...]
[--profile] [--output FILE]``

For every peer and repetition a fresh Mosquitto (``tests.brokers.MosquittoBroker``) gets a
fresh backlog: a ``clean_session=False`` client connects, subscribes with QoS 1 and leaves;
``python -m connector.mqtt pub --qos 1`` publishes N numbered 100-byte messages and exits once
every one is acknowledged, i.e. queued for the offline session. Then one peer drains it:

* ``ours``: ``connector.mqtt.driver.MqttClient``, a poll/acknowledge loop (subprocess);
* ``ours-wal``: the source's receiver (``connector.receiver.receiver.Receiver``, subprocess):
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

Goals (QoS 1 only): ours >= 0.7x and ours-wal >= 0.8x mosquitto_sub, ours >= 2.5x paho.
Results go to ``bench/results/drain.json`` unless ``--output`` says otherwise.

QoS 2 mode (``--qos 2``, results in ``bench/results/drain_qos2.json``): the session
subscribes with QoS 2, the backlog is published with ``pub --qos 2`` and every peer
subscribes with QoS 2 (ours: the subscription's QoS; ours-wal: ``"qos": "2"``; paho:
``subscribe(qos=2)``; mosquitto_sub: ``-q 2``). The backlog defaults to 60,000 messages and
may not exceed 65,535: Mosquitto 2.0.11 gives a queued message its packet id when it queues
it, so a larger QoS 2 backlog would reuse the ids of exchanges still open. A drain is only
finished once every exchange is complete (PUBREL received, PUBCOMP sent), so the workers
keep going after the last message until then, and one more in-process clock,
``connect -> exchanges complete``, reports it:

* ours: polls and acknowledges until N distinct messages were seen, one PUBREL per message
  was answered and ``ClientSession.export_qos2_pending()`` (ids answered with PUBREC whose
  PUBREL has not been completed) is empty; the clock stops after the last PUBCOMP is written;
* ours-wal: ``connect -> last message`` stops when N records are durable in the WAL,
  ``connect -> exchanges complete`` when the WAL's ``qos2_pending`` is empty, i.e. every
  release is recorded (the receiver writes the PUBCOMPs right after recording them, before
  it stops); the receiver keeps at most 256 QoS 2 exchanges open (``pubrec_window``);
* paho: paho answers PUBLISH with PUBREC and PUBREL with PUBCOMP itself and calls
  ``on_message`` only once a message is released, so its ``connect -> last message`` is the
  arrival of the last PUBREL; it stops once every message was released, nothing waits for a
  PUBREL in ``client._in_messages`` (a paho 2.x internal) and its last PUBCOMP is written;
* mosquitto_sub: ``-q 2 -C N`` as for QoS 1 (libmosquitto counts a QoS 2 message once it is
  released); ``process start -> broker done`` covers its exchanges.

Ours, ours-wal and paho report the exchanges still open when they stop (``open_exchanges``,
must be 0). The after-drain check resumes the session with a bare socket (a client of ours
would answer a PUBREL for an id it does not know at once, without telling) and counts both
the messages and the PUBRELs the broker resends: both must be 0, and the broker must still
hold the session. The same ratios are printed and stored, but no goals: they are QoS 1
goals, and Mosquitto 2.0.11 redelivers a QoS 2 backlog very slowly to a client that answers
each PUBREL at once (eclipse-mosquitto/mosquitto#2306), so mosquitto_sub and paho are slow
peers here.
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

from connector.mqtt.cli import SEQUENCE_DIGITS

from .common import (
    REPO_ROOT,
    RESULTS_DIR,
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
    spawn_worker,
    wait_stored,
    write_results,
)

TOPIC = "plant/line-3/sensor-17/telemetry"
TOPIC_FILTER = "plant/+/+/telemetry"
PEERS = ("ours", "ours-wal", "paho", "mosquitto_sub")
GOAL_VS_PAHO = 2.5
GOAL_VS_MOSQUITTO_SUB = 0.7
GOAL_WAL_VS_MOSQUITTO_SUB = 0.8
DEFAULT_MESSAGES = {1: 100_000, 2: 60_000}
QOS2_MAX_MESSAGES = 65_535
"""Largest QoS 2 backlog: Mosquitto 2.0.11 numbers a queued message when it queues it, and a
session has 65,535 packet ids."""
PUB_INFLIGHT = 20  # the pub tool's default --inflight


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
    url: str, client_id: str, count: int, timeout: float, stall: float, qos: int = 1
) -> dict[str, Any]:
    """Drain with our driver: poll, check, acknowledge; stop at ``count`` distinct messages
    (QoS 2: and once every exchange is complete, i.e. each PUBREL was answered with PUBCOMP
    and the session has no id left awaiting its PUBREL)."""
    from connector.mqtt.config import SessionConfig
    from connector.mqtt.driver import MqttClient

    seen, counters = _sequence_checker(count)
    client = MqttClient(url, SessionConfig(client_id, clean_session=False), [(TOPIC_FILTER, qos)])
    session = client.session
    start = time.perf_counter()
    deadline = start + timeout
    client.connect()
    connected = time.perf_counter()
    last = active = connected
    released = 0

    def open_exchanges() -> bool:
        # One Released event per exchange: the count keeps the set (built on each call)
        # from being made on every read of a long tail of releases.
        return qos == 2 and (released < count or bool(session.export_qos2_pending()))

    while counters[1] < count or open_exchanges():
        now = time.perf_counter()
        if now > deadline or now - active > stall:
            break
        read = client.poll(min(1.0, deadline - now))
        messages = read.messages
        if messages:
            for message in messages:
                _note(seen, counters, message.payload)
            last = active = time.perf_counter()
        if read.released:
            released += len(read.released)
            active = time.perf_counter()
        client.acknowledge(messages, read.released)
    complete = time.perf_counter()
    still_open = len(session.export_qos2_pending())
    client.disconnect()
    result = _worker_result(counters, start, connected, last, client.connections)
    if qos == 2:
        result.update(complete_seconds=complete - start, releases=released)
        result["open_exchanges"] = still_open
    return result


def worker_paho(
    url: str, client_id: str, count: int, timeout: float, stall: float, qos: int = 1
) -> dict[str, Any]:
    """Drain with paho-mqtt 2.x: on_message checks, paho sends each PUBACK itself (QoS 2:
    PUBREC and PUBCOMP; on_message comes with the PUBREL, and the drain ends once no message
    awaits its PUBREL and the last PUBCOMP is written)."""
    from urllib.parse import urlsplit

    from paho.mqtt import client as paho

    parts = urlsplit(url)
    seen, counters = _sequence_checker(count)
    state = {"last": 0.0, "connected": 0.0}

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        state["connected"] = time.perf_counter()
        client.subscribe(TOPIC_FILTER, qos=qos)

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

    def done() -> bool:
        if counters[1] < count:
            return False
        # _in_messages: paho 2.x's QoS 2 messages answered with PUBREC, awaiting PUBREL.
        return qos == 1 or not (client._in_messages or client.want_write())

    start = time.perf_counter()
    client.connect(parts.hostname or "127.0.0.1", parts.port or 1883, keepalive=60)
    paho_loop(client, done, lambda: state["last"], start, timeout, stall)
    complete = time.perf_counter()
    still_open = len(client._in_messages)
    client.disconnect()
    connected = state["connected"] or start
    result = _worker_result(counters, start, connected, state["last"] or connected, 1)
    if qos == 2:
        result["complete_seconds"] = complete - start
        result["open_exchanges"] = still_open
    return result


def worker_ours_wal(
    url: str, client_id: str, count: int, timeout: float, stall: float, qos: int = 1
) -> dict[str, Any]:
    """Drain with the source's receiver into a fresh WAL (fsync per socket read, acks after
    it); the clock stops once ``count`` records are durable (QoS 2: a second clock once the
    WAL holds no pending QoS 2 id, i.e. every release is recorded), then the WAL is read
    back."""
    import shutil
    import tempfile

    from connector.options.source import SourceOptions
    from connector.receiver.receiver import Receiver
    from connector.wal import WalReader

    wal_dir = Path(tempfile.mkdtemp(prefix="bench-drain-wal-")) / "wal"
    options = SourceOptions.parse(
        {"brokerUrl": url, "topic": TOPIC_FILTER, "qos": str(qos), "clientId": client_id,
         "walPath": str(wal_dir), "maxBacklogMessages": str(max(count, 10_000) * 2)}
    )  # fmt: skip
    seen, counters = _sequence_checker(count)
    still_open = 0
    try:
        start = time.perf_counter()
        receiver = Receiver(options)
        receiver.start()  # connects, then runs its loop in a thread
        connected = time.perf_counter()
        deadline = start + timeout
        try:
            last = complete = wait_stored(receiver, count, deadline, stall)
            if qos == 2 and receiver.wal.next_offset >= count:
                complete, still_open = _wait_released(receiver, deadline, stall)
            elif qos == 2:
                still_open = len(receiver.wal.qos2_pending)
        finally:
            receiver.stop()  # the loop thread finishes its read (PUBCOMPs) before DISCONNECT
        stored = receiver.wal.next_offset
        for payload in WalReader(wal_dir).read(0, stored).payloads:
            _note(seen, counters, payload)
    finally:
        shutil.rmtree(wal_dir.parent, ignore_errors=True)
    result = _worker_result(counters, start, connected, last, receiver.stats.connections)
    result["wal_records"] = stored
    if qos == 2:
        result["complete_seconds"] = complete - start
        result["open_exchanges"] = still_open
    return result


def _wait_released(receiver: Any, deadline: float, stall: float) -> tuple[float, int]:
    """Wait until the receiver's WAL has no pending QoS 2 id (every release recorded); returns
    the time that was seen and the ids still pending (0 unless it stalled or timed out).

    ``wal.qos2_pending`` copies the set, so the poll interval grows with the copy's cost: the
    copies take at most ~5% of the time from the receiver's thread."""
    progress = time.perf_counter()
    pending = -1
    while True:
        before = time.perf_counter()
        left = len(receiver.wal.qos2_pending)
        now = time.perf_counter()
        if not left:
            return now, 0
        if left != pending:
            pending, progress = left, now
        if now > deadline or now - progress > stall or receiver.error is not None:
            return now, left
        time.sleep(max(0.0005, 20 * (now - before)))


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
    parser.add_argument("--qos", type=int, choices=(1, 2), default=1)
    args = parser.parse_args(argv)
    work = WORKERS[args.peer]
    work_args = (args.url, args.client_id, args.count, args.timeout, args.stall, args.qos)
    if args.profile:
        profiler = cProfile.Profile()
        result = profiler.runcall(work, *work_args)
        profiler.dump_stats(args.profile)
    else:
        result = work(*work_args)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0 if result["distinct"] == args.count and not result.get("open_exchanges") else 1


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
    left_releases: int | None = None
    """QoS 2: PUBRELs the broker resent when the session resumed (None: not counted)."""

    @property
    def acknowledged_seconds(self) -> float:
        """Process start until the broker logged the end of the drain's connection."""
        return self.process_seconds + self.broker_lag_seconds


def publisher_command(qos: int, inflight: int) -> list[str]:
    """The pub tool's QoS (and in-flight) arguments for the backlog. At
    QoS 2 it keeps no more messages in flight than the broker's ``max_inflight_messages``
    (Mosquitto acknowledges but drops QoS 2 messages beyond it)."""
    command = ["--qos", str(qos)]
    if qos == 2 and 0 < inflight < PUB_INFLIGHT:
        command += ["--inflight", str(inflight)]
    return command


def publish_backlog(
    url: str,
    count: int,
    size: int,
    timeout: float,
    qos: int = 1,
    inflight: int = PUB_INFLIGHT,
    topic: str = TOPIC,
) -> float:
    """Publish ``count`` QoS ``qos`` messages with our pub tool; returns its rate. It exits
    only once every message was acknowledged (QoS 2: completed), i.e. queued for the offline
    session."""
    done = subprocess.run(
        [
            sys.executable, "-m", "connector.mqtt", "pub", "--broker", url, "--topic", topic,
            *publisher_command(qos, inflight), "--count", str(count), "--size", str(size),
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


def _left_in_session(url: str, client_id: str, wait: float = 0.3) -> tuple[int, int]:
    """(messages, PUBRELs) the broker sends when the session resumes: a bare socket sends
    CONNECT, reads for ``wait`` seconds after CONNACK, answers nothing and closes. (Our
    client would answer a PUBREL for an id it does not hold with PUBCOMP at once and report
    nothing.) Raises BenchError unless the broker still held the session."""
    import socket
    from urllib.parse import urlsplit

    from connector.mqtt.encode import encode
    from connector.mqtt.packets import Connack, Connect, Publish, Pubrel
    from connector.mqtt.receive_buffer import ReceiveBuffer

    parts = urlsplit(url)
    decoder = ReceiveBuffer()
    connack: Connack | None = None
    messages = releases = 0
    address = (parts.hostname or "127.0.0.1", parts.port or 1883)
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(encode(Connect(client_id, clean_session=False)))
        deadline = time.monotonic() + 10  # for the CONNACK
        while (remaining := deadline - time.monotonic()) > 0:
            sock.settimeout(remaining)
            try:
                data = sock.recv(1 << 16)
            except TimeoutError:
                break
            if not data:
                break
            for packet in decoder.feed(data):
                if isinstance(packet, Connack) and connack is None:
                    connack = packet
                    deadline = time.monotonic() + wait
                elif isinstance(packet, Publish):
                    messages += 1
                elif isinstance(packet, Pubrel):
                    releases += 1
    if connack is None or connack.return_code or not connack.session_present:
        raise BenchError(f"resuming {client_id}'s session after the drain got {connack}")
    return messages, releases


def _drain_worker(
    peer: str,
    url: str,
    client_id: str,
    count: int,
    timeout: float,
    profile: str | None,
    qos: int = 1,
) -> tuple[float, dict[str, Any]]:
    command = [sys.executable, "-m", "bench.drain", "worker", peer, url, client_id, str(count)]
    command += ["--timeout", str(timeout)]
    if profile:
        command += ["--profile", profile]
    if qos != 1:
        command += ["--qos", str(qos)]
    wall, details, done = spawn_worker(command, timeout + 30, peer)
    if done.returncode != 0:
        still_open = details.get("open_exchanges")
        open_note = f" with {still_open} QoS 2 exchange(s) still open" if still_open else ""
        raise BenchError(
            f"{peer} got {details['distinct']} of {count} distinct messages{open_note} before "
            f"it stalled or timed out (exit {done.returncode}): {details}\n{done.stderr}"
        )
    return wall, details


def _drain_mosquitto_sub(
    url: str, client_id: str, count: int, timeout: float, qos: int = 1
) -> float:
    from urllib.parse import urlsplit

    from devtools.system_tools import find_tool

    parts = urlsplit(url)
    command = [
        find_tool("mosquitto_sub"), "-h", str(parts.hostname), "-p", str(parts.port),
        "-c", "-i", client_id, "-q", str(qos), "-t", TOPIC_FILTER, "-C", str(count),
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
    qos: int = 1,
) -> Drain:
    """Fresh broker, fresh backlog of ``count`` QoS ``qos`` messages, drained by ``peer``."""
    from devtools.mosquitto import MosquittoBroker

    client_id = f"bench-drain-{peer}"
    broker = MosquittoBroker(
        max_queued_messages=max(1_000_000, 2 * count), max_inflight_messages=inflight
    )
    with broker:
        create_session(broker.url, client_id, TOPIC_FILTER, qos)
        publish_rate = publish_backlog(broker.url, count, size, timeout, qos, inflight)
        details: dict[str, Any] = {}
        drain_seconds = None
        gone_before = _connections_ended(broker, client_id)
        if peer == "mosquitto_sub":
            wall = _drain_mosquitto_sub(broker.url, client_id, count, timeout, qos)
        else:
            wall, details = _drain_worker(peer, broker.url, client_id, count, timeout, profile, qos)
            drain_seconds = details["drain_seconds"]
        # The broker may still be working through the last acknowledgements: a new connection
        # with the same client id before it has seen the drain's connection end would take
        # the session over and discard those.
        lag = _wait_connection_ended(broker, client_id, gone_before, timeout)
        left, resent = _left_in_session(broker.url, client_id)
        releases = resent if qos == 2 else None
        if broker.crashed:
            raise BenchError(f"mosquitto crashed:\n{broker.log_text()}")
    return Drain(peer, wall, drain_seconds, lag, publish_rate, left, details, releases)


def _check(drain: Drain, count: int) -> None:
    d = drain.details
    if "distinct" in d and (d["distinct"] != count or d["out_of_range"]):
        raise BenchError(f"{drain.peer} received {d}, expected {count} distinct messages")
    if d.get("open_exchanges"):
        raise BenchError(f"{drain.peer} stopped with {d['open_exchanges']} exchange(s) open")
    if drain.left_queued:
        raise BenchError(f"{drain.peer} left {drain.left_queued} message(s) unacknowledged")
    if drain.left_releases:
        raise BenchError(
            f"{drain.peer} left {drain.left_releases} QoS 2 exchange(s) without PUBCOMP: the "
            "broker resent their PUBREL when the session resumed"
        )


# Metrics: what the clock covers. Every peer has the last two; mosquitto_sub reports no
# internal timing.
IN_PROCESS = "connect -> last message"
COMPLETE = "connect -> exchanges complete"  # QoS 2 only
PROCESS = "process start -> exit"
ACKNOWLEDGED = "process start -> broker done"
METRICS = (IN_PROCESS, PROCESS, ACKNOWLEDGED)
METRICS_QOS2 = (IN_PROCESS, COMPLETE, PROCESS, ACKNOWLEDGED)
NO_GOALS_QOS2 = (
    "no goals at QoS 2: the drain goals are QoS 1 goals, and Mosquitto 2.0.11 redelivers a "
    "QoS 2 backlog very slowly to clients that answer each PUBREL at once "
    "(eclipse-mosquitto/mosquitto#2306), so mosquitto_sub and paho are slow peers here"
)


def metrics_for(qos: int) -> tuple[str, ...]:
    return METRICS_QOS2 if qos == 2 else METRICS


def clocks_for(qos: int) -> dict[str, str]:
    """What each clock covers, as stored in the results file."""
    if qos == 1:
        return {
            IN_PROCESS: "inside the drain process, from the connect call to the last message",
            PROCESS: "wall time of the drain process",
            ACKNOWLEDGED: "process start until the broker logged the end of its connection, "
            "i.e. it had read every acknowledgement",
        }
    return {
        IN_PROCESS: "inside the drain process, from the connect call to the last message "
        "(ours: last PUBLISH read; ours-wal: last message durable in the WAL; paho: last "
        "PUBREL read, paho hands a QoS 2 message over once it is released)",
        COMPLETE: "inside the drain process, from the connect call until every QoS 2 exchange "
        "was complete (ours, paho: last PUBCOMP written; ours-wal: no QoS 2 id pending in the "
        "WAL, i.e. every release recorded, the PUBCOMPs follow at once)",
        PROCESS: "wall time of the drain process",
        ACKNOWLEDGED: "process start until the broker logged the end of its connection, "
        "i.e. it had read every PUBREC and PUBCOMP",
    }


def _rates(drains: list[Drain], count: int) -> dict[str, list[float]]:
    rates = {
        PROCESS: [count / d.process_seconds for d in drains],
        ACKNOWLEDGED: [count / d.acknowledged_seconds for d in drains],
    }
    inside = [count / d.drain_seconds for d in drains if d.drain_seconds]
    if len(inside) == len(drains):
        rates[IN_PROCESS] = inside
    complete = [
        count / d.details["complete_seconds"] for d in drains if d.details.get("complete_seconds")
    ]
    if complete and len(complete) == len(drains):
        rates[COMPLETE] = complete
    return rates


def _ratios(
    rates: dict[str, dict[str, list[float]]], metrics: Sequence[str] = METRICS
) -> dict[str, Stats]:
    """ours/peer per metric, paired by repetition, plus the goal's mixed comparison (at QoS 2
    also with ``connect -> exchanges complete``)."""
    ratios: dict[str, Stats] = {}
    for mine in ("ours", "ours-wal"):
        if mine not in rates:
            continue
        ours = rates[mine]
        for peer in ("paho", "mosquitto_sub"):
            if peer not in rates:
                continue
            for metric in metrics:
                if metric in ours and metric in rates[peer]:
                    ratios[f"{mine}/{peer}, {metric}"] = paired_ratio(
                        ours[metric], rates[peer][metric]
                    )
        for inside in (IN_PROCESS, COMPLETE):
            if inside in metrics and inside in ours and "mosquitto_sub" in rates:
                ratios[f"{mine} ({inside}) / mosquitto_sub ({PROCESS})"] = paired_ratio(
                    ours[inside], rates["mosquitto_sub"][PROCESS]
                )
    return ratios


def _goals(ratios: dict[str, Stats]) -> list[tuple[str, float, str, Stats]]:
    """(goal, target, ratio name, measured) for the project's drain goals (QoS 1)."""
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


def results_path(qos: int) -> Path:
    """Default results file: ``drain.json`` for QoS 1, ``drain_qos2.json`` for QoS 2."""
    return RESULTS_DIR / ("drain.json" if qos == 1 else "drain_qos2.json")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.drain", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--qos", type=int, choices=(1, 2), default=1, help="QoS of the backlog (default 1)"
    )
    parser.add_argument(
        "--messages",
        type=int,
        help=f"backlog size (default {DEFAULT_MESSAGES[1]:,}; with --qos 2 "
        f"{DEFAULT_MESSAGES[2]:,}, at most {QOS2_MAX_MESSAGES:,})",
    )
    parser.add_argument("--repeat", type=int, default=5, help="backlogs per peer")
    parser.add_argument("--size", type=int, default=100, help="payload bytes (>= 10)")
    parser.add_argument(
        "--inflight", type=int, default=20, help="mosquitto max_inflight_messages (default 20)"
    )
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS))
    parser.add_argument("--timeout", type=float, default=120.0, help="per step, in seconds")
    parser.add_argument(
        "--output",
        type=Path,
        help="results file (default bench/results/drain.json; drain_qos2.json with --qos 2)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="print a cProfile of one extra drain by ours"
    )
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command line, checked, with ``messages`` and ``output`` resolved for the QoS."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.messages is None:
        args.messages = DEFAULT_MESSAGES[args.qos]
    if args.messages < 1 or args.repeat < 1 or args.size < SEQUENCE_DIGITS or args.inflight < 0:
        parser.error("--messages and --repeat must be >= 1, --size >= 10, --inflight >= 0")
    if args.qos == 2 and args.messages > QOS2_MAX_MESSAGES:
        parser.error(
            f"--qos 2 takes at most {QOS2_MAX_MESSAGES:,} messages, got {args.messages:,}: "
            "Mosquitto 2.0.11 gives a queued message its packet id when it queues it, so a "
            "larger QoS 2 backlog would reuse the ids of exchanges still open"
        )
    if args.output is None:
        args.output = results_path(args.qos)
    return args


def _run_record(d: Drain) -> dict[str, Any]:
    record: dict[str, Any] = {
        "process_seconds": round(d.process_seconds, 4),
        "drain_seconds": None if d.drain_seconds is None else round(d.drain_seconds, 4),
        "broker_lag_seconds": round(d.broker_lag_seconds, 4),
        "left_queued": d.left_queued,
    }
    if d.left_releases is not None:
        record["left_releases"] = d.left_releases
    record["backlog_publish_rate"] = round(d.publish_rate)
    for key, value in d.details.items():
        if key != "drain_seconds":
            record[key] = round(value, 4) if isinstance(value, float) else value
    return record


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["worker"]:
        return run_worker(argv[1:])
    args = parse_args(argv)
    peers: list[str] = list(dict.fromkeys(args.peers))
    n = args.messages
    qos = args.qos
    metrics = metrics_for(qos)

    info = machine_info()
    runs: dict[str, list[Drain]] = {peer: [] for peer in peers}
    try:
        for rep in range(args.repeat):
            order = peers[rep % len(peers) :] + peers[: rep % len(peers)]
            for peer in order:
                drain = drain_once(peer, n, args.size, args.inflight, args.timeout, qos=qos)
                _check(drain, n)
                runs[peer].append(drain)
    except (BenchError, subprocess.TimeoutExpired, RuntimeError) as exc:
        # RuntimeError covers the broker helpers' errors (e.g. a missing mosquitto_sub).
        sys.stderr.write(f"bench.drain: {exc}\n")
        return 1

    rates = {peer: _rates(runs[peer], n) for peer in peers}
    ratios = _ratios(rates, metrics)
    goals = _goals(ratios) if qos == 1 else []

    verified = (
        "nothing left queued"
        if qos == 1
        else "every exchange complete, nothing left queued, no PUBREL resent"
    )
    print(f"bench.drain: {describe_machine(info)}")
    print(
        f"backlog of {n:,} QoS {qos} messages ({args.size}-byte payloads) per drain, "
        f"max_inflight_messages {args.inflight}, median of {args.repeat}; every drain "
        f"verified (N distinct sequence numbers, {verified})"
    )
    print()
    rows = []
    for metric in metrics:
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
    if qos == 2:
        print(NO_GOALS_QOS2)
    publish = Stats.of(d.publish_rate for p in peers for d in runs[p])
    print(f"(backlogs published by the pub tool at {rate(publish.median)} msg/s median)")

    if args.profile and "ours" in peers:
        path = Path("/tmp") / f"bench-drain-ours-{time.time_ns()}.prof"
        drain_once("ours", n, args.size, args.inflight, args.timeout, profile=str(path), qos=qos)
        print()
        print(profile_report(str(path)))
        path.unlink(missing_ok=True)

    results: dict[str, Any] = {
        "benchmark": "drain",
        "machine": info,
        "parameters": {
            "messages": n,
            "qos": qos,
            "payload_bytes": args.size,
            "max_inflight_messages": args.inflight,
            "repeat": args.repeat,
            "topic": TOPIC,
            "topic_filter": TOPIC_FILTER,
            "publisher": " ".join(
                ["python -m connector.mqtt pub", *publisher_command(qos, args.inflight)]
            ),
        },
        "unit": "messages/s",
        "clocks": clocks_for(qos),
        "peers": {
            peer: {
                "rates": {metric: Stats.of(v).as_dict(1) for metric, v in rates[peer].items()},
                "runs": [_run_record(d) for d in runs[peer]],
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
    if qos == 2:
        results["goals_note"] = NO_GOALS_QOS2
    path = write_results("drain" if qos == 1 else "drain_qos2", results, args.output)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
