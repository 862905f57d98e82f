"""Every process's numbers, summed from prometheus-client's multiprocess directory: what
the master of `deferq run` serves for its children, and `deferq serve --workers N` for
its processes. Imported only where prometheus-client is installed (the `metrics` and
`server` extras)."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

HEADER = 8  # bytes at the start of a file, its used length and padding, before any number


class SummedFiles(MultiProcessCollector):
    """prometheus-client's multiprocess collector, minus the files a process is creating
    at the moment of a scrape. A starting process opens its file empty and sizes it
    next; the library reads the first bytes of every file as its header, so in that
    instant the whole scrape failed (a 500, seen right after a killed child's
    replacement started). An empty file holds no numbers yet: it is left out."""

    def __init__(self, registry: CollectorRegistry | None, path: str) -> None:
        super().__init__(registry, path)  # type: ignore[no-untyped-call]
        self.directory = path

    def collect(self) -> Iterable[Any]:
        files = []
        for path in glob.glob(os.path.join(self.directory, "*.db")):
            try:
                if os.path.getsize(path) >= HEADER:
                    files.append(path)
            except FileNotFoundError:  # a dead process's live gauges, removed meanwhile
                continue
        summed: Iterable[Any] = self.merge(files, accumulate=True)  # type: ignore[no-untyped-call]
        return summed


def summed_registry(path: str) -> CollectorRegistry:
    """A registry whose collection is the sum over the directory's files."""
    registry = CollectorRegistry(auto_describe=False)
    SummedFiles(registry, path)
    return registry
