"""probe_wire stands alone: the sidecar reads segments without activating the probe, probe_wire imports
nothing of the layers above it, and the payload's shape is written once (the schema).

Import checks run in fresh interpreters: this test process has long imported the probe.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import probe_wire
from probe_wire import schema

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design.md"
# What probe_wire/ruff.toml bans, as top-level module names.
BANNED = ("probe", "sidecar", "torch", "flask", "werkzeug", "waitress", "psutil", "pynvml", "prometheus_client")
SIDECAR_MODULES = ("sidecar.poll.poller", "sidecar.serve.server", "sidecar.sources.segments", "probe_wire")
WIRE_MODULES = tuple(
    f"probe_wire.{m.name}" for m in pkgutil.iter_modules(probe_wire.__path__) if not m.name.startswith("_")
)
EXPORTED = sorted(n for m in WIRE_MODULES for n in importlib.import_module(m).__all__)

# Imports the modules named in argv after wrapping atexit.register and os.register_at_fork, so that
# every handler registered meanwhile is recorded with the module that defines it.
IMPORTER = r"""
import atexit, importlib, json, os, sys
handlers = []
def owner(fn):
    return getattr(getattr(fn, "__func__", fn), "__module__", None) or "?"
def on_exit(fn, *args, **kwargs):
    handlers.append(["atexit", owner(fn)])
    return real_atexit(fn, *args, **kwargs)
def on_fork(**kwargs):
    handlers.extend(["at-fork", owner(fn)] for fn in kwargs.values())
    return real_fork(**kwargs)
real_atexit, real_fork = atexit.register, os.register_at_fork
atexit.register, os.register_at_fork = on_exit, on_fork
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps({"modules": sorted(sys.modules), "handlers": handlers}))
"""


def import_fresh(*modules: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", IMPORTER, *modules],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def of_probe(module: str) -> bool:
    """A module of the probe package itself (not probe_wire)."""
    return module == "probe" or module.startswith("probe.")


def test_the_recorder_sees_the_probe_register_its_handlers():
    """The control for the tests below: importing the probe is seen, and so are its handlers."""
    found = import_fresh("probe")
    assert "probe" in found["modules"]
    kinds = {kind for kind, module in found["handlers"] if of_probe(module)}
    assert kinds == {"atexit", "at-fork"}


@pytest.mark.parametrize("module", SIDECAR_MODULES)
def test_the_sidecar_reads_segments_without_the_probe(module):
    found = import_fresh(module)
    assert module in found["modules"]
    assert [m for m in found["modules"] if of_probe(m)] == []
    assert [h for h in found["handlers"] if of_probe(h[1])] == []


def test_probe_wire_imports_none_of_the_banned_modules():
    assert set(WIRE_MODULES) >= {
        "probe_wire.cleanup",
        "probe_wire.follower",
        "probe_wire.header",
        "probe_wire.names",
        "probe_wire.home",
        "probe_wire.reader",
        "probe_wire.schema",
        "probe_wire.writer",
    }
    found = import_fresh("probe_wire", *WIRE_MODULES)
    assert [m for m in found["modules"] if m.split(".")[0] in BANNED] == []
    assert found["handlers"] == []


def test_importing_probe_wire_imports_none_of_its_modules():
    """The package is cheap and does nothing: each name is imported from its module on first use."""
    found = import_fresh("probe_wire")
    assert [m for m in found["modules"] if m.startswith("probe_wire.")] == []


def test_every_module_is_looked_in_and_no_name_is_exported_twice():
    assert sorted(f"probe_wire.{m}" for m in probe_wire._MODULES) == sorted(WIRE_MODULES)
    assert len(EXPORTED) == len(set(EXPORTED))
    assert {"read_segment", "SegmentFollower", "SegmentWriter", "empty_payload", "STATES"} <= set(EXPORTED)


@pytest.mark.parametrize("name", EXPORTED)
def test_each_exported_name_is_its_module_s_own(name):
    (home,) = [m for m in WIRE_MODULES if name in importlib.import_module(m).__all__]
    assert getattr(probe_wire, name) is getattr(importlib.import_module(home), name)
    assert name in dir(probe_wire)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError):
        probe_wire.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):
        probe_wire._fast_validate  # noqa: B018 -- private names stay in their module


def test_empty_payload_is_the_schema_with_every_value_empty():
    p = schema.empty_payload(pid=7, start_ticks=11)
    clean, reason = schema.validate_payload(p)
    assert reason is None and clean == p
    assert (p["schema"], p["pid"], p["start_ticks"], p["role"]) == (schema.SCHEMA, 7, 11, "main")
    assert p["runtime"] == schema.empty_runtime()
    assert p["runtime"]["cuda_initialized"] is False and p["trimmed"] is False
    assert p["models"] == p["events"] == p["errors"] == p["memory"] == []
    # Fresh containers every call: a payload the probe fills never leaks into the next one.
    q = schema.empty_payload()
    assert q["models"] is not p["models"] and q["runtime"] is not p["runtime"]
    assert q["runtime"]["devices"] is not p["runtime"]["devices"]


def test_the_payload_block_of_design_md_is_generated_from_the_schema():
    """Fails when docs/design.md is not current. Regenerate: python -m probe_wire.schema --write-docs"""
    text = DESIGN.read_text(encoding="utf-8")
    assert schema.docs_with_payload_shape(text) == text, (
        "docs/design.md's payload block differs from the schema: run python -m probe_wire.schema --write-docs"
    )
    assert f"```\n{schema.payload_shape_text()}```\n" in text


def schema_keys(kind: object) -> set:
    """Every key of every map in the schema."""
    if isinstance(kind, dict):
        return set(kind) | {k for sub in kind.values() for k in schema_keys(sub)}
    inner = getattr(kind, "kind", getattr(kind, "item", None))
    return set() if inner is None else schema_keys(inner)


def test_the_shape_text_names_every_key_of_the_schema():
    text = schema.payload_shape_text()
    every = schema_keys(schema._PAYLOAD)
    assert {"schema", "runtime", "uuid", "step_source", "message"} <= every
    assert [k for k in sorted(every) if f'"{k}": ' not in text] == []


def test_docs_with_payload_shape_refuses_a_text_without_the_block():
    with pytest.raises(ValueError):
        schema.docs_with_payload_shape("# nothing here\n")
