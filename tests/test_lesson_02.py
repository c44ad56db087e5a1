"""Lesson 02 (retain_grad): typical wrong answers get the misconception they reveal."""

from __future__ import annotations

import ast

import pytest
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode
from autograder.misconceptions import MISCONCEPTIONS

A = "02_retain_grad"


def _ask(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": answer})


def _predict(qid, answer, part=None):
    return _ask(qid, encode(answer), part)


def _code(qid, src, variant="visible"):
    name = ast.parse(src).body[0].name
    return _ask(qid, {"__function__": src, "name": name}, variant=variant)


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if not f["ok"]}


def test_every_misconception_named_here_exists():
    for key in ("grad_accumulates_not", "retain_grad_after_backward", "retains_grad_means_stored",
                "retains_grad_on_leaf", "zero_grad_fills_zeros", "graph_survives_backward",
                "second_backward_always_fails", "retain_cost_fixed"):
        assert key in MISCONCEPTIONS


def test_q1_overwritten_report():
    verdict = _predict("q1", {"monday": [2.0, 0.0, -1.0], "tuesday": [2.0, 4.0, 6.0]})
    assert _myths(verdict) == {"grad_accumulates_not"} and verdict["score"] == 0.5


def test_q2_zero_grad_is_not_zeros_since_torch_2():
    verdict = _predict("q2", {"after_default": [0.0, 0.0], "alarm": False,
                              "after_zeros": [0.0, 0.0]})
    assert _myths(verdict) == {"zero_grad_fills_zeros", "grad_none_check_enough"}


Q3 = {"suspect_station.grad": [0.5, 0.5], "seen": [0.5, 0.5], "late_station.grad": None,
      "original.grad": [2.75, 4.75], "late_station.retains_grad": True,
      "original.retains_grad": False}


@pytest.mark.parametrize("wrong, myth, part", [
    ({"late_station.grad": [0.5, 0.5]}, "retain_grad_after_backward", "grads"),
    ({"seen": None}, "nonleaf_grad_never_computed", "grads"),
    ({"late_station.retains_grad": False}, "retains_grad_means_stored", "flags"),
    ({"original.retains_grad": True}, "retains_grad_on_leaf", "flags"),
])
def test_q3_names_the_misconception(wrong, myth, part):
    verdict = _predict("q3", {**Q3, **wrong}, part=part)
    assert _myths(verdict) == {myth}
    assert 0 < verdict["score"] < 1
    other = "flags" if part == "grads" else "grads"
    assert _predict("q3", {**Q3, **wrong}, part=other)["score"] == 1


@pytest.mark.parametrize("answer, myths", [
    ({"second": None, "again": None, "x.grad": [6.0, 10.0]}, {"graph_survives_backward"}),
    ({"second": RuntimeError, "again": RuntimeError, "x.grad": [3.0, 5.0]},
     {"second_backward_always_fails"}),
])
def test_q4_backward_twice(answer, myths):
    assert _myths(_predict("q4", answer)) == myths


def test_q4_exception_answers_must_be_the_class_or_none():
    right = {"second": RuntimeError, "again": None, "x.grad": [4.0, 6.0]}
    assert _predict("q4", right)["score"] == 1
    assert _predict("q4", {**right, "second": "ValueError"})["score"] < 1


def test_q5_fixed_cost_myth():
    verdict = _predict("q5", {"small": 72, "large": 72, "param_grad_bytes": 7200})
    assert _myths(verdict) == {"retain_cost_fixed"}


SOL6 = """\
def first_station_grad(model, x):
    h = model[0](x)
    h.retain_grad()
    out = h
    for layer in list(model)[1:]:
        out = layer(out)
    out.sum().backward()
    return h.grad
"""


def test_q6_solution_passes_hidden_models_and_a_late_monitor_is_named():
    assert _code("q6", SOL6, variant="hidden")["score"] == 1
    late = SOL6.replace("    h.retain_grad()\n", "").replace("    return h.grad",
                                                           "    h.retain_grad()\n    return h.grad")
    verdict = _code("q6", late)
    assert verdict["score"] == 0 and _myths(verdict) == {"retain_grad_after_backward"}
    forgot = SOL6.replace("    h.retain_grad()\n", "")
    assert "nonleaf_grad_silent" in _myths(_code("q6", forgot))


SOL7 = """\
def retained_grad_bytes(model, x):
    h, stations = x, []
    for layer in model:
        h = layer(h)
        h.retain_grad()
        stations.append(h)
    h.sum().backward()
    return sum(s.grad.numel() * s.grad.element_size() for s in stations)
"""


def test_q7_hidden_float64_model_needs_element_size():
    assert _code("q7", SOL7, variant="hidden")["score"] == 1
    four = SOL7.replace("s.grad.element_size()", "4")
    assert _code("q7", four)["score"] == 1  # float32 only in the visible tests
    assert _code("q7", four, variant="hidden")["score"] < 1


def test_q7_parameter_sized_answer_is_the_fixed_cost_myth():
    src = "def retained_grad_bytes(model, x):\n    return sum(p.numel() * 4 for p in model.parameters())\n"
    assert _myths(_code("q7", src)) == {"retain_cost_fixed"}


def test_q10_second_backward_error_is_named():
    src = """\
def audit_two_reports():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    station = w.exp()
    speed = station.sum()
    cost = (station * station).sum()
    speed.backward()
    cost.backward()
    return w
"""
    verdict = _code("q10", src)
    assert verdict["score"] == 0 and _myths(verdict) == {"graph_survives_backward"}
    fixed = src.replace("speed.backward()", "speed.backward(retain_graph=True)")
    assert _code("q10", fixed)["score"] == 1  # the other fix works too
