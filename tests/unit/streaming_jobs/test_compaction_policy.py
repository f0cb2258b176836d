"""The tiered compaction policy on sizes alone (streaming_jobs/compaction_policy.py): each byte
is rewritten a few times at most, and the small-file tail stays bounded, however long the run;
the naive policy (compact every small file each time) is shown to grow without bound."""

from __future__ import annotations

import random

import pytest

from streaming_jobs.compaction_policy import (
    CLASSES,
    FANOUT,
    MIB,
    CompactionPolicy,
    optimize,
    parse_size,
    simulate,
)

TARGET = 8 * MIB


def batches(mean: int, count: int, seed: int = 1) -> list[int]:
    rnd = random.Random(seed)
    return [max(1, int(mean * rnd.uniform(0.5, 1.5))) for _ in range(count)]


@pytest.mark.parametrize("ratio", [20_000, 3_400, 1_000, 100, 10])
def test_write_amplification_stays_below_four_and_the_tail_bounded(ratio: int) -> None:
    """Batch files from target/20,000 (6.7 KB at 128 MiB) to target/10, a few targets' worth."""
    policy = CompactionPolicy(TARGET)
    mean = TARGET // ratio
    result = simulate(policy, batches(mean, min(12_000, max(500, 3 * ratio))))
    assert result.amplification <= 4.0
    assert result.most_small_files < policy.small_files
    large = [s for s in result.files if s >= policy.bounds[0]]
    assert len(result.files) <= result.ingested // policy.bounds[0] + policy.small_files
    assert sum(large) + sum(s for s in result.files if s < policy.bounds[0]) == result.ingested


def test_compacting_every_small_file_each_time_rewrites_the_growing_file() -> None:
    """The policy the tiers replace: ``OPTIMIZE`` of all files below half the target whenever
    the tail is full. Its amplification grows with the run; the tiers' does not."""
    sizes = batches(TARGET // 3_400, 6_000)
    files: list[int] = []
    written = 0
    for size in sizes:
        files.append(size)
        if len([s for s in files if s < TARGET // 2]) >= 50:
            files, wrote = optimize(files, TARGET // 2, TARGET)
            written += wrote
    naive = written / sum(sizes)
    tiered = simulate(CompactionPolicy(TARGET), sizes).amplification
    assert naive > 3 * tiered


def test_a_class_is_due_with_fanout_files_and_the_highest_wins() -> None:
    policy = CompactionPolicy(TARGET)
    half, c1, c2, bottom = policy.bounds
    assert (half, c1, c2, bottom) == (TARGET // 2, TARGET // 16, TARGET // 128, TARGET // 1024)
    assert policy.due({"a": [c2] * (FANOUT - 1)}) is None
    assert policy.due({"a": [c2] * FANOUT}) == c1  # class 2: files below class 1's bound
    assert policy.due({"a": [c2] * FANOUT, "b": [c1] * FANOUT}) == half
    assert policy.due({"a": [10] * (policy.bottom_files - 1)}) is None
    assert policy.due({"a": [10] * policy.bottom_files}) == bottom
    assert policy.due({"a": [half] * 100}) is None  # large files are done
    assert policy.bottom_files == policy.small_files - CLASSES * (FANOUT - 1)


def test_optimize_packs_bins_up_to_the_target_and_leaves_single_files() -> None:
    files, wrote = optimize([5, 6, 100, 7, 3], min_file_size=10, max_file_size=12)
    assert sorted(files) == [10, 11, 100]  # [5, 6] and [7, 3] packed; 100 kept
    assert wrote == 21
    files, wrote = optimize([5, 100], min_file_size=10, max_file_size=12)
    assert (sorted(files), wrote) == ([5, 100], 0)


def test_bad_settings_are_refused_with_the_limit() -> None:
    with pytest.raises(ValueError, match="at least 1024 bytes"):
        CompactionPolicy(1000)
    with pytest.raises(ValueError, match="at least 23 files"):
        CompactionPolicy(TARGET, small_files=22)


@pytest.mark.parametrize(
    ("text", "size"),
    [("128MiB", 128 * MIB), ("512 KiB", 512 * 1024), ("1GiB", 1 << 30), ("4096", 4096)],
)
def test_sizes_are_read_with_units(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["12x", "", "-1MiB", "0"])
def test_a_bad_size_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(text)
