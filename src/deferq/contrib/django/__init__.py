"""Django integration.

settings.py::

    INSTALLED_APPS = [..., "deferq.contrib.django"]
    DEFERQ_URL = "postgresql://app@db/shop"      # or DEFERQ = {"url": ..., "lease": 60}

yourapp/tasks.py (imported by the app's `ready()`)::

    from deferq.contrib.django import app

    @app.task(queue="email")
    def send_receipt(order_id): ...

a view::

    from deferq.contrib.django import enqueue_on_commit

    with transaction.atomic():
        order = Order.objects.create(...)
        enqueue_on_commit(send_receipt, order.pk)   # exists only if the commit does

and `python manage.py deferq worker` (or run, stats, dead list, ...).
"""

from __future__ import annotations

from .lazy import DjangoApp, app
from .transactions import enqueue_many_on_commit, enqueue_on_commit, shares_database, use_pymysql

__all__ = [
    "DjangoApp", "app", "enqueue_many_on_commit", "enqueue_on_commit", "shares_database", "use_pymysql",
]
