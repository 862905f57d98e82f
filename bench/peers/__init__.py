"""deferq against its peers on one Redis (and PostgreSQL): `python -m bench.peers.run`."""
