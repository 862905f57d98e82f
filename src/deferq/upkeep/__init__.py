"""The store's upkeep, done by one process at a time: leader.py (the one lease, kept in the
store), sweeps.py (recover expired leases, promote, purge) and service.py (`Upkeep`, which
every worker, `deferq run` master and `deferq serve` process starts, and whose leader
runs the sweeps and fires the schedules)."""

from .service import Upkeep

__all__ = ["Upkeep"]
