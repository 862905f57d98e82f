"""The service's three logs (S2-8), each JSON lines, each routable on its own.

- request log  (logger "deferq.http.request"): one line per HTTP request.
- delivery log (logger "deferq.delivery"): one line per callback attempt, written by
  the workers that run deliveries.
- error log    (logger "deferq.http.error"): failures of the service itself.

A destination is a file path (appended to), "-" for standard error, or "off".
"""

from __future__ import annotations

import logging
import sys

from ...observe.logs import JSONFormatter

REQUEST_LOG = "deferq.http.request"
DELIVERY_LOG = "deferq.delivery"
ERROR_LOG = "deferq.http.error"


def route(logger_name: str, destination: str | None) -> logging.Logger:
    """Send one log to `destination` as JSON lines, apart from every other log."""
    logger = logging.getLogger(logger_name)
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    if destination is None:  # leave it to the "deferq" logger's own set-up
        logger.propagate = True
        logger.disabled = False
        return logger
    logger.propagate = False
    logger.disabled = destination == "off"
    if destination != "off":
        if destination == "-":
            handler: logging.Handler = logging.StreamHandler(sys.stderr)
        else:
            handler = logging.FileHandler(destination, encoding="utf-8")
        handler.setFormatter(JSONFormatter())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    return logger
