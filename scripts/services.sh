#!/usr/bin/env bash
# Start the local stores the tests use, if they are not running (loopback only).
# On a machine without them the backend tests skip, except in CI where they fail.
set -u
if command -v redis-server >/dev/null && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no >/dev/null
fi
if command -v pg_ctlcluster >/dev/null && ! pg_isready -h 127.0.0.1 -q 2>/dev/null; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi
if [ -x /usr/sbin/mariadbd ] && ! mariadb-admin -uroot -h127.0.0.1 ping >/dev/null 2>&1; then
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd || true
fi
for _ in $(seq 1 50); do  # wait up to 10 s for what was started
  ok=1
  command -v redis-cli >/dev/null && { redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 || ok=0; }
  command -v pg_isready >/dev/null && { pg_isready -h 127.0.0.1 -q 2>/dev/null || ok=0; }
  [ -x /usr/sbin/mariadbd ] && { mariadb-admin -uroot -h127.0.0.1 ping >/dev/null 2>&1 || ok=0; }
  [ $ok = 1 ] && break
  sleep 0.2
done
exit 0
