"""The command line: `deferq` (main.py) and the bodies of its commands: serve.py (`deferq
serve`, `deferq token`), run.py (`deferq run`, `deferq status`), bench.py, demo.py, and
output.py (tables and JSON for all of them)."""

from .main import main

__all__ = ["main"]
