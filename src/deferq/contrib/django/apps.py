"""INSTALLED_APPS entry: "deferq.contrib.django"."""

from __future__ import annotations

from django.apps import AppConfig  # type: ignore[import-untyped]
from django.utils.module_loading import autodiscover_modules  # type: ignore[import-untyped]


class DeferqConfig(AppConfig):  # type: ignore[misc]
    name = "deferq.contrib.django"
    label = "deferq"
    verbose_name = "deferq"

    def ready(self) -> None:
        # Every installed app's tasks.py registers its tasks, so a worker started by
        # `manage.py deferq worker` knows them all (an import error there is raised).
        autodiscover_modules("tasks")
