"""Tables of what autograd knows about named tensors (first taught in lesson 01).

``tensor_table(a=a, b=b)`` shows, for each tensor, the three questions the
course asks of any tensor -- ``is_leaf``, ``requires_grad``, ``grad_fn`` -- plus
what ``.grad`` holds and the tensor's role in the chosen analogy. Reading
``.grad`` here never emits the non-leaf UserWarning: the table reads it quietly
and says "None (not kept)" for a non-leaf.
"""

from __future__ import annotations

import html
import textwrap
import unicodedata
import warnings
from dataclasses import dataclass

from course.i18n import N_, _
from course.themes import GLOSSARY, THEMES, term

# A tensor's role in each analogy: the glossary's words for the three tensor kinds.
ROLES = {
    theme: {kind: GLOSSARY[theme][kind] for kind in ("parameter", "constant", "intermediate")}
    for theme in THEMES
}


def width(text: str) -> int:
    """Columns ``text`` takes in a monospaced terminal: 2 for a Chinese character or a
    full-width punctuation mark, 1 for anything else."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def ljust(text: str, columns: int) -> str:
    """``text`` padded with spaces to ``columns`` terminal columns (see :func:`width`)."""
    return text + " " * max(0, columns - width(text))


_NO_LINE_START = set("，。、：；？！）」』》”’…%")   # punctuation a Chinese line never begins with
_NO_LINE_END = set("（「『《“‘")                    # nor ends with


def wrap(text: str, columns: int, initial_indent: str = "", subsequent_indent: str = "",
         break_on_hyphens: bool = True) -> list[str]:
    """:func:`textwrap.wrap`, also for Chinese text: a line holds at most ``columns`` terminal
    columns, breaks between any two Chinese characters (never inside a word of Latin letters
    or code, never before a closing punctuation mark nor after an opening one)."""
    if width(text) == len(text):
        return textwrap.wrap(text, columns, initial_indent=initial_indent,
                             subsequent_indent=subsequent_indent,
                             break_on_hyphens=break_on_hyphens)
    tokens, word = [], ""
    for c in text:  # a run of Latin letters or code, a space, or one wide character
        if c == " " or width(c) == 2:
            if word:
                tokens.append(word)
                word = ""
            tokens.append(c)
        else:
            word += c
    if word:
        tokens.append(word)
    lines, line = [], initial_indent
    fresh = True  # nothing but the indent on this line yet
    for token in tokens:
        if fresh and token == " ":
            continue
        if not fresh and width(line) + width(token) > columns and token[0] not in _NO_LINE_START:
            carried = ""
            while line[-1:] in _NO_LINE_END and len(line) > len(subsequent_indent) + 1:
                line, carried = line[:-1], line[-1] + carried
            lines.append(line.rstrip())
            line, fresh = subsequent_indent + carried, not carried
            if token == " " and fresh:
                continue
        line += token
        fresh = False
    if not fresh:
        lines.append(line.rstrip())
    return lines


def kind_of(t) -> str:
    """``'parameter'`` (leaf that requires grad), ``'constant'`` (leaf without grad) or
    ``'intermediate'`` (non-leaf)."""
    if not t.is_leaf:
        return "intermediate"
    return "parameter" if t.requires_grad else "constant"


def quiet_grad(t):
    """``t.grad`` without the UserWarning a non-leaf emits."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return t.grad


def _fmt_grad(t) -> str:
    g = quiet_grad(t)
    if g is None:
        if not t.is_leaf and not t.retains_grad:
            return _("None (not kept)")
        return "None"
    values = g.detach().flatten().tolist()
    shown = ", ".join(f"{v:.4g}" for v in values[:6])
    more = ", ..." if len(values) > 6 else ""
    return f"[{shown}{more}]" if g.dim() else shown


@dataclass
class Row:
    name: str
    is_leaf: bool
    requires_grad: bool
    grad_fn: str
    grad: str
    role: str


class TensorTable:
    """A small table that renders as HTML in Jupyter and as text elsewhere."""

    columns = (N_("tensor"), "is_leaf", "requires_grad", "grad_fn", ".grad", N_("role"))

    def __init__(self, rows: list[Row], theme: str):
        self.rows = rows
        self.theme = theme

    def _cells(self, r: Row) -> tuple[str, ...]:
        return (r.name, str(r.is_leaf), str(r.requires_grad), r.grad_fn, r.grad, r.role)

    def __repr__(self) -> str:
        data = [tuple(_(c) for c in self.columns)] + [self._cells(r) for r in self.rows]
        widths = [max(width(row[i]) for row in data) for i in range(len(self.columns))]
        lines = ["  ".join(ljust(c, w) for c, w in zip(row, widths, strict=True)).rstrip()
                 for row in data]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{html.escape(_(c))}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in self._cells(r)) + "</tr>"
            for r in self.rows
        )
        return (f'<table class="tensor-table"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table>")


def tensor_table(theme: str = "technical", **tensors) -> TensorTable:
    """Facts about each named tensor, e.g. ``tensor_table("logistics", w=w, parcel=parcel)``."""
    if theme not in ROLES:
        raise ValueError(_("theme must be one of {themes}, not {theme!r}", themes=sorted(ROLES),
                           theme=theme))
    rows = []
    for name, t in tensors.items():
        fn = t.grad_fn
        rows.append(Row(
            name=name,
            is_leaf=bool(t.is_leaf),
            requires_grad=bool(t.requires_grad),
            grad_fn="None" if fn is None else type(fn).__name__,
            grad=_fmt_grad(t),
            role=term(theme, kind_of(t)),  # the glossary's word, in the course's language
        ))
    return TensorTable(rows, theme)


def caught_warnings(action) -> list[str]:
    """Run ``action()`` and return the warnings it emitted as ``'Category: message'`` lines.

    Lets a notebook *show* a warning (such as the non-leaf ``.grad`` one) as data,
    instead of letting it print to stderr.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        action()
    return [f"{w.category.__name__}: {_first_sentence(str(w.message))}" for w in caught]


def _first_sentence(message: str) -> str:
    first = message.split(". ")[0].rstrip()
    return first if first.endswith((".", ")", "!", "?")) else first + "."


def finite_difference(f, x, eps: float = 1e-3):
    """Central finite differences of a scalar function ``f`` at tensor ``x`` (float64).

    The third way to check a gradient, after by hand and by autograd.
    """
    import torch

    x = x.detach().to(torch.float64)
    grad = torch.zeros_like(x)
    flat = grad.view(-1)
    for i in range(x.numel()):
        step = torch.zeros_like(x).view(-1)
        step[i] = eps
        step = step.view_as(x)
        flat[i] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


def assert_close(actual, expected, rtol: float = 1.3e-6, atol: float = 1e-5) -> None:
    """Raise AssertionError unless two tensors have the same shape and close values.

    The check the notebooks make against hand-computed and finite-difference gradients: the
    tolerance rule of ``torch.testing.assert_close`` (``|a - e| <= atol + rtol * |e|``, float32
    defaults) on values compared in float64, without the 2 s that its first call spends
    importing ``torch.distributed``.
    """
    import torch

    a = torch.as_tensor(actual).detach().to(torch.float64)
    e = torch.as_tensor(expected).detach().to(torch.float64)
    if a.shape != e.shape:
        raise AssertionError(_("shapes differ: {actual} and {expected}", actual=tuple(a.shape),
                               expected=tuple(e.shape)))
    if not torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
        worst = (a - e).abs().max().item()
        raise AssertionError(_("values differ by up to {worst:.3g} (allowed: {atol:g} + "
                               "{rtol:g} * |expected|):\n{actual}\n{expected}", worst=worst,
                               atol=atol, rtol=rtol, actual=a.tolist(), expected=e.tolist()))
