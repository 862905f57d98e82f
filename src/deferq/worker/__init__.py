"""The consuming side: run jobs, settle their outcomes, keep leases alive."""

from .worker import Worker, WorkerConfig

__all__ = ["Worker", "WorkerConfig"]
