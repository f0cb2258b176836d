"""Bounded runs of the fuzz targets for the test suite: each target over its seeds and a fixed
number of mutations of them (deterministic), in seconds. ``make fuzz`` runs the same targets
coverage-guided with atheris for minutes."""

from __future__ import annotations

import importlib
import os
import random
from collections.abc import Iterator

import pytest

BUDGET = {"decoder": 4000, "session": 3000, "sparkplug": 3000, "wal": 150}
"""Mutated inputs per target on top of the seeds; FUZZ_SCALE multiplies them."""
SCALE = float(os.environ.get("FUZZ_SCALE", "1"))


def mutations(seeds: list[bytes], count: int, seed: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(count):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(6)
            pos = rng.randrange(len(data) + 1)
            if kind == 0 and data:  # flip bits
                data[pos % len(data)] ^= 1 << rng.randrange(8)
            elif kind == 1 and data:  # set a byte to an edge value
                data[pos % len(data)] = rng.choice((0x00, 0x7F, 0x80, 0xFF, rng.randrange(256)))
            elif kind == 2:  # insert bytes
                data[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            elif kind == 3:  # delete bytes
                del data[pos : pos + rng.randint(1, 8)]
            elif kind == 4:  # cut the tail
                del data[pos:]
            else:  # splice in a piece of another seed
                other = rng.choice(seeds)
                start = rng.randrange(len(other) + 1)
                data[pos:pos] = other[start : start + rng.randint(1, 32)]
        yield bytes(data)


@pytest.mark.parametrize("target", sorted(BUDGET))
def test_fuzz_target_holds_on_seeds_and_mutations(target: str) -> None:
    module = importlib.import_module(f"tests.fuzz.{target}_target")
    seeds = module.seeds()
    assert seeds
    tried = 0
    for data in [*seeds, *mutations(seeds, int(BUDGET[target] * SCALE), seed=len(target))]:
        try:
            module.one_input(data)
        except Exception as exc:
            raise AssertionError(f"{target} target failed on input {data.hex()}: {exc!r}") from exc
        tried += 1
    assert tried == len(seeds) + int(BUDGET[target] * SCALE)
