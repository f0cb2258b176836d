"""Backlogs (a fresh Mosquitto holding N messages for persistent sessions) and the drain
workers, one process per drain (``python -m bench.drainer PEER URL CLIENT_ID COUNT``): ``ours``,
``ours-wal`` (the receiver into a WAL) and ``paho``; what a resumed session still holds; Delta
tables read back."""

from __future__ import annotations

import argparse
import json
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit

from .common import MOSQUITTO_INFLIGHT, REPO_ROOT, BenchError, json_line, new_receiver, pub_command
from .payloads import Tally

TOPIC = "plant/line-3/sensor-17/telemetry"
TOPIC_FILTER = "plant/+/+/telemetry"
PUB_INFLIGHT = 20  # the pub tool's default --inflight
Sessions = Sequence[tuple[str, str]]  # (client id, topic filter)


class Backlog(NamedTuple):
    """A started broker holding a backlog, and the rate it was published at."""

    broker: Any
    publish_rate: float


def backlog(
    count: int, sessions: Sessions, publish: Callable[[str], float], qos: int = 1,
    inflight: int = MOSQUITTO_INFLIGHT,
) -> Backlog:  # fmt: skip
    """A fresh Mosquitto where ``sessions`` subscribed and left, then ``publish(url)``."""
    from devtools.mosquitto import MosquittoBroker

    from .common import create_session

    broker = MosquittoBroker(
        max_queued_messages=max(1_000_000, 2 * count), max_inflight_messages=inflight
    ).start()
    try:
        for client_id, topic_filter in sessions:
            create_session(broker.url, client_id, topic_filter, qos)
        return Backlog(broker, publish(broker.url))
    except BaseException:
        broker.close()
        raise


def pub_inflight(qos: int, inflight: int) -> list[str]:
    """The pub tool's ``--inflight``: at QoS 2 within the broker's window (beyond: dropped)."""
    return ["--inflight", str(inflight)] if qos == 2 and 0 < inflight < PUB_INFLIGHT else []


def publish_numbered(
    url: str, count: int, size: int, timeout: float, qos: int = 1, inflight: int = PUB_INFLIGHT,
    topic: str = TOPIC,
) -> float:  # fmt: skip
    """Numbered messages by our pub tool until every one was acknowledged; its rate."""
    command = [*pub_command(url, topic, qos, count, size), *pub_inflight(qos, inflight)]
    report = json_line(command, timeout, "publishing the backlog")
    if report.get("published") != count:
        raise BenchError(f"the pub tool published {report.get('published')} of {count}")
    return float(report["rate"])


def left_in_session(url: str, client_id: str, wait: float = 0.3) -> tuple[int, int]:
    """(messages, PUBRELs) a resumed session still sends to a bare socket that answers nothing."""
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


def _watch(
    receiver: Any, figure: Callable[[], int], done: Callable[[int], bool], deadline: float,
    stall: float,
) -> tuple[float, int]:  # fmt: skip
    """Poll ``figure()`` until ``done``, the deadline, a stall or a failure; (time, figure)."""
    progress, seen = time.perf_counter(), None
    while True:
        before = time.perf_counter()
        value = figure()
        now = time.perf_counter()
        if done(value):
            return now, value
        if value != seen:
            seen, progress = value, now
        if now > deadline or now - progress > stall or receiver.error is not None:
            return now, value
        time.sleep(max(0.0005, 20 * (now - before)))


def _finished(result: dict[str, Any], qos: int, seconds: float, still_open: int) -> dict:
    """A worker's figures, at QoS 2 with the time to the last complete exchange."""
    if qos == 2:
        result.update(complete_seconds=seconds, open_exchanges=still_open)
    return result


def drain_ours(args: argparse.Namespace) -> dict[str, Any]:
    """Our driver: poll, check, acknowledge."""
    from connector.mqtt.config import SessionConfig
    from connector.mqtt.driver import MqttClient

    count, qos = args.count, args.qos
    tally = Tally(count, args.seq_at)
    config = SessionConfig(args.client_id, clean_session=False)
    client = MqttClient(args.url, config, [(TOPIC_FILTER, qos)])
    session = client.session
    start = time.perf_counter()
    deadline = start + args.timeout
    client.connect()
    connected = time.perf_counter()
    last = active = connected
    released = 0
    # One Released event per exchange: the count keeps the pending set (built on each call)
    # from being made on every read of a long tail of releases.
    while tally.distinct < count or (
        qos == 2 and (released < count or bool(session.export_qos2_pending()))
    ):
        now = time.perf_counter()
        if now > deadline or now - active > args.stall:
            break
        read = client.poll(min(1.0, deadline - now))
        for message in read.messages:
            tally.note(message.payload)
        if read.messages:
            last = active = time.perf_counter()
        if read.released:
            released += len(read.released)
            active = time.perf_counter()
        client.acknowledge(read.messages, read.released)
    complete = time.perf_counter()
    still_open = len(session.export_qos2_pending())
    client.disconnect()
    result = tally.result(start, connected, last, client.connections)
    if qos == 2:
        result["releases"] = released
    return _finished(result, qos, complete - start, still_open)


def drain_paho(args: argparse.Namespace) -> dict[str, Any]:
    """paho-mqtt 2.x in loop_forever's cycle, to stop right after its last acknowledgement."""
    from paho.mqtt import client as paho

    parts = urlsplit(args.url)
    count, qos = args.count, args.qos
    tally = Tally(count, args.seq_at)
    state = {"last": 0.0, "connected": 0.0}

    def on_connect(client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        state["connected"] = time.perf_counter()
        client.subscribe(TOPIC_FILTER, qos=qos)

    def on_message(client: Any, userdata: Any, message: Any) -> None:
        tally.note(message.payload)
        state["last"] = time.perf_counter()

    client = paho.Client(
        paho.CallbackAPIVersion.VERSION2, client_id=args.client_id, clean_session=False,
        protocol=paho.MQTTv311,
    )  # fmt: skip
    client.on_connect = on_connect
    client.on_message = on_message
    start = time.perf_counter()
    client.connect(parts.hostname or "127.0.0.1", parts.port or 1883, keepalive=60)
    sock: Any = client.socket()
    # _in_messages: paho 2.x's QoS 2 messages answered with PUBREC, awaiting PUBREL.
    while tally.distinct < count or (qos == 2 and (client._in_messages or client.want_write())):
        now = time.perf_counter()
        if now > start + args.timeout or now - (state["last"] or start) > args.stall:
            break
        writable = [sock] if client.want_write() else []
        readable, _, _ = select.select([sock], writable, [], 1.0)
        if readable and client.loop_read() != paho.MQTT_ERR_SUCCESS:
            break
        if client.want_write() and client.loop_write() != paho.MQTT_ERR_SUCCESS:
            break
        client.loop_misc()
    complete = time.perf_counter()
    still_open = len(client._in_messages)
    client.disconnect()
    connected = state["connected"] or start
    result = tally.result(start, connected, state["last"] or connected, 1)
    return _finished(result, qos, complete - start, still_open)


def drain_receiver(args: argparse.Namespace) -> dict[str, Any]:
    """The source's receiver into a fresh WAL until ``count`` records are durable (and released)."""
    from connector.wal import WalReader

    count, qos = args.count, args.qos
    wal_dir = Path(tempfile.mkdtemp(prefix="bench-drain-wal-")) / "wal"
    more = {"maxBacklogMessages": str(max(count, 10_000) * 2)} | dict(
        option.split("=", 1) for option in args.option
    )
    tally = Tally(count, args.seq_at)
    try:
        start = time.perf_counter()
        receiver = new_receiver(args.url, TOPIC_FILTER, args.client_id, wal_dir, qos=qos, **more)
        receiver.start()  # connects, then runs its loop in a thread
        connected = time.perf_counter()
        deadline = start + args.timeout
        try:
            wal = receiver.wal
            last, stored = _watch(
                receiver, lambda: wal.next_offset, lambda n: n >= count, deadline, args.stall
            )
            complete, still_open = last, len(wal.qos2_pending)
            if qos == 2 and stored >= count:
                complete, still_open = _watch(
                    receiver, lambda: len(wal.qos2_pending), lambda n: n == 0, deadline, args.stall
                )
        finally:
            receiver.stop()  # the loop thread finishes its read (PUBCOMPs) before DISCONNECT
        stored = receiver.wal.next_offset
        for payload in WalReader(wal_dir).read(0, stored).payloads:
            tally.note(payload)
    finally:
        shutil.rmtree(wal_dir.parent, ignore_errors=True)
    result = tally.result(start, connected, last, receiver.stats.connections)
    result["wal_records"] = stored
    return _finished(result, qos, complete - start, still_open)


WORKERS = {"ours": drain_ours, "ours-wal": drain_receiver, "paho": drain_paho}


def command(
    peer: str, url: str, client_id: str, count: int, timeout: float, *, qos: int = 1,
    stall: float = 5.0, seq_at: int = 0, options: Sequence[str] = (),
) -> list[str]:  # fmt: skip
    """A drain worker's command line; ``mosquitto_sub``'s own (``-C N``: exit 0 after N)."""
    if peer == "mosquitto_sub":
        from devtools.system_tools import find_tool

        parts = urlsplit(url)
        return [
            find_tool("mosquitto_sub"), "-h", str(parts.hostname), "-p", str(parts.port), "-c",
            "-i", client_id, "-q", str(qos), "-t", TOPIC_FILTER, "-C", str(count),
            "-W", str(int(timeout)),
        ]  # fmt: skip
    return [
        sys.executable, "-m", "bench.drainer", peer, url, client_id, str(count),
        "--timeout", str(timeout), "--stall", str(stall), "--qos", str(qos),
        "--seq-at", str(seq_at), *(f"--option={o}" for o in options),
    ]  # fmt: skip


def run(
    peer: str, url: str, client_id: str, count: int, timeout: float, **kwargs: Any
) -> tuple[float, dict[str, Any]]:
    """A drain worker's process: (start -> exit, its figures); BenchError unless complete."""
    argv = command(peer, url, client_id, count, timeout, **kwargs)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 60, cwd=REPO_ROOT)
    wall = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    if not lines:
        raise BenchError(f"{peer} worker printed nothing ({done.returncode}): {done.stderr}")
    details: dict[str, Any] = json.loads(lines[-1])
    if done.returncode != 0:
        still_open = details.get("open_exchanges")
        open_note = f" with {still_open} QoS 2 exchange(s) still open" if still_open else ""
        raise BenchError(
            f"{peer} got {details['distinct']} of {count} distinct messages{open_note} before "
            f"it stalled or timed out (exit {done.returncode}): {details}\n{done.stderr}"
        )
    return wall, details


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.drainer", description=__doc__)
    parser.add_argument("peer", choices=sorted(WORKERS))
    parser.add_argument("url")
    parser.add_argument("client_id")
    parser.add_argument("count", type=int)
    parser.add_argument("--qos", type=int, choices=(1, 2), default=1)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--stall", type=float, default=5.0, help="give up after a silence")
    parser.add_argument("--seq-at", type=int, default=0, help="where a payload's number sits")
    parser.add_argument("--option", action="append", default=[], help="ours-wal's KEY=VALUE")
    args = parser.parse_args(argv)
    result = WORKERS[args.peer](args)
    sys.stdout.write(json.dumps(result) + "\n")
    complete = result["distinct"] == args.count and not result["out_of_range"]
    return 0 if complete and not result.get("open_exchanges") else 1


def check_table(
    spark: Any, table: Path, figures: Mapping[str, Any], want: Mapping[str, Any]
) -> Any:
    """``figures`` of a Delta table, first and last receive time; BenchError unless ``want``."""
    from pyspark.sql import functions as F

    found = (
        spark.read.format("delta")
        .load(str(table))
        .agg(
            *(column.alias(name) for name, column in figures.items()),
            F.min("timestamp").alias("first_received"),
            F.max("timestamp").alias("last_received"),
        )
        .first()
        .asDict()
    )
    if any(found[key] != value for key, value in want.items()):
        raise BenchError(f"{table}: expected {dict(want)}, found {found}")
    return found


@dataclass(slots=True)
class Commit:
    version: int
    seen: float  # epoch seconds when the commit file was first seen
    timestamp: float  # the commit's own time (commitInfo), epoch seconds
    files: list[str] = field(default_factory=list)
    rows: int = 0


class TableTail:
    """A Delta table's commits read from its log as they appear: when seen, what they added."""

    def __init__(self, table: Path) -> None:
        self.table = table
        self.commits: list[Commit] = []
        self.rows = 0

    def poll(self) -> int:
        """Read the commits that appeared since the last poll; the rows added so far."""
        from devtools.delta_log import file_rows, read_commit

        while True:
            seen = time.time()
            actions = read_commit(self.table, len(self.commits))
            if actions is None:
                return self.rows
            info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
            commit = Commit(len(self.commits), seen, info.get("timestamp", 0) / 1000)
            for add in (a["add"] for a in actions if "add" in a):
                commit.files.append(unquote(add["path"]))
                commit.rows += file_rows(add) or 0
            self.commits.append(commit)
            self.rows += commit.rows

    @property
    def committed_at(self) -> float:
        """The time of the newest commit that added rows (epoch seconds)."""
        return max((c.timestamp for c in self.commits if c.rows), default=0.0)

    @contextmanager
    def watching(self, interval: float) -> Iterator[TableTail]:
        """Poll every ``interval`` seconds in a thread while the block runs."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                self.poll()
                stop.wait(interval)

        thread = threading.Thread(target=loop, name="delta-commit-watch", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()


if __name__ == "__main__":
    sys.exit(main())
