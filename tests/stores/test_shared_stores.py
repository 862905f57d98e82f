"""`make test` touches only what it is given: the Redis of DEFERQ_TEST_REDIS, on its own
database, under key prefixes of its own; every other server it uses it starts itself. Here
the checks that hold every test to that catch what they are there to catch."""

from __future__ import annotations

from urllib.parse import urlsplit

import redis

from tests.conftest import need_service
from tests.support.stores.redis import TEST_REDIS, shared_answers, strays


def test_a_connection_to_another_database_of_the_shared_redis_is_caught():
    """The check every test runs under (tests/support/stores/redis.py): a connection the suite
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


def test_the_end_of_session_check_names_what_a_test_left_in_the_stores():
    """What tests/support/stores/leftovers.py runs when the session ends: a key written under a
    prefix the suite handed out is found (with whether it expires), and a schema and a
    database named for the session and left behind; once removed, nothing is reported."""
    from tests.support.stores import leftovers, mysql, postgres
    from tests.support.stores.redis import issued, shared_client, unique_prefix

    if not shared_answers():
        need_service("Redis", "nothing answers at DEFERQ_TEST_REDIS")
    prefix = unique_prefix()
    client = shared_client()
    try:
        client.set(f"{{{prefix}:q:default}}:wake", b"x")  # as a store's key: hash-tagged, no expiry
        client.set(f"{prefix}:queues", b"x", ex=60)
        found = [line for line in leftovers.redis_leftovers() if prefix in line]
        assert len(found) == 1, found
        assert f"2 key(s) under prefix {prefix} (of tests/stores/test_shared_stores.py::" in found[0]
        assert "1 without expiry" in found[0], found
    finally:
        client.delete(f"{{{prefix}:q:default}}:wake", f"{prefix}:queues")
        client.close()
    assert not [line for line in leftovers.redis_leftovers() if prefix in line]
    assert prefix in issued

    schema, database = postgres.new_schema("deferq_left"), mysql.new_database("deferq_left")
    pg, my = postgres._connect(), mysql.mysql_admin_connection()
    try:
        pg.execute(f'CREATE SCHEMA "{schema}"')
        with my.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{database}`")
        assert postgres.schemas_left({schema}) == [schema] and mysql.databases_left({database}) == [database]
    finally:
        pg.execute(f'DROP SCHEMA IF EXISTS "{schema}"')
        with my.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        pg.close()
        my.close()
    assert postgres.schemas_left({schema}) == [] and mysql.databases_left({database}) == []
