"""deferq: background jobs and delayed jobs that are never lost."""

from . import backoff
from .app import App
from .chunks import Chunk, ChunkFailed
from .context import RunningJob, StepRetry, current_job
from .encryption import Encryption
from .errors import (
    Backoff,
    ChildFailed,
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
from .flows.chains import chain, chord, group
from .job import Job, JobState, Priority
from .middleware import Middleware
from .task import Call, Task

__all__ = [
    "App", "Backoff", "Call", "ChildFailed", "Chunk", "ChunkFailed", "ConfigError", "DeferqError", "Encryption",
    "Job", "JobFailed", "JobState", "JobTimeout", "Middleware", "MissingExtra", "PayloadError", "Priority",
    "Retry", "RunningJob", "SchemaOutdated", "Snooze", "StepRetry", "StoreFull", "StoreUnavailable", "Task",
    "backoff", "chain", "chord", "current_job", "group",
]
__version__ = "0.1.0"

