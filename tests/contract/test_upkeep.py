"""The store's upkeep on every store: one leader sweeps, the others only watch its lease,
and the next one takes over (and sweeps at once) when that lease runs out."""

from __future__ import annotations

from deferq.backends.base import Outcome
from deferq.job import JobState
from deferq.upkeep import Upkeep
from deferq.upkeep.leader import current_leader
from tests.contract.test_contract import reserve, wait_until


def test_only_the_leader_sweeps_and_the_next_takes_over_after_its_lease(app, backend):
    first, second = Upkeep(app, "first", lease=0.6), Upkeep(app, "second", lease=0.6)
    first.step()
    second.step()
    assert (first.leading, second.leading, current_leader(backend)) == (True, False, "first")
    job = app.enqueue("noop", [0], max_attempts=3)
    lost = reserve(backend, lease=0.2, worker="crashed")[0]
    # the job's lease runs out while `first` leads and `second` steps: only a leader sweeps
    assert wait_until(lambda: first.step() > 0 and second.step() > 0 and backend.now() > (lost.lease_until or 0))
    assert app.get(job.id).state == JobState.ACTIVE  # `second` swept nothing
    # `first` dies (steps no more): `second` leads once the lease has run out, and sweeps at once
    assert wait_until(lambda: second.step() > 0 and second.leading, timeout=5)
    assert current_leader(backend) == "second"
    recovered = app.get(job.id)
    assert (recovered.state, recovered.attempts) == (JobState.QUEUED, 1)
    first.step()
    assert not first.leading  # a leader that froze past its lease wakes as a follower
    second.leader.release()
    assert current_leader(backend) is None


def test_a_leader_purges_finished_jobs_past_the_result_retention(app, backend):
    app.result_ttl = 0.0
    job = app.enqueue("noop", [0])
    done = reserve(backend)[0]
    assert backend.settle([Outcome(done, "succeeded")]) == [True]
    assert wait_until(lambda: backend.now() > (app.get(job.id).finished_at or backend.now()))
    upkeep = Upkeep(app, "one", lease=0.6)
    upkeep.step()
    assert upkeep.leading and app.get(job.id) is None
