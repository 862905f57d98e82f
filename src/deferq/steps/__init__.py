"""Durable steps: checkpoints of a running job kept in the store, and the events jobs wait for."""
