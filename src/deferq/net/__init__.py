"""Outbound connections: the network policy every callback, webhook and e-mail obeys."""
