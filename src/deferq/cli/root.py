"""The `deferq` group, and what its commands share (the store options, --upkeep), light
enough for a worker process: the group imports a command's module when that command runs
or is listed, never every command's. `deferq worker` loads cli/worker.py alone; every
other command, and `deferq --help`, loads cli/main.py, which registers them all here."""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..errors import ConfigError, DeferqError
from ..loading import NO_CREATE, load_app, missing_extra, open_store
from ..observe.logs import setup_logging
from ..observe.output import say
from .run import no_create_option

if TYPE_CHECKING:
    from ..app import App

#: the commands defined outside cli/main.py, by the module that registers each on `main`
OWN_MODULES = {"worker": "deferq.cli.worker"}
ALL_COMMANDS = "deferq.cli.main"  # registers every command (imports the modules above too)


class FriendlyGroup(click.Group):
    """Turns deferq's own errors into one sentence and exit code 2, never a traceback;
    a missing optional package into the one install hint (deferq.errors.MissingExtra)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        for arg in args:  # bytes the locale cannot decode arrive as lone surrogates (PEP 383)
            try:
                arg.encode()
            except UnicodeEncodeError:
                raise click.UsageError(f"the argument {arg!r:.60} is not valid UTF-8 text", ctx) from None
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DeferqError as exc:
            click.echo(f"deferq: {exc}", err=True)
            ctx.exit(2)
        except ImportError as exc:
            hint = missing_extra(exc, f"deferq {ctx.invoked_subcommand or ''}".strip())
            if hint is None:
                raise
            click.echo(f"deferq: {hint}", err=True)
            ctx.exit(2)
        except BrokenPipeError:
            # what reads stdout left (`deferq jobs | head -1`): end quietly, as a Unix tool
            # killed by SIGPIPE does (141); stdout now goes nowhere, so the last flush at
            # exit cannot fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(141)
        except (ConnectionError, OSError) as exc:
            click.echo(f"deferq: the store cannot be reached: {exc}", err=True)
            ctx.exit(2)


class LazyGroup(FriendlyGroup):
    """The root: a command is registered when the module defining it is imported."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            importlib.import_module(OWN_MODULES.get(cmd_name, ALL_COMMANDS))
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        importlib.import_module(ALL_COMMANDS)
        return super().list_commands(ctx)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        importlib.import_module(ALL_COMMANDS)  # gives every command its epilog (main.document)
        super().format_epilog(ctx, formatter)


class MainDocumented(click.Command):
    """A command defined outside cli/main.py: its epilog (environment, example) is made
    there, by `document`, so its --help loads that module first."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        importlib.import_module(ALL_COMMANDS)
        super().format_epilog(ctx, formatter)


@click.group(cls=LazyGroup)
@click.version_option(package_name="deferq")
def main() -> None:
    """deferq: background jobs and delayed jobs that are never lost."""


APP_META = "deferq.app"  # the --app a command was given (ctx.meta), or None


def store_options(refusal: Callable[[App], str | None] = lambda app: None,
                  first: Callable[[], object] = lambda: None,
                  ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--url, --app, --no-create and logging options; passes `app` to the command. A new
    SQLite store is made and said, unless --no-create or `refusal(app)` (what forbids it).
    `first` runs before the App is loaded and the store opened (before any thread)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @click.option("--url", envvar="DEFERQ_URL", help="Store URL (default sqlite:///deferq.db).")
        @click.option("--app", "app_path", envvar="DEFERQ_APP", help="Your App, as module:attr.")
        @no_create_option
        @click.option("--log-level", default="info", show_default=True,
                      type=click.Choice(["debug", "info", "warning", "error"]))
        @click.option("--log-format", default="text", show_default=True, type=click.Choice(["text", "json"]))
        @functools.wraps(fn)
        def wrapper(url: str | None, app_path: str | None, no_create: bool, log_level: str, log_format: str,
                    **kw: Any) -> Any:
            first()
            setup_logging(log_level, log_format)
            try:
                app = load_app(app_path, url)
            except ConfigError as exc:
                raise click.UsageError(str(exc)) from None
            click.get_current_context().meta[APP_META] = app_path
            why = NO_CREATE if no_create else refusal(app)
            open_store(app, why is None, say, why or NO_CREATE)
            return fn(app, **kw)

        return wrapper

    return decorate


def command_name() -> str:
    """`deferq dead list`, however the root was invoked (`python -m deferq`, manage.py)."""
    ctx, names = click.get_current_context(), []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["deferq", *reversed(names)])


# --no-schedules is the older name of --no-upkeep: the same switch, kept for those who typed it
UPKEEP_OPTION = click.option(
    "--upkeep/--no-upkeep", "--schedules/--no-schedules", "schedules", default=True, show_default=True,
    help="Take part in the store's upkeep: one process at a time recovers expired leases, purges old "
         "results and fires the schedules.")
