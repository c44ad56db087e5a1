"""One explorer per lesson 02-07: a small live experiment whose controls re-run torch.

Each explorer changes one thing the lesson teaches and shows what torch then does,
in the analogy of the chosen theme (``course.themes``):

=====================  ===========  =====================================================
explorer               lesson       what the controls change
=====================  ===========  =====================================================
``RetainExplorer``     02           ``retain_grad()`` before or after ``backward()``; how
                                    many audits (``.grad`` accumulates)
``SkipPathExplorer``   03           ``identity.detach()`` on the skip path of a residual
                                    stack; how many blocks (the input gradient's norm)
``HookExplorer``       04           a hook on a parameter: on or off, looking, scaling or
                                    clipping; how many passes; ``handle.remove()``
``NoGradExplorer``     05           where ``with torch.no_grad():`` starts and ends in a
                                    training step, and what each line then records
``InplaceExplorer``    06           an in-place edit before or after the multiplication
                                    that saves its input: version counter and error
``DoctorExplorer``     07           ``course.doctor.diagnose`` on a model whose bug you
                                    switch on and off (detach, no_grad, dead ReLU, sigmoid)
=====================  ===========  =====================================================

Every change re-runs the experiment with real torch. The graph explorers draw the live
autograd graph with ``course.draw.render_png`` (the PNG redraw of ``course.widgets``);
the two whose point is a number per layer (03, 07) draw a log-scale chart as SVG
(``course.charts``: crisp at any zoom, a few milliseconds to make). Python drives an explorer as a learner does:
``ex.set(monitor="after")`` or ``ex.controls["monitor"].value = "after"``; ``ex.numbers``
holds what it shows, ``ex.status()`` the sentences.

The picture shows what each control changed, not only the sentences under it: a graph
explorer writes it on the node it concerns (``note``: when the monitor came, what the hook
does, the version mul saved) and under the title (``caption``: the error backward() raised,
what reached ``.grad`` in each pass); tests/test_explorers.py walks every control and compares
what is drawn. The picture sits right under the controls (the theme menu ends their last row;
the live widget shows the picture's title as its heading instead of drawing it), so in a
1400 x 900 window the controls and the picture are on screen together
(tests/browser/test_lab_explorers.py measures it). Under the picture, the code panel and the
sentences sit side by side, each with the room its largest state needs (``CODE_COLS``,
``CODE_LINES``, ``LINES_EM``), so a click never moves anything.

Each one has a static twin, like ``GraphExplorer``: under nbgrader autograding
(``NBGRADER_EXECUTION``) or without ipywidgets, displaying it shows the picture, the
numbers and the code that ran as plain outputs, and ``static_figure()`` returns a
matplotlib figure of the picture.
"""

from __future__ import annotations

import base64
import contextlib
import html
import math
import re
import warnings

from course import themes
from course.charts import matplotlib_chart, svg_chart
from course.i18n import N_, _, is_chinese
from course.widgets import _png_image, _png_widget_output, _Twin, static_mode

__all__ = ["RetainExplorer", "SkipPathExplorer", "HookExplorer", "NoGradExplorer",
           "InplaceExplorer", "DoctorExplorer", "EXPLORERS", "svg_chart", "doctor_patient",
           "patient_source"]

# Words for what a lesson does to the graph, per theme (COURSE.md's table); the kinds of
# tensor and the marks come from course.themes.
WORDS: dict[str, dict[str, str]] = {
    "technical": {
        "audit": "backward()", "audits": "backward() calls", "monitor": "retain_grad()",
        "probe": "hook", "detach": "detach()", "no_grad": "no_grad()",
        "edit": "in-place edit", "version": "version counter", "saved": "a saved tensor",
        "off": "not recorded",
    },
    "logistics": {
        "audit": "audit (backward)", "audits": "audit(s)",
        "monitor": "temporary monitor (retain_grad)", "probe": "inspection probe (hook)",
        "detach": "relabelled with a new waybill (detach)",
        "no_grad": "monitoring switched off (no_grad)", "edit": "repacking (in-place edit)",
        "version": "seal count (version counter)",
        "saved": "the audit's photograph",
        "off": "not recorded: monitoring off",
    },
    "kitchen": {
        "audit": "tracing back (backward)", "audits": "tracing(s)",
        "monitor": "cold-chain warehouse (retain_grad)", "probe": "tasting spoon (hook)",
        "detach": "vacuum-packed (detach)", "no_grad": "recipe notebook closed (no_grad)",
        "edit": "changing the sauce (in-place edit)",
        "version": "batch number (version counter)",
        "saved": "the taster's sample",
        "off": "not recorded: notebook closed",
    },
}


# The same words in the zh-CN edition (the terms of course.themes.GLOSSARY_ZH).
WORDS_ZH: dict[str, dict[str, str]] = {
    "technical": {
        "audit": "backward()", "audits": "次backward()调用", "monitor": "retain_grad()",
        "probe": "钩子", "detach": "detach()", "no_grad": "no_grad()",
        "edit": "原地操作", "version": "版本计数器", "saved": "一个已保存的张量",
        "off": "未记录",
    },
    "logistics": {
        "audit": "物流审计（backward）", "audits": "次物流审计",
        "monitor": "临时监控（retain_grad）", "probe": "质检探头（hook）",
        "detach": "重新贴标、换了新运单（detach）",
        "no_grad": "关闭中转站监控（no_grad）", "edit": "重新打包（原地操作）",
        "version": "封签计数（版本计数器）",
        "saved": "审计拍照留存",
        "off": "未记录：中转站监控已关闭",
    },
    "kitchen": {
        "audit": "溯源（backward）", "audits": "次溯源",
        "monitor": "冷链仓库（retain_grad）", "probe": "试味勺（hook）",
        "detach": "真空包装（detach）", "no_grad": "合上菜谱本（no_grad）",
        "edit": "改动酱料（原地操作）",
        "version": "瓶上的批号（版本计数器）",
        "saved": "试味员留样",
        "off": "未记录：菜谱本已合上",
    },
}


def word(theme: str, key: str) -> str:
    """A word of :data:`WORDS` (:data:`WORDS_ZH` in Chinese), or of the course glossary
    (``course.themes``)."""
    words = (WORDS_ZH if is_chinese() else WORDS)[themes.check_theme(theme)]
    return words[key] if key in words else themes.term(theme, key)


def _join(items) -> str:
    """Items of a list (numbers, names) as one text: ``", "``, or ``"、"`` in Chinese."""
    return ("、" if is_chinese() else ", ").join(items)


def _vec(t, digits: int = 4) -> str:
    """A tensor (or ``None``) as short text: ``[6, -12, 18]``, ``0.25``, ``None``."""
    if t is None:
        return "None"
    values = [float(v) for v in t.detach().flatten().tolist()]
    text = ", ".join(f"{v:.{digits}g}" for v in values)
    return text if t.dim() == 0 else f"[{text}]"


def _torch_error(exc: BaseException) -> str:
    """The first line of a torch error, without the hint torch appends."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first.split(' Hint:')[0]}"


# ---------------------------------------------------------------------------------------
# The shared widget: controls, a picture, the numbers and the code that ran
# ---------------------------------------------------------------------------------------

class _Explorer(_Twin):
    """Base of the lesson explorers: ``compute()`` re-runs torch, the widgets show it.

    A subclass sets ``DEFAULTS`` (the state), ``CSS`` (the widget's class), implements
    ``compute()`` (fills ``numbers``, ``lines``, ``code`` and either ``graph`` or ``svg``)
    and ``_control_widgets()``.
    """

    CSS = "explorer"
    TITLE = ""
    DEFAULTS: dict = {}
    CHOICES: dict = {}   # control -> every value it can take (tests walk every state)
    SIZE_STATES: tuple = ()  # states whose pictures need more room than the start's
    # The code panel's size in every state (columns: a CJK character counts two; lines) and
    # the least height of the sentences beside it (em), so a click never moves the picture:
    # tests/test_explorers.py checks the code of every state fits, and the browser test that
    # the explorer keeps its height while the learner clicks.
    CODE_COLS, CODE_LINES, LINES_EM = 60, 6, 8.0
    _syncing = False

    def __init__(self, theme: str = "logistics", dpi: int | None = None, **state):
        unknown = set(state) - set(self.DEFAULTS)
        if unknown:
            raise TypeError(_("{explorer} has no control {names}; its controls are {controls}",
                              explorer=type(self).__name__, names=sorted(unknown),
                              controls=sorted(self.DEFAULTS)))
        self.theme = themes.check_theme(theme)
        self.dpi = dpi
        self.state = {**self.DEFAULTS, **state}
        self._size: dict[str, tuple[float, float]] = {}  # theme -> picture size so far
        self.widget = None
        self.controls: dict = {}
        self.graph = None      # a course.graph graph to draw, or None for a chart
        self.svg = ""          # the chart, when there is no graph
        self.chart_args: dict = {}  # what the chart shows (course.charts keywords)
        self.png = b""
        self.numbers: dict = {}
        self.lines: list[str] = []
        self.code: list[str] = []
        # live widgets put the picture's title in the explorer's heading (one line less
        # between the controls and the picture); a static picture draws it itself
        self._live = not static_mode()
        self._recompute()
        if self._live:
            self._build_widgets()
            self._show()

    # -- the model ------------------------------------------------------------------
    def set(self, **changes) -> _Explorer:
        """Change controls (names as in ``DEFAULTS``, or ``theme=``), re-run torch, redraw."""
        for key, value in changes.items():
            if key == "theme":
                self.theme = themes.check_theme(value)
            elif key in self.DEFAULTS:
                self.state[key] = value
            else:
                raise TypeError(_("{explorer} has no control {name}",
                                  explorer=type(self).__name__, name=repr(key)))
        self._recompute()
        self._sync_controls()
        self._show()
        return self

    def compute(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _recompute(self) -> None:
        self.graph, self.svg = None, ""
        self.compute()
        self.png = self._render_graph() if self.graph is not None else b""

    def _render_graph(self) -> bytes:
        """``render_png`` of the graph at one size per explorer and theme: the largest of
        the start's picture, the current one and those of ``SIZE_STATES`` (the states that
        need more room than the start; tests/test_layout.py checks that no state needs
        more than these), with room for every mark, so the picture does not jump while the
        learner clicks."""
        from course import draw

        extra = ("gradient", "retained", "hooked")
        kw = {} if self.dpi is None else {"dpi": self.dpi}
        title = None if getattr(self, "_live", False) else self.picture_title()
        w, h = draw.figure_size(self.graph, self.theme, title=title, legend_extra=extra)
        if self.theme not in self._size:  # measured when the theme is first shown
            for state in (self.DEFAULTS, *self.SIZE_STATES):
                other = type(self).__new__(type(self))
                other.theme, other.state = self.theme, {**self.DEFAULTS, **state}
                other.graph, other.svg = None, ""
                other.compute()
                ow, oh = draw.figure_size(
                    other.graph, self.theme, legend_extra=extra,
                    title=None if title is None else other.picture_title())
                w, h = max(w, ow), max(h, oh)
        old_w, old_h = self._size.get(self.theme, (0.0, 0.0))
        self._size[self.theme] = kw["size"] = (max(w, old_w), max(h, old_h))
        return draw.render_png(self.graph, self.theme, title=title, **kw)

    def picture_title(self) -> str:
        return _(self.TITLE)

    def status(self) -> str:
        """What the last run showed, in sentences (plain text: no Markdown marks)."""
        from course.markup import plain

        return "\n".join(plain(line) for line in self.lines)

    # -- static twin ------------------------------------------------------------------
    def static_figure(self, ax=None):
        """The picture as a matplotlib figure (``draw_graph`` for a graph, else the chart)."""
        if self.graph is not None:
            from course.draw import draw_graph

            return draw_graph(self.graph, theme=self.theme, ax=ax, title=self.picture_title())
        return self._chart_figure(ax)

    def _chart_figure(self, ax=None):
        fig = matplotlib_chart(**self.chart_args, ax=ax)
        if is_chinese():  # Chinese labels: the CJK font for what DejaVu Sans lacks
            from matplotlib.text import Text

            from course.draw import _needs_cjk, cjk_families

            for text in fig.findobj(Text):
                if _needs_cjk(text.get_text()):
                    text.set_fontfamily(cjk_families())
        return fig

    def static_png(self) -> bytes:
        if self.png:
            return self.png
        import io

        fig = self.static_figure()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        return buf.getvalue()

    def _numbers_html(self) -> str:
        from course.markup import rich

        items = "".join(f"<li>{rich(line)}</li>" for line in self.lines)
        return f'<ul class="xp-lines" style="margin:0.2em 0">{items}</ul>'

    def _code_html(self) -> str:
        return ('<pre class="xp-code" style="margin:0.2em 0;font-size:12px;line-height:1.35;'
                f"width:{self.CODE_COLS + 1}ch;max-width:100%;min-height:"
                f'{1.35 * self.CODE_LINES:.2f}em;overflow-x:auto">'
                f"{html.escape(chr(10).join(self.code))}</pre>")

    def _picture_html(self) -> str:
        data = base64.b64encode(self.svg.encode()).decode()
        return f'<img class="xp-chart-img" src="data:image/svg+xml;base64,{data}"/>'

    def _static_html(self) -> str:
        return self._numbers_html() + self._code_html()

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        if self.widget is not None and not static_mode():
            display(self.widget)
        elif self.graph is not None:
            display(_png_image(self.png))
            display(HTML(self._static_html()))
        else:
            display(HTML(self._picture_html() + self._static_html()))

    # -- the widgets ----------------------------------------------------------------
    def _control_widgets(self) -> list:  # pragma: no cover - overridden
        """Rows of control widgets; each control is also put in ``self.controls``."""
        raise NotImplementedError

    def _bind(self, key: str, widget):
        """Register ``widget`` as the control of state ``key``: its changes re-run torch."""
        widget.add_class(f"xp-{key.replace('_', '-')}")
        widget.observe(lambda ch: None if self._syncing else self.set(**{key: ch["new"]}),
                       "value")
        self.controls[key] = widget
        return widget

    def _checkbox(self, key: str, description: str):
        import ipywidgets as w

        return self._bind(key, w.Checkbox(value=self.state[key], description=description,
                                          indent=False, layout=w.Layout(width="auto")))

    def _buttons(self, key: str, description: str, options: list[tuple[str, object]]):
        import ipywidgets as w

        return self._bind(key, w.ToggleButtons(
            options=options, value=self.state[key], description=description,
            style={"description_width": "initial", "button_width": "auto"}))

    def _slider(self, key: str, description: str, lo: int, hi: int):
        import ipywidgets as w

        return self._bind(key, w.IntSlider(
            value=self.state[key], min=lo, max=hi, description=description,
            continuous_update=False, style={"description_width": "initial"},
            layout=w.Layout(width="420px")))

    def _build_widgets(self) -> None:
        import ipywidgets as w

        controls = self._control_widgets()
        theme = w.Dropdown(options=themes.theme_options(), value=self.theme,
                           description=_("theme"),
                           layout=w.Layout(width="260px" if is_chinese() else "200px"))
        theme.add_class("xp-theme")
        theme.observe(lambda ch: self.set(theme=ch["new"]), "value")
        self.controls["theme"] = theme
        # the theme ends the last row of controls: one row less between them and the picture
        rows = [w.HBox(row, layout=w.Layout(flex_flow="row wrap", align_items="center",
                                            grid_gap="0 1em"))
                for row in [*controls[:-1], [*controls[-1], theme]]]
        self.figure_out = w.Output()
        self.figure_out.add_class("xp-figure")
        self.chart = w.HTML()
        self.chart.add_class("xp-chart")
        # side by side, never wrapped under each other: the code at its own width, the
        # sentences in the rest, at least LINES_EM high
        self.numbers_html = w.HTML(layout=w.Layout(flex="1 1 0", min_width="0",
                                                   min_height=f"{self.LINES_EM}em"))
        self.numbers_html.add_class("xp-numbers")
        self.code_html = w.HTML(layout=w.Layout(flex="0 1 auto", min_width="0"))
        self.code_html.add_class("xp-code")
        # the picture right under the controls (both fit a 900 px window, so a click and
        # what it changed are seen together), the code and the sentences under it
        self.heading = w.HTML()
        self.widget = w.VBox([
            self.heading, *rows,
            self.figure_out if self.graph is not None else self.chart,
            w.HBox([self.code_html, self.numbers_html],
                   layout=w.Layout(flex_flow="row nowrap", align_items="flex-start",
                                   grid_gap="1.5em")),
        ])
        self.widget.add_class("explorer")
        self.widget.add_class(self.CSS)

    def _sync_controls(self) -> None:
        """Python's ``set()`` moves the widgets too (a widget's own change is a no-op here)."""
        self._syncing = True
        try:
            for key, widget in self.controls.items():
                value = self.theme if key == "theme" else self.state.get(key)
                if widget.value != value:
                    widget.value = value
        finally:
            self._syncing = False

    def _show(self) -> None:
        if self.widget is None:
            return
        title = self.picture_title() if self.graph is not None else _(self.TITLE)
        self.heading.value = f"<b>{html.escape(title)}</b>"
        if self.graph is not None:
            _png_widget_output(self.figure_out, self.png)
        else:
            self.chart.value = self._picture_html()
        self.numbers_html.value = self._numbers_html()
        self.code_html.value = self._code_html()


def _refresh_grads(graph) -> None:
    """Read each tensor node's ``.grad`` again (after ``backward()`` ran on a built graph)."""
    from course.facts import quiet_grad

    for d in graph.nodes.values():
        if d["kind"] != "function":
            g = quiet_grad(d["tensor"])
            d["grad"] = None if g is None else g.detach().clone()


# ---------------------------------------------------------------------------------------
# 02: retain_grad() before or after backward(); .grad accumulating
# ---------------------------------------------------------------------------------------

class RetainExplorer(_Explorer):
    """Lesson 02: a temporary monitor on a transit station, installed before or after the
    audit, and ``.grad`` piling up over repeated audits of the same route.

    The route is section 1's: ``station = parcel * w``, ``cost = (station ** 2).sum()``,
    audited ``audits`` times with ``retain_graph=True``. ``monitor``: ``"none"``,
    ``"before"`` or ``"after"`` (``station.retain_grad()`` before the first audit or after
    the last).
    """

    CSS = "retain-explorer"
    CODE_COLS, CODE_LINES, LINES_EM = 50, 8, 15
    TITLE = N_("cost = (parcel * w) ** 2, summed: a monitor on the station")
    DEFAULTS = {"monitor": "before", "audits": 1}
    SIZE_STATES = ({"monitor": "after"},)  # the longest note on the station
    CHOICES = {"monitor": ("none", "before", "after"), "audits": (0, 1, 2, 3)}

    def compute(self) -> None:
        import torch

        from course.graph import build_graph

        monitor, audits = self.state["monitor"], int(self.state["audits"])
        w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        parcel = torch.tensor([0.5, -1.0, 2.0])
        station = parcel * w
        cost = (station ** 2).sum()
        code = ["w = torch.tensor([1., 2., 3.], requires_grad=True)",
                "parcel = torch.tensor([0.5, -1., 2.])", "station = parcel * w",
                "cost = (station ** 2).sum()"]
        if monitor == "before":
            station.retain_grad()
            code.append("station.retain_grad()")
        for _audit in range(audits):
            cost.backward(retain_graph=True)
        code += ["cost.backward(retain_graph=True)"] * audits
        if monitor == "after":
            station.retain_grad()
            code.append("station.retain_grad()          # " + _("after backward()"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            station_grad = station.grad
        env = {"w": w, "parcel": parcel, "station": station, "cost": cost}
        self.graph = build_graph(cost, namespace=env)
        if monitor != "none":  # the picture says when the monitor came, not only the text
            self.graph.nodes["station"].update(
                note=_("retain_grad() before backward()") if monitor == "before" else
                _("retain_grad() after backward(): kept nothing"),
                note_tone="error" if monitor == "after" and audits else None)
        one = 2 * parcel ** 2 * w.detach()
        self.numbers = {"w.grad": w.grad, "station.grad": station_grad,
                        "station.retains_grad": station.retains_grad,
                        "warned": bool(caught), "one audit": one}
        self.code = code
        t = self.theme
        centre, transit = themes.term(t, "parameter"), themes.term(t, "intermediate")
        grad = themes.term(t, "gradient")
        if t == "technical":
            lines = [_("backward() ran {count} time(s) on the same route.", count=audits)]
        else:
            lines = [_("backward() ran {count} time(s) on the same route: {count} {audits}.",
                       count=audits, audits=word(t, "audits"))]
        if audits == 0:
            lines.append(_("w ({centre}): .grad = None: no {audit} has run yet.",
                           centre=centre, audit=word(t, "audit")))
        else:
            lines.append(_("w ({centre}): {grad} {value} = {count} x {one}: each backward() adds "
                           "its gradient into .grad.", centre=centre, grad=grad,
                           value=_vec(w.grad), count=audits, one=_vec(one)))
        if monitor == "before" and audits:
            lines.append(_("station ({transit}): .grad = {value} = {count} x {one}: the "
                           "{monitor} kept it, and it accumulates too.", transit=transit,
                           value=_vec(station_grad), count=audits,
                           one=_vec(2 * station.detach()), monitor=word(t, "monitor")))
        elif monitor == "before":
            lines.append(_("station ({transit}): .grad = None until the first backward().",
                           transit=transit))
        elif monitor == "after":
            lines.append(_("station ({transit}): .grad = None, retains_grad = {retains}, and no "
                           "warning: the {monitor} came after the {audit} and kept nothing, "
                           "silently.", transit=transit, retains=station.retains_grad,
                           monitor=word(t, "monitor"), audit=word(t, "audit")))
        elif caught:
            lines.append(_("station ({transit}): .grad = None with a UserWarning: computed on "
                           "the way to w, then discarded.", transit=transit))
        else:
            lines.append(_("station ({transit}): .grad = None.", transit=transit))
        self.lines = lines

    def _control_widgets(self) -> list:
        return [[self._buttons("monitor", "station.retain_grad():",
                               [(_("not installed"), "none"), (_("before backward()"), "before"),
                                (_("after backward()"), "after")])],
                [self._slider("audits", _("backward() calls"), 0, 3)]]


# ---------------------------------------------------------------------------------------
# 03: detach() on the skip path of a residual stack
# ---------------------------------------------------------------------------------------

_RESIDUAL: list = []  # [(layers, x0)], made once: lesson 03 section 9's stack


def _residual_stack():
    if not _RESIDUAL:
        import torch
        from torch import nn

        gen_state = torch.random.get_rng_state()
        torch.manual_seed(0)
        layers = [(nn.Linear(16, 16), nn.Linear(16, 16)) for _ in range(20)]
        x0 = torch.randn(4, 16)
        torch.random.set_rng_state(gen_state)  # the learner's random stream is untouched
        _RESIDUAL.append((layers, x0))
    return _RESIDUAL[0]


def residual_input_grads(blocks: int, detach_identity: bool) -> list[float]:
    """Gradient norm at the input of each of ``blocks`` residual blocks (lesson 03's stack).

    ``h = conv2(relu(conv1(h))) + identity`` (or ``+ identity.detach()``), output summed;
    entry 0 is the stack's input ``x``. Uses ``torch.autograd.grad``: no ``.grad`` written.
    """
    import torch

    layers, x0 = _residual_stack()
    h = x0.clone().requires_grad_(True)
    inputs = []
    for conv1, conv2 in layers[:blocks]:
        inputs.append(h)
        identity = h
        h = conv2(conv1(h).relu())
        h = h + (identity.detach() if detach_identity else identity)
    grads = torch.autograd.grad(h.sum(), inputs, allow_unused=True)
    return [0.0 if g is None else g.norm().item() for g in grads]


class SkipPathExplorer(_Explorer):
    """Lesson 03: ``x + identity.detach()`` on the skip path of a residual stack.

    ``blocks``: 1-20 blocks of width 16 (section 9's stack); ``detach``: the bug switched
    on. The chart shows the gradient norm at the input of every block, for the stack with
    the skip path kept and with it detached; the one switched on is drawn bold.
    """

    CSS = "skip-explorer"
    CODE_COLS, CODE_LINES, LINES_EM = 65, 6, 13
    TITLE = N_("Residual stack: gradient norm at the input of each block")
    DEFAULTS = {"blocks": 10, "detach": False}
    CHOICES = {"blocks": tuple(range(1, 21)), "detach": (False, True)}

    def compute(self) -> None:
        blocks, detach = int(self.state["blocks"]), bool(self.state["detach"])
        kept = residual_input_grads(blocks, False)
        cut = residual_input_grads(blocks, True)
        t = self.theme
        grad = themes.term(t, "gradient")
        self.numbers = {"kept": kept, "detached": cut, "x.grad norm": cut[0] if detach
                        else kept[0]}
        shown = cut if detach else kept
        orders = math.log10(kept[0] / cut[0]) if cut[0] > 0 else float("inf")
        skip = "identity.detach()" if detach else "identity"
        self.code = ["h = x                     # " + _("x = torch.randn(4, 16), requires grad"),
                     f"for conv1, conv2 in layers[:{blocks}]:",
                     "    identity = h", "    h = conv2(conv1(h).relu())",
                     f"    h = h + {skip}", "h.sum().backward()   # " + _("then read x.grad.norm()")]
        self.lines = [
            _("{blocks} block(s); the skip path is {detach}.", blocks=blocks,
              detach=word(t, "detach")) if detach else
            _("{blocks} block(s); the skip path is kept.", blocks=blocks),
            _("norm of x's {grad}: {norm:.3g} (skip kept: {kept:.3g}, identity.detach(): "
              "{cut:.3g}).", grad=grad, norm=shown[0], kept=kept[0], cut=cut[0]),
            _("with the detach, x's gradient is {orders:.1f} orders of magnitude smaller",
              orders=orders)
            if math.isfinite(orders) else _("with the detach, no gradient reaches x at all"),
        ]
        legend_cut = _("identity {detach}", detach=word(t, "detach")) if t != "technical" \
            else "x + identity.detach()"
        self.chart_args = dict(
            xlabels=[str(i) for i in range(1, blocks + 1)],
            series=[(_("skip path kept"), kept, "#2f9e44", not detach),
                    (legend_cut, cut, "#e03131", detach)],
            title=_("Residual stack: gradient norm at the input of each block ({blocks} "
                    "blocks)", blocks=blocks),
            xlabel=_("block (1 = the stack's input x)"), ylabel=_("gradient norm"))
        self.svg = svg_chart(**self.chart_args)

    def _control_widgets(self) -> list:
        return [[self._checkbox("detach", _("detach the skip path: h + identity.detach()"))],
                [self._slider("blocks", _("residual blocks"), 1, 20)]]


# ---------------------------------------------------------------------------------------
# 04: a hook on a sorting centre, looking, scaling or clipping, and its handle
# ---------------------------------------------------------------------------------------

_HOOK_ACTIONS = {
    "look": ("lambda g: seen.append(g.clone())", None),
    "scale": ("lambda g: g * 0.1", 0.1),
    "clip": ("lambda g: g.clamp(-1.0, 1.0)", "clip"),
}


class HookExplorer(_Explorer):
    """Lesson 04: a hook on the sorting centre ``w``: on or off, looking, scaling or
    clipping what passes, over several backward passes, with its handle removed or not.

    Each pass builds ``station = w * w`` and runs ``(3 * station).sum().backward()``.
    """

    CSS = "hook-explorer"
    CODE_COLS, CODE_LINES, LINES_EM = 72, 6, 17.5
    TITLE = N_("loss = 3 * w * w, summed: a hook on w")
    DEFAULTS = {"hook": True, "action": "clip", "passes": 2, "remove": False}
    SIZE_STATES = ({"passes": 3, "action": "scale", "remove": True},  # the longest caption
                   {"action": "clip", "remove": True})  # the longest note
    CHOICES = {"hook": (False, True), "action": ("look", "scale", "clip"),
               "passes": (1, 2, 3), "remove": (False, True)}

    def compute(self) -> None:
        import torch

        from course.graph import build_graph

        s = self.state
        passes = int(s["passes"])
        w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
        seen: list = []

        def probe(g):
            seen.append(g.detach().clone())
            if s["action"] == "scale":
                return g * 0.1
            if s["action"] == "clip":
                return g.clamp(-1.0, 1.0)
            return None

        code = ["w = torch.tensor([1., -2., 3.], requires_grad=True)"]
        handle = None
        if s["hook"]:
            handle = w.register_hook(probe)
            body, note = {"look": ("lambda g: None", _("only looks")),
                          "scale": ("lambda g: g * 0.1", _("scales what passes")),
                          "clip": ("lambda g: g.clamp(-1, 1)", _("clips what passes"))
                          }[s["action"]]
            code.append(f"handle = w.register_hook({body})   # {note}")
        station = loss = None
        reached = []  # what each pass added to w.grad, read from torch
        for k in range(passes):
            station = w * w
            loss = (3 * station).sum()
            before = torch.zeros_like(w) if w.grad is None else w.grad.clone()
            loss.backward()
            reached.append(w.grad - before)
            code.append("(3 * (w * w)).sum().backward()")
            if k == 0 and handle is not None and s["remove"]:
                handle.remove()
                code.append("handle.remove()")
        self.graph = build_graph(loss, namespace={"w": w, "station": station, "loss": loss})
        passing = 6 * w.detach()
        if s["hook"]:
            verb = {"look": _("hook: only looks"), "scale": _("hook: \u00d7 0.1"),
                    "clip": _("hook: clips to [-1, 1]")}[s["action"]]
            self.graph.nodes["w"]["note"] = (
                _("{hook}, removed after pass 1", hook=verb) if s["remove"] else verb)
        caption = [(_("w * w uses w twice (\u00d72): each pass sends 2 \u00d7 3 \u00d7 w = "
                      "{passing} to w", passing=_vec(passing)), "note"),
                   (_("w.grad = {terms}: what reached it in each pass",
                      terms=" + ".join(_vec(got) for got in reached)), "note")]
        self.graph.graph["caption"] = caption
        t = self.theme
        probe_word, grad = word(t, "probe"), themes.term(t, "gradient")
        self.numbers = {"w.grad": w.grad, "calls": len(seen), "seen": seen,
                        "passing": passing}
        lines = [_("{passes} backward pass(es); each sends {passing} to w ({parameter}).",
                   passes=passes, passing=_vec(passing), parameter=themes.term(t, "parameter"))]
        if not s["hook"]:
            lines.append(_("no {probe}: w.grad = {grad} = {passes} x {passing}.",
                           probe=probe_word, grad=_vec(w.grad), passes=passes,
                           passing=_vec(passing)))
        else:
            said = {"probe": probe_word, "calls": len(seen)}
            if s["remove"] and passes > 1:
                lines.append({
                    "look": _("the {probe} ran {calls} time(s) and only looked: removed after "
                              "the first pass, it saw nothing of the others.", **said),
                    "scale": _("the {probe} ran {calls} time(s) and replaced what passed by "
                               "g * 0.1: removed after the first pass, it saw nothing of the "
                               "others.", **said),
                    "clip": _("the {probe} ran {calls} time(s) and replaced what passed by "
                              "g.clamp(-1, 1): removed after the first pass, it saw nothing of "
                              "the others.", **said)}[s["action"]])
            else:
                lines.append({
                    "look": _("the {probe} ran {calls} time(s) and only looked.", **said),
                    "scale": _("the {probe} ran {calls} time(s) and replaced what passed by "
                               "g * 0.1.", **said),
                    "clip": _("the {probe} ran {calls} time(s) and replaced what passed by "
                              "g.clamp(-1, 1).", **said)}[s["action"]])
            if t == "technical":
                lines.append(_("w.grad = {grad}: the gradient that reached .grad in each pass, "
                               "added up.", grad=_vec(w.grad)))
            else:
                name = re.split(r" \(|（", grad)[0]   # the analogy's word, without "(gradient)"
                lines.append(_("w.grad = {grad}: the {name} that reached .grad in each pass, "
                               "added up.", grad=_vec(w.grad), name=name))
        self.lines = lines
        self.code = code

    def _control_widgets(self) -> list:
        return [[self._checkbox("hook", _("install the hook: w.register_hook(...)"))],
                [self._checkbox("remove",
                                _("take it off: handle.remove() after the first pass"))],
                [self._buttons("action", _("the hook:"),
                               [(_("only looks"), "look"), (_("scales by 0.1"), "scale"),
                                (_("clips to [-1, 1]"), "clip")])],
                [self._slider("passes", _("backward passes"), 1, 3)]]


# ---------------------------------------------------------------------------------------
# 05: where no_grad() starts and ends in a training step
# ---------------------------------------------------------------------------------------

STEP_LINES = (
    "h = (x * w1).tanh()",
    "loss = (h * w2).sum()",
    "loss.backward()",
    "w1 -= 0.1 * w1.grad",
    "w2 -= 0.1 * w2.grad",
)


class NoGradExplorer(_Explorer):
    """Lesson 05: a five-line training step, with ``with torch.no_grad():`` around the lines
    ``first..last`` (``cover``), or nowhere (``use=False``).

    Each line runs in turn (with recording off inside the block); like a notebook cell, the
    step stops at the first error. The picture is the graph of ``loss``.
    """

    CSS = "nograd-explorer"
    CODE_COLS, CODE_LINES, LINES_EM = 36, 6, 15
    TITLE = N_("a training step, with no_grad() around some lines")
    DEFAULTS = {"use": True, "cover": (4, 5)}
    CHOICES = {"use": (False, True),
               "cover": tuple((a, b) for a in range(1, 6) for b in range(a, 6))}

    def compute(self) -> None:
        import torch

        use = bool(self.state["use"])
        first, last = (int(v) for v in self.state["cover"])
        env = {"torch": torch,
               "x": torch.tensor([1.0, 2.0]),
               "w1": torch.tensor([0.5, -1.0], requires_grad=True),
               "w2": torch.tensor([2.0, 1.0], requires_grad=True)}
        start = {n: env[n].detach().clone() for n in ("w1", "w2")}
        t = self.theme
        recorded, error, code, g = {}, None, [], None
        for k, line in enumerate(STEP_LINES, start=1):
            inside = use and first <= k <= last
            if use and k == first:
                code.append("with torch.no_grad():")
            code.append(("    " if inside else "") + line)
            if error is not None:
                continue
            if line == "loss.backward()":
                g = self._draw_forward(env)  # while the saved tensors still exist
            ctx = torch.no_grad() if inside else contextlib.nullcontext()
            try:
                with ctx:
                    exec(line, {}, env)  # course-authored line
            except (RuntimeError, TypeError) as exc:
                error = (k, _torch_error(exc))
                code[-1] = f"{code[-1]:26} # " + _("raised")
                continue
            name = line.split(" = ")[0] if " = " in line else None
            if name in ("h", "loss"):
                fn = env[name].grad_fn
                recorded[name] = None if fn is None else type(fn).__name__
        tensors = {n: v for n, v in env.items() if isinstance(v, torch.Tensor)}
        updated = {n: not torch.equal(start[n], env[n].detach()) for n in start}
        lines = []
        for name in ("h", "loss"):
            if name in recorded:
                fn = recorded[name]
                lines.append(_("{name}: recorded (grad_fn {fn})", name=name, fn=fn) if fn else
                             _("{name}: {off}, grad_fn None", name=name, off=word(t, "off")))
        grad = themes.term(t, "gradient")
        for n in ("w1", "w2"):
            said = {"name": n, "parameter": themes.term(t, "parameter"), "grad": grad,
                    "value": _vec(tensors[n].grad)}
            lines.append(_("{name} ({parameter}): {grad} {value}, updated", **said)
                         if updated[n] else
                         _("{name} ({parameter}): {grad} {value}, not updated", **said))
        if error:
            lines.append(_("line {line} raised {error}", line=error[0], error=error[1]))
        else:
            lines.append(_("the step ran to the end."))
        self.numbers = {"recorded": recorded, "error": error, "updated": updated,
                        "w1.grad": tensors["w1"].grad, "w2.grad": tensors["w2"].grad,
                        "w1": tensors["w1"].detach().clone(),
                        "w2": tensors["w2"].detach().clone()}
        self.lines, self.code = lines, code
        if g is None:  # the forward pass failed before backward()
            g = self._draw_forward(env)
        _refresh_grads(g)
        # the picture says how the step ended (the graph of loss can be the same either way)
        g.graph["caption"] = (
            [(_("line {line} raised {kind}: the step stopped there", line=error[0],
                kind=error[1].split(":")[0]), "error")] if error else
            [(_("the step ran to the end."), "note")])
        self.graph = g

    @staticmethod
    def _draw_forward(env: dict):
        """The graph of ``loss`` (or of what the step made so far), drawn before backward()
        frees the tensors the operations saved: a constant (``x``, or ``h`` made under
        no_grad()) is drawn entering the operation that saved it, which torch tells."""
        import torch

        from course.graph import build_graph

        tensors = {n: v for n, v in env.items() if isinstance(v, torch.Tensor)}
        out = tensors.get("loss", tensors.get("h"))
        if out is None:  # the first line failed: draw the two sorting centres alone
            out = tensors["w1"]
        return build_graph(out, namespace=tensors)

    def picture_title(self) -> str:
        first, last = self.state["cover"]
        if self.state["use"]:
            return _("the graph of loss, no_grad() around lines {first}-{last}", first=first,
                     last=last)
        return _("the graph of loss, no no_grad()")

    def _control_widgets(self) -> list:
        import ipywidgets as w

        cover = self._bind("cover", w.IntRangeSlider(
            value=tuple(self.state["cover"]), min=1, max=len(STEP_LINES), step=1,
            description=_("no_grad() covers lines"), continuous_update=False,
            style={"description_width": "initial"}, layout=w.Layout(width="420px")))
        return [[self._checkbox("use", _("wrap some lines in with torch.no_grad():"))], [cover]]

    def _sync_controls(self) -> None:
        self.state["cover"] = tuple(self.state["cover"])
        super()._sync_controls()


# ---------------------------------------------------------------------------------------
# 06: an in-place edit before or after the operation that saves its input
# ---------------------------------------------------------------------------------------

class InplaceExplorer(_Explorer):
    """Lesson 06: ``h.add_(1)`` before ``y = h * w`` or after it (between the forward pass
    and ``backward()``), or the out-of-place ``h = h + 1``; ``mul`` saves ``h`` for ``w``'s
    gradient. Shows the version counter and what ``backward()`` does.

    ``edit``: ``"none"``, ``"before"`` or ``"after"``; ``inplace``: ``h.add_(1)`` if true,
    else ``h = h + 1``.
    """

    CSS = "inplace-explorer"
    CODE_COLS, CODE_LINES, LINES_EM = 54, 7, 17.5
    TITLE = N_("y = h * w saves h; then h is edited")
    DEFAULTS = {"edit": "after", "inplace": True}
    CHOICES = {"edit": ("none", "before", "after"), "inplace": (False, True)}
    SIZE_STATES = ({"edit": "before", "inplace": False},)  # h = h + 1 drawn as a step
    TITLES = {"none": N_("y = h * w, h not edited"), "before": N_("h edited, then y = h * w"),
              "after": N_("y = h * w, then h edited")}

    def compute(self) -> None:
        import torch

        from course.graph import build_graph

        edit, inplace = self.state["edit"], bool(self.state["inplace"])
        edit_line = "h.add_(1)" if inplace else "h = h + 1"
        x = torch.tensor([0.5, 1.5], requires_grad=True)
        w = torch.tensor([3.0, 4.0], requires_grad=True)
        h = x * 2
        code = ["x = torch.tensor([0.5, 1.5], requires_grad=True)",
                "w = torch.tensor([3., 4.], requires_grad=True)",
                f"{'h = x * 2':26} # " + _("h at version {v}", v=h._version)]

        def do_edit(h):
            h = h.add_(1) if inplace else h + 1
            code.append(f"{edit_line:26} # " + _("h at version {v}", v=h._version))
            return h

        if edit == "before":
            h = do_edit(h)
        y = h * w
        used, saved_version = h, h._version
        code.append(f"{'y = h * w':26} # " + _("mul saves h, at version {v}", v=saved_version))
        loss = y.sum()
        code.append("loss = y.sum()")
        # drawn before the edit after the forward pass, so h is still the tensor mul saved
        g = build_graph(loss, namespace={"x": x, "w": w, "h": used, "y": y, "loss": loss})
        if edit == "after":
            h = do_edit(h)
        code.append("loss.backward()")
        error = None
        try:
            loss.backward()
        except RuntimeError as exc:
            error = _torch_error(exc)
            code[-1] = f"{'loss.backward()':26} # " + _("raised")
        _refresh_grads(g)
        changed = used._version != saved_version
        g.nodes["h"].update(
            note=_("saved at version {saved}, now {now}", saved=saved_version,
                   now=used._version),
            note_tone="error" if changed else None)
        if error:
            g.graph["caption"] = [(_("backward() raised: h changed after mul saved it"),
                                   "error")]
        else:
            g.graph["caption"] = [(_("backward() ran: mul used the h it saved"), "note")]
        self.graph = g
        t = self.theme
        self.numbers = {"saved version": saved_version, "version now": used._version,
                        "error": error, "x.grad": x.grad, "w.grad": w.grad,
                        "h used": used.detach().clone()}
        lines = [_("y = h * w: mul saved h for backward ({saved}) when h's {version} was "
                   "{saved_version}; at backward() it is {now}.", saved=word(t, "saved"),
                   version=word(t, "version"), saved_version=saved_version,
                   now=used._version)]
        if error:
            lines.append(_("backward() raised {error}", error=error))
            lines.append(_("the edit came after mul saved h: make a new tensor instead "
                           "(untick the box: h = h + 1), or edit before y = h * w."))
        else:
            lines.append(_("backward() ran: x.grad = {x_grad} (= 2 * w), w.grad = {w_grad} "
                           "(= the h that y used).", x_grad=_vec(x.grad), w_grad=_vec(w.grad)))
        self.lines, self.code = lines, code

    def picture_title(self) -> str:
        return _(self.TITLES[self.state["edit"]])

    def _control_widgets(self) -> list:
        return [[self._buttons("edit", _("the edit of h:"),
                               [(_("nowhere"), "none"), (_("before y = h * w"), "before"),
                                (_("after y = h * w"), "after")])],
                [self._checkbox("inplace", _("in place: h.add_(1) (untick: h = h + 1)"))]]


# ---------------------------------------------------------------------------------------
# 07: the doctor on a model whose bug you switch on and off
# ---------------------------------------------------------------------------------------

BUGS = {  # shown through _()
    "none": N_("no bug"),
    "detach": N_("detach() after layer 1"),
    "no_grad": N_("no_grad() around layer 1"),
    "dead_relu": N_("dead ReLU in layer 1 (bias -10)"),
    "sigmoid": N_("sigmoid instead of ReLU"),
}
# The doctor's statuses (course.doctor.STATUSES) as the chart's legend names them in the zh-CN
# edition: the status itself (what the doctor's report and the lesson write) after its meaning.
STATUS_NAMES_ZH = {
    "ok": "健康（ok）", "frozen": "已冻结（frozen）", "unreachable": "不可达（unreachable）",
    "unused": "未使用（unused）", "detached": "被detach()切断（detached）",
    "no_grad": "在no_grad()中计算（no_grad）", "cut": "没有路线（cut）",
    "none": "梯度为None（none）", "nonfinite": "非有限值（nonfinite）",
    "zero": "梯度为零（zero）", "vanishing": "梯度消失（vanishing）",
    "exploding": "梯度爆炸（exploding）", "stale_grad": "过期的.grad（stale_grad）",
    "frozen_in_optimizer": "已冻结却在优化器中（frozen_in_optimizer）",
    "not_in_optimizer": "不在优化器中（not_in_optimizer）",
    "no_history": "没有历史（no_history）", "inplace": "原地操作（inplace）",
}


def status_name(status: str) -> str:
    """A doctor's status as the chart's legend shows it: the status, or its zh-CN name."""
    return STATUS_NAMES_ZH.get(status, status) if is_chinese() else status


def _said(detail: str, analogy: bool) -> str:
    """The first sentence of a doctor's explanation, and with ``analogy`` its last one (the
    analogy's): sentences end with ". " in English, with "。" in Chinese."""
    if "。" in detail:
        parts = [p for p in re.split(r"(?<=。)", detail) if p.strip()]
        said = parts[0].strip()
        if analogy and len(parts) > 1:
            said += parts[-1].strip()
        return said
    parts = detail.split(". ")
    said = parts[0].rstrip(".") + "."
    if analogy and len(parts) > 1:
        said += " " + parts[-1].rstrip(".") + "."
    return said
_STATUS_COLOURS = {"ok": "#2f9e44", "vanishing": "#74c0fc", "exploding": "#e03131",
                   "nonfinite": "#e03131"}


def patient_source(bug: str) -> str:
    """The loss function of :func:`doctor_patient` with ``bug``, as Python source."""
    act = "torch.sigmoid" if bug == "sigmoid" else "torch.relu"
    first = {
        "detach": f"    h = {act}(model[0](x)).detach()        # " + _("the bug: detach()") + "\n",
        "no_grad": "    with torch.no_grad():                   # " + _("the bug: no_grad()") + "\n"
                   f"        h = {act}(model[0](x))\n",
    }.get(bug, f"    h = {act}(model[0](x))\n")
    return ("def loss_fn():\n" + first
            + f"    for layer in model[1:-1]:\n        h = {act}(layer(h))\n"
            + "    return F.mse_loss(model[-1](h), y)\n")


def doctor_patient(bug: str, layers: int):
    """The model and the loss function of :class:`DoctorExplorer`: ``layers`` Linear layers
    of width 16 (the last maps to 1, Kaiming-initialised) with ReLU (or sigmoid) between,
    and one bug."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    if bug not in BUGS:
        raise ValueError(f"bug must be one of {list(BUGS)}, not {bug!r}")
    gen_state = torch.random.get_rng_state()
    torch.random.default_generator.manual_seed(1)
    model = nn.ModuleList([nn.Linear(16, 16) for _ in range(layers - 1)] + [nn.Linear(16, 1)])
    for layer in model[:-1]:  # an initialisation suited to ReLU: healthy without a bug
        nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    torch.random.set_rng_state(gen_state)  # the learner's random stream is untouched
    if bug == "dead_relu":
        with torch.no_grad():
            model[0].bias.fill_(-10.0)
    namespace = {"torch": torch, "F": F, "model": model, "x": x, "y": y}
    # compiled as "patient.py", so the doctor names the patient's own lines (stable, and
    # shown to the learner in the explorer's code listing)
    exec(compile(patient_source(bug), "patient.py", "exec"), namespace)  # course-authored
    loss_fn = namespace["loss_fn"]
    return model, loss_fn


class DoctorExplorer(_Explorer):
    """Lesson 07: ``course.doctor.diagnose`` on a small network whose bug you choose.

    ``bug``: a key of :data:`BUGS`; ``layers``: 2-20 Linear layers (numbered 1..N from the
    input; only the Linear layers count). The doctor runs with ``vanishing=1e-4``.
    """

    CSS = "doctor-explorer"
    CODE_COLS, CODE_LINES, LINES_EM = 73, 9, 24
    TITLE = N_("The gradient-flow doctor on a network with one bug")
    DEFAULTS = {"bug": "detach", "layers": 6}
    CHOICES = {"bug": tuple(BUGS), "layers": tuple(range(2, 21))}
    VANISHING = 1e-4

    def compute(self) -> None:
        from course.doctor import diagnose

        bug, layers = self.state["bug"], int(self.state["layers"])
        model, loss_fn = doctor_patient(bug, layers)
        report = diagnose(model, step=loss_fn, theme=self.theme, vanishing=self.VANISHING)
        self.report = report
        per_layer = report.layers()  # (name, norm, status) per Linear layer, input first
        norms = [n for _, n, _ in per_layer]
        statuses = [s for _, _, s in per_layer]
        self.numbers = {"norms": norms, "statuses": statuses, "ok": report.ok,
                        "findings": [(f.param, f.status) for f in report.findings]}
        act = "sigmoid" if bug == "sigmoid" else "relu"
        setup = {"dead_relu": ["model[0].bias.fill_(-10.0)                # "
                               + _("the bug: dead ReLU")],
                 "sigmoid": ["# " + _("the bug: sigmoid between the layers (more layers, more "
                                      "fading)")]}
        self.code = [f"model = nn.ModuleList({layers} x nn.Linear)   # "
                     + _("{act} between them", act=act),
                     *setup.get(bug, []),
                     "# patient.py",
                     *patient_source(bug).splitlines(),
                     f"report = diagnose(model, step=loss_fn, vanishing=1e-4, "
                     f"theme={self.theme!r})"]
        # counted as the bullets below group them: parameters (a weight and a bias per
        # layer) in layers, never a bare "24 findings" above one bullet
        flagged = {(f.param or "").rpartition(".")[0] for f in report.findings}
        lines = [_("{bug}, {layers} layers: the doctor flagged {count} parameter(s) in "
                   "{flagged} layer(s).", bug=_(BUGS[bug]), layers=layers,
                   count=len(report.findings), flagged=len(flagged))]
        groups: dict[str, list] = {}  # status -> findings, in the doctor's order
        for f in report.findings:
            groups.setdefault(f.status, []).append(f)
        for status, found in list(groups.items())[:3]:
            names = sorted({(f.param or "").rpartition(".")[0] for f in found},
                           key=lambda n: int(n) if n.isdigit() else -1)
            numbers = [f"{int(n) + 1}" for n in names if n.isdigit()]
            if len(numbers) > 1:
                where = _("layers {numbers}", numbers=_join(numbers))
            elif numbers:
                where = _("layer {number}", number=numbers[0])
            else:
                where = _("the graph")
            said = _said(found[0].detail, self.theme != "technical")
            lines.append(_("[{status}] {where}: {said}", status=status, where=where, said=said))
        if report.ok:
            lines.append(_("every layer gets a healthy gradient."))
        self.lines = lines
        from course.doctor import bar_status

        shown = [bar_status(n, s, report.thresholds) for n, s in zip(norms, statuses,
                                                                      strict=True)]
        bars = [(n, _STATUS_COLOURS.get(s, "#868e96"), status_name(s))
                for n, s in zip(norms, shown, strict=True)]
        self.chart_args = dict(
            xlabels=[str(i) for i in range(1, layers + 1)], series=[], bars=bars,
            title=_("Gradient norm per layer: {bug}", bug=_(BUGS[bug])),
            xlabel=_("layer (1 = nearest the input)"), ylabel=_("gradient norm"),
            threshold=("梯度消失" if is_chinese() else "vanishing", self.VANISHING))
        self.svg = svg_chart(**self.chart_args)

    def _control_widgets(self) -> list:
        import ipywidgets as w

        bug = self._bind("bug", w.Dropdown(options=[(_(v), k) for k, v in BUGS.items()],
                                           value=self.state["bug"], description=_("the bug:"),
                                           style={"description_width": "initial"},
                                           layout=w.Layout(width="auto")))
        return [[bug, self._slider("layers", _("layers"), 2, 20)]]


EXPLORERS = {"02_retain_grad": RetainExplorer, "03_detach": SkipPathExplorer,
             "04_hooks": HookExplorer, "05_no_grad": NoGradExplorer,
             "06_inplace": InplaceExplorer, "07_gradient_clinic": DoctorExplorer}
