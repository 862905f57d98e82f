"""The command line: `deferq` (root.py: the group, which loads a command's module when
that command runs; main.py: the commands; worker.py: `deferq worker`, loaded alone) and
the bodies of its commands: serve.py (`deferq serve`, `deferq token`) and scaling.py
(`serve --workers LO..HI`), run.py (`deferq run`, `deferq status`), schedules.py
(`deferq schedule`), restart.py (a worker that overran starts itself again), bench.py and
demo.py. Tables and JSON for all of them come from observe/output.py."""

from .root import main

__all__ = ["main"]
