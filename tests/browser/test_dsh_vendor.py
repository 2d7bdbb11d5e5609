"""AMD and Intel GPUs in the plugin's GPU view inside a real DSH 0.1.0-rc.8 (issue 41), fed by the real
sidecar on fixture /proc and /sys trees (tests/helpers/vendor_stacks.py): the MI300X machine, then,
the plugin's config pointed at another sidecar as a user edits it, the laptop. One DSH for both.
Screenshots: dsh-amd.png, dsh-laptop.png (scripts/screenshots.sh: docs/screenshots).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers.browser import screenshot_clip
from tests.helpers.dsh_env import FAILED_TO_LOAD, DshHome, start_dsh_web
from tests.helpers.dsh_page import new_page, open_session, plugin_errors, wait_for_panel
from tests.helpers.vendor_stacks import (
    IGPU_USERS,
    RADEON_USERS,
    VendorStack,
    start_amd_stack,
    start_laptop_stack,
)

pytestmark = [pytest.mark.browser, pytest.mark.dsh, pytest.mark.slow, pytest.mark.timeout(300)]

CARD = '[data-testid="dsh-gpu-card"]'
GPU_SECTION = f'[data-testid="dsh-gpu-gpus"] > h3, {CARD}'

# Per card: its tag, who else uses it, what is drawn past its right edge, the process rows whose
# memory figure breaks over lines, and whether each meter's bar is marked unknown.
CARD_JS = """c => {
  const edge = c.getBoundingClientRect().right;
  const past = [...c.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > edge + 0.5)
    .map(e => `${e.className || e.tagName}: ${e.textContent.trim().slice(0, 40)}`);
  const lines = e => { const r = document.createRange(); r.selectNodeContents(e); return r.getClientRects().length; };
  const broken = [...c.querySelectorAll('.dgd-gpu-procs li')].filter(li => lines(li.querySelector('b')) > 1)
    .map(li => li.textContent);
  const meters = Object.fromEntries([...c.querySelectorAll('.dgd-meter')].map(m =>
    [m.dataset.key, [m.querySelector('.dgd-meter-value').textContent, m.dataset.unknown || null]]));
  const others = c.querySelector('[data-testid="dsh-gpu-others"]');
  return {vendor: c.dataset.vendor, tag: (c.querySelector('.dgd-tag') || {}).textContent || null,
          others: others && others.textContent, past, broken, meters};
}"""


def view_cards(page, stack: VendorStack, vendor: str) -> list[dict]:
    """The view's cards once it shows `stack`'s job, chosen from the session's jobs (choosing it fetches
    its status afresh: the first "ok" may be the status fetched before), and a card of `vendor`."""
    job = stack.job_id
    page.wait_for_selector(
        f'[data-testid="dsh-gpu-view"][data-state="ok"][data-selected-job="{job}"][data-job-id="{job}"]'
    )
    page.wait_for_selector(f'{CARD}[data-vendor="{vendor}"]')
    page.mouse.move(0, 0)
    return page.eval_on_selector_all(CARD, f"cs => cs.map({CARD_JS})")


def test_the_gpu_view_shows_an_amd_machine_and_then_a_laptops_igpu(
    chromium, dsh_launcher: Path, fake_nvml_lib_dir: Path, tmp_path: Path
) -> None:
    amd = start_amd_stack(tmp_path, fake_nvml_lib_dir)
    stacks = [amd]
    web = None
    try:
        laptop = start_laptop_stack(tmp_path, fake_nvml_lib_dir)
        stacks.append(laptop)
        home = DshHome.create(tmp_path / "home", dsh_launcher)
        home.add_plugin()
        home.write_plugin_config(sidecarUrl=amd.sidecar_url, token=amd.token, timeoutMs=2000)
        web = start_dsh_web(home, tmp_path / "work")
        errors: list[str] = []
        ctx, page = new_page(chromium, web.url, errors, width=1400, height=1100)
        wait_for_panel(page)
        open_session(page)

        radeon, mi = view_cards(page, amd, "AMD")
        for card in (radeon, mi):
            assert card["past"] == [] and card["broken"] == [], card  # "76 GiB", never "76" over "GiB"
        assert (mi["tag"], radeon["tag"]) == ("model here", None)  # the ROCm model's cuda:0
        assert radeon["others"] == "Also used by " + ", ".join(RADEON_USERS)
        assert mi["meters"]["util"] == ["87 %", None]
        screenshot_clip(page, "dsh-amd", GPU_SECTION)

        # The plugin's config pointed at the laptop's sidecar: the view follows it.
        home.write_plugin_config(sidecarUrl=laptop.sidecar_url, token=laptop.token, timeoutMs=2000)
        nvidia, igpu = view_cards(page, laptop, "Intel")
        assert (nvidia["vendor"], nvidia["tag"], igpu["tag"]) == ("NVIDIA", "model here", None)
        assert igpu["others"] == "Also used by " + ", ".join(IGPU_USERS)
        # i915 tells neither a busy % nor memory of its own: said so, the bars marked unknown
        assert igpu["meters"] == {
            "util": ["none: i915 reports no utilisation", "true"],
            "mem": ["none: i915 reports no memory use", "true"],
        }
        assert nvidia["meters"]["util"][1] is None
        assert igpu["past"] == [], igpu
        screenshot_clip(page, "dsh-laptop", GPU_SECTION)

        assert FAILED_TO_LOAD not in page.inner_text("body")
        assert not plugin_errors(errors), errors
        ctx.close()
    finally:
        if web is not None:
            web.stop()
        for s in stacks:
            s.stop()
        shutil.rmtree(tmp_path / "home", ignore_errors=True)
