"""Service-wide settings kept in the store (kv namespace "settings"), shared by every
server and worker: today the alert targets for callbacks that went dead.

Alert settings come from the record "alerts" (PUT /v1/settings/alerts, the same table
as the supervisor's [alerts]); without one, from the DEFERQ_ALERTS environment variable
(JSON); without that, alerts are only logged.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson

from ...backends import Backend
from ...errors import ConfigError
from ...net.policy import Policy
from ...supervisor.alerts import ALERTS_KEY, SETTINGS_NAMESPACE, AlertConfig, Alerter, saved_alerts
from .errors import Invalid

ALERTS_ENV = "DEFERQ_ALERTS"
REFRESH_SECONDS = 10.0


def check_alerts(data: Any) -> AlertConfig:
    try:
        return AlertConfig.from_dict(data)
    except ConfigError as exc:
        raise Invalid(str(exc)) from None


def load_alerts(backend: Backend) -> dict[str, Any] | None:
    """The alert settings as stored (checked by save_alerts) or as DEFERQ_ALERTS holds
    them (not checked here: AlertConfig.from_dict does, and refuses what is no table)."""
    stored = saved_alerts(backend)
    if stored is not None:
        return stored
    env = os.environ.get(ALERTS_ENV)
    if env:
        try:
            from_env: dict[str, Any] = orjson.loads(env)
        except orjson.JSONDecodeError as exc:
            raise ConfigError(f"{ALERTS_ENV} is not JSON: {exc}") from None
        return from_env
    return None


def save_alerts(backend: Backend, data: dict[str, Any]) -> None:
    check_alerts(data)
    backend.kv_put(SETTINGS_NAMESPACE, ALERTS_KEY, orjson.dumps(data))


class AlerterSource:
    """An Alerter built from the current settings, rebuilt when they change."""

    def __init__(self, backend: Callable[[], Backend], policy: Callable[[], Policy] = Policy.from_env,
                 refresh: float = REFRESH_SECONDS) -> None:
        self.backend = backend  # called when needed: the store may be chosen after import
        self.policy = policy  # the network policy of its alerts (net/policy.py ForStore)
        self.refresh = refresh
        self._lock = threading.Lock()
        self._settings: Any = object()  # never equal to real settings: build on first use
        self._alerter: Alerter | None = None
        self._checked = float("-inf")

    def get(self) -> Alerter:
        with self._lock:
            if time.monotonic() - self._checked >= self.refresh or self._alerter is None:
                self._checked = time.monotonic()
                settings = load_alerts(self.backend())
                if settings != self._settings or self._alerter is None:
                    if self._alerter is not None:
                        self._alerter.close(timeout=1.0)
                    self._alerter = Alerter(AlertConfig.from_dict(settings), policy=self.policy)
                    self._settings = settings
            return self._alerter

    def close(self) -> None:
        with self._lock:
            if self._alerter is not None:
                self._alerter.close()
                self._alerter = None
