"""What every chaos test shares beyond :mod:`tests.support.ledger` (the ledger, the traffic and
the final check of a table): the run's size and seed, and the run's results, which ``make
chaos`` writes to ``bench/results/chaos.json``.

Knobs (environment):

* ``CHAOS_SCALE``: ``ci`` (default; small, a few minutes in all) or ``long`` (``make chaos``);
* ``CHAOS_SEED``: replay a run; each test derives its own random stream from it and its name.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from devtools import REPO_ROOT
from devtools.machine import machine_info
from tests.support.ledger import Tally

SCALES = ("ci", "long")
FUZZ_COUNTS = REPO_ROOT / "bench" / "results" / "fuzz.json"
FUZZ_KEYS = ("total_inputs", "fuzz_inputs_tried", "inputs_tried")


def scale() -> str:
    value = os.environ.get("CHAOS_SCALE", "ci").strip().lower() or "ci"
    if value not in SCALES:
        raise ValueError(f"CHAOS_SCALE must be one of {SCALES}, got {value!r}")
    return value


def sized(ci: int, long: int) -> int:
    """``ci`` or ``long`` by ``CHAOS_SCALE``."""
    return long if scale() == "long" else ci


def run_seed() -> int:
    """The run's seed: ``CHAOS_SEED`` when set, else a fresh one (printed by each test)."""
    raw = os.environ.get("CHAOS_SEED")
    if raw:
        return int(raw)
    global _SEED
    if _SEED is None:
        _SEED = random.SystemRandom().randrange(1, 2**31)
    return _SEED


_SEED: int | None = None


def rng_for(test_name: str) -> random.Random:
    """A random stream for one test, fixed by the run's seed and the test's name."""
    return random.Random(f"{run_seed()}:{test_name}")


# ---------------------------------------------------------------------------- the results


def run_results(tally: Tally) -> dict[str, Any]:
    """The run's tally as one flat JSON object, with ``machine``, ``seed`` and ``scale``."""
    data: dict[str, Any] = dict(tally.counts)
    data["fuzz_inputs_tried"] = fuzz_inputs_tried()
    data["duration_s"] = round(time.monotonic() - tally.started, 1)
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
