"""`python manage.py deferq worker|run|stats|...`: deferq's command line, with Django
set up and the settings' App selected (`--app` or DEFERQ_APP still choose another)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError  # type: ignore[import-untyped]

SETTINGS_APP = "deferq.contrib.django:app"
DJANGO_GLOBAL_OPTIONS = ("--settings", "--pythonpath")  # manage.py has applied them already


def run_cli(args: list[str], prog_name: str, *, standalone: bool) -> Any:
    """The `deferq` command on `args`. The App comes to its `--app` through DEFERQ_APP, which
    the processes it starts (`deferq run`'s workers) inherit with DJANGO_SETTINGS_MODULE."""
    from deferq.cli import main

    os.environ.setdefault("DEFERQ_APP", SETTINGS_APP)
    return main.main(args=args, prog_name=prog_name, standalone_mode=standalone)


def without_django_options(args: list[str]) -> list[str]:
    kept: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
        elif arg in DJANGO_GLOBAL_OPTIONS:
            skip_value = True
        elif not arg.startswith(tuple(f"{option}=" for option in DJANGO_GLOBAL_OPTIONS)):
            kept.append(arg)
    return kept


class Command(BaseCommand):  # type: ignore[misc]
    help = "deferq's command line (worker, run, stats, job, dead, ...) with this project's tasks."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, help="a deferq command and its options")

    def run_from_argv(self, argv: list[str]) -> None:
        """From manage.py: click parses everything after `deferq` and exits itself."""
        if os.path.isfile(argv[0]):
            # The worker processes `deferq run` starts import the project from anywhere.
            project = os.path.dirname(os.path.abspath(argv[0]))
            paths = [project, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
            os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        prog_name = f"{os.path.basename(argv[0])} {argv[1]}"
        run_cli(without_django_options(argv[2:]), prog_name, standalone=True)

    def handle(self, *args: str, **options: Any) -> None:
        """From call_command("deferq", "stats", "--json"): errors become CommandError.
        (`worker` ends its process when it stops, as it does from a shell.)"""
        import click

        try:
            run_cli(list(args), "deferq", standalone=False)
        except click.exceptions.Exit as done:
            if done.exit_code:
                raise CommandError(f"deferq exited with code {done.exit_code}") from None
        except click.ClickException as exc:
            raise CommandError(exc.format_message()) from None
        finally:
            sys.stdout.flush()
