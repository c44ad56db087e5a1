"""Drawing an autograd graph with matplotlib (first used in lesson 01).

``draw_graph(e, namespace=globals(), theme="logistics")`` draws the graph of
``course.graph.build_graph`` left to right: inputs on the left, the output on
the right, one column per layer. Layers and their order come from networkx
(``topological_generations`` counted back from the output, then
``multipartite_layout``); no Graphviz. Each kind of node has its own box,
retained nodes a thick amber outline, hooked nodes a probe marker, and after
``backward()`` the gradients torch keeps are printed in red under their node
(and on the edges, when a ``BackwardStepper`` recorded them). A value one step uses twice
(``w * w``) has "×2" on its edge. The explorers add what their controls changed: a node's
``note`` (under its gradient: "saved at version 0, now 1"; wrapped at ``NOTE_W`` so it
never widens its column) and the graph's ``caption``
(lines under the title: the error ``backward()`` raised, what a hook let through).

Data coordinates are inches, so the figure grows with the graph and the text
always fits its box; a 60-node graph stays readable. No drawing is wider than the
notebook column (``COLUMN_WIDTH``): a graph with more columns than fit is wrapped like a
line of text into bands stacked top to bottom, each read left to right (see ``Geometry``).

``render_png`` (what the widgets show) is tuned for a redraw per click and for the first
picture: it draws on a bare Agg renderer (no ``Figure``), rasterises each text once with
FreeType through matplotlib's own ``FT2Font`` (glyph by glyph from cached glyph pictures,
placed as matplotlib's text layout places them, to a quarter pixel), and each box and hook
marker once with matplotlib, then stamps their cached pixels (a ``Stamps`` artist, on
whole pixels); the edges are one ``LineCollection`` and their arrowheads a path per
colour; the legend is laid out here; layouts and geometries are cached per graph, and
the PNG is written with zlib directly (see docs/benchmarks.md). ``draw_graph`` draws the
same edges and legend with ordinary matplotlib artists (``Text``, patches), so a
figure you save as SVG or PDF has real text and vector shapes.

The words are those of the current language (``course.i18n``; the zh-CN edition's from
``course.themes.GLOSSARY_ZH``). Characters DejaVu Sans lacks (Chinese) are drawn from the CJK
font, WenQuanYi Micro Hei (:func:`cjk_font`), on both paths, as matplotlib's font fallback
does it; without that font a Chinese drawing fails, naming the Debian package to install,
instead of drawing boxes. English text never needs it and is drawn as before.
"""

from __future__ import annotations

import functools
import math
import re
import struct
import threading
import zlib
from collections.abc import Callable, Mapping

import networkx as nx

from course import i18n, themes

__all__ = ["draw_graph", "render_png", "graph_layout", "graph_geometry", "format_grad",
           "picture_key", "figure_size", "display_width", "DISPLAY_DPI", "RENDER_DPI",
           "COLUMN_WIDTH", "clear_caches", "legend_texts"]

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
ROW_GAP = 0.24              # inches between the drawn extents of two nodes in a column
MARGIN = 0.25
LANE = 0.14                 # inches between two edges running side by side where a graph wraps
# The widest a drawing gets: the notebook column. JupyterLab's output area is about 848 CSS
# px wide in a 1280 px window with the file browser open (968 px at 1400 px); 8.75 in at
# DISPLAY_DPI is 840 px. Every drawing, chart and figure course.show() displays keeps to it.
# A wider graph is wrapped into bands (see Geometry); its text keeps its size.
COLUMN_WIDTH = 8.75
MARK_H = 1.3 * FONT / 72    # height of a line of mark text (gradient, step number)
NOTE_FONT = 9.5             # a node's note (what an explorer's control did to it)
NOTE_H = 1.3 * NOTE_FONT / 72
NOTE_W = 2.0                # a note wider than this wraps (so it never widens its column)
CAPTION_H = 1.35 * FONT / 72  # a line of the caption under the title
NOTE_COLOR = "#212529"      # near black on the white page (contrast 15:1)
# Unhinted glyphs without the last-resort font fallback: what the widgets' PNGs and the
# static figures' PNGs are drawn with (they look the same at these sizes, and cost less).
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
    """A gradient as written in a drawing: whole if it is one value, else the first value
    and "..." (the tensor table and the explorers' numbers show them all): the space kept
    under a node for it stays narrow, so more columns fit the notebook's width."""
    return format_grad(g, limit=1)


def _grad_template(shape) -> str:
    """The widest text a gradient of this shape is written as (space is kept for it)."""
    if not shape:
        return "grad -8.88e-88"
    return "grad [-8.88e-88]" if math.prod(shape) == 1 else "grad [-8.88e-88, ...]"


def _label(d: dict, theme: str) -> str:
    if d["kind"] == "function":
        return d["torch_class"]
    shape = f" {list(d['shape'])}" if d["shape"] else ""
    return f"{d['name']}{shape}\n{themes.short_role(theme, d['kind'])}"


@functools.lru_cache(maxsize=4096)
def _text_width(s: str, size: float = FONT, weight: str = "normal", style: str = "normal"):
    """Width of one line of text in inches (DejaVu Sans, the font matplotlib uses, and the CJK
    font for the characters it lacks, see :func:`_face_of`): the sum of the unhinted advances
    and kernings (kerning within one font's run only), which is the width FreeType lays the
    line out to (to a hundredth of a pixel), at a tenth of the cost of laying it out."""
    from matplotlib.ft2font import Kerning

    font, advance = _advances(weight, style, size)
    width, prev, prev_face = 0.0, None, 0
    for ch in s:
        a = advance.get(ch)
        if a is None:
            a = advance[ch] = _advance(font, ch, weight, style, size)
        if prev is not None and a[2] == prev_face:
            face = font if a[2] == 0 else _ft_font(weight, style, size, 720, face=a[2])
            width += face.get_kerning(prev, a[1], Kerning.UNFITTED) / 64
        width += a[0]
        prev, prev_face = a[1], a[2]
    return width / 720


@functools.lru_cache(maxsize=256)
def _note_lines(note: str, width: float = NOTE_W) -> tuple[str, ...]:
    """A node's note cut into lines at most ``width`` inches wide (at spaces; a run without
    spaces, such as Chinese, between two CJK characters, never inside a Latin run), so a long note adds lines under
    its node instead of widening the node's column and wrapping the graph into more bands."""
    lines: list[str] = []
    for para in note.split("\n"):
        line = ""
        for token in re.findall(r"\S+\s*|\s+", para):
            pieces = ([token] if _text_width(token.rstrip(), NOTE_FONT) <= width
                      else re.findall(r"[\x00-\x7f]+|.", token))
            for piece in pieces:
                if line and _text_width((line + piece).rstrip(), NOTE_FONT) > width:
                    lines.append(line.rstrip())
                    line = piece.lstrip()
                else:
                    line += piece
        lines.append(line.rstrip())
    return tuple(lines)


@functools.lru_cache(maxsize=16)
def _advances(weight: str, style: str, size: float) -> tuple:
    """The face (at ``size`` points, 720 dpi) and its cache ``char -> (advance, glyph, face)``."""
    return _ft_font(weight, style, size, 720), {}


def _advance(font, ch: str, weight: str = "normal", style: str = "normal",
             size: float = FONT) -> tuple[float, int, int]:
    from matplotlib.ft2font import LoadFlags

    face = _face_of(weight, style, ch)
    if face:
        font = _ft_font(weight, style, size, 720, face=face)
    glyph = _load(font, ch, LoadFlags.NO_HINTING)
    return glyph.linearHoriAdvance / 65536, font.get_char_index(ord(ch)), face


def _load(font, ch: str, flags):
    """The glyph of ``ch``, or the font's missing-glyph box (index 0) if it has none (as
    matplotlib draws a character no font has, with a warning of its own)."""
    index = font.get_char_index(ord(ch))
    return font.load_char(ord(ch), flags=flags) if index else font.load_glyph(0, flags=flags)


def _label_font(d: dict) -> dict:
    return {"weight": "bold" if d.get("is_output") else "normal",
            "style": "italic" if d["kind"] == "function" else "normal"}


@functools.lru_cache(maxsize=4096)
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


def _layered(g: nx.DiGraph, breaks: tuple = ()) -> tuple[dict, dict]:
    """``(grid, slots)``: ``grid`` as :func:`graph_layout`; ``slots[(u, v)]`` the rows of the
    edge's reserved slots, one per column strictly between ``u``'s and ``v``'s. ``breaks``:
    the columns after which the drawing wraps to a new band (see :func:`_layout`)."""
    if len(g) == 0:
        return {}, {}
    key = (tuple(g), tuple(g.edges), breaks)
    if key not in _LAYOUTS:
        if len(_LAYOUTS) >= _LAYOUTS_SIZE:
            _LAYOUTS.pop(next(iter(_LAYOUTS)))  # oldest first
        _LAYOUTS[key] = _layout(g, breaks)
    grid, slots = _LAYOUTS[key]
    return grid, slots


_COLUMNS: dict[tuple, tuple] = {}


def _columns(g: nx.DiGraph) -> tuple[dict, dict, dict]:
    """``(col, members, nxt)``: each node's column (``topological_generations`` of the
    reversed graph, so every input sits just left of its first use), each column's items
    (nodes, then a slot per edge that passes through it), and what each item feeds in the
    next column. Cached by structure."""
    key = (tuple(g), tuple(g.edges))
    found = _COLUMNS.get(key)
    if found is not None:
        return found
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
    if len(_COLUMNS) >= _LAYOUTS_SIZE:
        _COLUMNS.pop(next(iter(_COLUMNS)))  # oldest first
    _COLUMNS[key] = col, members, nxt
    return col, members, nxt


def _layout(g: nx.DiGraph, breaks: tuple = ()) -> tuple[dict, dict]:
    """Columns from the output back, then rows column by column from the output back, each
    item near the mean row of what it feeds. At a break (the last column of a band, when the
    drawing wraps) the items are stacked one row apart in the order of what they feed in
    the next band, instead of near its rows: each band then is as compact as its own columns
    allow, and the edges that cross to the next band keep their order."""
    col, members, nxt = _columns(g)
    row: dict = {}
    for c in sorted(members, reverse=True):  # from the output back to the inputs
        items = members[c]
        wanted = {}
        for item in items:
            rows = [row[s] for s in nxt.get(item, ()) if s in row]
            wanted[item] = sum(rows) / len(rows) if rows else None
        if c in breaks:  # what it feeds is in the next band: keep its order, stacked tight
            ranked = sorted(items, key=lambda it: (wanted[it] is None, wanted[it] or 0.0))
            wanted = {it: float(i) for i, it in enumerate(ranked)}
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
        col, members, _ = _columns(g) if len(g) else ({}, {}, {})
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
            if d.get("note"):              # and the note under that, wrapped
                lines = _note_lines(d["note"])
                half_w[n] = max(half_w[n], *(_text_width(s, NOTE_FONT) / 2 for s in lines))
                below[n] += NOTE_H * len(lines)
        ncols = max(col.values(), default=0) + 1
        col_w = [2 * COL_PAD + max([2 * half_w[n] for n in g if col[n] == c] + [0.3])
                 for c in range(ncols)]
        self.row_h = max([above[n] + below[n] for n in g] + [0.6]) + ROW_GAP
        self.half_row = max([above[n] for n in g] + [0.3]), max([below[n] for n in g] + [0.3])

        # the edges that cross from column <= j to column > j, for each break j
        crossing: list[list] = [[] for _ in range(ncols)]
        for u, v in g.edges:
            for j in range(col[u], col[v]):
                crossing[j].append((u, v))
        self.bands = _bands(col_w, [len(c) for c in crossing],
                            [len(members.get(c, ())) for c in range(ncols)], self.row_h,
                            max_width)
        band_of = {c: k for k, (a, b) in enumerate(self.bands) for c in range(a, b + 1)}
        # rows, each band on its own (see _layout); a band spans the rows its items use
        grid, slots = _layered(g, tuple(b for _, b in self.bands[:-1]))
        row_at: dict = {(c, n): r for n, (c, r) in grid.items()}  # (column, item) -> row
        for (u, v), rs in slots.items():
            for c, r in zip(range(grid[u][0] + 1, grid[v][0]), rs, strict=True):
                row_at[(c, (u, v))] = r
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

        # the edges are routed when first asked for (figure_size needs only the extents)
        # the structure alone (a cached geometry keeps no tensors alive): the edges, and each
        # node's outgoing and incoming edges in the graph's own order
        shape = (list(g.edges), {n: list(g.out_edges(n)) for n in g},
                 {n: list(g.in_edges(n)) for n in g})
        self._routing = (shape, grid, slots, crossing, band, band_of, channel_y, y_of, row_at)
        self._edges: dict | None = None
        self._gap: dict | None = None

    @property
    def edges(self) -> dict:
        if self._edges is None:
            self._route()
        return self._edges

    @property
    def gap(self) -> dict:
        """``gap[(u, v)]``: the stretch of the edge its gradient label is centred on."""
        if self._gap is None:
            self._route()
        return self._gap

    def _route(self) -> None:
        shape, grid, slots, crossing, band, band_of, channel_y, y_of, row_at = self._routing
        edge_list, out_edges, in_edges = shape
        # ports: the edges leaving (entering) a node are spread over its right (left) side,
        # ordered by the row of their other end, so arrowheads do not pile up
        def spread(items, node):
            h = self.box[node][1]
            s = min(0.13, max(0.0, h / 2 - 0.07))
            k = len(items)
            return {e: (s - 2 * s * i / (k - 1) if k > 1 else 0.0) for i, e in enumerate(items)}

        out_port, in_port = {}, {}
        for n in out_edges:
            outs = sorted(out_edges[n], key=lambda e: (slots[e] or [grid[e[1]][1]])[0])
            out_port.update(spread(outs, n))
            ins = sorted(in_edges[n], key=lambda e: (slots[e] or [grid[e[0]][1]])[-1])
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
        edges, gaps = {}, {}
        for u, v in edge_list:
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
            edges[e] = clean
            gaps[e] = gap  # the last stretch between columns: edge labels go here
        self._edges, self._gap = edges, gaps


def _bands(col_w: list[float], crossing: list[int], items: list[int],
           row_h: float, max_width: float) -> list[tuple[int, int]]:
    """Cut columns into bands ``(first, last)`` at most ``max_width`` wide (a column wider
    than that is a band of its own): the fewest bands (the fewest edges running back),
    then the least total height (each band about as many rows as its fullest column has
    items, and its channel), then the narrowest widest. ``crossing[j]`` is the number of
    edges from column ``j`` or before to a later column (each takes a lane in both margins
    and the channel when the graph is cut after column ``j``); ``items[c]`` the number of
    nodes and slots in column ``c``."""
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
        fullest = 0
        for i in range(j - 1, -1, -1):   # the band i..j-1, growing to the left
            fullest = max(fullest, items[i])
            w = width(i, j - 1)
            if w > max_width and j - 1 > i:
                break
            if best[i] is None:
                continue
            h = (fullest - 1) * row_h + (LANE * (crossing[j - 1] + 1) if j < n else 0.0)
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
    """``Geometry(g, theme)``, cached by what it depends on: structure, labels (their language
    too) and fonts."""
    from course.i18n import language

    key = (theme, language(), tuple((n, d["kind"], d.get("torch_class"), d.get("name"), d.get("shape"),
                         bool(d.get("is_output")), d.get("note")) for n, d in g.nodes(data=True)),
           tuple(g.edges))
    geo = _GEOMETRIES.get(key)
    if geo is None:
        if len(_GEOMETRIES) >= _LAYOUTS_SIZE:
            _GEOMETRIES.pop(next(iter(_GEOMETRIES)))  # oldest first
        geo = _GEOMETRIES[key] = Geometry(g, theme)
    return geo


# The legend is laid out here (not by matplotlib's Legend): entries fill columns top to
# bottom, each a handle and its label; the same places serve draw_graph (ordinary artists)
# and render_png (stamps), and its size is known exactly before anything is drawn.
LEGEND_ROW = 0.25      # inches per row
LEGEND_PAD = 0.075     # inches above and below the rows
HANDLE_W, HANDLE_H = 0.22, 0.1   # a handle's box (1.6 x 0.7 of the font size, as matplotlib)
HANDLE_GAP = 0.11      # between a handle and its label
LEGEND_COL_GAP = 0.2   # between two columns


def _legend_entries(theme: str, present, retained: bool, hooked: bool, grads: bool,
                    running: bool = False, waiting: bool = False, steps: bool = False,
                    untracked: bool = False) -> list[tuple[tuple, str]]:
    """One legend entry ``(handle, label)`` for each kind of node and mark that is drawn, and
    nothing else. A handle is ``("patch", style items)``, ``("marker",)``, ``("text", s)``
    or ``("line", linestyle, colour)``."""
    red = themes.MARK_STYLE["gradient"]["color"]

    def patch(**kw):
        return ("patch", tuple(sorted(kw.items())))

    entries = [(patch(**_patch_kw(themes.node_style(k, theme))), themes.term(theme, k))
               for k in themes.KINDS if k in present]
    if retained:
        entries.append((patch(facecolor="white", edgecolor=themes.MARK_STYLE["retained"]["color"],
                              linewidth=3), themes.term(theme, "retained")))
    if hooked:
        entries.append((("marker",), themes.term(theme, "hooked")))
    if grads:
        # "grad" as every node writes its gradient ("grad [1, ...]"): a sample value would be
        # a number the learner looks for in the picture and never finds
        entries.append((("text", "grad"), themes.term(theme, "gradient")))
    if steps:
        entries.append((("text", "#1"), themes.term(theme, "step")))
    if running:
        entries.append((patch(facecolor="white", edgecolor=red, linewidth=3),
                        themes.term(theme, "running")))
    if waiting:
        entries.append((patch(alpha=0.35, **_patch_kw(themes.node_style("function", theme))),
                        themes.term(theme, "waiting")))
    if untracked:
        entries.append((("line", "--", themes.edge_color(theme)),
                        themes.term(theme, "untracked")))
    return entries


def _legend_columns(labels: list[str], ncol: int) -> list[list[int]]:
    nrows = -(-len(labels) // ncol)
    return [list(range(i * nrows, min(len(labels), (i + 1) * nrows))) for i in range(ncol)]


def _legend_layout(legend: tuple, max_w: float) -> tuple[int, float, float]:
    """``(columns, width, height)`` of the legend in inches: as many columns (at most 4) as
    fit in ``max_w``."""
    labels = _legend_labels(legend)
    if not labels:
        return 0, 0.0, 0.0
    for ncol in range(min(4, len(labels)), 0, -1):
        cols = [c for c in _legend_columns(labels, ncol) if c]
        w = sum(HANDLE_W + HANDLE_GAP + max(_text_width(labels[i]) for i in c) for c in cols)
        w += LEGEND_COL_GAP * (len(cols) - 1)
        if w <= max_w - MARGIN or ncol == 1:
            return ncol, w, 2 * LEGEND_PAD + len(cols[0]) * LEGEND_ROW


def _legend_places(legend: tuple, ncol: int) -> list[tuple[tuple, str, float, float, float]]:
    """``(handle, label, handle_x, y, label_x)`` per entry, in inches from the legend's bottom
    left corner: the handle's centre and the label's left end, both at height ``y``."""
    entries = _legend_entries(*legend)
    labels = [label for _, label in entries]
    cols = [c for c in _legend_columns(labels, ncol) if c]
    nrows = len(cols[0]) if cols else 0
    places, x = [], 0.0
    for c in cols:
        for r, i in enumerate(c):
            y = LEGEND_PAD + (nrows - r - 0.5) * LEGEND_ROW
            places.append((entries[i][0], labels[i], x + HANDLE_W / 2, y,
                           x + HANDLE_W + HANDLE_GAP))
        x += HANDLE_W + HANDLE_GAP + max(_text_width(labels[i]) for i in c) + LEGEND_COL_GAP
    return places


def _legend_handle(handle: tuple, x: float, y: float):
    """The artist of a legend handle (not a text one) centred on ``(x, y)``, in inches."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    if handle[0] == "patch":
        return Rectangle((x - HANDLE_W / 2, y - HANDLE_H / 2), HANDLE_W, HANDLE_H,
                         **dict(handle[1]))
    if handle[0] == "marker":
        return Line2D([x], [y], linestyle="", marker="v", markersize=9,
                      color=themes.MARK_STYLE["hooked"]["color"])
    return Line2D([x - HANDLE_W / 2, x + HANDLE_W / 2], [y, y], linestyle=handle[1],
                  color=handle[2], linewidth=1.1)


def legend_texts(fig) -> list[str]:
    """The labels of the legend ``draw_graph`` drew on ``fig``, in order."""
    return [t.get_text() for t in fig.texts if t.get_gid() == "graph-legend"]


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


HEAD_L, HEAD_W = 4.8 / 72, 2.4 / 72   # an arrowhead's length and half width (inches)
EDGE_LW = 1.1                          # points


def _edge_artists(edges: list[tuple]) -> tuple:
    """The edges ``(polyline, linestyle, colour, alpha)`` as a few artists: one
    ``LineCollection`` of their lines (each ending at its head's base) and a ``PathPatch``
    of their arrowheads (filled triangles at the polylines' ends) per colour: a few draw
    calls, however many edges there are."""
    import numpy as np
    from matplotlib.collections import LineCollection
    from matplotlib.colors import to_rgba
    from matplotlib.patches import PathPatch
    from matplotlib.path import Path

    lines, heads, colours, styles = [], [], [], []
    for pts, linestyle, colour, alpha in edges:
        (ax_, ay_), (bx_, by_) = pts[-2], pts[-1]
        seg = math.hypot(bx_ - ax_, by_ - ay_)
        ux, uy = (bx_ - ax_) / seg, (by_ - ay_) / seg
        heads.append([(bx_, by_), (bx_ - HEAD_L * ux - HEAD_W * uy, by_ - HEAD_L * uy + HEAD_W * ux),
                      (bx_ - HEAD_L * ux + HEAD_W * uy, by_ - HEAD_L * uy - HEAD_W * ux)])
        line, back = list(pts), HEAD_L  # the line stops at the head's base
        while len(line) > 2:
            (px_, py_), (qx_, qy_) = line[-2], line[-1]
            length = math.hypot(qx_ - px_, qy_ - py_)
            if length > back:
                break
            back -= length
            line.pop()
        (px_, py_), (qx_, qy_) = line[-2], line[-1]
        length = math.hypot(qx_ - px_, qy_ - py_)
        keep = max(length - back, 0.0) / length if length else 0.0
        line[-1] = (px_ + (qx_ - px_) * keep, py_ + (qy_ - py_) * keep)
        lines.append(line)
        colours.append(to_rgba(colour, alpha))
        styles.append(linestyle)
    by_colour: dict = {}  # the heads of one colour: one compound path, one draw call
    for head, colour in zip(heads, colours, strict=True):
        by_colour.setdefault(colour, []).append(head)
    artists = [LineCollection(lines, colors=colours, linestyles=styles, linewidths=EDGE_LW,
                              joinstyle="round", capstyle="butt", zorder=1, antialiaseds=True)]
    for colour, group in by_colour.items():
        artists.append(PathPatch(Path.make_compound_path_from_polys(np.array(group)),
                                 facecolor=colour, edgecolor=colour, linewidth=EDGE_LW,
                                 joinstyle="miter", zorder=1))
    return tuple(artists)


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


def _caption(g: nx.DiGraph) -> tuple:
    """The graph's caption: lines ``(text, tone)`` under the title, ``tone`` ``"error"`` (red)
    or ``"note"`` (near black). An explorer says there what its controls did that no node
    shows (the error backward() raised, what a hook turned a gradient into)."""
    return tuple((str(text), tone) for text, tone in g.graph.get("caption", ()))


def _frame(geo: Geometry, legend: tuple, title: str | None, size=None, caption=()):
    """Figure size and where the graph area and the legend go: ``(fig_w, fig_h, ox, oy,
    legend_cols, legend_h)``; ``size`` is a minimum ``(w, h)`` in inches."""
    ncol, legend_w, legend_h = _legend_layout(legend, min(max(geo.width, 7.0), COLUMN_WIDTH))
    title_h = (0.42 if title else 0.1 if caption else 0.0) + CAPTION_H * len(caption)
    if title:
        legend_w = max(legend_w, _text_width(title, TITLE_FONT) + 0.4)
    for text, _tone in caption:
        legend_w = max(legend_w, _text_width(text, FONT) + 0.4)
    fig_w = max(geo.width, legend_w)
    fig_h = geo.height + legend_h + title_h
    if size is not None:
        fig_w, fig_h = max(fig_w, size[0]), max(fig_h, size[1])
    ox = 0.0                                # everything starts at the left, under the title;
    oy = fig_h - title_h - geo.height       # the legend goes right under the graph
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
    return _frame(geo, legend, title, caption=_caption(g))[:2]


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

    With ``stamps`` (the ``render_png`` path) ``fig`` is a :class:`_Page` and ``ax`` is
    ignored: the page is sized to the drawing (data coordinates are inches from the graph
    area's origin, through a plain transform), and every text, box and marker is a cached
    bitmap (``Stamps``) instead of a ``Text``/patch artist.
    """
    from matplotlib.transforms import Affine2D

    geo = _geometry(g, theme)
    legend = _legend_key(g, theme, show_grads)
    red = themes.MARK_STYLE["gradient"]["color"]
    caption = _caption(g)
    if stamps:
        fig_w, fig_h, ox, oy, legend_cols, legend_h = _frame(geo, legend, title, size, caption)
        legend_y = oy - legend_h  # right under the graph (a taller state's room stays below)
        fig.set_size_inches(fig_w, fig_h)
        data = Affine2D().translate(ox, oy) + fig.dpi_scale_trans

        def add_edges(artist):
            artist.set_transform(data)
            fig.add_artist(artist)
    else:
        if ax is None:
            fig_w, fig_h, ox, oy, legend_cols, legend_h = _frame(geo, legend, title, size,
                                                                 caption)
            legend_y = oy - legend_h
            fig.set_size_inches(fig_w, fig_h)
            ax = fig.add_axes((0, 0, 1, 1))
            ax.set_xlim(-ox, fig_w - ox)
            ax.set_ylim(-oy, fig_h - oy)
        else:
            legend_cols = _legend_layout(legend, min(max(geo.width, 7.0), COLUMN_WIDTH))[0]
            legend_y = 0.0  # at the bottom of the caller's figure
            ax.set_xlim(0, geo.width)
            ax.set_ylim(0, geo.height)
            ax.set_aspect("equal", adjustable="datalim")
        ax.set_axis_off()

        def add_edges(artist):
            if hasattr(artist, "get_paths"):  # the lines: a collection
                ax.add_collection(artist, autolim=False)
            else:                             # the heads: a patch
                ax.add_artist(artist)

    if stamps:  # cached pictures of boxes, texts and markers, in three layers over the edges
        layers = {z: fig.add_artist(_new_stamps(data, z)) for z in (2, 3, 4)}

        def shape(x, y, zorder, key, make):
            layers[zorder].add(x, y, _shape_stamp(key, make, fig.dpi))

        def text(x, y, s, zorder, **kw):
            layers[zorder].add(x, y, _text_stamp(s, fig.dpi, **kw))
    else:
        def shape(x, y, zorder, key, make):
            ax.add_artist(make(x, y))  # add_artist: no autoscale bookkeeping, limits are set

        def text(x, y, s, zorder, **kw):
            ax.text(x, y, s, zorder=zorder, **kw, **_families(
                s, kw.get("fontweight", "normal"), kw.get("style", "normal")))

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
        if d.get("note"):
            below = y - h / 2 - SHAPE_OUT - 0.03 - (0 if d["kind"] == "function" else MARK_H)
            text(x, below, "\n".join(_note_lines(d["note"])), 3, ha="center", va="top",
                 fontsize=NOTE_FONT, linespacing=1.15,
                 color=red if d.get("note_tone") == "error" else NOTE_COLOR)

    color = themes.edge_color(theme)
    edges = []
    for u, v, d in g.edges(data=True):
        edges.append((geo.edges[(u, v)], "--" if d.get("recovered") else "-", color,
                      0.35 if g.nodes[v].get("faded") and d.get("grad") is None else 1.0))
        uses = d.get("uses", 1)
        if show_grads and d.get("grad") is not None or uses > 1:
            (ax_, ay_), (bx_, by_) = geo.gap[(u, v)]
            said = " ".join(([f"\u00d7{uses}"] if uses > 1 else []) + (
                [_short_grad(d["grad"])] if show_grads and d.get("grad") is not None else []))
            text((ax_ + bx_) / 2, (ay_ + by_) / 2, said, 4, ha="center", va="center",
                 fontsize=EDGE_FONT, color=red if d.get("grad") is not None else color,
                 bbox=_EDGE_LABEL_BOX)
    if edges:  # the same artists on both paths: every edge in a few draw calls
        for artist in _edge_artists(edges):
            add_edges(artist)

    title_y = 1 - 0.1 / fig.get_figheight()
    places = _legend_places(legend, legend_cols) if legend_cols else []
    red_mark = {"color": red, "ha": "center", "va": "center", "fontsize": FONT}
    if stamps:
        inches = fig.add_artist(_new_stamps(fig.dpi_scale_trans, 5))
        for handle, label, hx, hy, lx in places:
            if handle[0] == "text":
                inches.add(MARGIN + hx, legend_y + hy,
                           _text_stamp(handle[1], fig.dpi, **red_mark))
            else:
                inches.add(MARGIN + hx, legend_y + hy, _shape_stamp(
                    ("legend", handle), functools.partial(_legend_handle, handle), fig.dpi))
            inches.add(MARGIN + lx, legend_y + hy, _text_stamp(
                label, fig.dpi, ha="left", va="center", fontsize=FONT))
        if title:
            inches.add(MARGIN, fig.get_figheight() - 0.1, _text_stamp(
                title, fig.dpi, ha="left", va="top", fontsize=TITLE_FONT))
        for i, (line, tone) in enumerate(caption):
            inches.add(MARGIN, _caption_y(fig, title, i), _text_stamp(
                line, fig.dpi, ha="left", va="top", fontsize=FONT,
                color=red if tone == "error" else NOTE_COLOR))
        return
    for handle, label, hx, hy, lx in places:
        if handle[0] == "text":
            fig.text(MARGIN + hx, legend_y + hy, handle[1], transform=fig.dpi_scale_trans,
                     gid="graph-legend-mark", **red_mark)
        else:
            artist = _legend_handle(handle, MARGIN + hx, legend_y + hy)
            artist.set_transform(fig.dpi_scale_trans)
            fig.add_artist(artist)
        fig.text(MARGIN + lx, legend_y + hy, label, ha="left", va="center", fontsize=FONT,
                 transform=fig.dpi_scale_trans, gid="graph-legend", **_families(label))
    if title:
        fig.suptitle(title, fontsize=TITLE_FONT, x=MARGIN / fig.get_figwidth(), y=title_y,
                     ha="left", **_families(title))
    for i, (line, tone) in enumerate(caption):
        fig.text(MARGIN, _caption_y(fig, title, i), line, ha="left", va="top", fontsize=FONT,
                 transform=fig.dpi_scale_trans, gid="graph-caption",
                 color=red if tone == "error" else NOTE_COLOR, **_families(line))


def _caption_y(fig, title: str | None, i: int) -> float:
    """The top of caption line ``i``, in inches from the figure's bottom."""
    return fig.get_figheight() - (0.42 if title else 0.1) - i * CAPTION_H


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
    """Everything the drawing shows, as a hashable key: equal keys draw equal pictures (the
    language is part of it: it changes the words of the labels and the legend)."""
    from course.i18n import language

    nodes = tuple(
        (n, d["kind"], d.get("torch_class"), d.get("shape"), bool(d.get("retains_grad")),
         bool(d.get("has_hooks")), bool(d.get("is_output")), bool(d.get("highlight")),
         bool(d.get("faded")), d.get("step"),
         _short_grad(d.get("grad")) if show_grads and d.get("grad") is not None else None,
         d.get("note"), d.get("note_tone"))
        for n, d in graph.nodes(data=True))
    edges = tuple(
        (u, v, bool(d.get("recovered")), d.get("uses", 1),
         _short_grad(d.get("grad")) if show_grads and d.get("grad") is not None else None)
        for u, v, d in graph.edges(data=True))
    return nodes, edges, _caption(graph), theme, language(), title, show_grads, dpi, size


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
    control off again, stepping back) costs about a millisecond. A new state reuses the
    cached pictures of its texts, boxes and marks (see the module docstring).
    """
    themes.check_theme(theme)
    size = None if size is None else (round(float(size[0]), 3), round(float(size[1]), 3))
    if dpi is None:
        dpi = auto_dpi(size or figure_size(graph, theme, title, show_grads))
    key = picture_key(graph, theme, title, show_grads, dpi, size)
    if key in _PNG_CACHE:
        return _PNG_CACHE[key]
    png = _encode_png(_render_rgba(graph, theme, title, show_grads, dpi, size), dpi)
    if len(_PNG_CACHE) >= _PNG_CACHE_SIZE:
        _PNG_CACHE.pop(next(iter(_PNG_CACHE)))  # oldest first
    _PNG_CACHE[key] = png
    return png


def _render_rgba(graph: nx.DiGraph, theme: str, title: str | None, show_grads: bool,
                 dpi: float, size=None):
    """The picture's pixels (rows top-down, RGBA, opaque): its stamps and edges drawn
    straight on an Agg renderer, without a ``Figure`` (see :class:`_Page`)."""
    import numpy as np
    from matplotlib.backends.backend_agg import RendererAgg

    with _LOCK, _rc(FAST_TEXT):
        page = _Page(dpi)
        _draw(graph, page, None, theme, title, show_grads, stamps=True, size=size)
        renderer = RendererAgg(page.width * dpi, page.height * dpi, dpi)
        pixels = np.asarray(renderer.buffer_rgba())
        pixels[...] = 255  # a white page
        for artist in sorted(page.artists, key=lambda a: a.get_zorder()):
            artist.draw(renderer)
        return pixels


# --- the render_png machinery: a bare Agg renderer, cached pictures, a direct PNG writer

_LOCK = threading.RLock()
_STAMPS: dict[tuple, tuple] = {}  # key -> (rgba rows bottom-up, dx, dy)
_STAMPS_SIZE = 2048
_EDGE_LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8}


class _Page:
    """What ``_draw`` needs of a figure on the ``render_png`` path, and no more: its size,
    dpi, an inches transform and a list of artists (a ``Figure`` costs about 200 ms to import
    in a new kernel, and every picture would pay for its layout machinery)."""

    def __init__(self, dpi: float):
        from matplotlib.transforms import Affine2D

        self.dpi = dpi
        self.width = self.height = 1.0
        self.artists: list = []
        self.dpi_scale_trans = Affine2D().scale(dpi)

    def set_size_inches(self, w: float, h: float) -> None:
        self.width, self.height = w, h

    def get_figwidth(self) -> float:
        return self.width

    def get_figheight(self) -> float:
        return self.height

    def add_artist(self, artist):
        self.artists.append(artist)
        return artist


@functools.cache
def _stamps_class():
    """The ``Stamps`` artist class (made on first use: this module imports matplotlib lazily)."""
    from matplotlib.artist import Artist

    class Stamps(Artist):
        """Pre-rendered pictures (texts, boxes, marks) placed at points in ``transform``
        coordinates.

        Each picture is blended in with one ``draw_image`` on whole pixels, without laying
        out and rasterising its glyphs or paths again.
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


def _rasterise(dpi: float, make: Callable, size_hint=(1.0, 1.0)) -> tuple:
    """Draw ``make(0, 0)``, an artist in inches about the origin, alone on a small transparent
    Agg renderer; its pixels and their offset from the origin.

    The result ``(rgba, dx, dy)`` (rows bottom-up) draws the same pixels when blended at
    ``(x + dx, y + dy)`` on another Agg canvas. ``size_hint`` (inches) is the size to start
    with; a picture that touches its border is drawn again on one twice as large.
    """
    import numpy as np
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.transforms import Affine2D

    w_px, h_px = (max(8, math.ceil(v * dpi)) for v in size_hint)
    for _ in range(6):
        ox, oy = w_px // 2, h_px // 2
        renderer = RendererAgg(w_px, h_px, dpi)
        artist = make(0, 0)
        artist.set_transform(Affine2D().scale(dpi).translate(ox, oy))  # inches, like the axes
        artist.draw(renderer)
        buf = np.asarray(renderer.buffer_rgba())  # rows top-down
        alpha = buf[..., 3]
        rows, cols = np.flatnonzero(alpha.any(axis=1)), np.flatnonzero(alpha.any(axis=0))
        if not len(rows):
            return np.zeros((1, 1, 4), np.uint8), 0, 0
        if rows[0] > 0 and cols[0] > 0 and rows[-1] < h_px - 1 and cols[-1] < w_px - 1:
            r0, r1, c0, c1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
            rgba = np.ascontiguousarray(buf[r0:r1, c0:c1][::-1])
            return rgba, int(c0 - ox), int(h_px - r1 - oy)
        w_px, h_px = 2 * w_px, 2 * h_px
    raise RuntimeError("shape too large to rasterise")  # pragma: no cover


def _remember(key: tuple, make: Callable) -> tuple:
    stamp = _STAMPS.get(key)
    if stamp is None:
        if len(_STAMPS) >= _STAMPS_SIZE:
            _STAMPS.pop(next(iter(_STAMPS)))  # oldest first
        stamp = _STAMPS[key] = make()
    return stamp


def _text_stamp(s: str, dpi: float, **kw) -> tuple:
    """The cached picture of a text drawn with ``Figure.text`` keywords ``kw`` (see
    :func:`_text_pixels`)."""
    key = ("text", s, dpi, tuple(sorted(
        (k, tuple(sorted(v.items())) if isinstance(v, dict) else v) for k, v in kw.items())))
    return _remember(key, lambda: _text_pixels(s, dpi, **kw))


# --- text without matplotlib's Text artist: FreeType through matplotlib's own FT2Font.
# matplotlib 3.11 lays out and rasterises text glyph by glyph in Python (about 1.5 ms a
# line); FT2Font.draw_glyphs_to_bitmap rasterises a whole line in C (about 0.1 ms), with
# the font, size, hinting and metrics matplotlib uses. The lines are placed as
# Text._get_layout places them (rotation 0), each on whole pixels.

@functools.lru_cache(maxsize=32)
def _ft_font(weight: str, style: str, size: float | None = None, dpi: float | None = None,
             face: int = 0):
    """A FreeType face of the font matplotlib picks for ``weight``/``style`` (``face=1``: of
    the CJK fallback font, :func:`cjk_font`, which has one weight), set to ``size`` points at
    ``dpi``: one object per size, so that it is set once (a size change costs FreeType a
    millisecond or two) and never disturbs the faces matplotlib itself uses."""
    import matplotlib as mpl
    from matplotlib.font_manager import FontProperties, findfont
    from matplotlib.ft2font import FT2Font

    if face:
        path = cjk_font()
        font = FT2Font(path, hinting_factor=mpl.rcParams["text.hinting_factor"],
                       face_index=getattr(path, "face_index", 0))
    else:
        font = FT2Font(findfont(FontProperties(weight=weight, style=style)),
                       hinting_factor=mpl.rcParams["text.hinting_factor"])
    if size is not None:
        font.set_size(size, dpi)
    return font


# --- Chinese text: the characters DejaVu Sans lacks (CJK ideographs, full-width punctuation)
# come from a CJK font, as matplotlib's own font fallback does it (a family list): each
# character from the first font that has it, no kerning across fonts. English text never
# needs it, and is drawn as before.
CJK_FAMILY = i18n.CJK_FONT
CJK_PACKAGE = "fonts-wqy-microhei"   # the Debian package that installs it


@functools.cache
def cjk_font():
    """The file (a matplotlib ``FontPath``) of the CJK font the drawings use for characters
    DejaVu Sans lacks, found through matplotlib's font manager; a font installed after the
    font manager's list was made is added to it (``addfont``, so that ``plt`` figures find it
    too: the manager is kept, not replaced, since matplotlib's modules hold it).
    Raises ``RuntimeError`` naming the Debian package when it is not installed."""
    import logging

    from matplotlib import font_manager as fm

    prop = fm.FontProperties(family=CJK_FAMILY)
    for attempt in range(2):
        try:
            path = fm.fontManager.findfont(prop, fallback_to_default=False,
                                           rebuild_if_missing=False)
        except ValueError:
            path = None
        if path is not None:
            # the font has one weight: matplotlib's fallback for bold Chinese text uses it,
            # and need not log that it found no bold one each time
            logging.getLogger("matplotlib.font_manager").addFilter(_quiet_cjk_weight)
            return path
        if attempt == 0:  # the font list predates the font: add the system's new fonts
            known = {f.fname for f in fm.fontManager.ttflist}
            for found in fm.findSystemFonts():
                if found not in known:
                    try:
                        fm.fontManager.addfont(found)
                    except (OSError, RuntimeError, ValueError):  # pragma: no cover
                        continue
    from course.i18n import _

    raise RuntimeError(_(
        "Drawing Chinese text needs the CJK font {family}, which matplotlib cannot find: "
        "install the Debian package {package} (`apt-get install {package}`), then restart "
        "the kernel.", family=CJK_FAMILY, package=CJK_PACKAGE))


def _quiet_cjk_weight(record) -> bool:
    """A logging filter: drop font_manager's "no bold face" notice about the CJK font."""
    text = record.getMessage()
    return not ("Failed to find font weight" in text and CJK_FAMILY in text)


def cjk_families() -> list[str]:
    """The family list that draws Chinese as :func:`render_png` does: the font matplotlib
    picks, then the CJK font (for ``fontfamily=`` of a matplotlib text, or rcParams)."""
    cjk_font()
    return [_ft_font("normal", "normal").family_name, CJK_FAMILY]


@functools.lru_cache(maxsize=8192)
def _face_of(weight: str, style: str, ch: str) -> int:
    """0 if the font matplotlib picks has ``ch``; 1 if only the CJK font has it (it must be
    installed, see :func:`cjk_font`); 0 again if neither has it (drawn as a missing glyph)."""
    if ch.isprintable() and not _ft_font(weight, style).get_char_index(ord(ch)):
        if _ft_font(weight, style, face=1).get_char_index(ord(ch)):
            return 1
    return 0


def _needs_cjk(s: str, weight: str = "normal", style: str = "normal") -> bool:
    return not s.isascii() and any(_face_of(weight, style, ch) for ch in s if ch != "\n")


def _families(s: str, weight: str = "normal", style: str = "normal") -> dict:
    """``{"fontfamily": ...}`` for a matplotlib text that needs the CJK font, else nothing
    (English text keeps matplotlib's own font settings)."""
    return {"fontfamily": cjk_families()} if _needs_cjk(s, weight, style) else {}


@functools.lru_cache(maxsize=64)
def _font_heights(weight: str, style: str, size: float, dpi: float) -> tuple:
    """``(ascent, descent, line gap)`` in pixels from the font's tables, as Text uses them."""
    font = _ft_font(weight, style)
    scale = size * dpi / 72 / font.get_sfnt_table("head")["unitsPerEm"]
    for table, gap, asc, desc in (("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
                                  ("hhea", "lineGap", "ascent", "descent")):
        t = font.get_sfnt_table(table)
        if t is not None:
            return t[asc] * scale, -t[desc] * scale, t[gap] * scale
    raise RuntimeError("font without OS/2 or hhea table")  # pragma: no cover


PHASES = 2  # glyphs are rasterised at half-pixel horizontal offsets (positions within 1/4 px)


@functools.lru_cache(maxsize=8192)
def _glyph(weight: str, style: str, size: float, dpi: float, index: int, phase: int, flags,
           face: int = 0):
    """One glyph rasterised by FreeType with its origin ``phase / PHASES`` pixel right of a
    pixel edge (as matplotlib 3.11's Agg renderer does it, through the same private
    FT2Font calls): ``(coverage rows top-down, left, top)`` in pixels from the origin.
    ``face``: 0 the font matplotlib picks, 1 the CJK font (see :func:`_face_of`)."""
    import numpy as np
    from matplotlib.ft2font import RenderMode

    font = _ft_font(weight, style, size, dpi, face=face) if face else _ft_font(
        weight, style, size, dpi)
    font._set_transform(np.array([[0x10000, 0], [0, 0x10000]]), [64 * phase // PHASES, 0])
    bitmap = font._render_glyph(index, flags, RenderMode.NORMAL)
    return np.array(bitmap.buffer, dtype=np.uint8), bitmap.left, bitmap.top


@functools.lru_cache(maxsize=4096)
def _char(weight: str, style: str, size: float, dpi: float, ch: str, flags) -> tuple:
    """``(advance, glyph index, top, bottom, face)`` of a character, in pixels (unhinted);
    ``face`` is the font it is drawn from (:func:`_face_of`)."""
    face = _face_of(weight, style, ch)
    font = _ft_font(weight, style, size, dpi, face=face) if face else _ft_font(
        weight, style, size, dpi)
    glyph = _load(font, ch, flags)
    return (glyph.linearHoriAdvance / 65536, font.get_char_index(ord(ch)),
            glyph.horiBearingY / 64, (glyph.horiBearingY - glyph.height) / 64, face)


@functools.lru_cache(maxsize=4096)
def _line_bitmap(line: str, size: float, weight: str, style: str, dpi: float, flags,
                 phase: int = 0) -> tuple:
    """One line of text rasterised by FreeType, its pen starting ``phase / PHASES`` pixel
    right of a pixel edge: ``(coverage, left, top, w, h, d)``: coverage rows top-down,
    ``left``/``top`` the pixel offsets of its left and top edge from the pen origin on the
    baseline (y up), ``w, h, d`` the line's width, height and descent in pixels (what
    matplotlib's Agg renderer measures: unhinted advances and kernings, glyph boxes).

    Glyph by glyph from cached glyph pictures (:func:`_glyph`); with a matplotlib without
    those FT2Font calls, the whole line by ``FT2Font.draw_glyphs_to_bitmap``."""
    import numpy as np

    font = _ft_font(weight, style, size, dpi)
    if not hasattr(font, "_render_glyph"):  # pragma: no cover - matplotlib < 3.11
        font.set_text(line, 0.0, flags=flags)
        w, h = font.get_width_height()
        d = font.get_descent()
        font.draw_glyphs_to_bitmap(antialiased=True)
        img = np.array(font.get_image(), dtype=np.uint8)
        return (img, math.floor(font.get_bitmap_offset()[0] / 64),
                math.floor((h - d) / 64) + 1, w / 64, h / 64, d / 64)
    from matplotlib.ft2font import Kerning

    pen, prev, prev_face, parts = phase / PHASES, None, 0, []
    y_hi, y_lo = -math.inf, math.inf
    for ch in line:
        advance, index, top, bottom, face = _char(weight, style, size, dpi, ch, flags)
        if prev is not None and face == prev_face:  # no kerning across fonts
            kern_font = _ft_font(weight, style, size, dpi, face=face) if face else font
            pen += kern_font.get_kerning(prev, index, Kerning.UNFITTED) / 64
        x = math.floor(pen)
        quarter = round((pen - x) * PHASES)
        if quarter == PHASES:
            x, quarter = x + 1, 0
        if face:
            cover, left, btop = _glyph(weight, style, size, dpi, index, quarter, flags, face)
        else:
            cover, left, btop = _glyph(weight, style, size, dpi, index, quarter, flags)
        if cover.size:
            parts.append((cover, x + left, btop))
            y_hi, y_lo = max(y_hi, top), min(y_lo, bottom)
        pen += advance
        prev, prev_face = index, face
    width = pen - phase / PHASES
    if not parts:
        return np.zeros((0, 0), np.uint8), 0, 0, width, 0.0, 0.0
    x0 = min(x for _, x, _ in parts)
    x1 = max(x + c.shape[1] for c, x, _ in parts)
    top = max(t for _, _, t in parts)
    low = min(t - c.shape[0] for c, _, t in parts)
    img = np.zeros((top - low, x1 - x0), np.uint8)
    for c, x, t in parts:
        region = img[top - t:top - t + c.shape[0], x - x0:x - x0 + c.shape[1]]
        np.maximum(region, c, out=region)
    return img, x0, top, width, y_hi - y_lo, -y_lo


def _text_pixels(s: str, dpi: float, ha: str = "left", va: str = "baseline",
                 fontsize: float = FONT, color=None, alpha: float | None = None,
                 fontweight: str = "normal", style: str = "normal", linespacing=None,
                 bbox: dict | None = None) -> tuple:
    """The stamp ``(rgba, dx, dy)`` of ``s`` as ``Figure.text(x, y, s, **kw)`` draws it, with
    the anchor ``(x, y)`` at the origin: lines placed like ``Text._get_layout`` does,
    ``bbox`` a square box behind the text (``pad`` in points, its ``facecolor`` and
    ``alpha``)."""
    import matplotlib as mpl
    import numpy as np
    from matplotlib.backends.backend_agg import get_hinting_flag
    from matplotlib.colors import to_rgba

    lines = s.split("\n")
    flags = get_hinting_flag()
    min_a, min_d, gap = _font_heights(fontweight, style, fontsize, dpi)
    if len(lines) == 1:
        gap = 0.0
    y, placed, d = 0.0, [], 0.0
    for line in lines:
        bm = _line_bitmap(line, fontsize, fontweight, style, dpi, flags) if line else None
        w, h, d = bm[3:] if bm else (0.0, 0.0, 0.0)  # metrics do not depend on the phase
        a = h - d
        if linespacing is None or linespacing == "normal":
            a, d = max(a, min_a) + gap / 2, max(d, min_d) + gap / 2
        else:
            lead = linespacing * (min_a + min_d) - (a + d)
            a, d = a + lead / 2, d + lead / 2
        y -= a
        placed.append((line, bm, w, y))
        y -= d
    width, ymin = max(w for _, _, w, _ in placed), y
    off_x = {"left": 0.0, "right": width}.get(ha, width / 2)
    off_y = {"bottom": ymin, "top": 0.0, "center": ymin / 2, "baseline": ymin + d}[va]
    parts = []   # (coverage, x0, y_top) on whole pixels, y up
    for line, bm, w, yl in placed:
        if bm is not None and bm[0].size:
            lx = {"left": 0.0, "right": width - w}.get(ha, (width - w) / 2) - off_x
            x = math.floor(lx)
            quarter = round((lx - x) * PHASES)
            if quarter:  # the line again, its pen where the layout puts it within the pixel
                bm = _line_bitmap(line, fontsize, fontweight, style, dpi, flags,
                                  quarter % PHASES)
                x += quarter // PHASES
            parts.append((bm[0], x + bm[1], round(yl - off_y) + bm[2]))
    box = None
    if bbox is not None:
        pad = bbox.get("pad", 4.0) * dpi / 72
        box = (math.floor(-off_x - pad), math.floor(ymin - off_y - pad),
               math.ceil(width - off_x + pad), math.ceil(-off_y + pad))
    xs = [x0 for _, x0, _ in parts] + [x0 + c.shape[1] for c, x0, _ in parts]
    ys = [yt for _, _, yt in parts] + [yt - c.shape[0] for c, _, yt in parts]
    if box:
        xs += [box[0], box[2]]
        ys += [box[1], box[3]]
    if not xs:
        return np.zeros((1, 1, 4), np.uint8), 0, 0
    x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)
    cover = np.zeros((y_hi - y_lo, x_hi - x_lo), np.float32)   # rows top-down
    for c, x0, yt in parts:
        r0, c0 = y_hi - yt, x0 - x_lo
        region = cover[r0:r0 + c.shape[0], c0:c0 + c.shape[1]]
        np.maximum(region, c, out=region)
    rgba_text = to_rgba(color if color is not None else mpl.rcParams["text.color"])
    text_a = (cover / 255.0) * (rgba_text[3] if alpha is None else alpha)
    out = np.empty(cover.shape + (4,), np.float32)
    out[..., :3] = rgba_text[:3]
    out[..., 3] = text_a
    if box:
        face = to_rgba(bbox.get("facecolor", "white"), bbox.get("alpha"))
        back = np.zeros(cover.shape, np.float32)
        back[y_hi - box[3]:y_hi - box[1], box[0] - x_lo:box[2] - x_lo] = face[3]
        total = text_a + back * (1 - text_a)
        with np.errstate(invalid="ignore", divide="ignore"):
            for k in range(3):
                out[..., k] = np.where(total > 0, (rgba_text[k] * text_a + face[k] * back
                                                   * (1 - text_a)) / total, 0.0)
        out[..., 3] = total
    rgba = np.ascontiguousarray((np.clip(out, 0, 1) * 255 + 0.5).astype(np.uint8)[::-1])
    return rgba, x_lo, y_lo


def _shape_stamp(key: tuple, make: Callable, dpi: float) -> tuple:
    """The cached picture of ``make(0, 0)``, an artist drawn in inches about the origin."""
    if key[0] == "box":
        hint = (key[1] + 0.5, key[2] + 0.5)
    else:
        hint = (0.5, 0.3)
    return _remember(("shape", key, dpi), lambda: _rasterise(dpi, make, hint))


def clear_caches(pictures: bool = True) -> None:
    """Empty the PNG cache and, with ``pictures``, every cache of drawn or measured things:
    stamps, layouts, geometries, text widths, rasterised lines, font heights (what a graph
    never drawn before costs; the loaded font faces are kept, like matplotlib's own)."""
    with _LOCK:
        _PNG_CACHE.clear()
        if pictures:
            for cache in (_STAMPS, _LAYOUTS, _COLUMNS, _GEOMETRIES):
                cache.clear()
            for fn in (_text_width, _box_size, _advances, _line_bitmap, _font_heights, _glyph,
                       _char, _face_of):
                fn.cache_clear()


def _encode_png(rgba, dpi: float) -> bytes:
    """RGBA pixels as a PNG: zlib level 1, no row filters, the rows fed to zlib straight from
    the canvas (3x faster than Pillow's encoder; dropping the alpha channel, always 255 here,
    would need a copy that costs more than compressing it)."""
    import numpy as np

    h, w, _ = rgba.shape
    pixels = memoryview(np.ascontiguousarray(rgba)).cast("B")
    stride = w * 4
    packer = zlib.compressobj(1)
    parts = []
    for y in range(h):  # a 0 (no filter) byte before each row, fed without one big copy
        parts.append(packer.compress(b"\0"))
        parts.append(packer.compress(pixels[y * stride:(y + 1) * stride]))
    parts.append(packer.flush())
    data = b"".join(parts)

    def chunk(tag: bytes, data) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    per_metre = round(dpi / 0.0254)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0))
            + chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1))
            + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def show(fig) -> None:
    """Display a matplotlib figure the way the course shows its drawings: rendered at 2x and
    shown at 1x (crisp on high-density screens, the notebook column's size at 100 % zoom), then
    closed if pyplot holds it, so it is not shown a second time. A figure wider than the
    notebook column (:data:`COLUMN_WIDTH`) is laid out again at the column's width, its text
    at its size, so nothing hides behind a scrollbar."""
    from IPython.display import Image, display

    w, h = fig.get_size_inches()
    if w > COLUMN_WIDTH:
        fig.set_size_inches(COLUMN_WIDTH, h)
        if fig.get_layout_engine() is None:  # a one-off tight_layout() made for the old width
            fig.tight_layout()
    png, meta = _figure_png(fig)
    display(Image(png, width=meta["width"], height=meta["height"], unconfined=True))
    import matplotlib.pyplot as plt

    if plt.fignum_exists(getattr(fig, "number", -1)):
        plt.close(fig)
