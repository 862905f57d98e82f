"""The HTTP plumbing every part of the service shares: bodies, errors, auth, caches, logs."""
