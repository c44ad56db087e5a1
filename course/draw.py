"""Drawing an autograd graph with matplotlib (first used in lesson 01).

``draw_graph(e, namespace=globals(), theme="logistics")`` draws the graph of
``course.graph.build_graph`` left to right: inputs on the left, the output on
the right, one column per layer. Layers and their order come from networkx
(``topological_generations`` counted back from the output, then
``multipartite_layout``); no Graphviz. Each kind of node has its own box,
retained nodes a thick amber outline, hooked nodes a probe marker, and after
``backward()`` the gradients torch keeps are printed in red under their node
(and on the edges, when a ``BackwardStepper`` recorded them).

Data coordinates are inches, so the figure grows with the graph and the text
always fits its box; a 60-node graph stays readable.

``render_png`` (what the widgets show) is tuned for a redraw per click: it reuses one
Figure and Agg canvas, rasterises each text (labels, gradients, the legend, the title),
box, arrow and hook marker once and then stamps its cached pixels (a ``Stamps`` artist:
the same pixels matplotlib draws, placed on whole pixels), caches the layout per graph
structure and writes the PNG with zlib directly (see docs/benchmarks.md).
``draw_graph`` keeps ordinary matplotlib artists (``Text``, ``Legend``, patches), so a
figure you save as SVG or PDF has real text and vector shapes.
"""

from __future__ import annotations

import functools
import math
import struct
import threading
import zlib
from collections.abc import Callable, Mapping

import networkx as nx

from course import themes

__all__ = ["draw_graph", "render_png", "graph_layout", "format_grad", "picture_key"]

FONT = 8.0            # points, node labels
CHAR_W = 0.58 * FONT / 72  # inches per character, a safe average for DejaVu Sans
LINE_H = 1.25 * FONT / 72
GAP_X, ROW_H = 0.45, 0.78   # inches between columns, per row
MARGIN = 0.25
# Text is most of the drawing time (matplotlib lays out and rasterises every glyph on
# every draw). Unhinted glyphs without the last-resort font fallback draw about twice
# as fast and look the same at these sizes; used for the widgets' PNGs.
FAST_TEXT = {"text.hinting": "none", "font.enable_last_resort": False}


def format_grad(g, limit: int = 3) -> str:
    """A short text for a gradient tensor: ``21``, ``[0.597, -0.473, 1.26, ...]``."""
    if g is None:
        return "None"
    values = g.detach().flatten().tolist()
    shown = ", ".join(f"{v:.3g}" for v in values[:limit])
    if g.dim() == 0:
        return shown
    return f"[{shown}{', ...' if len(values) > limit else ''}]"


def _label(d: dict, theme: str) -> str:
    if d["kind"] == "function":
        return d["torch_class"]
    shape = f" {list(d['shape'])}" if d["shape"] else ""
    return f"{d['name']}{shape}\n{themes.SHORT_ROLE[theme][d['kind']]}"


def _box_size(label: str) -> tuple[float, float]:
    lines = label.split("\n")
    return max(len(s) for s in lines) * CHAR_W + 0.12, len(lines) * LINE_H + 0.1


_LAYOUTS: dict[tuple, dict] = {}
_LAYOUTS_SIZE = 128


def graph_layout(g: nx.DiGraph) -> dict:
    """Grid positions ``node -> (column, row)`` from networkx.

    Columns are ``topological_generations`` of the reversed graph (distance to
    the output), so every input sits just left of its first use. Within a column,
    nodes follow the mean row of the nodes they feed, which keeps edges short.
    The layout depends only on the structure (nodes and edges, in order), so it is
    cached by structure: toggling a control that keeps the graph's shape reuses it.
    """
    if len(g) == 0:
        return {}
    key = (tuple(g), tuple(g.edges))
    if key not in _LAYOUTS:
        if len(_LAYOUTS) >= _LAYOUTS_SIZE:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))  # oldest first
        _LAYOUTS[key] = _layout(g)
    return dict(_LAYOUTS[key])


def _layout(g: nx.DiGraph) -> dict:
    depth = {n: i for i, gen in enumerate(nx.topological_generations(g.reverse(copy=False)))
             for n in gen}
    last = max(depth.values())
    columns: dict[int, list] = {}
    for n in g:  # insertion order: the order backward met the nodes
        columns.setdefault(last - depth[n], []).append(n)
    row: dict = {}
    for col in sorted(columns, reverse=True):
        def key(n, _col=col):
            rows = [row[s] for s in g.successors(n) if s in row]
            return sum(rows) / len(rows) if rows else 0.0
        columns[col].sort(key=key)
        row.update((n, i) for i, n in enumerate(columns[col]))
    pos = nx.multipartite_layout(g, subset_key=dict(sorted(columns.items())), align="vertical")
    xs = sorted({round(float(p[0]), 9) for p in pos.values()})
    ys = sorted({round(float(p[1]), 9) for p in pos.values()})
    unit = (xs[-1] - xs[0]) / (len(xs) - 1) if len(xs) > 1 else (
        (ys[-1] - ys[0]) / max(1, max(len(c) for c in columns.values()) - 1) or 1.0)
    return {n: (round((p[0] - xs[0]) / unit), round((ys[-1] - p[1]) / unit, 1))
            for n, p in pos.items()}


def _legend_handles(theme: str, present, retained: bool, hooked: bool, grads: bool) -> list:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(label=themes.term(theme, k), **_patch_kw(themes.node_style(k, theme)))
               for k in themes.KINDS if k in present]
    if retained:
        handles.append(Patch(facecolor="white", edgecolor=themes.MARK_STYLE["retained"]["color"],
                             linewidth=3, label=themes.term(theme, "retained")))
    if hooked:
        handles.append(Line2D([], [], linestyle="", marker="v", markersize=8,
                              color=themes.MARK_STYLE["hooked"]["color"],
                              label=themes.term(theme, "hooked")))
    if grads:
        handles.append(Line2D([], [], color=themes.MARK_STYLE["gradient"]["color"],
                              label=themes.term(theme, "gradient")))
    return handles


def _box(w, h, boxstyle, alpha, kw, x, y):
    """A node's box centred on ``(x, y)`` (in inches)."""
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle=boxstyle, alpha=alpha, zorder=2,
                          **dict(kw))


def _arrow(vec, rad, linestyle, color, alpha, x, y):
    """An edge's arrow from ``(x, y)`` along ``vec`` (in inches)."""
    from matplotlib.patches import FancyArrowPatch

    return FancyArrowPatch((x, y), (x + vec[0], y + vec[1]), arrowstyle="-|>", mutation_scale=9,
                           shrinkA=0, shrinkB=0, color=color, linewidth=0.9, zorder=1,
                           linestyle=linestyle, connectionstyle=f"arc3,rad={rad}", alpha=alpha)


def _hook(x, y):
    """The probe marker of a hooked node, at its box's top right corner ``(x, y)``."""
    from matplotlib.lines import Line2D

    return Line2D([x], [y], marker="v", markersize=9, zorder=4, linestyle="",
                  color=themes.MARK_STYLE["hooked"]["color"])


def _draw(g: nx.DiGraph, fig, ax, theme: str, title: str | None, show_grads: bool,
          stamps: bool = False) -> None:
    """Draw ``g`` on ``fig``: into ``ax`` if given, else on a new axes sized to the graph.

    With ``stamps`` (the ``render_png`` path) ``ax`` is a reused axes that is
    positioned like a new one, and every text is a cached bitmap (``Stamps``)
    instead of a ``Text``/``Legend`` artist.
    """
    grid = graph_layout(g)
    labels = {n: _label(d, theme) for n, d in g.nodes(data=True)}
    sizes = {n: _box_size(lab) for n, lab in labels.items()}
    ncols = max((c for c, _ in grid.values()), default=0) + 1
    col_w = [max([sizes[n][0] for n in g if grid[n][0] == c] + [0.6]) for c in range(ncols)]
    col_x = [MARGIN + sum(col_w[:c]) + GAP_X * c + col_w[c] / 2 for c in range(ncols)]
    nrows = max((r for _, r in grid.values()), default=0) + 1
    width = MARGIN * 2 + sum(col_w) + GAP_X * (ncols - 1)
    height = MARGIN * 2 + nrows * ROW_H
    xy = {n: (col_x[c], height - MARGIN - ROW_H / 2 - r * ROW_H) for n, (c, r) in grid.items()}

    present = {d["kind"] for _, d in g.nodes(data=True)}
    retained = [n for n, d in g.nodes(data=True) if d.get("retains_grad")]
    hooked = [n for n, d in g.nodes(data=True) if d.get("has_hooks")]
    grads = {n for n, d in g.nodes(data=True) if show_grads and d.get("grad") is not None}
    edge_grads = {(u, v) for u, v, d in g.edges(data=True)
                  if show_grads and d.get("grad") is not None}

    legend = (theme, tuple(k for k in themes.KINDS if k in present), bool(retained),
              bool(hooked), bool(grads or edge_grads))
    n_handles = len(legend[1]) + sum(legend[2:])
    legend_cols = min(4, max(1, n_handles))
    legend_h = 0.12 + 0.24 * -(-n_handles // legend_cols)
    title_h = 0.4 if title else 0.0
    fig_w = max(width, 2.6 * legend_cols)
    if ax is None or stamps:
        total = height + legend_h + title_h
        fig.set_size_inches(fig_w, total)
        rect = (0, legend_h / total, 1, height / total)
        if ax is None:
            ax = fig.add_axes(rect)
        else:
            ax.set_position(rect)
        ax.set_xlim((width - fig_w) / 2, (width + fig_w) / 2)
        ax.set_ylim(0, height)
    else:
        ax.set_xlim(0, width)
        ax.set_ylim(0, height)
        ax.set_aspect("equal", adjustable="datalim")
    ax.set_axis_off()

    if stamps:  # cached pictures of arrows, boxes, texts and markers, in four layers
        layers = {z: fig.add_artist(_new_stamps(ax.transData, z)) for z in (1, 2, 3, 4)}

        def shape(x, y, zorder, key, make):
            layers[zorder].add(x, y, _shape_stamp(key, make, fig.dpi))

        def text(x, y, s, zorder, **kw):
            layers[zorder].add(x, y, _text_stamp(s, fig.dpi, **kw))
    else:
        def shape(x, y, zorder, key, make):
            ax.add_artist(make(x, y))  # add_artist: no autoscale bookkeeping, limits are set

        def text(x, y, s, zorder, **kw):
            ax.text(x, y, s, zorder=zorder, **kw)

    for n, d in g.nodes(data=True):
        style = themes.node_style(d["kind"], theme)
        w, h = sizes[n]
        x, y = xy[n]
        kw = _patch_kw(style)
        if d.get("retains_grad"):
            kw.update(edgecolor=themes.MARK_STYLE["retained"]["color"], linewidth=3.2)
        if d.get("highlight"):
            kw.update(edgecolor=themes.MARK_STYLE["gradient"]["color"], linewidth=3.2)
        alpha = 0.35 if d.get("faded") else 1.0
        box = (w, h, style["boxstyle"], alpha, tuple(sorted(kw.items())))
        shape(x, y, 2, ("box", *box), functools.partial(_box, *box))
        is_fn = d["kind"] == "function"
        text(x, y, labels[n], 3, ha="center", va="center", fontsize=FONT - (0.8 if is_fn else 0),
             style="italic" if is_fn else "normal", alpha=alpha,
             fontweight="bold" if d.get("is_output") else "normal")
        if d.get("has_hooks"):
            shape(x + w / 2, y + h / 2, 4, ("hook",), _hook)
        if n in grads:
            text(x, y - h / 2 - 0.05, f"grad {format_grad(d['grad'])}", 3, ha="center",
                 va="top", fontsize=FONT - 1, color=themes.MARK_STYLE["gradient"]["color"])
        if d.get("step") is not None:
            text(x - w / 2, y + h / 2, f"#{d['step']}", 4, ha="right", va="bottom",
                 fontsize=FONT - 1, color=themes.MARK_STYLE["gradient"]["color"])

    color = themes.edge_color(theme)
    for u, v, d in g.edges(data=True):
        start, end = _clip(xy[u], sizes[u], xy[v]), _clip(xy[v], sizes[v], xy[u])
        vec = (end[0] - start[0], end[1] - start[1])
        if stamps:  # whole pixels, so that arrows of the same shape share one picture
            vec = (round(vec[0] * fig.dpi) / fig.dpi, round(vec[1] * fig.dpi) / fig.dpi)
        arrow = (vec, 0.12 if grid[v][0] - grid[u][0] > 1 else 0.0,
                 "--" if d.get("recovered") else "-", color,
                 0.35 if g.nodes[v].get("faded") and d.get("grad") is None else 1.0)
        shape(*start, 1, ("arrow", *arrow), functools.partial(_arrow, *arrow))
        if (u, v) in edge_grads:
            text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.04,
                 format_grad(d["grad"]), 4, ha="center", va="bottom", fontsize=FONT - 1.5,
                 color=themes.MARK_STYLE["gradient"]["color"], bbox=_EDGE_LABEL_BOX)

    title_y = 1 - 0.08 / fig.get_figheight()
    if stamps:
        top = fig.add_artist(_new_stamps(fig.transFigure, 5))
        if n_handles:
            top.add(0.5, 0.0, _legend_stamp(legend, legend_cols, fig.dpi))
        if title:
            top.add(0.5, title_y, _text_stamp(title, fig.dpi, ha="center", va="top",
                                              fontsize=FONT + 3))
        return
    if n_handles:
        fig.legend(handles=_legend_handles(*legend), loc="lower center", ncol=legend_cols,
                   fontsize=FONT, frameon=False, bbox_to_anchor=(0.5, 0.0))
    if title:
        fig.suptitle(title, fontsize=FONT + 3, y=title_y)


def _clip(center, size, toward) -> tuple[float, float]:
    """Where the line from ``center`` to ``toward`` leaves a box of ``size`` (plus its pad)."""
    (x, y), (w, h) = center, size
    dx, dy = toward[0] - x, toward[1] - y
    half_w, half_h = w / 2 + 0.06, h / 2 + 0.06
    t = min(half_w / abs(dx) if dx else float("inf"), half_h / abs(dy) if dy else float("inf"))
    t = min(t, 1.0)
    return x + dx * t, y + dy * t


def _patch_kw(style: dict) -> dict:
    return {k: style[k] for k in ("facecolor", "edgecolor", "linestyle", "linewidth")}


def _as_graph(outputs_or_graph, namespace: Mapping | None) -> nx.DiGraph:
    if isinstance(outputs_or_graph, nx.DiGraph):
        return outputs_or_graph
    from course.graph import build_graph

    if isinstance(outputs_or_graph, list | tuple):
        return build_graph(*outputs_or_graph, namespace=namespace)
    return build_graph(outputs_or_graph, namespace=namespace)


def draw_graph(outputs_or_graph, namespace: Mapping | None = None, theme: str = "technical",
               ax=None, title: str | None = None, show_grads: bool = True):
    """Draw the autograd graph of a tensor (or list of tensors, or a built graph).

    ``theme`` is ``"technical"``, ``"logistics"`` or ``"kitchen"``; ``namespace``
    names the tensors (pass ``globals()``). Returns the ``Figure``. Without ``ax``
    the figure is a pyplot figure, so a notebook shows it (end the line with ``;``)
    and a script should ``plt.close(fig)``; with ``ax`` it draws there. Never calls
    ``plt.show()``.
    """
    themes.check_theme(theme)
    g = _as_graph(outputs_or_graph, namespace)
    if ax is None:
        import matplotlib.pyplot as plt

        fig = plt.figure()
    else:
        fig = ax.figure
    _draw(g, fig, ax, theme, title, show_grads)
    return fig


_PNG_CACHE: dict[tuple, bytes] = {}
_PNG_CACHE_SIZE = 64


def picture_key(graph: nx.DiGraph, theme: str, title: str | None, show_grads: bool,
                dpi: int) -> tuple:
    """Everything the drawing shows, as a hashable key: equal keys draw equal pictures."""
    nodes = tuple(
        (n, d["kind"], d.get("torch_class"), d.get("shape"), bool(d.get("retains_grad")),
         bool(d.get("has_hooks")), bool(d.get("is_output")), bool(d.get("highlight")),
         bool(d.get("faded")), d.get("step"),
         format_grad(d.get("grad")) if show_grads and d.get("grad") is not None else None)
        for n, d in graph.nodes(data=True))
    edges = tuple(
        (u, v, bool(d.get("recovered")),
         format_grad(d.get("grad")) if show_grads and d.get("grad") is not None else None)
        for u, v, d in graph.edges(data=True))
    return nodes, edges, theme, title, show_grads, dpi


def render_png(graph: nx.DiGraph, theme: str = "technical", title: str | None = None,
               show_grads: bool = True, dpi: int = 72) -> bytes:
    """The drawing as PNG bytes, from a figure outside pyplot (nothing to close, nothing leaks).

    This is what the widgets put in their output area. Pictures are cached by what
    they show (:func:`picture_key`), so going back to a state a learner has seen
    (toggling a control off again, stepping back) costs about a millisecond. A new
    state reuses one figure and canvas and the cached pictures of its texts, boxes
    and arrows (see the module docstring), about 20 ms at 30 nodes.
    """
    import matplotlib as mpl
    import numpy as np

    themes.check_theme(theme)
    key = picture_key(graph, theme, title, show_grads, dpi)
    if key in _PNG_CACHE:
        return _PNG_CACHE[key]
    with _LOCK, mpl.rc_context(FAST_TEXT):
        fig, canvas, ax = _canvas(dpi)
        try:
            _draw(graph, fig, ax, theme, title, show_grads, stamps=True)
            canvas.draw()
            png = _encode_png(np.asarray(canvas.buffer_rgba()), dpi)
        finally:
            _clear_canvas()
    if len(_PNG_CACHE) >= _PNG_CACHE_SIZE:
        _PNG_CACHE.pop(next(iter(_PNG_CACHE)))  # oldest first
    _PNG_CACHE[key] = png
    return png


# --- the render_png machinery: one reused canvas, cached text pictures, a direct PNG writer

_LOCK = threading.RLock()
_CANVAS: list = []  # [(figure, canvas, axes)] once made; made on first use
_SCRATCH: list = []  # [(figure, canvas)]: a transparent canvas that text pictures are cut from
_STAMPS: dict[tuple, tuple] = {}  # key -> (rgba rows bottom-up, dx, dy)
_STAMPS_SIZE = 2048
_EDGE_LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8}


def _canvas(dpi: float):
    """The Figure, Agg canvas and axes that ``render_png`` draws on, made once (about 15 ms)."""
    if not _CANVAS:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure()
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_axis_off()
        _CANVAS.append((fig, FigureCanvasAgg(fig), ax))
    fig, canvas, ax = _CANVAS[0]
    fig.set_dpi(dpi)
    return fig, canvas, ax


def _clear_canvas() -> None:
    """Remove what ``_draw`` added, so the next picture starts from the bare figure and axes."""
    fig, _, ax = _CANVAS[0]
    for artist in [*ax.patches, *ax.lines, *ax.artists, *ax.texts, *fig.artists, *fig.texts,
                   *fig.legends]:
        artist.remove()


@functools.cache
def _stamps_class():
    """The ``Stamps`` artist class (made on first use: this module imports matplotlib lazily)."""
    from matplotlib.artist import Artist

    class Stamps(Artist):
        """Pre-rendered pictures (texts, the legend) placed at points in ``transform`` coordinates.

        Each picture is blended in with one ``draw_image`` on whole pixels: the
        same pixels matplotlib would draw for the text, without laying out and
        rasterising its glyphs again.
        """

        def __init__(self, transform, zorder: float):
            super().__init__()
            self.set_transform(transform)
            self.set_zorder(zorder)
            self.items: list[tuple[float, float, tuple]] = []

        def add(self, x: float, y: float, stamp: tuple) -> None:
            self.items.append((x, y, stamp))

        def draw(self, renderer):
            if not self.items or not self.get_visible():
                return
            points = self.get_transform().transform([(x, y) for x, y, _ in self.items])
            gc = renderer.new_gc()
            for (px, py), (_, _, (rgba, dx, dy)) in zip(points, self.items, strict=True):
                renderer.draw_image(gc, round(px) + dx, round(py) + dy, rgba)
            gc.restore()
            self.stale = False

    return Stamps


def _new_stamps(transform, zorder: float):
    return _stamps_class()(transform, zorder)


def _rasterise(dpi: float, add: Callable) -> tuple:
    """Draw one artist alone on a transparent canvas; its pixels and offset from its anchor.

    ``add(figure, x, y)`` adds the artist anchored at pixel ``(x, y)`` and returns
    it. The result ``(rgba, dx, dy)`` draws the same pixels when blended at
    ``(anchor_x + dx, anchor_y + dy)`` on another Agg canvas.
    """
    import numpy as np

    if not _SCRATCH:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(8, 3))
        fig.patch.set_alpha(0)
        _SCRATCH.append((fig, FigureCanvasAgg(fig)))
    fig, canvas = _SCRATCH[0]
    fig.set_dpi(dpi)
    for _ in range(3):
        w_px, h_px = round(fig.get_figwidth() * dpi), round(fig.get_figheight() * dpi)
        ax_px, ay_px = w_px // 2, h_px // 2
        artist = add(fig, ax_px, ay_px)
        try:
            renderer = canvas.get_renderer()
            renderer.clear()
            artist.draw(renderer)
            box = artist.get_window_extent(renderer)
        finally:
            artist.remove()
        pad = 3 + math.ceil(2 * dpi / 72)  # antialiasing, line widths, a text's bbox pad
        x0, y0 = int(np.floor(box.x0)) - pad, int(np.floor(box.y0)) - pad
        x1, y1 = int(np.ceil(box.x1)) + pad, int(np.ceil(box.y1)) + pad
        if x0 >= 0 and y0 >= 0 and x1 <= w_px and y1 <= h_px:
            buf = np.asarray(renderer.buffer_rgba())
            rgba = np.ascontiguousarray(buf[h_px - y1:h_px - y0, x0:x1][::-1])
            return rgba, x0 - ax_px, y0 - ay_px
        fig.set_size_inches(max(fig.get_figwidth(), 2.2 * (x1 - x0) / dpi),
                            max(fig.get_figheight(), 2.2 * (y1 - y0) / dpi))
    raise RuntimeError("text too large to rasterise")  # pragma: no cover


def _remember(key: tuple, make: Callable) -> tuple:
    stamp = _STAMPS.get(key)
    if stamp is None:
        if len(_STAMPS) >= _STAMPS_SIZE:
            _STAMPS.pop(next(iter(_STAMPS)))  # oldest first
        stamp = _STAMPS[key] = make()
    return stamp


def _text_stamp(s: str, dpi: float, **kw) -> tuple:
    """The cached picture of a text drawn with ``Figure.text`` keywords ``kw``."""
    from matplotlib.transforms import IdentityTransform

    key = ("text", s, dpi, tuple(sorted(
        (k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in kw.items())))
    return _remember(key, lambda: _rasterise(dpi, lambda fig, x, y: fig.text(
        x, y, s, transform=IdentityTransform(), **kw)))


def _shape_stamp(key: tuple, make: Callable, dpi: float) -> tuple:
    """The cached picture of ``make(0, 0)``, an artist drawn in inches about the origin."""
    from matplotlib.transforms import Affine2D

    def add(fig, x, y):
        artist = make(0, 0)
        artist.set_transform(Affine2D().scale(dpi).translate(x, y))  # inches, like the axes
        return fig.add_artist(artist)

    return _remember(("shape", key, dpi), lambda: _rasterise(dpi, add))


def _legend_stamp(legend: tuple, ncol: int, dpi: float) -> tuple:
    """The cached picture of the legend, anchored at its bottom centre (like ``fig.legend``)."""
    from matplotlib.transforms import IdentityTransform

    def add(fig, x, y):
        return fig.legend(handles=_legend_handles(*legend), loc="lower center", ncol=ncol,
                          fontsize=FONT, frameon=False, bbox_to_anchor=(x, y),
                          bbox_transform=IdentityTransform())

    return _remember(("legend", legend, ncol, dpi), lambda: _rasterise(dpi, add))


def _encode_png(rgba, dpi: float) -> bytes:
    """RGBA pixels as a PNG: zlib level 1, no row filters (3x faster than Pillow's encoder)."""
    import numpy as np

    h, w, _ = rgba.shape
    rows = np.zeros((h, w * 4 + 1), np.uint8)  # a 0 (no filter) byte before each row
    rows[:, 1:] = rgba.reshape(h, w * 4)

    def chunk(tag: bytes, data) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    per_metre = round(dpi / 0.0254)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
            + chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1))
            + chunk(b"IDAT", zlib.compress(rows, 1)) + chunk(b"IEND", b""))
