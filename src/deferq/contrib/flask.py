"""Flask: an extension that binds a deferq App to the Flask app's config.

    from deferq.contrib.flask import Deferq

    deferq_ext = Deferq()

    @deferq_ext.task(queue="email")
    def send_welcome(email: str) -> None: ...

    def create_app():
        app = Flask(__name__)
        app.config["DEFERQ_URL"] = "postgresql://app@db/shop"
        deferq_ext.init_app(app)
        return app

Tasks are declared on the extension before any Flask app exists (the usual factory
pattern); `init_app` points them at the store named by `DEFERQ_URL` (else the App's
own URL: $DEFERQ_URL or sqlite:///deferq.db). The last `init_app` wins, so tests can
make one Flask app per test, each with its own store. Eager mode (memory://?eager=1)
is the extension's own: `Deferq(url="memory://?eager=1")`. The extension *is* the
deferq.App: run workers with `deferq worker --app yourmodule:deferq_ext` and the same
URL (DEFERQ_URL or --url), and call `deferq_ext.get(id)`, `.stats()` and the rest.

The store stays open for the process and is closed at exit. `DEFERQ_CLOSE_ON_TEARDOWN
= True` closes it at the end of every app context (each request) instead: for SQLite
under a server that starts a thread per request (its connections are per thread), at
the cost of reopening it in each request; never for memory://, whose jobs it would drop.
"""

from __future__ import annotations

import atexit
from typing import Any

from ..app import App
from ..errors import ConfigError

EXTENSION = "deferq"


class Deferq(App):
    """A deferq.App that a Flask app configures: `Deferq(flask_app=None, **options)`,
    `options` being App's keyword options (lease, result_ttl, ...)."""

    def __init__(self, flask_app: Any = None, **options: Any) -> None:
        super().__init__(**options)
        self._options = options
        self._closes_at_exit = False
        if flask_app is not None:
            self.init_app(flask_app)

    def init_app(self, flask_app: Any) -> None:
        url = flask_app.config.get("DEFERQ_URL")
        if url and url != self.url:
            self._rebind(url)
        flask_app.config.setdefault("DEFERQ_URL", self.url)
        flask_app.config.setdefault("DEFERQ_CLOSE_ON_TEARDOWN", False)
        flask_app.extensions[EXTENSION] = self
        flask_app.teardown_appcontext(self._teardown)
        if not self._closes_at_exit:
            atexit.register(self.close)
            self._closes_at_exit = True

    def _rebind(self, url: str) -> None:
        """Point this App (and so every task declared on it) at another store."""
        if App(url, **self._options).eager != self.eager:  # checks the URL as App does, too
            raise ConfigError(
                f"DEFERQ_URL {url!r} would change whether tasks run eagerly, which is chosen when "
                f"the extension is made: Deferq(url={url!r}) (or deferq.testing.drain in tests)"
            )
        self.close()  # the store opened for the previous Flask app, if any
        self.use_url(url)

    def _teardown(self, _exc: BaseException | None) -> None:
        from flask import current_app

        if current_app.config.get("DEFERQ_CLOSE_ON_TEARDOWN"):
            self.close()
