"""Schedules (periodic jobs): definition.py describes one, timing.py says when it fires,
store.py keeps them in the store, firing.py enqueues each tick once."""
