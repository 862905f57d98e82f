"""bench.walk runs: one plain job traced through deferq's rooms at run time."""

from __future__ import annotations

from bench import walk


def test_the_walk_of_one_job_finds_its_rooms(tmp_path):
    found = walk.walks(tmp_path)
    job = found.job
    assert {"task", "middleware", "store"} <= set(found.producer.rooms), found.producer.path
    assert {"worker", "store"} <= set(found.parts["lease"].rooms), found.parts["lease"].path
    assert {"task", "worker", "store"} <= set(job.rooms)
    assert job.hops == found.producer.hops + found.consumer.hops > 0
    assert set(job.folders().rooms) == {room.split("/")[0] for room in job.rooms}


def test_a_room_is_a_module_or_one_of_two_folders():
    at = walk.PACKAGE
    assert walk.room_of(str(at / "app.py")) == "app"
    assert walk.room_of(str(at / "observe" / "history.py")) == "observe/history"
    assert walk.room_of(str(at / "limits" / "__init__.py")) == "limits"
    assert walk.room_of(str(at / "worker" / "runners.py")) == "worker"
    assert walk.room_of(str(at / "backends" / "sql" / "sqlite.py")) == "store"
    assert walk.room_of(str(at / "backends" / "base.py")) is None  # a value helper: no room
    assert walk.room_of(str(at / "job.py")) is None
    assert walk.room_of(walk.__file__) is None  # outside deferq
