"""Browser-test fixtures: Debian's Chromium through Playwright, and a real dashboard stack.

A *stack* is a fake training job (tests.helpers.fake_job, publishing probe facts through the probe's
own segment writer), the simulated NVIDIA driver (tests/fakenvml) reporting that job's pids, a fake
/sys with an Intel iGPU beside the NVIDIA cards, and the real sidecar
(`python -m sidecar.cli --pid PID --port 0 --interval 0.5 --stay`) serving the page.

Never runs `playwright install`: the browser is /usr/bin/chromium (apt-get install chromium).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fakenvml import FakeNvml, gpu, make_fake_sysfs
from tests.helpers.harness import FakeJob, Sidecar, cuda_runtime

CHROMIUM = os.environ.get("DSH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REPO = Path(__file__).resolve().parents[2]
# Where screenshots go. Tests write only to temporary folders: scripts/screenshots.sh sets this to
# docs/screenshots to refresh the documentation's pictures; otherwise a folder of the test session.
SCREENSHOTS_ENV = "DSH_SCREENSHOTS_DIR"
_screenshots: dict[str, Path] = {}

# The two simulated NVIDIA cards and their PCI addresses as sysfs writes them.
GPU_NAMES = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
INTEL_PCI = "0000:00:02.0"


def nvidia_pci(index: int) -> str:
    # tests.fakenvml.gpu(i) uses pci_bus_id "00000000:{i + 0x10:02X}:00.0"
    return f"0000:{index + 0x10:02x}:00.0"


# --------------------------------------------------------------------------- browser


def wait_js(page, expression: str, arg: Any = None, timeout_ms: int = 15_000, interval_ms: int = 100):
    """Poll `expression` (a JS function source, called with `arg`) until it returns something truthy.

    Not page.wait_for_function: its polling evals the predicate inside the page, which the sidecar's
    Content-Security-Policy (no 'unsafe-eval') rightly forbids; page.evaluate is not subject to it.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    last = None
    while True:
        last = page.evaluate(expression, arg)
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_ms} ms waiting for JS: {expression[:200]} (last: {last!r})"
            )
        page.wait_for_timeout(interval_ms)


@pytest.fixture(scope="session")
def playwright_session():
    """One Playwright for the session (a second sync_playwright() in the same thread is refused)."""
    if not (os.path.exists(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.skip(f"Debian's Chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed")
    with sync_playwright() as pw:
        yield pw


def launch_chromium(pw, extra_args: tuple[str, ...] = ()):
    return pw.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args])


@pytest.fixture(scope="session")
def chromium(playwright_session):
    browser = launch_chromium(playwright_session)
    try:
        yield browser
    finally:
        browser.close()


# A root sidecar always has a token (it makes one): the token of each stack's sidecar, by its
# origin, so a page opened on it sends `Authorization: Bearer` as a user's own client would.
SIDECAR_TOKENS: dict[str, str] = {}


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass
class Pages:
    """Opens pages in fresh browser contexts; records page errors; closes everything at teardown."""

    browser: Any
    contexts: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def open(
        self,
        url: str,
        *,
        width: int = 1280,
        height: int = 800,
        locale: str = "en-US",
        color_scheme: str = "light",
        wait_loaded: bool = True,
    ):
        token = SIDECAR_TOKENS.get(_origin(url))
        ctx = self.browser.new_context(
            viewport={"width": width, "height": height},
            locale=locale,
            color_scheme=color_scheme,
            extra_http_headers={"Authorization": f"Bearer {token}"} if token else None,
        )
        self.contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(15_000)
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: (
                self.errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None
            ),
        )
        page.goto(url)
        if wait_loaded:
            wait_js(page, "() => !document.body.classList.contains('loading')")
        return page

    def close(self) -> None:
        for ctx in self.contexts:
            try:
                ctx.close()
            except Exception:
                pass
        self.contexts.clear()


@pytest.fixture
def pages(chromium) -> Iterator[Pages]:
    p = Pages(chromium)
    yield p
    p.close()


@pytest.fixture(scope="session", autouse=True)
def screenshots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$DSH_SCREENSHOTS_DIR if set (scripts/screenshots.sh), else a temporary folder of this session."""
    given = os.environ.get(SCREENSHOTS_ENV)
    path = Path(given).resolve() if given else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    _screenshots["dir"] = path
    return path


def screenshot_path(name: str) -> Path:
    """The file for screenshot NAME (e.g. "page-gpu") in the session's screenshot folder."""
    return _screenshots["dir"] / f"{name}.png"


def screenshot(
    page, name: str, full_page: bool = False, element: str | None = None, keep_mouse: bool = False
) -> Path:
    """Save page-NAME.png in the screenshot folder (docs/screenshots via scripts/screenshots.sh)."""
    path = screenshot_path(f"page-{name}")
    if not keep_mouse:
        page.mouse.move(0, 0)
    if element:  # the element with a margin of page around it, so its borders are not cut
        loc = page.locator(element)
        loc.scroll_into_view_if_needed()
        box = loc.bounding_box()
        vw = page.viewport_size["width"]
        x, y = max(0, box["x"] - 12), max(0, box["y"] - 12)
        page.screenshot(
            path=str(path),
            clip={"x": x, "y": y, "width": min(vw - x, box["width"] + 24), "height": box["height"] + 24},
        )
    else:
        page.screenshot(path=str(path), full_page=full_page)
    return path


# --------------------------------------------------------------------------- job payloads


def model(
    name: str,
    device: str,
    *,
    input_device: str | None = None,
    params: int = 11_689_512,
    data_wait: float | None = 0.12,
    cls: str = "ResNet",
) -> dict:
    """A model entry exactly as the probe publishes it (every key present, strict types)."""
    devices = [] if device in ("no-parameters",) else (["cpu", "cuda:0"] if device == "mixed" else [device])
    return {
        "name": name,
        "class": cls,
        "params": params,
        "device": device,
        "devices": devices,
        "input_device": input_device,
        "forward_calls": 0,
        "forward_rate_hz": 12.5,
        "last_forward_time": time.time(),
        "data_wait_fraction": data_wait,
        "data_wait_s": None,
        "step_s": 0.08,
    }


def events(*names: str) -> list[dict]:
    now = time.time()
    return [{"time": now - (len(names) - i) * 0.5, "name": n} for i, n in enumerate(names)]


def gpu_job_specs(uuids: list[str]) -> dict[str, dict]:
    """main (model on cuda:0) → two DataLoader workers (probe) and a helper without the probe."""
    return {
        "main": {
            "payload": {
                "role": "main",
                "script": "train.py",
                "runtime": cuda_runtime(uuids),
                "models": [model("resnet18", "cuda:0", input_device="cuda:0")],
                "events": events("train_start", "epoch 1"),
            },
            "children": ["worker0", "worker1", "helper"],
        },
        "worker0": {"payload": {"role": "dataloader-worker", "worker_id": 0}},
        "worker1": {"payload": {"role": "dataloader-worker", "worker_id": 1}},
        "helper": {"probe": False},
    }


def cpu_job_specs() -> dict[str, dict]:
    rt = {
        "torch": "2.5.1+cpu",
        "cuda_build": None,
        "cudnn": None,
        "cuda_available": False,
        "cuda_initialized": False,
        "device_count": 0,
        "devices": [],
    }
    return {
        "main": {
            "payload": {
                "role": "main",
                "script": "train.py",
                "runtime": rt,
                "models": [model("resnet18", "cpu", input_device="cpu")],
                "events": events("train_start"),
            },
        }
    }


def gpu_scenario(
    pids: dict[str, int], *, util0: int = 87, mem0: int = 3072, util1: int = 0, mem1: int = 0, sm0: int = 85
) -> dict:
    """Two NVIDIA GPUs; the job's main process works on GPU 0."""
    return {
        "driver_version": "550.54.15",
        "cuda_driver_version": 12040,
        "gpus": [
            gpu(
                0,
                name=GPU_NAMES[0],
                util_gpu=util0,
                util_mem=40,
                memory_used_mib=mem0 + 512,
                processes=[{"pid": pids["main"], "used_mib": mem0, "sm_util": sm0}],
            ),
            gpu(1, name=GPU_NAMES[1], util_gpu=util1, memory_used_mib=mem1, memory_total_mib=81559),
        ],
    }


def sysfs_cards(n_nvidia: int) -> list[dict]:
    cards = [
        {
            "pci": INTEL_PCI,
            "vendor": "0x8086",
            "device": "0x9a49",
            "class": "0x030000",
            "driver": "i915",
            "connectors": ["eDP-1"],
        }
    ]
    for i in range(n_nvidia):
        cards.append(
            {
                "pci": nvidia_pci(i),
                "vendor": "0x10de",
                "device": "0x20b5",
                "class": "0x030200",
                "driver": "nvidia",
            }
        )
    return cards


# --------------------------------------------------------------------------- stacks


@dataclass
class Stack:
    job: FakeJob
    sidecar: Sidecar
    nvml: FakeNvml

    @property
    def url(self) -> str:
        return self.sidecar.url + "/"

    def pid(self, name: str) -> int:
        return self.job.pids[name]

    def stop(self) -> None:
        try:
            self.sidecar.stop()
        finally:
            self.job.stop()


class StackFactory:
    def __init__(self, lib_dir: Path, base: Path):
        self.lib_dir = lib_dir
        self.base = base
        self.stacks: list[Stack] = []

    def start(
        self,
        name: str,
        specs: dict[str, dict],
        scenario,
        *,
        n_sysfs_nvidia: int = 2,
        expect_status: str | None = None,
        extra_env: dict | None = None,
    ) -> Stack:
        """Start job → write the NVML scenario (it needs the job's pids) → start the sidecar."""
        root = self.base / name
        root.mkdir(parents=True)
        nvml = FakeNvml(lib_dir=self.lib_dir, scenario_path=root / "scenario.txt")
        job = FakeJob(root / "job", specs)
        try:
            nvml.write(scenario(job.pids) if callable(scenario) else scenario)
            sysfs = make_fake_sysfs(root / "sys", sysfs_cards(n_sysfs_nvidia))
            env = nvml.env({"DSH_SYSFS_ROOT": str(sysfs), **(extra_env or {})})
            sidecar = Sidecar(["--pid", str(job.pid), "--port", "0", "--interval", "0.5", "--stay"], env=env)
        except BaseException:
            job.stop()
            raise
        stack = Stack(job, sidecar, nvml)
        self.stacks.append(stack)
        if sidecar.token and sidecar.url:
            SIDECAR_TOKENS[_origin(sidecar.url)] = sidecar.token
        # The sidecar must see the whole tree (4 processes with children) before pages look at it.
        try:
            want = len(specs)
            sidecar.wait_status(
                lambda d: (
                    len(d["processes"]) >= want and (expect_status is None or d["status"] == expect_status)
                ),
                timeout_s=30,
                what=f"{name}: {want} processes" + (f" and status {expect_status}" if expect_status else ""),
            )
        except BaseException:
            stack.stop()
            raise
        return stack

    def close(self) -> None:
        for s in reversed(self.stacks):
            s.stop()
        self.stacks.clear()


@pytest.fixture
def stacks(fake_nvml_lib_dir: Path, tmp_path: Path) -> Iterator[StackFactory]:
    f = StackFactory(fake_nvml_lib_dir, tmp_path / "stacks")
    yield f
    f.close()


@pytest.fixture(scope="module")
def gpu_stack(fake_nvml_lib_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One GPU job shared by the read-only tests of a module (starting a stack costs seconds)."""
    base = tmp_path_factory.mktemp("gpu-stack")
    f = StackFactory(fake_nvml_lib_dir, base)
    uuids = [gpu(0)["uuid"], gpu(1)["uuid"]]
    try:
        yield f.start("gpu", gpu_job_specs(uuids), gpu_scenario, expect_status="GPU")
    finally:
        f.close()
        shutil.rmtree(base, ignore_errors=True)
