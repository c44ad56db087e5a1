"""Explorers on a page without a kernel: a handful of precomputed states to step through.

The course site (``autograder site``, docs/site.md) executes the lessons once, at build
time, with no browser attached. There an explorer cannot re-run torch when the reader
clicks, so :func:`enable` (called by a hidden first cell of each site notebook) makes every
explorer display a small set of states computed right then with real torch: its static
twin first (what it shows with widgets off), then, for example, each step of a
``BackwardStepper`` or each choice of an explorer's main control. The page's own script
(``site/_static/site-states.js``, no Python, no network) shows one state at a time;
without scripts the reader still sees the first state, the static twin.

Nothing here changes an explorer: each state is computed on a fresh explorer (or, for the
stepper, by stepping and stepping back), and drawn at one size per explorer, so the
picture does not jump while the reader steps through the states.
"""

from __future__ import annotations

import base64
import html
import os

from course.i18n import N_, _

__all__ = ["enable", "states_html", "explorer_states", "STATE_ENV", "EXPLORER_STATES"]

# Set in the site's kernels: ``course.widgets.static_mode()`` is then true, so explorers
# build no ipywidgets (nothing for a page without a kernel to show, and no widget state,
# which would make the page load a widget manager).
STATE_ENV = "COURSE_STATIC"

# The states a lesson explorer shows on the site, after its own: the choices of its main
# controls, one change at a time from its defaults (the whole product of every control is
# hundreds of states; these are the ones its lesson talks about). The labels are shown
# through _() (``identity.detach()`` is code, the same in every language).
EXPLORER_STATES: dict[str, list[tuple[str, dict]]] = {
    "RetainExplorer": [(N_("monitor before backward()"), {"monitor": "before"}),
                       (N_("monitor after backward()"), {"monitor": "after"}),
                       (N_("no monitor"), {"monitor": "none"}),
                       (N_("before, 2 backward() calls"), {"monitor": "before", "audits": 2}),
                       (N_("before, 3 backward() calls"), {"monitor": "before", "audits": 3}),
                       (N_("before, no backward() yet"), {"monitor": "before", "audits": 0})],
    "SkipPathExplorer": [(N_("skip path kept"), {"detach": False}),
                         ("identity.detach()", {"detach": True}),
                         (N_("kept, 20 blocks"), {"blocks": 20}),
                         (N_("detached, 20 blocks"), {"detach": True, "blocks": 20})],
    "HookExplorer": [(N_("hook clips"), {"action": "clip"}),
                     (N_("hook only looks"), {"action": "look"}),
                     (N_("hook scales by 0.1"), {"action": "scale"}),
                     (N_("no hook"), {"hook": False}),
                     (N_("clips, removed after pass 1"), {"action": "clip", "remove": True}),
                     (N_("scales, 3 passes"), {"action": "scale", "passes": 3})],
    "NoGradExplorer": [(N_("no_grad() around lines 4-5"), {"cover": (4, 5)}),
                       (N_("no no_grad()"), {"use": False}),
                       (N_("around lines 1-2"), {"cover": (1, 2)}),
                       (N_("around line 3 (backward)"), {"cover": (3, 3)}),
                       (N_("around lines 1-5"), {"cover": (1, 5)})],
    "InplaceExplorer": [(N_("h.add_(1) after y = h * w"), {"edit": "after"}),
                        (N_("h.add_(1) before y = h * w"), {"edit": "before"}),
                        (N_("no edit"), {"edit": "none"}),
                        (N_("h = h + 1 after y = h * w"), {"edit": "after", "inplace": False})],
    "DoctorExplorer": [(N_("detach() after layer 1"), {"bug": "detach"}),
                       (N_("no bug"), {"bug": "none"}),
                       (N_("no_grad() around layer 1"), {"bug": "no_grad"}),
                       (N_("dead ReLU"), {"bug": "dead_relu"}),
                       (N_("sigmoid, 6 layers"), {"bug": "sigmoid"}),
                       (N_("sigmoid, 12 layers"), {"bug": "sigmoid", "layers": 12})],
}


def enable() -> None:
    """Display every explorer of this kernel as its precomputed states (the site's kernels).

    Registers :func:`display_states` with IPython's display formatter for the explorers'
    base class (a registered printer takes precedence over ``_ipython_display_``), and sets
    :data:`STATE_ENV` so that explorers made from now on build no widgets.
    """
    os.environ[STATE_ENV] = "1"
    from IPython import get_ipython

    from course.widgets import _Twin

    shell = get_ipython()
    if shell is None:  # not in IPython: nothing displays anything
        return
    shell.display_formatter.ipython_display_formatter.for_type(_Twin, display_states)


def display_states(obj) -> None:
    """Show ``obj`` (an explorer) as its states: one HTML output."""
    from IPython.display import HTML, display

    display(HTML(states_html(obj)))


def explorer_states(obj) -> tuple[str, list[tuple[str, str]]]:
    """``(mode, [(label, html), ...])``: the states of ``obj`` to show, its own first.

    ``mode`` is ``"steps"`` (back / next, the stepper) or ``"choices"`` (one button each).
    """
    from course.explorers import _Explorer
    from course.widgets import BackwardStepper, GraphExplorer

    if isinstance(obj, BackwardStepper):
        return "steps", _stepper_states(obj)
    if isinstance(obj, GraphExplorer):
        return "choices", _graph_states(obj)
    if isinstance(obj, _Explorer):
        return "choices", _explorer_states(obj)
    return "choices", [(_("as in the lesson"), _img(obj.static_png()) + obj._static_html())]


def states_html(obj) -> str:
    """The states of ``obj`` as one HTML block: a control bar and one panel per state,
    every panel but the first ``hidden`` (the page's script switches them)."""
    mode, states = explorer_states(obj)
    kind = type(obj).__name__
    if mode == "steps":
        # the stepper's own buttons' words (its arrows as character references)
        back = html.escape(_("◀ back")).replace("◀", "&#9664;")
        forward = html.escape(_("next ▶")).replace("▶", "&#9654;")
        previous_step, next_step = html.escape(_("previous step")), html.escape(_("next step"))
        bar = (f'<button type="button" class="site-prev" aria-label="{previous_step}">{back}'
               f'</button><span class="site-label" aria-live="polite">'
               f'{html.escape(states[0][0])}</span><button type="button" class="site-next" '
               f'aria-label="{next_step}">{forward}</button>')
    else:
        bar = "".join(
            f'<button type="button" class="site-pick" data-k="{k}" '
            f'aria-pressed="{"true" if k == 0 else "false"}">{html.escape(label)}</button>'
            for k, (label, _) in enumerate(states))
    panels = "".join(
        f'<div class="site-state" data-k="{k}" data-label="{html.escape(label)}"'
        f'{" hidden" if k else ""}>{body}</div>' for k, (label, body) in enumerate(states))
    note = (_("Precomputed with torch when this page was built: step through backward() as "
              "torch ran it.") if mode == "steps" else
            _("Precomputed with torch when this page was built: pick a state. In JupyterLab "
              "every control is live."))
    return (f'<div class="site-states site-{mode}" data-explorer="{kind}" '
            f'data-count="{len(states)}"><div class="site-bar" role="group">{bar}</div>'
            f'<p class="site-note">{note}</p>{panels}</div>')


def _img(png: bytes, alt: str | None = None) -> str:
    from course.draw import display_width

    alt = _("the explorer's picture") if alt is None else alt
    data = base64.b64encode(png).decode()
    return (f'<img class="site-picture" alt="{html.escape(alt)}" width="{display_width(png)}" '
            f'src="data:image/png;base64,{data}"/>')


def _pre(text: str) -> str:
    return f'<pre class="site-status">{html.escape(text)}</pre>' if text else ""


# -- the stepper: every step of backward, in torch's order ---------------------------------

def _stepper_states(st) -> list[tuple[str, str]]:
    start = st.position
    states = [(_("the whole backward order ({n} steps)", n=len(st.events)),
               _img(st.static_png(), _("every step of backward, numbered"))
               + st._static_html())]
    try:
        for k in range(len(st.events) + 1):
            st.goto(k)
            label = (_("step {k}/{n}", k=k, n=len(st.events)) if k else
                     _("before backward()"))
            states.append((label, _img(st.png, label) + _pre(st.describe())))
    finally:
        st.goto(start)
    return states


# -- the graph explorer: its main toggles ---------------------------------------------------

def _graph_states(ex) -> list[tuple[str, str]]:
    """The explorer as shown, then its main toggles, one at a time, each with backward()."""
    from course.widgets import NONE, Controls, GraphExplorer

    s = ex.scenario
    start = dict(ex.state.requires_grad)
    computed = s.step_names("op")
    first_input = next(iter(start), None)
    mid = computed[0] if computed else None
    last = computed[-1] if len(computed) > 1 else None
    changes = [(f"{s.output}.backward()", {"backward": True})]
    if first_input is not None:
        changes.append((f"{first_input}.requires_grad = {not start[first_input]}, backward()",
                        {"requires_grad": {first_input: not start[first_input]},
                         "backward": True}))
    if mid:
        changes += [(f"{mid}.retain_grad(), backward()", {"retain": mid, "backward": True}),
                    (f"{mid}.detach(), backward()", {"detach": mid, "backward": True}),
                    (_("hook on {name}, backward()", name=mid),
                     {"hook": mid, "backward": True})]
    if last:
        changes.append((_("no_grad() around {name}, backward()", name=last),
                        {"no_grad": last, "backward": True}))
    twin = GraphExplorer(s, theme=ex.theme, dpi=ex.dpi)
    own = Controls(**{**ex.state.__dict__, "requires_grad": dict(start)})

    def full(change: dict) -> dict:
        base = {"requires_grad": dict(start), "detach": NONE, "retain": NONE,
                "no_grad": NONE, "hook": NONE, "backward": False}
        return {**base, **change, "requires_grad": {**start, **change.get("requires_grad", {})}}

    shown = {k: (NONE if v is None else v) for k, v in own.__dict__.items()}
    wanted = [(_("as in the lesson"), shown)]
    wanted += [(label, full(c)) for label, c in changes]
    for _label, state in wanted:  # first pass: the picture's one size grows to fit every state
        twin.set(**state)
    out = []
    for label, state in wanted:
        twin.set(**state)
        out.append((label, _img(twin.png, label) + _pre(twin.status()) + twin.table_html))
    return out


# -- the lesson explorers: the choices of their main controls ---------------------------------

def _explorer_states(ex) -> list[tuple[str, str]]:
    """The explorer as shown (labelled by its curated name when it is one of them), then
    the curated states of :data:`EXPLORER_STATES`."""
    cls = type(ex)
    curated = [(_(label), {**cls.DEFAULTS, **change})
               for label, change in EXPLORER_STATES.get(cls.__name__, [])]
    own = next((label for label, state in curated if state == ex.state), _("as in the lesson"))
    wanted = [(own, dict(ex.state))] + [(label, state) for label, state in curated
                                        if state != ex.state]
    twin = cls(theme=ex.theme, dpi=ex.dpi, **ex.state)
    if twin.graph is not None:  # a graph: one size over every state, as the widget keeps it
        for _label, state in wanted:
            twin.set(**state)
    out = []
    for label, state in wanted:
        twin.set(**state)
        picture = _img(twin.png, label) if twin.graph is not None else twin._picture_html()
        out.append((label, picture + twin._static_html()))
    return out
