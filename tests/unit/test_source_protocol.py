"""The pollers give the server what sidecar/serve/source.py declares (the server imports only those
Protocols): every method, callable the way the server calls it, on Poller, JobsPoller and the view
JobsPoller.for_caller returns. A method renamed or given another required argument fails here."""

from __future__ import annotations

import inspect
import os

import pytest

from sidecar.poll.discovery import JobsPoller
from sidecar.poll.poller import Poller
from sidecar.serve.source import Documents, DocumentSource, PerCallerSource


def _members(protocol: type) -> dict[str, inspect.Signature]:
    """A Protocol's methods (its own and inherited) and their signatures."""
    out = {}
    for klass in reversed(protocol.__mro__):
        if klass is object or klass.__name__ == "Protocol" or not getattr(klass, "_is_protocol", False):
            continue
        for name, fn in vars(klass).items():
            if inspect.isfunction(fn) and not name.startswith("_"):
                out[name] = inspect.signature(fn)
    return out


def _calls(sig: inspect.Signature) -> list[tuple[tuple, dict]]:
    """Each way the server may call a method of this signature: with its optional arguments left
    out, given by position, and given by name."""
    params = [p for p in sig.parameters.values() if p.name != "self"]
    required = tuple(object() for p in params if p.default is inspect.Parameter.empty)
    every = tuple(object() for _ in params)
    return [(required, {}), (every, {}), (required, {p.name: None for p in params if p.default is not inspect.Parameter.empty})]


def _assert_provides(obj: object, protocol: type) -> None:
    members = _members(protocol)
    assert members, protocol
    for name, sig in members.items():
        method = getattr(obj, name, None)
        assert callable(method), f"{type(obj).__name__} has no {name}() ({protocol.__name__})"
        for args, kwargs in _calls(sig):
            inspect.signature(method).bind(*args, **kwargs)  # TypeError: not callable that way


def test_the_protocols_declare_what_the_server_calls():
    assert set(_members(Documents)) == {"status_document", "jobs_document", "history_document", "watch_document"}
    assert set(_members(DocumentSource)) == {*_members(Documents), "snapshot"}
    assert set(_members(PerCallerSource)) == {*_members(DocumentSource), "for_caller"}


def test_a_pid_poller_is_a_document_source():
    _assert_provides(Poller(os.getpid(), nvml_source=object(), system_gpus_fn=list), DocumentSource)


@pytest.mark.parametrize("uid", [None, os.getuid()], ids=["every-user", "own-user"])
def test_discovery_is_a_per_caller_source_and_its_views_give_the_documents(uid):
    poller = JobsPoller(nvml_source=object(), system_gpus_fn=list, uid=uid)
    _assert_provides(poller, PerCallerSource)
    _assert_provides(poller.for_caller(lambda: 12345), Documents)


def test_a_source_without_a_method_is_found_out():
    class NoHistory:
        def snapshot(self):
            return None, None

        def status_document(self, job=None):
            return None

        def jobs_document(self):
            return None

    with pytest.raises(AssertionError, match="history_document"):
        _assert_provides(NoHistory(), DocumentSource)

    class NarrowHistory(NoHistory):
        def history_document(self, job):  # no `since`: the server passes it
            return None

    with pytest.raises(TypeError):
        _assert_provides(NarrowHistory(), DocumentSource)
