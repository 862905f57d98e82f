# make demo: the one-minute tour on embedded SQLite.   make test: the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast test-redis-oldest attack services browser lint docs bench bench-peers bench-speed bench-capacity soak endurance clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(VENV)/.demo: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	touch $@

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.demo
	$(BIN)/deferq demo

services:
	@scripts/services.sh

browser:
	@scripts/install-browser.sh

# The edit loop: the unit tier (tests/unit: no store server, no process, no browser) and the
# behaviour suite (tests/contract) on the memory and SQLite stores, under a minute on 2 cores.
# `make test` is the whole; docs/development.md, "The tests in tiers", says what each folder holds.
FAST_TESTS := tests/unit tests/contract
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_PROCESSES) -m "not slow" \
		-k "memory or sqlite or not (redis or postgres or mysql or cluster or shards)" $(FAST_TESTS)

# Three test processes (pytest-xdist): most tests wait on stores, workers and browsers
# (two kept a 2-core machine at a load of 1.5), so three share it well; TEST_PROCESSES=0
# runs them in this process.
# --dist loadgroup: a module marked xdist_group (its tests share a server, a browser or a
# wheel built once per module) runs on one process instead of building it on each.
# compileall first: the hundreds of worker, CLI and server processes the tests start read
# the bytecode instead of compiling deferq each (~0.2 s a process here, where
# PYTHONDONTWRITEBYTECODE=1 keeps Python from caching it by itself).
# --durations=25: the slowest tests printed at the end, to keep the whole under its 15 minutes.
TEST_PROCESSES ?= 3
test: $(STAMP) services browser
	$(BIN)/python -m compileall -q src bench tests > /dev/null
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_PROCESSES) --dist loadgroup --durations=25 $(PYTEST_ARGS)
	$(MAKE) --no-print-directory test-redis-oldest

# The attack suite long (docs/development.md, "The attack suite"): the fuzz of every entry
# point and the store differential drawing 10x the examples, not derandomized (a new seed
# each run), and the freeze-and-kill harness on every point, mode and store. `make test`
# runs a short, derandomized slice of the same tests. ATTACK_SHRINK=1 also shrinks a failure.
attack: $(STAMP) services
	ATTACK_LONG=1 $(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_PROCESSES) --dist loadgroup -rxX \
		tests/attack $(PYTEST_ARGS)

# The Redis tests again on the oldest redis-py that the `redis` extra allows (the newest
# runs above), on one server and a Cluster (shards call each server as one server is called):
# scripts/redis-oldest.sh makes a venv with that redis-py and all else from .venv.
REDIS_TESTS := tests/stores/test_redis_backend.py tests/stores/test_redis_errors.py tests/contract
test-redis-oldest: $(STAMP) services
	@scripts/redis-oldest.sh
	.venv-redis-oldest/bin/python -m pytest -q -p no:cacheprovider -n $(TEST_PROCESSES) -k "redis and not shards" $(REDIS_TESTS)

# ruff (style, complexity) and mypy --strict over src/deferq (settings in pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/mypy

# the documentation site: mkdocs.yml and docs/ into site/; --strict makes a broken link,
# anchor, or a page missing from the nav an error. NO_MKDOCS_2_WARNING quiets the theme's
# banner about its end of life (May 2027; the docs extra keeps mkdocs < 2 and material < 10).
# It builds in a venv of its own holding the docs extra alone, so a clean clone (CI's) proves
# that the extra is all the site needs; made again when pyproject.toml changes.
DOCS_VENV := .venv-docs
docs: $(DOCS_VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(DOCS_VENV)/bin/mkdocs build --strict --site-dir site
	@echo "make docs: the site is in site/ (open site/index.html)"

$(DOCS_VENV)/.installed: pyproject.toml
	rm -rf $(DOCS_VENV)
	$(PY) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q -e '.[docs]'
	touch $@

bench: $(VENV)/.demo
	$(BIN)/deferq bench

# 100,000 jobs through 2 workers, one SIGKILLed every 2-4 s (bench/soak.py), on a fresh
# SQLite file; SOAK_URL=redis://127.0.0.1:6379/0 (or postgresql://, mysql://) for another
# store, SOAK_ARGS for more (--jobs, --concurrency, --lease, --seed, --json). Exit 1 when a
# job was lost or re-runs exceed concurrency + prefetch per kill. Not part of `make test`.
soak: $(STAMP) $(if $(SOAK_URL),services)
	$(BIN)/python -m bench.soak $(if $(SOAK_URL),--url '$(SOAK_URL)') $(SOAK_ARGS)

# workers, a server and steady load for ENDURANCE_MINUTES (10) on SQLite, Redis, Redis Cluster,
# PostgreSQL and MariaDB at once (bench/endurance.py, docs/testing.md): connections, fds,
# threads, RSS and Redis memory sampled every 10 s must stay flat, every job run once, the
# logs free of store errors; exit 1 otherwise. ENDURANCE_ARGS for more (--stores redis,
# --json, --keep-logs). CI (.ci/run) runs a 3-minute slice of it after make test.
ENDURANCE_MINUTES ?= 10
endurance: $(STAMP) services
	$(BIN)/python -m bench.endurance --minutes $(ENDURANCE_MINUTES) $(ENDURANCE_ARGS)

# deferq against celery, rq, dramatiq, huey, arq, saq, taskiq (Redis), procrastinate (PostgreSQL) and
# huey's SQLite storage (SQLite):
# docs/bench-peers.md. arq goes in with --no-deps: it caps redis-py below 6 and runs on ours.
bench-peers: $(STAMP) services
	$(BIN)/pip install -q -e '.[peers]'
	$(BIN)/pip install -q --no-deps 'arq>=0.28'
	$(BIN)/python -m bench.peers.run $(BENCH_ARGS)
	$(BIN)/python -m bench.peers.run --postgres $(BENCH_ARGS)
	$(BIN)/python -m bench.peers.run --sqlite $(BENCH_ARGS)

# the speed figures, each as a ratio to its raw reference in the same run, medians of 3
# (bench/speed.py): Redis enqueue/batch/no-op drains/B/pickup/delay/memory, SQLite
# enqueue_many vs a bare executemany, PostgreSQL durable=False vs durable.
# SPEED_ARGS for more (--runs, --scale, --only enqueue,batch,...). Each figure with the 1-minute
# load it was measured at; a ratio measured above load 1 is marked (docs/benchmarks.md).
bench-speed: $(STAMP) services
	$(BIN)/python -m bench.speed $(SPEED_ARGS)

# how deferq scales out (bench/capacity.py, docs/capacity.md): CPU per job and throughput on
# redis-servers of its own (1 server; Cluster of 1 and 3 masters; 1, 2, 4 shards), on a
# PostgreSQL server of its own (initdb in a temporary folder) and through `deferq serve`
# with 1, 2, 4 processes; medians of 3. CAPACITY_ARGS for more (--only redis, --runs 1, ...).
bench-capacity: $(STAMP)
	$(BIN)/python -m bench.capacity $(CAPACITY_ARGS)

clean:
	rm -rf $(VENV) .venv-redis-oldest $(DOCS_VENV) build site *.egg-info
