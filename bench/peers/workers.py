"""Worker processes of one peer: each started in its own process group, so that every
child it forks is measured (RSS) and stopped with it, whatever happens to the run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from .base import ROOT, worker_env

LOG_DIR = ROOT / "bench" / "results" / "logs"
STOP_GRACE = 5.0  # seconds a worker gets to exit on SIGTERM before SIGKILL


class WorkerFailed(RuntimeError):
    pass


def group_members(pgid: int) -> list[int]:
    """Live pids whose process group is `pgid` (read from /proc)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry))
    return members


def cpu_ticks(pid: int) -> int:
    """User and system CPU of `pid` and of its children it has reaped, in clock ticks."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Workers:
    """`with Workers(label, commands, env) as w:` starts them; leaving stops them all."""

    def __init__(self, label: str, commands: list[list[str]], env: dict[str, str]) -> None:
        self.label = label
        self.commands = commands
        self.env = worker_env(env)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def __enter__(self) -> Workers:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        try:
            for number, command in enumerate(self.commands):
                log = LOG_DIR / f"{self.label}-{number}.log"
                with open(log, "wb") as out:
                    self.procs.append(subprocess.Popen(
                        command, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, start_new_session=True,
                    ))
                self.logs.append(log)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check(self) -> None:
        """Raise if a worker has exited, with the last line it logged."""
        for proc, log in zip(self.procs, self.logs, strict=True):
            code = proc.poll()
            if code is not None:
                lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
                last = lines[-1].strip()[:120] if lines else "no output"
                raise WorkerFailed(f"worker exited with code {code}: {last} (see {log})")

    def wait(self, timeout: float) -> None:
        """Until every worker has exited by itself; raise if one failed or outlives `timeout`."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise WorkerFailed(f"a worker still ran {timeout:.0f} s after it started") from None
            if proc.returncode != 0:
                self.check()

    def rss(self) -> tuple[float, int]:
        """MiB resident over every process of every worker group, and how many processes."""
        pids = [pid for proc in self.procs for pid in group_members(proc.pid)]
        return sum(rss_kib(pid) for pid in pids) / 1024, len(pids)

    def cpu_seconds(self) -> float:
        """CPU seconds spent so far by every process of every worker group."""
        pids = [pid for proc in self.procs for pid in group_members(proc.pid)]
        return sum(cpu_ticks(pid) for pid in pids) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """SIGTERM each group, then SIGKILL whatever is left of it (children included)."""
        for proc in self.procs:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for proc in self.procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs:
            _signal_group(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait()
            _wait_group_gone(proc.pid)
        self.procs.clear()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_group_gone(pgid: int, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while group_members(pgid) and time.monotonic() < deadline:
        _signal_group(pgid, signal.SIGKILL)
        time.sleep(0.05)
