"""`deferq serve` and `deferq token`: the bodies of the commands main.py registers."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from typing import Any

import click

from ..errors import DeferqError
from ..loading import check_new_store, load_app, open_store, require
from ..observe.output import safe_url, say
from ..server.http.config import ENV
from ..server.http.config import ServerConfig as ServerConfig  # re-exported: main.py imports it from here
from ..server.http.sameorigin import is_loopback


def parse_queue_limits(values: tuple[str, ...]) -> dict[str, int]:
    limits = {}
    for value in values:
        queue, _, number = value.partition("=")
        if not queue or not number.isdigit():
            raise click.BadParameter(f"{value!r} must look like QUEUE=NUMBER, e.g. email=10000",
                                     param_hint="--queue-limit")
        limits[queue] = int(number)
    return limits


def check_no_auth(no_auth: bool, host: str, beyond_loopback: bool, allowed_hosts: tuple[str, ...]) -> list[str]:
    """The Host names a server without auth answers besides loopback ones; refuses, in
    one sentence, --no-auth on an address that is not loopback unless told so."""
    if not no_auth:
        if allowed_hosts:
            raise click.BadParameter("only means something with --no-auth (tokens protect the API otherwise)",
                                     param_hint="--allowed-host")
        return []
    if is_loopback(host.strip("[]")):
        return list(allowed_hosts)
    if not beyond_loopback:
        raise click.UsageError(
            f"--no-auth opens every route to anyone who can connect, so it listens on loopback only "
            f"(--host 127.0.0.1, ::1 or localhost), not on {host}: to serve without auth there "
            f"anyway, add --no-auth-beyond-loopback")
    # the address listened on is a name clients may use; every interface is no name
    return [*allowed_hosts, *([] if host in ("0.0.0.0", "::") else [host])]


SERVER_APP = "deferq.server.app:create_app_from_env"  # each server process builds its app from ENV


def parse_workers(value: str) -> tuple[int, int]:
    """--workers N or LO..HI: the fewest and the most server processes."""
    low, dots, high = value.partition("..")
    if not (low.strip().isdigit() and (not dots or high.strip().isdigit())):
        raise click.BadParameter(f"{value!r} must be a number of processes (4) or a range (2..8)",
                                 param_hint="--workers")
    fewest, most = int(low), int(high) if dots else int(low)
    if fewest < 1:
        raise click.BadParameter("must be at least 1", param_hint="--workers")
    if most < fewest:
        raise click.BadParameter(f"{value!r}: a range's top must be at least its bottom", param_hint="--workers")
    return fewest, most


def check_overload(overload: str, max_inflight: int | None, max_waiting: int | None, max_wait: float | None,
                   processes: tuple[int, int]) -> None:
    """Refuse, in one sentence, overload settings that would mean nothing."""
    if overload == "shed-oldest" and (max_inflight is None or max_waiting is None):
        raise click.UsageError("--overload shed-oldest needs --max-inflight (the requests answered at once) "
                               "and --max-waiting (the requests kept waiting past it)")
    if overload == "refuse" and (max_waiting is not None or max_wait is not None):
        raise click.UsageError("--max-waiting and --max-wait only mean something with --overload shed-oldest "
                               "(refuse answers busy at once)")
    if processes[1] > processes[0] and max_inflight is None:
        raise click.UsageError("--workers LO..HI grows the processes while requests wait or are refused past "
                               "--max-inflight: give --max-inflight too")


def serve(config: ServerConfig, host: str, port: int, workers: tuple[int, int], create: bool = True,
          calm: float = 30.0) -> None:
    """Run the API on uvicorn; several processes share the port with --workers (a range
    grows and shrinks them: scaling.py). Says where it listens, the dashboard's address
    and whether auth is on, once the port is free."""
    require("starlette", "uvicorn", "httpx", "prometheus_client", needed_by="deferq serve")
    import uvicorn

    from ..server.process.metrics import MULTIPROCESS_ENV

    app = load_app(config.app_path, config.url)  # a wrong --app is one sentence here, not in uvicorn
    check_new_store(app.url, create)
    try:
        open_store(app, True, say)
    except (DeferqError, OSError) as exc:  # the service starts anyway and answers 503 meanwhile
        say(f"the store cannot be opened now ({exc}): the API answers 503 until it can")
    finally:
        app.close()
    check_address(host, port)
    for line in announce(config, host, port, workers, app.url):
        say(line)
    os.environ[ENV] = config.to_env()
    metrics_dir = None
    if workers[1] > 1 and not os.environ.get(MULTIPROCESS_ENV):
        metrics_dir = tempfile.mkdtemp(prefix="deferq-metrics-")  # counters of all processes
        os.environ[MULTIPROCESS_ENV] = metrics_dir
    settings: dict[str, Any] = dict(factory=True, host=host, port=port, workers=workers[0], access_log=False,
                                    log_level="warning", server_header=False, date_header=False)
    try:
        if workers[0] == workers[1]:
            uvicorn.run(SERVER_APP, **settings)
        else:
            from .scaling import run_scaled

            run_scaled(uvicorn.Config(SERVER_APP, **settings), workers, os.environ[MULTIPROCESS_ENV], calm)
    finally:
        if metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def check_address(host: str, port: int) -> None:
    """Refuse, in one sentence, an address the server could not listen on."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise click.BadParameter(f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                                     param_hint="--host/--port") from None


def announce(config: ServerConfig, host: str, port: int, workers: tuple[int, int], url: str) -> list[str]:
    """What `deferq serve` says when it starts."""
    shown = f"[{host}]" if ":" in host else host
    local = {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, shown)  # where a browser here finds it
    anywhere = " (every interface)" if host in ("0.0.0.0", "::") else ""
    fewest, most = workers
    processes = (f"{fewest} to {most} processes (more while requests wait)" if most > fewest
                 else f"{most} processes" if most > 1 else "1 process")
    auth = ("auth on: the API and the console need a token; sign in to the console with one from "
            "`deferq token create --scope reader` (looks only; producer writes jobs, admin does everything)"
            if config.auth
            else "auth OFF (--no-auth): every route is open to anyone who can connect; requests from "
                 "other web pages and other host names are refused")
    return [
        f"serving on http://{shown}:{port}{anywhere}, {processes}",
        f"store {safe_url(url)}",
        f"console http://{local}:{port}/dashboard/, metrics http://{local}:{port}/metrics",
        auth,
    ]


def create_token(backend: object, scope: str, note: str) -> None:
    from ..server.http import auth

    token, record = auth.create(backend, scope, note)  # type: ignore[arg-type]
    click.echo(token)
    click.echo(f"(id {record['id']}, scope {scope}: shown once, keep it safe)", err=True)
