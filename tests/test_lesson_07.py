"""Lesson 07 (the gradient clinic): typical wrong answers get the misconception they reveal (or a
precise account of what torch did, with no label), correct answers written differently pass, and
the find-the-bug checks compare repairs with torch's own reference gradients."""

from __future__ import annotations

import ast

import pytest
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode
from autograder.lessons.l07_gradient_clinic import lesson
from autograder.misconceptions import MISCONCEPTIONS

A = "07_gradient_clinic"


def _ev(qid, answer, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": None, "variant": variant,
                     "answer": answer})


def _predict(qid, answer):
    return _ev(qid, encode(answer))


def _code(qid, src, variant="visible"):
    name = ast.parse(src).body[0].name
    return _ev(qid, {"__function__": src, "name": name}, variant)


def _part(verdict, part):
    return [f for f in verdict["findings"] if f["part"] in (part, None)]


def _myths(findings):
    if isinstance(findings, dict):
        findings = findings["findings"]
    return {f["misconception"] for f in findings if f["status"] == "wrong"}


def _passed(findings):
    return all(f["status"] == "right" for f in findings)


def test_lesson_misconceptions_are_registered_for_this_lesson():
    for key in ("zero_gradient_is_none", "sigmoid_stack_healthy", "residual_fades",
                "hard_choice_trains", "grad_none_check_enough", "grad_none_means_vanished",
                "residual_never_explodes"):
        assert MISCONCEPTIONS[key].lesson == A, key
        assert MISCONCEPTIONS[key].section, key


def test_no_seed_in_titles():
    for q in lesson.questions.values():
        assert "seed" not in q.title.lower(), q.qid


# --------------------------------------------------------------------------- predict

ALL = ["main.weight", "main.bias", "side.weight", "side.bias"]
Q1_RIGHT = {"after_backward": [], "side_grad": [[0.0, 0.0]], "after_zero_grad": ALL}


@pytest.mark.parametrize("wrong, myths", [
    ({"after_backward": ["side.weight", "side.bias"], "side_grad": None},
     {"zero_gradient_is_none"}),
    ({"after_zero_grad": []}, {"zero_grad_fills_zeros"}),
    ({"after_zero_grad": ["side.weight", "side.bias"]}, {"zero_grad_fills_zeros"}),
    ({"side_grad": [[1.0, 1.0]]}, {None}),   # told what torch filed, no label
])
def test_q1_names_the_belief(wrong, myths):
    verdict = _predict("q1", {**Q1_RIGHT, **wrong})
    assert _myths(verdict) == myths and not verdict["passed"]


def test_q1_tensor_answer_for_the_gradient_is_accepted():
    verdict = _ev("q1", {**encode(Q1_RIGHT),
                         "side_grad": {"__tensor__": [[0.0, 0.0]], "dtype": "torch.float32"}})
    assert verdict["passed"]


Q2_RIGHT = {"error_mul": None, "error_sigmoid": RuntimeError, "d.grad": None,
            "e.grad": [2.0, 4.0], "w": [0.0, 0.0]}


@pytest.mark.parametrize("wrong, myths", [
    ({"error_mul": RuntimeError}, {"inplace_always_fatal"}),
    ({"error_sigmoid": None}, {"inplace_never_checked"}),
    ({"error_mul": RuntimeError, "error_sigmoid": None},
     {"inplace_always_fatal", "saved_values_confused"}),
    ({"d.grad": [2.0, 2.0]}, {"no_grad_branch_counts"}),
    ({"d.grad": [0.0, 0.0]}, {"grad_none_means_vanished"}),
    ({"e.grad": None}, {"no_grad_result_unusable"}),
    ({"w": [1.0, -1.0]}, {"step_inside_no_grad_breaks"}),
])
def test_q2_names_the_belief(wrong, myths):
    verdict = _predict("q2", {**Q2_RIGHT, **wrong})
    assert _myths(verdict) == myths and 0 < verdict["score"] < 1


def test_q2_ints_and_tensors_are_accepted():
    verdict = _ev("q2", {**encode(Q2_RIGHT), "w": [0, 0],
                         "e.grad": {"__tensor__": [2.0, 4.0], "dtype": "torch.float32"}})
    assert verdict["passed"]


@pytest.mark.parametrize("wrong, myths", [
    ({"grads": [2.0, None, 2.0, None]}, {"zero_gradient_is_none"}),
    ({"grads": None}, {"zero_gradient_is_none"}),
    ({"y_off.grad_fn": None}, {"zero_gradient_is_none"}),
    ({"y_cut.requires_grad": True}, {"detach_keeps_grad"}),
])
def test_q3_names_the_belief(wrong, myths):
    right = {"grads": [2.0, 0.0, 2.0, 0.0], "y_off.grad_fn": "MulBackward0",
             "y_cut.requires_grad": False}
    verdict = _predict("q3", {**right, **wrong})
    assert _myths(verdict) == myths


@pytest.mark.parametrize("key, myth", [
    ("sigmoid", "sigmoid_stack_healthy"),
    ("sigmoid_residual", "residual_fades"),
    ("relu_residual", "residual_fades"),
    ("relu_residual_detached", "residual_detach_harmless"),
])
def test_q4_names_the_belief(key, myth):
    right = {"sigmoid": True, "sigmoid_residual": False, "relu_residual": False,
             "relu_residual_detached": True}
    verdict = _predict("q4", {**right, key: not right[key]})
    assert _myths(verdict) == {myth}


# --------------------------------------------------------------------------- Q5: the alarm

def _report(body):
    return ("def grad_flow_report(model, loss):\n"
            "    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]\n"
            + body)


NONE_ONLY = '''
def grad_flow_report(model, loss):
    return {n: "none" if p.grad is None else "ok" for n, p in model.named_parameters()
            if p.requires_grad}
'''

VIA_BACKWARD = '''
def grad_flow_report(model, loss):
    loss.backward()
    out = {}
    for n, p in model.named_parameters():
        if p.requires_grad:
            out[n] = "none" if p.grad is None else "zero" if (p.grad == 0).all() else "ok"
    return out
'''

ZEROS_AS_NONE = _report('''\
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True, retain_graph=True)
    return {n: "none" if g is None or (g == 0).all() else "ok" for (n, _), g in zip(named, grads)}
''')

NONE_AS_ZERO = _report('''\
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True, retain_graph=True)
    return {n: "zero" if g is None or (g == 0).all() else "ok" for (n, _), g in zip(named, grads)}
''')

NO_RETAIN = _report('''\
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {n: "none" if g is None else "zero" if (g == 0).all() else "ok"
            for (n, _), g in zip(named, grads)}
''')

WITH_FROZEN = '''
def grad_flow_report(model, loss):
    named = list(model.named_parameters())
    grads = torch.autograd.grad(loss, [p for _, p in named if p.requires_grad],
                                allow_unused=True, retain_graph=True)
    it = iter(grads)
    out = {}
    for n, p in named:
        g = next(it) if p.requires_grad else None
        out[n] = "none" if g is None else "zero" if (g == 0).all() else "ok"
    return out
'''

HOOKED_LIST = _report('''\
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True, retain_graph=True)
    return {n: ("none" if g is None else "zero" if g.abs().max().item() == 0 else "ok")
            for (n, _), g in zip(named, grads)}
''')


def test_q5_reading_grad_is_the_alarm_of_the_article():
    verdict = _code("q5", NONE_ONLY)
    assert _myths(_part(verdict, "statuses")) == {"grad_none_check_enough"}
    assert verdict["score"] < 1


def test_q5_backward_based_report_loses_hygiene_and_sees_stale_reports():
    verdict = _code("q5", VIA_BACKWARD)
    assert _passed(_part(verdict, "statuses"))     # on fresh models the statuses are right
    hygiene = _part(verdict, "hygiene")
    assert not _passed(hygiene) and "graph_survives_backward" in _myths(hygiene)
    hidden = _code("q5", VIA_BACKWARD, variant="hidden")
    assert _myths(_part(hidden, "statuses")) == {"grad_none_check_enough"}


@pytest.mark.parametrize("src, part, myths", [
    (ZEROS_AS_NONE, "statuses", {"zero_gradient_is_none"}),
    (NONE_AS_ZERO, "statuses", {"grad_none_means_vanished"}),
    (NO_RETAIN, "hygiene", {"graph_survives_backward"}),
    (WITH_FROZEN, "statuses", {None}),              # told which entries should not be there
])
def test_q5_names_the_belief(src, part, myths):
    verdict = _code("q5", src)
    assert _myths(_part(verdict, part)) == myths


def test_q5_written_differently_passes():
    assert _code("q5", HOOKED_LIST)["passed"]


# --------------------------------------------------------------------------- Q6: deep stack

def _stack(block, skip="h +"):
    return f'''
def deep_net(depth, width):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(width, width)

        def forward(self, h):
            return {skip} {block}
    return nn.Sequential(*[Block() for _ in range(depth)])
'''


EXPLODING = _stack("torch.relu(self.lin(h))")
PLAIN_SIGMOID = _stack("torch.sigmoid(self.lin(h))", skip="")
DETACHED = _stack("torch.tanh(self.lin(h))", skip="h.detach() +")
SCALED = _stack("0.1 * torch.relu(self.lin(h))")
NOT_A_MODULE = '''
def deep_net(depth, width):
    return [nn.Linear(width, width) for _ in range(depth)]
'''


def test_q6_unbounded_residual_passes_flow_but_explodes_in_training():
    verdict = _code("q6", EXPLODING)
    assert _passed(_part(verdict, "flow"))
    training = _part(verdict, "training")
    assert _myths(training) == {"residual_never_explodes"}
    assert "exploded" in training[0]["text"]


@pytest.mark.parametrize("src, myths", [
    (PLAIN_SIGMOID, {"sigmoid_stack_healthy"}),
    (DETACHED, {"residual_detach_harmless"}),
    (NOT_A_MODULE, {None}),
])
def test_q6_names_the_belief(src, myths):
    verdict = _code("q6", src)
    assert _myths(_part(verdict, "flow")) == myths and verdict["score"] < 1


def test_q6_a_scaled_residual_stack_passes():
    assert _code("q6", SCALED)["passed"]


# --------------------------------------------------------------------------- Q7: the monitor

MONITOR_FIX = '''
def activation_grad_norms(model, x, y):
    h = torch.tanh(model.embed(x))
    out = model.head(h)
    h.retain_grad()
    out.retain_grad()
    loss = F.mse_loss(out, y)
    loss.backward()
    return {"hidden": h.grad.norm().item(), "output": out.grad.norm().item()}
'''


def test_q7_a_probe_instead_of_a_monitor_and_tensor_norms_pass():
    src = '''
def activation_grad_norms(model, x, y):
    seen = {}
    h = torch.tanh(model.embed(x))
    out = model.head(h)
    h.register_hook(lambda g: seen.__setitem__("hidden", g.norm()))
    out.register_hook(lambda g: seen.__setitem__("output", g.norm()))
    F.mse_loss(out, y).backward()
    return seen
'''
    assert _code("q7", src)["passed"] and _code("q7", MONITOR_FIX)["passed"]


@pytest.mark.parametrize("src, myths", [
    # only one monitor moved before backward: the other still reads an empty desk
    (MONITOR_FIX.replace("    out.retain_grad()\n", "").replace(
        "    loss.backward()\n", "    loss.backward()\n    out.retain_grad()\n"),
     {"retain_grad_after_backward"}),
    # no monitor at all: .grad of a transit station is None (and warns)
    (MONITOR_FIX.replace("    h.retain_grad()\n    out.retain_grad()\n", ""),
     {"nonleaf_grad_stored"}),
    # a second backward after installing the monitors: the parameters hold two reports
    (MONITOR_FIX.replace("    h.retain_grad()\n    out.retain_grad()\n", "").replace(
        "    loss.backward()\n",
        "    loss.backward(retain_graph=True)\n    h.retain_grad()\n    out.retain_grad()\n"
        "    loss.backward()\n"), {"grad_accumulates_not"}),
])
def test_q7_names_the_belief(src, myths):
    verdict = _code("q7", src)
    assert _myths(verdict) == myths and not verdict["passed"]


def test_q7_reading_an_unmonitored_station_is_told_about_the_warning():
    src = '''
def activation_grad_norms(model, x, y):
    h = torch.tanh(model.embed(x))
    out = model.head(h)
    out.retain_grad()
    F.mse_loss(out, y).backward()
    hidden = h.grad
    h2 = torch.tanh(model.embed(x))
    g, = torch.autograd.grad(F.mse_loss(model.head(h2), y), h2)
    return {"hidden": g.norm().item(), "output": out.grad.norm().item()}
'''
    verdict = _code("q7", src)
    assert _myths(verdict) == {"nonleaf_grad_silent"}


# --------------------------------------------------------------------------- Q8: Huber

HUBER_FIX = '''
def huber_loss(pred, target):
    err = (pred - target).abs()
    small = err.detach() < 1.0
    quadratic = 0.5 * err ** 2
    linear = err - 0.5
    return torch.where(small, quadratic, linear).mean()
'''


@pytest.mark.parametrize("src", [
    HUBER_FIX,
    "def huber_loss(pred, target):\n    return F.smooth_l1_loss(pred, target)\n",
    '''
def huber_loss(pred, target):
    err = (pred - target).abs()
    with torch.no_grad():
        small = err < 1.0
    return torch.where(small, 0.5 * (pred - target) ** 2, err - 0.5).mean()
''',
])
def test_q8_correct_variants_pass(src):
    assert _code("q8", src)["passed"]


def test_q8_detached_quadratic_branch_is_named():
    src = HUBER_FIX.replace("quadratic = 0.5 * err ** 2", "quadratic = 0.5 * err.detach() ** 2")
    verdict = _code("q8", src)
    assert _myths(_part(verdict, "gradient")) == {"detach_in_loss_harmless"}
    assert "detach_in_loss_harmless" in _myths(_part(verdict, "training"))


def test_q8_both_branches_detached_crash_is_named():
    src = HUBER_FIX.replace("err = (pred - target).abs()", "err = (pred - target).abs().detach()")
    verdict = _code("q8", src)
    assert {f["status"] for f in verdict["findings"]} == {"wrong"}
    assert _myths(verdict) == {"detach_in_loss_harmless"}


def test_q8_a_wrong_formula_is_told_its_numbers():
    verdict = _code("q8", HUBER_FIX.replace("0.5 * err ** 2", "err ** 2"))
    gradient = _part(verdict, "gradient")
    assert not _passed(gradient) and _myths(gradient) == {None}
    assert "`F.huber_loss` says" in gradient[0]["text"]


def test_q8_graded_cell_reads_as_one_verdict():
    """The issue's Q8: one verdict per part, each finding a line of its own (no traceback)."""
    src = HUBER_FIX.replace("quadratic = 0.5 * err ** 2", "quadratic = 0.5 * err.detach() ** 2")
    verdict = _code("q8", src)
    assert [f["part"] for f in verdict["findings"]] == ["gradient"] * 2 + ["training"] * 2
    assert not any("Traceback" in f["text"] or " -- " in f["text"] for f in verdict["findings"])


# --------------------------------------------------------------------------- Q9: no_grad

TRAIN_FIX = '''
def train(model, x, y, steps=30):
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        h = torch.tanh(model.embed(x))
        loss = F.mse_loss(model.head(h), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
'''


@pytest.mark.parametrize("src", [
    TRAIN_FIX,
    TRAIN_FIX.replace("        opt.step()\n", "        with torch.no_grad():\n"
                      "            opt.step()\n"),
    TRAIN_FIX.replace("        opt.zero_grad()\n", "").replace(
        "        opt.step()\n", "        opt.step()\n        model.zero_grad()\n"),
])
def test_q9_correct_variants_pass(src):
    assert _code("q9", src)["passed"]


@pytest.mark.parametrize("src, part, myths", [
    (TRAIN_FIX.replace("        h = torch.tanh(model.embed(x))\n",
                       "        with torch.no_grad():\n            h = torch.tanh(model.embed(x))\n"),
     "gradients", {"no_grad_branch_counts"}),
    (TRAIN_FIX.replace("h = torch.tanh(model.embed(x))", "h = torch.tanh(model.embed(x)).detach()"),
     "gradients", {"detach_keeps_grad"}),
    (TRAIN_FIX.replace("        opt.zero_grad()\n", "").replace(
        "        opt.step()\n", "        opt.zero_grad()\n        opt.step()\n"),
     "training", {"zero_grad_misplaced"}),
    (TRAIN_FIX.replace("        opt.zero_grad()\n", ""), "training", {"zero_grad_misplaced"}),
])
def test_q9_names_the_belief(src, part, myths):
    verdict = _code("q9", src)
    assert _myths(_part(verdict, part)) == myths and not verdict["passed"]


# --------------------------------------------------------------------------- Q10: in place

def _forward(line):
    return f'''
def forward(model, x):
    h = torch.tanh(model.embed(x))
    {line}
    return model.head(h)
'''


@pytest.mark.parametrize("line", [
    "h = h.clamp(min=0)",
    "h = torch.relu(h)",
    "h = torch.where(h < 0, 0.0, h)",
    "h = h * (h > 0)",
    "h = h.clone(); h[h < 0] = 0",
])
def test_q10_correct_variants_pass(line):
    assert _code("q10", _forward(line))["passed"]


def test_q10_data_edit_is_caught_by_the_reference_gradients_and_named():
    verdict = _code("q10", _forward("h.data[h.data < 0] = 0"))
    gradients = _part(verdict, "gradients")
    assert [f["status"] for f in gradients] == ["right", "wrong"]
    assert _myths(gradients) == {"data_is_safe"}
    assert "`.data`" in gradients[1]["text"]


@pytest.mark.parametrize("line, myths", [
    ("with torch.no_grad(): h[h < 0] = 0", {"no_grad_edit_unchecked"}),
    ("h.clamp_(min=0)", {"inplace_never_checked"}),
    ("h = h.detach().clamp(min=0)", {"detach_keeps_grad"}),
    ("pass", {None}),      # the clamp dropped: told the output is no longer wiped
])
def test_q10_names_the_belief(line, myths):
    verdict = _code("q10", _forward(line))
    assert _myths(_part(verdict, "gradients")) == myths and not verdict["passed"]


# --------------------------------------------------------------------------- Q11: the gate

def _gate(body):
    return "def gated_forward(model, x):\n    h = torch.tanh(model.embed(x))\n" + body


GATE_FIX = _gate("    g = torch.sigmoid(model.gate(h))\n"
                 "    return g * model.fine(h) + (1 - g) * model.coarse(h)\n")


@pytest.mark.parametrize("src", [
    GATE_FIX,
    _gate("    return torch.lerp(model.coarse(h), model.fine(h), torch.sigmoid(model.gate(h)))\n"),
])
def test_q11_correct_variants_pass(src):
    assert _code("q11", src)["passed"]


@pytest.mark.parametrize("src, myths", [
    (_gate("    return model.fine(h) + model.coarse(h) + 0 * model.gate(h)\n"),
     {"grad_none_check_enough"}),
    (_gate("    g = (model.gate(h) > 0).float()\n"
           "    return g * model.fine(h) + (1 - g) * model.coarse(h)\n"), {"hard_choice_trains"}),
    (_gate("    pick = torch.sigmoid(model.gate(h)) > 0.5\n"
           "    return torch.where(pick, model.fine(h), model.coarse(h))\n"),
     {"hard_choice_trains"}),
    (_gate("    return 0.5 * (model.fine(h) + model.coarse(h))\n"), {None}),
])
def test_q11_names_the_belief(src, myths):
    verdict = _code("q11", src)
    gradients = _part(verdict, "gradients")
    assert _myths(gradients) == myths and not verdict["passed"]


def test_q11_zero_gate_is_told_what_it_got():
    verdict = _code("q11", _gate("    return model.fine(h) + model.coarse(h) + 0 * model.gate(h)\n"))
    assert "`gate.weight` (zeros)" in _part(verdict, "gradients")[0]["text"]


# --------------------------------------------------------------------------- untouched

@pytest.mark.parametrize("qid", ["q7", "q8", "q9", "q10", "q11"])
def test_the_given_buggy_program_is_not_answered_yet(qid):
    question = lesson[qid]
    verdict = _code(qid, question.starter)
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert _myths(verdict) == set()
