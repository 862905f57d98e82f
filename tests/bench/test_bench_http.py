"""bench/http.py reads a store URL as deferq does."""

from __future__ import annotations

from bench.http import redis_cpu


def test_redis_cpu_reads_a_url_with_a_key_prefix(redis_url):
    assert "prefix=" in redis_url  # the suite's Redis URLs name their own key prefix
    assert redis_cpu(redis_url) > 0


def test_redis_cpu_is_not_measured_for_other_stores(tmp_path):
    assert redis_cpu(f"sqlite:///{tmp_path}/x.db") is None
