-- deferq on MySQL / MariaDB, schema version 15: names compare exactly. utf8mb4_bin is a
-- PAD SPACE collation, which calls 'k' and 'k ' equal: a unique key, an event's key or
-- name, a fair key, a limit's name or any kv key with a trailing space met another's
-- record. {exact} is a NO PAD binary collation (MariaDB 10.2+: utf8mb4_nopad_bin, MySQL
-- 8.0.17+: utf8mb4_0900_bin), picked from the server at migration (mysql.py). NO PAD
-- only tells apart what PAD SPACE merged, so no stored row can collide here. Each table
-- is rewritten once, with its indexes; one statement a table, each safe to run again.
ALTER TABLE {jobs} CONVERT TO CHARACTER SET utf8mb4 COLLATE {exact};
ALTER TABLE {kv} CONVERT TO CHARACTER SET utf8mb4 COLLATE {exact};
ALTER TABLE {paused} CONVERT TO CHARACTER SET utf8mb4 COLLATE {exact};
ALTER TABLE {history} CONVERT TO CHARACTER SET utf8mb4 COLLATE {exact};
ALTER TABLE {deps} CONVERT TO CHARACTER SET utf8mb4 COLLATE {exact};
ALTER TABLE {fair} CONVERT TO CHARACTER SET utf8mb4 COLLATE {exact};
ALTER TABLE {migrations} CONVERT TO CHARACTER SET utf8mb4 COLLATE {exact};
