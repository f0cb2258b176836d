"""Receiver memory while a large backlog waits: a receiver with a small ``maxBacklogMessages``
pauses (TCP backpressure) while the broker's queue grows to ``--messages``; its process's
resident memory is sampled all along."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, arguments, finish, machine_info, new_receiver, pub_command
from bench.render import Charts, Lines, md_table, mib, num
from bench.scale import rss_kib


def measure(messages: int, bound: int) -> dict[str, Any]:
    from devtools.mosquitto import MosquittoBroker

    with (
        tempfile.TemporaryDirectory() as tmp,
        MosquittoBroker(Path(tmp) / "broker", max_queued_messages=messages * 2) as broker,
    ):
        wal, most = Path(tmp) / "wal", str(bound)
        receiver = new_receiver(broker.url, "rss/#", "rss-bench", wal, maxBacklogMessages=most)
        receiver.start()
        baseline = peak = rss_kib()
        publisher = subprocess.Popen(
            pub_command(broker.url, "rss/a", 1, messages, 100), cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        while publisher.poll() is None:
            peak = max(peak, rss_kib())
            time.sleep(0.5)
        peak = max(peak, rss_kib())
        in_wal = receiver.wal.next_offset
        receiver.stop()
    return {
        "machine": machine_info(), "messages_published": messages, "max_backlog_messages": bound,
        "records_in_wal_at_end": in_wal, "waiting_at_broker_at_end": messages - in_wal,
        "rss_kib_after_start": baseline, "rss_kib_peak": peak, "rss_growth_kib": peak - baseline,
    }  # fmt: skip


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    return [
        f"{num(data['messages_published'])} QoS 1 messages published to a receiver bounded "
        f"by `maxBacklogMessages` {num(data['max_backlog_messages'])}.",
        "",
        *md_table(
            ["stored in the WAL", "waiting at the broker", "RSS after start MiB", "peak MiB",
             "growth MiB"],
            [[num(data["records_in_wal_at_end"]), num(data["waiting_at_broker_at_end"]),
              mib(data["rss_kib_after_start"]), mib(data["rss_kib_peak"]),
              mib(data["rss_growth_kib"])]],
        ),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments("backlog_rss", __doc__, messages=1_000_000)
    parser.add_argument("--bound", type=int, default=10_000, help="maxBacklogMessages")
    args = parser.parse_args(argv)
    return finish("backlog_rss", lambda: measure(args.messages, args.bound), args.output, section)


if __name__ == "__main__":
    sys.exit(main())
