"""The course glossary: what each part of an autograd graph is called in each analogy.

One table, used by the drawings, the widgets and the tables, so a learner reads
the same words everywhere (see COURSE.md). A graph node has one *kind*:

``parameter``     a leaf tensor that requires grad (``.grad`` is stored here)
``constant``      a tensor that does not require grad (a leaf by convention)
``intermediate``  a non-leaf tensor: it came out of an operation (has a ``grad_fn``)
``function``      a backward function of torch's graph (``MulBackward0``, ``AccumulateGrad``)

and may carry *marks*: ``retained`` (``retain_grad()``), ``hooked`` (a tensor hook),
``gradient`` (a gradient value shown after ``backward()``).

The tensor-kind words match ``course.facts.ROLES`` (the tensor tables), which a
test keeps in step.
"""

from __future__ import annotations

THEMES = ("technical", "logistics", "kitchen")
KINDS = ("parameter", "constant", "intermediate", "function")
MARKS = ("retained", "hooked", "gradient")

GLOSSARY: dict[str, dict[str, str]] = {
    "technical": {
        "parameter": "leaf, requires grad",
        "constant": "leaf, no grad",
        "intermediate": "non-leaf",
        "function": "backward function (grad_fn)",
        "retained": "retain_grad()",
        "hooked": "tensor hook",
        "gradient": ".grad / gradient",
        "backward": "backward()",
        "output": "output",
    },
    "logistics": {
        "parameter": "sorting centre",
        "constant": "ordinary parcel",
        "intermediate": "transit station",
        "function": "sorting rule (grad_fn)",
        "retained": "temporary monitor (retain_grad)",
        "hooked": "inspection probe (hook)",
        "gradient": "efficiency report (gradient)",
        "backward": "trace reports back along the route",
        "output": "final delivery",
    },
    "kitchen": {
        "parameter": "market ingredient",
        "constant": "bottled sauce",
        "intermediate": "semi-finished dish",
        "function": "recipe step (grad_fn)",
        "retained": "cold-chain warehouse (retain_grad)",
        "hooked": "tasting spoon (hook)",
        "gradient": "origin record (gradient)",
        "backward": "trace every ingredient back to its origin",
        "output": "finished dish",
    },
}

# Short role words printed under a tensor's name inside a drawn node.
SHORT_ROLE: dict[str, dict[str, str]] = {
    "technical": {"parameter": "leaf", "constant": "no grad", "intermediate": "non-leaf"},
    "logistics": {"parameter": "sorting centre", "constant": "parcel",
                  "intermediate": "transit station"},
    "kitchen": {"parameter": "ingredient", "constant": "bottled sauce",
                "intermediate": "dish in progress"},
}

# Colours per theme; shapes and line styles are shared, so a kind looks alike in every theme.
_PALETTES = {
    "technical": {"parameter": "#b7e4c7", "constant": "#e9ecef", "intermediate": "#cfe2ff",
                  "function": "#ffffff", "edge": "#6c757d"},
    "logistics": {"parameter": "#ffd8a8", "constant": "#e9ecef", "intermediate": "#d0ebff",
                  "function": "#fff9db", "edge": "#868e96"},
    "kitchen": {"parameter": "#d3f9d8", "constant": "#f1f3f5", "intermediate": "#ffe8cc",
                "function": "#fff0f6", "edge": "#868e96"},
}

_SHAPES = {
    "parameter": {"boxstyle": "round,pad=0.05,rounding_size=0.08", "linestyle": "-",
                  "linewidth": 1.6, "edgecolor": "#2b8a3e"},
    "constant": {"boxstyle": "square,pad=0.05", "linestyle": "--", "linewidth": 1.0,
                 "edgecolor": "#868e96"},
    "intermediate": {"boxstyle": "round4,pad=0.05,rounding_size=0.15", "linestyle": "-",
                     "linewidth": 1.0, "edgecolor": "#1c7ed6"},
    "function": {"boxstyle": "sawtooth,pad=0.05,tooth_size=0.04", "linestyle": "-",
                 "linewidth": 0.7, "edgecolor": "#495057"},
}

MARK_STYLE = {
    "retained": {"color": "#f59f00", "linewidth": 3.2},   # thick amber outline
    "hooked": {"color": "#ae3ec9", "marker": "v"},         # a probe marker on the box corner
    "gradient": {"color": "#c92a2a"},                      # gradient text on nodes and edges
}


def check_theme(theme: str) -> str:
    """Return ``theme`` if it is one of :data:`THEMES`, else raise a readable ``ValueError``."""
    if theme not in THEMES:
        raise ValueError(f"theme must be one of {list(THEMES)}, not {theme!r}")
    return theme


def term(theme: str, key: str) -> str:
    """The word for ``key`` (a kind, a mark, ``'backward'`` or ``'output'``) in ``theme``."""
    return GLOSSARY[check_theme(theme)][key]


def node_style(kind: str, theme: str = "technical") -> dict:
    """Matplotlib box style of a node kind in a theme: boxstyle, colours, line style and width."""
    style = dict(_SHAPES[kind])
    style["facecolor"] = _PALETTES[check_theme(theme)][kind]
    return style


def edge_color(theme: str) -> str:
    """Colour of the graph's arrows in ``theme``."""
    return _PALETTES[check_theme(theme)]["edge"]
