"""bench/steps_check.py: `deferq steps check` over 10,000 sleeping durable jobs (beside
10,000 plain ones) takes under 10 seconds on each store, for code that fits every job
and for a rename that names each one (docs/steps.md, "Safe deploys")."""

from __future__ import annotations

import pytest

from bench import steps_check

JOBS = 10_000
LIMIT = 10.0  # seconds


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "redis", "postgres", "mysql"])
def test_ten_thousand_durable_jobs_are_checked_within_ten_seconds(store, request):
    fits, renamed = steps_check.measure(request.getfixturevalue(f"{store}_url"), JOBS)
    assert fits < LIMIT and renamed < LIMIT, (fits, renamed)
