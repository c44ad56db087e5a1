"""The six lesson explorers (course/explorers.py) in a real JupyterLab and headless Chromium.

One generated notebook holds all six, run once with Run All on the session's Lab server
(the one ``test_lab.py`` uses), so the added cost is one page load and one Run All. For
each explorer: its picture renders, a click on one of its controls changes the picture
and the numbers (to what torch computes here) without changing the explorer's height, its
controls and picture fit a 900 px window together, and no error shows. Screenshots of each
explorer before and after its click go to test-artifacts/.
"""

from __future__ import annotations

import nbformat
import pytest
import torch
from test_lab import FAILURE_TEXTS, assert_nothing_scrolls_sideways, changed, outputs_text, run_all

pytestmark = pytest.mark.browser

CELLS = [
    "import course\ncourse.RetainExplorer(theme='logistics')",
    "course.SkipPathExplorer(theme='kitchen')",
    "course.HookExplorer(theme='logistics')",
    "course.NoGradExplorer(theme='logistics')",
    "course.InplaceExplorer(theme='logistics')",
    "course.DoctorExplorer(theme='logistics')",
]


def _hook_scaled() -> str:
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    w.register_hook(lambda g: g * 0.1)
    for _ in range(2):
        (3 * (w * w)).sum().backward()
    return ", ".join(f"{v:.4g}" for v in w.grad.tolist())


def _inplace_before() -> str:
    x = torch.tensor([0.5, 1.5], requires_grad=True)
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    h = (x * 2).add_(1)
    (h * w).sum().backward()
    return ", ".join(f"{v:.4g}" for v in w.grad.tolist())


# explorer class, how to click, text the numbers must show after the click
CLICKS = [
    ("retain-explorer", lambda ex: ex.locator(".xp-monitor button",
                                              has_text="after backward()").click(),
     "silently"),
    ("skip-explorer", lambda ex: ex.locator(".xp-detach input[type=checkbox]").click(),
     "vacuum-packed"),
    ("hook-explorer", lambda ex: ex.locator(".xp-action button",
                                            has_text="scales by 0.1").click(),
     None),  # filled in below from torch
    ("nograd-explorer", lambda ex: ex.locator(".xp-use input[type=checkbox]").click(),
     "leaf Variable"),
    ("inplace-explorer", lambda ex: ex.locator(".xp-edit button",
                                               has_text="before y = h * w").click(),
     None),
    ("doctor-explorer", lambda ex: ex.locator(".xp-bug select").select_option(label="no bug"),
     "healthy gradient"),
]


def picture_selector(css: str) -> str:
    return f".{css} .xp-figure img, .{css} .xp-chart img"


def test_every_explorer_renders_and_responds(lab, page):
    doc = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    doc.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                  "language": "python"}
    nbformat.write(doc, str(lab.root / "explorers.ipynb"))
    expected = {"hook-explorer": f"w.grad = [{_hook_scaled()}]",
                "inplace-explorer": f"w.grad = [{_inplace_before()}]"}
    page.set_viewport_size({"width": 1400, "height": 1800})  # each explorer fits whole
    try:
        run_all(page, lab, "explorers.ipynb")
        text = outputs_text(page)
        for bad in (*FAILURE_TEXTS, "Traceback"):
            assert bad not in text
        for css, do_click, after in CLICKS:
            ex = page.locator(f".{css}").first
            pic = picture_selector(css)
            page.wait_for_selector(pic)
            ex.scroll_into_view_if_needed()
            ex.screenshot(path=str(lab.artifact(f"explorer-{css}-before.png")))
            before_numbers = ex.locator(".xp-numbers").inner_text()
            before_src = page.locator(pic).first.get_attribute("src")
            before_height = ex.bounding_box()["height"]
            do_click(ex)
            changed(page, f".{css} .xp-numbers", before_numbers)
            page.wait_for_function(
                "([sel, before]) => { const el = document.querySelector(sel);"
                " return el && el.src !== before; }", arg=[pic, before_src], timeout=20_000)
            numbers = ex.locator(".xp-numbers").inner_text()
            assert (after or expected[css]) in numbers, (css, numbers)
            # the code and the sentences keep their room: the picture does not move
            assert abs(ex.bounding_box()["height"] - before_height) <= 1, css
            ex.screenshot(path=str(lab.artifact(f"explorer-{css}-after.png")))
        text = outputs_text(page)
        for bad in (*FAILURE_TEXTS, "Traceback"):
            assert bad not in text
        assert page.locator(".jp-Dialog").count() == 0
        # in a 1400 x 900 window, each explorer's controls and its picture fit the notebook
        # panel together: a click and what it changed are seen without scrolling
        page.set_viewport_size({"width": 1400, "height": 900})
        reach = page.evaluate("""() => {
            const panel = document.querySelector('.jp-WindowedPanel-outer');
            const out = {panel: panel.getBoundingClientRect().height};
            for (const ex of document.querySelectorAll('.explorer')) {
                const img = ex.querySelector('.xp-figure img, .xp-chart img');
                const name = [...ex.classList].find(c => c.endsWith('-explorer'));
                out[name] = img.getBoundingClientRect().bottom - ex.getBoundingClientRect().top;
            }
            return out; }""")
        panel = reach.pop("panel")
        assert len(reach) == len(CLICKS), reach
        assert all(h <= panel for h in reach.values()), (panel, reach)
        assert len(assert_nothing_scrolls_sideways(page)) >= 6  # every explorer's picture
        page.screenshot(path=str(lab.artifact("explorers-after-clicks.png")), full_page=True)
    finally:
        for k in lab.api("/api/kernels"):
            lab.api(f"/api/kernels/{k['id']}", method="DELETE")
