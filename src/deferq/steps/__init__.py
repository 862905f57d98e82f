"""Durable steps: checkpoints of a running job kept in the store, and the events jobs wait
for; `Steps`, the plug-in every App installs (plugin.py)."""

from .plugin import Steps

__all__ = ["Steps"]
