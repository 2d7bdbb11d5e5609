"""Discovery lists /dev/shm again only when the directory changed (its mtime), and never trusts a
listing whose mtime was too young to be settled (the kernel stamps directories from a coarse clock:
two changes within one tick leave one mtime)."""

from __future__ import annotations

import os
import time

from sidecar.jobs import REDISCOVER_EVERY_POLLS, JobsPoller


def _poller(shm) -> tuple[JobsPoller, list[int]]:
    p = JobsPoller(shm_dir=str(shm), nvml_source=object(), system_gpus_fn=list)
    listings = []
    real = p._list_segment_pids

    def counted() -> set[int]:
        listings.append(1)
        return real()

    p._list_segment_pids = counted  # type: ignore[method-assign]
    p.poll_count = 1  # not a REDISCOVER poll
    return p, listings


def _age(path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_an_unchanged_directory_is_not_listed_again_and_a_new_name_is_found_at_once(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    mine = shm / f"dsh-probe.{os.getpid()}"
    mine.write_bytes(b"")
    _age(shm, 5)
    p, listings = _poller(shm)
    assert p._segment_pids() == {os.getpid()}
    assert p._segment_pids() == {os.getpid()} and len(listings) == 1  # reused
    mine.unlink()  # the directory changes: listed again, at once
    _age(shm, 5)
    assert p._segment_pids() == set() and len(listings) == 2
    p.poll_count = REDISCOVER_EVERY_POLLS  # and every REDISCOVER_EVERY_POLLS-th poll lists anyway
    p._segment_pids()
    assert len(listings) == 3


def test_a_listing_taken_while_the_mtime_was_young_is_not_reused(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    p, listings = _poller(shm)
    assert p._segment_pids() == set()  # the directory was made just now: its mtime may move no more
    # A name made within the same clock tick keeps the directory's mtime: planted here by hand.
    mtime_ns = os.stat(shm).st_mtime_ns
    (shm / f"dsh-probe.{os.getpid()}").write_bytes(b"")
    os.utime(shm, ns=(mtime_ns, mtime_ns))
    assert p._segment_pids() == {os.getpid()} and len(listings) == 2
