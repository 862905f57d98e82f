"""The Redis backend: see backend.py (single server and Cluster) and shards.py."""
