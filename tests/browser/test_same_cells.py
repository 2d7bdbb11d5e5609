"""The standalone page and the DSH plugin show the same cells of the same document.

Each document (hand-made, checked against the contract) is served to the page by `create_app` with a
fixed source and read in Debian's Chromium; the plugin's process table and GPU cards are rendered from
the same document by dsh_plugin/test/render_views.mjs (its components, without React) and read in the
same Chromium by the same code. What is compared is what a reader sees: per process row (in order), each
column's texts and the attributes that carry meaning (titles, devices, flags, the data wait's source,
the tree depth); per GPU card, its texts and its flags, in order.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator

import pytest
from werkzeug.serving import make_server

from sidecar.documents import contract
from sidecar.serve.server import ServerConfig, create_app
from tests.helpers.browser import wait_js
from tests.helpers.efficiency_docs import (
    FixedSource,
    a100_mig,
    h100,
    history_doc,
    main_process,
    obj,
    status_doc,
)
from tests.helpers.harness import REPO

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

PLUGIN = REPO / "dsh_plugin"

# The texts under an element and the attributes that carry meaning, in document order.
TOKENS_JS = """
const ATTRS = ['title', 'data-device', 'data-source', 'data-flag', 'data-index', 'data-model-here',
  'data-util-level', 'data-pid', 'data-mig-index', 'data-pci', 'data-vendor', 'data-unknown'];
const tokens = (el) => {
  const out = [];
  const walk = (n) => {
    if (n.nodeType === Node.TEXT_NODE) { const s = n.textContent.trim(); if (s) out.push(s); return; }
    if (n.nodeType !== Node.ELEMENT_NODE) return;
    for (const a of ATTRS) if (n.hasAttribute(a) && n.getAttribute(a) !== '') out.push(`@${a}=${n.getAttribute(a)}`);
    for (const c of n.childNodes) walk(c);
  };
  walk(el);
  return out;
};
"""

READ_JS = (
    "([table, row, grid, card, igpu, none]) => {"
    + TOKENS_JS
    + """
  const t = document.querySelector(table);
  const heads = t ? [...t.querySelectorAll('thead th')].map((th) => th.textContent.trim()) : [];
  const rows = t ? [...t.querySelectorAll(row)].map((tr) => ({
    pid: tr.getAttribute('data-pid'), depth: tr.getAttribute('data-depth'),
    cells: [...tr.children].map((td, i) => [heads[i] ?? `#${i}`, tokens(td)]),
  })) : [];
  const g = document.querySelector(grid);
  const all = (sel) => (g ? [...g.querySelectorAll(sel)].map(tokens) : []);
  return { heads, rows, cards: all(card), igpus: all(igpu), none: all(none) };
}"""
)
PAGE = ["[data-testid=processes]", "[data-testid=process-row]", "[data-testid=gpus]"] + [
    "[data-testid=gpu-card]",
    "[data-testid=igpu-card]",
    "[data-testid=no-gpu]",
]
PLUGIN_SEL = [
    "[data-testid=dsh-gpu-processes]",
    "[data-testid=dsh-gpu-process]",
    "[data-testid=dsh-gpu-gpus]",
] + [
    "[data-testid=dsh-gpu-card]",
    "[data-testid=dsh-gpu-igpu]",
    "[data-testid=dsh-gpu-no-gpu]",
]


# --------------------------------------------------------------------------- documents


def model(name: str, device: str, **values) -> dict:
    devices = ["cpu", "cuda:0"] if device == "mixed" else [device]
    return obj("Model", name=name, device=device, devices=devices, **values)


def proc(pid: int, ppid: int | None, role: str | None, **values) -> dict:
    values.setdefault("has_probe", role is not None)
    values.setdefault("probe_state", "ok" if role else "no-segment")
    return obj("Process", pid=pid, ppid=ppid, role=role, name="python", **values)


def pgpu(index: int, mem: float | None, sm: float | None = None, mig: int | None = None) -> dict:
    return obj("ProcessGpu", index=index, mem_used_mib=mem, sm_util_pct=sm, mig_index=mig)


def second_gpu(index: int = 1, framework_index: int | None = None) -> dict:
    return obj(
        "Gpu",
        index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA A100-SXM4-80GB",
        util_pct=3.0,
        mem_used_mib=700.0,
        mem_total_mib=81_920.0,
        framework_index=framework_index,
    )


def igpu() -> dict:
    return obj(
        "SystemGpu", pci="0000:00:02.0", vendor="Intel", name="Iris Xe", driver="i915", nvml_index=None
    )


def gpu_job() -> dict:
    """main on cuda:0 with two DataLoader workers (listed before it) and a helper without the probe."""
    main = main_process([pgpu(0, 29_000.0, 88.0)], device="cuda:0")
    main["models"][0].update(input_device="cuda:0")
    main["cmdline"] = ["python", "train.py", "--epochs", "3"]
    workers = [proc(4300 + i, 4242, "dataloader-worker", worker_id=i, cpu_pct=40.0 + i) for i in (1, 0)]
    helper = proc(4250, 4242, None, cpu_pct=0.5)
    doc = status_doc([h100(), second_gpu()], [*workers, helper, main])
    doc["system_gpus"] = [igpu()]
    return doc


def cpu_fallback() -> dict:
    main = main_process([], device="cpu")
    main["models"][0].update(input_device="cpu", data_wait_fraction=0.2, data_wait_batches=30)
    main["step_breakdown"] = None
    doc = status_doc([], [main], nvml_ok=False, model_gpu=None)
    doc["runtime"].update(torch="2.13.0+cpu", cuda_build=None, cuda_available=False)
    return doc


def mixed() -> dict:
    main = main_process([pgpu(0, 1200.0, 30.0)], device="mixed")
    main["models"][0].update(input_device="cpu")
    doc = status_doc([h100()], [main])
    doc["model_device"] = "mixed"
    return doc


def workers_and_models() -> dict:
    """Two ranks on two GPUs, one with three models (inputs on two devices, the second model waiting
    most), each rank with a DataLoader worker of its own."""
    rank0 = proc(
        5000,
        4999,
        "rank",
        rank=0,
        gpu=[pgpu(0, 9000.0, 70.0)],
        models=[
            model(
                "encoder",
                "cuda:0",
                input_device="cuda:0",
                data_wait_fraction=0.1,
                data_wait_batches=64,
                param_count=86_000_000,
                forward_rate_hz=4.0,
                step_rate_hz=2.0,
            ),
            model("decoder", "cuda:0", input_device="cuda:0", data_wait_fraction=0.6, data_wait_batches=12),
            model("head", "cuda:0", input_device="cpu"),
        ],
    )
    rank1 = proc(5001, 4999, "rank", rank=1, gpu=[pgpu(1, 8000.0, 65.0)], models=[model("encoder", "cuda:1")])
    launcher = proc(4999, None, None, cmdline=["torchrun", "--nproc-per-node", "2", "train.py"])
    workers = [proc(5100 + i, 5000 + i, "dataloader-worker", worker_id=0) for i in (0, 1)]
    doc = status_doc([h100(), second_gpu(1, framework_index=1)], [launcher, rank0, rank1, *workers])
    doc["runtime"].update(device_count=2)
    return doc


def exited() -> dict:
    """The job has ended: its processes kept with their final facts, one with a probe error."""
    main = main_process([pgpu(0, 100.0)], device="cuda:0")
    main.update(exited=True, cpu_pct=None, cmdline=["python", "train.py"])
    worker = proc(4243, 4242, "dataloader-worker", worker_id=3, exited=True, probe_error="segment is busy")
    doc = status_doc([h100()], [main, worker])
    doc["target"]["alive"] = False
    return doc


def mig() -> dict:
    """An A100 in MIG mode: the main process in two instances, a worker in one."""
    g = a100_mig()
    main = main_process([pgpu(0, 12.0, mig=0), pgpu(0, 4000.0, mig=1)], device="cuda:0")
    worker = proc(4243, 4242, "dataloader-worker", worker_id=0, gpu=[pgpu(0, 200.0, mig=1)])
    return status_doc([g], [main, worker])


def missing_fields() -> dict:
    """Everything that may be null is: a process the sidecar knows nothing of, a GPU without figures."""
    bare_gpu = obj("Gpu", index=0, name=None, util_pct=None, mem_used_mib=None, mem_total_mib=None)
    bare = obj("Process", pid=4242, ppid=None, has_probe=True, models=[obj("Model")], gpu=[pgpu(0, None)])
    doc = status_doc([bare_gpu], [bare], model_gpu=None)
    doc.update(model_device=None, input_device=None)
    doc["runtime"] = obj("Runtime")
    return doc


def vendors() -> dict:
    """AMD and Intel GPUs (issue 41): an MI300X the ROCm model is on (its process's utilisation not
    told), a Radeon the desktop uses, and an Intel iGPU whose driver tells neither busy % nor memory."""

    def vendor_gpu(index: int, vendor: str, driver: str, pci: str, **values) -> dict:
        return obj("Gpu", index=index, vendor=vendor, driver=driver, pci_bus_id=pci, **values)

    mi = vendor_gpu(0, "amd", "amdgpu", "0000:c1:00.0", name="AMD GPU", util_pct=87.0, framework_index=0)
    mi.update(mem_used_mib=81_920.0, mem_total_mib=196_608.0, other_process_count=0, other_process_names=[])
    radeon = vendor_gpu(1, "amd", "amdgpu", "0000:03:00.0", name="AMD GPU", util_pct=3.0)
    radeon.update(mem_used_mib=2048.0, mem_total_mib=24_576.0, other_process_count=2)
    radeon["other_process_names"] = ["Xorg", "gnome-shell"]
    igpu = vendor_gpu(2, "intel", "i915", "0000:00:02.0", name="Intel integrated graphics")
    igpu.update(other_process_count=1, other_process_names=["firefox"], other_process_names_omitted=0)
    row = obj("ProcessGpu", index=0, vendor="amd", pci_bus_id="0000:c1:00.0", mem_used_mib=77_824.0)
    row["unknown_reason"] = "rocm-compute"
    doc = status_doc([mi, radeon, igpu], [main_process([row], device="cuda:0")])
    doc["runtime"].update(torch="2.6.0+rocm6.2.4", hip_build="6.2.41133")
    return doc


DOCS = {
    "gpu-job": gpu_job,
    "cpu-fallback": cpu_fallback,
    "mixed": mixed,
    "workers-and-models": workers_and_models,
    "exited": exited,
    "mig": mig,
    "missing-fields": missing_fields,
    "vendors": vendors,
}


# --------------------------------------------------------------------------- the two renderers


@pytest.fixture(scope="module")
def source_url() -> Iterator[tuple[FixedSource, str]]:
    source = FixedSource(gpu_job(), history_doc(gpu=True))
    srv = make_server("127.0.0.1", 0, create_app(ServerConfig(), source), threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield source, f"http://127.0.0.1:{srv.server_port}/"
    srv.shutdown()


def plugin_html(docs: dict[str, dict], lang: str) -> dict[str, dict[str, str]]:
    node = shutil.which("node")
    if not node or not (PLUGIN / "node_modules" / "esbuild").is_dir():
        pytest.skip("node and the plugin's esbuild (npm ci in dsh_plugin/) are needed to render the plugin")
    proc = subprocess.run(
        [node, "test/render_views.mjs"],
        cwd=PLUGIN,
        input=json.dumps({"lang": lang, "docs": docs}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def read_page(pages, source: FixedSource, url: str, doc: dict, locale: str) -> dict:
    source.status = doc
    page = pages.open(f"{url}?job={doc['job_id']}", locale=locale)
    # the page leaves its loading state before it draws the first document: wait for the drawing
    wait_js(
        page,
        """([rows, cards]) => document.querySelectorAll('[data-testid=process-row]').length === rows
            && document.querySelectorAll('[data-testid=gpu-card]').length === cards""",
        [len(doc["processes"]), len(doc["gpus"])],
    )
    return page.evaluate(READ_JS, PAGE)


def read_plugin(pages, html: dict[str, str]) -> dict:
    page = pages.browser.new_context().new_page()
    try:
        page.set_content(f"<body>{html['processes']}{html['gpus']}</body>")
        return page.evaluate(READ_JS, PLUGIN_SEL)
    finally:
        page.context.close()


def differences(page: dict, plugin: dict) -> list[str]:
    """What one renderer shows that the other does not, row by row and card by card."""
    out = []
    if page["heads"] != plugin["heads"]:
        out.append(f"columns: page {page['heads']} / plugin {plugin['heads']}")
    if [r["pid"] for r in page["rows"]] != [r["pid"] for r in plugin["rows"]]:
        out.append(
            f"row order: page {[r['pid'] for r in page['rows']]} / plugin {[r['pid'] for r in plugin['rows']]}"
        )
    plugin_rows = {r["pid"]: r for r in plugin["rows"]}
    for a in page["rows"]:
        b = plugin_rows.get(a["pid"], {"depth": None, "cells": []})
        if a["depth"] != b["depth"]:
            out.append(f"pid {a['pid']} depth: page {a['depth']} / plugin {b['depth']}")
        ca, cb = dict(a["cells"]), dict(b["cells"])
        for col in sorted(set(ca) | set(cb)):
            if ca.get(col) != cb.get(col):
                out.append(f"pid {a['pid']} {col}: page {ca.get(col)} / plugin {cb.get(col)}")
    for kind in ("cards", "igpus", "none"):
        if len(page[kind]) != len(plugin[kind]):
            out.append(f"{kind}: page {len(page[kind])} / plugin {len(plugin[kind])}")
        for i, (a, b) in enumerate(zip(page[kind], plugin[kind])):
            if a != b:
                out.append(f"{kind}[{i}]: page {a} / plugin {b}")
    return out


@pytest.mark.parametrize(("lang", "locale"), [("en", "en-US"), ("zh", "zh-CN")])
def test_the_page_and_the_plugin_show_the_same_cells(source_url, pages, lang, locale):
    source, url = source_url
    docs = {name: make() for name, make in DOCS.items()}
    for doc in docs.values():
        contract.check(doc, "status")
    rendered = plugin_html(docs, lang)
    report = {}
    for name, doc in docs.items():
        page = read_page(pages, source, url, doc, locale)
        plugin = read_plugin(pages, rendered[name])
        # the reading itself works: every process has its row, every GPU its card, on both sides
        for side in (page, plugin):
            assert len(side["rows"]) == len(doc["processes"]), (name, side)
            assert len(side["cards"]) == len(doc["gpus"]), (name, side)
            assert all(len(cells) == len(side["heads"]) for cells in (r["cells"] for r in side["rows"]))
        diff = differences(page, plugin)
        if diff:
            report[name] = diff
    assert not report, json.dumps(report, ensure_ascii=False, indent=1)
    assert not pages.errors, pages.errors
