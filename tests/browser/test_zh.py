"""The Chinese edition in a real JupyterLab: Chinese menus, Chinese prose in real CJK glyphs.

The learner's path of the Chinese quick start: JupyterLab with the zh_CN language pack (the
setting in zh-CN/lab-settings), a lesson from zh-CN/release/, Run All (it stops at the first
unanswered question, as in English), an explorer clicked: its labels, legend and messages are
Chinese, in real CJK glyphs.
"""

from __future__ import annotations

import re

import pytest
from helpers import english_sentences
from test_lab import assert_nothing_scrolls_sideways, changed, outputs_text, run_all

pytestmark = [pytest.mark.browser]

CJK = re.compile(r"[\u4e00-\u9fff]")

# Two different CJK characters drawn in the page's own font: with no CJK font both come out
# as the same "missing glyph" box (tofu); real glyphs differ, and are not blank.
GLYPHS = """(el) => {
    const font = getComputedStyle(el).font;
    const c = document.createElement('canvas'); c.width = 120; c.height = 60;
    const g = c.getContext('2d');
    const draw = (t) => { g.clearRect(0, 0, 120, 60); g.font = font; g.fillStyle = '#000';
                          g.fillText(t, 4, 44); return g.getImageData(0, 0, 120, 60).data; };
    const a = draw('叶').join(','), b = draw('梯').join(',');
    return {font, differ: a !== b, inked: a.split(',').some(v => v !== '0')};
}"""


def test_a_chinese_lesson_in_chinese_jupyterlab(lab_zh, page):
    name = lab_zh.copy_in("zh-CN/release/01_leaves/01_leaves.ipynb")
    try:
        run_all(page, lab_zh, name, menu="运行")                  # JupyterLab speaks Chinese
        menus = page.locator(".lm-MenuBar-item").all_inner_texts()
        assert "运行" in menus and "文件" in menus, menus
        heading = page.locator(".jp-MarkdownOutput h1").first
        assert CJK.search(heading.inner_text())
        glyphs = heading.evaluate(GLYPHS)
        assert glyphs["differ"] and glyphs["inked"], f"no CJK glyphs in {glyphs['font']}"
        assert "NotImplementedError" in outputs_text(page)   # the first unanswered question
        assert page.locator(".jp-Dialog").count() == 0
        page.wait_for_selector(".graph-explorer .ge-figure img")
        before = page.locator(".ge-figure img").first.get_attribute("src")
        page.locator(".ge-requires-grad-a").first.click()
        changed(page, ".ge-figure img", before, "src")
        # the explorer speaks Chinese too: its controls, legend and messages, outside code
        explorer = page.locator(".graph-explorer").first.inner_text()
        assert CJK.search(explorer) and english_sentences(explorer) == [], explorer
        assert_nothing_scrolls_sideways(page)
        # every Markdown cell of the lesson reads Chinese
        prose = page.locator(".jp-MarkdownCell .jp-RenderedMarkdown").all_inner_texts()
        assert prose and all(CJK.search(t) for t in prose if t.strip())
        page.screenshot(path=str(lab_zh.artifact("zh-01_leaves-after-run-all.png")),
                        full_page=False)
        page.locator(".graph-explorer").first.scroll_into_view_if_needed()
        page.screenshot(path=str(lab_zh.artifact("zh-01_leaves-explorer.png")))
    finally:
        for k in lab_zh.api("/api/kernels"):
            lab_zh.api(f"/api/kernels/{k['id']}", method="DELETE")
