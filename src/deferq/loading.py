"""Finding the user's App by name ("module:attr"), for every process that starts from one:
the `deferq` commands, `deferq serve`, and the supervisor's master and its worker children.

It sits below the command line so that the server and the supervisor can load an App
without importing the CLI or click. A name that leads nowhere is a ConfigError in one
sentence; each caller reports it its own way (the CLI as a usage error, the master as a
refused config, a child as a line in the master's log).
"""

from __future__ import annotations

import importlib
import os
import sys

from .app import App
from .errors import ConfigError

APP_ENV = "DEFERQ_APP"


def load_app(spec: str | None, url: str | None = None) -> App:
    """The App that `spec` ("module:attr"; "module" means "module:app") names, or without
    a spec (nor DEFERQ_APP) a bare App with no tasks. `url`, when given, wins over the
    store URL written in the App's code: a command line or config file picks the store."""
    spec = spec or os.environ.get(APP_ENV)
    if not spec:
        return App(url)
    module_name, _, attr = spec.partition(":")
    attr = attr or "app"
    if not module_name:
        raise ConfigError(f"the app {spec!r} names no module: write it as module:attribute, e.g. tasks:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the project's own modules import
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} for the app {spec!r}: {exc}") from None
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        found = "nothing" if app is None else f"an object of type {type(app).__name__}"
        raise ConfigError(f"the app {spec!r} names {found}, not a deferq.App: name one as module:attribute")
    if url:
        app.use_url(url)
    return app
