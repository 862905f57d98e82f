"""bench/encryption.py's store rounds on SQLite: both modes each round, the text index's
upkeep left out only inside its own runs (the class is as it was afterwards), and every
job run (one_round asserts it)."""

from __future__ import annotations

import pytest

from bench import encryption
from deferq.backends.sql.sqlite import SQLiteBackend

pytestmark = pytest.mark.timeout(120)


def test_the_rounds_give_both_modes_and_leave_the_text_index_as_it_was(tmp_path, capsys):
    real = SQLiteBackend.index_text_plan
    figures, unindexed = encryption.store_rounds("sqlite", 2, 20, str(tmp_path))
    assert SQLiteBackend.index_text_plan is real
    assert [len(figures[mode]) for mode in (False, True)] == [2, 2]
    assert [len(unindexed[mode]) for mode in (False, True)] == [2, 2]
    assert all(value > 0 for mode in (False, True) for row in figures[mode] for value in row)
    encryption.show("worker CPU µs/job", figures, 2)
    assert "adds" in capsys.readouterr().out
