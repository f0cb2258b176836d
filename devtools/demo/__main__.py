"""``python -m devtools.demo``: the command line (see the package's docstring)."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from connector.mqtt.errors import MqttError
from devtools.broker_process import BrokerError
from devtools.delta_log import UnreadableTable
from devtools.demo.errors import DemoFailed
from devtools.demo.paths import DemoPaths
from devtools.demo.report import print_report
from devtools.demo.run import Interrupted, interrupts_raise, run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m devtools.demo",
        description="Sensors -> Mosquitto -> the ingest job -> Delta, with a report.",
    )
    parser.add_argument(
        "--messages",
        type=_positive,
        default=2000,
        help="messages to publish, malformed ones included (default 2000)",
    )
    parser.add_argument(
        "--devices",
        type=_positive,
        default=6,
        help="simulated sensors, half QoS 1, half QoS 2 (default 6)",
    )
    parser.add_argument(
        "--data-dir",
        default="data",
        help="the demo works in DATA_DIR/demo, the previous run's removed first (default ./data)",
    )
    cleanup = parser.add_mutually_exclusive_group()
    cleanup.add_argument(
        "--clean",
        "--remove-data",
        dest="clean",
        action="store_true",
        help="remove DATA_DIR/demo at the end of a successful run (by default the tables, "
        "checkpoint, logs and report.json are kept)",
    )
    cleanup.add_argument(
        "--keep-data",
        action="store_true",
        help="keep DATA_DIR/demo: the default, accepted for older command lines",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=8.0,
        help="seconds over which the sensors spread their messages (default 8)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=90.0,
        help="seconds to wait for the tables to catch up (default 90)",
    )
    parser.add_argument(
        "--routes",
        action="store_true",
        help="one job, two routes (docs/ingest-job.md, Routes): the sensors also publish status "
        "messages, landed as VARIANT in a table of their own",
    )
    parser.add_argument("--log-level", default="WARNING")
    return parser  # fmt: skip


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    paths = DemoPaths(Path(args.data_dir).resolve() / "demo")
    try:
        with interrupts_raise():
            report = run(args, paths)
    except Interrupted as exc:
        sys.stderr.write(
            f"demo interrupted ({exc}); processes stopped, data left in {paths.root}\n"
        )
        return 130
    except (DemoFailed, UnreadableTable, BrokerError, MqttError, OSError) as exc:
        sys.stderr.write(f"error: {exc}\ndata left in {paths.root} for a look\n")
        return 1
    paths.report.write_text(json.dumps(report, indent=2) + "\n")
    keep = not args.clean or not report["ok"]
    print_report(report, keep)
    if not keep:
        shutil.rmtree(paths.root, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
