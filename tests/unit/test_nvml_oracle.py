"""NvmlSource against golden snapshots (tests/unit/nvml_golden.json.gz, made by tests/helpers/nvml_golden.py):
over the simulated driver's scenarios (busy GPUs, the efficiency scenarios, MIG, NOT_SUPPORTED
everywhere, lost GPUs, a GPU swapped at its index, devices appearing), missing functions and errors
injected into every call a poll makes, every poll must return the very snapshot recorded: same
values (floats to the bit, by repr), same types, same dict order, same field and call errors.

A change meant to change what the snapshots say regenerates the file (see nvml_golden's docstring)."""

from __future__ import annotations

import difflib

import pytest

from tests.helpers import nvml_golden

CASES = nvml_golden.cases()
REPRS, GOLDEN = nvml_golden.load()


@pytest.fixture
def run_case(fake_nvml):
    def run(steps):
        worker = fake_nvml.worker()
        worker(nvml_golden.PRELUDE)
        return nvml_golden.run(steps, fake_nvml, worker)

    return run


def _mismatch(name: str, got: list[str]) -> str | None:
    """None when `got` is the case's golden polls; else where and how they differ."""
    want = GOLDEN[name]
    if len(got) != len(want):
        return f"{name}: {len(got)} polls, the golden has {len(want)}"
    for i, (view, key) in enumerate(zip(got, want)):
        if nvml_golden.digest(view) != key:
            expected = REPRS[key].replace(", '", ",\n'")
            diff = difflib.unified_diff(expected.splitlines(), view.replace(", '", ",\n'").splitlines(), lineterm="")
            return f"{name}, poll {i}:\n" + "\n".join(list(diff)[:60])
    return None


def test_every_case_has_a_golden():
    assert sorted(CASES) == sorted(GOLDEN)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(run_case, name):
    problem = _mismatch(name, run_case(CASES[name]))
    assert problem is None, problem


def test_a_perturbed_value_fails(run_case):
    """The comparison sees a single value off: one GPU's power 1 mW higher than the golden's."""
    steps = CASES["scenario-busy"]
    perturbed = nvml_golden.busy()
    perturbed["gpus"][2]["power_mw"] = 60_001
    problem = _mismatch("scenario-busy", run_case([nvml_golden.write_step(perturbed), *steps[1:]]))
    assert problem is not None and "'power_w': 60.001" in problem, problem
