"""`deferq run` (the master) and `deferq status`; registered on the main group in deferq/cli/main.py."""

from __future__ import annotations

import os
import sys

import click

from ..observe.logs import setup_logging

LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"])

#: `--no-create` of every command that opens a store (deferq/cli/main.py uses it too)
no_create_option = click.option(
    "--no-create", is_flag=True,
    help="Refuse a sqlite:/// file that does not exist, instead of creating a new store.",
)


@click.command("run")
@click.option("--config", "config_path", default="deferq.toml", show_default=True,
              help="The supervisor's TOML file.")
@click.option("--app", "app_path", default=None, help="Your App as module:attr (wins over the file).")
@click.option("--url", default=None, help="Store URL (wins over the file).")
@no_create_option
@click.option("--log-level", default="info", show_default=True, type=LOG_LEVELS)
@click.option("--log-format", default="text", show_default=True, type=click.Choice(["text", "json"]))
def run_command(config_path: str, app_path: str | None, url: str | None, no_create: bool, log_level: str,
                log_format: str) -> None:
    """Run the supervisor: a master process that keeps pools of worker processes."""
    from ..loading import check_new_store, created_store
    from ..observe.output import say
    from ..supervisor.config import load_config
    from ..supervisor.master import Master, load_supervised_app

    setup_logging(log_level, log_format)
    config = load_config(config_path)
    config = config.with_overrides(
        app_path or config.app or os.environ.get("DEFERQ_APP"),
        url or config.url or os.environ.get("DEFERQ_URL"),
    )
    new = check_new_store(load_supervised_app(config).url, not no_create)
    master = Master(config, log_level, log_format)  # opens the store
    if new is not None:
        say(created_store(new))
    code = master.run()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


@click.command("status")
@click.option("--url", default=None, help="Store URL (default: DEFERQ_URL, or the config file's).")
@click.option("--config", "config_path", default=None, help="Read the store URL from this file.")
@no_create_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times as epoch seconds).")
def status_command(url: str | None, config_path: str | None, no_create: bool, as_json: bool) -> None:
    """Masters, pools, children, and what each child is running."""
    from ..app import App
    from ..loading import open_store
    from ..observe.output import print_json, say
    from ..supervisor.config import load_config
    from ..supervisor.status import collect_status, render_status

    if url is None and config_path is not None:
        url = load_config(config_path).url
    app = App(url or os.environ.get("DEFERQ_URL"))
    try:
        open_store(app, False, say, "deferq status works on an existing store and makes none")
        report = collect_status(app.backend)
    finally:
        app.close()
    if as_json:
        print_json(report)
        return
    for line in render_status(report):
        click.echo(line)
