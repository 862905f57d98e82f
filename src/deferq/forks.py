"""This process's id, kept without a system call per read.

`os.getpid()` is a system call (0.2 µs, more on some VMs); the per-job paths that must
notice a fork (a child never shares its parent's sockets, threads or counts) read `pid`
here instead, which a forked child sets anew before any of its own code runs.
"""

from __future__ import annotations

import os

pid = os.getpid()


def _forked() -> None:
    global pid
    pid = os.getpid()


os.register_at_fork(after_in_child=_forked)
