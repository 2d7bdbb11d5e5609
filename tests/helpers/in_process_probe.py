"""The probe inside the test process itself (unit tests that register models in-process), and its
end: a test module that started it stops it, so that the pytest worker is not left running a probe.
A worker with a live segment would be the topmost probed ancestor of every job a later test starts
as its child, and a discovery sidecar would group those jobs under the worker."""

from __future__ import annotations

import os

import probe
from probe._state import PROBE
from probe_wire import read_segment, remove_segment, segment_path
from probe_wire.reader import CLOSED_ERROR


def stop_in_process_probe() -> str | None:
    """Unregister what is still registered and shut the probe down; remove what it left at this
    process's name if that is its closed segment. Returns the reader's error for what was left there
    (CLOSED_ERROR: the probe's own last publish, removed now), None when nothing was."""
    for rec in list(PROBE.records):
        model = rec.module_ref()
        if model is not None:
            probe.unregister(model)
    PROBE.shutdown()
    if not os.path.exists(segment_path(os.getpid())):
        return None
    # A last publish that named models (collected ones that made calls) is left closed, for a
    # sidecar whose next poll comes after the end; nobody reads it here. Anything else at this
    # name is not the probe's: left as it is.
    left = read_segment(os.getpid()).error
    if left == CLOSED_ERROR:
        remove_segment(os.getpid())
    return left


def in_process_probe_running() -> bool:
    """Whether this process publishes a segment (only asked where the probe was imported)."""
    return PROBE.writer is not None or os.path.exists(segment_path(os.getpid()))
