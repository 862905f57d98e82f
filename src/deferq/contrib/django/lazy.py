"""The App that Django's settings describe, built on first use.

`DjangoApp` is a real `deferq.App` (so `deferq worker --app deferq.contrib.django:app`
accepts it) whose `App.__init__` runs only when something first needs it: a task
registration, an enqueue, the CLI setting its URL. Importing it before Django's
settings are configured is therefore safe.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from ...app import App
from ...backends.base import Outcome
from ...job import Job
from ...middleware import Middleware
from ...task import Call

log = logging.getLogger("deferq.django")

_SETUP = threading.RLock()  # one thread builds the App; App.__init__ may re-enter
PENDING = "_deferq_django_pending"
BUSY = "_deferq_django_busy"


def settings_options() -> dict[str, Any]:
    """App keyword options from `settings.DEFERQ` (a dict; keys are App's keyword
    arguments, any case) and `settings.DEFERQ_URL`; the dict's url wins."""
    from django.conf import settings  # type: ignore[import-untyped]
    from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped]

    given = getattr(settings, "DEFERQ", None) or {}
    if not isinstance(given, dict):
        raise ImproperlyConfigured(
            f"settings.DEFERQ must be a dict of deferq.App options, got {type(given).__name__}"
        )
    options = {str(name).lower(): value for name, value in given.items()}
    if options.get("url") is None:
        options["url"] = getattr(settings, "DEFERQ_URL", None)
    return options


class DjangoApp(App):
    """`deferq.App(**settings_options())`, built on first attribute access."""

    def __init__(self, load_options: Callable[[], dict[str, Any]] = settings_options) -> None:
        # App.__init__ is deferred: see _setup. Nothing else may be set here.
        self.__dict__[PENDING] = load_options

    def _setup(self) -> bool:
        """Build the App now if it is still pending. False while this very thread is
        building it (App.__init__ reading an attribute it has not set yet)."""
        with _SETUP:
            if self.__dict__.get(BUSY):
                return False
            load = self.__dict__.get(PENDING)
            if load is None:
                return True
            self.__dict__[BUSY] = True
            try:
                App.__init__(self, **load())
                self.add_middleware(CloseOldConnections())
                # every enqueue of this App (task.enqueue, app.enqueue_many) stores through its runtime
                stores = self.runtime.enqueue_many
                self.runtime.enqueue_many = partial(warned_enqueue, self, stores)  # type: ignore[method-assign]
                del self.__dict__[PENDING]
            finally:
                del self.__dict__[BUSY]
        _setup_django()  # outside the lock: it imports tasks.py modules, which use this App
        return True

    def __getattr__(self, name: str) -> Any:
        # Only for attributes not set yet: everything App.__init__ would have set.
        if name.startswith("__") or PENDING not in self.__dict__ or not self._setup():
            raise AttributeError(name)
        return getattr(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if PENDING in self.__dict__:
            self._setup()  # `deferq --url` sets app.url: the settings must not overwrite it later
        super().__setattr__(name, value)

    def __repr__(self) -> str:
        if PENDING in self.__dict__:
            return "<deferq.App from Django settings, not built yet>"
        return super().__repr__()



_warned = threading.Event()  # the warning below is given once per process


def warned_enqueue(app: App, enqueue_many: Callable[[list[Call]], list[Job]], calls: Iterable[Call]) -> list[Job]:
    """The runtime's enqueue_many, after `warn_outside_transaction` (not for an eager App:
    its job runs here, inside the transaction, so nothing is lost)."""
    calls = calls if type(calls) is list else list(calls)
    if not app.eager:
        warn_outside_transaction(calls)
    return enqueue_many(calls)


def warn_outside_transaction(calls: list[Call]) -> None:
    """A plain enqueue inside the caller's `atomic()` block is not part of it: the job
    is stored at once, kept if the transaction rolls back and perhaps run before it
    commits (on rows the worker cannot see yet). Say so once, naming enqueue_on_commit.
    Not for a call given a connection (enqueue_on_commit's own, or the caller's), nor
    inside the atomic blocks Django's TestCase wraps each test in."""
    plain = [call for call in calls if isinstance(call, Call) and call.options.connection is None]
    if _warned.is_set() or not plain:
        return
    from django.db import connections  # type: ignore[import-untyped]

    for connection in connections.all(initialized_only=True):
        if any(not getattr(block, "_from_testcase", False) for block in connection.atomic_blocks):
            _warned.set()
            log.warning(
                "%s.enqueue() inside transaction.atomic() (database %r) is not part of the transaction: "
                "the job is stored now, kept if the transaction rolls back, and may run before it "
                "commits. Use deferq.contrib.django.enqueue_on_commit(task, ...) to enqueue with the "
                "commit (said once per process)", plain[0].task, connection.alias)
            return


class CloseOldConnections(Middleware):
    """Around each sync job, close this thread's Django database connections that are
    broken or older than CONN_MAX_AGE, as Django does around each request; a worker
    thread would otherwise keep a dead connection after a database restart. Spares
    a connection inside a transaction (an eager job runs in its caller's thread, perhaps
    inside `atomic()`), and the event loop's thread (async tasks use Django's async
    ORM, and sync database calls are refused there)."""

    def before_run(self, job: Job) -> None:
        close_old_connections()

    def after_run(self, job: Job, outcome: Outcome, exc: BaseException | None) -> None:
        close_old_connections()


def close_old_connections() -> None:
    try:
        asyncio.get_running_loop()
        return
    except RuntimeError:
        pass
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def _setup_django() -> None:
    """Outside manage.py (`deferq worker --app deferq.contrib.django:app`, or the
    children of `deferq run`), nothing has called django.setup(): do it, so that
    INSTALLED_APPS' tasks.py modules are imported. Never while Django is loading."""
    from django.apps import apps  # type: ignore[import-untyped]

    if not apps.ready and not apps.loading:
        import django  # type: ignore[import-untyped]

        django.setup()


#: The App described by settings.DEFERQ / settings.DEFERQ_URL, built on first use
#: (re-exported as deferq.contrib.django.app).
app = DjangoApp()
