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
always fits its box; a 60-node graph stays readable. No drawing is wider than the
notebook column (``COLUMN_WIDTH``): a graph with more columns than fit is wrapped like a
line of text into bands stacked top to bottom, each read left to right (see ``Geometry``).

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

__all__ = ["draw_graph", "render_png", "graph_layout", "graph_geometry", "format_grad",
           "picture_key", "figure_size", "display_width", "DISPLAY_DPI", "RENDER_DPI",
           "COLUMN_WIDTH"]

# One size and style for every drawing of the course (the explorers, the stepper and the
# static figures). Sizes are in points and inches; a drawing is shown at DISPLAY_DPI CSS
# pixels per inch (the CSS inch), so FONT = 10 pt is 13.3 px, the notebook's body text at
# 100 % zoom.
# PNGs are rendered at RENDER_DPI (twice that) and shown at half their pixel width: crisp
# on 2x displays.
DISPLAY_DPI = 96
RENDER_DPI = 2 * DISPLAY_DPI
FONT = 10.0           # points (13.3 CSS px): node labels, gradients, step numbers, legend
EDGE_FONT = 9.5       # gradients written on the edges (BackwardStepper)
TITLE_FONT = 12.0
CHAR_W = 0.6 * FONT / 72    # inches per character, a safe average (layout estimates only)
LINE_H = 1.25 * FONT / 72
PAD_X, PAD_Y = 0.06, 0.06   # inches between a label and its box's text area edge
PAD_X_ROUND4 = 0.12         # more for the wobbly intermediate shape, narrower at its ends
BOX_PAD = 0.05              # the boxstyle's pad (inches), outside the text area
SHAPE_OUT = BOX_PAD + 0.03  # everything a shape draws outside its text area: pad, teeth, outline
COL_PAD = 0.03              # free inches at each side of a column's widest node
GAP_X = 0.42                # inches between columns: edges cross here, and only here
ROW_GAP = 0.32              # inches between the drawn extents of two nodes in a column
MARGIN = 0.25
LANE = 0.14                 # inches between two edges running side by side where a graph wraps
# The widest a drawing gets: the notebook column. JupyterLab's output area is about 968 CSS
# px wide in a 1400 px window with the file browser open; 9.6 in at DISPLAY_DPI is 922 px.
# A wider graph is wrapped into bands (see Geometry); its text keeps its size.
COLUMN_WIDTH = 9.6
MARK_H = 1.3 * FONT / 72    # height of a line of mark text (gradient, step number)
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


def _short_grad(g) -> str:
    """A gradient as written in a drawing: whole if it has at most two values, else the first
    value and "..." (the tensor table shows them all)."""
    return format_grad(g, limit=2 if g.numel() <= 2 else 1)


def _grad_template(shape) -> str:
    """The widest text a gradient of this shape is written as (space is kept for it)."""
    if not shape:
        return "grad -8.88e-88"
    n = math.prod(shape)
    return {1: "grad [-8.88e-88]", 2: "grad [-8.88e-88, -8.88e-88]"}.get(
        n, "grad [-8.88e-88, ...]")


def _label(d: dict, theme: str) -> str:
    if d["kind"] == "function":
        return d["torch_class"]
    shape = f" {list(d['shape'])}" if d["shape"] else ""
    return f"{d['name']}{shape}\n{themes.SHORT_ROLE[theme][d['kind']]}"


@functools.lru_cache(maxsize=4096)
def _text_width(s: str, size: float = FONT, weight: str = "normal", style: str = "normal"):
    """Width of one line of text in inches (DejaVu Sans, as matplotlib lays it out)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    prop = FontProperties(size=size, weight=weight, style=style)
    return text_to_path.get_text_width_height_descent(s, prop, ismath=False)[0] / 72


def _label_font(d: dict) -> dict:
    return {"weight": "bold" if d.get("is_output") else "normal",
            "style": "italic" if d["kind"] == "function" else "normal"}


def _box_size(label: str, weight: str = "normal", style: str = "normal",
              pad_x: float = PAD_X) -> tuple[float, float]:
    """The text area of a node's box (inches): the label's lines plus a margin."""
    lines = label.split("\n")
    w = max(_text_width(s, FONT, weight, style) for s in lines)
    return w + 2 * pad_x, len(lines) * LINE_H + 2 * PAD_Y


_LAYOUTS: dict[tuple, tuple] = {}
_LAYOUTS_SIZE = 128


def graph_layout(g: nx.DiGraph) -> dict:
    """Grid positions ``node -> (column, row)``.

    Columns are ``topological_generations`` of the reversed graph (distance to
    the output, from networkx), so every input sits just left of its first use. An
    edge that spans several columns gets a reserved slot (a dummy node) in every
    column it crosses, so no node is ever placed on its way. Within a column, nodes
    and slots follow the mean row of what they feed, at least one row apart. The
    layout depends only on the structure (nodes and edges, in order), so it is
    cached by structure: toggling a control that keeps the graph's shape reuses it.
    """
    return dict(_layered(g)[0])


def _layered(g: nx.DiGraph) -> tuple[dict, dict]:
    """``(grid, slots)``: ``grid`` as :func:`graph_layout`; ``slots[(u, v)]`` the rows of the
    edge's reserved slots, one per column strictly between ``u``'s and ``v``'s."""
    if len(g) == 0:
        return {}, {}
    key = (tuple(g), tuple(g.edges))
    if key not in _LAYOUTS:
        if len(_LAYOUTS) >= _LAYOUTS_SIZE:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))  # oldest first
        _LAYOUTS[key] = _layout(g)
    grid, slots = _LAYOUTS[key]
    return grid, slots


def _layout(g: nx.DiGraph) -> tuple[dict, dict]:
    depth = {n: i for i, gen in enumerate(nx.topological_generations(g.reverse(copy=False)))
             for n in gen}
    last = max(depth.values())
    col = {n: last - depth[n] for n in g}
    members: dict[int, list] = {}
    for n in g:  # insertion order: the order backward met the nodes
        members.setdefault(col[n], []).append(n)
    nxt: dict = {}   # item -> the items it feeds in the next column
    for u, v in g.edges:
        prev = u
        for c in range(col[u] + 1, col[v]):
            slot = ("slot", u, v, c)
            members[c].append(slot)
            nxt.setdefault(prev, []).append(slot)
            prev = slot
        nxt.setdefault(prev, []).append(v)
    row: dict = {}
    for c in sorted(members, reverse=True):  # from the output back to the inputs
        items = members[c]
        wanted = {}
        for item in items:
            rows = [row[s] for s in nxt.get(item, ()) if s in row]
            wanted[item] = sum(rows) / len(rows) if rows else None
        order = sorted(items, key=lambda it: (wanted[it] is None, wanted[it] or 0.0))
        placed, prev = [], None
        for it in order:
            want = wanted[it] if wanted[it] is not None else (prev + 1 if prev is not None
                                                              else 0.0)
            r = want if prev is None else max(want, prev + 1)
            placed.append(r)
            prev = r
        # shift the column as a whole towards what its items wanted (spacing is kept)
        deltas = [wanted[it] - r for it, r in zip(order, placed, strict=True)
                  if wanted[it] is not None]
        shift = (max(deltas) + min(deltas)) / 2 if deltas else 0.0
        row.update((it, round(r + shift, 3)) for it, r in zip(order, placed, strict=True))
    top = min(row.values())
    grid = {n: (col[n], round(row[n] - top, 3)) for n in g}
    slots = {(u, v): [round(row[("slot", u, v, c)] - top, 3) for c in range(col[u] + 1, col[v])]
             for u, v in g.edges}
    return grid, slots


class Geometry:
    """Where everything of a drawing goes, in inches (origin: the graph area's bottom left).

    ``xy`` node centres; ``box`` the text area ``(w, h)`` of each node's box; ``bounds``
    everything a node draws ``(x0, y0, x1, y1)``: its shape with outline and marks, and the
    space kept for its gradient and step number; ``edges[(u, v)]`` the polyline an edge is
    drawn along, from ``u``'s border to ``v``'s. Edges cross between columns only in the
    gaps, where there are no nodes, and go through a column only at a row kept free for them.

    A graph wider than ``max_width`` (the notebook column, :data:`COLUMN_WIDTH`) is wrapped
    like a line of text: its columns are cut into *bands* of consecutive columns, each at
    most that wide, stacked top to bottom, all reading left to right. An edge that crosses
    from one band to the next leaves its band at the right, in a lane of its own in the
    margin, runs back left in a lane of the *channel* between the bands and enters the next
    band from the left margin: margins and channels hold no nodes. ``bands`` lists each
    band's ``(first, last)`` column.
    """

    def __init__(self, g: nx.DiGraph, theme: str, max_width: float | None = None):
        max_width = COLUMN_WIDTH if max_width is None else max_width
        grid, slots = _layered(g)
        self.labels = {n: _label(d, theme) for n, d in g.nodes(data=True)}
        self.box = {n: _box_size(self.labels[n], **_label_font(d),
                                 pad_x=PAD_X_ROUND4 if d["kind"] == "intermediate" else PAD_X)
                    for n, d in g.nodes(data=True)}
        above, below, half_w = {}, {}, {}
        for n, d in g.nodes(data=True):
            w, h = self.box[n]
            shape_w = w / 2 + SHAPE_OUT
            if d["kind"] == "function":   # the step number sits above the box
                half_w[n] = max(shape_w, w / 2 + _text_width("#88", FONT) - SHAPE_OUT)
                above[n], below[n] = h / 2 + SHAPE_OUT + MARK_H, h / 2 + SHAPE_OUT
            else:                          # the gradient sits under the box
                grad_w = _text_width(_grad_template(d.get("shape") or ()), FONT) / 2
                half_w[n] = max(shape_w, grad_w)
                above[n], below[n] = h / 2 + SHAPE_OUT + 0.1, h / 2 + SHAPE_OUT + MARK_H + 0.04
        ncols = max((c for c, _ in grid.values()), default=0) + 1
        col_w = [2 * COL_PAD + max([2 * half_w[n] for n in g if grid[n][0] == c] + [0.3])
                 for c in range(ncols)]
        self.row_h = max([above[n] + below[n] for n in g] + [0.6]) + ROW_GAP
        self.half_row = max([above[n] for n in g] + [0.3]), max([below[n] for n in g] + [0.3])

        # the edges that cross from column <= j to column > j, for each break j
        crossing: list[list] = [[] for _ in range(ncols)]
        for u, v in g.edges:
            for j in range(grid[u][0], grid[v][0]):
                crossing[j].append((u, v))
        # rows: each band spans the rows its nodes and slots use
        row_at: dict = {}   # (column, item) -> row; items are nodes and edges (their slots)
        for n, (c, r) in grid.items():
            row_at[(c, n)] = r
        for (u, v), rs in slots.items():
            for c, r in zip(range(grid[u][0] + 1, grid[v][0]), rs, strict=True):
                row_at[(c, (u, v))] = r
        col_rows = [[math.inf, -math.inf] for _ in range(ncols)]
        for (c, _), r in row_at.items():
            col_rows[c] = [min(col_rows[c][0], r), max(col_rows[c][1], r)]
        self.bands = _bands(col_w, [len(c) for c in crossing], col_rows, self.row_h,
                            max_width)
        band_of = {c: k for k, (a, b) in enumerate(self.bands) for c in range(a, b + 1)}
        span = [[math.inf, -math.inf] for _ in self.bands]
        for (c, _), r in row_at.items():
            s = span[band_of[c]]
            s[0], s[1] = min(s[0], r), max(s[1], r)
        # from the top: margin, then each band and the channel below it
        band_top, channel_y, y = [], [], -MARGIN   # y downwards from the top, for now
        for k, (_, b) in enumerate(self.bands):
            band_top.append(y)
            y -= self.half_row[0] + (span[k][1] - span[k][0]) * self.row_h + self.half_row[1]
            if k < len(self.bands) - 1:
                lanes = len(crossing[b])
                channel_y.append([y - LANE * (i + 1) for i in range(lanes)])
                y -= LANE * (lanes + 1)
        self.height = -y + MARGIN

        def y_of(c, r):
            k = band_of[c]
            return self.height + band_top[k] - self.half_row[0] - (r - span[k][0]) * self.row_h

        col_x, widths = [0.0] * ncols, []
        for a, b in self.bands:
            x = MARGIN + (LANE * len(crossing[a - 1]) if a > 0 else 0.0)
            for c in range(a, b + 1):
                col_x[c] = x + col_w[c] / 2
                x += col_w[c] + GAP_X
            widths.append(x - GAP_X + (LANE * len(crossing[b]) if b < ncols - 1 else 0.0)
                          + MARGIN)
        self.width = max(widths, default=2 * MARGIN)
        band = [(x - w / 2, x + w / 2) for x, w in zip(col_x, col_w, strict=True)]

        self.xy = {n: (col_x[c], y_of(c, r)) for n, (c, r) in grid.items()}
        self.bounds = {n: (x - half_w[n], y - below[n], x + half_w[n], y + above[n])
                       for n, (x, y) in self.xy.items()}

        # ports: the edges leaving (entering) a node are spread over its right (left) side,
        # ordered by the row of their other end, so arrowheads do not pile up
        def spread(items, node):
            h = self.box[node][1]
            s = min(0.13, max(0.0, h / 2 - 0.07))
            k = len(items)
            return {e: (s - 2 * s * i / (k - 1) if k > 1 else 0.0) for i, e in enumerate(items)}

        out_port, in_port = {}, {}
        for n in g:
            outs = sorted(g.out_edges(n), key=lambda e: (slots[e] or [grid[e[1]][1]])[0])
            out_port.update(spread(outs, n))
            ins = sorted(g.in_edges(n), key=lambda e: (slots[e] or [grid[e[0]][1]])[-1])
            in_port.update(spread(ins, n))

        def y_in(e, c):
            """The height of edge ``e`` in column ``c``: its slot, or its end's port."""
            u, v = e
            if c == grid[u][0]:
                return self.xy[u][1] + out_port[e]
            if c == grid[v][0]:
                return self.xy[v][1] + in_port[e]
            return y_of(c, row_at[(c, e)])

        # lanes at each band break: the edge highest in its band takes the outermost lane
        # on the right, the lowest lane of the channel and the innermost on the left, so
        # edges that keep their order do not cross
        lane: dict = {}
        for _, b in self.bands[:-1]:
            order = sorted(crossing[b], key=lambda e, b=b: -y_in(e, b))
            lanes = len(order)
            for i, e in enumerate(order):
                lane[(b, e)] = (band[b][1] + LANE * (lanes - i),
                                self.height + channel_y[band_of[b]][lanes - 1 - i],
                                band[b + 1][0] - LANE * (i + 1), (i, lanes))
        self.edges, self.gap = {}, {}
        for u, v in g.edges:
            e = (u, v)
            cu, cv = grid[u][0], grid[v][0]
            y = y_in(e, cu)
            pts = [(self.xy[u][0] + self.box[u][0] / 2 + SHAPE_OUT, y), (band[cu][1], y)]
            for c in range(cu + 1, cv + 1):
                y_next = y_in(e, c)
                if (c - 1, e) in lane:  # to the next band: right margin, channel, left margin
                    xr, yl, xl, (i, lanes) = lane[(c - 1, e)]
                    pts += [(xr, y), (xr, yl), (xl, yl), (xl, y_next)]
                    # edge labels of one channel side by side, each on its own stretch
                    gap = ((xl + (xr - xl) * i / lanes, yl), (xl + (xr - xl) * (i + 1) / lanes, yl))
                else:
                    gap = (pts[-1], (band[c][0], y_next))
                if c < cv:
                    pts += [(band[c][0], y_next), (band[c][1], y_next)]
                y = y_next
            pts += [(band[cv][0], y), (self.xy[v][0] - self.box[v][0] / 2 - SHAPE_OUT - 0.02, y)]
            clean = [pts[0]]
            for p in pts[1:]:
                if abs(p[0] - clean[-1][0]) > 1e-9 or abs(p[1] - clean[-1][1]) > 1e-9:
                    clean.append(p)
            self.edges[e] = clean
            self.gap[e] = gap  # the last stretch between columns: edge labels go here


def _bands(col_w: list[float], crossing: list[int], rows: list[tuple[float, float]],
           row_h: float, max_width: float) -> list[tuple[int, int]]:
    """Cut columns into bands ``(first, last)`` at most ``max_width`` wide (a column wider
    than that is a band of its own): the fewest bands (the fewest edges running back),
    then the least total height (rows spanned and channels), then the narrowest widest.
    ``crossing[j]`` is the number of edges from column ``j`` or before to a later column
    (each takes a lane in both margins and the channel when the graph is cut after column
    ``j``); ``rows[c]`` the lowest and highest row that column ``c``'s nodes and slots use."""
    n = len(col_w)
    prefix = [0.0]
    for w in col_w:
        prefix.append(prefix[-1] + w)

    def width(a: int, b: int) -> float:
        return (2 * MARGIN + prefix[b + 1] - prefix[a] + GAP_X * (b - a)
                + (LANE * crossing[a - 1] if a > 0 else 0.0)
                + (LANE * crossing[b] if b < n - 1 else 0.0))

    if n == 0 or width(0, n - 1) <= max_width:
        return [(0, max(n - 1, 0))]
    best: list = [(0, 0.0, 0.0)] + [None] * n  # best[j]: (bands, height, widest), columns < j
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        lo, hi = math.inf, -math.inf
        for i in range(j - 1, -1, -1):   # the band i..j-1, growing to the left
            lo, hi = min(lo, rows[i][0]), max(hi, rows[i][1])
            w = width(i, j - 1)
            if w > max_width and j - 1 > i:
                break
            if best[i] is None:
                continue
            h = (hi - lo) * row_h + (LANE * (crossing[j - 1] + 1) if j < n else 0.0)
            cand = (best[i][0] + 1, round(best[i][1] + h, 6), max(best[i][2], w))
            if best[j] is None or cand < best[j]:
                best[j], cut[j] = cand, i
    bands, j = [], n
    while j > 0:
        bands.append((cut[j], j - 1))
        j = cut[j]
    return bands[::-1]


def graph_geometry(g: nx.DiGraph, theme: str = "technical") -> Geometry:
    """The :class:`Geometry` of a graph's drawing (what the no-edge-through-a-node test checks)."""
    themes.check_theme(theme)
    return _geometry(g, theme)


_GEOMETRIES: dict[tuple, Geometry] = {}


def _geometry(g: nx.DiGraph, theme: str) -> Geometry:
    """``Geometry(g, theme)``, cached by what it depends on: structure, labels and fonts."""
    key = (theme, tuple((n, d["kind"], d.get("torch_class"), d.get("name"), d.get("shape"),
                         bool(d.get("is_output"))) for n, d in g.nodes(data=True)),
           tuple(g.edges))
    geo = _GEOMETRIES.get(key)
    if geo is None:
        if len(_GEOMETRIES) >= _LAYOUTS_SIZE:
            _GEOMETRIES.pop(next(iter(_GEOMETRIES)))  # oldest first
        geo = _GEOMETRIES[key] = Geometry(g, theme)
    return geo


class _TextHandler:
    """Legend handler that draws a ``Text`` handle as its text (the gradient and step marks)."""

    def legend_artist(self, legend, orig, fontsize, handlebox):
        from matplotlib.text import Text

        x0, y0 = handlebox.xdescent, handlebox.ydescent
        t = Text(x0 + handlebox.width / 2, y0 + handlebox.height / 2, orig.get_text(),
                 color=orig.get_color(), ha="center", va="center", fontsize=fontsize,
                 transform=handlebox.get_transform())
        handlebox.add_artist(t)
        return t


def _legend_handles(theme: str, present, retained: bool, hooked: bool, grads: bool,
                    running: bool = False, waiting: bool = False, steps: bool = False,
                    untracked: bool = False) -> list:
    """One legend entry for each kind of node and mark that is drawn, and nothing else."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.text import Text

    red = themes.MARK_STYLE["gradient"]["color"]
    handles = [Patch(label=themes.term(theme, k), **_patch_kw(themes.node_style(k, theme)))
               for k in themes.KINDS if k in present]
    if retained:
        handles.append(Patch(facecolor="white", edgecolor=themes.MARK_STYLE["retained"]["color"],
                             linewidth=3, label=themes.term(theme, "retained")))
    if hooked:
        handles.append(Line2D([], [], linestyle="", marker="v", markersize=9,
                              color=themes.MARK_STYLE["hooked"]["color"],
                              label=themes.term(theme, "hooked")))
    if grads:
        handles.append(Text(text="0.5", color=red, label=themes.term(theme, "gradient")))
    if steps:
        handles.append(Text(text="#1", color=red, label=themes.term(theme, "step")))
    if running:
        handles.append(Patch(facecolor="white", edgecolor=red, linewidth=3,
                             label=themes.term(theme, "running")))
    if waiting:
        handles.append(Patch(label=themes.term(theme, "waiting"), alpha=0.35,
                             **_patch_kw(themes.node_style("function", theme))))
    if untracked:
        handles.append(Line2D([], [], linestyle="--", color=themes.edge_color(theme),
                              label=themes.term(theme, "untracked")))
    return handles


def _legend_kw(ncol: int) -> dict:
    from matplotlib.text import Text

    return {"loc": "lower left", "ncol": ncol, "fontsize": FONT, "frameon": False,
            "handler_map": {Text: _TextHandler()}, "handlelength": 1.6, "columnspacing": 1.4}


def _legend_layout(legend: tuple, max_w: float) -> tuple[int, float, float]:
    """``(columns, width, height)`` of the legend, in inches (an estimate that errs wide)."""
    labels = _legend_labels(legend)
    if not labels:
        return 0, 0.0, 0.0
    widths = [_text_width(s, FONT) + 0.45 for s in labels]  # handle, its pad, column space
    ncol = min(4, len(labels))
    while True:
        nrows = -(-len(labels) // ncol)
        cols = [widths[i * nrows:(i + 1) * nrows] for i in range(ncol)]
        w = sum(max(c) for c in cols if c) + 0.3
        if w <= max_w or ncol == 1:
            return ncol, w, 0.15 + nrows * 0.25
        ncol -= 1


def _legend_labels(legend: tuple) -> list[str]:
    theme, present, *marks = legend
    keys = list(present) + [k for k, on in zip(
        ("retained", "hooked", "gradient", "running", "waiting", "step", "untracked"),
        marks, strict=False) if on]
    return [themes.term(theme, k) for k in keys]


def _box(w, h, boxstyle, alpha, kw, x, y):
    """A node's box, its text area ``w`` x ``h`` centred on ``(x, y)`` (in inches)."""
    from matplotlib.patches import FancyBboxPatch

    return FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle=boxstyle, alpha=alpha, zorder=2,
                          **dict(kw))


def _arrow(rel, linestyle, color, alpha, x, y):
    """An edge's arrow along the polyline ``rel`` (inches, relative to ``(x, y)``)."""
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.path import Path

    path = Path([(x + dx, y + dy) for dx, dy in rel])
    return FancyArrowPatch(path=path, arrowstyle="-|>", mutation_scale=12, color=color,
                           linewidth=1.1, zorder=1, linestyle=linestyle, alpha=alpha,
                           joinstyle="round", capstyle="butt")


def _hook(x, y):
    """The probe marker of a hooked node, just outside its box's top right corner ``(x, y)``."""
    from matplotlib.lines import Line2D

    return Line2D([x], [y], marker="v", markersize=10, zorder=4, linestyle="",
                  color=themes.MARK_STYLE["hooked"]["color"], markeredgecolor="white",
                  markeredgewidth=0.8)


def _marks(g: nx.DiGraph, show_grads: bool) -> dict:
    """What a drawing of ``g`` shows besides its nodes: the legend's entries."""
    nodes = g.nodes(data=True)
    return {
        "present": tuple(k for k in themes.KINDS if any(d["kind"] == k for _, d in nodes)),
        "retained": any(d.get("retains_grad") for _, d in nodes),
        "hooked": any(d.get("has_hooks") for _, d in nodes),
        "grads": show_grads and (any(d.get("grad") is not None for _, d in nodes) or any(
            d.get("grad") is not None for _, _, d in g.edges(data=True))),
        "running": any(d.get("highlight") for _, d in nodes),
        "waiting": any(d.get("faded") for _, d in nodes),
        "steps": any(d.get("step") is not None for _, d in nodes),
        "untracked": any(d.get("recovered") for _, _, d in g.edges(data=True)),
    }


def _frame(geo: Geometry, legend: tuple, title: str | None, size=None):
    """Figure size and where the graph area and the legend go: ``(fig_w, fig_h, ox, oy,
    legend_cols, legend_h)``; ``size`` is a minimum ``(w, h)`` in inches."""
    ncol, legend_w, legend_h = _legend_layout(legend, min(max(geo.width, 7.0), COLUMN_WIDTH))
    title_h = 0.42 if title else 0.0
    if title:
        legend_w = max(legend_w, _text_width(title, TITLE_FONT) + 0.4)
    fig_w = max(geo.width, legend_w)
    fig_h = geo.height + legend_h + title_h
    if size is not None:
        fig_w, fig_h = max(fig_w, size[0]), max(fig_h, size[1])
    ox = 0.0                                # everything starts at the left: a graph wider than
    oy = fig_h - title_h - geo.height       # the notebook shows its start, title and legend
    return fig_w, fig_h, ox, oy, ncol, legend_h


def figure_size(g: nx.DiGraph, theme: str = "technical", title: str | None = None,
                show_grads: bool = True, legend_extra=()) -> tuple[float, float]:
    """The size in inches ``(w, h)`` a drawing of ``g`` needs (no drawing is made).

    An explorer takes the largest over the states it can show and passes it as
    ``render_png(..., size=...)``, so its picture keeps one size while the learner clicks.
    ``legend_extra`` names marks (``"gradient"``, ``"retained"`` ...) to keep legend room for.
    """
    themes.check_theme(theme)
    geo = _geometry(g, theme)
    legend = _legend_key(g, theme, show_grads, legend_extra)
    return _frame(geo, legend, title)[:2]


def _legend_key(g: nx.DiGraph, theme: str, show_grads: bool, extra=()) -> tuple:
    m = _marks(g, show_grads)
    names = {"retained": "retained", "hooked": "hooked", "gradient": "grads", "step": "steps",
             "running": "running", "waiting": "waiting", "untracked": "untracked"}
    m.update((names[k], True) for k in extra)
    return (theme, m["present"], m["retained"], m["hooked"], m["grads"], m["running"],
            m["waiting"], m["steps"], m["untracked"])


def _draw(g: nx.DiGraph, fig, ax, theme: str, title: str | None, show_grads: bool,
          stamps: bool = False, size=None) -> None:
    """Draw ``g`` on ``fig``: into ``ax`` if given, else on a new axes sized to the graph.

    With ``stamps`` (the ``render_png`` path) ``ax`` is a reused axes that is
    positioned like a new one, and every text is a cached bitmap (``Stamps``)
    instead of a ``Text``/``Legend`` artist.
    """
    geo = _geometry(g, theme)
    legend = _legend_key(g, theme, show_grads)
    red = themes.MARK_STYLE["gradient"]["color"]
    if ax is None or stamps:
        fig_w, fig_h, ox, oy, legend_cols, _ = _frame(geo, legend, title, size)
        fig.set_size_inches(fig_w, fig_h)
        if ax is None:
            ax = fig.add_axes((0, 0, 1, 1))
        else:
            ax.set_position((0, 0, 1, 1))
        ax.set_xlim(-ox, fig_w - ox)
        ax.set_ylim(-oy, fig_h - oy)
    else:
        legend_cols = _legend_layout(legend, min(max(geo.width, 7.0), COLUMN_WIDTH))[0]
        ax.set_xlim(0, geo.width)
        ax.set_ylim(0, geo.height)
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
        w, h = geo.box[n]
        x, y = geo.xy[n]
        kw = _patch_kw(style)
        if d.get("retains_grad"):
            kw.update(edgecolor=themes.MARK_STYLE["retained"]["color"], linewidth=3.2)
        if d.get("highlight"):
            kw.update(edgecolor=red, linewidth=3.2)
        alpha = 0.35 if d.get("faded") else 1.0
        box = (w, h, style["boxstyle"], alpha,
               tuple(sorted(kw.items())))
        shape(x, y, 2, ("box", *box), functools.partial(_box, *box))
        font = _label_font(d)
        text(x, y, geo.labels[n], 3, ha="center", va="center", fontsize=FONT,
             style=font["style"], alpha=alpha, fontweight=font["weight"], linespacing=1.1)
        top = y + h / 2 + SHAPE_OUT - BOX_PAD
        if d.get("has_hooks"):  # on the box's top right corner, pointing at the box
            shape(x + w / 2 - 0.06, top + 0.04, 4, ("hook",), _hook)
        if show_grads and d.get("grad") is not None:
            text(x, y - h / 2 - SHAPE_OUT - 0.03, f"grad {_short_grad(d['grad'])}", 3,
                 ha="center", va="top", fontsize=FONT, color=red)
        if d.get("step") is not None:
            text(x - w / 2, top + 0.02, f"#{d['step']}", 4, ha="left", va="bottom",
                 fontsize=FONT, color=red, fontweight="bold")

    color = themes.edge_color(theme)
    px = fig.dpi
    for u, v, d in g.edges(data=True):
        pts = geo.edges[(u, v)]
        x0, y0 = pts[0]
        rel = tuple((p[0] - x0, p[1] - y0) for p in pts)
        if stamps:  # whole pixels, so that arrows of the same shape share one picture
            rel = tuple((round(a * px) / px, round(b * px) / px) for a, b in rel)
        arrow = (rel, "--" if d.get("recovered") else "-", color,
                 0.35 if g.nodes[v].get("faded") and d.get("grad") is None else 1.0)
        shape(x0, y0, 1, ("arrow", *arrow), functools.partial(_arrow, *arrow))
        if show_grads and d.get("grad") is not None:
            (ax_, ay_), (bx_, by_) = geo.gap[(u, v)]
            text((ax_ + bx_) / 2, (ay_ + by_) / 2, _short_grad(d["grad"]), 4, ha="center",
                 va="center", fontsize=EDGE_FONT, color=red, bbox=_EDGE_LABEL_BOX)

    title_y = 1 - 0.1 / fig.get_figheight()
    left = MARGIN / fig.get_figwidth()
    n_handles = len(_legend_labels(legend))
    if stamps:
        top = fig.add_artist(_new_stamps(fig.transFigure, 5))
        if n_handles:
            top.add(left, 0.0, _legend_stamp(legend, legend_cols, fig.dpi))
        if title:
            top.add(left, title_y, _text_stamp(title, fig.dpi, ha="left", va="top",
                                               fontsize=TITLE_FONT))
        return
    if n_handles:
        fig.legend(handles=_legend_handles(*legend), bbox_to_anchor=(left, 0.0),
                   **_legend_kw(legend_cols))
    if title:
        fig.suptitle(title, fontsize=TITLE_FONT, x=left, y=title_y, ha="left")


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
    the figure is a pyplot figure, so a notebook shows it (end the line with ``;``),
    at the size of the explorers' pictures and rendered at twice that resolution
    (crisp on 2x displays); a script should ``plt.close(fig)``. With ``ax`` it draws
    there. Never calls ``plt.show()``.
    """
    themes.check_theme(theme)
    g = _as_graph(outputs_or_graph, namespace)
    if ax is None:
        import matplotlib.pyplot as plt

        cls = _graph_figure_class()
        register_png_printer(cls)
        fig = plt.figure(FigureClass=cls, dpi=DISPLAY_DPI)
    else:
        fig = ax.figure
    _draw(g, fig, ax, theme, title, show_grads)
    return fig


@functools.cache
def _graph_figure_class():
    """A ``Figure`` that Jupyter shows as a 2x PNG at 1x width (like the widgets' pictures).

    IPython's inline backend formats every ``Figure`` itself (at the figure's dpi), so
    ``draw_graph`` registers the class's own PNG printer (:func:`register_png_printer`).
    """
    from matplotlib.figure import Figure

    class GraphFigure(Figure):
        def _repr_png_(self):
            return _figure_png(self)

    return GraphFigure


def register_png_printer(cls) -> None:
    """Make IPython show figures of ``cls`` as :func:`_figure_png` does (2x PNG at 1x width),
    also when the inline backend has registered its own printer for every ``Figure``."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:  # pragma: no cover - IPython is a course dependency
        return
    if shell is None:
        return
    formatter = shell.display_formatter.formatters["image/png"]
    if cls not in formatter.type_printers:
        formatter.for_type(cls, _figure_png_b64)


def _figure_png_b64(fig):
    import base64

    png, meta = _figure_png(fig)
    return base64.b64encode(png).decode("ascii"), meta


def _figure_png(fig):
    """``(png, {"width": w, "height": h})``: the figure at RENDER_DPI, shown at DISPLAY_DPI."""
    import io

    buf = io.BytesIO()
    with _rc(FAST_TEXT):
        fig.savefig(buf, format="png", dpi=RENDER_DPI, facecolor="white")
    png = buf.getvalue()
    w, h = struct.unpack(">II", png[16:24])
    return png, {"width": display_width(png), "height": round(h * DISPLAY_DPI / RENDER_DPI),
                 "unconfined": True}


def _rc(params):
    import matplotlib as mpl

    return mpl.rc_context(params)


def display_width(png: bytes) -> int:
    """The width in CSS pixels to show a PNG of this module at: its pixel width scaled from
    its dpi (the pHYs chunk) to DISPLAY_DPI, so a RENDER_DPI picture shows at half width."""
    w = struct.unpack(">I", png[16:20])[0]
    dpi = RENDER_DPI
    i = png.find(b"pHYs")
    if i > 0:
        per_metre = struct.unpack(">I", png[i + 4:i + 8])[0]
        dpi = round(per_metre * 0.0254) or RENDER_DPI
    return max(1, round(w * DISPLAY_DPI / dpi))


_PNG_CACHE: dict[tuple, bytes] = {}
_PNG_CACHE_SIZE = 64


def picture_key(graph: nx.DiGraph, theme: str, title: str | None, show_grads: bool,
                dpi: int, size=None) -> tuple:
    """Everything the drawing shows, as a hashable key: equal keys draw equal pictures."""
    nodes = tuple(
        (n, d["kind"], d.get("torch_class"), d.get("shape"), bool(d.get("retains_grad")),
         bool(d.get("has_hooks")), bool(d.get("is_output")), bool(d.get("highlight")),
         bool(d.get("faded")), d.get("step"),
         _short_grad(d.get("grad")) if show_grads and d.get("grad") is not None else None)
        for n, d in graph.nodes(data=True))
    edges = tuple(
        (u, v, bool(d.get("recovered")),
         _short_grad(d.get("grad")) if show_grads and d.get("grad") is not None else None)
        for u, v, d in graph.edges(data=True))
    return nodes, edges, theme, title, show_grads, dpi, size


PIXEL_BUDGET = 2_500_000  # pixels: the most a PNG of render_png gets (time to encode it)


def auto_dpi(size: tuple[float, float]) -> int:
    """The dpi ``render_png`` uses for a figure of ``size`` inches: RENDER_DPI (2x) while the
    picture stays within PIXEL_BUDGET, less for very large graphs (never under DISPLAY_DPI):
    it is still shown at DISPLAY_DPI, so its text keeps its size, only sharpness is lost."""
    area = max(size[0] * size[1], 1e-6)
    return max(DISPLAY_DPI, min(RENDER_DPI, int(math.sqrt(PIXEL_BUDGET / area))))


def render_png(graph: nx.DiGraph, theme: str = "technical", title: str | None = None,
               show_grads: bool = True, dpi: int | None = None, size=None) -> bytes:
    """The drawing as PNG bytes, from a figure outside pyplot (nothing to close, nothing leaks).

    This is what the widgets put in their output area, at ``display_width(png)`` CSS
    pixels (``dpi`` defaults to :func:`auto_dpi`: RENDER_DPI, twice the display density,
    unless the picture would exceed PIXEL_BUDGET pixels). ``size``, a
    minimum ``(w, h)`` in inches (see :func:`figure_size`), keeps an explorer's picture
    one size while its graph changes. Pictures are cached by what they show
    (:func:`picture_key`), so going back to a state a learner has seen (toggling a
    control off again, stepping back) costs about a millisecond. A new state reuses one
    figure and canvas and the cached pictures of its texts, boxes and arrows (see the
    module docstring).
    """
    import numpy as np

    themes.check_theme(theme)
    size = None if size is None else (round(float(size[0]), 3), round(float(size[1]), 3))
    if dpi is None:
        dpi = auto_dpi(size or figure_size(graph, theme, title, show_grads))
    key = picture_key(graph, theme, title, show_grads, dpi, size)
    if key in _PNG_CACHE:
        return _PNG_CACHE[key]
    with _LOCK, _rc(FAST_TEXT):
        fig, canvas, ax = _canvas(dpi)
        try:
            _draw(graph, fig, ax, theme, title, show_grads, stamps=True, size=size)
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


def _rasterise(dpi: float, add: Callable, size_hint=(3.0, 1.0)) -> tuple:
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
    # start small (clearing a canvas sized for the legend costs more than drawing a label)
    fig.set_size_inches(*size_hint)
    for _ in range(4):
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
    lines = s.split("\n")
    hint = (math.ceil(max(map(len, lines)) * kw.get("fontsize", FONT) / 72 * 1.4 + 0.6),
            math.ceil(len(lines) * kw.get("fontsize", FONT) / 72 * 1.6 + 0.6))
    return _remember(key, lambda: _rasterise(dpi, lambda fig, x, y: fig.text(
        x, y, s, transform=IdentityTransform(), **kw), hint))


def _shape_stamp(key: tuple, make: Callable, dpi: float) -> tuple:
    """The cached picture of ``make(0, 0)``, an artist drawn in inches about the origin."""
    from matplotlib.transforms import Affine2D

    def add(fig, x, y):
        artist = make(0, 0)
        artist.set_transform(Affine2D().scale(dpi).translate(x, y))  # inches, like the axes
        return fig.add_artist(artist)

    if key[0] == "arrow":  # drawn from the anchor along its polyline, either way
        hint = (2 * max(abs(p[0]) for p in key[1]) + 0.8, 2 * max(abs(p[1]) for p in key[1]) + 0.8)
    elif key[0] == "box":
        hint = (key[1] + 0.8, key[2] + 0.8)
    else:
        hint = (1.0, 1.0)
    return _remember(("shape", key, dpi), lambda: _rasterise(dpi, add, hint))


def _legend_stamp(legend: tuple, ncol: int, dpi: float) -> tuple:
    """The cached picture of the legend, anchored at its bottom centre (like ``fig.legend``)."""
    from matplotlib.transforms import IdentityTransform

    def add(fig, x, y):
        return fig.legend(handles=_legend_handles(*legend), bbox_to_anchor=(x, y),
                          bbox_transform=IdentityTransform(), **_legend_kw(ncol))

    return _remember(("legend", legend, ncol, dpi), lambda: _rasterise(dpi, add, (10.0, 1.5)))


def _encode_png(rgba, dpi: float) -> bytes:
    """Opaque RGBA pixels as an RGB PNG: zlib level 1, no row filters (3x faster than Pillow's
    encoder; the alpha channel, always 255 here, would be a quarter of the bytes to compress)."""
    import numpy as np

    h, w, _ = rgba.shape
    rgb = memoryview(np.ascontiguousarray(rgba[..., :3])).cast("B")
    stride = w * 3
    packer = zlib.compressobj(1)
    parts = []
    for y in range(h):  # a 0 (no filter) byte before each row, fed without one big copy
        parts.append(packer.compress(b"\0"))
        parts.append(packer.compress(rgb[y * stride:(y + 1) * stride]))
    parts.append(packer.flush())
    data = b"".join(parts)

    def chunk(tag: bytes, data) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    per_metre = round(dpi / 0.0254)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1))
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))
