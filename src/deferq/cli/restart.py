"""A plain `deferq worker` whose sync job overran its timeout starts itself again, in place.

A thread cannot be killed in Python. So the worker fails the overrun attempt at once,
takes no new job, gives back the jobs leased ahead, lets its other running jobs finish
within --grace, releases what is left and returns EXIT_OVERRAN (worker/worker.py).
Under `deferq run` the master starts another child. A plain `deferq worker` has no
master: it replaces its own process image with a fresh run of the command line it was
started with (os.execv: same PID, arguments, environment and working directory). The
stuck thread ends with the old image; for systemd, supervisord, a container or a shell
the worker never went away. A first start costs nothing more: one environment lookup.

What the new image must know of the old comes in one environment variable, read and
removed at start: the jobs run so far (--max-jobs counts across restarts), an ordered
quiet, and the restarts so far. SIGTERM and SIGINT stay blocked from the moment the old
image decides to restart until the new one can take them: one sent meanwhile waits,
then stops the new worker (exit 0) before it takes a job; none is lost.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys

import orjson

from ..worker.worker import EXIT_OK, EXIT_OVERRAN, Worker

log = logging.getLogger("deferq.worker")
HANDOVER_ENV = "DEFERQ_WORKER_RESTART"
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@dataclasses.dataclass(frozen=True)
class Handover:
    """What an earlier image of this worker process hands to the next."""

    restarts: int = 0  # restarts in place so far: 0 on a first start
    processed: int = 0  # jobs the earlier images settled
    quiet: bool = False  # ordered quiet: the next image takes no job either
    parent: int = 0  # under `deferq worker --processes`, a child's: the pid of the first process
    children: tuple[int, ...] = ()  # the first process's: its children's pids (worker/processes.py)

    def jobs_left(self, max_jobs: int | None) -> int | None:
        """--max-jobs counts the jobs of every image of this process."""
        return None if max_jobs is None else max(max_jobs - self.processed, 1)

    def resume(self, worker: Worker) -> None:
        """Before `worker.run()`: carry on where the old image stopped, then take the stop
        signals it kept waiting (the handler stops the worker; run() installs its own)."""
        if not self.restarts:
            return
        log.warning("worker restarted in place (pid %d, restart %d) after a job overran its timeout",
                    os.getpid(), self.restarts)
        if self.quiet:
            worker.quiet.set()
        for signum in STOP_SIGNALS:
            signal.signal(signum, lambda *_: worker.stop())
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


def take_handover() -> Handover:
    """What the image before this one handed over (nothing on a first start)."""
    raw = os.environ.pop(HANDOVER_ENV, None)
    if raw is None:
        return Handover()
    try:
        given = orjson.loads(raw)
        return Handover(int(given["restarts"]), int(given["processed"]), bool(given["quiet"]),
                        int(given.get("parent", 0)), tuple(int(pid) for pid in given.get("children", ())))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return Handover(restarts=1)  # a restart all the same: its blocked signals are taken


def exit_code_or_restart(worker: Worker, code: int, handover: Handover, parent: int = 0,
                         children: tuple[int, ...] = ()) -> int:
    """The exit code of `deferq worker` once `worker.run()` returned `code`. After an
    overrun, unless the worker was asked to stop, its one job ran (--once) or its
    --max-jobs are done, this does not return: the process restarts in place (handing
    over its `parent` or its `children` under --processes)."""
    if code != EXIT_OVERRAN:
        return code
    # From here a stop signal waits: for this check, or for the next image. One that
    # came before has run its handler by now (pthread_sigmask runs pending handlers).
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    config = worker.config
    if worker.asked_to_stop or signal.sigpending() & STOP_SIGNALS:
        return EXIT_OK
    if config.once:
        return EXIT_OVERRAN  # its one job ran: the caller learns it overran
    if config.max_jobs is not None and worker.processed >= config.max_jobs:
        return EXIT_OK
    handed = Handover(handover.restarts + 1, handover.processed + worker.processed, worker.quiet.is_set(),
                      parent, children)
    log.warning("worker %s: restarting in place (pid %d) to leave the overrun job's thread behind",
                config.name, os.getpid())
    os.environ[HANDOVER_ENV] = orjson.dumps(dataclasses.asdict(handed)).decode()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    except (OSError, ValueError) as exc:
        log.error("could not restart this worker in place (%s): exiting %d for a supervisor to replace it",
                  exc, EXIT_OVERRAN)
        return EXIT_OVERRAN
