"""The sidecar's own segment source, keeping what its last poll read so that a test can check it."""

from __future__ import annotations

from sidecar.sources.segments import SegmentSource


class RecordingSegmentSource(SegmentSource):
    """The sidecar's own segment source; keeps what the last poll read so a test can check it."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.last: dict = {}

    def poll(self, tree):
        self.last = super().poll(tree)
        return self.last
