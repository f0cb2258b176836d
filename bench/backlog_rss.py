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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.common import REPO_ROOT, finish, machine_info, pub_command
from bench.render import Charts, Lines, md_table, mib, num
from bench.scale import rss_kib


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.backlog_rss", description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--bound", type=int, default=10_000, help="maxBacklogMessages")
    parser.add_argument("--output", type=Path, help="results file")
    args = parser.parse_args(argv)
    from connector.options.source import SourceOptions
    from connector.receiver.receiver import Receiver
    from devtools.mosquitto import MosquittoBroker

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
    return finish("backlog_rss", result, args.output, section)


def section(data: Mapping[str, Any], charts: Charts) -> Lines:
    return [
        f"{num(data['messages_published'])} QoS 1 messages published to a receiver bounded "
        f"by `maxBacklogMessages` {num(data['max_backlog_messages'])}.",
        "",
        *md_table(
            ["stored in the WAL", "waiting at the broker", "RSS after start MiB", "peak MiB",
             "growth MiB"],
            [[
                num(data["records_in_wal_at_end"]),
                num(data["waiting_at_broker_at_end"]),
                mib(data["rss_kib_after_start"]),
                mib(data["rss_kib_peak"]),
                mib(data["rss_growth_kib"]),
            ]],
        ),
    ]  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
