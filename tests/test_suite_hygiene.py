"""`make test` touches only what it is given: the Redis of DEFERQ_TEST_REDIS, on its own
database, under key prefixes of its own; every other server it uses it starts itself."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import redis

from tests.conftest import need_service
from tests.stores.redis import TEST_REDIS, shared_answers, strays

TESTS = Path(__file__).resolve().parent


def test_a_connection_to_another_database_of_the_shared_redis_is_caught():
    """The check every test runs under (tests/stores/redis.py): a connection the suite
    opens to a database of the shared server other than the setting's is noted, and the
    test that opened it fails."""
    if not shared_answers():
        need_service("Redis", "nothing answers at DEFERQ_TEST_REDIS")
    parts = urlsplit(TEST_REDIS)
    other = (int(parts.path.strip("/") or 0) + 1) % 16
    before = len(strays)
    client = redis.Redis(host=parts.hostname, port=parts.port or 6379, password=parts.password,
                         username=parts.username, db=other, socket_connect_timeout=2)
    try:
        client.ping()  # connects (SELECT only: nothing is written)
    finally:
        client.close()
    noted = strays[before:]
    del strays[before:]  # caught on purpose: not this test's failure
    assert noted == [f"{parts.hostname}:{parts.port or 6379}/{other}"]


def test_no_test_flushes_a_redis_database():
    """Tests delete their own key prefixes; a benchmark that flushes gets a redis-server
    of the test's own, so no file under tests/ flushes anything."""
    pattern = re.compile(r"flush_?(db|all)", re.IGNORECASE)
    found = [f"{path.relative_to(TESTS)}:{number}"
             for path in TESTS.rglob("*.py") if path != Path(__file__).resolve()
             for number, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []
