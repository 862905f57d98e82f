"""SQL backends: PostgreSQL (postgres.py) and MySQL/MariaDB (mysql.py) on one shared base.

Every statement lives in a `.sql` file, one folder per database (`postgres/`, `mysql/`):
`queries.sql` holds the named queries, `migrations/NNNN_*.sql` the numbered schema steps.
"""
