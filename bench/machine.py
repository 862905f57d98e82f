"""Where and under what load a figure was measured.

The machine is named once, at the top of a benchmark's output; the 1-minute load
average is read at the start and at the end of each figure's measurement and the
higher of the two printed beside the figure (over several runs, the highest). A ratio
measured while that load was above 1 is still printed, but marked: on a shared machine
a library's cost per job and a raw loop's do not rise alike under contention, so such
a ratio is no quiet-machine figure.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterable
from types import TracebackType

QUIET = 1.0  # the highest 1-minute load average at which a ratio counts as quiet
MARK = "*"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def describe() -> str:
    """The machine in one phrase: cores, CPU model, Python."""
    return f"{os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}"


def now() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


class Load:
    """`with Load() as load: ...`; then `load.value` is the higher of the 1-minute load
    averages read on entering and on leaving."""

    def __init__(self) -> None:
        self.value = 0.0

    def __enter__(self) -> Load:
        self.value = now()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.value = max(self.value, now())


def quiet(load: float) -> bool:
    return load <= QUIET


def ratio(value: float, load: float) -> str:
    """A ratio as printed: two decimals and an x, marked when measured above load 1."""
    return f"{value:.2f}x" + ("" if quiet(load) else MARK)


def footnote(loads: Iterable[float]) -> list[str]:
    """The footnote a table with marked ratios ends with (none when every load was quiet)."""
    loud = [load for load in loads if not quiet(load)]
    if not loud:
        return []
    low, high = min(loud), max(loud)
    at = f"{high:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"
    return [f"{MARK} measured at load {at} > {QUIET:.0f}: not a quiet-machine figure"]
