"""A ready-made App that delivers topic callbacks:

    deferq worker --app deferq.server.tasks:app --url redis://127.0.0.1:6379/0

Its store comes from --url (or DEFERQ_URL); it consumes the "callbacks" queue unless
told other queues with -q (topics may name their own queue).
"""

from __future__ import annotations

from ..app import App
from .topics.delivery import install

app = App()
install(app)
