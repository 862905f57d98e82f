"""Dependencies between jobs (options(after=...)): the rules every store applies.

A job that runs after others is stored BLOCKED with one edge (parent -> child) per
unfinished parent. When a parent finishes, each of its edges is taken away exactly
once, in the store's transaction (or script): the child runs when its last edge goes
and every parent succeeded (or `after_any`); a parent that went dead or was cancelled
cancels the child, naming it, and that cancel reaches the child's own children in turn.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..job import FINISHED_STATES, JobState

RELEASE, CANCEL, WAIT = "release", "cancel", "wait"


def verdict(parent_state: str | None, after_any: bool) -> str:
    """What a parent's state means for a child: WAIT while it is unfinished; else RELEASE
    (its edge goes) or CANCEL. A parent gone from the store (purged) counts as cancelled."""
    state = JobState.CANCELLED if parent_state is None else JobState(parent_state)
    if state not in FINISHED_STATES:
        return WAIT
    return RELEASE if after_any or state == JobState.SUCCEEDED else CANCEL


def reason(parent_id: str, parent_state: str | None) -> str:
    """The error of a child cancelled because of its parent."""
    return f"cancelled: job {parent_id}, which it runs after, ended {parent_state or 'purged'}"


def unknown_parent(child_id: str, parent_id: str) -> ConfigError:
    return ConfigError(f"job {child_id} runs after job {parent_id}, which is not in the store")
