"""deferq: background jobs and delayed jobs that are never lost."""

from . import backoff
from .app import App
from .context import current_job
from .errors import (
    ConfigError,
    DeferqError,
    JobFailed,
    JobTimeout,
    MissingExtra,
    PayloadError,
    Retry,
    SchemaOutdated,
    Snooze,
    StoreFull,
    StoreUnavailable,
)
from .job import Job, JobState, Priority
from .middleware import Middleware
from .task import Call, Task
from .workflow import chain, chord, group

__all__ = [
    "App", "Call", "ConfigError", "DeferqError", "Job", "JobFailed", "JobState", "JobTimeout",
    "Middleware", "MissingExtra", "PayloadError", "Priority", "Retry", "SchemaOutdated",
    "Snooze", "StoreFull", "StoreUnavailable", "Task", "backoff", "chain", "chord", "current_job", "group",
]  # fmt: skip
__version__ = "0.1.0"
