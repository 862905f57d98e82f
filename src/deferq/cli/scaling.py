"""`deferq serve --workers LO..HI`: server processes grown under a waiting queue, up to a
bound, and retired when calm (S3-4).

uvicorn's process manager runs the processes; it starts one more on SIGTTIN and retires
the newest on SIGTTOU. A thread of the manager's own process watches the processes'
shared metric files twice a second and sends those signals to its own process:

- **grow** while requests wait for a slot (`--overload shed-oldest`) or are answered
  busy (either mode) through GROW_AFTER seconds, one process at a time; bursts that come
  less than RELIEF seconds apart count as one spell;
- **shrink** after `--calm` seconds with no request waiting and none answered busy, one
  process at a time, never below LO.

Each change is one line on stderr. The processes share the listening socket, so a new
process takes new connections at once; requests already waiting stay where they wait.
"""

from __future__ import annotations

import inspect
import os
import signal
import threading
import time
from typing import Any

from ..observe.output import say
from ..server.api.load import summed

GROW_AFTER = 2.0  # seconds of waiting (or busy answers) before one more process
LOOK_EVERY = 0.5  # seconds between two readings of the processes' load
RELIEF = 1.5  # seconds without waiting or refusals that end a spell of pressure (bursts a second apart do not)


class Scaler:
    """Decides from successive readings of (requests waiting, busy answers so far) when
    the manager should have one process more or one fewer. Pure: `step` returns +1, -1
    or 0 and `processes` follows; signals are the caller's."""

    def __init__(self, fewest: int, most: int, calm: float, grow_after: float = GROW_AFTER) -> None:
        self.fewest, self.most, self.calm, self.grow_after = fewest, most, calm, grow_after
        self.processes = fewest
        self.shed_seen: int | None = None
        self.pressed_since: float | None = None  # since when requests wait or are refused
        self.pressed_last = 0.0
        self.calm_since: float | None = None

    def step(self, now: float, waiting: int, shed: int) -> int:
        refused = self.shed_seen is not None and shed > self.shed_seen
        self.shed_seen = shed
        if waiting > 0 or refused:
            self.calm_since = None
            if self.pressed_since is None or now - self.pressed_last > RELIEF:
                self.pressed_since = now
            self.pressed_last = now
            if now - self.pressed_since >= self.grow_after and self.processes < self.most:
                self.pressed_since = now  # the next one only after as long again
                self.processes += 1
                return 1
            return 0
        self.calm_since = self.calm_since if self.calm_since is not None else now
        if now - self.calm_since >= self.calm and self.processes > self.fewest:
            self.calm_since = now
            self.processes -= 1
            return -1
        return 0


def watch(scaler: Scaler, directory: str, stop: threading.Event) -> None:
    """The watching thread: read the load, signal the manager (this process)."""
    while not stop.wait(LOOK_EVERY):
        try:
            waiting, shed = summed(directory)
        except Exception as exc:  # noqa: BLE001 - a bad reading skips a turn, never stops the server
            say(f"server processes: cannot read their load ({exc}); trying again")
            continue
        before = scaler.processes
        change = scaler.step(time.monotonic(), waiting, sum(shed.values()))
        if change:
            why = (f"{waiting} request(s) waiting or answered busy for {scaler.grow_after:g} s" if change > 0
                   else f"no request waiting for {scaler.calm:g} s")
            say(f"server processes {before} -> {scaler.processes}: {why}")
            os.kill(os.getpid(), signal.SIGTTIN if change > 0 else signal.SIGTTOU)


def run_scaled(config: Any, workers: tuple[int, int], directory: str, calm: float) -> None:
    """uvicorn's process manager with `workers[0]` processes, grown up to `workers[1]`."""
    from uvicorn import Server
    from uvicorn.supervisors import Multiprocess

    scaler = Scaler(workers[0], workers[1], calm)
    stop = threading.Event()
    manager_args: dict[str, Any] = {"sockets": [config.bind_socket()]}
    if "target" in inspect.signature(Multiprocess).parameters:  # older uvicorn releases ask for it
        manager_args["target"] = Server(config).run
    manager = Multiprocess(config, **manager_args)  # its signal handlers are set: safe to signal now
    watcher = threading.Thread(target=watch, args=(scaler, directory, stop), name="deferq-scaler", daemon=True)
    watcher.start()
    try:
        manager.run()
    finally:
        stop.set()
        watcher.join(2)
