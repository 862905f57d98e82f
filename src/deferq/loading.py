"""Finding the user's App by name ("module:attr"), for every process that starts from one:
the `deferq` commands, `deferq serve`, and the supervisor's master and its worker children.

It sits below the command line so that the server and the supervisor can load an App
without importing the CLI or click. A name that leads nowhere is a ConfigError in one
sentence; each caller reports it its own way (the CLI as a usage error, the master as a
refused config, a child as a line in the master's log).

Also here, for the same callers: the optional packages deferq imports and the extra that
installs each (`require`, `missing_extra`: one install hint everywhere), and whether a
sqlite:/// store exists yet (`sqlite_file`, `new_sqlite_file`).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from .app import App
from .encryption import Encryption
from .errors import ConfigError, MissingExtra

APP_ENV = "DEFERQ_APP"

# Optional packages by the extra of pyproject.toml that installs them.
EXTRAS = {
    "starlette": "server", "uvicorn": "server", "httpx": "server", "prometheus_client": "server",
    "redis": "redis", "hiredis": "redis", "psycopg": "postgres", "psycopg_pool": "postgres",
    "pymysql": "mysql",
}


def require(*modules: str, needed_by: str) -> None:
    """Import each optional module, or raise MissingExtra naming the extra to install."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise missing_extra(exc, needed_by) or exc from None


def missing_extra(exc: ImportError, needed_by: str) -> MissingExtra | None:
    """The install hint for an ImportError of an optional package; None for any other."""
    if isinstance(exc, MissingExtra):
        return exc
    top = (exc.name or "").partition(".")[0]
    return MissingExtra(EXTRAS[top], top, needed_by) if top in EXTRAS else None


def sqlite_file(url: str) -> Path | None:
    """The file a sqlite:/// URL names (absolute); None for :memory:, a temporary database
    (sqlite:///) and every other store."""
    if urlsplit(url).scheme.lower() != "sqlite":
        return None
    rest = url.split("://", 1)[1].split("?", 1)[0]
    path = rest[1:] if rest.startswith("/") else rest  # sqlite:///relative, sqlite:////absolute
    return None if not path or path == ":memory:" else Path(path).absolute()


def new_sqlite_file(url: str) -> Path | None:
    """The file a sqlite:/// URL names when it does not exist yet (opening the store will
    create it); None for an existing file, :memory: and every other store."""
    path = sqlite_file(url)
    return None if path is None or path.exists() else path


NO_CREATE = "the file does not exist and --no-create forbids making it"
NEARBY = "deferq*.db"  # the stores a person who named a missing one may have meant


def check_new_store(url: str, create: bool, why: str = NO_CREATE) -> Path | None:
    """The SQLite file `url` would create, refused (ConfigError) when `create` is false:
    `why` says what forbids it, and the stores nearby are named."""
    new = new_sqlite_file(url)
    if new is not None and not create:
        raise ConfigError(f"no store at {new}: {why} (check --url or DEFERQ_URL){did_you_mean(new)}")
    return new


def did_you_mean(missing: Path) -> str:
    """"; did you mean sqlite:///deferq-demo.db?" for the deferq*.db files in the working
    directory and beside `missing`; "" when there are none."""
    here = Path.cwd()
    found = {*here.glob(NEARBY), *(missing.parent.glob(NEARBY) if missing.parent.is_dir() else ())}
    urls = [f"sqlite:///{p.relative_to(here) if p.is_relative_to(here) else p}"
            for p in sorted(found) if p.absolute() != missing]
    return f"; did you mean {' or '.join(urls[:3])}?" if urls else ""


def created_store(path: Path) -> str:
    return f"created a new store at {path}{did_you_mean(path)}"


def open_store(app: App, create: bool, say: Callable[[str], None], why: str = NO_CREATE) -> None:
    """Open the App's store now when it is a SQLite file that does not exist yet, and `say`
    that it was created; with `create` false, refuse instead (`why`: what forbids it).
    Other stores open on first use."""
    new = check_new_store(app.url, create, why)
    if new is not None:
        app.backend  # noqa: B018 - opening creates the file
        say(created_store(new))


def where_imports_come_from() -> str:
    """Where Python looked for the app's own module, and how to point it there."""
    path = os.environ.get("PYTHONPATH") or "not set"
    return (f"; Python looks for it in the working directory ({os.getcwd()}) and on PYTHONPATH ({path}): "
            "start deferq in your project's directory, or set PYTHONPATH to that directory")


def load_app(spec: str | None, url: str | None = None) -> App:
    """The App that `spec` ("module:attr"; "module" means "module:app") names, or without
    a spec (nor DEFERQ_APP) a bare App with no tasks. `url`, when given, wins over the
    store URL written in the App's code: a command line or config file picks the store."""
    spec = spec or os.environ.get(APP_ENV)
    if not spec:
        return with_env_keys(App(url))
    module_name, _, attr = spec.partition(":")
    attr = attr or "app"
    if not module_name:
        raise ConfigError(f"the app {spec!r} names no module: write it as module:attribute, e.g. tasks:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the project's own modules import
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        own = f"{module_name}.".startswith(f"{exc.name or ''}.")  # the app's own module (or package) is missing
        extra = missing_extra(exc, f"the app {spec!r}")
        if extra is not None and not own:
            raise extra from None
        where = where_imports_come_from() if own else ""
        raise ConfigError(f"cannot import {module_name!r} for the app {spec!r}: {exc}{where}") from None
    app = getattr(module, attr, None)
    if not isinstance(app, App):
        found = "nothing" if app is None else f"an object of type {type(app).__name__}"
        raise ConfigError(f"the app {spec!r} names {found}, not a deferq.App: name one as module:attribute")
    if url:
        app.use_url(url)
    return with_env_keys(app)


def with_env_keys(app: App) -> App:
    """`app` given the encryption keys of DEFERQ_ENCRYPTION_KEYS, when set: they replace the
    keys its code gives; an App that declares no encryption encrypts every task's jobs with
    them (but those declared encrypt=False), as `Encryption(keys)` would (docs/encryption.md)."""
    found = Encryption.from_env()
    if found.has_keys:
        declared = app.encryption
        app.use_encryption(declared.with_keys(found) if declared is not None else found)
    return app
