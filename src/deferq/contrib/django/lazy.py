"""The App that Django's settings describe, built on first use.

`DjangoApp` is a real `deferq.App` (so `deferq worker --app deferq.contrib.django:app`
accepts it) whose `App.__init__` runs only when something first needs it: a task
registration, an enqueue, the CLI setting its URL. Importing it before Django's
settings are configured is therefore safe.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from ...app import App
from ...worker.runner import current_job

_SETUP = threading.RLock()  # one thread builds the App; App.__init__ may re-enter
PENDING = "_deferq_django_pending"
BUSY = "_deferq_django_busy"


def settings_options() -> dict[str, Any]:
    """App keyword options from `settings.DEFERQ` (a dict; keys are App's keyword
    arguments, any case) and `settings.DEFERQ_URL`; the dict's url wins."""
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

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

    def task(self, fn: Callable[..., Any] | None = None, **options: Any) -> Any:
        """`App.task`, and a sync task run by a worker closes its thread's Django
        database connections when they are broken or past CONN_MAX_AGE, before and
        after each job, as Django does around each request."""
        register = super().task(**options)

        def register_wrapped(func: Callable[..., Any]) -> Any:
            return register(self._with_fresh_connections(func))

        return register_wrapped(fn) if fn is not None else register_wrapped

    def _with_fresh_connections(self, func: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(func):
            return func  # Django's async ORM manages its own connections
        wrappers = self.__dict__.setdefault("_deferq_django_wrappers", {})
        if func not in wrappers:  # the same function registered again keeps one wrapper

            @functools.wraps(func)
            def run(*args: Any, **kwargs: Any) -> Any:
                if current_job() is None:  # called directly, not as a job
                    return func(*args, **kwargs)
                close_old_connections()
                try:
                    return func(*args, **kwargs)
                finally:
                    close_old_connections()

            wrappers[func] = run
        return wrappers[func]


def close_old_connections() -> None:
    """django.db.close_old_connections, sparing a connection inside a transaction
    (an eager job runs in its caller's thread, perhaps inside `atomic()`)."""
    from django.db import connections

    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


def _setup_django() -> None:
    """Outside manage.py (`deferq worker --app deferq.contrib.django:app`, or the
    children of `deferq run`), nothing has called django.setup(): do it, so that
    INSTALLED_APPS' tasks.py modules are imported. Never while Django is loading."""
    from django.apps import apps

    if not apps.ready and not apps.loading:
        import django

        django.setup()
