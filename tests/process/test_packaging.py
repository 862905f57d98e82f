"""The wheel as a user gets it: built from a copy of the source tree, installed with its
`redis` extra into a fresh virtual environment, and run end to end from there (the
environment's own `deferq` command, a tasks module of its own) on SQLite and on the
shared Redis. The commands under test never import deferq from src/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# Its tests share a module fixture: one xdist worker runs them all and builds it once.
pytestmark = pytest.mark.xdist_group("packaging")

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "src" / "deferq"
DATA_SUFFIXES = {".lua", ".sql", ".txt"}

TASKS = '''\
import deferq

app = deferq.App()  # DEFERQ_URL


@app.task(queue="packaging")
def add(a, b):
    return a + b
'''


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 90) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    what = " ".join(map(str, command))
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel --no-deps` of a copy of the tree (the build writes build/ and
    *.egg-info next to its sources: not in the working tree of the person testing)."""
    base = tmp_path_factory.mktemp("wheel")
    tree = base / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, tree / name)
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = base / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, tree, cwd=base, timeout=180)
    (built,) = out.glob("deferq-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the wheel and its `redis` extra installed."""
    where = tmp_path_factory.mktemp("venv") / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", where, cwd=where.parent)
    run(sys.executable, "-m", "pip", "--python", where / "bin" / "python", "install", "-q",
        f"deferq[redis] @ {wheel.as_uri()}", cwd=where.parent, timeout=180)
    return where


def user_env(url: str) -> dict[str, str]:
    """The environment of a user of the wheel: no source tree on the path, no app or
    store of the caller's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DEFERQ_APP")}
    env["DEFERQ_URL"] = url
    return env


def expected_files() -> set[str]:
    """Every module, Lua script, SQL file, schema text and static file under src/deferq,
    as wheel paths, and the py.typed marker when the tree has one."""
    found = set()
    for path in SOURCE.rglob("*"):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        relative = path.relative_to(SOURCE)
        if path.suffix in DATA_SUFFIXES | {".py"} or "static" in relative.parts or path.name == "py.typed":
            found.add(f"deferq/{relative.as_posix()}")
    return found


def test_the_wheel_holds_every_file_the_code_reads(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = expected_files()
    assert {n for n in expected if n.endswith(".lua")}, "no Lua scripts found under src/deferq"
    assert {n for n in expected if n.endswith(".sql")} and {n for n in expected if "/static/" in n}
    assert sorted(expected - names) == [], f"missing from {wheel.name}"


@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_the_installed_wheel_runs_a_job(store: str, venv: Path, tmp_path: Path, request) -> None:
    # redis_url: the shared Redis (DEFERQ_TEST_REDIS) under a key prefix deleted afterwards
    url = request.getfixturevalue("redis_url") if store == "redis" else f"sqlite:///{tmp_path}/jobs.db"
    (tmp_path / "pkgtasks.py").write_text(TASKS)
    env, deferq = user_env(url), venv / "bin" / "deferq"

    where = run(venv / "bin" / "python", "-c", "import deferq; print(deferq.__file__)", cwd=tmp_path, env=env)
    assert Path(where.strip()).is_relative_to(venv), f"deferq was imported from {where.strip()}, not the venv"

    app = ("--app", "pkgtasks:app")
    job = json.loads(run(deferq, "enqueue", "add", "--args", "[2, 3]", "--json", *app, cwd=tmp_path, env=env))
    assert job["state"] == "queued"
    log = run(deferq, "worker", "--burst", "--queue", "packaging", *app, cwd=tmp_path, env=env)
    done = json.loads(run(deferq, "job", job["id"], "--json", *app, cwd=tmp_path, env=env))
    assert (done["state"], done["result"], done["attempts"]) == ("succeeded", 5, 1), log
