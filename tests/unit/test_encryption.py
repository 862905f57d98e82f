"""Encryption at rest, the parts without a store: keys and DEFERQ_ENCRYPTION_KEYS, the
envelope's round trip and its refusal of every changed, cut, copied or foreign value
(properties), and the binding that survives a sharded store's id marks."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import deferq
from deferq.encryption import Encryption, Keyring, Unreadable, new_key
from deferq.encryption.envelope import MARK, size_of
from deferq.encryption.jobs import bound
from deferq.encryption.keys import key_bytes, parse_env
from deferq.job import mark_id, new_job_id

KEY_A, KEY_B = new_key(), new_key()
RING = Keyring(Encryption(keys={"a": KEY_A, "b": KEY_B}, current="a"))
OTHER = Keyring(Encryption(keys={"a": KEY_B}))  # the same id, another key
SCALARS = st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.text(max_size=20)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=2048), where=st.binary(min_size=1, max_size=60))
def test_what_is_sealed_opens_to_itself_and_says_its_size(data, where):
    sealed = RING.seal(data, where)
    assert sealed.startswith(f"{MARK}a:")
    assert RING.open(sealed, where) == data
    assert size_of(sealed) == len(data)
    assert RING.seal(data, where) != sealed  # a fresh nonce each time


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=512), where=st.binary(min_size=1, max_size=40), cut=st.integers(1, 200),
       at=st.integers(0, 10_000), bit=st.integers(0, 7), elsewhere=st.binary(min_size=1, max_size=40))
def test_a_changed_cut_moved_or_foreign_value_never_opens(data, where, cut, at, bit, elsewhere):
    sealed = RING.seal(data, where)
    head, body = sealed.rsplit(":", 1)
    raw = bytearray(base64.b64decode(body))
    raw[at % len(raw)] ^= 1 << bit
    flipped = f"{head}:{base64.b64encode(bytes(raw)).decode()}"
    truncated = sealed[:-min(cut, len(body))]
    for changed in (flipped, truncated):
        with pytest.raises(Unreadable):
            RING.open(changed, where)
    if elsewhere != where:
        with pytest.raises(Unreadable, match="copied from another job"):
            RING.open(sealed, elsewhere)
    with pytest.raises(Unreadable, match="not the one it was written with"):
        OTHER.open(sealed, where)
    with pytest.raises(Unreadable, match="not among this process's keys"):
        RING.open(sealed.replace(f"{MARK}a:", f"{MARK}zz:", 1), where)


# A value as stores already keep it (written by deferq before it used pybase64): the
# stored form is "$enc:<key id>:<standard base64, padded>" and stays readable.
STORED_KEY = bytes(range(32))
STORED = "$enc:2026-06:V3o+91d19Xi1CC5MbdYypaBqU2rRkCy+qBgJHwLTA3cmWD0ZQCisSkvs7RD7jzhnLA=="
STORED_AT = "06H5B6ZKX8C4JYJ1Q9T2R7M3WD"


def test_a_value_stored_in_the_documented_form_still_opens():
    ring = Keyring(Encryption(keys={"2026-06": STORED_KEY}))
    assert ring.open(STORED, bound(STORED_AT, "args")) == b'{"ssn":"123-45-6789"}'
    resealed = ring.seal(b'{"ssn":"123-45-6789"}', bound(STORED_AT, "args"))
    head, body = resealed.rsplit(":", 1)  # written in the same form: readable by the code before
    assert head == "$enc:2026-06" and base64.b64decode(body, validate=True) and len(body) == len(STORED) - 13


@pytest.mark.parametrize("body", ["V3o+91d19Xi1 CC5M", "V3o+91d19Xi1CC5M\n", "V3o-91d19Xi1CC5M", "V3o+91d19Xi1CC5",
                                  "V3o+91d19Xi1CC5M=", "é3o+91d19Xi1CC5M"])
def test_text_that_is_not_strict_base64_is_refused_with_a_sentence(body):
    with pytest.raises(Unreadable, match="is not base64"):
        RING.open(f"{MARK}a:{body}", b"x")


@settings(max_examples=100, deadline=None)
@given(value=JSON)
def test_json_values_survive_a_seal(value):
    import orjson

    assert orjson.loads(RING.open(RING.seal(orjson.dumps(value), b"x"), b"x")) == value


def test_keys_as_bytes_or_base64_and_their_refusals():
    raw = base64.urlsafe_b64decode(KEY_A)
    assert key_bytes("k", raw) == key_bytes("k", KEY_A) == key_bytes("k", KEY_A.rstrip("="))
    with pytest.raises(deferq.ConfigError, match="'k' is 16 bytes long"):
        key_bytes("k", b"x" * 16)
    with pytest.raises(deferq.ConfigError, match="not URL-safe base64"):
        key_bytes("k", "not base64 at all!")
    with pytest.raises(deferq.ConfigError, match="key id"):
        Encryption(keys={"has:colon": KEY_A})
    with pytest.raises(deferq.ConfigError, match="'c' is not among the keys"):
        Encryption(keys={"a": KEY_A, "b": KEY_B}, current="c")
    with pytest.raises(deferq.ConfigError, match="not among"):
        Encryption(keys={"a": KEY_A, "b": KEY_B})  # two keys: which one writes must be said
    assert Encryption(keys={"only": KEY_A}).current == "only"
    assert KEY_A not in repr(Encryption(keys={"a": KEY_A}))  # keys never shown


def test_the_environment_names_keys_the_first_writing():
    found = Encryption.from_env(environ={"DEFERQ_ENCRYPTION_KEYS": f"new:{KEY_B}, old:{KEY_A}"})
    assert found.current == "new" and list(found.key_table()) == ["new", "old"]
    assert not Encryption.from_env(environ={}).has_keys
    refused_texts = ((f"{KEY_A}", "not id:key"), (f"a:{KEY_A},a:{KEY_B}", "twice"), ("a:c2hvcnQ=", "5 bytes long"))
    for text, says in refused_texts:
        with pytest.raises(deferq.ConfigError, match=says) as refused:
            parse_env(text)
        assert KEY_A[:8] not in str(refused.value) and KEY_B[:8] not in str(refused.value)


def test_the_binding_is_the_jobs_wherever_a_sharded_store_keeps_it():
    job_id = new_job_id()
    marked = mark_id(job_id, 3)
    assert bound(job_id, "args") == bound(marked, "args") == bound(mark_id(marked, 200), "args")
    assert bound(job_id, "args") != bound(job_id, "result") != bound(new_job_id(), "result")


def test_a_claimed_job_keeps_the_checkpoints_its_claim_brought():
    """Opening a claimed job's arguments makes a new Job: the durable-step checkpoints the
    store's claim carried go with it, or the worker would read them again (a round trip a
    batch on Redis: it doubled the worker's CPU per job)."""
    from deferq.encryption.jobs import ARGS, Sealer
    from deferq.job import carried, carry, fresh_job, new_job_id

    sealer = Sealer(Encryption(keys={"a": KEY_A}), {})
    job_id = new_job_id()
    sealed = RING.seal(b'[[1], {"x": 2}]', bound(job_id, "args"))
    job = fresh_job(job_id, "t", (), {ARGS: sealed}, "default", 1, deferq.JobState.QUEUED, 3, None, None, 0.0,
                    0.0, {}, None, None, None, (), None)
    carry(job, {"one": b"{}"})
    (opened,) = sealer.open_claimed([job])
    assert (opened.args, opened.kwargs) == ((1,), {"x": 2})
    assert carried(opened) == {"one": b"{}"}


def test_nonces_never_repeat_across_threads():
    """The nonces count up from a random start: threads never share one (a forked child
    draws a start of its own: tests/process/test_forks.py)."""
    import threading

    from deferq.encryption.envelope import NONCE, next_nonce

    made: list[bytes] = []
    threads = [threading.Thread(target=lambda: made.extend(next_nonce() for _ in range(2000))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(made) == len(set(made)) == 8000 and {len(n) for n in made} == {NONCE}


def test_the_copies_sealing_makes_keep_every_other_field():
    from deferq.backends.base import Outcome
    from deferq.encryption.jobs import with_arguments, with_sealed
    from deferq.job import Job

    job = Job(id=new_job_id(), task="t", args=(1,), kwargs={"a": 1}, queue="q", priority=0, attempts=2,
              key="k", tags=("x",), meta={"m": 1}, progress_message="p", fair_key="f")
    opened = with_arguments(job, (2,), {"b": 2})
    assert type(opened) is Job and opened == job.evolve(args=(2,), kwargs={"b": 2})
    outcome = Outcome(job, "retry", 5.0, "boom", None, 0.5, due=None, steps_keep=7.0)
    assert with_sealed(outcome, "sealed", {"r": 1}) == Outcome(job, "retry", 5.0, "sealed", {"r": 1}, 0.5,
                                                               steps_keep=7.0)


@pytest.mark.parametrize("package", ["cryptography", "pybase64"])
def test_keys_without_the_encryption_extra_stop_with_a_sentence(package, monkeypatch):
    import sys

    for name in [name for name in sys.modules if name == package or name.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)  # imports of it now fail, as where it is missing
    monkeypatch.setitem(sys.modules, package, None)
    with pytest.raises(deferq.ConfigError, match=rf"encryption needs the {package} package: install deferq's "
                                                 r"encryption extra \(pip install 'deferq\[encryption\]'\)"):
        Keyring(Encryption(keys={"a": KEY_A}))
