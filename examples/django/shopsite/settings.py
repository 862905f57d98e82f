"""Settings of the example shop: Django and deferq in one database.

DATABASE_URL picks Django's database: sqlite:///shop.sqlite3 (the default),
postgresql://user@host/db (with ?schema=NAME for a schema of its own) or
mysql://user@host/db. deferq keeps its jobs in that same database when it is
PostgreSQL or MySQL, so `enqueue_on_commit` writes each job in the view's own
transaction; DEFERQ_URL puts them elsewhere (then they wait for the commit).
"""

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "an example, not a secret"
DEBUG = True
ALLOWED_HOSTS = ["*"]
INSTALLED_APPS = ["deferq.contrib.django", "shop"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "shopsite.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def database(url: str) -> dict:
    """A DATABASES entry from a URL (only what this example needs)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.split(":///", 1)[1]}
    options = {}
    if parts.scheme == "postgresql":
        schema = parse_qs(parts.query).get("schema")
        if schema:  # Django's tables beside deferq's, in that schema
            options["options"] = f"-c search_path={schema[0]}"
    elif parts.scheme == "mysql":
        from deferq.contrib.django import use_pymysql

        # PyMySQL as Django's MySQL driver: deferq writes jobs on PyMySQL connections,
        # so enqueue_on_commit can use Django's own connection and transaction.
        use_pymysql()
    else:
        raise ValueError(f"this example knows sqlite, postgresql and mysql URLs, not {url!r}")
    return {
        "ENGINE": f"django.db.backends.{parts.scheme}",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": parts.username or "",
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": parts.port or "",
        "OPTIONS": options,
    }


DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'shop.sqlite3'}")
DATABASES = {"default": database(DATABASE_URL)}

DEFERQ = {
    "url": os.environ.get("DEFERQ_URL")
    or (f"sqlite:///{BASE_DIR / 'deferq.db'}" if DATABASE_URL.startswith("sqlite") else DATABASE_URL),
    "lease": 30,
}
