"""The lesson explorers (course/explorers.py): the numbers they show are torch's, every
control changes the state and the picture, and the static twins work."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from course import explorers as X  # noqa: E402
from course import themes  # noqa: E402


@pytest.fixture(autouse=True)
def live_widgets(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)


def picture(ex) -> bytes | str:
    return ex.png or ex.svg


def click(ex, key, value):
    """What a learner's click does: change the widget's value."""
    before = picture(ex), ex.status()
    ex.controls[key].value = value
    state = ex.theme if key == "theme" else ex.state[key]
    assert state == (tuple(value) if isinstance(value, list) else value)
    assert (picture(ex), ex.status()) != before, f"{key}={value!r} changed nothing shown"


# -- 02 ------------------------------------------------------------------------------------

def route():
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    parcel = torch.tensor([0.5, -1.0, 2.0])
    station = parcel * w
    return w, station, (station ** 2).sum()


@pytest.mark.parametrize("monitor,audits", [("before", 1), ("before", 3), ("after", 2),
                                            ("none", 2), ("before", 0)])
def test_retain_explorer_matches_torch(monitor, audits):
    ex = X.RetainExplorer(monitor=monitor, audits=audits)
    w, station, cost = route()
    if monitor == "before":
        station.retain_grad()
    for _ in range(audits):
        cost.backward(retain_graph=True)
    if monitor == "after":
        station.retain_grad()
    n = ex.numbers
    if audits:
        torch.testing.assert_close(n["w.grad"], w.grad)
        assert f"{audits} x" in ex.status()
    else:
        assert n["w.grad"] is None
    stored = station.grad if monitor != "none" else None
    if stored is None:
        assert n["station.grad"] is None
    else:
        torch.testing.assert_close(n["station.grad"], stored)
    assert n["warned"] == (monitor == "none")  # after retain_grad(): no warning, silently
    assert ex.graph.nodes["station"]["retains_grad"] == (monitor != "none")


def test_retain_explorer_controls():
    ex = X.RetainExplorer()
    assert ex.widget is not None and "retain-explorer" in ex.widget._dom_classes
    click(ex, "monitor", "after")
    assert "silently" in ex.status()
    click(ex, "audits", 3)
    click(ex, "theme", "kitchen")
    assert "market ingredient" in ex.status()


# -- 03 ------------------------------------------------------------------------------------

def reference_stack_grads(blocks, detach):
    """Lesson 03, section 9's stack, as the notebook builds it."""
    from torch import nn

    torch.manual_seed(0)
    layers = [(nn.Linear(16, 16), nn.Linear(16, 16)) for _ in range(20)]
    x0 = torch.randn(4, 16)
    h = x0.clone().requires_grad_(True)
    inputs = []
    for conv1, conv2 in layers[:blocks]:
        h.retain_grad()
        inputs.append(h)
        identity = h
        h = conv2(conv1(h).relu()) + (identity.detach() if detach else identity)
    h.sum().backward()
    return [t.grad.norm().item() for t in inputs]


@pytest.mark.parametrize("blocks", [3, 20])
def test_skip_explorer_matches_torch(blocks):
    ex = X.SkipPathExplorer(blocks=blocks, detach=True, theme="kitchen")
    for key, detach in (("kept", False), ("detached", True)):
        ref = reference_stack_grads(blocks, detach)
        assert ex.numbers[key] == pytest.approx(ref, rel=1e-5)
    assert ex.numbers["x.grad norm"] == pytest.approx(ex.numbers["detached"][0])
    if blocks == 20:  # COURSE.md: about 13 orders of magnitude over 20 blocks
        orders = math.log10(ex.numbers["kept"][0] / ex.numbers["detached"][0])
        assert 11 < orders < 15
    assert "vacuum-packed" in ex.status() and ex.svg.startswith("<svg")


def test_skip_explorer_controls_and_learners_random_stream():
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    ex = X.SkipPathExplorer()
    assert torch.equal(torch.rand(1), expected)  # building the stack did not reseed
    click(ex, "detach", True)
    click(ex, "blocks", 20)
    assert ex.svg.count("<circle") == 40


# -- 04 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("hook,action,passes,remove", [
    (True, "clip", 2, False), (True, "scale", 3, True), (False, "look", 2, False),
    (True, "look", 1, False)])
def test_hook_explorer_matches_torch(hook, action, passes, remove):
    ex = X.HookExplorer(hook=hook, action=action, passes=passes, remove=remove)
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    calls = []
    fn = {"look": lambda g: calls.append(1), "scale": lambda g: calls.append(1) or g * 0.1,
          "clip": lambda g: calls.append(1) or g.clamp(-1.0, 1.0)}[action]
    handle = w.register_hook(fn) if hook else None
    for k in range(passes):
        (3 * (w * w)).sum().backward()
        if k == 0 and remove and handle:
            handle.remove()
    torch.testing.assert_close(ex.numbers["w.grad"], w.grad)
    assert ex.numbers["calls"] == len(calls)
    assert ex.graph.nodes["w"]["has_hooks"] == (hook and not remove)


def test_hook_explorer_controls():
    ex = X.HookExplorer(theme="kitchen")
    click(ex, "action", "scale")
    click(ex, "passes", 3)
    click(ex, "remove", True)
    click(ex, "hook", False)
    assert "tasting spoon" in ex.status()


# -- 05 ------------------------------------------------------------------------------------

def reference_step(first, last):
    env = {"x": torch.tensor([1.0, 2.0]),
           "w1": torch.tensor([0.5, -1.0], requires_grad=True),
           "w2": torch.tensor([2.0, 1.0], requires_grad=True)}
    for k, line in enumerate(X.STEP_LINES, start=1):
        try:
            with torch.set_grad_enabled(not first <= k <= last):
                exec(line, {}, env)
        except (RuntimeError, TypeError) as exc:
            return env, (k, type(exc).__name__)
    return env, None


@pytest.mark.parametrize("cover", [(4, 5), (1, 1), (1, 2), (3, 3), (7, 7)])
def test_no_grad_explorer_matches_torch(cover):
    ex = X.NoGradExplorer(use=cover != (7, 7), cover=cover if cover != (7, 7) else (4, 5))
    env, error = reference_step(*cover)
    n = ex.numbers
    assert (n["error"][0], n["error"][1].split(":")[0]) == error if error else n["error"] is None
    for name in ("w1", "w2"):
        ref = env[name].grad
        if ref is None:
            assert n[f"{name}.grad"] is None
        else:
            torch.testing.assert_close(n[f"{name}.grad"], ref)
        torch.testing.assert_close(n[name], env[name].detach())
    if cover == (1, 1):  # only h computed with the monitors off: w1 gets nothing
        assert n["recorded"]["h"] is None and n["recorded"]["loss"] == "SumBackward0"
        assert n["error"][0] == 4  # w1 -= 0.1 * None
    if cover == (7, 7):  # no no_grad(): the update of a leaf raises
        assert "in-place" in n["error"][1] or "leaf Variable" in n["error"][1]
    if cover == (1, 2):  # the whole forward pass unrecorded: backward() raises
        assert n["error"][0] == 3 and n["recorded"]["loss"] is None
    if cover == (4, 5):
        assert n["error"] is None and all(n["updated"].values())


def test_no_grad_explorer_controls():
    ex = X.NoGradExplorer()
    click(ex, "cover", (1, 2))
    assert "with torch.no_grad():" == ex.code[0]
    click(ex, "use", False)
    assert not any("no_grad" in line for line in ex.code)


# -- 06 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("edit,inplace", [("after", True), ("before", True), ("none", True),
                                          ("after", False)])
def test_inplace_explorer_matches_torch(edit, inplace):
    ex = X.InplaceExplorer(edit=edit, inplace=inplace)
    x = torch.tensor([0.5, 1.5], requires_grad=True)
    w = torch.tensor([3.0, 4.0], requires_grad=True)
    h = x * 2
    if edit == "before":
        h = h.add_(1) if inplace else h + 1
    y = h * w
    if edit == "after":
        if inplace:
            h.add_(1)
        else:
            h = h + 1
    try:
        y.sum().backward()
        error = None
    except RuntimeError as exc:
        error = str(exc)
    n = ex.numbers
    if error:
        assert n["error"] and "modified by an inplace operation" in n["error"]
        assert n["version now"] == n["saved version"] + 1
        assert ex.graph.nodes["h"]["kind"] == "intermediate"  # drawn as mul saved it
    else:
        assert n["error"] is None
        torch.testing.assert_close(n["x.grad"], x.grad)
        torch.testing.assert_close(n["w.grad"], w.grad)


def test_inplace_explorer_controls():
    ex = X.InplaceExplorer()
    assert ex.numbers["error"]
    click(ex, "edit", "before")
    assert ex.numbers["error"] is None
    click(ex, "edit", "after")
    click(ex, "inplace", False)
    assert ex.numbers["error"] is None and "seal count" in ex.status()


# -- 07 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bug,layers", [("none", 6), ("detach", 6), ("no_grad", 4),
                                        ("dead_relu", 6), ("sigmoid", 20)])
def test_doctor_explorer_matches_torch(bug, layers):
    ex = X.DoctorExplorer(bug=bug, layers=layers)
    model, loss_fn = X.doctor_patient(bug, layers)
    grads = torch.autograd.grad(loss_fn(), [p for p in model.parameters()], allow_unused=True)
    norms = []
    for k in range(layers):
        gw, gb = grads[2 * k], grads[2 * k + 1]
        parts = [g.norm().item() for g in (gw, gb) if g is not None]
        norms.append(math.sqrt(sum(v * v for v in parts)) if parts else None)
    for shown, ref in zip(ex.numbers["norms"], norms, strict=True):
        assert (shown is None) == (ref is None)
        if ref is not None:
            assert shown == pytest.approx(ref, rel=1e-5, abs=1e-12)
    statuses = ex.numbers["statuses"]
    expected_first = {"none": "ok", "detach": "detached", "no_grad": "no_grad",
                      "dead_relu": "zero", "sigmoid": "vanishing"}[bug]
    assert statuses[0] == expected_first
    assert ex.numbers["ok"] == (bug == "none")
    assert len(statuses) == layers and ex.svg.count("<rect") >= layers


def test_doctor_explorer_controls():
    ex = X.DoctorExplorer(theme="kitchen")
    click(ex, "bug", "none")
    assert ex.numbers["ok"]
    click(ex, "bug", "sigmoid")
    click(ex, "layers", 20)
    assert "vanishing" in ex.numbers["statuses"]


def test_doctor_patient_trains_like_torch():
    model, loss_fn = X.doctor_patient("none", 3)
    loss = loss_fn()
    assert loss.requires_grad and F.mse_loss is not None
    with pytest.raises(ValueError):
        X.doctor_patient("typo", 3)


# -- all of them ---------------------------------------------------------------------------

@pytest.mark.parametrize("cls", list(X.EXPLORERS.values()), ids=list(X.EXPLORERS))
def test_theme_switch_speaks_the_analogy(cls):
    ex = cls(theme="technical")
    tech = picture(ex), ex.status()
    ex.controls["theme"].value = "logistics"
    assert ex.theme == "logistics" and (picture(ex), ex.status()) != tech
    text = ex.status() + " ".join(ex.code)
    words = [themes.term("logistics", k) for k in themes.KINDS + themes.MARKS]
    words += list(X.WORDS["logistics"].values())
    assert any(w in text for w in words) or cls is X.DoctorExplorer and (
        "sorting centre" in text or "report" in text)


@pytest.mark.parametrize("cls", list(X.EXPLORERS.values()), ids=list(X.EXPLORERS))
def test_static_twin(cls, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    InteractiveShell.instance()
    ex = cls()
    assert ex.widget is None
    with capture_output() as captured:
        ex._ipython_display_()
    mimes = [set(o.data) for o in captured.outputs]
    assert not any("application/vnd.jupyter.widget-view+json" in m for m in mimes)
    assert any("image/png" in m for m in mimes) or "data:image/svg+xml" in str(
        captured.outputs[0].data)
    text = "".join(str(o.data.get("text/html", "")) for o in captured.outputs)
    assert "xp-code" in text and "xp-lines" in text
    fig = ex.static_figure()
    assert fig.axes
    assert ex.static_png().startswith(b"\x89PNG")
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("cls", list(X.EXPLORERS.values()), ids=list(X.EXPLORERS))
def test_python_set_moves_the_widgets_and_rejects_typos(cls):
    ex = cls()
    key = next(iter(cls.DEFAULTS))
    with pytest.raises(TypeError):
        ex.set(no_such_control=1)
    with pytest.raises(TypeError):
        cls(no_such_control=1)
    ex.set(theme="kitchen")
    assert ex.controls["theme"].value == "kitchen"
    assert ex.controls[key].value == ex.state[key]


def test_svg_chart_lists_what_it_draws():
    svg = X.svg_chart(["1", "2", "3"], [("kept", [1.0, 0.5, 0.1], "#2f9e44", True)],
                      bars=[(1e-3, "#2f9e44", "ok"), (None, "#868e96", "detached"),
                            (0.0, "#adb5bd", "zero")],
                      title="t", xlabel="layer", ylabel="norm", threshold=("vanishing", 1e-4))
    for label in ("kept", "ok", "detached (None)", "zero (0)", "vanishing threshold (0.0001)"):
        assert f">{label}<" in svg
    assert svg.count("<polyline") == 1


def test_svg_chart_legend_wraps_inside_the_picture():
    import re

    bars = [(1.0, f"#{i}{i}{i}", f"a rather long status name {i}") for i in range(6)]
    svg = X.svg_chart([str(i) for i in range(6)], [], bars=bars, title="t", xlabel="x",
                      ylabel="y", threshold=("vanishing", 1e-4))
    width, height = (int(v) for v in re.search(r'width="(\d+)" height="(\d+)"', svg).groups())
    assert height > 300  # extra legend rows
    for x, label in re.findall(r'<text x="([\d.]+)" y="[\d.]+" font-size="12">([^<]+)<', svg):
        assert float(x) + 7.2 * len(label) <= width, label


def test_doctor_names_the_patients_own_line():
    """The doctor's location is patient.py's line, shown in the code listing: it does not
    move when course/explorers.py is edited (the graded outputs stay the same)."""
    ex = X.DoctorExplorer(bug="detach")
    assert "patient.py:2 in loss_fn" in ex.status()
    assert ex.code[ex.code.index("# patient.py") + 2].lstrip().startswith("h = torch.relu(")
    assert "detach()" in ex.code[ex.code.index("# patient.py") + 2]


# -- the zh-CN edition ------------------------------------------------------------------------

def english_phrases(text: str) -> list[str]:
    """Runs of two or more English words outside code: none may be left in a Chinese text
    (code spans, torch's own error messages and HTML tags are not the course's words)."""
    import re

    text = re.sub(r"<[^>]+>|`[^`]*`", " ", text)
    text = re.sub(r"\b\w*Error: .*$", " ", text, flags=re.M)
    return re.findall(r"\b[A-Za-z]{2,}(?:[ ,]+[A-Za-z]{2,})+\b", text)


def widget_words(ex) -> list[str]:
    words = [_w.description for _w in ex.controls.values()]
    words += [label for _w in ex.controls.values() for label in getattr(_w, "_options_labels", ())]
    return words + [ex.widget.children[0].value]


@pytest.mark.parametrize("cls", list(X.EXPLORERS.values()), ids=list(X.EXPLORERS))
def test_chinese_explorers_say_nothing_in_english(cls):
    from course.i18n import using

    with using("zh-CN"):
        for theme in themes.THEMES:
            ex = cls(theme=theme)
            shown = [ex.status(), ex.picture_title(), *widget_words(ex)]
            key = next(iter(cls.CHOICES))
            for value in cls.CHOICES[key][:4]:
                ex.set(**{key: value})
                shown += [ex.status(), ex.picture_title()]
                # the code panel's comments, and what the picture writes besides the labels
                shown += [line.split("#", 1)[1] for line in ex.code if "#" in line]
                if ex.graph is not None:
                    shown += [d["note"] for _, d in ex.graph.nodes(data=True) if d.get("note")]
                    shown += [text for text, _tone in ex.graph.graph.get("caption", ())]
                if ex.chart_args:
                    shown += [ex.chart_args["title"], ex.chart_args["xlabel"],
                              ex.chart_args["ylabel"]]
                    shown += [s[0] for s in ex.chart_args["series"]]
            found = [p for text in shown for p in english_phrases(text)]
            assert not found, (theme, found)


def test_the_doctors_code_marks_are_rendered_not_shown():
    """The doctor's findings write names as `code`: the explorer's list shows them as code,
    its plain status without the backticks."""
    ex = X.DoctorExplorer(theme="technical", bug="detach")
    assert "`" in "".join(ex.lines)
    assert "`" not in ex.status() and "0.weight" in ex.status()
    assert "`" not in ex._numbers_html() and "<code>0.weight</code>" in ex._numbers_html()


def test_chinese_explorers_use_the_zh_glossary():
    from course.i18n import using

    zh = themes.GLOSSARY_ZH
    with using("zh-CN"):
        retain = X.RetainExplorer(theme="kitchen", monitor="after", audits=2)
        assert f"w（{zh['kitchen']['parameter']}）" in retain.status()
        assert "station（半成品）：.grad = None，retains_grad = True" in retain.status()
        assert "也没有任何提示" in retain.status()  # after backward(): silently
        inplace = X.InplaceExplorer(theme="logistics", edit="after", inplace=False)
        assert zh["logistics"]["version"] in inplace.status()
        hook = X.HookExplorer(theme="kitchen")
        assert "试味勺（hook）运行了2次" in hook.status()
        doctor = X.DoctorExplorer(theme="logistics", bug="none")
        assert doctor.status().endswith("每一层都得到了健康的梯度。")
        assert doctor.controls["bug"].label == "没有bug"  # the menu's label; its value is "none"
    assert "market ingredient" in X.RetainExplorer(theme="kitchen").status()  # English again


# -- every explorer: what a control changes shows in the picture -------------------------

def drawn(ex):
    """What the picture shows, as data (not pixels): the graph as the drawing reads it
    (``draw.picture_key``: nodes, marks, notes, edges, caption), or the chart's data. Not the
    title: the live widget shows it as the heading, so the drawing itself must differ."""
    from course import draw

    if ex.graph is not None:
        return draw.picture_key(ex.graph, ex.theme, None, True, 0)
    return repr(sorted(ex.chart_args.items()))


def _neighbours(values: tuple, value) -> tuple:
    """The values one click away: all of a short list; a slider's next ones either side."""
    if len(values) <= 6:
        return tuple(v for v in values if v != value)
    i = values.index(value)
    return tuple(values[j] for j in (i - 1, i + 1) if 0 <= j < len(values))


@pytest.mark.parametrize("cls", list(X.EXPLORERS.values()), ids=lambda c: c.__name__)
def test_the_picture_shows_what_each_control_changes(cls):
    """From the start and from every state one click away, each click that changes what the
    explorer says (its sentences) changes what its picture draws too: the learner sees the
    edit, the version, the error, the hook's effect, when the monitor came, in the picture,
    not only in the text under it."""
    ex = cls.__new__(cls)
    ex.theme, ex.dpi = "logistics", None

    def run(state):
        ex.state = dict(state)
        ex.graph, ex.svg = None, ""
        ex.compute()
        return tuple(ex.lines), drawn(ex)

    starts = [dict(cls.DEFAULTS)] + [
        {**cls.DEFAULTS, key: v} for key, values in cls.CHOICES.items()
        for v in _neighbours(values, cls.DEFAULTS[key])]
    hidden = []
    for start in starts:
        said, shown = run(start)
        for key, values in cls.CHOICES.items():
            for v in _neighbours(values, start[key]):
                said2, shown2 = run({**start, key: v})
                if said2 != said and shown2 == shown:
                    hidden.append((start, key, v, [s for s in said2 if s not in said]))
    assert not hidden, hidden[:5]


def _columns(line: str) -> int:
    """How many monospace columns a line takes: a CJK character two."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


@pytest.mark.parametrize("cls", list(X.EXPLORERS.values()), ids=lambda c: c.__name__)
def test_the_code_panel_holds_the_code_of_every_state(cls):
    """The code panel is CODE_COLS x CODE_LINES whatever the learner clicks, in both
    languages and every theme, so the picture under it never moves (and no line is cut)."""
    import itertools

    from course.i18n import using

    keys = list(cls.CHOICES)
    values = [cls.CHOICES[k] if len(cls.CHOICES[k]) <= 6 else cls.CHOICES[k][::3]
              + cls.CHOICES[k][-1:] for k in keys]
    ex = cls.__new__(cls)
    ex.dpi = None
    widest = tallest = 0
    for language in ("en", "zh-CN"):
        with using(language):
            for theme in themes.THEMES:
                for combo in itertools.product(*values):
                    ex.theme, ex.state = theme, dict(zip(keys, combo, strict=True))
                    ex.graph, ex.svg = None, ""
                    ex.compute()
                    widest = max(widest, max(map(_columns, ex.code)))
                    tallest = max(tallest, len(ex.code))
    assert widest <= cls.CODE_COLS and tallest <= cls.CODE_LINES, (widest, tallest)


@pytest.mark.parametrize("cover", X.NoGradExplorer.CHOICES["cover"])
def test_no_grad_explorer_draws_each_constant_at_the_operation_that_used_it(cover):
    """h = (x * w1).tanh(): the ordinary parcel x enters the multiplication, not tanh; an h
    made under no_grad() enters loss's multiplication by w2, not the sum. Torch's own saved
    tensors say so, read before backward() frees them."""
    g = X.NoGradExplorer(theme="technical", cover=cover).graph

    def op(node):  # the torch class of the operation a constant enters, and what it feeds
        (fn,) = g.successors(node)
        feeds = {g.nodes[s].get("torch_class") or s for s in g.successors(fn)}
        return g.nodes[fn]["torch_class"], feeds

    first, last = cover
    if "x" in g:                          # line 1 recorded: x * w1, then tanh
        assert not first <= 1 <= last
        assert op("x") == ("MulBackward0", {"TanhBackward0"})
    if "h" in g and g.nodes["h"]["kind"] == "constant":   # h made under no_grad()
        assert op("h") == ("MulBackward0", {"SumBackward0"})
    for u, v in g.edges:
        assert not (g.nodes[u]["kind"] == "constant"
                    and g.nodes[v].get("torch_class") in ("TanhBackward0", "SumBackward0"))
