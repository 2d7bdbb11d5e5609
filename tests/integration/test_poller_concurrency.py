"""One poll at a time (issue 12 item 8): the poller thread and the CLI's main thread both call
`poll_once`, and the sources keep state between polls that is not thread-safe (the segment
follower's open files). Real poller, real sources, a real target process; the segment source only
notes how many polls are inside it at once and lingers there, so that an overlap cannot hide."""

from __future__ import annotations

import subprocess
import threading
import time

from sidecar.poll.poller import Poller
from sidecar.sources.segments import SegmentSource


class CountingSegmentSource(SegmentSource):
    def __init__(self) -> None:
        super().__init__()
        self._count_lock = threading.Lock()
        self.inside = 0
        self.most_inside = 0
        self.polls = 0

    def poll(self, tree):
        with self._count_lock:
            self.inside += 1
            self.polls += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            time.sleep(0.02)  # a slow read of many segments: room for a second caller
            return super().poll(tree)
        finally:
            with self._count_lock:
                self.inside -= 1


def test_polls_from_the_poller_thread_and_other_threads_never_overlap():
    target = subprocess.Popen(["sleep", "60"])
    src = CountingSegmentSource()
    poller = Poller(target.pid, interval_s=0.01, segment_source=src, system_gpus_fn=list)
    errors: list[BaseException] = []

    def caller() -> None:
        try:
            for _ in range(10):
                poller.poll_once()
        except BaseException as e:  # noqa: BLE001 -- reported by the assertion below
            errors.append(e)

    try:
        poller.start()
        threads = [threading.Thread(target=caller) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        poller.stop()
        target.kill()
        target.wait()
    assert errors == []
    assert src.polls >= 30
    assert src.most_inside == 1, f"{src.most_inside} polls ran at once"
