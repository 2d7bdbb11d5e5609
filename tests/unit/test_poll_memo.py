"""A poller's memos (the verdict's, the history sample's, the document entries', the lazy document,
the last poll's GPU facts and derived facts, the placement's) never change what it publishes: fed
the very same inputs poll after poll, the poller that keeps them and one that forgets them before
every poll publish equal status documents, summaries, jobs lists and history samples, over scripts
that change facts between polls (payloads, GPU readings, a process's CPU, a worker coming and
going, NVML down, a busy segment, events) and leave them alone.
"""

from __future__ import annotations

import json

import pytest

from sidecar.poll.poller import Poller
from sidecar.poll.samples import SampleMemo
from sidecar.verdict import VerdictMemo
from tests.helpers.scripted_poll import ROOT, ScriptedJob, ScriptedSources


def _poller(sources: ScriptedSources, job: ScriptedJob, lazy: bool) -> Poller:
    return Poller(
        ROOT,
        interval_s=0.25,
        tree_source=sources.tree_source,
        segment_source=sources.segment_source,
        nvml_source=sources.nvml_source,
        system_gpus_fn=list,
        clock=job.now,
        lazy_document=lazy,
    )


def _forget(p: Poller) -> None:
    p._verdict_memo = VerdictMemo()
    p._sample_memo = SampleMemo()
    p._entry_cache.clear()
    p._summary_memo.clear()
    p._last_facts = None  # its derived facts (Facts.keep_derived)
    p._collector._gpus = ()  # the last poll's GPU facts (reused when they read the same)
    p._placement._payloads = []
    p._placement._shown = (None, None, None, (None, None))


def _sample(s) -> str:
    """A history sample's every slot (NaN packed for None reads the same on both sides)."""
    return repr([getattr(s, name) for name in type(s).__slots__])


def _same(a, b) -> None:
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("lazy", [True, False])
def test_memoised_polls_publish_what_fresh_ones_do(seed, lazy):
    job = ScriptedJob(seed)
    sources = ScriptedSources(job)
    kept, fresh = _poller(sources, job, lazy), _poller(sources, job, lazy=False)
    statuses = set()
    for n in range(160):
        job.step()
        kept.poll_once()
        _forget(fresh)
        fresh.poll_once()
        if lazy and n % 3 == 1:
            continue  # a poll whose document nobody asks for: the next one is asked for
        doc, want = kept.status_document(), fresh.status_document()
        _same(doc, want)
        _same(kept.jobs_document(), fresh.jobs_document())
        statuses.add((doc["status"], tuple(w["code"] for w in doc["warnings"])))
    _same(kept.history_document(), fresh.history_document())
    assert [_sample(s) for s in kept.history.samples()] == [_sample(s) for s in fresh.history.samples()]
    assert len(statuses) > 1  # the script moved the verdict, not only the numbers
