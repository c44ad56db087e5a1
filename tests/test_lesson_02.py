"""Lesson 02 (retain_grad): typical wrong answers get feedback aimed at the mistake.

Each wrong answer below is one a learner writes from a misconception or from the exercise text.
A case names the misconception the answer's evidence points at, or None and a phrase the
feedback must say instead (a precise account of what happened, with no label). Correct answers
written differently must pass, and an untouched answer is "not answered yet", never a belief.
"""

from __future__ import annotations

import ast
import importlib

import pytest
import torch
from helpers import isolated_evaluate

from autograder.encoding import encode

A = "02_retain_grad"
_lesson = importlib.import_module(f"autograder.lessons.l{A}").lesson


def _ask(qid, answer, variant="visible", part=None):
    if isinstance(answer, str) and answer.startswith("def "):
        answer = {"__function__": answer, "name": ast.parse(answer).body[0].name}
    else:
        answer = encode(answer)
    return isolated_evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                              "answer": answer})


def _wrong(verdict):
    return [f for f in verdict["findings"] if f["status"] == "wrong"]


Q1 = {"monday": [2.0, 0.0, -1.0], "tuesday": [4.0, 4.0, 5.0]}
Q2 = {"after_default": None, "alarm": True, "after_zeros": [0.0, 0.0]}
Q3 = {"suspect_station.grad": [0.5, 0.5], "seen": [[0.5, 0.5]], "late_station.grad": None,
      "original.grad": [2.75, 4.75], "late_station.retains_grad": True,
      "original.retains_grad": False}
Q4 = {"second": RuntimeError, "again": None, "x.grad": [4.0, 6.0]}
Q5 = {"small": 72, "large": 7200, "param_grad_bytes": 232}

FIRST = """\
def first_station_grad(model, x):
    h = model[0](x)
    h.retain_grad()
    out = h
    for layer in list(model)[1:]:
        out = layer(out)
    out.sum().backward()
    return h.grad
"""
BYTES = """\
def retained_grad_bytes(model, x):
    h, stations = x, []
    for layer in model:
        h = layer(h)
        h.retain_grad()
        stations.append(h)
    h.sum().backward()
    return sum(s.grad.numel() * s.grad.element_size() for s in stations)
"""
LATE = """\
def audit_station():
    centre = torch.tensor([2.0, 4.0], requires_grad=True)
    station = centre * 1.5                 # Double-11: watch this transit station
    cost = (station ** 2).mean()
    cost.backward()
    station.retain_grad()                  # install the monitor
    return station
"""
TRAIN = """\
def train_centre(steps=3):
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    target = torch.tensor([3.0, 2.0])
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        loss = ((w - target) ** 2).sum()
        loss.backward()
        opt.step()
    return w
"""
TWO = _lesson["q10"].starter  # the program as the release gives it

# (question, answer, the misconception named, or None and a phrase the feedback says instead)
WRONG = [
    # Q1
    ("q1", {**Q1, "tuesday": [2.0, 4.0, 6.0]}, "grad_accumulates_not"),
    ("q1", {**Q1, "tuesday": [4.0, 8.0, 12.0]}, (None, "added on top of Monday's")),
    ("q1", {**Q1, "monday": [1.0, 2.0, 3.0]}, (None, "Monday's report is d/dw")),
    # Q2
    ("q2", {**Q2, "after_default": [0.0, 0.0]}, "zero_grad_fills_zeros"),
    ("q2", {**Q2, "alarm": False}, "zero_grad_fills_zeros"),
    ("q2", {**Q2, "after_zeros": None}, (None, "keeps the tensor and fills it with zeros")),
    ("q2", {**Q2, "after_default": [2.0, -4.0]}, (None, "sets .grad to None")),
    # Q3
    ("q3", {**Q3, "late_station.grad": [0.5, 0.5]}, "retain_grad_after_backward"),
    ("q3", {**Q3, "seen": None}, "nonleaf_grad_never_computed"),
    ("q3", {**Q3, "seen": []}, "nonleaf_grad_never_computed"),
    ("q3", {**Q3, "original.grad": [0.75, 0.75]}, "one_route_only"),
    ("q3", {**Q3, "original.grad": [2.0, 4.0]}, "one_route_only"),
    ("q3", {**Q3, "late_station.retains_grad": False}, "retains_grad_means_stored"),
    ("q3", {**Q3, "original.retains_grad": True}, "retains_grad_on_leaf"),
    ("q3", {**Q3, "suspect_station.grad": [1.0, 1.0]}, (None, "mean of 2 numbers")),
    # Q4
    ("q4", {"second": None, "again": None, "x.grad": [6.0, 10.0]}, "graph_survives_backward"),
    ("q4", {**Q4, "again": RuntimeError}, "second_backward_always_fails"),
    ("q4", {**Q4, "x.grad": [3.0, 5.0]}, "second_backward_always_fails"),
    ("q4", {**Q4, "x.grad": [1.0, 1.0]}, "grad_accumulates_not"),
    ("q4", {**Q4, "second": "ValueError"}, (None, "raises RuntimeError")),
    # Q5
    ("q5", {**Q5, "large": 72}, "retain_cost_fixed"),
    ("q5", {**Q5, "small": 232}, "retain_cost_fixed"),
    ("q5", {**Q5, "param_grad_bytes": 7200}, "retain_cost_fixed"),
    ("q5", {**Q5, "small": 18}, (None, "Count bytes, not numbers")),
    ("q5", {**Q5, "param_grad_bytes": 464}, (None, "the two backward calls add into the same")),
    # Q6
    ("q6", FIRST.replace("    h.retain_grad()\n", ""), "nonleaf_grad_stored"),
    ("q6", FIRST.replace("    h.retain_grad()\n", "").replace(
        "    return h.grad", "    h.retain_grad()\n    return h.grad"), "retain_grad_after_backward"),
    ("q6", FIRST.replace("    out = h\n    for layer in list(model)[1:]:\n        out = layer(out)\n"
                         "    out.sum().backward()", "    model(x).sum().backward()"),
     "monitor_watches_layer"),
    ("q6", "def first_station_grad(model, x):\n    model[0].retain_grad()\n"
           "    model(x).sum().backward()\n    return model[0].weight.grad\n",
     "monitor_watches_layer"),
    ("q6", "def first_station_grad(model, x):\n    model(x).sum().backward()\n"
           "    return model[0].weight.grad\n", "monitor_watches_layer"),
    ("q6", "def first_station_grad(model, x):\n    x.retain_grad()\n"
           "    model(x).sum().backward()\n    return x.grad\n", "retain_grad_on_constant"),
    ("q6", "def first_station_grad(model, x):\n    h = x\n    for layer in model:\n"
           "        h = layer(h)\n        h.retain_grad()\n    h.sum().backward()\n"
           "    return h.grad\n", (None, "not of `model[0]`")),
    ("q6", FIRST.replace("return h.grad", "return h"), (None, "the station's own value")),
    # Q7
    ("q7", BYTES.replace("s.grad.element_size()", "1"), (None, "multiply by `element_size()`")),
    ("q7", "def retained_grad_bytes(model, x):\n"
           "    return sum(p.numel() * p.element_size() for p in model.parameters())\n",
     "retain_cost_fixed"),
    ("q7", BYTES.replace("        h.retain_grad()\n", "").replace(
        "    h.sum().backward()\n", "    h.sum().backward()\n    for s in stations:\n"
                                   "        s.retain_grad()\n"), "retain_grad_after_backward"),
    ("q7", BYTES.replace("        h.retain_grad()\n", ""), "nonleaf_grad_stored"),
    ("q7", BYTES.replace("for s in stations)", "for s in stations[-1:])"),
     (None, "the last station's alone")),
    # Q8
    ("q8", LATE.replace("    station.retain_grad()                  # install the monitor\n", ""),
     "nonleaf_grad_stored"),
    ("q8", LATE.replace("    return station", "    cost.backward()\n    return station"),
     "graph_survives_backward"),
    ("q8", LATE.replace("station.retain_grad()                  # install the monitor",
                        "centre.retain_grad()").replace("return station", "return centre"),
     (None, "return the transit station itself")),
    ("q8", LATE.replace("cost.backward()", "cost.backward(retain_graph=True)").replace(
        "    return station",
        "    cost.backward(retain_graph=True)\n    cost.backward()\n    return station"),
     "grad_accumulates_not"),
    # Q9
    ("q9", TRAIN.replace("        opt.zero_grad()\n        loss = ((w - target) ** 2).sum()\n"
                         "        loss.backward()\n",
                         "        loss = ((w - target) ** 2).sum()\n        loss.backward()\n"
                         "        opt.zero_grad()\n"), "zero_grad_misplaced"),
    ("q9", TRAIN.replace("        opt.zero_grad()\n", "").replace(
        "    for _", "    opt.zero_grad()\n    for _"), "zero_grad_misplaced"),
    ("q9", TRAIN.replace("        opt.zero_grad()\n", "").replace("lr=0.1", "lr=0.05"),
     "grad_accumulates_not"),
    ("q9", TRAIN.replace("        opt.zero_grad()\n", "        w.grad.zero_()\n"),
     "zero_grad_fills_zeros"),  # a .grad that is None until the first backward
    # Q10
    ("q10", TWO.replace("cost.backward()", "cost.backward(retain_graph=True)"),
     "graph_survives_backward"),
    ("q10", TWO.replace("    cost.backward()\n", ""), (None, "the gradient of `speed` alone")),
    ("q10", TWO.replace("(station * station)", "(station.detach() * station.detach())").replace(
        "    speed.backward()\n    cost.backward()\n", "    (speed + cost).backward()\n"),
     "detach_in_loss_harmless"),
    ("q10", TWO.replace("    speed.backward()\n", "    speed.backward(retain_graph=True)\n"
                        "    w.grad = None\n"), (None, "the gradient of `cost` alone")),
]


@pytest.mark.parametrize("qid, answer, expect", WRONG,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(WRONG)])
def test_a_typical_wrong_answer_gets_an_aimed_hint(qid, answer, expect):
    verdict = _ask(qid, answer)
    wrong = _wrong(verdict)
    assert wrong and not verdict["passed"], verdict
    named = {f["misconception"] for f in wrong} - {None}
    if isinstance(expect, tuple):
        _, phrase = expect
        assert not named, (named, [f["text"] for f in wrong])
        assert any(phrase in f["text"] for f in wrong), [f["text"] for f in wrong]
    else:
        assert named == {expect}, (named, [f["text"] for f in wrong])


RIGHT = [
    ("q1", {"monday": torch.tensor([2.0, 0.0, -1.0]), "tuesday": [4, 4, 5]}),
    ("q3", {**Q3, "seen": [0.5, 0.5]}),  # the one entry of the list the probe filled
    ("q4", {**Q4, "x.grad": torch.tensor([4.0, 6.0])}),
    ("q6", FIRST.replace("    h.retain_grad()\n", "    kept = []\n    h.register_hook(kept.append)\n")
     .replace("return h.grad", "return kept[0]")),
    ("q6", "def first_station_grad(model, x):\n    h = model[0](x)\n"
           "    (g,) = torch.autograd.grad(model[1:](h).sum(), h)\n    return g\n"),
    ("q7", BYTES.replace("s.grad.numel() * s.grad.element_size()", "s.grad.nbytes")),
    ("q8", LATE.replace("    cost.backward()\n    station.retain_grad()                  # install "
                        "the monitor\n", "    def keep(g):\n        station.grad = g\n"
                        "    station.register_hook(keep)\n    cost.backward()\n")),
    ("q9", TRAIN.replace("        opt.zero_grad()\n", "").replace(
        "        opt.step()\n", "        opt.step()\n        opt.zero_grad()\n")),
    ("q9", TRAIN.replace("opt.zero_grad()", "w.grad = None")),
    ("q10", TWO.replace("speed.backward()", "speed.backward(retain_graph=True)")),
]


@pytest.mark.parametrize("qid, answer", RIGHT, ids=[f"{c[0]}-{i}" for i, c in enumerate(RIGHT)])
def test_a_correct_answer_written_differently_passes(qid, answer):
    verdict = _ask(qid, answer)
    assert verdict["passed"], [f["text"] for f in verdict["findings"] if f["status"] != "right"]


def test_q6_and_q7_hidden_models_pass_for_the_solution_and_q7_names_four_bytes_there():
    assert _ask("q6", FIRST, variant="hidden")["passed"]
    assert _ask("q7", BYTES, variant="hidden")["passed"]
    four = BYTES.replace("s.grad.element_size()", "4")
    assert _ask("q7", four)["passed"]  # float32 only in the visible models
    hidden = _ask("q7", four, variant="hidden")
    assert {f["misconception"] for f in _wrong(hidden)} == {"float_is_four_bytes"}


def test_q9_hidden_steps_catch_a_loop_that_ignores_steps():
    assert _ask("q9", TRAIN, variant="hidden")["passed"]
    fixed = _ask("q9", TRAIN.replace("range(steps)", "range(3)"), variant="hidden")
    assert any("let the loop run `steps` times" in f["text"] for f in _wrong(fixed))


@pytest.mark.parametrize("qid, starter", [
    ("q6", "def first_station_grad(model, x):\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    ("q8", LATE), ("q10", TWO),
])
def test_an_untouched_answer_is_not_answered_yet(qid, starter):
    verdict = _ask(qid, starter)
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not any(f["misconception"] for f in verdict["findings"])
