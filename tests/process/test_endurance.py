"""The endurance run's pass rule (bench/endurance.py). The run itself is `make endurance`;
CI (.ci/run) runs a 3-minute slice of it after `make test`."""

from __future__ import annotations


def test_a_figure_that_keeps_growing_fails_and_a_flat_one_passes():
    """The bound (bench/endurance.py): the last third's median against the baseline's
    largest (warm-up to the first third) + a constant, its largest within 3 x the constant
    (a burst); for memory the largest x 1.2 + a constant."""
    from bench.endurance import flat

    def samples(connections: list[int], rss: list[float]) -> list[dict[str, float]]:
        return [
            {"t": 10 * n, "connections": c, "worker_rss_mb": r} for n, (c, r) in enumerate(zip(connections, rss))
        ]

    steady = flat(
        samples([3, 20, 22, 21, 22, 23, 22, 24, 22, 23], [40, 60, 61, 60, 62, 61, 63, 62, 64, 63]), 10, 90
    )
    assert steady["connections"] == {"baseline": 22, "limit": 26, "tail": 23, "ok": True}
    burst = flat(samples([3, 20, 22, 21, 22, 23, 22, 33, 22, 23], [40] * 10), 10, 90)
    assert burst["connections"]["ok"]  # one sample 11 above: a burst, not a leak
    assert steady["worker_rss_mb"]["ok"]
    leaking = flat(
        samples([3, 20, 24, 28, 32, 36, 40, 44, 48, 52], [40, 60, 70, 80, 90, 100, 110, 120, 130, 140]), 10, 90
    )
    assert not leaking["connections"]["ok"] and not leaking["worker_rss_mb"]["ok"]


def test_a_count_that_rises_late_but_stays_under_its_ceiling_passes():
    """SQLite's connections: one a thread, opened at its first use of the store, so the
    count may reach the threads' only after the baseline; above the ceiling fails."""
    from bench.endurance import flat

    def samples(connections: list[int], ceiling: int) -> list[dict[str, float]]:
        return [{"t": 10 * n, "connections": c, "connections_ceiling": ceiling} for n, c in enumerate(connections)]

    late = flat(samples([3, 20, 22, 22, 22, 24, 26, 27, 27, 27], 34), 10, 90)
    assert late["connections"] == {"baseline": 22, "limit": 34, "tail": 27, "ok": True}
    assert not flat(samples([3, 20, 22, 22, 22, 30, 33, 36, 38, 40], 34), 10, 90)["connections"]["ok"]
