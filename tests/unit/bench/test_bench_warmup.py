"""``bench.ingest`` warms the driver JVM up with as many rounds as land ``--warmup-rows`` rows."""

from __future__ import annotations

import pytest

from bench.ingest import QOS2_BACKLOG_LIMIT, WARMUP_ROWS, warmup_rounds


@pytest.mark.parametrize(
    ("round_rows", "target", "rounds"),
    [
        (720_000, WARMUP_ROWS, 1),  # the default peers: QoS 1 and 2, both modes, synthetic
        (QOS2_BACKLOG_LIMIT, WARMUP_ROWS, 10),  # QoS 2 alone, ours-wal only
        (460_000, WARMUP_ROWS, 2),  # QoS 1 and 2, wal, synthetic (make bench's receivers=2)
        (1_000_000, WARMUP_ROWS, 1),
        (200_000, 600_001, 4),
        (60_000, 0, 1),  # always at least one round
        (0, WARMUP_ROWS, 1),
    ],
)
def test_rounds_land_at_least_the_target(round_rows: int, target: int, rounds: int) -> None:
    assert warmup_rounds(round_rows, target) == rounds
    if round_rows and target:
        assert rounds * round_rows >= target > (rounds - 1) * round_rows
