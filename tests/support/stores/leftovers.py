"""The suite removes what it creates in the stores it is given. At the end of the test
session, each test process looks for what it made and left: keys under the key prefixes
it handed out in the shared Redis (`unique_prefix`), and the PostgreSQL schemas and
MySQL databases it named (`new_schema`, `new_database`). Any left fails the session
(an error at the teardown of its last test), naming them and whether they expire."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.stores import mysql, postgres, redis


def redis_leftovers() -> list[str]:
    if not redis.issued or not redis.shared_answers():
        return []
    client = redis.shared_client()
    try:
        lines = []
        for prefix, keys in sorted(redis.keys_left(redis.issued).items()):
            lasting = [key for key in keys if client.ttl(key) == -1]
            lines.append(f"Redis {redis.shared_where()}: {len(keys)} key(s) under prefix {prefix} (of "
                         f"{redis.issued[prefix]}), {len(lasting)} without expiry: "
                         f"{', '.join(repr(key) for key in sorted(keys)[:6])}")
        return lines
    finally:
        client.close()


def sql_leftovers() -> list[str]:
    lines = []
    if postgres.made and (schemas := postgres.schemas_left(postgres.made)):
        lines.append(f"PostgreSQL: schema(s) left: {', '.join(schemas)}")
    if mysql.made and (databases := mysql.databases_left(mysql.made)):
        lines.append(f"MySQL: database(s) left: {', '.join(databases)}")
    return lines


@pytest.fixture(scope="session", autouse=True)
def leaves_the_stores_as_found() -> Iterator[None]:
    """Set up first, so torn down last: after every fixture that cleans up."""
    yield
    left = redis_leftovers() + sql_leftovers()
    assert not left, "the tests left data in the stores they were given:\n" + "\n".join(left)
