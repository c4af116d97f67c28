"""The fuzz targets in tools/fuzz/ stay runnable without atheris, and hold on
their seeds and on a few hundred mutations of them (byte flips, cuts and
splices from a fixed-seed generator). The long runs are libFuzzer's:
``python tools/fuzz/run.py TARGET``."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tools" / "fuzz"))
from targets import TARGETS  # noqa: E402


def mutations(seeds: list[bytes], count: int, rnd: random.Random) -> list[bytes]:
    out = []
    for _ in range(count):
        data = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 4)):
            op = rnd.random()
            if op < 0.5 and data:
                data[rnd.randrange(len(data))] = rnd.randrange(256)
            elif op < 0.7 and data:
                at = rnd.randrange(len(data))
                del data[at:at + rnd.randint(1, 16)]
            elif op < 0.85:
                other = rnd.choice(seeds)
                at = rnd.randrange(len(other) + 1)
                data[rnd.randrange(len(data) + 1):rnd.randrange(len(data) + 1)] = other[at:at + rnd.randint(1, 64)]
            else:
                data = data[: rnd.randrange(len(data) + 1)]
        out.append(bytes(data))
    return out


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target_holds_on_seeds_and_mutations(name: str) -> None:
    target = TARGETS[name]
    seeds = list(target.seeds())
    assert seeds
    for data in seeds + mutations(seeds, 150, random.Random(name)):
        target.run(data)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_target_holds_on_the_empty_input(name: str) -> None:
    """libFuzzer's first input (the http target's harness once failed on it)."""
    TARGETS[name].run(b"")
