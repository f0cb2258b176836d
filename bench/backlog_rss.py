"""Receiver memory while a large backlog waits: ``python -m bench.backlog_rss``.

A receiver with a small ``maxBacklogMessages`` bound pauses (TCP backpressure) while the broker
holds a growing queue; its process's resident memory is sampled as the backlog grows from 0 to
``--messages``. Writes ``bench/results/backlog_rss.json``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO_ROOT, machine_info, pub_command, write_results
from connector.options.source import SourceOptions
from connector.receiver.receiver import Receiver
from devtools.mosquitto import MosquittoBroker


def rss_kib() -> int:
    """Resident set size of this process in KiB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--bound", type=int, default=10_000, help="maxBacklogMessages")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as tmp,
        MosquittoBroker(
            Path(tmp) / "broker", max_queued_messages=args.messages * 2, max_inflight_messages=20
        ) as broker,
    ):
        options = SourceOptions.parse(
            {
                "brokerUrl": broker.url,
                "topic": "rss/#",
                "qos": "1",
                "clientId": "rss-bench",
                "walPath": str(Path(tmp) / "wal"),
                "maxBacklogMessages": str(args.bound),
            }
        )
        receiver = Receiver(options)
        receiver.start()
        baseline = rss_kib()
        publisher = subprocess.Popen(
            pub_command(broker.url, "rss/a", 1, args.messages, 100),
            cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL,
        )
        samples: list[tuple[float, int, int]] = []
        start = time.monotonic()
        while publisher.poll() is None:
            samples.append((time.monotonic() - start, receiver.wal.next_offset, rss_kib()))
            time.sleep(0.5)
        samples.append((time.monotonic() - start, receiver.wal.next_offset, rss_kib()))
        in_wal = receiver.wal.next_offset
        receiver.stop()
    peak = max(s[2] for s in samples)
    result = {
        "machine": machine_info(),
        "messages_published": args.messages,
        "max_backlog_messages": args.bound,
        "records_in_wal_at_end": in_wal,
        "waiting_at_broker_at_end": args.messages - in_wal,
        "rss_kib_after_start": baseline,
        "rss_kib_peak": peak,
        "rss_growth_kib": peak - baseline,
        "samples": samples[:: max(1, len(samples) // 20)],
    }
    write_results("backlog_rss", result)
    print(
        f"published {args.messages:,} QoS 1 messages; the receiver stored {in_wal:,} "
        f"(bound {args.bound:,}) and left {args.messages - in_wal:,} waiting at the broker"
    )
    print(
        f"receiver process RSS: {baseline:,} KiB after start, peak {peak:,} KiB "
        f"(growth {peak - baseline:,} KiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
