"""Log-scale charts for the lesson explorers: SVG for the live widget, matplotlib for saving.

``svg_chart`` draws lines (one value per x label) or bars (one per x label) on a log axis,
with a legend listing exactly what is drawn; it is plain text, so it is crisp at any zoom
and costs a few milliseconds. ``matplotlib_chart`` draws the same chart as a matplotlib
figure outside pyplot (the explorers' ``static_figure()``). Used by lessons 03 and 07's
explorers (``course.explorers``).
"""

from __future__ import annotations

import html
import math

from course.facts import width as _columns
from course.i18n import _

__all__ = ["svg_chart", "matplotlib_chart"]

# Chinese labels fall back to a CJK font (the one the course's figures use, then the usual ones)
_FONT = ("font-family:DejaVu Sans,Arial,WenQuanYi Micro Hei,Noto Sans CJK SC,"
         "Microsoft YaHei,PingFang SC,sans-serif")
LEGEND_CHAR_W = 7.2   # px per character of 12 px DejaVu Sans, a safe average
LEGEND_CJK_W = 12.0   # px per Chinese character (or full-width mark) of a 12 px font: 1 em
LEGEND_ROW_H = 18


def _legend_width(label: str) -> float:
    """px of ``label`` in the 12 px legend: Chinese characters are a full em wide."""
    wide = _columns(label) - len(label)
    return LEGEND_CHAR_W * (len(label) - wide) + LEGEND_CJK_W * wide


def _missing(label: str, value) -> str:
    """The legend's entry of a hatched bar: ``label (None)`` / ``label (0)``."""
    return _("{label} ({value})", label=label, value="None" if value is None else "0")


def _threshold(label: str, value: float) -> str:
    return _("{label} threshold ({value:g})", label=label, value=value)


def _log(label: str) -> str:
    return _("{label} (log)", label=label)


def svg_chart(xlabels: list[str], series: list[tuple], *, title: str, xlabel: str,
              ylabel: str, bars: list[tuple] | None = None,
              threshold: tuple[str, float] | None = None, width: int = 680,
              height: int = 300) -> str:
    """A log-scale chart as an SVG document.

    ``series``: ``(label, values, colour, bold)`` lines over ``xlabels``; ``bars``:
    ``(value, colour, label)`` per x label (a value of ``None`` or 0 is a hatched bar at the
    bottom, labelled ``None`` / ``0``). ``threshold``: ``(label, value)``, a dashed line. The
    legend lists exactly the lines, bar colours and threshold drawn.
    """
    esc = html.escape
    left, right, top, bottom = 78, 16, 34, 74
    pw, ph = width - left - right, height - top - bottom
    values = [v for _label, vs, _c, _b in series for v in vs] + [b[0] for b in bars or []]
    if threshold:
        values.append(threshold[1])
    positive = [v for v in values if v and v > 0 and math.isfinite(v)] or [1.0]
    lo = math.floor(math.log10(min(positive)))
    if threshold:  # a decade below the threshold, so that its line stands clear of the axis
        lo = min(lo, math.floor(math.log10(threshold[1])) - 1)
    hi = math.ceil(math.log10(max(positive)))
    hi = hi if hi > lo else lo + 1
    lo_floor = lo - (1 if bars and any(not b[0] for b in bars) else 0)
    n = max(1, len(xlabels))

    def y_of(v):
        v = max(v, 10.0 ** lo_floor)
        return top + ph * (hi - math.log10(v)) / (hi - lo_floor)

    def x_of(i):
        return left + pw * (i + 0.5) / n

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" style="{_FONT}">',
           '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
           'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" '
           'stroke="#495057" stroke-width="1.5"/></pattern></defs>',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" font-size="15" text-anchor="middle">'
           f'{esc(title)}</text>']
    step = max(1, math.ceil((hi - lo_floor) / 7))
    for e in range(lo_floor, hi + 1, step):
        y = y_of(10.0 ** e)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#e9ecef"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" font-size="12" '
                   f'text-anchor="end">1e{e}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" '
               'stroke="#495057"/>')
    every = max(1, math.ceil(n / 20))
    for i, label in enumerate(xlabels):
        if i % every == 0 or i == n - 1:
            out.append(f'<text x="{x_of(i):.1f}" y="{top + ph + 16}" font-size="12" '
                       f'text-anchor="middle">{esc(label)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{top + ph + 34}" font-size="13" '
               f'text-anchor="middle">{esc(xlabel)}</text>')
    out.append(f'<text x="16" y="{top + ph / 2}" font-size="13" text-anchor="middle" '
               f'transform="rotate(-90 16 {top + ph / 2})">{esc(_log(ylabel))}</text>')
    legend: list[tuple[str, str, str]] = []  # (kind, colour, label)
    if bars:
        bw = pw / n * 0.7
        for i, (v, colour, label) in enumerate(bars):
            x0 = x_of(i) - bw / 2
            if v:
                y = y_of(v)
                out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{bw:.1f}" '
                           f'height="{top + ph - y:.1f}" fill="{colour}" stroke="#343a40"/>')
            else:
                y = top + ph - 22
                out.append(f'<rect x="{x0:.1f}" y="{y:.1f}" width="{bw:.1f}" height="22" '
                           'fill="url(#hatch)" stroke="#343a40"/>')
                out.append(f'<text x="{x_of(i):.1f}" y="{y - 4:.1f}" font-size="11" '
                           f'text-anchor="middle">{"None" if v is None else "0"}</text>')
            entry = ("bar", colour if v else "url(#hatch)", label if v else _missing(label, v))
            if entry not in legend:
                legend.append(entry)
    for label, vs, colour, bold in series:
        pts = " ".join(f"{x_of(i):.1f},{y_of(v):.1f}" for i, v in enumerate(vs))
        width_ = 3 if bold else 1.5
        dash = "" if bold else ' stroke-dasharray="5 3" opacity="0.75"'
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" '
                   f'stroke-width="{width_}"{dash}/>')
        for i, v in enumerate(vs):
            out.append(f'<circle cx="{x_of(i):.1f}" cy="{y_of(v):.1f}" r="{3 if bold else 2}"'
                       f' fill="{colour}"/>')
        legend.append(("line" if bold else "dash", colour, label))
    if threshold:
        y = y_of(threshold[1])
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#1c7ed6" stroke-dasharray="6 4"/>')
        legend.append(("dash", "#1c7ed6", _threshold(*threshold)))
    # the legend, in rows below the axes; a row ends before an entry would pass the edge
    x, row = left, 0
    placed = []
    for entry in legend:
        span = 24 + _legend_width(entry[2]) + 18
        if x > left and x + span > width - right:
            x, row = left, row + 1
        placed.append((x, row, entry))
        x += span
    extra = LEGEND_ROW_H * row
    for x, row, (kind, colour, label) in placed:
        y = height - 14 + LEGEND_ROW_H * row
        if kind == "bar":
            out.append(f'<rect x="{x}" y="{y - 10}" width="14" height="12" fill="{colour}" '
                       'stroke="#343a40"/>')
        else:
            dash = ' stroke-dasharray="5 3"' if kind == "dash" else ""
            out.append(f'<line x1="{x}" x2="{x + 18}" y1="{y - 4}" y2="{y - 4}" '
                       f'stroke="{colour}" stroke-width="{3 if kind == "line" else 2}"{dash}/>')
        out.append(f'<text x="{x + 24}" y="{y}" font-size="12">{esc(label)}</text>')
    out.append("</svg>")
    if extra:  # taller by the extra legend rows
        out[0] = out[0].replace(f'height="{height}"', f'height="{height + extra}"').replace(
            f'viewBox="0 0 {width} {height}"', f'viewBox="0 0 {width} {height + extra}"')
        out[2] = out[2].replace(f'height="{height}"', f'height="{height + extra}"')
    return "".join(out)


def matplotlib_chart(xlabels: list[str], series: list[tuple], *, title: str, xlabel: str,
                     ylabel: str, bars: list[tuple] | None = None,
                     threshold: tuple[str, float] | None = None, ax=None):
    """The chart of :func:`svg_chart` (same arguments) as a matplotlib ``Figure`` outside
    pyplot (nothing to close); with ``ax``, drawn there."""
    from matplotlib.patches import Patch

    if ax is None:
        from matplotlib.figure import Figure

        from course.draw import COLUMN_WIDTH

        fig = Figure(figsize=(min(8.0, COLUMN_WIDTH), 4.2), layout="constrained")
        ax = fig.subplots()
    else:
        fig = ax.figure
    xs = range(1, len(xlabels) + 1)
    handles = []
    if bars:
        values = [b[0] for b in bars]
        positive = [v for v in values if v] or [1.0]
        floor = min(positive) / 10
        drawn = ax.bar(xs, [v if v else floor for v in values],
                       color=[c if v else "white" for v, c, _ in bars], edgecolor="#343a40")
        for rect, (v, _colour, _label) in zip(drawn, bars, strict=True):
            if not v:
                rect.set_hatch("//")
                ax.annotate("None" if v is None else "0", (rect.get_x() + rect.get_width() / 2,
                            floor), xytext=(0, 3), textcoords="offset points", ha="center",
                            fontsize=10)
        seen = {}
        for v, colour, label in bars:
            name = label if v else _missing(label, v)
            seen.setdefault(name, Patch(facecolor=colour if v else "white",
                                        hatch="" if v else "//", edgecolor="#343a40",
                                        label=name))
        handles += list(seen.values())
    for label, values, colour, bold in series:
        (line,) = ax.plot(xs, values, marker="o", color=colour, label=label,
                          linewidth=2.5 if bold else 1.2, linestyle="-" if bold else "--")
        handles.append(line)
    if threshold:
        handles.append(ax.axhline(threshold[1], color="#1c7ed6", linestyle="--",
                                  label=_threshold(*threshold)))
    ax.set_yscale("log")
    ax.set_xticks(list(xs), xlabels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(_log(ylabel))
    ax.set_title(title)
    ax.legend(handles=handles, fontsize=10)
    return fig
