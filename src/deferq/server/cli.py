"""`deferq serve` and `deferq token`: the bodies of the commands cli.py registers."""

from __future__ import annotations

import os
import shutil
import tempfile

import click

from .config import ENV
from .config import ServerConfig as ServerConfig  # re-exported: cli.py imports it from here


def parse_queue_limits(values: tuple[str, ...]) -> dict[str, int]:
    limits = {}
    for value in values:
        queue, _, number = value.partition("=")
        if not queue or not number.isdigit():
            raise click.BadParameter(f"{value!r} must look like QUEUE=NUMBER, e.g. email=10000",
                                     param_hint="--queue-limit")  # fmt: skip
        limits[queue] = int(number)
    return limits


def serve(config: ServerConfig, host: str, port: int, workers: int) -> None:
    """Run the API on uvicorn; several processes share the port with --workers."""
    import uvicorn

    from .metrics import MULTIPROCESS_ENV

    if workers < 1:
        raise click.BadParameter("must be at least 1", param_hint="--workers")
    if not config.auth:
        click.echo("deferq: --no-auth: every route is open to anyone who can connect", err=True)
    os.environ[ENV] = config.to_env()
    metrics_dir = None
    if workers > 1 and not os.environ.get(MULTIPROCESS_ENV):
        metrics_dir = tempfile.mkdtemp(prefix="deferq-metrics-")  # counters of all processes
        os.environ[MULTIPROCESS_ENV] = metrics_dir
    try:
        uvicorn.run("deferq.server.app:create_app_from_env", factory=True, host=host, port=port,
                    workers=workers, access_log=False, log_level="warning",
                    server_header=False, date_header=False)  # fmt: skip
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def create_token(backend: object, scope: str, note: str) -> None:
    from . import auth

    token, record = auth.create(backend, scope, note)  # type: ignore[arg-type]
    click.echo(token)
    click.echo(f"(id {record['id']}, scope {scope}: shown once, keep it safe)", err=True)
