"""Interactive explorers of autograd graphs, with static twins (first used in lesson 01).

``GraphExplorer("basics")`` shows a scenario's graph and a table of its tensors;
its controls change the live torch computation (``requires_grad`` of the inputs,
``detach()``, ``retain_grad()``, ``no_grad()``, a hook, ``backward()``, the theme)
and every change re-runs the scenario with real torch and redraws.
``BackwardStepper("basics")`` walks through ``backward()`` one backward function
at a time, in the order torch itself ran them (recorded with ``Node`` pre-hooks
and hooks), showing which gradient arrives where and which ones are stored.

A *scenario* is a small recipe of steps (name = expression), re-executed on every
change. Both widgets have a static twin (``.static_figure()``); when ipywidgets is
missing or ``NBGRADER_EXECUTION`` is set (nbgrader autograding), displaying a widget
shows a PNG of that figure and the table instead.

Redraws put PNG bytes into the output area (``out.outputs = ()`` then
``append_display_data``): ``clear_output`` + ``plt.show()`` sometimes left a stale
figure in JupyterLab (see BROWSER.md).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import math
import os
from dataclasses import dataclass, field

from course import themes
from course.i18n import _, is_chinese

__all__ = ["Step", "Scenario", "Controls", "Run", "SCENARIOS", "run_scenario",
           "GraphExplorer", "BackwardStepper", "static_mode", "picture_size", "picture_sizes",
           "explain"]

NONE = "(none)"


@dataclass(frozen=True)
class Step:
    """One line of a recipe: ``name = expr``.

    ``kind`` is ``"input"`` (a leaf the learner can toggle; ``requires_grad`` is its
    starting value), ``"module"`` (an ``nn.Module``; its parameters become inputs)
    or ``"op"`` (a computed tensor).
    """

    name: str
    expr: str
    kind: str = "op"
    requires_grad: bool = False


@dataclass(frozen=True)
class Scenario:
    """A named recipe whose ``output`` step is the tensor ``backward()`` starts from."""

    name: str
    title: str
    steps: tuple[Step, ...]
    output: str
    seed: int = 0

    def step_names(self, kind: str | None = None) -> list[str]:
        return [s.name for s in self.steps if kind is None or s.kind == kind]


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("basics", "e = (a + b) * (a * b)", (
        Step("a", "torch.tensor(2.0)", "input", True),
        Step("b", "torch.tensor(3.0)", "input", True),
        Step("c", "a + b"),
        Step("d", "a * b"),
        Step("e", "c * d"),
    ), output="e"),
    Scenario("kitchen", "bread = sigmoid(flour * 0.5 + water)", (
        Step("flour", "torch.tensor(2.0)", "input", True),
        Step("water", "torch.tensor(3.0)", "input", False),
        Step("dough", "flour * 0.5 + water"),
        Step("bread", "dough.sigmoid()"),
    ), output="bread"),
    Scenario("parcel", "final = (input_package * w1).sum()", (
        Step("w1", "torch.randn(5)", "input", True),
        Step("w2", "torch.randn(5)", "input", True),
        Step("input_package", "torch.randn(5)", "input", False),
        Step("processed", "input_package * w1"),
        Step("final", "processed.sum()"),
    ), output="final"),
    Scenario("sequential", "loss = model(x).pow(2).mean()", (
        Step("x", "torch.randn(4, 3)", "input", False),
        Step("model", "nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))", "module"),
        Step("y", "model(x)"),
        Step("loss", "y.pow(2).mean()"),
    ), output="loss"),
)}


@dataclass
class Controls:
    """What the learner changed: each field names a step (or is ``None``)."""

    requires_grad: dict[str, bool] = field(default_factory=dict)
    detach: str | None = None     # replace this tensor by .detach() before it is used
    retain: str | None = None     # call .retain_grad() on it
    no_grad: str | None = None    # compute this step inside torch.no_grad()
    hook: str | None = None       # register a hook that records the gradient passing
    backward: bool = False        # call output.backward() at the end


@dataclass
class Run:
    """One execution of a scenario: the live tensors, the graph, and what happened."""

    tensors: dict            # learner name -> tensor (module parameters as model.0.weight)
    namespace: dict          # what build_graph names things from
    output: object
    graph: object
    hook_seen: list = field(default_factory=list)   # gradients the hook saw
    messages: list = field(default_factory=list)    # errors torch raised, as text


def static_mode() -> bool:
    """True when widgets cannot be live: nbgrader autograding, the course site's build
    (``COURSE_STATIC``, set by ``course.static_states.enable``) or no ipywidgets."""
    if os.environ.get("NBGRADER_EXECUTION") or os.environ.get("COURSE_STATIC"):
        return True
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return True
    return False


def scenario_inputs(scenario: Scenario) -> dict[str, bool]:
    """The toggleable leaves of a scenario and their starting ``requires_grad``."""
    import torch
    from torch import nn

    found = {}
    for s in scenario.steps:
        if s.kind == "input":
            found[s.name] = s.requires_grad
        elif s.kind == "module":
            module = eval(s.expr, {"torch": torch, "nn": nn})  # course-authored recipe
            found.update((f"{s.name}.{p}", True) for p, _ in module.named_parameters())
    return found


@functools.lru_cache(maxsize=1024)
def _uses(expr: str) -> frozenset[str]:
    return frozenset(n.id for n in ast.walk(ast.parse(expr, mode="eval"))
                     if isinstance(n, ast.Name))


@functools.lru_cache(maxsize=1024)
def _compiled(expr: str):
    """A recipe step's expression, compiled once (a scenario re-runs at every click)."""
    return compile(expr, "<recipe>", "eval")


def run_scenario(scenario: Scenario | str, controls: Controls | None = None) -> Run:
    """Execute a scenario's recipe with real torch under ``controls``; build its graph."""
    import torch
    from torch import nn

    from course.graph import _quiet_grad, add_constant_input, build_graph

    scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    controls = controls or Controls()
    # the CPU generator only: torch.manual_seed also sets the random seed of every lazily initialised device
    # (CUDA, XPU, MTIA), each formatting a stack trace, about 1 ms a run
    torch.random.default_generator.manual_seed(scenario.seed)
    env: dict = {}
    tensors: dict = {}
    messages: list[str] = []
    seen: list = []
    for s in scenario.steps:
        no_grad = torch.no_grad() if controls.no_grad == s.name else contextlib.nullcontext()
        with no_grad:
            value = eval(_compiled(s.expr), {"torch": torch, "nn": nn}, dict(env))  # recipe
        if s.kind == "module":
            for pname, p in value.named_parameters():
                p.requires_grad_(controls.requires_grad.get(f"{s.name}.{pname}", True))
                tensors[f"{s.name}.{pname}"] = p
            env[s.name] = value
            continue
        if s.kind == "input":
            value.requires_grad_(controls.requires_grad.get(s.name, s.requires_grad))
        if controls.detach == s.name:
            value = value.detach()
        if controls.retain == s.name:
            _attempt(messages, f"{s.name}.retain_grad()", value.retain_grad)
        if controls.hook == s.name:
            _attempt(messages, f"{s.name}.register_hook(...)", value.register_hook,
                     lambda g, name=s.name: seen.append((name, g.detach().clone())))
        env[s.name] = value
        tensors[s.name] = value
    output = env[scenario.output]
    # The graph is built before backward(), which frees what the functions saved: a constant
    # torch saved (x in model(x)) is then found where torch uses it, the first Linear.
    graph = build_graph(output, namespace=env)
    if controls.backward:
        target = output if output.dim() == 0 else output.sum()
        _attempt(messages, f"{scenario.output}.backward()", target.backward)
        for d in graph.nodes.values():
            if d["kind"] != "function" and d.get("tensor") is not None:
                d["grad"] = _quiet_grad(d["tensor"])
    # Constants torch kept no trace of (water in flour*0.5 + water), from the recipe,
    # walking back so that a no-grad chain (everything switched off) shows whole. A
    # constant already drawn into one of the step's own functions is not drawn again.
    for s in reversed(scenario.steps):
        if s.kind == "op" and s.name in graph:
            mine = _step_functions(graph, s.name)
            for used in sorted(_uses(s.expr) & set(tensors)):
                if not tensors[used].requires_grad:
                    if used in graph and any(v in mine for v in graph.successors(used)):
                        continue
                    add_constant_input(graph, used, s.name, tensors[used])
    return Run(tensors, env, output, graph, seen, messages)


def picture_size(scenario: Scenario | str, controls: Controls | None = None,
                 theme: str = "logistics") -> tuple:
    """One figure size (inches) for every picture an explorer of ``scenario`` shows in
    ``theme`` (see :func:`picture_sizes`)."""
    return picture_sizes(scenario, controls)[themes.check_theme(theme)]


def picture_sizes(scenario: Scenario | str, controls: Controls | None = None,
                  theme_names=None) -> dict:
    """``theme -> (w, h)``: one figure size (inches) per theme (those of ``theme_names``,
    default all) for every picture an explorer of ``scenario`` shows.

    The largest :func:`course.draw.figure_size` over the states one click away from
    ``controls`` (each ``requires_grad`` flipped, all off, each ``detach``/``no_grad``
    choice), with room in the legend for every mark the controls can add: the picture
    keeps its size while the learner clicks, so nothing below it jumps. A theme switch
    changes every word, and the size with them.
    """
    scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
    return _sizes_of(_sizing_graphs(scenario, controls), scenario.title,
                     theme_names or themes.THEMES)


def _sizing_graphs(scenario: Scenario, controls: Controls | None = None) -> list:
    """The graphs of the states :func:`picture_sizes` measures, with the marks a later click
    can add (retain_grad, a hook) drawn in."""
    base = controls or Controls(requires_grad=scenario_inputs(scenario))
    rg = dict(base.requires_grad)
    states = [Controls(requires_grad=rg)]
    states += [Controls(requires_grad={**rg, n: not v}) for n, v in rg.items()]
    states.append(Controls(requires_grad=dict.fromkeys(rg, False)))
    # detach() of an input draws what requires_grad off draws (measured above), and so
    # does detach() of a computed tensor what no_grad() around its step draws (either way
    # the step's value is a tensor without history): those states are not run twice
    states += [Controls(requires_grad=rg, no_grad=n) for n in scenario.step_names("op")]
    graphs = []
    for c in states:
        g = run_scenario(scenario, c).graph
        tensors = [n for n, d in g.nodes(data=True) if d["kind"] != "function"]
        if tensors:  # the marks a later click can add: retain_grad, a hook, gradients
            g.nodes[tensors[-1]].update(retains_grad=True, has_hooks=True)
        graphs.append(g)
    return graphs


def _sizes_of(graphs: list, title: str, theme_names) -> dict:
    from course.draw import figure_size

    sizes = {}
    for theme in theme_names:
        w, h = 0.0, 0.0
        for g in graphs:
            gw, gh = figure_size(g, theme, title, legend_extra=("gradient",))
            w, h = max(w, gw), max(h, gh)
        sizes[theme] = (math.ceil(w * 1000) / 1000, math.ceil(h * 1000) / 1000)  # never less
    return sizes


def explain(message: str, theme: str, output: str) -> str:
    """A torch error message of a run, said first in the theme's words (torch's text kept:
    the checks below read torch's own words and the code that raised, in any language)."""
    name = message.split(".", 1)[0]
    if "backward()" in message and "does not require grad" in message:
        key = "no_backward"
    elif "register_hook" in message:
        key = "no_hook"
    elif "retain_grad" in message:
        key = "no_retain"
    else:
        return message
    return _("{explanation} (torch: {message})",
             explanation=themes.message(theme, key, name=name, output=output), message=message)


def _step_functions(graph, node: str) -> set:
    """The backward functions that made tensor ``node`` in its own step: walking back from it
    through functions, stopping at other tensors (which earlier steps made)."""
    found, todo = set(), [p for p in graph.predecessors(node)
                          if graph.nodes[p]["kind"] == "function"]
    while todo:
        n = todo.pop()
        if n in found:
            continue
        found.add(n)
        todo += [p for p in graph.predecessors(n) if graph.nodes[p]["kind"] == "function"]
    return found


def _attempt(messages: list, what: str, action, *args) -> None:
    """Run ``action``; a torch error becomes a message for the learner (first sentence)."""
    try:
        action(*args)
    except RuntimeError as exc:
        messages.append(_("{what} raised RuntimeError: {error}", what=what,
                          error=str(exc).splitlines()[0]))


def _png_image(png: bytes):
    """An IPython ``Image`` of a ``course.draw`` PNG, shown at its display width (a 2x PNG at
    half its pixel width: crisp on high-density displays, body-text size at 100 % zoom)."""
    from IPython.display import Image

    from course.draw import display_width

    # unconfined: shown at its own width, never shrunk (course.draw keeps every drawing within
    # the notebook column, so nothing scrolls sideways and the text keeps its size)
    return Image(data=png, format="png", width=display_width(png), unconfined=True)


def _png_widget_output(out, png: bytes) -> None:
    """The reliable redraw: replace the output area's content with one PNG."""
    out.outputs = ()
    out.append_display_data(_png_image(png))


class _Twin:
    """Display logic shared by both widgets: live widget, or the static twin."""

    widget = None

    def static_png(self) -> bytes:  # pragma: no cover - overridden
        raise NotImplementedError

    def _static_html(self) -> str:
        return ""

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        if self.widget is None or static_mode():
            display(_png_image(self.static_png()))
            if self._static_html():
                display(HTML(self._static_html()))
        else:
            display(self.widget)


class GraphExplorer(_Twin):
    """A scenario's live graph and tensor table, with controls that change the computation.

    ``GraphExplorer("basics", theme="logistics")``; scenarios: ``SCENARIOS`` keys or a
    :class:`Scenario`. Python can drive it like the learner does, e.g.
    ``ex.controls["requires_grad"]["a"].value = False`` or ``ex.set(backward=True)``.
    """

    def __init__(self, scenario: Scenario | str = "basics", theme: str = "logistics",
                 dpi: int | None = None):
        self.scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        self.theme = themes.check_theme(theme)
        self.dpi = dpi  # None: course.draw.auto_dpi (2x, within a pixel budget)
        self.state = Controls(requires_grad=scenario_inputs(self.scenario))
        self.run: Run | None = None
        self.png = b""
        self.table_html = ""
        self.controls: dict = {}
        self.sizes: dict[str, tuple] = {}   # theme -> the picture's fixed size (inches)
        self._sizing: list | None = None     # the graphs that size is the largest over
        self._recompute()
        if not static_mode():
            self._build_widgets()
            self._show()

    # -- the model ------------------------------------------------------------------
    def set(self, **changes) -> GraphExplorer:
        """Change controls (``requires_grad={'a': False}``, ``detach='c'``, ``backward=True``,
        ``theme='kitchen'`` ...), re-run the scenario and redraw."""
        for key, value in changes.items():
            if key == "theme":
                self.theme = themes.check_theme(value)
            elif key == "requires_grad":
                self.state.requires_grad.update(value)
            else:
                setattr(self.state, key, None if value == NONE else value)
        self._recompute()
        self._show()
        return self

    def _recompute(self) -> None:
        from course.draw import figure_size, render_png
        from course.facts import tensor_table

        self.run = run_scenario(self.scenario, self.state)
        if self._sizing is None:  # the states measured for the picture's one size
            self._sizing = _sizing_graphs(self.scenario, self.state)
        if self.theme not in self.sizes:  # measured per theme, when first shown
            self.sizes.update(_sizes_of(self._sizing, self.scenario.title, [self.theme]))
        size = self.sizes[self.theme]
        needed = figure_size(self.run.graph, self.theme, self.scenario.title)
        if needed[0] > size[0] or needed[1] > size[1]:  # a state not foreseen: grow once
            size = self.sizes[self.theme] = (max(size[0], needed[0]), max(size[1], needed[1]))
        self.png = render_png(self.run.graph, self.theme, title=self.scenario.title,
                              dpi=self.dpi, size=size)
        self.table_html = tensor_table(self.theme, **self.run.tensors)._repr_html_()

    def status(self) -> str:
        """What torch said in the last run, in the theme's words: errors (with torch's own
        message), and what the hook saw."""
        lines = [explain(m, self.theme, self.scenario.output) for m in self.run.messages]
        lines += [themes.message(self.theme, "hook_saw", name=name,
                                 grad=str(g.flatten().tolist()))
                  for name, g in self.run.hook_seen]
        return "\n".join(lines)

    def static_figure(self, ax=None):
        """The static twin: the current graph as a matplotlib figure (``draw_graph``)."""
        from course.draw import draw_graph

        return draw_graph(self.run.graph, theme=self.theme, ax=ax, title=self.scenario.title)

    def static_png(self) -> bytes:
        return self.png

    def _static_html(self) -> str:
        return self.table_html

    # -- the widgets ----------------------------------------------------------------
    def _build_widgets(self) -> None:
        import ipywidgets as w

        s = self.scenario
        toggles = {}
        for name, flag in self.state.requires_grad.items():
            t = w.Checkbox(value=flag, description=f"{name}.requires_grad", indent=False,
                           layout=w.Layout(width="auto", margin="0 1.2em 0 0"))
            t.add_class(f"ge-requires-grad-{name.replace('.', '-')}")
            t.observe(lambda ch, n=name: self.set(requires_grad={n: ch["new"]}), "value")
            toggles[name] = t
        computed = s.step_names("op")
        tensors_ = [n for n in s.step_names() if n not in s.step_names("module")]

        def dropdown(key, label, options):
            d = w.Dropdown(options=[(_("(none)"), NONE), *((o, o) for o in options)],
                           value=NONE, description=label,
                           style={"description_width": "initial"}, layout=w.Layout(width="auto"))
            d.add_class(f"ge-{key.replace('_', '-')}")
            d.observe(lambda ch: self.set(**{key: ch["new"]}), "value")
            return d

        backward = w.Checkbox(value=False, description=f"{s.output}.backward()", indent=False,
                              layout=w.Layout(width="auto", margin="0 1.2em 0 0"))
        backward.add_class("ge-backward")
        backward.observe(lambda ch: self.set(backward=ch["new"]), "value")
        theme = w.Dropdown(options=themes.theme_options(), value=self.theme,
                           description=_("theme"))
        theme.add_class("ge-theme")
        theme.observe(lambda ch: self.set(theme=ch["new"]), "value")
        self.controls = {
            "requires_grad": toggles,
            "detach": dropdown("detach", _("detach() at"), tensors_),
            "retain": dropdown("retain", _("retain_grad() on"), computed),
            "no_grad": dropdown("no_grad", _("no_grad() around"), computed),
            "hook": dropdown("hook", _("hook on"), tensors_),
            "backward": backward,
            "theme": theme,
        }
        self.figure_out = w.Output()
        self.figure_out.add_class("ge-figure")
        self.table = w.HTML()
        self.table.add_class("ge-table")
        self.status_html = w.HTML()
        self.status_html.add_class("ge-status")
        c = self.controls
        self.widget = w.VBox([
            w.HTML(f"<b>{s.title}</b>"),
            w.HBox(list(toggles.values()), layout=w.Layout(flex_flow="row wrap")),
            w.HBox([c["detach"], c["retain"], c["no_grad"], c["hook"]],
                   layout=w.Layout(flex_flow="row wrap")),
            w.HBox([backward, theme]),
            self.status_html, self.figure_out, self.table,
        ])
        self.widget.add_class("graph-explorer")

    def _show(self) -> None:
        if self.widget is None:
            return
        import html

        _png_widget_output(self.figure_out, self.png)
        self.table.value = self.table_html
        self.status_html.value = f"<pre>{html.escape(self.status())}</pre>" if self.status() else ""


@dataclass
class BackwardEvent:
    """One backward function running, as torch reported it."""

    number: int
    node: str                 # graph node name (``mul``, ``accumulate(a)``)
    torch_class: str
    arriving: list            # gradient(s) w.r.t. the function's output(s)
    sent: list                # (graph node that receives it, gradient) per input
    stored_in: str | None     # tensor whose .grad keeps the arriving gradient, else None
    tensor: str | None        # the named tensor this gradient belongs to, if any


def record_backward(scenario: Scenario | str, controls: Controls | None = None):
    """Run a scenario's backward with hooks on every backward function.

    Returns ``(graph, events)``: the graph (built before backward, so saved
    constants are still visible) with final ``.grad`` values, and the
    :class:`BackwardEvent` list in the order torch ran the functions.
    """
    from course.graph import _quiet_grad

    controls = Controls(**{**(controls or Controls()).__dict__, "backward": False})
    run = run_scenario(scenario, controls)
    g = run.graph
    arriving: dict[str, list] = {}
    order: list[tuple[str, list]] = []
    handles = []
    for n, d in g.nodes(data=True):
        if d["kind"] != "function":
            continue
        fn = d["node"]
        handles.append(fn.register_prehook(
            lambda go, n=n: arriving.__setitem__(n, [_clone(x) for x in go])))
        handles.append(fn.register_hook(
            lambda gi, go, n=n: order.append((n, [_clone(x) for x in gi]))))
    out = run.output
    (out if out.dim() == 0 else out.sum()).backward()
    for h in handles:
        h.remove()
    for d in g.nodes.values():
        if d["kind"] != "function":
            d["grad"] = _quiet_grad(d["tensor"])
    events = []
    for i, (n, grads_in) in enumerate(order, start=1):
        d = g.nodes[n]
        by_input = {k: p for p, _, e in g.in_edges(n, data=True) if not e.get("recovered")
                    for k in e.get("input_nrs", (e["input_nr"],))}
        sent = [(by_input[k], gr) for k, gr in enumerate(grads_in)
                if gr is not None and k in by_input]
        outs = [s for s in g.successors(n) if g.nodes[s]["kind"] != "function"]
        if d["torch_class"] == "AccumulateGrad":
            leaf = next(iter(g.predecessors(n)))
            tensor, stored = leaf, leaf
        else:
            tensor = outs[0] if outs else None
            stored = tensor if tensor and g.nodes[tensor].get("retains_grad") else None
        events.append(BackwardEvent(i, n, d["torch_class"], arriving.get(n, []), sent, stored,
                                    tensor))
    return g, events


def _clone(x):
    return None if x is None else x.detach().clone()


def _join(items: list[str]) -> str:
    """A list of clauses (each one message) as one text: ``", "``, or ``"，"`` in Chinese."""
    return ("，" if is_chinese() else ", ").join(items)


def _sentences(*sentences: str) -> str:
    """Whole sentences (each one message, with its full stop) one after another: separated by
    a space, none in Chinese."""
    return ("" if is_chinese() else " ").join(sentences)


class BackwardStepper(_Twin):
    """Step through ``backward()`` one backward function at a time, in torch's own order.

    ``BackwardStepper("basics", theme="logistics")``; ``.next()`` / ``.prev()`` from
    Python, or the buttons. ``.events`` holds what torch reported.
    """

    def __init__(self, scenario: Scenario | str = "basics", theme: str = "logistics",
                 controls: Controls | None = None, dpi: int | None = None):
        from course.draw import figure_size

        self.scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        self.theme = themes.check_theme(theme)
        self.dpi = dpi  # None: course.draw.auto_dpi (2x, within a pixel budget)
        self.graph, self.events = record_backward(self.scenario, controls)
        self.position = 0
        self.png = b""
        # one size for every step, so the picture does not jump while stepping
        sizes = [figure_size(self._graph_at(k), self.theme, self.scenario.title)
                 for k in range(len(self.events) + 1)]
        self.size = (max(w for w, _ in sizes), max(h for _, h in sizes))
        self._render()
        if not static_mode():
            self._build_widgets()
            self._show()

    @property
    def order(self) -> list[str]:
        """Graph node names in the order torch ran them."""
        return [e.node for e in self.events]

    def next(self) -> BackwardStepper:
        """Show one more step (stops at the last)."""
        return self.goto(self.position + 1)

    def prev(self) -> BackwardStepper:
        """Show one step less (stops at the start)."""
        return self.goto(self.position - 1)

    def goto(self, position: int) -> BackwardStepper:
        """Show the graph after ``position`` backward functions have run."""
        self.position = max(0, min(len(self.events), position))
        self._render()
        self._show()
        return self

    def describe(self, position: int | None = None) -> str:
        """The step in words: what arrives, what is sent on, what is kept."""
        from course.draw import format_grad

        k = self.position if position is None else position
        term = functools.partial(themes.term, self.theme)
        out, n = self.scenario.output, len(self.events)
        if k == 0:
            if self.theme == "technical":
                return _("Before backward: {output}.backward() starts with gradient 1 at "
                         "{output}. {n} steps, order recorded from torch.", output=out, n=n)
            return _("Before backward ({backward}): {output}.backward() starts with gradient 1 "
                     "at {output}. {n} steps, order recorded from torch.",
                     backward=term("backward"), output=out, n=n)
        e = self.events[k - 1]
        arriving = ", ".join(format_grad(g) for g in e.arriving if g is not None) or "-"
        sent = _join([_("{grad} to {node}", grad=format_grad(g), node=p) for p, g in e.sent])
        step = {"k": k, "n": n, "node": e.node, "torch_class": e.torch_class,
                "arriving": arriving, "tensor": e.tensor, "sent": sent}
        if e.tensor and e.sent:
            text = _("Step {k}/{n}: {node} ({torch_class}) receives {arriving} (gradient of "
                     "{tensor}); sends {sent}.", **step)
        elif e.tensor:
            text = _("Step {k}/{n}: {node} ({torch_class}) receives {arriving} (gradient of "
                     "{tensor}).", **step)
        elif e.sent:
            text = _("Step {k}/{n}: {node} ({torch_class}) receives {arriving}; sends {sent}.",
                     **step)
        else:
            text = _("Step {k}/{n}: {node} ({torch_class}) receives {arriving}.", **step)
        if e.stored_in:
            d = self.graph.nodes[e.stored_in]
            if d["kind"] == "parameter":
                kept = _("Stored in {name}.grad (a {parameter}).", name=e.stored_in,
                         parameter=term("parameter"))
            else:
                kept = _("Stored in {name}.grad (kept by the {retained}).", name=e.stored_in,
                         retained=term("retained"))
            return _sentences(text, kept)
        if e.tensor:
            kind = self.graph.nodes[e.tensor]["kind"] if e.tensor in self.graph else None
            if kind in themes.KINDS:
                lost = _("Not stored: {name}.grad stays None (a {kind}: computed, passed on, "
                         "discarded).", name=e.tensor, kind=term(kind))
            else:
                lost = _("Not stored: {name}.grad stays None (computed, passed on, "
                         "discarded).", name=e.tensor)
            return _sentences(text, lost)
        return text

    def _graph_at(self, k: int, final: bool = False):
        g = self.graph.copy()
        # the arrows are the forward pass; the numbers on them travel the other way
        g.graph["caption"] = [(_("the red numbers travel against the arrows: {backward} runs "
                                 "from the output back to the leaves", backward="backward()"), "note")]
        for d in g.nodes.values():
            d.update(grad=None, highlight=False, faded=d["kind"] == "function" and not final)
        for u, v in g.edges:
            g.edges[u, v]["grad"] = None
        for e in self.events[:k]:
            g.nodes[e.node].update(faded=False, step=e.number, highlight=e.number == k and
                                   not final)
            for p, grad in e.sent:
                g.edges[p, e.node]["grad"] = grad
            if e.stored_in:
                g.nodes[e.stored_in]["grad"] = self.graph.nodes[e.stored_in]["grad"]
        return g

    def static_figure(self, ax=None):
        """The static twin: every step numbered, every gradient torch sent, on one figure."""
        from course.draw import draw_graph

        g = self._graph_at(len(self.events), final=True)
        return draw_graph(g, theme=self.theme, ax=ax, title=self._order_title())

    def static_png(self) -> bytes:
        from course.draw import render_png

        g = self._graph_at(len(self.events), final=True)
        return render_png(g, self.theme, title=self._order_title(), dpi=self.dpi)

    def _order_title(self) -> str:
        return _("backward order of {title}", title=self.scenario.title)

    def _static_html(self) -> str:
        import html

        items = "".join(f"<li>{html.escape(self.describe(k))}</li>"
                        for k in range(1, len(self.events) + 1))
        return f'<ol class="bs-order">{items}</ol>'

    def _render(self) -> None:
        from course.draw import render_png

        self.png = render_png(self._graph_at(self.position), self.theme,
                              title=self.scenario.title, dpi=self.dpi, size=self.size)

    def _build_widgets(self) -> None:
        import ipywidgets as w

        self.buttons = {}
        for key, label, step in (("prev", _("◀ back"), -1), ("next", _("next ▶"), 1)):
            b = w.Button(description=label)
            b.add_class(f"bs-{key}")
            b.on_click(lambda _b, step=step: self.goto(self.position + step))
            self.buttons[key] = b
        reset = w.Button(description=_("reset"))
        reset.add_class("bs-reset")
        reset.on_click(lambda _b: self.goto(0))
        self.buttons["reset"] = reset
        self.label = w.HTML()
        self.label.add_class("bs-status")
        self.figure_out = w.Output()
        self.figure_out.add_class("bs-figure")
        self.widget = w.VBox([w.HBox(list(self.buttons.values())), self.label, self.figure_out])
        self.widget.add_class("backward-stepper")

    def _show(self) -> None:
        if self.widget is None:
            return
        import html

        self.label.value = html.escape(self.describe())
        _png_widget_output(self.figure_out, self.png)
