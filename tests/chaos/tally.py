"""The tally of faults and messages of a chaos run, and the final check of a test's Delta
table against its ledger (:func:`settle`, :func:`settle_per_qos`).

Each test adds what it did to the session's tally (``tally.add("broker_restarts")``, the
``tally`` fixture of ``tests/chaos/conftest.py``) and checks its table with :func:`settle`, which
adds the published/landed/lost/duplicated counts and fails the test unless every published
message landed exactly once (or, given the receivers' count of possible duplicates, at least
once with exactly those extra rows). A test whose connection holder is killed while QoS 1 and
QoS 2 traffic flows checks with :func:`settle_per_qos` instead, one ledger per QoS: QoS 2
exactly once; QoS 1 at least once, every extra copy a broker resend (DUP=1) of a message whose
acknowledgement was in flight at the kill (docs/delivery.md). ``make chaos`` writes the tally
to ``bench/results/chaos.json``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.chaos.harness import Ledger, Verdict, run_seed, scale
from tests.chaos.proxy import ChaosProxy

REPO_ROOT = Path(__file__).resolve().parents[2]
FUZZ_COUNTS = REPO_ROOT / "bench" / "results" / "fuzz.json"
FUZZ_KEYS = ("total_inputs", "fuzz_inputs_tried", "inputs_tried")

COUNTERS = (
    "kills_survived",
    "driver_kills",
    "source_process_kills",
    "broker_restarts",
    "broker_hard_kills",
    "sessions_dropped",
    "connection_cuts",
    "stalls",
    "fragments",
    "malformed_frames_sent",
    "no_connack_connections",
    "keepalive_detections",
    "disk_full_faults",
    "read_only_faults",
    "fuzz_inputs_tried",
    "bad_options_refused",
    "bad_payloads_dead_lettered",
    "messages_published",
    "messages_landed",
    "messages_lost",
    "messages_duplicated",
    "qos1_published",
    "qos1_lost",
    "qos1_extra_rows",
    "qos2_published",
    "qos2_lost",
    "qos2_extra_rows",
    "sink_kills",
    "sink_rows",
    "sink_rows_again",
    "tests_passed",
    "tests_failed",
)


class Tally:
    """Counters of one test run (all chaos tests add to it)."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.started = time.monotonic()

    def add(self, name: str, amount: int = 1) -> None:
        if name not in self.counts:
            raise KeyError(f"unknown chaos counter {name!r}")
        self.counts[name] += amount

    def add_proxy(self, proxy: ChaosProxy) -> None:
        stats = proxy.stats
        self.add("connection_cuts", stats.cuts)
        self.add("stalls", stats.stalls)
        self.add("fragments", stats.fragments)
        self.add("malformed_frames_sent", stats.malformed_frames)
        self.add("no_connack_connections", stats.blackholed)

    def add_verdict(self, verdict: Verdict) -> None:
        self.add("messages_published", verdict.published)
        self.add("messages_landed", verdict.landed)
        self.add("messages_lost", len(verdict.lost))
        self.add("messages_duplicated", len(verdict.duplicated))

    def as_json(self) -> dict:
        from bench.common import machine_info

        data: dict = dict(self.counts)
        data["fuzz_inputs_tried"] = fuzz_inputs_tried()
        data["duration_s"] = round(time.monotonic() - self.started, 1)
        data["scale"] = scale()
        data["seed"] = run_seed()
        data["machine"] = machine_info()
        return data


def fuzz_inputs_tried() -> int:
    """Inputs the fuzz targets report having tried (their counter file), else 0."""
    path = Path(os.environ.get("CHAOS_FUZZ_COUNTS", FUZZ_COUNTS))
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return 0
    for key in FUZZ_KEYS:
        value = data.get(key) if isinstance(data, dict) else None
        if isinstance(value, int):
            return value
    return 0


def settle(
    tally: Tally,
    ledger: Ledger,
    landed_payloads: list[bytes],
    possible_duplicates: int | None = None,
) -> Verdict:
    """Check the table's payloads against the ledger, count, and fail unless exactly once;
    or, given the receivers' ``possible_duplicates`` (QoS 1 resends after a dropped
    connection, docs/delivery.md), unless nothing is lost and the extra rows are those."""
    verdict = ledger.check(landed_payloads)
    tally.add_verdict(verdict)
    assert verdict.published > 0, "nothing was published"
    if possible_duplicates is None:
        assert verdict.exactly_once, verdict.problems()
    else:
        assert verdict.at_least_once, verdict.problems()
        assert verdict.extra == possible_duplicates, (
            f"{verdict.extra} extra rows, {possible_duplicates} counted: {verdict.problems()}"
        )
    return verdict


def settle_per_qos(
    tally: Tally, ledgers: Mapping[int, Ledger], rows: Sequence[Mapping[str, Any]]
) -> dict[int, Verdict]:
    """Check the rows (``payload``, ``qos``, ``duplicate``) of each QoS against that QoS's
    ledger and add them to the tally: QoS 2 exactly once; QoS 1 at least once, a message stored
    more than once only as broker resends (a first delivery, DUP=0, at most once)."""
    verdicts = {}
    for qos, ledger in sorted(ledgers.items()):
        mine = [row for row in rows if row["qos"] == qos]
        landed = [bytes(row["payload"]) for row in mine]
        resends: int | None = None
        if qos == 1:
            first = ledger.check([bytes(r["payload"]) for r in mine if not r["duplicate"]])
            assert not first.duplicated, f"QoS 1 first deliveries stored twice: {first.problems()}"
            resends = sum(1 for row in mine if row["duplicate"]) - len(first.lost)
        verdict = ledger.check(landed)
        if qos in (1, 2):
            tally.add(f"qos{qos}_published", verdict.published)
            tally.add(f"qos{qos}_lost", len(verdict.lost))
            tally.add(f"qos{qos}_extra_rows", verdict.extra)
        verdicts[qos] = settle(tally, ledger, landed, resends)
    others = sorted({row["qos"] for row in rows} - set(ledgers))
    assert not others, f"rows at a QoS nobody published with: {others}"
    return verdicts


def describe(verdicts: Mapping[int, Verdict]) -> str:
    """One line of figures per QoS: published, rows, lost, extra copies."""
    return "; ".join(
        f"QoS {qos}: {v.published} published, {v.landed + v.extra} rows, lost {len(v.lost)}, "
        f"duplicated {len(v.duplicated)} ({v.extra} extra rows)"
        for qos, v in sorted(verdicts.items())
    )
