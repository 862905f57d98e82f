"""`python -m deferq ...` is the `deferq` command."""

from .cli import main

main()
