"""What one server process holds (the App, caches, the enqueue batcher, waits, metrics) and
the request helpers that reach it."""
