#!/usr/bin/env bash
# A venv that sees everything of .venv but the oldest redis-py the `redis` extra allows
# (the lower bound in pyproject.toml), so the Redis tests run on both ends of the range.
set -euo pipefail
oldest=$(sed -n 's/^redis = \["redis>=\([0-9.]*\),.*/\1/p' pyproject.toml)
venv=.venv-redis-oldest
if [ ! -f "$venv/.redis-$oldest" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "redis==$oldest"
  own=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  main=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  # after its own site-packages: its redis shadows .venv's, the rest (deferq included) comes from .venv
  echo "import site; site.addsitedir('$main')" > "$own/zz-main-venv.pth"
  touch "$venv/.redis-$oldest"
fi
"$venv/bin/python" -c 'import redis; print("redis-py", redis.__version__)'
