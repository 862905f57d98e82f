"""A child forked from a deferq process draws job ids of its own, and the per-job paths
read its own process id. (The rest of job ids and of the worker's memory is in the unit
tier: tests/unit/test_producer.py, tests/unit/test_worker_memory.py.)"""

from __future__ import annotations

import os

from deferq import forks
from deferq.job import _CROCKFORD, new_job_id, new_job_ids


def test_ids_keep_their_order_and_a_forked_child_draws_its_own():
    """job.new_job_id: written out pair by pair, the ids of one process sort in the
    order they were made; a child process made by fork in the same millisecond does not
    continue the parent's sequence (its next id would be the parent's next)."""
    ids = [new_job_id() for _ in range(2000)] + new_job_ids(300) + [new_job_id()]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(i) == 26 and set(i) <= set(_CROCKFORD) for i in ids)
    if not hasattr(os, "fork"):
        return
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, to the parent
        os.write(write, new_job_id().encode())
        os._exit(0)
    mine = new_job_id()
    os.waitpid(pid, 0)
    theirs = os.read(read, 26).decode()
    os.close(read)
    os.close(write)
    assert len(theirs) == 26 and theirs != mine and theirs[10:] != mine[10:]  # other randomness


def test_a_forked_child_counts_encryption_nonces_from_a_start_of_its_own():
    """AES-GCM nonces count up from a random start (encryption/envelope.py): a forked
    child that went on from its parent's place would seal under the same nonces."""
    from deferq.encryption.envelope import NONCE, next_nonce

    next_nonce()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(write, b"".join(next_nonce() for _ in range(100)))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        theirs = pipe.read()
    assert os.waitpid(child, 0)[1] == 0 and len(theirs) == 100 * NONCE
    ours = [int.from_bytes(next_nonce(), "big") for _ in range(100)]
    assert ours == list(range(ours[0], ours[0] + 100))  # counting, within a process
    assert all(abs(int.from_bytes(theirs[:NONCE], "big") - mine) > 10**6 for mine in ours)


def test_a_forked_child_reads_its_own_process_id() -> None:
    assert forks.pid == os.getpid()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        os.write(write, f"{forks.pid} {os.getpid()}".encode())
        os._exit(0)
    os.close(write)
    seen, real = os.read(read, 100).decode().split()
    os.close(read)
    os.waitpid(child, 0)
    assert seen == real == str(child)
    assert forks.pid == os.getpid()
