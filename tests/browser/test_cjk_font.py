"""Issue 39 item 12: the Chinese page needs a font with Chinese glyphs. Without one Chromium draws
every CJK character as the same empty box (the font's .notdef glyph): the whole zh page, and the
language button of the English one, were rows of boxes. scripts/test.sh installs one (a Debian
package); the button names the language in Latin letters too, so it reads without one."""

from __future__ import annotations

import pytest

from tests.helpers.browser import Pages

pytestmark = [pytest.mark.browser]

# Each text drawn alone on a canvas in the page's own sans-serif fallback, as its pixels' checksum.
DRAWN = """(texts) => texts.map((text) => {
  const c = document.createElement('canvas');
  c.width = 64; c.height = 40;
  const g = c.getContext('2d');
  g.fillStyle = '#fff'; g.fillRect(0, 0, c.width, c.height);
  g.fillStyle = '#000'; g.font = '28px system-ui, sans-serif'; g.textBaseline = 'top';
  g.fillText(text, 4, 4);
  const px = g.getImageData(0, 0, c.width, c.height).data;
  let ink = 0, sum = 0;
  for (let i = 0; i < px.length; i += 4) { const v = 255 - px[i]; ink += v > 0 ? 1 : 0; sum = (sum * 31 + v) >>> 0; }
  return {text, ink, sum};
})"""


def test_chromium_draws_chinese_characters_as_glyphs_not_boxes(pages: Pages) -> None:
    page = pages.browser.new_page()
    try:
        drawn = page.evaluate(DRAWN, ["中", "文", "英", "\U000f0000"])  # the last: a private-use code point no font has
    finally:
        page.close()
    glyphs, missing = drawn[:3], drawn[3]
    assert all(d["ink"] > 0 for d in glyphs), drawn
    sums = {d["sum"] for d in glyphs}
    # Three characters drawn alike (and like a character no font has) are the missing-glyph box.
    assert len(sums) == 3 and missing["sum"] not in sums, (
        "Chromium has no font with Chinese glyphs: install one (scripts/test.sh installs fonts-wqy-microhei)"
    )
