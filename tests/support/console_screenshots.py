"""The console's screenshots in docs/console/: `python -m tests.support.console_screenshots`.

Seeds the world of tests/support/console_world.py on a fresh SQLite store, starts `deferq serve`,
then keeps a real worker busy for a while (a producer enqueues faster than it works), so
the charts show the last minutes of real history after the seeded day (console_world); then every view at 1280 px,
light and dark, and the views of PHONE at 390 px. Look at each picture before committing them.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import deferq
from deferq.worker import Worker, WorkerConfig
from tests.support.console_world import chromium, publish_heartbeats, seed, signed_in
from tests.support.server_helpers import running_server

PHONE = ("overview", "job", "workflow", "flow", "jobs", "batches", "limits", "periodic", "chunk")
MAX_HEIGHT = 1500  # px: a long list is cut there


def busy_worker(url: str, seconds: float) -> None:
    """A producer at about 3 jobs/s and a worker doing about 2/s, for `seconds`."""
    app = deferq.App(url)

    @app.task(name="shop.tasks.send_welcome", queue="email")
    def send_welcome(address: str, name: str = "") -> str:
        time.sleep(0.45)
        return f"sent to {address}"

    @app.task(name="shop.tasks.build_report", queue="reports")
    def build_report(n: int) -> int:
        time.sleep(1.5)
        return n

    worker = Worker(app, WorkerConfig(queues=("email", "reports"), concurrency=1, name="vm:5150:screenshots"))
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < seconds:
        n += 1
        send_welcome.enqueue(f"user{n}@example.com", name=f"User {n}")
        if n % 4 == 0:
            build_report.enqueue(n)
        if n % 2 == 0:
            send_welcome.options(delay=600).enqueue(f"later{n}@example.com")
        time.sleep(0.33)
    worker.stop()
    thread.join(timeout=30)
    app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/console", help="where the PNG files go")
    parser.add_argument("--busy", type=float, default=45.0, help="seconds of real activity for the charts")
    parser.add_argument("--only", nargs="*", help="make only these views (e.g. queue job), at each width")
    parser.add_argument("--phone", nargs="*", default=list(PHONE), help="the views also made at 390 px")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{tempfile.mkdtemp(prefix='deferq-screens-')}/deferq.db"
    world = seed(url)
    views = {
        "overview": "/dashboard/", "queue": "/dashboard/queues/reports", "jobs": "/dashboard/jobs",
        "job": f"/dashboard/jobs/{world.ids['dead']}", "workflow": f"/dashboard/jobs/{world.ids['chain_middle']}",
        "flow": f"/dashboard/jobs/{world.ids['batch_member']}/flow",
        "batch": f"/dashboard/jobs/{world.ids['batch_member']}",
        "chunk": f"/dashboard/jobs/{world.ids['chunk_member']}",
        "batches": f"/dashboard/batches/{world.ids['batch']}", "running": f"/dashboard/jobs/{world.ids['active']}",
        "dead": "/dashboard/dead", "workers": "/dashboard/workers",
        "periodic": "/dashboard/periodic", "limits": "/dashboard/limits",
        "topics": "/dashboard/topics", "topic": "/dashboard/topics/order-paid",
        "alerts": "/dashboard/alerts", "stores": "/dashboard/stores", "tokens": "/dashboard/tokens",
    }
    overload = ("--max-inflight", "64", "--overload", "shed-oldest", "--max-waiting", "256")  # the load card
    with running_server(url, "--app", "tests.support.console_world:app", *overload) as base, chromium() as browser:
        page = signed_in(browser, base, world.admin)
        page.goto(base + "/dashboard/")
        busy_worker(url, args.busy)  # its counts reach the store's history within seconds
        paused = deferq.App(url)
        paused.pause("reports")  # the queue page shows a paused queue (its running job finishes)
        paused.close()
        page.goto(base + "/dashboard/stores")
        page.wait_for_timeout(30_000)  # the latency chart: samples of this tab
        for scheme in ("light", "dark"):
            app = deferq.App(url)
            publish_heartbeats(app.backend, world.ids["active"])  # as a live worker would, every few seconds
            app.close()
            page.emulate_media(color_scheme=scheme)
            for width, names in ((1280, list(views)), (390, args.phone)):
                page.set_viewport_size({"width": width, "height": 900 if width > 400 else 844})
                for name in [n for n in names if not args.only or n in args.only]:
                    page.goto(base + views[name])
                    page.wait_for_timeout(2500)  # the first answers, and one poll
                    path = out / f"{name}-{width}-{scheme}.png"
                    height = min(page.evaluate("document.documentElement.scrollHeight"), MAX_HEIGHT)
                    page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": width,
                                                                          "height": height})
                    print(path)
        assert page.errors == [], page.errors


if __name__ == "__main__":
    main()
