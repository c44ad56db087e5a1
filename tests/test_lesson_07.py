"""Lesson 07 (the gradient clinic): typical wrong answers get the misconception they reveal, and
the find-the-bug checks tell a half-done repair from a full one."""

from __future__ import annotations

import ast

import pytest
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode
from autograder.misconceptions import MISCONCEPTIONS

A = "07_gradient_clinic"


def _ev(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": answer})


def _predict(qid, answer, part=None):
    return _ev(qid, encode(answer), part)


def _code(qid, src, part=None, variant="visible"):
    name = ast.parse(src).body[0].name
    return _ev(qid, {"__function__": src, "name": name}, part, variant)


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if not f["ok"]}


def test_lesson_misconceptions_are_registered_for_this_lesson():
    for key in ("zero_gradient_is_none", "sigmoid_stack_healthy", "residual_fades",
                "hard_choice_trains", "grad_none_check_enough"):
        assert MISCONCEPTIONS[key].lesson == A, key


ALL = ["main.weight", "main.bias", "side.weight", "side.bias"]
Q1_RIGHT = {"after_backward": [], "side_grad": [[0.0, 0.0]], "after_zero_grad": ALL}


def test_q1_zero_taken_for_none():
    wrong = {**Q1_RIGHT, "after_backward": ["side.weight", "side.bias"], "side_grad": None}
    verdict = _predict("q1", wrong, part="zeros")
    assert _myths(verdict) == {"zero_gradient_is_none"} and verdict["score"] == 0


def test_q1_zero_grad_thought_to_fill_zeros():
    verdict = _predict("q1", {**Q1_RIGHT, "after_zero_grad": []}, part="zero_grad")
    assert _myths(verdict) == {"zero_grad_fills_zeros"}
    assert _predict("q1", {**Q1_RIGHT, "after_zero_grad": []}, part="zeros")["score"] == 1


Q2_RIGHT = {"error_mul": None, "error_sigmoid": RuntimeError, "d.grad": None,
            "e.grad": [2.0, 4.0], "w": [0.0, 0.0]}


@pytest.mark.parametrize("wrong, myth", [
    ({"error_mul": RuntimeError}, "inplace_always_fatal"),
    ({"error_sigmoid": None}, "inplace_grad_none"),
    ({"d.grad": [2.0, 2.0]}, "no_grad_branch_counts"),
    ({"e.grad": None}, "no_grad_result_unusable"),
    ({"w": [1.0, -1.0]}, "step_inside_no_grad_breaks"),
])
def test_q2_names_the_misconception(wrong, myth):
    verdict = _predict("q2", {**Q2_RIGHT, **wrong})
    assert myth in _myths(verdict) and 0 < verdict["score"] < 1


def test_q3_none_for_the_zero_branch():
    verdict = _predict("q3", {"grads": [2.0, None, 2.0, None], "y_off.grad_fn": None,
                              "y_cut.requires_grad": False})
    assert _myths(verdict) == {"zero_gradient_is_none"}


@pytest.mark.parametrize("key, myth", [
    ("sigmoid", "sigmoid_stack_healthy"),
    ("sigmoid_residual", "residual_fades"),
    ("relu_residual_detached", "residual_detach_harmless"),
])
def test_q4_names_the_misconception(key, myth):
    right = {"sigmoid": True, "sigmoid_residual": False, "relu_residual": False,
             "relu_residual_detached": True}
    verdict = _predict("q4", {**right, key: not right[key]})
    assert _myths(verdict) == {myth}


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


def test_q5_the_seeds_alarm_fails_the_statuses():
    verdict = _code("q5", NONE_ONLY, part="statuses")
    assert verdict["score"] == 0 and "grad_none_check_enough" in _myths(verdict)


def test_q5_backward_based_report_loses_hygiene():
    # right statuses on a fresh model, but it writes .grad and frees the graph
    assert _code("q5", VIA_BACKWARD, part="statuses")["score"] == 1
    hygiene = _code("q5", VIA_BACKWARD, part="hygiene")
    assert hygiene["score"] == 0
    assert "graph_survives_backward" in _myths(hygiene)
    # with last step's gradients in .grad, the hidden statuses see stale values as well
    assert _code("q5", VIA_BACKWARD, part="statuses", variant="hidden")["score"] < 1


EXPLODING = '''
def deep_net(depth, width):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(width, width)

        def forward(self, h):
            return h + torch.relu(self.lin(h))
    return nn.Sequential(*[Block() for _ in range(depth)])
'''


def test_q6_unbounded_residual_passes_flow_but_explodes_in_training():
    assert _code("q6", EXPLODING, part="flow")["score"] == 1
    training = _code("q6", EXPLODING, part="training")
    assert training["score"] == 0
    assert "exploded" in training["findings"][0]["text"]


NO_CLAMP = '''
def forward(model, x):
    return model.head(torch.tanh(model.embed(x)))
'''


def test_q10_dropping_the_clamp_is_caught():
    verdict = _code("q10", NO_CLAMP, part="gradients")
    assert 0 < verdict["score"] < 1


PARTIAL_GATE = '''
def gated_forward(model, x):
    h = torch.tanh(model.embed(x))
    return model.fine(h) + model.coarse(h) + 0 * model.gate(h)
'''


def test_q11_gate_multiplied_by_zero_is_named():
    verdict = _code("q11", PARTIAL_GATE, part="gradients")
    assert verdict["score"] == 0 and "hard_choice_trains" in _myths(verdict)
    assert "gate.weight (zeros)" in verdict["findings"][0]["text"]
