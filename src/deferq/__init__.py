"""deferq: background jobs and delayed jobs that are never lost."""

from . import backoff
from .app import App
from .errors import (
    ConfigError,
    DeferqError,
    JobTimeout,
    MissingExtra,
    PayloadError,
    Retry,
    SchemaOutdated,
    StoreFull,
    StoreUnavailable,
)
from .job import Job, JobState, Priority
from .task import Call, Task
from .worker.runner import current_job

__all__ = [
    "App", "Call", "ConfigError", "DeferqError", "Job", "JobState", "JobTimeout",
    "MissingExtra", "PayloadError", "Priority", "Retry", "SchemaOutdated",
    "StoreFull", "StoreUnavailable", "Task", "backoff", "current_job",
]  # fmt: skip
__version__ = "0.1.0"
