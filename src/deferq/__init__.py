"""deferq: background jobs and delayed jobs that are never lost."""

import importlib.abc
import importlib.util
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

from . import backoff
from .app import App
from .context import RunningJob, StepRetry, current_job
from .errors import (
    Backoff,
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
    "App", "Backoff", "Call", "ConfigError", "DeferqError", "Job", "JobFailed", "JobState", "JobTimeout",
    "Middleware", "MissingExtra", "PayloadError", "Priority", "Retry", "RunningJob", "SchemaOutdated",
    "Snooze", "StepRetry", "StoreFull", "StoreUnavailable", "Task", "backoff", "chain", "chord", "current_job",
    "group",
]
__version__ = "0.1.0"

# Modules that moved to a room of their own keep the names the docs give them: `import
# deferq.otel`, `deferq.otel.Tracing`, `from deferq.server.signing import verify` load the
# module where it lives now.
MOVED = {
    "deferq.otel": "deferq.contrib.otel", "deferq.alerts": "deferq.supervisor.alerts",
    "deferq.schedule": "deferq.flows.schedule", "deferq.bench": "deferq.cli.bench",
    "deferq.demo": "deferq.cli.demo", "deferq.server.signing": "deferq.server.topics.signing",
    "deferq.server.delivery": "deferq.server.topics.delivery",
    "deferq.pytest_plugin": "deferq.contrib.pytest_plugin",  # an install from before the move
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and answers with the module under its new name (the same
    object, so its classes and state are shared)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        pass  # already run under its new name


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str) -> ModuleType:
    if f"deferq.{name}" not in MOVED:
        raise AttributeError(f"module 'deferq' has no attribute {name!r}")
    return importlib.import_module(f"deferq.{name}")  # `deferq.otel.Tracing` after `import deferq`
