"""`deferq run` (the master) and `deferq status`; registered on the main group in deferq/cli.py."""

from __future__ import annotations

import os
import sys

import click

from ..logs import setup_logging

LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"])


@click.command("run")
@click.option("--config", "config_path", default="deferq.toml", show_default=True,
              help="The supervisor's TOML file.")  # fmt: skip
@click.option("--app", "app_path", default=None, help="Your App as module:attr (wins over the file).")
@click.option("--url", default=None, help="Store URL (wins over the file).")
@click.option("--log-level", default="info", show_default=True, type=LOG_LEVELS)
@click.option("--log-format", default="text", show_default=True, type=click.Choice(["text", "json"]))
def run_command(config_path: str, app_path: str | None, url: str | None, log_level: str, log_format: str) -> None:
    """Run the supervisor: a master process that keeps pools of worker processes."""
    from .config import load_config
    from .master import Master

    setup_logging(log_level, log_format)
    config = load_config(config_path)
    config = config.with_overrides(
        app_path or config.app or os.environ.get("DEFERQ_APP"),
        url or config.url or os.environ.get("DEFERQ_URL"),
    )
    code = Master(config, log_level, log_format).run()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)


@click.command("status")
@click.option("--url", default=None, help="Store URL (default: DEFERQ_URL, or the config file's).")
@click.option("--config", "config_path", default=None, help="Read the store URL from this file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status_command(url: str | None, config_path: str | None, as_json: bool) -> None:
    """Masters, pools, children, and what each child is running."""
    from ..app import App
    from ..output import print_json
    from .config import load_config
    from .status import collect_status, render_status

    if url is None and config_path is not None:
        url = load_config(config_path).url
    app = App(url or os.environ.get("DEFERQ_URL"))
    try:
        report = collect_status(app.backend)
    finally:
        app.close()
    if as_json:
        print_json(report)
        return
    for line in render_status(report):
        click.echo(line)
