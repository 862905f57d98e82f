"""bench.schedules runs: the next-tick cost of each kind, and a small fleet of schedules
on two plain workers, each tick fired once."""

from __future__ import annotations

import re

import pytest

from bench import schedules


def test_the_cost_part_measures_every_kind():
    lines = schedules.costs()
    assert len(lines) == len(schedules.KINDS) + 1
    means = [float(re.search(r"([\d.]+) /", line)[1]) for line in lines[1:]]
    assert all(mean < 5_000 for mean in means), lines  # loose: microseconds of CPU; the numbers are the bench's


@pytest.mark.slow
def test_a_small_fleet_fires_each_tick_once(tmp_path):
    said = schedules.fleet(f"sqlite:///{tmp_path}/b.db", 20, 10.0, tmp_path)
    assert re.match(r"20 schedules, 2 workers, 10 s: 40 ticks of 40 expected, 0 doubled", said[0]), said
