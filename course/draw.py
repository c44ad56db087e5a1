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
"""

from __future__ import annotations

import io
from collections.abc import Mapping

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


def graph_layout(g: nx.DiGraph) -> dict:
    """Grid positions ``node -> (column, row)`` from networkx.

    Columns are ``topological_generations`` of the reversed graph (distance to
    the output), so every input sits just left of its first use. Within a column,
    nodes follow the mean row of the nodes they feed, which keeps edges short.
    """
    if len(g) == 0:
        return {}
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


def _draw(g: nx.DiGraph, fig, ax, theme: str, title: str | None, show_grads: bool) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch

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
    grads = [n for n, d in g.nodes(data=True) if show_grads and d.get("grad") is not None]
    edge_grads = [(u, v) for u, v, d in g.edges(data=True) if show_grads and d.get("grad") is not None]

    handles = [Patch(label=themes.term(theme, k), **_patch_kw(themes.node_style(k, theme)))
               for k in themes.KINDS if k in present]
    if retained:
        handles.append(Patch(facecolor="white", edgecolor=themes.MARK_STYLE["retained"]["color"],
                             linewidth=3, label=themes.term(theme, "retained")))
    if hooked:
        handles.append(Line2D([], [], linestyle="", marker="v", markersize=8,
                              color=themes.MARK_STYLE["hooked"]["color"],
                              label=themes.term(theme, "hooked")))
    if grads or edge_grads:
        handles.append(Line2D([], [], color=themes.MARK_STYLE["gradient"]["color"],
                              label=themes.term(theme, "gradient")))
    legend_cols = min(4, max(1, len(handles)))
    legend_h = 0.12 + 0.24 * -(-len(handles) // legend_cols)
    title_h = 0.4 if title else 0.0
    fig_w = max(width, 2.6 * legend_cols)
    if ax is None:
        fig.set_size_inches(fig_w, height + legend_h + title_h)
        total = height + legend_h + title_h
        ax = fig.add_axes((0, legend_h / total, 1, height / total))
        ax.set_xlim((width - fig_w) / 2, (width + fig_w) / 2)
        ax.set_ylim(0, height)
    else:
        ax.set_xlim(0, width)
        ax.set_ylim(0, height)
        ax.set_aspect("equal", adjustable="datalim")
    ax.set_axis_off()

    boxes = {}
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
        box = FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle=style["boxstyle"],
                             alpha=alpha, zorder=2, **kw)
        ax.add_artist(box)  # add_artist: no autoscale bookkeeping, limits are set above
        boxes[n] = box
        is_fn = d["kind"] == "function"
        ax.text(x, y, labels[n], ha="center", va="center", fontsize=FONT - (0.8 if is_fn else 0),
                style="italic" if is_fn else "normal", zorder=3, alpha=alpha,
                fontweight="bold" if d.get("is_output") else "normal")
        if d.get("has_hooks"):
            ax.plot([x + w / 2], [y + h / 2], marker="v", markersize=9, zorder=4, linestyle="",
                    color=themes.MARK_STYLE["hooked"]["color"])
        if n in grads:
            ax.text(x, y - h / 2 - 0.05, f"grad {format_grad(d['grad'])}", ha="center", va="top",
                    fontsize=FONT - 1, zorder=3, color=themes.MARK_STYLE["gradient"]["color"])
        if d.get("step") is not None:
            ax.text(x - w / 2, y + h / 2, f"#{d['step']}", ha="right", va="bottom",
                    fontsize=FONT - 1, zorder=4, color=themes.MARK_STYLE["gradient"]["color"])

    color = themes.edge_color(theme)
    for u, v, d in g.edges(data=True):
        start, end = _clip(xy[u], sizes[u], xy[v]), _clip(xy[v], sizes[v], xy[u])
        span = grid[v][0] - grid[u][0]
        ax.add_artist(FancyArrowPatch(
            start, end, arrowstyle="-|>", mutation_scale=9, shrinkA=0, shrinkB=0,
            color=color, linewidth=0.9, zorder=1, linestyle="--" if d.get("recovered") else "-",
            connectionstyle=f"arc3,rad={0.12 if span > 1 else 0.0}",
            alpha=0.35 if g.nodes[v].get("faded") and d.get("grad") is None else 1.0))
        if (u, v) in edge_grads:
            ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.04,
                    format_grad(d["grad"]), ha="center", va="bottom", fontsize=FONT - 1.5,
                    zorder=4, color=themes.MARK_STYLE["gradient"]["color"],
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5, "alpha": 0.8})

    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=legend_cols, fontsize=FONT,
                   frameon=False, bbox_to_anchor=(0.5, 0.0))
    if title:
        fig.suptitle(title, fontsize=FONT + 3, y=1 - 0.08 / fig.get_figheight())


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
    (toggling a control off again, stepping back) costs about a millisecond.
    """
    import matplotlib as mpl
    from matplotlib.figure import Figure

    themes.check_theme(theme)
    key = picture_key(graph, theme, title, show_grads, dpi)
    if key in _PNG_CACHE:
        return _PNG_CACHE[key]
    fig = Figure()
    _draw(graph, fig, None, theme, title, show_grads)
    buf = io.BytesIO()
    with mpl.rc_context(FAST_TEXT):
        fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    if len(_PNG_CACHE) >= _PNG_CACHE_SIZE:
        _PNG_CACHE.pop(next(iter(_PNG_CACHE)))  # oldest first
    _PNG_CACHE[key] = buf.getvalue()
    return _PNG_CACHE[key]
