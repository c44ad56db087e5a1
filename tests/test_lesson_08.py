"""Lesson 08 (capstone): each bug earns its own points, and wrong answers name their misconception."""

from __future__ import annotations

import ast
import math

import pytest
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode
from autograder.lessons import l08_capstone as L

A = "08_capstone"


def _ask(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": encode(answer)})


def _code(qid, source, part=None, variant="visible"):
    name = ast.parse(source).body[0].name
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": {"__function__": source, "name": name}})


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if not f["ok"]}


# ---------------------------------------------------------------- predict questions

Q1_RIGHT = {"a.is_leaf": False, "b.is_leaf": True, "c.is_leaf": True, "registered": ["c"]}


@pytest.mark.parametrize("wrong, myth", [
    ({"a.is_leaf": True}, "output_can_be_leaf"),
    ({"b.is_leaf": False}, "no_grad_inputs_make_nonleaf"),
    ({"registered": ["a", "b", "c"]}, "tensor_attribute_is_parameter"),
])
def test_q1_names_the_misconception(wrong, myth):
    verdict = _ask("q1", {**Q1_RIGHT, **wrong})
    assert _myths(verdict) == {myth}
    assert 0 < verdict["score"] < 1


def _sigmoid(v):
    return 1 / (1 + math.exp(-v))


@pytest.mark.parametrize("wrong, myth", [
    ({"grad_after_two": [3.0, 0.5]}, "grad_accumulates_not"),
    ({"w_after_two": [0.7, -2.05]}, "grad_accumulates_not"),
    ({"grad_after_zero": [0.0, 0.0]}, "zero_grad_fills_zeros"),
])
def test_q2_names_the_misconception(wrong, myth):
    right = {"grad_after_two": [6.0, 1.0], "w_after_two": [0.1, -2.15], "grad_after_zero": None}
    assert _ask("q2", right)["score"] == 1
    assert _myths(_ask("q2", {**right, **wrong})) == {myth}


def test_q3_in_place_and_data_myths():
    doubled = [2 * _sigmoid(v) * (1 - 2 * _sigmoid(v)) for v in (0.5, -1.0)]
    right = {"grad_after_add": [2.0, 3.0], "inplace_error": RuntimeError,
             "grad_after_data": doubled}
    assert _ask("q3", right)["score"] == 1
    assert _myths(_ask("q3", {**right, "grad_after_add": RuntimeError})) == {
        "inplace_always_fatal"}
    assert _myths(_ask("q3", {**right, "inplace_error": None})) == {"inplace_never_checked"}
    true_grad = [_sigmoid(v) * (1 - _sigmoid(v)) for v in (0.5, -1.0)]
    assert _myths(_ask("q3", {**right, "grad_after_data": true_grad})) == {"data_is_safe"}


def test_q4_statuses_come_from_the_live_doctor():
    right = {"chop.weight": "ok", "garnish.weight": "detached", "dip.weight": "no_grad",
             "oven.weight": "unused", "spice": "zero", "sauce.weight": "frozen"}
    assert _ask("q4", right)["score"] == 1
    verdict = _ask("q4", {**right, "spice": "ok"}, part="quiet")
    assert _myths(verdict) == {"grad_none_check_enough"}
    assert _ask("q4", {**right, "spice": "ok"}, part="cuts")["score"] == 1


# ---------------------------------------------------------------- the script's pieces

PIECES = {
    "q5": (L.BUGGY_MAKE_MODEL, L.FIXED_MAKE_MODEL),
    "q6": (L.BUGGY_FORWARD, L.FIXED_FORWARD),
    "q7": (L.BUGGY_LOSS, L.FIXED_LOSS),
    "q8": (L.BUGGY_TRAIN, L.FIXED_TRAIN),
    "q9": (L.BUGGY_ALARM, L.FIXED_ALARM),
}
PARTS = [(qid, part) for qid in PIECES for part in L.lesson[qid].parts()]


@pytest.mark.parametrize("qid, part", PARTS)
@pytest.mark.parametrize("variant", ["visible", "hidden"])
def test_the_colleagues_code_fails_and_the_fix_passes_every_part(qid, part, variant):
    buggy, fixed = PIECES[qid]
    assert _code(qid, fixed, part, variant)["score"] == 1
    verdict = _code(qid, buggy, part, variant)
    assert verdict["score"] < 1
    assert _myths(verdict) - {None}, verdict  # the failure names a misconception


def test_make_model_parts_are_independent():
    only_gain = L.BUGGY_MAKE_MODEL.replace(
        "torch.randn(16, requires_grad=True) * 0.5", "nn.Parameter(torch.randn(16) * 0.5)")
    assert _code("q5", only_gain, "gain")["score"] == 1
    assert _code("q5", only_gain, "frozen")["score"] == 0
    only_frozen = L.BUGGY_MAKE_MODEL.replace("    model.hidden.requires_grad_(False)", "    pass")
    assert _code("q5", only_frozen, "frozen")["score"] == 1
    assert _code("q5", only_frozen, "gain")["score"] == 0


def test_a_leaf_gain_that_is_not_registered_is_named():
    leaf_only = L.FIXED_MAKE_MODEL.replace("nn.Parameter(torch.randn(16) * 0.5)",
                                           "(torch.randn(16) * 0.5).requires_grad_()")
    verdict = _code("q5", leaf_only, "gain")
    assert "tensor_attribute_is_parameter" in _myths(verdict)
    assert 0 < verdict["score"] < 1  # the leaf check passes


@pytest.mark.parametrize("fixed_part, old, new", [
    ("no_grad", "    with torch.no_grad():                      # the direct route is a fixed "
     "baseline: save memory\n        base", "    base"),
    ("inplace", "h *= model.gain", "h = h * model.gain"),
    ("data", "    pred.data.clamp_(min=0)", "    pred = pred.clamp(min=0)"),
])
def test_forward_parts_are_independent(fixed_part, old, new):
    assert old in L.BUGGY_FORWARD
    source = L.BUGGY_FORWARD.replace(old, new)
    for part in L.lesson["q6"].parts():
        score = _code("q6", source, part)["score"]
        assert (score == 1) == (part == fixed_part), (part, score)


def test_silencing_the_inplace_error_with_data_is_still_wrong():
    source = L.FIXED_FORWARD.replace("h = torch.tanh(model.hidden(x)) * model.gain",
                                     "h = torch.tanh(model.hidden(x))\n    h.data *= model.gain")
    verdict = _code("q6", source, "inplace")
    assert verdict["score"] == 0


def test_zero_grad_in_the_wrong_place_does_not_learn():
    source = L.BUGGY_TRAIN.replace("        loss.backward()\n",
                                   "        loss.backward()\n        opt.zero_grad()\n")
    verdict = _code("q8", source, "converges")
    assert verdict["score"] < 1
    assert any("must fall below" in f["text"] for f in verdict["findings"] if not f["ok"])


def test_an_alarm_that_calls_backward_itself_is_caught():
    source = '''\
def dead_centres(model, loss):
    loss.backward()
    return [n for n, p in model.named_parameters()
            if p.requires_grad and (p.grad is None or not p.grad.any())]
'''
    verdict = _code("q9", source, "false_alarm")
    assert 0 < verdict["score"] < 1
    assert _myths(verdict) == {"grad_accumulates_not"}


def test_a_train_that_crashes_reports_the_error():
    source = L.BUGGY_TRAIN.replace("loss.backward()", "loss.backward(); raise ValueError('oops')")
    verdict = _code("q8", source, "converges")
    assert verdict["score"] == 0
    assert "ValueError" in verdict["findings"][0]["text"]


def test_the_loss_threshold_comes_from_the_reference_run():
    run = L.reference_run("visible")
    losses = run["losses"]
    assert L.loss_threshold(losses) == pytest.approx(losses[-1] + 0.1 * (losses[0] - losses[-1]))
    assert losses[-1] < losses[0]
