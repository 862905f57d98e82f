"""The master process of `deferq run`: keeps pools of worker processes, and watches the store.

One thread does all the supervising, in a loop woken by signals (SIGCHLD included, so a
dead child is replaced at once) or by its own pace (`check_every`):
- every wake: reap exited children, start or retire children to match each pool's
  target;
- every check: read the children's heartbeats (kv "workers"), kill hung ones, retire
  those past their lifetime or memory ceiling, autoscale, monitor the queues, publish
  this master's status (kv "masters"), notice a changed config file.

Beside it, on a thread of its own, the master takes part in the store's upkeep as every
worker does (upkeep/): while it leads, it sweeps the store and fires the schedules, its
config file's [periodic] tables among them; so both go on when a pool is scaled to zero
or every child is down.

With `metrics_port` in the config file, every child adds the worker metrics middleware
and writes its numbers to prometheus-client's multiprocess directory (a temporary one the
master makes and removes); the master serves their sum on that port and clears the live
gauges of each child that exits.

Signals: SIGTERM, SIGINT, SIGUSR2 stop (children finish their jobs within `grace`; a
second one makes them release their jobs at once); SIGHUP reloads the config file with
a rolling restart of the children. Exit codes: 0 after a stop, 1 on an unexpected error.
"""

from __future__ import annotations

import logging
import os
import select
import shutil
import signal
import socket
import tempfile
import time
from typing import Any

import orjson
from setproctitle import setproctitle

from ..app import App
from ..backends.base import QueueStats
from ..errors import ConfigError
from ..loading import load_app, require
from ..net import policy as netpolicy
from ..upkeep import Upkeep
from ..values import format_duration
from ..worker import orders
from .alerts import AlertConfig, Alerter, saved_alerts
from .autoscale import Load, ScaleState, decide
from .child import METRICS_DIR_ENV
from .children import CRASH_ALERT_AT, Child, PoolState, spawn_child
from .config import PoolConfig, SupervisorConfig, file_digest, load_config
from .monitor import Monitor, StoreHealth

log = logging.getLogger("deferq.master")

MASTER_TITLE = "deferq: master"
EXIT_OK, EXIT_ERROR = 0, 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR2)
KILL_MARGIN = 5.0  # seconds past the grace period before unfinished children are killed


def load_supervised_app(config: SupervisorConfig) -> App:
    """The config's App on the config's store, refused when the children could not share it."""
    if not config.app:
        raise ConfigError(
            'the supervisor needs your tasks: set app = "module:attribute" in the config file or pass --app'
        )
    app = load_app(config.app, config.url)
    if app.url.startswith("memory:"):
        raise ConfigError(
            "memory:// lives inside one process: the supervisor's children need a shared "
            "store such as sqlite:///deferq.db or redis://"
        )
    check_periodic_tasks(app, config)
    return app


def check_periodic_tasks(app: App, config: SupervisorConfig) -> None:
    """The config file's periodic jobs name tasks the App has (code's schedules always do),
    and no two of them, nor one and a schedule of the code, share a name."""
    for job in config.periodic:
        if job.task not in app.tasks:
            raise ConfigError(f"periodic.{job.name}.task names {job.task!r}, a task your app lacks")
    names = [job.name for job in (*app.periodic_jobs, *config.periodic)]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise ConfigError(f"two periodic jobs are named {duplicate!r}")


class Master:
    def __init__(self, config: SupervisorConfig, log_level: str = "info", log_format: str = "text"):
        self.config = config
        self.app = load_supervised_app(config)
        self.host = socket.gethostname()
        self.id = f"{self.host}:{os.getpid()}"
        self.child_spec = {"app": config.app, "url": self.app.url, "grace": config.grace,
                           "log_level": log_level, "log_format": log_format}
        self.metrics_dir: str | None = None  # made by run() when the config has metrics_port
        if config.metrics_port is not None:
            require("prometheus_client", needed_by="metrics_port")
        self.network = netpolicy.ForStore(self.app.url)  # alerts may not be sent into the store
        self.alerter = Alerter(config.alerts, source=f"deferq master {self.id}", policy=self.network)
        self.health = StoreHealth(lambda: self.alerter, self.app.url)
        self.monitor = Monitor(self.app.backend, self.health, lambda: self.alerter)
        self.generation = 0
        self.pools = {p.name: self._new_pool(p) for p in config.pools}
        self.started = time.time()
        self.stop_signals = 0
        self.quiet = False  # ordered quiet (worker/orders.py): its children take no new job, none is started
        self.quieted: set[str] = set()  # children ordered quiet already
        self.reload_requested = False
        self.next_check = 0.0
        self.config_seen = (config.digest, self._file_stamp())
        self.upkeep = Upkeep(self.app, self.id, config.periodic)  # started by run()
        self._wake_r, self._wake_w = os.pipe()

    def _new_pool(self, config: PoolConfig) -> PoolState:
        return PoolState(config, ScaleState(config.scale.minimum), self.generation)

    # -- life cycle ---------------------------------------------------------------

    def run(self) -> int:
        """Supervise until a stop signal; return the exit code."""
        setproctitle(MASTER_TITLE)
        self._serve_metrics()
        self._install_signals()
        pools = ", ".join(
            f"{p.name} ({p.scale.minimum}-{p.scale.maximum} x {p.concurrency})" for p in self.config.pools
        )
        log.info("master %s started on %s: pools %s", self.id, self.app.url, pools)
        code = EXIT_OK
        self.upkeep.start()
        try:
            while not self.stop_signals:
                self._step()
                self._wait(self._seconds_to_next_wake())
        except Exception:
            log.exception("master failed")
            code = EXIT_ERROR
        self._shutdown()
        return code

    def _serve_metrics(self) -> None:
        """With metrics_port: a directory for the children's numbers, and their sum served."""
        port = self.config.metrics_port
        if port is None:
            return
        from ..worker.metrics import serve

        self.metrics_dir = tempfile.mkdtemp(prefix="deferq-worker-metrics-")
        os.environ[METRICS_DIR_ENV] = self.metrics_dir  # serve() sums the directory's files
        self.child_spec["metrics_dir"] = self.metrics_dir
        host = self.config.metrics_host
        try:
            serve(port, host)
        except OSError as exc:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
            why = exc.strerror or exc
            raise ConfigError(f"cannot serve metrics on {host}:{port} (metrics_port): {why}") from None
        log.info("worker metrics of every child, summed: http://%s:%d/metrics", host, port)

    def _metrics_forget(self, child: Child) -> None:
        """A child is gone: its live gauges (jobs in flight) leave the sum; counters stay."""
        if self.metrics_dir is not None:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(child.pid, self.metrics_dir)  # type: ignore[no-untyped-call]

    def _install_signals(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

        def on_stop(signum: int, _frame: object) -> None:
            self.stop_signals += 1

        def on_reload(_signum: int, _frame: object) -> None:
            self.reload_requested = True

        for sig in STOP_SIGNALS:
            signal.signal(sig, on_stop)
        signal.signal(signal.SIGHUP, on_reload)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the loop

    def _wait(self, timeout: float) -> None:
        select.select([self._wake_r], [], [], max(0.0, timeout))
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _seconds_to_next_wake(self) -> float:
        now = time.monotonic()
        wakes = [self.next_check - now]
        wakes += [p.restart_at - now for p in self.pools.values() if p.restart_at > now]
        return max(0.0, min(wakes))

    def _step(self) -> None:
        now = time.monotonic()
        self._reap(now)
        if self.reload_requested:
            self.reload_requested = False
            self.reload()
        if now >= self.next_check:
            self.next_check = now + self.config.check_every
            self._check(now)
        for pool in list(self.pools.values()):
            self._reconcile(pool, now)

    def _check(self, now: float) -> None:
        self._watch_children(now)
        self._use_saved_alert_settings()
        _, stats = self.health.call(self.app.backend.stats)
        if stats is not None:
            self._autoscale(stats, now)
            self.monitor.check(stats)
        self._obey()
        self._publish()
        self._watch_config_file()

    def _use_saved_alert_settings(self) -> None:
        """Targets and thresholds saved in the store (the console's alerts page, PUT
        /v1/settings/alerts) win over the config file's [alerts], key by key: looked up
        at every check, so a change there reaches the monitor within `check_every`."""
        ok, saved = self.health.call(saved_alerts, self.app.backend)
        if not ok:
            return  # the store is down: keep what was in use
        try:
            wanted = self.config.alerts.overridden_by(saved)
        except (ConfigError, ValueError) as exc:
            log.error("the alert settings saved in the store are not used: %s", exc)
            wanted = self.config.alerts
        if wanted != self.alerter.config:
            self._use_alerts(wanted)

    def _use_alerts(self, config: AlertConfig) -> None:
        self.alerter.close(timeout=1.0)
        self.alerter = Alerter(config, source=f"deferq master {self.id}", policy=self.network)

    def _shutdown(self) -> None:
        children = [c for p in self.pools.values() for c in p.children]
        log.info("master stopping: %d child(ren) finish their jobs (grace %s)",
                 len(children), format_duration(self.config.grace))
        for child in children:
            child.retire("the master is stopping")
        deadline = time.monotonic() + self.config.grace + KILL_MARGIN
        forwarded = 1
        while any(p.children for p in self.pools.values()) and time.monotonic() < deadline:
            if self.stop_signals > forwarded:  # asked again: release running jobs now
                forwarded = self.stop_signals
                log.warning("stop signal again: children release their running jobs now")
                for pool in self.pools.values():
                    for child in pool.children:
                        child.signal(signal.SIGINT)
            self._wait(0.2)
            self._reap(time.monotonic())
        for pool in self.pools.values():
            for child in pool.children:
                log.error("child %s #%d (pid %d) did not stop in time: killed; its jobs "
                          "return after their lease", pool.config.name, child.index,
                          child.pid)
                child.signal(signal.SIGKILL)
                child.process.wait()
                self.health.call(self.app.backend.kv_delete, "workers", child.name)
        self.health.call(self.app.backend.kv_delete, "masters", self.id)
        self.health.call(orders.clear, self.app.backend, orders.master_key(self.id))
        self.upkeep.stop()
        self.alerter.close()
        self.app.close()
        signal.set_wakeup_fd(-1)
        if self.metrics_dir is not None:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)
        log.info("master stopped")

    # -- children -------------------------------------------------------------------

    def _reap(self, now: float) -> None:
        for pool in self.pools.values():
            for child in list(pool.children):
                code = child.process.poll()
                if code is not None:
                    pool.children.remove(child)
                    self._child_exited(pool, child, code, now)
        for name in [n for n, p in self.pools.items() if p.config.name not in self._configured()]:
            if not self.pools[name].children:
                del self.pools[name]  # a pool removed by a reload, now drained

    def _configured(self) -> set[str]:
        return {p.name for p in self.config.pools}

    def _child_exited(self, pool: PoolState, child: Child, code: int, now: float) -> None:
        # A child that died without saying goodbye leaves its status behind: clear it.
        self.health.call(self.app.backend.kv_delete, "workers", child.name)
        self._metrics_forget(child)
        what = f"child {pool.config.name} #{child.index} (pid {child.pid})"
        if child.retiring_since is not None and child.retire_reason != "hung":
            log.info("%s stopped (%s)", what, child.retire_reason)
        elif code == 0:
            why = "after max_jobs_per_child jobs" if pool.config.max_jobs_per_child else "(code 0)"
            log.info("%s exited %s: replacing it", what, why)
        elif code == 3:
            log.warning("%s exited because a job overran its timeout: replacing it", what)
        else:
            reason = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            if child.retire_reason == "hung":
                reason = "hung, killed by the master"
            crashes = pool.crashed(now)
            delay = pool.restart_at - now
            log.error("%s died (%s): %s", what, reason,
                      f"restarting in {delay:.1f}s" if delay > 0 else "restarting now")
            if crashes >= CRASH_ALERT_AT:
                self.monitor.alert(
                    f"crash_loop:{pool.config.name}",
                    f"pool {pool.config.name} keeps crashing: {crashes} crashes in a minute",
                    {"pool": pool.config.name, "crashes": crashes, "last": reason,
                     "host": self.host},
                )

    def _watch_children(self, now: float) -> None:
        ok, records = self.health.call(self.app.backend.kv_list, "workers")
        statuses = {}
        for raw in (records or {}).values():
            try:
                status = orjson.loads(raw)
                statuses[status["name"]] = status
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
        wall = time.time()
        for pool in self.pools.values():
            for child in pool.children:
                status = statuses.get(child.name)
                if status is not None:
                    child.last_seen = now - max(0.0, wall - float(status["seen"]))
                    child.running = len(status.get("running", ()))
                self._judge_child(pool.config, child, now, heartbeats_known=ok)

    def _judge_child(self, config: PoolConfig, child: Child, now: float, heartbeats_known: bool) -> None:
        what = f"child {config.name} #{child.index} (pid {child.pid})"
        if child.retiring_since is not None:
            if now - child.retiring_since > self.config.grace + KILL_MARGIN:
                log.error("%s did not stop within the grace period: killed", what)
                child.signal(signal.SIGKILL)
            return
        # Judge silence only while the store has been up long enough for children to beat.
        silent_for = now - max(child.last_seen or child.started, self.health.up_since)
        hung_after = max(config.hung_after, self.app.lease)  # a worker beats every lease/3
        if heartbeats_known and silent_for > hung_after:
            log.error("%s sent no heartbeat for %s: it is hung, killing it", what,
                      format_duration(silent_for))
            child.retire_reason = "hung"
            child.signal(signal.SIGKILL)
            return
        if child.lifetime is not None and now - child.started > child.lifetime:
            log.info("%s reached max_child_lifetime: retiring it", what)
            child.retire("max_child_lifetime reached")
            return
        if config.max_child_memory is not None:
            rss = child.resident_memory()
            if rss is not None and rss > config.max_child_memory:
                log.warning("%s uses %d MiB, above max_child_memory: retiring it", what, rss >> 20)
                child.retire("max_child_memory exceeded")

    def _reconcile(self, pool: PoolState, now: float) -> None:
        """Start or retire children until the pool matches its target; roll restarts."""
        if self.stop_signals or self.quiet:
            return
        configured = pool.config.name in self._configured()
        target = pool.scale.target if configured else 0
        serving = pool.serving
        old = [c for c in serving if c.generation < pool.generation]
        allowed = target + (1 if old and configured else 0)  # one extra child while rolling
        while len(serving) < allowed and now >= pool.restart_at:
            child = self._start(pool)
            if child is None:
                break
            serving.append(child)
        excess = len(serving) - target
        if excess <= 0:
            return
        if old:
            if all(c.ready for c in serving if c.generation == pool.generation):
                old[0].retire("rolling restart after a reload")
            return
        # Retire the least busy, youngest first: they hold the fewest jobs and caches.
        for child in sorted(serving, key=lambda c: (c.running, -c.started))[:excess]:
            child.retire("the pool shrank")

    def _start(self, pool: PoolState) -> Child | None:
        try:
            child = spawn_child(pool, self.child_spec, self.host)
        except OSError as exc:
            log.error("cannot start a child for pool %s: %s", pool.config.name, exc)
            pool.crashed(time.monotonic())
            return None
        pool.children.append(child)
        log.info("started child %s #%d (pid %d)", pool.config.name, child.index, child.pid)
        return child

    # -- scaling, status, config --------------------------------------------------------

    def _autoscale(self, stats: dict[str, QueueStats], now: float) -> None:
        for pool in self.pools.values():
            queues = [stats[q] for q in pool.config.queues if q in stats]
            load = Load(
                backlog=sum(s.counts["queued"] for s in queues),
                oldest_wait=max((s.oldest_wait for s in queues), default=0.0),
            )
            before = pool.scale.target
            pool.scale, reason = decide(pool.config.scale, pool.scale, load, now)
            if reason:
                log.info("pool %s: %d -> %d process(es) (%s)", pool.config.name, before,
                         pool.scale.target, reason)

    def _obey(self) -> None:
        """An order left in the store for this master: quiet (each child ordered quiet,
        none started), or stop (as on SIGTERM)."""
        _, order = self.health.call(orders.read, self.app.backend, orders.master_key(self.id))
        if not order or self.stop_signals:
            return
        if not self.quiet:
            log.info("master %s: ordered %s by %s", self.id, order["order"], order.get("by", "?"))
            self.quiet = True
        for child in [c for p in self.pools.values() for c in p.children if c.name not in self.quieted]:
            self.health.call(orders.give, self.app.backend, child.name, "quiet", f"its master ({order.get('by')})")
            self.quieted.add(child.name)
        if order["order"] == "stop":
            self.stop_signals += 1

    def status(self) -> dict[str, Any]:
        """What `deferq status` shows about this master (published in kv "masters")."""
        return {
            "id": self.id, "pid": os.getpid(), "host": self.host, "started": self.started,
            "seen": time.time(), "url": self.app.url,
            "config": str(self.config.path) if self.config.path else None,
            "store_up": self.health.up, "quiet": self.quiet,
            "pools": {
                name: {
                    "queues": list(pool.config.queues), "target": pool.scale.target,
                    "min": pool.config.scale.minimum, "max": pool.config.scale.maximum,
                    "concurrency": pool.config.concurrency,
                    "children": [c.describe() for c in pool.children],
                }
                for name, pool in self.pools.items()
            },
        }

    def _publish(self) -> None:
        ttl = max(self.config.check_every * 5, 10.0)
        self.health.call(self.app.backend.kv_put, "masters", self.id,
                         orjson.dumps(self.status()), ttl)

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.config.path) if self.config.path else None
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size) if stat else None

    def _watch_config_file(self) -> None:
        """Notice (and report) a changed config file; SIGHUP applies it."""
        stamp = self._file_stamp()
        if self.config.path is None or stamp == self.config_seen[1]:
            return
        try:
            digest = file_digest(self.config.path.read_bytes())
        except OSError:
            return
        if digest != self.config_seen[0]:
            try:
                load_config(self.config.path)
                verdict = f"send SIGHUP to apply it (kill -HUP {os.getpid()})"
            except ConfigError as exc:
                verdict = f"it is not valid and would be refused: {exc}"
            log.warning("the config file %s changed: %s", self.config.path, verdict)
        self.config_seen = (digest, stamp)

    def reload(self) -> None:
        """SIGHUP: read the config file again and roll the children over to it."""
        if self.config.path is None:
            log.warning("SIGHUP ignored: this master was not started from a config file")
            return
        try:
            new = load_config(self.config.path).with_overrides(self.config.app, self.config.url)
            check_periodic_tasks(self.app, new)
        except ConfigError as exc:
            log.error("reload refused, keeping the running config: %s", exc)
            return
        running = (self.config.app, self.config.url, self.config.metrics_port, self.config.metrics_host)
        if (new.app, new.url, new.metrics_port, new.metrics_host) != running:
            log.error("reload refused: app, url and the metrics address cannot change while running; "
                      "restart the master")
            return
        self.generation += 1
        for pool_config in new.pools:
            pool = self.pools.get(pool_config.name)
            if pool is None:
                self.pools[pool_config.name] = self._new_pool(pool_config)
                continue
            pool.config, pool.generation = pool_config, self.generation
            pool.scale = ScaleState(pool_config.scale.clamp(pool.scale.target))
        if new.alerts != self.config.alerts:
            self._use_alerts(new.alerts)
        self.upkeep.use_config_schedules(new.periodic)
        self.child_spec["grace"] = new.grace
        self.config = new
        self.config_seen = (new.digest, self._file_stamp())
        log.info("reloaded %s: rolling restart of %d child(ren)", new.path,
                 sum(len(p.children) for p in self.pools.values()))
