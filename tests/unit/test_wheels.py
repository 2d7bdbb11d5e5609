"""The cpu-build and driver-old hints name a CUDA wheel of the user's own torch version that runs on
the driver (sidecar/verdict/wheels.py): never an index without that version, which would make pip
install an older torch (torch 2.13 has no cu124 wheel; `--index-url .../cu124` installs 2.6)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from sidecar.common.catalogue import render
from sidecar.verdict import cpu_build_hint, decide
from sidecar.verdict.wheels import CUDA_WHEELS, cuda_wheel
from tests.helpers.verdict_facts import CPU_RT, CUDA_RT, facts, model, proc

COMMAND = re.compile(
    r"pip install --force-reinstall torch==(\S+) --index-url https://download\.pytorch\.org/whl/(cu\d+)"
)

# One case per torch minor version the table supports: (torch, the driver's CUDA, the index to name).
PER_MINOR = [
    ("2.0.1", "11.8", "cu118"),
    ("2.1.2", "12.2", "cu121"),
    ("2.2.2", "12.0", "cu118"),
    ("2.3.1+cpu", "12.4", "cu121"),
    ("2.4.1", "12.4", "cu124"),
    ("2.5.1+cpu", "12.3", "cu121"),
    ("2.6.0", "12.8", "cu126"),
    ("2.7.1", "12.8", "cu128"),
    ("2.8.0", "13.0", "cu129"),
    ("2.9.1", "12.9", "cu128"),
    ("2.10.0", "13.1", "cu130"),
    ("2.11.0+cpu", "12.8", "cu128"),
    ("2.12.0", "12.9", "cu126"),
    ("2.13.0+cpu", "13.2", "cu132"),
]


def test_every_supported_minor_version_has_its_case():
    assert {tuple(int(x) for x in v.split("+")[0].split(".")[:2]) for v, _, _ in PER_MINOR} == set(
        CUDA_WHEELS
    )


@pytest.mark.parametrize("torch_version, driver, tag", PER_MINOR, ids=[c[0] for c in PER_MINOR])
def test_the_hint_names_the_newest_index_of_that_torch_the_driver_runs(torch_version, driver, tag):
    text = render(cpu_build_hint(torch_version, driver))
    pin = torch_version.split("+")[0]
    assert COMMAND.search(text).groups() == (pin, tag), text
    assert f"supports CUDA {driver}" in text


def test_torch_2_13_on_a_cuda_12_4_driver_asks_for_a_newer_driver_not_an_older_torch():
    text = render(cpu_build_hint("2.13.0+cpu", "12.4"))
    assert COMMAND.search(text).groups() == ("2.13.0", "cu126")
    assert text.startswith(
        "torch 2.13.0 is built for CUDA 12.6, 13.0, 13.2, all newer than the driver's CUDA 12.4"
    )
    assert "upgrade the NVIDIA driver" in text and "cu124" not in text


def test_no_suggestion_would_downgrade_torch():
    """For every torch the table knows and every driver: the command pins that very version, from
    one of the indexes PyTorch publishes it on, whose CUDA the driver supports when it is known."""
    drivers = [None] + [f"{major}.{minor}" for major in (11, 12, 13) for minor in range(10)]
    for (major, minor), cudas in CUDA_WHEELS.items():
        version = f"{major}.{minor}.1+cpu"
        for driver in drivers:
            w = cuda_wheel(version, driver)
            text = render(cpu_build_hint(version, driver))
            assert COMMAND.search(text).groups() == (f"{major}.{minor}.1", w.tag), (version, driver, text)
            assert w.tag in {f"cu{c[0]}{c[1]}" for c in cudas}
            if driver is not None and w.kind == "index":
                assert (int(w.tag[2:-1]), int(w.tag[-1])) <= tuple(int(x) for x in driver.split("."))


@pytest.mark.parametrize(
    "version", ["2.14.0", "2.14.0.dev20260601+cpu", "2.13.0a0+git1234", "1.13.1+cpu", None]
)
def test_a_torch_the_table_does_not_know_gets_no_index(version):
    text = render(cpu_build_hint(version, "12.8"))
    assert "--index-url" not in text and "pytorch.org/get-started" in text


def test_the_cpu_build_warning_carries_the_pinned_command():
    rt = replace(CPU_RT, torch="2.13.0+cpu")
    f = facts(proc(runtime=rt, models=[model("cpu")]))  # the driver supports CUDA 12.4
    (w,) = [w for w in decide(f).warnings if w.code == "cpu-build"]
    assert COMMAND.search(render(w.hint, "en")).groups() == ("2.13.0", "cu126")
    assert COMMAND.search(render(w.hint, "zh")).groups() == ("2.13.0", "cu126")


def test_an_old_driver_for_a_cuda_torch_names_the_same_torch_for_the_drivers_cuda():
    rt = replace(CUDA_RT, torch="2.7.1+cu128", cuda_build="12.8", cuda_available=False)
    (w,) = [w for w in decide(facts(proc(runtime=rt))).warnings if w.code == "cuda-unavailable"]
    assert COMMAND.search(render(w.hint)).groups() == ("2.7.1", "cu118")
    rt = replace(rt, torch="2.13.0+cu130", cuda_build="13.0")
    (w,) = [w for w in decide(facts(proc(runtime=rt))).warnings if w.code == "cuda-unavailable"]
    assert "--index-url" not in render(w.hint) and "supports CUDA 13.0 or newer" in render(w.hint)
