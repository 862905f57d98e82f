"""bench.children runs: a small fan-out on SQLite says how long the gather took, how late
its parent resumed and how many times it ran (twice: its first run and one wake-up)."""

from __future__ import annotations

import re

from bench import children


def test_a_small_fan_out_reports_its_figures(tmp_path, capsys):
    children.main(f"sqlite:///{tmp_path}/b.db", 200, 4)
    said = capsys.readouterr().out
    assert re.search(r"1 parent of 200 children: its gather stored them in [\d.]+ s, resumed \d+ ms after the "
                     r"last child ended, ran 2 times", said), said
    assert said.count("runs a parent 2.00") == 2, said
