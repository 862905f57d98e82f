"""`python -m deferq ...` is the `deferq` command."""

from .cli.main import main

main()
