"""The gradient-flow doctor (course.doctor) against real torch: every planted defect is found
with the right status, healthy models give no false alarm, and .grad is never touched."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course.doctor import LESSONS, STATUSES, Finding, Report, diagnose


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def batch(n_in=4, n_out=3, n=16):
    return torch.randn(n, n_in), torch.randint(0, n_out, (n,))


def statuses(report: Report, name: str | None) -> set[str]:
    return {f.status for f in report.findings_for(name)}


def problems(report: Report) -> list[tuple[str | None, str]]:
    return [(f.param, f.status) for f in report.findings]


# ---------------------------------------------------------------------------- planted defects


class ThreeLayers(nn.Module):
    """l1 -> relu -> l2 -> relu -> l3, with an optional defect around l2."""

    def __init__(self, defect: str | None = None):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 3)
        self.defect = defect

    def forward(self, x):
        h = torch.relu(self.l1(x))
        if self.defect == "detach":
            h = self.l2(h.detach())           # cuts l1 off the loss
        elif self.defect == "no_grad":
            with torch.no_grad():             # l2 runs with monitoring off: cuts l1 and l2
                h = self.l2(h)
        else:
            h = self.l2(h)
        return self.l3(torch.relu(h))


def test_detach_in_the_middle_cuts_everything_upstream():
    model, (x, y) = ThreeLayers("detach"), batch()
    report = diagnose(model, step=lambda: F.cross_entropy(model(x), y))
    for name in ("l1.weight", "l1.bias"):
        assert report.status(name) == "detached"
        (finding,) = report.findings_for(name)
        assert finding.lesson == "03_detach"
        assert "detach()" in finding.detail and "test_doctor.py" in finding.detail
    for name in ("l2.weight", "l2.bias", "l3.weight", "l3.bias"):
        assert report.status(name) == "ok"
    assert not report.ok


def test_with_only_a_loss_the_cut_is_reported_as_unreachable():
    model, (x, y) = ThreeLayers("detach"), batch()
    report = diagnose(model, F.cross_entropy(model(x), y))
    assert problems(report) == [("l1.weight", "unreachable"), ("l1.bias", "unreachable")]
    assert "step=" in report.findings[0].detail        # tells how to learn more


def test_no_grad_block_around_a_layer():
    model, (x, y) = ThreeLayers("no_grad"), batch()
    report = diagnose(model, step=lambda: F.cross_entropy(model(x), y))
    for name in ("l1.weight", "l1.bias", "l2.weight", "l2.bias"):
        assert report.status(name) == "no_grad"
        assert report.findings_for(name)[0].lesson == "05_no_grad"
    assert report.status("l3.weight") == "ok"


def test_whole_forward_under_no_grad_gives_a_loss_without_history():
    model, (x, y) = ThreeLayers(), batch()

    def step():
        with torch.no_grad():
            return F.cross_entropy(model(x), y)

    report = diagnose(model, step=step)
    assert statuses(report, None) == {"no_history"}
    assert {row.status for row in report.per_parameter} == {"no_grad"}


class HardChoice(nn.Module):
    """A router whose only output is an argmax: the five-scenarios article's control flow that kills the gradient."""

    def __init__(self):
        super().__init__()
        self.router, self.table = nn.Linear(4, 5), nn.Embedding(5, 3)

    def forward(self, x):
        return self.table(self.router(x).argmax(dim=1))


def test_non_differentiable_choice_cuts_the_router():
    model, (x, y) = HardChoice(), batch()
    report = diagnose(model, step=lambda: F.cross_entropy(model(x), y))
    assert report.status("router.weight") == report.status("router.bias") == "cut"
    assert "argmax()" in report.findings_for("router.weight")[0].detail
    assert report.status("table.weight") == "ok"


class ZeroBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.main, self.branch = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, x):
        return self.main(x) + self.branch(x) * 0   # the five-scenarios article, scenario 5


def test_branch_multiplied_by_zero_is_zero_not_none():
    model, (x, y) = ZeroBranch(), batch()
    loss = F.cross_entropy(model(x), y)
    loss.backward(retain_graph=True)
    assert model.branch.weight.grad is not None            # the naive check sees nothing wrong
    report = diagnose(model, loss)
    assert report.status("branch.weight") == report.status("branch.bias") == "zero"
    assert report.status("main.weight") == "ok"
    assert report.findings_for("branch.weight")[0].lesson == "07_gradient_clinic"
    watched = diagnose(model, step=lambda: F.cross_entropy(model(x), y))
    assert "multiplied by 0" in watched.findings_for("branch.weight")[0].detail


def test_dead_relu_layer_has_zero_gradients():
    model, (x, y) = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)), batch()
    with torch.no_grad():
        model[0].bias.fill_(-100.0)                     # every pre-activation negative
    report = diagnose(model, step=lambda: F.cross_entropy(model(x), y))
    for name in ("0.weight", "0.bias", "2.weight"):    # 2.weight sees only zero inputs
        assert report.status(name) == "zero"
    assert report.status("2.bias") == "ok"
    assert "dead ReLU" in report.findings_for("0.weight")[0].detail


def test_frozen_parameter_left_in_the_optimizer():
    model, (x, y) = ThreeLayers(), batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.l1.weight.requires_grad_(False)               # frozen after building the optimizer
    report = diagnose(model, F.cross_entropy(model(x), y), optimizer=optimizer)
    assert problems(report) == [("l1.weight", "frozen_in_optimizer")]
    assert report.findings[0].lesson == "03_detach"
    assert report.status("l1.weight") == "frozen"


def test_trainable_parameter_missing_from_the_optimizer():
    model, (x, y) = ThreeLayers(), batch()
    optimizer = torch.optim.SGD(model.l1.parameters(), lr=0.1)
    report = diagnose(model, F.cross_entropy(model(x), y), optimizer=optimizer)
    assert {p for p, s in problems(report) if s == "not_in_optimizer"} == {
        "l2.weight", "l2.bias", "l3.weight", "l3.bias"}


class WithSpareParts(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(4, 3)
        self.spare = nn.Linear(4, 3)                    # defined, never called
        self.scale = nn.Parameter(torch.ones(3))        # defined, never used
        self.aux = nn.Linear(4, 3)                      # called, result thrown away

    def forward(self, x):
        self.aux(x)
        return self.used(x)


def test_parameter_never_used_in_forward():
    model, (x, y) = WithSpareParts(), batch()
    report = diagnose(model, step=lambda: F.cross_entropy(model(x), y))
    for name in ("spare.weight", "spare.bias", "scale"):
        assert report.status(name) == "unused"
        assert "no part in the forward" in report.findings_for(name)[0].detail
    assert report.status("aux.weight") == "unused"
    assert "never reached the loss" in report.findings_for("aux.weight")[0].detail
    assert report.status("used.weight") == "ok"


def test_vanishing_gradients_in_a_deep_sigmoid_stack():
    layers = []
    for _ in range(20):
        layers += [nn.Linear(8, 8), nn.Sigmoid()]
    model = nn.Sequential(*layers, nn.Linear(8, 1))
    x = torch.randn(16, 8)
    report = diagnose(model, model(x).pow(2).mean())
    assert report.status("0.weight") == "vanishing"
    assert report.status("40.weight") == "ok"
    assert report.findings_for("0.weight")[0].lesson == "07_gradient_clinic"
    assert not statuses(report, "40.weight")
    # the threshold is the user's: with a tiny one nothing vanishes
    assert diagnose(model, model(x).pow(2).mean(), vanishing=1e-30).status("0.weight") == "ok"


def test_exploding_gradients_in_a_large_weight_linear_stack():
    model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(10)])
    with torch.no_grad():
        for layer in model:
            layer.weight.normal_(0.0, 1.0)
    report = diagnose(model, model(torch.randn(16, 8)).pow(2).mean())
    assert report.status("0.weight") == "exploding"
    assert report.status("0.bias") == "exploding"
    assert diagnose(model, model(torch.randn(16, 8)).pow(2).mean(),
                    exploding=1e30).status("0.weight") == "ok"


def test_nan_gradient_is_reported():
    model = nn.Linear(2, 1)
    x = torch.tensor([[0.0, -1.0]])
    report = diagnose(model, torch.sqrt(model(x) * 0).sum())    # sqrt'(0) = inf, inf * 0 = nan
    assert report.status("weight") == "nonfinite"


def test_inplace_change_of_a_saved_value_is_reported():
    model, (x, y) = ThreeLayers(), batch()

    def step():
        h = torch.sigmoid(model.l1(x))      # sigmoid saves its output for backward ...
        h.mul_(2)                           # ... which is then changed in place
        return F.cross_entropy(model.l3(model.l2(h)), y)

    report = diagnose(model, step=step)
    (finding,) = report.findings
    assert (finding.param, finding.status, finding.lesson) == (None, "inplace", "06_inplace")
    assert report.status("l1.weight") == "inplace"


class Block(nn.Module):
    def __init__(self, detach_identity: bool):
        super().__init__()
        self.conv1, self.conv2 = nn.Linear(16, 16), nn.Linear(16, 16)
        self.detach_identity = detach_identity

    def forward(self, x):
        identity = x
        x = self.conv2(self.conv1(x).relu())
        return x + (identity.detach() if self.detach_identity else identity)   # the kitchen article


def test_residual_identity_detach_is_found():
    model = nn.Sequential(*[Block(True) for _ in range(20)])
    x = torch.randn(4, 16)
    report = diagnose(model, step=lambda: model(x).sum())
    (graph,) = report.findings_for(None)
    assert graph.status == "detached" and graph.lesson == "03_detach"
    assert "identity.detach()" in graph.detail and "19 times" in graph.detail
    assert "`0.conv1.weight`" in graph.detail
    # in a 20-block stack the first blocks' gradients vanish (~13 orders of magnitude)
    assert report.status("0.conv2.weight") == "vanishing"
    assert report.status("19.conv2.weight") == "ok"


def test_residual_without_detach_is_healthy():
    model = nn.Sequential(*[Block(False) for _ in range(20)])
    x = torch.randn(4, 16)
    report = diagnose(model, step=lambda: model(x).sum(), exploding=1e6)
    assert report.ok, report


def test_an_earlier_steps_grad_before_backward_is_a_note_not_an_alarm():
    # The tutorial loop computes the loss, then zero_grad(), backward(), step(): at the time of
    # the forward pass .grad still holds the last step's gradient, and that is fine.
    model, (x, y) = ThreeLayers(), batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    F.cross_entropy(model(x), y).backward()
    optimizer.step()
    report = diagnose(model, F.cross_entropy(model(x), y), optimizer=optimizer)
    assert report.ok, report
    (note,) = report.notes
    assert "l1.weight" in note and "zero_grad()" in note
    assert {row.grad_attr for row in report.per_parameter} == {"earlier"}


def test_training_step_without_zero_grad_accumulates():
    model, (x, y) = ThreeLayers(), batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():                                         # the bug: no optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    step()
    report = diagnose(model, step=step, optimizer=optimizer)
    assert {p for p, s in problems(report) if s == "stale_grad"} == {
        n for n, _ in model.named_parameters()}
    (finding,) = report.findings_for("l2.bias")
    assert "without zero_grad()" in finding.detail and finding.lesson == "02_retain_grad"


def test_backward_twice_on_the_same_loss_is_stale():
    model, (x, y) = ThreeLayers(), batch()
    loss = F.cross_entropy(model(x), y)
    loss.backward(retain_graph=True)
    loss.backward(retain_graph=True)
    report = diagnose(model, loss)
    assert {s for _, s in problems(report)} == {"stale_grad"}
    assert "2 times" in report.findings_for("l3.weight")[0].detail


# ---------------------------------------------------------------------------- healthy models


def mlp():
    return nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        h = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.head(h.flatten(1))


@pytest.mark.parametrize("make, shape", [(mlp, (16, 4)), (SmallCNN, (16, 1, 8, 8))],
                         ids=["mlp", "cnn"])
def test_healthy_models_raise_no_false_alarm(make, shape):
    model = make()
    x, y = torch.randn(*shape), torch.randint(0, 3, (shape[0],))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss_fn():
        return F.cross_entropy(model(x), y)

    # one earlier training step, so that "after zero_grad" really has something to clear
    loss_fn().backward()
    optimizer.step()
    optimizer.zero_grad()                               # grads are None since torch 2.0
    assert all(p.grad is None for p in model.parameters())
    assert diagnose(model, loss_fn(), optimizer=optimizer).ok

    loss = loss_fn()                                    # after backward(): graph freed
    loss.backward()
    report = diagnose(model, loss, optimizer=optimizer)
    assert report.ok, report
    assert report.notes                                 # says the grads came from .grad

    optimizer.zero_grad(set_to_none=False)              # grads are zeros
    assert diagnose(model, loss_fn(), optimizer=optimizer).ok

    def training_step():                                # a full, correct training step
        optimizer.zero_grad()
        loss = loss_fn()
        loss.backward()
        optimizer.step()
        return loss

    training_step()
    report = diagnose(model, step=training_step, optimizer=optimizer)
    assert report.ok, report
    assert not report.notes
    assert diagnose(model, step=loss_fn, optimizer=optimizer, theme="kitchen").ok


def test_diagnose_does_not_touch_grad_and_keeps_the_graph():
    model, (x, y) = ThreeLayers(), batch()
    loss = F.cross_entropy(model(x), y)
    diagnose(model, loss)
    assert all(p.grad is None for p in model.parameters())
    loss.backward()                                     # the graph is still there
    before = {n: p.grad.clone() for n, p in model.named_parameters()}
    loss2 = F.cross_entropy(model(x), y)
    loss2.backward(retain_graph=True)
    report = diagnose(model, loss2)
    assert {s for _, s in problems(report)} == {"stale_grad"}
    for n, p in model.named_parameters():
        assert torch.allclose(p.grad, 2 * before[n])     # untouched by the doctor


# ---------------------------------------------------------------------------- report and plot


def test_text_and_html_reports_name_the_parameter_and_the_lesson():
    model, (x, y) = ThreeLayers("no_grad"), batch()
    report = diagnose(model, step=lambda: F.cross_entropy(model(x), y))
    text, page = repr(report), report._repr_html_()
    for name in ("l1.weight", "l2.bias"):
        assert name in text and name in page
    assert "05_no_grad" in text and "05_no_grad" in page
    assert "monitoring was switched off" in text          # the logistics analogy by default
    kitchen = repr(diagnose(model, step=lambda: F.cross_entropy(model(x), y), theme="kitchen"))
    assert "recipe notebook closed" in kitchen
    technical = repr(diagnose(model, F.cross_entropy(model(x), y), theme="technical"))
    assert "sorting centre" not in technical and "ingredient" not in technical
    assert isinstance(report.findings[0], Finding)
    assert str(report.findings[0]).startswith("[no_grad] l1.weight")
    healthy = mlp()
    assert "No problems found" in repr(diagnose(healthy, F.cross_entropy(healthy(x), y)))


@pytest.mark.parametrize("theme", ["technical", "logistics", "kitchen"])
def test_reports_show_code_as_code_never_as_backticks(theme):
    """The findings are written with `code` spans; a reader sees code, not the backticks."""
    model, (x, y) = ThreeLayers("no_grad"), batch()
    report = diagnose(model, step=lambda: F.cross_entropy(model(x), y), theme=theme)
    assert any("`" in f.detail for f in report.findings)      # the spans are there to render
    assert "`" not in repr(report) and "`" not in str(report.findings[0])
    page = report._repr_html_()
    assert "`" not in page and "<code>l1.weight</code>" in page


def test_every_status_has_a_lesson_from_the_course():
    course_lessons = {"01_leaves", "02_retain_grad", "03_detach", "04_hooks", "05_no_grad",
                      "06_inplace", "07_gradient_clinic"}
    assert set(LESSONS) == set(STATUSES)
    assert set(LESSONS.values()) <= course_lessons
    assert LESSONS["stale_grad"] == "02_retain_grad"     # accumulation and zero_grad() are taught there


def _documented_statuses() -> dict[str, str]:
    """status -> lesson, from the status table of docs/doctor.md."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "doctor.md").read_text()
    table = text.split("## Statuses", 1)[1].split("\n\n| status |", 1)[1].split("\n\n", 1)[0]
    found = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for status in re.findall(r"`(\w+)`", cells[0]):
            found[status] = cells[-1]
    return found


def test_docs_status_table_lists_every_status_with_its_lesson():
    assert _documented_statuses() == LESSONS


def test_docs_list_every_status_lesson_08_question_4_offers():
    """Lesson 08 Q4 sends learners to docs/doctor.md for these statuses (ok and frozen among them)."""
    import re

    from helpers import notebook_path, read

    nb = read(notebook_path("08_capstone"))
    (question,) = [c.source for c in nb.cells if c.source.startswith("### Question 4")]
    listed = re.split(r"The\s+statuses\s+are:", question)[1].split("(see")[0]
    offered = re.findall(r"`(\w+)`", listed)
    assert {"ok", "frozen", "zero", "cut"} <= set(offered)
    assert set(offered) <= set(_documented_statuses())


def test_plot_has_one_bar_per_layer_on_a_log_scale():
    from matplotlib.figure import Figure

    model = nn.Sequential(*[Block(True) for _ in range(3)])
    x = torch.randn(4, 16)
    report = diagnose(model, model(x).sum())
    fig = report.plot()
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    layers = report.layers()
    assert [name for name, _, _ in layers] == [f"{i}.conv{j}" for i in range(3) for j in (1, 2)]
    assert len(ax.containers) == 1 and len(ax.containers[0]) == len(layers) == 6
    assert ax.get_yscale() == "log"
    png, size = fig._repr_png_()  # 2x pixels, shown at half their width
    assert png.startswith(b"\x89PNG") and size["width"] * 2 - int.from_bytes(png[16:20]) <= 1
    assert [t.get_text() for t in ax.get_xticklabels()][:2] == ["1\n0.conv1", "2\n0.conv2"]
    assert ax.get_xlabel().startswith("layer (modules with trainable parameters, 1 = first")
    assert "log scale" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0] == "bar: healthy (ok)" and any("threshold" in t for t in legend)


def test_plot_marks_layers_without_gradient():
    model, (x, y) = ThreeLayers("detach"), batch()
    fig = diagnose(model, F.cross_entropy(model(x), y)).plot()
    (ax,) = fig.axes
    assert len(ax.containers[0]) == 3
    assert [t.get_text() for t in ax.texts] == ["None"]


def test_bad_calls_get_clear_errors():
    model, x = ThreeLayers(), torch.randn(8, 4)
    with pytest.raises(TypeError, match="exactly one"):
        diagnose(model)
    with pytest.raises(ValueError, match="one element"):
        diagnose(model, model(x))
    with pytest.raises(TypeError, match="return the loss"):
        diagnose(model, step=lambda: None)
    with pytest.raises(ValueError, match="theme"):
        diagnose(model, model(x).sum(), theme="pirate")


def test_importing_the_doctor_does_not_import_matplotlib():
    code = ("import sys, course.doctor; "
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_bar_is_coloured_by_its_own_norm():
    """A layer whose bias gets no gradient while its weight gets a healthy one is a healthy
    bar (its finding names the bias), not a grey "zero" bar of height 0.3; a bar is
    vanishing or exploding by its own height against the dashed thresholds; only a bar with
    no gradient or a zero one carries the layer's reason. In the doctor's plot and in the
    lesson 07 explorer's chart, whose legend then names each status once."""
    import math

    import matplotlib.colors as mcolors

    from course import doctor, explorers

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    x = torch.randn(8, 4)

    def loss():  # the first layer's bias is multiplied by 0: exactly zero gradient
        h = net[1](x @ net[0].weight.T + 0 * net[0].bias)
        return net[2](h).sum()

    report = doctor.diagnose(net, step=loss)
    layers = report.layers()
    assert [s for _, _, s in layers][0] == "zero" and layers[0][1] > 0
    fig = report.plot()
    faces = [mcolors.to_hex(b.get_facecolor()) for b in fig.axes[0].patches[:len(layers)]]
    for (_layer, norm, worst), face in zip(layers, faces, strict=True):
        shown = doctor.bar_status(norm, worst, report.thresholds)
        assert face == doctor._COLOURS.get(shown, doctor._OTHER_COLOUR) or not norm
        if norm and report.thresholds["vanishing"] <= norm <= report.thresholds["exploding"]:
            assert shown == "ok"
    for bug in explorers.BUGS:
        for layers_n in (2, 6, 20):
            ex = explorers.DoctorExplorer(theme="technical", bug=bug, layers=layers_n)
            for value, colour, label in ex.chart_args["bars"]:
                if value and value < explorers.DoctorExplorer.VANISHING:
                    assert label == "vanishing", (bug, layers_n, value, label)
                elif value and math.isfinite(value) and value <= 1e3:
                    assert (colour, label) == ("#2f9e44", "ok"), (bug, layers_n, value, label)
            names = [label if v else f"{label}/{v}" for v, _c, label in ex.chart_args["bars"]]
            colours = {}
            for (v, c, _l), name in zip(ex.chart_args["bars"], names, strict=True):
                colours.setdefault(name, set()).add(c if v else "hatch")
            assert all(len(c) == 1 for c in colours.values()), colours


def test_code_typed_in_a_cell_is_named_as_jupyter_names_it():
    """In a notebook the doctor points at the cell and line the learner sees (as IPython's
    tracebacks do: ``Cell In[3], line 5``), never at the temporary file the cell was
    compiled to. A real IPython shell runs the cells here."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        for cell in ("import torch\nfrom torch import nn\nfrom course.doctor import diagnose",
                     "torch.manual_seed(0)",
                     "class Net(nn.Module):\n"
                     "    def __init__(self):\n"
                     "        super().__init__()\n"
                     "        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 1)\n"
                     "    def forward(self, x):\n"
                     "        return self.b(self.a(x).detach())\n"
                     "net = Net()\n"
                     "found = diagnose(net, step=lambda: net(torch.ones(2, 3)).sum())"):
            result = shell.run_cell(cell, store_history=True)
            result.raise_error()
        (finding,) = shell.user_ns["found"].findings_for("a.weight")
    finally:
        InteractiveShell.clear_instance()
    assert "Cell In[3], line 6 in forward" in finding.detail, finding.detail
    assert ".py:" not in finding.detail
