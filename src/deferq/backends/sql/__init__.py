"""SQL stores: SQLite (sqlite.py), PostgreSQL (postgres.py) and MySQL/MariaDB (mysql.py)
on one shared base (base.py: the contract as plans over named queries).

Every statement lives in a `.sql` file, one folder per database (`sqlite/`,
`postgres/`, `mysql/`): `queries.sql` holds the named queries, `migrations/NNNN_*.sql`
the numbered schema steps (the reference schema they must produce is a test's:
`tests/support/sql_schemas/`).
"""
