"""Two designs of a fair claim (round robin between fair keys), measured on PostgreSQL
beside today's claim: not deferq's code, a measurement for choosing one.

    python -m bench.fair_claim [TENANTS] [URL]     # 9 small tenants behind 10,000 jobs of A

In a scratch schema (`fairproto`, dropped after): tenant A's backlog, then TENANTS
tenants of 10 jobs, claimed 8 at a time until done. Printed per design: the median
claim's time (per job) and the claim position by which every small tenant's job was
taken. `fair` keeps each key's pass (virtual time) in a table and moves it in every
claim; `sfq` (start-time fair queuing) gives each job its virtual time at enqueue (its
key's last + 1 / weight, never below the queue's) and claims in that order, as today's
claim does by due time.
"""
import statistics
import sys
import time

import psycopg

URL = sys.argv[2] if len(sys.argv) > 2 else "postgresql://postgres@127.0.0.1:5432/test"
conn = psycopg.connect(URL, autocommit=True)
cur = conn.cursor()
cur.execute("DROP SCHEMA IF EXISTS fairproto CASCADE; CREATE SCHEMA fairproto; SET search_path TO fairproto")
cur.execute("""CREATE TABLE jobs (seq bigserial PRIMARY KEY, id text, queue text, priority smallint,
  state text, run_at double precision, fair_key text, vtime double precision, worker text,
  lease_until double precision, payload text)""")
cur.execute("CREATE INDEX jobs_waiting ON jobs (queue, priority, run_at, seq) WHERE state = 'queued'")
cur.execute("CREATE INDEX jobs_fair ON jobs (queue, priority, fair_key, run_at, seq) WHERE state = 'queued'")
cur.execute("CREATE INDEX jobs_vtime ON jobs (queue, priority, vtime, seq) WHERE state = 'queued'")
cur.execute("""CREATE TABLE fair (queue text, fair_key text, pass double precision NOT NULL DEFAULT 0,
  weight real NOT NULL DEFAULT 1, PRIMARY KEY (queue, fair_key))""")
cur.execute("CREATE INDEX fair_pass ON fair (queue, pass)")

NEW = """INSERT INTO jobs (id, queue, priority, state, run_at, fair_key, payload)
SELECT %(prefix)s || t || '-' || g, 'q', 1, 'queued', extract(epoch from now()) - 1, %(prefix)s || t,
       repeat('x', 60)
FROM generate_series(1, %(tenants)s) t, generate_series(1, %(each)s) g"""


def load(backlog: int, tenants: int, each: int = 10) -> None:
    cur.execute("TRUNCATE jobs; TRUNCATE fair")
    cur.execute(NEW, {"prefix": "A", "tenants": 1, "each": backlog})
    cur.execute(NEW, {"prefix": "T", "tenants": tenants, "each": each})
    cur.execute("INSERT INTO fair (queue, fair_key) SELECT DISTINCT queue, fair_key FROM jobs")
    # sfq's virtual times, as enqueues would give them: each key's jobs 1, 2, 3, ...
    cur.execute("""UPDATE jobs SET vtime = r.v FROM (SELECT seq AS s, row_number() OVER
                   (PARTITION BY fair_key ORDER BY seq) AS v FROM jobs) r WHERE seq = r.s""")
    cur.execute("VACUUM ANALYZE jobs")
    cur.execute("VACUUM ANALYZE fair")


PLAIN = """UPDATE jobs SET state = 'active', worker = 'w', lease_until = extract(epoch from now()) + 30
WHERE ctid = ANY(ARRAY(SELECT ctid FROM jobs WHERE state = 'queued' AND queue = 'q' AND priority = 1
  AND run_at <= extract(epoch from now()) ORDER BY run_at, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED))
RETURNING id, fair_key"""

# The keys with the least pass first, each key's oldest due jobs, ranked by (round within
# its key, the key's pass): a claim of 8 over 10 keys takes one job of each of the 8 most
# behind. A key served moves on by what it took / its weight; one with nothing due goes
# to the back.
FAIR = """WITH keys AS (
  SELECT fair_key, pass, weight FROM fair WHERE queue = 'q' ORDER BY pass
  LIMIT %(limit)s FOR UPDATE SKIP LOCKED
), due AS (
  SELECT c.ctid, k.fair_key, k.pass,
         row_number() OVER (PARTITION BY k.fair_key ORDER BY c.run_at, c.seq) AS round
  FROM keys k CROSS JOIN LATERAL (
    SELECT ctid, run_at, seq FROM jobs WHERE state = 'queued' AND queue = 'q' AND priority = 1
      AND fair_key = k.fair_key AND run_at <= extract(epoch from now())
    ORDER BY run_at, seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED) c
), picked AS (
  SELECT ctid, fair_key FROM due ORDER BY round, pass LIMIT %(limit)s
), bump AS (
  UPDATE fair f SET pass = CASE WHEN n.taken > 0 THEN f.pass + n.taken / f.weight
                                ELSE (SELECT max(pass) FROM keys) + 1 END
  FROM (SELECT k.fair_key, count(p.ctid) AS taken FROM keys k LEFT JOIN picked p USING (fair_key)
        GROUP BY k.fair_key) n
  WHERE f.queue = 'q' AND f.fair_key = n.fair_key
)
UPDATE jobs SET state = 'active', worker = 'w', lease_until = extract(epoch from now()) + 30
WHERE ctid IN (SELECT ctid FROM picked) RETURNING id, fair_key"""

# Start-time fair queuing: today's claim, in the order of the virtual times given at enqueue.
SFQ = PLAIN.replace("ORDER BY run_at, seq", "ORDER BY vtime, seq")


def drain(sql: str, limit: int = 8, claims: int = 1400) -> tuple[list[float], list[str]]:
    times: list[float] = []
    order: list[str] = []
    for _ in range(claims):
        began = time.perf_counter()
        cur.execute(sql, {"limit": limit})
        rows = cur.fetchall()
        times.append(time.perf_counter() - began)
        order += [row[1] for row in rows]
        if not rows:
            break
    return times, order


def main() -> None:
    tenants = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    for name, sql in (("plain", PLAIN), ("fair", FAIR), ("sfq", SFQ)):
        load(10_000, tenants)
        times, order = drain(sql)
        small = [i for i, key in enumerate(order) if key != "A1"]
        taken = f"by claim position {max(small)}" if len(small) == tenants * 10 else f"{len(small)} only"
        median = statistics.median(times)
        print(f"{name}: median claim of 8 {median * 1e3:.2f} ms = {median / 8 * 1e6:.0f} us/job; "
              f"{tenants * 10} small-tenant jobs taken {taken} of {len(order)}")
    cur.execute("DROP SCHEMA fairproto CASCADE")


if __name__ == "__main__":
    main()
