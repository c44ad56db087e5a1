"""course.draw: legends per theme, distinct styles per kind, big graphs, no leaked figures."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402

from course import themes  # noqa: E402
from course.draw import draw_graph, graph_layout, render_png  # noqa: E402
from course.graph import build_graph  # noqa: E402


def basics_after_backward():
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    k = torch.tensor(1.5)  # an ordinary parcel, saved by MulBackward0
    c = a + b
    d = a * b
    e = c * d * k
    c.retain_grad()
    d.register_hook(lambda g: None)
    e.backward(retain_graph=True)  # keeps the saved k visible to build_graph
    return build_graph(e, namespace=locals())


def legend_texts(fig) -> list[str]:
    from course.draw import legend_texts

    return legend_texts(fig)


@pytest.mark.parametrize("theme", themes.THEMES)
def test_legend_uses_the_theme_words(theme):
    fig = draw_graph(basics_after_backward(), theme=theme)
    try:
        texts = legend_texts(fig)
        for key in ("parameter", "constant", "intermediate", "function", "retained", "hooked"):
            assert themes.term(theme, key) in texts
    finally:
        plt.close(fig)


def test_logistics_and_kitchen_words():
    assert themes.term("logistics", "parameter") == "sorting centre"
    assert themes.term("logistics", "intermediate") == "transit station"
    assert themes.term("logistics", "constant") == "ordinary parcel"
    assert themes.term("kitchen", "parameter") == "market ingredient"
    assert themes.term("kitchen", "intermediate") == "semi-finished dish"
    assert themes.term("kitchen", "constant") == "bottled sauce"
    with pytest.raises(ValueError):
        themes.term("pirate", "parameter")


def test_glossary_agrees_with_tensor_tables():
    from course.facts import ROLES

    for theme in themes.THEMES:
        for kind in ("parameter", "constant", "intermediate"):
            assert ROLES[theme][kind] == themes.term(theme, kind)


@pytest.mark.parametrize("theme", themes.THEMES)
def test_each_kind_looks_different(theme):
    styles = [themes.node_style(k, theme) for k in themes.KINDS]
    looks = {(s["facecolor"], s["boxstyle"], s["linestyle"]) for s in styles}
    assert len(looks) == len(themes.KINDS)
    assert len({s["boxstyle"] for s in styles}) == len(themes.KINDS)


def test_grads_and_marks_are_drawn():
    fig = draw_graph(basics_after_backward(), theme="technical", title="e = (a + b) * (a * b)")
    try:
        texts = [t.get_text() for t in fig.axes[0].texts]
        assert "grad 31.5" in texts and "grad 9" in texts  # a.grad and retained c.grad (x1.5)
        assert themes.term("technical", "gradient") in legend_texts(fig)
        edgecolors = {matplotlib.colors.to_hex(p.get_edgecolor()) for p in fig.axes[0].patches}
        assert themes.MARK_STYLE["retained"]["color"] in edgecolors
    finally:
        plt.close(fig)


def test_layout_is_left_to_right():
    g = basics_after_backward()
    grid = graph_layout(g)
    assert grid["a"][0] < grid["accumulate(a)"][0] < grid["c"][0] < grid["e"][0]
    assert grid["e"][0] == max(c for c, _ in grid.values())


def deep_graph(blocks: int):
    torch.manual_seed(0)
    layers = []
    for _ in range(blocks):
        layers += [torch.nn.Linear(4, 4), torch.nn.Tanh()]
    model = torch.nn.Sequential(*layers)
    x = torch.randn(2, 4)
    loss = model(x).pow(2).mean()
    return build_graph(loss, namespace={"model": model, "x": x, "loss": loss})


def test_sixty_node_graph_renders_readably():
    g = deep_graph(8)
    assert 55 <= len(g) <= 70
    png = render_png(g, "kitchen", title="deep")
    img = Image.open(io.BytesIO(png))
    # text keeps its size in inches as graphs grow: a deep graph wraps into bands that fit
    # the notebook column, and grows downwards
    from course import draw

    assert len(draw.graph_geometry(g, "kitchen").bands) >= 3
    assert draw.display_width(png) <= draw.COLUMN_WIDTH * draw.DISPLAY_DPI
    assert img.height > img.width
    assert img.getextrema()[0][0] < 100  # something dark was drawn


def test_no_figures_leak():
    before = set(plt.get_fignums())
    render_png(basics_after_backward(), "logistics")
    assert set(plt.get_fignums()) == before
    fig = draw_graph(basics_after_backward())
    assert set(plt.get_fignums()) == before | {fig.number}
    plt.close(fig)
    _, ax = plt.subplots()
    assert draw_graph(basics_after_backward(), ax=ax) is ax.figure
    plt.close(ax.figure)


def test_draw_graph_accepts_tensors():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    y = (a * 2).sum()
    fig = draw_graph(y, namespace={"a": a, "y": y}, theme="logistics")
    try:
        texts = " ".join(t.get_text() for t in fig.axes[0].texts)
        assert "a [2]" in texts and "MulBackward0" in texts
    finally:
        plt.close(fig)


def test_png_cache_keys_on_what_is_shown():
    g = basics_after_backward()
    first = render_png(g, "logistics", title="t")
    assert render_png(g, "logistics", title="t") is first  # same picture: cached
    g.nodes["a"]["grad"] = g.nodes["a"]["grad"] * 2
    assert render_png(g, "logistics", title="t") != first
    assert render_png(g, "kitchen", title="t") != first


def plain_matplotlib_pixels(g, theme: str, title: str):
    """What render_png drew before stamps: ordinary artists on a fresh Agg figure."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from course import draw

    fig = Figure(dpi=draw.RENDER_DPI)
    canvas = FigureCanvasAgg(fig)
    draw._draw(g, fig, None, theme, title, True)
    with matplotlib.rc_context(draw.FAST_TEXT):
        canvas.draw()
    return np.asarray(canvas.buffer_rgba()).astype(int)


@pytest.mark.parametrize("language", ["en", "zh-CN"])
@pytest.mark.parametrize("theme", themes.THEMES)
def test_stamped_png_looks_like_matplotlib_drawing(theme, language):
    """The same picture on both paths, in Chinese too: render_png's own glyph-by-glyph text
    takes the characters DejaVu Sans lacks from the CJK font as matplotlib's font fallback
    (``fontfamily=draw.cjk_families()`` on the plain path) does."""
    import numpy as np

    from course import draw
    from course.i18n import using

    title = "e = (a + b) * (a * b)" + ("：计算图" if language == "zh-CN" else "")
    with using(language):
        g = basics_after_backward()
        draw._PNG_CACHE.clear()
        png = np.asarray(Image.open(io.BytesIO(
            render_png(g, theme, title=title, dpi=draw.RENDER_DPI)))).astype(int)[..., :3]
        plain = plain_matplotlib_pixels(g, theme, title)[..., :3]  # the PNG is opaque
        opaque = plain_matplotlib_pixels(g, theme, title)[..., 3].min() == 255
    assert png.shape == plain.shape
    # The same pictures, at most a pixel apart (stamps sit on whole pixels; glyphs are placed
    # to a quarter pixel, lines rounded to whole pixels): each pixel is compared with the
    # nearest match within 1 px, in 4x4-pixel blocks: nothing is missing (a missing text or
    # mark differs by > 100) and nothing is added.
    png, plain = png.astype(np.int16), plain.astype(np.int16)
    h, w = png.shape[0] // 4 * 4, png.shape[1] // 4 * 4
    near = np.full(png.shape, 255, dtype=np.int16)
    padded = np.pad(plain, ((1, 1), (1, 1), (0, 0)), mode="edge")
    for dy in range(3):
        for dx in range(3):
            shifted = padded[dy:dy + png.shape[0], dx:dx + png.shape[1]]
            np.minimum(near, np.abs(png - shifted), out=near)
    blocks = near[:h, :w].reshape(h // 4, 4, w // 4, 4, 3).mean(axis=(1, 3), dtype=np.float32)
    assert blocks.mean() < 1.0 and blocks.max() < 96, (blocks.mean(), blocks.max())
    assert np.abs(png.mean(axis=(0, 1)) - plain.mean(axis=(0, 1))).max() < 0.15
    assert opaque  # nothing lost


def test_cached_pictures_are_reused_and_new_states_differ():
    from course import draw

    g = basics_after_backward()
    draw._PNG_CACHE.clear()
    draw._STAMPS.clear()
    first = render_png(g, "logistics", title="t")
    stamps = dict(draw._STAMPS)
    label = next(k for k in stamps if k[0] == "text" and k[1] == "a\nsorting centre")
    g.nodes["a"]["grad"] = g.nodes["a"]["grad"] * 2  # a new state: one new gradient text
    second = render_png(g, "logistics", title="t")
    assert second != first
    assert draw._STAMPS[label] is stamps[label]  # the label's pixels were not drawn again
    new = set(draw._STAMPS) - set(stamps)
    assert len(new) == 1 and next(iter(new))[1] == "grad 63"
    draw._PNG_CACHE.clear()
    assert render_png(g, "logistics", title="t") == second  # stamps draw the same bytes again


def test_render_png_draws_an_opaque_page_at_its_dpi_without_a_figure():
    import subprocess
    import sys

    from course import draw

    g = basics_after_backward()
    draw._PNG_CACHE.clear()
    img = Image.open(io.BytesIO(render_png(g, "kitchen", dpi=100)))
    assert round(img.info["dpi"][0]) == 100 and img.mode == "RGBA"
    assert img.getextrema()[3] == (255, 255)  # opaque
    w, h = draw.figure_size(g, "kitchen")
    assert (img.width, img.height) == (int(w * 100), int(h * 100))
    # a new kernel's first picture does not import matplotlib's Figure (about 200 ms)
    code = ("import sys, torch\nfrom course import draw\nfrom course.graph import build_graph\n"
            "a = torch.tensor(2.0, requires_grad=True)\n"
            "draw.render_png(build_graph(a * 3, namespace={'a': a}))\n"
            "print('matplotlib.figure' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


def test_layout_is_cached_by_structure():
    from course import draw

    g = basics_after_backward()
    draw._LAYOUTS.clear()
    grid = graph_layout(g)
    assert len(draw._LAYOUTS) == 1
    g.nodes["a"]["grad"] = None  # not structure
    assert graph_layout(g) == grid and len(draw._LAYOUTS) == 1
    grid["a"] = (9, 9)  # callers get a copy
    assert graph_layout(g)["a"] != (9, 9)


def test_static_figure_shows_in_jupyter_as_a_2x_png_at_1x_width():
    import base64

    from IPython.core.interactiveshell import InteractiveShell

    from course import draw

    shell = InteractiveShell.instance()
    fig = draw_graph(basics_after_backward(), theme="kitchen", title="e = (a + b) * (a * b)")
    try:
        data, meta = shell.display_formatter.format(fig)
        png = base64.b64decode(data["image/png"])
        width = int.from_bytes(png[16:20])
        assert abs(meta["image/png"]["width"] - width / 2) <= 1  # 2x pixels, shown at 1x
        assert meta["image/png"]["width"] == round(fig.get_figwidth() * draw.DISPLAY_DPI)
    finally:
        plt.close(fig)


def test_text_is_body_text_size():
    from course import draw

    # 10 pt at 96 CSS px per inch: 13.3 px, JupyterLab's body text is 13-14 px at 100 %
    assert 13 <= draw.FONT * draw.DISPLAY_DPI / 72 <= 14
    assert draw.RENDER_DPI == 2 * draw.DISPLAY_DPI


def stepper_graph(k: int):
    from course.widgets import BackwardStepper

    bs = BackwardStepper.__new__(BackwardStepper)
    from course.widgets import SCENARIOS, record_backward

    bs.scenario = SCENARIOS["kitchen"]
    bs.graph, bs.events = record_backward(bs.scenario)
    return bs._graph_at(k)


@pytest.mark.parametrize("theme", themes.THEMES)
def test_labels_sit_inside_their_shapes_and_step_numbers_clear_of_borders(theme):
    from matplotlib.patches import FancyBboxPatch

    from course import draw

    for g in (basics_after_backward(), stepper_graph(2), deep_graph(2)):
        fig = draw_graph(g, theme=theme, title="t")
        try:
            renderer = fig.canvas.get_renderer()
            ax = fig.axes[0]
            boxes = [p.get_window_extent(renderer) for p in ax.patches
                     if isinstance(p, FancyBboxPatch)]
            texts = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts}
            for n, d in g.nodes(data=True):
                label = draw._label(d, theme)
                t = texts[label]
                inside = [b for b in boxes if b.x0 <= t.x0 and t.x1 <= b.x1
                          and b.y0 <= t.y0 and t.y1 <= b.y1]
                assert inside, (n, label)
                if d.get("step") is not None:
                    step = texts[f"#{d['step']}"]
                    assert step.y0 >= inside[0].y1 - 1e-6, n  # above the box, not on its border
        finally:
            plt.close(fig)


def test_legend_lists_exactly_what_is_drawn():
    from course import draw

    plain = build_graph(torch.tensor(2.0, requires_grad=True) * 3)
    fig = draw_graph(plain, theme="kitchen")
    try:
        texts = legend_texts(fig)
        assert themes.term("kitchen", "gradient") not in texts  # no gradient is drawn
        assert themes.term("kitchen", "retained") not in texts
        assert themes.term("kitchen", "constant") not in texts
    finally:
        plt.close(fig)
    g = stepper_graph(2)
    fig = draw_graph(g, theme="kitchen")
    try:
        texts = legend_texts(fig)
        for key in ("gradient", "step", "running", "waiting", "untracked"):
            assert themes.term("kitchen", key) in texts
        marks = draw._marks(g, True)
        assert len(texts) == len(marks["present"]) + sum(
            marks[k] for k in marks if k != "present")
    finally:
        plt.close(fig)


@pytest.mark.parametrize("theme", themes.THEMES)
def test_nodes_use_the_glossary_words(theme):
    from course import draw

    for _, d in basics_after_backward().nodes(data=True):
        if d["kind"] != "function":
            assert draw._label(d, theme).split("\n")[1] == themes.term(theme, d["kind"])


# -- the zh-CN edition: Chinese words, drawn with the CJK font -------------------------------

def test_chinese_nodes_and_legend_use_glossary_zh():
    from course import draw
    from course.i18n import using

    with using("zh-CN"):
        g = basics_after_backward()
        fig = draw_graph(g, theme="logistics")
        try:
            texts = legend_texts(fig)
            for key in ("parameter", "constant", "intermediate", "function", "retained",
                        "hooked", "gradient"):
                assert themes.GLOSSARY_ZH["logistics"][key] in texts
            labels = [t.get_text() for t in fig.axes[0].texts]
            assert "a\n分拣中心" in labels and "c\n临时中转站" in labels
        finally:
            plt.close(fig)
        png_zh = render_png(g, "logistics")
    assert draw._label(g.nodes["a"], "logistics") == "a\nsorting centre"  # English again
    assert render_png(g, "logistics") != png_zh  # the language is part of the picture's key


def test_two_chinese_characters_draw_two_different_glyphs_from_the_cjk_font():
    """Characters DejaVu Sans lacks come from the CJK font, not as the missing-glyph box:
    different characters draw different pictures, each a full em wide, as the width the
    layout measures says."""
    import numpy as np

    from course import draw

    def ink(s):
        rgba, _, _ = draw._text_pixels(s, draw.RENDER_DPI)
        return rgba[..., 3]

    box = ink("\u0378")  # an unassigned code point: no font has it, DejaVu's box is drawn
    leaf, child = ink("叶"), ink("子")
    assert draw._face_of("normal", "normal", "叶") == 1 and draw._face_of("normal", "normal", "a") == 0
    assert leaf.shape != child.shape or not np.array_equal(leaf, child)
    for glyph in (leaf, child):
        assert glyph.shape != box.shape or not np.array_equal(glyph, box)
        assert glyph.max() > 200  # real strokes
    em = draw.FONT / 72
    assert draw._text_width("叶子张量") == pytest.approx(4 * em, rel=0.02)
    assert draw._text_width("a叶") == pytest.approx(draw._text_width("a") + em, rel=0.02)


def test_without_the_cjk_font_chinese_fails_with_the_package_name(monkeypatch):
    from matplotlib import font_manager

    from course import draw
    from course.i18n import using

    def no_cjk(prop, *args, **kwargs):
        if draw.CJK_FAMILY in prop.get_family():
            raise ValueError("not found")
        return real(prop, *args, **kwargs)

    real = font_manager.fontManager.findfont

    def forget():
        draw.clear_caches()
        draw._ft_font.cache_clear()
        draw.cjk_font.cache_clear()

    forget()
    monkeypatch.setattr(font_manager.fontManager, "findfont", no_cjk)
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *a, **k: [])
    try:
        assert render_png(basics_after_backward(), "kitchen").startswith(b"\x89PNG")  # English
        with using("zh-CN"), pytest.raises(RuntimeError, match=draw.CJK_PACKAGE):
            render_png(basics_after_backward(), "kitchen")
    finally:
        monkeypatch.undo()
        forget()
    assert draw.cjk_font()  # installed here
