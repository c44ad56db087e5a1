"""Layouts that never lie and fit: no edge of any graph the course draws runs through (or
behind) a node it does not connect, no two nodes overlap, and no drawing is wider than the
notebook column.

The graphs are every state of every explorer scenario (``course.widgets.SCENARIOS``, the
scenarios of ``course.explorers`` when that module exists, and the scenarios the source
notebooks define), every step of every ``BackwardStepper`` of those scenarios and its static
twin, every state of every graph explorer of ``course.explorers`` (lessons 02-07), and every
``draw_graph`` call of the source notebooks (their cells run up to the last figure, with
``draw_graph``, ``GraphExplorer`` and ``BackwardStepper`` recording instead of drawing).
Each is laid out in every theme (the words change the boxes' widths) and checked
geometrically on ``course.draw.graph_geometry``, the same geometry the drawing uses: every
segment of every edge's polyline against the bounds (shape, outline, marks, gradient text)
of every node other than the edge's two ends.
"""

from __future__ import annotations

import contextlib
import functools
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import pytest  # noqa: E402

from course import draw, themes, widgets  # noqa: E402
from course.widgets import Controls, Scenario, run_scenario, scenario_inputs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "source").glob("*/*.ipynb"))
RECORDED = ("draw_graph(", "GraphExplorer(", "BackwardStepper(")


def segment_hits_box(p, q, box, eps: float = 1e-6) -> bool:
    """Whether the segment ``p``-``q`` meets the interior of ``box`` (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box[0] + eps, box[1] + eps, box[2] - eps, box[3] - eps
    (px, py), (qx, qy) = p, q
    dx, dy = qx - px, qy - py
    t0, t1 = 0.0, 1.0
    for den, num in ((-dx, px - x0), (dx, x1 - px), (-dy, py - y0), (dy, y1 - py)):
        if den == 0:
            if num < 0:
                return False
        else:
            t = num / den
            if den < 0:
                t0 = max(t0, t)
            else:
                t1 = min(t1, t)
            if t0 > t1:
                return False
    return True


def problems(g, theme: str) -> list[str]:
    """Every edge segment that crosses a node it does not connect, and every node overlap."""
    geo = draw.graph_geometry(g, theme)
    found = []
    for (u, v), pts in geo.edges.items():
        for p, q in zip(pts, pts[1:], strict=False):
            for n, box in geo.bounds.items():
                if n not in (u, v) and segment_hits_box(p, q, box):
                    found.append(f"edge {u} -> {v} runs through {n}")
    nodes = list(geo.bounds)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = geo.bounds[a], geo.bounds[b]
            if ax0 < bx1 and bx0 < ax1 and ay0 < by1 and by0 < ay1:
                found.append(f"nodes {a} and {b} overlap")
    return found


# ------------------------------------------------------------------ the graphs the course draws


def explorer_scenarios() -> dict[str, Scenario]:
    """Every scenario an explorer of the course shows: the widgets', course.explorers', and
    the ones the source notebooks build."""
    found = {f"widgets:{k}": s for k, s in widgets.SCENARIOS.items()}
    try:
        import course.explorers as ex_module
    except ImportError:
        ex_module = None
    if ex_module is not None:
        for name, value in vars(ex_module).items():
            values = value.values() if isinstance(value, dict) else (
                value if isinstance(value, list | tuple) else [value])
            for i, s in enumerate(values):
                if isinstance(s, Scenario):
                    found[f"explorers:{name}:{getattr(s, 'name', i)}"] = s
    for nb, calls in notebook_figures().items():
        for i, (kind, arg) in enumerate(calls):
            if kind != "draw_graph" and isinstance(arg, Scenario):
                found[f"{nb}:{kind}:{i}"] = arg
    return found


def scenario_states(scenario: Scenario) -> list[Controls]:
    """The states one click away from the start, and each of them after backward()."""
    rg = scenario_inputs(scenario)
    tensors = [n for n in scenario.step_names() if n not in scenario.step_names("module")]
    states = [Controls(requires_grad=rg)]
    states += [Controls(requires_grad={**rg, n: not v}) for n, v in rg.items()]
    states.append(Controls(requires_grad=dict.fromkeys(rg, False)))
    states += [Controls(requires_grad=rg, detach=n) for n in tensors]
    states += [Controls(requires_grad=rg, no_grad=n) for n in scenario.step_names("op")]
    states += [Controls(requires_grad=rg, retain=n) for n in scenario.step_names("op")]
    states += [Controls(requires_grad=rg, hook=n) for n in tensors]
    return states + [Controls(**{**c.__dict__, "backward": True}) for c in states]


def _noop(*args, **kwargs):
    return None


@functools.cache
def notebook_figures() -> dict[str, list[tuple[str, object]]]:
    """``notebook -> [(what, graph or scenario)]`` for every figure call in its source cells.

    The code cells run in order in one namespace, up to the last cell with a figure call,
    with the checker's entry points (``checker``, ``grade``, ``verify``) answering nothing:
    they need a clean process and draw nothing.
    """
    import sys
    import types

    from course import draw as draw_module
    from course import widgets as widgets_module

    out: dict[str, list] = {}
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        cells = [c.source for c in nb.cells if c.cell_type == "code"]
        last = max((i for i, c in enumerate(cells) if any(r in c for r in RECORDED)),
                   default=-1)
        if last < 0:
            continue
        calls: list = []

        def record_graph(outputs_or_graph, namespace=None, *args, _calls=calls, **kwargs):
            _calls.append(("draw_graph", draw_module._as_graph(outputs_or_graph, namespace)))
            return plt.figure()

        def recorder(kind, _calls=calls):
            def record(scenario="basics", *args, **kwargs):
                if isinstance(scenario, str):
                    scenario = widgets_module.SCENARIOS[scenario]
                _calls.append((kind, scenario))
            return record

        # the checker's entry points answer nothing: a stand-in module while the cells run
        # (the real one does not let its functions be rebound)
        stand_in = types.ModuleType("autograder")
        stand_in.checker, stand_in.grade, stand_in.verify = (lambda lesson: _noop), _noop, _noop
        real_autograder = sys.modules.get("autograder")
        patches = {(draw_module, "draw_graph"): record_graph,
                   (widgets_module, "GraphExplorer"): recorder("GraphExplorer"),
                   (widgets_module, "BackwardStepper"): recorder("BackwardStepper")}
        saved = {k: getattr(*k) for k in patches}
        namespace = {"display": _noop, "__name__": "__main__"}
        try:
            sys.modules["autograder"] = stand_in
            for (module, attr), value in patches.items():
                setattr(module, attr, value)
            for i, source in enumerate(cells[:last + 1]):
                figure_cell = any(r in source for r in RECORDED)
                code = "\n".join(line for line in source.splitlines()
                                 if not line.lstrip().startswith(("%", "!")))
                try:
                    with contextlib.redirect_stdout(io.StringIO()), \
                            contextlib.redirect_stderr(io.StringIO()):
                        exec(compile(code, f"{path.name}[{i}]", "exec"), namespace)
                except Exception:
                    if figure_cell:
                        raise
        finally:
            if real_autograder is None:
                sys.modules.pop("autograder", None)
            else:
                sys.modules["autograder"] = real_autograder
            for (module, attr), value in saved.items():
                setattr(module, attr, value)
            plt.close("all")
        expected = sum(c.count(r) for c in cells for r in RECORDED)
        assert len(calls) == expected, (path.name, len(calls), expected)
        out[path.parent.name] = calls
    return out


def lesson_explorer_graphs() -> list[tuple[str, object, str]]:
    """``(name, graph, title)`` for every state of every graph explorer of course.explorers
    (every combination of its controls' values, ``CHOICES``), computed without drawing."""
    import itertools

    from course import explorers

    found = []
    for lesson, cls in explorers.EXPLORERS.items():
        ex = cls.__new__(cls)
        ex.theme, ex.state = "logistics", dict(cls.DEFAULTS)
        keys = list(cls.CHOICES)
        for values in itertools.product(*(cls.CHOICES[k] for k in keys)):
            ex.state.update(zip(keys, values, strict=True))
            ex.graph, ex.svg = None, ""
            ex.compute()
            if ex.graph is None:  # a chart explorer (an SVG chart, not a graph)
                break
            found.append((f"{lesson}:{cls.__name__}:{dict(ex.state)}", ex.graph,
                          ex.picture_title()))
    return found


def all_graphs() -> list[tuple[str, object, str | None]]:
    """``(name, graph, title)`` of every graph the course draws."""
    graphs = []
    for nb, calls in notebook_figures().items():
        graphs += [(f"{nb}:draw_graph:{i}", g, None) for i, (kind, g) in enumerate(calls)
                   if kind == "draw_graph"]
    for name, scenario in explorer_scenarios().items():
        for i, c in enumerate(scenario_states(scenario)):
            graphs.append((f"{name}:state{i}", run_scenario(scenario, c).graph, scenario.title))
        with contextlib.suppress(RuntimeError):  # a scenario whose output cannot backward
            stepper = widgets.BackwardStepper.__new__(widgets.BackwardStepper)
            stepper.scenario = scenario
            stepper.graph, stepper.events = widgets.record_backward(scenario)
            for k in range(len(stepper.events) + 1):
                graphs.append((f"{name}:step{k}", stepper._graph_at(k), scenario.title))
            graphs.append((f"{name}:backward order", stepper._graph_at(
                len(stepper.events), final=True), f"backward order of {scenario.title}"))
    return graphs + lesson_explorer_graphs()


@functools.cache
def every_graph() -> tuple:
    return tuple(all_graphs())


# ------------------------------------------------------------------------------------ tests


def test_every_figure_of_the_notebooks_is_collected():
    figures = notebook_figures()
    assert "01_leaves" in figures and "03_detach" in figures
    kinds = [k for calls in figures.values() for k, _ in calls]
    assert kinds.count("draw_graph") >= 3 and "GraphExplorer" in kinds
    assert any(name.startswith("08_capstone") for name in explorer_scenarios())


@pytest.mark.parametrize("theme", themes.THEMES)
def test_no_edge_runs_through_a_node(theme):
    graphs = every_graph()
    assert len(graphs) > 150
    assert any(":RetainExplorer:" in name for name, _, _ in graphs)
    bad = {name: p for name, g, _ in graphs if (p := problems(g, theme))}
    assert not bad, bad


COLUMN_PX = 848  # JupyterLab's output area in a 1280 px window with the file browser open


@pytest.mark.parametrize("theme", themes.THEMES)
def test_every_drawing_fits_the_notebook_column(theme):
    """No picture of the course scrolls sideways: every graph, in every theme, with the title
    and the legend room its explorer keeps, is at most COLUMN_WIDTH wide (what render_png
    and draw_graph make the figure), so at most COLUMN_PX CSS pixels at 100 % zoom; its
    text keeps its size (wide graphs wrap into bands instead)."""
    assert draw.COLUMN_WIDTH * draw.DISPLAY_DPI <= 840 <= COLUMN_PX
    too_wide = {}
    for name, g, title in every_graph():
        w, _ = draw.figure_size(g, theme, title,
                                legend_extra=("gradient", "retained", "hooked"))
        if w > draw.COLUMN_WIDTH + 1e-9:
            too_wide[name] = round(w * draw.DISPLAY_DPI)
    assert not too_wide, too_wide


def test_an_explorer_picture_never_grows_while_clicking():
    """The one size a GraphExplorer measures up front (``picture_sizes``) holds every state a
    click leads to (each control changed once, before and after backward()), in every
    theme: the picture never jumps."""
    for name, scenario in explorer_scenarios().items():
        sizes = widgets.picture_sizes(scenario)
        for c in scenario_states(scenario):
            g = run_scenario(scenario, c).graph
            for theme in themes.THEMES:
                w, h = draw.figure_size(g, theme, scenario.title)
                assert w <= sizes[theme][0] + 1e-6 and h <= sizes[theme][1] + 1e-6, (
                    name, c, theme)


def test_a_lesson_explorer_picture_never_grows_while_clicking():
    """A lesson explorer (02-07) sizes its picture by its start and its ``SIZE_STATES``
    (and the states shown so far): no other state needs more room, in any theme, so the
    picture never grows while the learner clicks."""
    from course import explorers

    extra = ("gradient", "retained", "hooked")
    graphs = lesson_explorer_graphs()
    for cls in explorers.EXPLORERS.values():
        start = f"{cls.__name__}:{dict(cls.DEFAULTS)}"
        mine = [(name, g, title) for name, g, title in graphs if f":{cls.__name__}:" in name]
        if not mine:
            continue
        sizing = [start] + [f"{cls.__name__}:{ {**cls.DEFAULTS, **st} }"
                            for st in cls.SIZE_STATES]
        measured = [m for m in mine if any(m[0].endswith(s) for s in sizing)]
        assert len(measured) == len(sizing), cls
        for theme in themes.THEMES:
            w0 = max(draw.figure_size(g, theme, t, legend_extra=extra)[0] for _, g, t in measured)
            h0 = max(draw.figure_size(g, theme, t, legend_extra=extra)[1] for _, g, t in measured)
            for name, g, title in mine:
                w, h = draw.figure_size(g, theme, title, legend_extra=extra)
                assert w <= w0 + 1e-9 and h <= h0 + 1e-9, (name, theme, (w, h), (w0, h0))


def test_the_rendered_pictures_are_as_wide_as_their_layout():
    """What the learner gets: the widest graph of each source, rendered as the widgets do
    (render_png) and as a static figure (draw_graph), shows at most COLUMN_WIDTH wide."""
    widest: dict[str, tuple] = {}
    for name, g, title in every_graph():
        source = name.split(":")[0]
        if source not in widest or len(g) > len(widest[source][0]):
            widest[source] = (g, title)
    assert len(widest) >= 8
    limit = round(draw.COLUMN_WIDTH * draw.DISPLAY_DPI)
    for source, (g, title) in widest.items():
        png = draw.render_png(g, "kitchen", title=title)
        assert draw.display_width(png) <= limit, source
    g, title = widest["08_capstone"]
    fig = draw.draw_graph(g, theme="kitchen", title=title)
    try:
        assert fig.get_figwidth() <= draw.COLUMN_WIDTH + 1e-9
    finally:
        plt.close(fig)


def test_the_check_sees_an_edge_through_a_node():
    """The check itself: a straight line through a box is caught, one beside it is not."""
    box = (1.0, 1.0, 2.0, 1.5)
    assert segment_hits_box((0.0, 1.2), (3.0, 1.3), box)
    assert segment_hits_box((1.5, 0.0), (1.5, 3.0), box)
    assert not segment_hits_box((0.0, 1.6), (3.0, 1.6), box)
    assert not segment_hits_box((0.0, 0.0), (0.9, 2.0), box)


def test_lesson_03_skip_edge_goes_straight_into_add():
    """Lesson 03, "x + f(x)": the skip edge from x's AccumulateGrad meets only AddBackward0
    (it was drawn through w2)."""
    (skip_kept, _cut) = [g for k, g in notebook_figures()["03_detach"] if k == "draw_graph"][-2:]
    [(u, v)] = [(u, v) for u, v in skip_kept.edges
                if skip_kept.nodes[u].get("torch_class") == "AccumulateGrad"
                and next(iter(skip_kept.predecessors(u))) == "x"
                and skip_kept.nodes[v].get("torch_class") == "AddBackward0"]
    for theme in themes.THEMES:
        geo = draw.graph_geometry(skip_kept, theme)
        pts = geo.edges[(u, v)]
        assert not any(segment_hits_box(p, q, geo.bounds["w2"])
                       for p, q in zip(pts, pts[1:], strict=False))
        assert not problems(skip_kept, theme)


def test_every_drawn_graph_has_torchs_edges():
    """Every graph the course draws (notebook figures, every explorer state, every stepper
    step, every lesson explorer state) has exactly the edges of torch's ``grad_fn`` graph:
    each ``next_functions[i]`` of each backward function is an edge into it (a value used
    twice is one edge with both inputs), and nothing else enters a function except the
    constants a formula used (dashed)."""
    from test_graph import assert_edges_match_next_functions

    checked = 0
    for _name, g, _title in every_graph():
        if not any(d.get("node") is not None for _, d in g.nodes(data=True)):
            continue  # a graph without torch's functions (everything switched off)
        assert_edges_match_next_functions(g)
        checked += 1
    assert checked > 100
