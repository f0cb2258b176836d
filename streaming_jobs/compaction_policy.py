"""When to compact a table, and which files: tiered by size, so each byte is rewritten a few
times at most however long the stream runs (docs/operations.md, "Table maintenance").

Each micro-batch adds at least one small file. Compacting "every file below the target" each
time rewrites the one growing file again and again (write amplification that grows with the
table, as Delta's auto compaction with its defaults does on a stream). Here files below half
the target size fall into size classes, each :data:`FANOUT` times smaller than the one above:

* class 1: ``[target/16, target/2)``, class 2: ``[target/128, target/16)``, class 3:
  ``[target/1024, target/128)``, and the bottom class below ``target/1024``, where new batch
  files land.
* A class is due when a partition holds :data:`FANOUT` files of it; the bottom class when it
  holds :attr:`CompactionPolicy.bottom_files` (the tail's share of
  :attr:`CompactionPolicy.small_files`).
* The compaction of the highest due class rewrites that class and every smaller one
  (``OPTIMIZE`` with ``minFileSize`` the class's upper bound and ``maxFileSize`` the target):
  :data:`FANOUT` files of a class make at least one file of the class above, so a byte climbs
  a class (or more) each time it is rewritten.

A partition then holds at most ``small_files - 1`` files below half the target whenever no
compaction is due, whatever the run's length. ``OPTIMIZE`` packs the files of a partition into
bins of at most the target size and leaves a bin of one file alone (Delta's
``OptimizeExecutor``); :func:`simulate` replays that on sizes alone, and the unit tests bound
the write amplification with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

FANOUT = 8
"""Size ratio between neighbouring classes, and how many files of a class make it due."""
CLASSES = 3
"""Size classes between the bottom class and half the target size."""
MIB = 1024 * 1024
DEFAULT_TARGET_BYTES = 128 * MIB
"""The target file size: Delta's own default for auto compaction's output."""
DEFAULT_SMALL_FILES = 50
"""At most this many files below half the target per partition, when no compaction is due."""
RETENTION_CHECK_KEY = "spark.databricks.delta.retentionDurationCheck.enabled"
"""Delta's refusal of a ``VACUUM`` retention below :data:`SAFE_RETENTION_HOURS` (a reader or
writer older than the retention may then find its files gone)."""
SAFE_RETENTION_HOURS = 168.0


_UNITS = {"": 1, "B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}


def parse_size(text: str) -> int:
    """``128MiB``, ``512KiB``, ``1GiB`` or a number of bytes, as bytes."""
    number = text.strip()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if unit and number.upper().endswith(unit):
            value, scale = number[: -len(unit)].strip(), _UNITS[unit]
            break
    else:
        value, scale = number, 1
    try:
        size = int(float(value) * scale)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (e.g. 128MiB, 512KiB, 1GiB or bytes)") from None
    if size <= 0:
        raise ValueError(f"a size must be positive, got {text!r}")
    return size


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """The tiered policy (module docstring) for one table."""

    target_bytes: int = DEFAULT_TARGET_BYTES
    small_files: int = DEFAULT_SMALL_FILES

    def __post_init__(self) -> None:
        if self.target_bytes < 2 * FANOUT**CLASSES:
            raise ValueError(f"a target file size must be at least {2 * FANOUT**CLASSES} bytes")
        if self.bottom_files < 2:
            least = CLASSES * (FANOUT - 1) + 2
            raise ValueError(f"the small-file tail must be at least {least} files")

    @property
    def bounds(self) -> tuple[int, ...]:
        """Upper bounds of the classes, highest first: half the target, then each
        :data:`FANOUT` times smaller; the last is the bottom class's upper bound."""
        large = self.target_bytes // 2
        return tuple(large // FANOUT**j for j in range(CLASSES + 1))

    @property
    def bottom_files(self) -> int:
        """Files of the bottom class that make it due: what the tail leaves after the other
        classes' largest counts (``FANOUT - 1`` each)."""
        return self.small_files - CLASSES * (FANOUT - 1)

    def size_class(self, size: int) -> int | None:
        """0 for a file of half the target or more (done), 1..CLASSES, CLASSES + 1 for the
        bottom class."""
        for j, bound in enumerate(self.bounds):
            if size >= bound:
                return j
        return CLASSES + 1

    def due(self, partitions: Mapping[str, Sequence[int]]) -> int | None:
        """The ``minFileSize`` of the compaction due (the upper bound of the highest class
        due in any partition), or None when none is due. ``partitions`` maps a partition to
        the sizes of its files (those of half the target or more may be left out)."""
        highest: int | None = None
        for sizes in partitions.values():
            counts = [0] * (CLASSES + 2)
            for size in sizes:
                counts[self.size_class(size) or 0] += 1
            for j in range(1, CLASSES + 2):
                needed = FANOUT if j <= CLASSES else self.bottom_files
                if counts[j] >= needed:
                    highest = j if highest is None else min(highest, j)
                    break
        return None if highest is None else self.bounds[highest - 1]


def optimize(sizes: Sequence[int], min_file_size: int, max_file_size: int) -> tuple[list[int], int]:
    """What Delta's compaction leaves of one partition's files (sizes only, bytes kept), and
    the bytes it wrote: the files below ``min_file_size``, in order, packed into bins of at
    most ``max_file_size``; a bin of one file stays as it is."""
    kept = [s for s in sizes if s >= min_file_size]
    bins: list[list[int]] = []
    current: list[int] = []
    total = 0
    for size in (s for s in sizes if s < min_file_size):
        if current and total + size > max_file_size:
            bins.append(current)
            current, total = [], 0
        current.append(size)
        total += size
    if current:
        bins.append(current)
    merged = [sum(b) for b in bins if len(b) > 1]
    return kept + [b[0] for b in bins if len(b) == 1] + merged, sum(merged)


@dataclass(frozen=True, slots=True)
class Simulated:
    """The outcome of :func:`simulate`."""

    written: int
    """Bytes the compactions wrote."""
    ingested: int
    most_small_files: int
    """The most files below half the target after any batch's compaction."""
    files: list[int]

    @property
    def amplification(self) -> float:
        return self.written / self.ingested


def simulate(policy: CompactionPolicy, batches: Iterable[int]) -> Simulated:
    """One unpartitioned table fed one file per batch (sizes from ``batches``), compacted by
    ``policy`` after each batch until nothing is due."""
    files: list[int] = []
    written = ingested = most = 0
    large = policy.bounds[0]
    for size in batches:
        files.append(size)
        ingested += size
        while (min_size := policy.due({"": files})) is not None:
            files, wrote = optimize(files, min_size, policy.target_bytes)
            if not wrote:
                break
            written += wrote
        most = max(most, sum(1 for s in files if s < large))
    return Simulated(written, ingested, most, files)
