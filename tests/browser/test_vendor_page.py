"""AMD and Intel GPUs on the standalone page (issue 41), against the real sidecar reading fixture
/proc and /sys trees (tests/helpers/vendor_stacks.py): an MI300X machine whose ROCm job trains on the
MI300X beside a Radeon the desktop draws with, and a laptop whose job runs on its NVIDIA card beside
the Intel iGPU its compositor and browser use. Each card says its vendor and driver, who else uses
it, and what the driver cannot tell, within the card and never as a 0.
Screenshots: page-amd.png, page-laptop.png (scripts/screenshots.sh: docs/screenshots).
"""

from __future__ import annotations

import pytest

from tests.helpers.browser import screenshot_clip, wait_js
from tests.helpers.vendor_stacks import (
    IGPU_USERS,
    LAPTOP_DGPU_NAME,
    RADEON_USERS,
    start_amd_stack,
    start_laptop_stack,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

# The GPU section: its title and its cards (the screenshot's clip).
GPU_SECTION = "section.block:has([data-testid=gpus]) > .block-title, [data-testid=gpu-card]"

# Per card: what is drawn past its right edge (text or a bar), the process rows' memory figures that
# break over lines, and the colours of its secondary lines.
CARD_LAYOUT_JS = """card => {
  const edge = card.getBoundingClientRect().right;
  const past = [...card.querySelectorAll('*')]
    .filter(e => e.getBoundingClientRect().right > edge + 0.5)
    .map(e => `${e.className || e.tagName}: ${e.textContent.trim().slice(0, 40)}`);
  const lines = e => { const r = document.createRange(); r.selectNodeContents(e); return r.getClientRects().length; };
  const broken = [...card.querySelectorAll('.gpu-procs li')].filter(li => lines(li.querySelector('.mem')) > 1)
    .map(li => li.textContent);
  const color = sel => { const e = card.querySelector(sel); return e ? getComputedStyle(e).color : null; };
  const others = card.querySelector('[data-testid=gpu-others]');
  return {past, broken, others: others && others.textContent, othersColor: color('[data-testid=gpu-others]'),
          othersSize: others && getComputedStyle(others).fontSize,
          mutedColor: color('.gpu-procs-title'), tag: (card.querySelector('.tag') || {}).textContent || null};
}"""


def cards(page, vendor: str) -> list[dict]:
    return page.eval_on_selector_all(
        f"[data-testid=gpu-card][data-vendor={vendor}]", f"cs => cs.map({CARD_LAYOUT_JS})"
    )


def meter(page, index: int, key: str) -> dict:
    return page.eval_on_selector(
        f"[data-testid=gpu-card][data-index='{index}'] [data-testid=gpu-{key}]",
        "m => ({value: m.querySelector('.meter-value').textContent, unknown: m.dataset.unknown || null,"
        " fill: m.querySelector('.bar > span').style.width})",
    )


def wait_cards(page, n: int) -> None:
    wait_js(page, "n => document.querySelectorAll('[data-testid=gpu-card]').length === n", n)


def inside(page, vendor: str) -> list[dict]:
    """The cards of `vendor` at the grid's narrowest (290 px: a wide window's four columns) and at two
    columns (the screenshot's): each card holds all it draws, its memory figures on one line."""
    out = []
    for width in (1280, 800):
        page.set_viewport_size({"width": width, "height": 1200})
        page.wait_for_timeout(100)
        for card in cards(page, vendor):
            assert card["past"] == [] and card["broken"] == [], (width, card)
            out.append(card)
    return out[-len(out) // 2 :]


def test_an_amd_machines_cards_say_where_the_rocm_model_is_and_who_else_uses_each(
    fake_nvml_lib_dir, tmp_path, pages
):
    stack = start_amd_stack(tmp_path, fake_nvml_lib_dir)
    try:
        page = pages.open(stack.url, width=1280, height=1200)
        wait_cards(page, 2)
        radeon, mi = inside(page, "AMD")  # "76 GiB", never "76" over "GiB"
        # The MI300X is the ROCm model's (cuda:0 at its PCI address): said as on NVIDIA's cards.
        assert mi["tag"] == "model here" and radeon["tag"] is None
        main = page.locator(f"[data-testid=gpu-card][data-index='1'] li[data-pid='{stack.pid('main')}']")
        assert main.locator(".mem").inner_text() == "76 GiB"
        assert (
            main.locator("[data-testid=gpu-proc-util]").inner_text()
            == "utilisation: not told for ROCm compute"
        )
        assert mi["others"] == "No other process uses it"
        # The Radeon: the desktop's processes, by name, in the card's muted secondary style.
        assert radeon["others"] == "Also used by " + ", ".join(RADEON_USERS)
        assert radeon["othersColor"] == radeon["mutedColor"] and radeon["othersSize"] == "12px"
        assert meter(page, 1, "util") == {"value": "87 %", "unknown": None, "fill": "87%"}
        assert meter(page, 0, "mem")["value"] == "2 GiB of 24 GiB"
        screenshot_clip(page, "page-amd", GPU_SECTION)
        assert not pages.errors, pages.errors
    finally:
        stack.stop()


def test_a_laptops_igpu_card_names_its_users_and_what_i915_does_not_tell(fake_nvml_lib_dir, tmp_path, pages):
    stack = start_laptop_stack(tmp_path, fake_nvml_lib_dir)
    try:
        page = pages.open(stack.url, width=1280, height=1200)
        wait_cards(page, 2)
        (nvidia,) = inside(page, "NVIDIA")
        (igpu,) = inside(page, "Intel")  # its long "none: ..." figures stay inside it
        assert nvidia["tag"] == "model here" and igpu["tag"] is None
        assert (
            page.inner_text("[data-testid=gpu-card][data-index='0'] [data-testid=gpu-name]")
            == LAPTOP_DGPU_NAME
        )
        # i915 tells neither a busy % nor memory of its own: said so, its bars hatched, never a 0.
        assert meter(page, 1, "util") == {
            "value": "none: i915 reports no utilisation",
            "unknown": "true",
            "fill": "0%",
        }
        assert meter(page, 1, "mem")["value"] == "none: i915 reports no memory use"
        assert meter(page, 1, "mem")["unknown"] == "true"
        assert meter(page, 0, "util")["unknown"] is None  # NVIDIA's figures are drawn as before
        assert igpu["others"] == "Also used by " + ", ".join(IGPU_USERS)
        assert igpu["othersColor"] == igpu["mutedColor"]
        screenshot_clip(page, "page-laptop", GPU_SECTION)
        assert not pages.errors, pages.errors
    finally:
        stack.stop()
