"""Lesson 05 (no_grad): typical wrong answers get the misconception they reveal."""

from __future__ import annotations

import ast

import pytest
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode

A = "05_no_grad"


def _ask(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": answer})


def _predict(qid, answer, part=None):
    return _ask(qid, encode(answer), part)


def _code(src, part=None, variant="visible", qid=None):
    name = ast.parse(src).body[0].name
    qid = qid or {"predict": "q8", "sgd_step": "q9", "clip_centres": "q10",
                  "validation_loss": "q11"}[name]
    return _ask(qid, {"__function__": src, "name": name}, part, variant)


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if not f["ok"]}


Q1 = {"w.requires_grad": True, "quiet.requires_grad": False, "quiet.is_leaf": True,
      "loud.is_leaf": False, "later.requires_grad": False, "mixed.requires_grad": True}


@pytest.mark.parametrize("wrong, myth", [
    ({"w.requires_grad": False}, "no_grad_flips_flag"),
    ({"quiet.is_leaf": False}, "no_grad_result_has_history"),
    ({"later.requires_grad": True}, "no_grad_wears_off"),
    ({"mixed.requires_grad": False}, "output_can_be_leaf"),
])
def test_q1_names_the_misconception(wrong, myth):
    verdict = _predict("q1", {**Q1, **wrong})
    assert _myths(verdict) == {myth}
    assert 0 < verdict["score"] < 1


def test_q2_seed_scenario_and_the_silent_branch():
    right = {"error": RuntimeError, "z.is_leaf": True, "x.grad": [1.0, 1.0]}
    assert _predict("q2", right)["score"] == 1
    assert _myths(_predict("q2", {**right, "error": None})) == {"no_grad_backward_silent"}
    assert _myths(_predict("q2", {**right, "x.grad": [3.0, 3.0]})) == {"no_grad_branch_counts"}


def test_q3_outer_switch_is_a_named_myth():
    right = {f"{k}.requires_grad": k in "af" for k in "abcdef"}
    verdict = _predict("q3", {**right, "a.requires_grad": False, "d.requires_grad": True})
    assert _myths(verdict) == {"grad_mode_scope"}
    assert _predict("q3", right, part="blocks")["score"] == 1


def test_q4_inference_mode_is_not_no_grad():
    right = {"frozen.requires_grad": False, "frozen.is_inference()": True,
             "quiet.is_inference()": False, "frozen_error": RuntimeError, "w.grad": [2.0, 4.0]}
    assert _predict("q4", right)["score"] == 1
    verdict = _predict("q4", {**right, "frozen_error": None, "w.grad": None})
    assert _myths(verdict) == {"inference_mode_is_no_grad", "no_grad_result_unusable"}


def test_q5_eval_and_no_grad_are_different_switches():
    verdict = _predict("q5", {"out_eval.requires_grad": False, "out_quiet.requires_grad": False,
                              "torch.equal(out_eval, out_quiet)": True,
                              "torch.equal(again_1, again_2)": True})
    assert _myths(verdict) == {"eval_is_no_grad", "no_grad_disables_dropout"}


def test_q6_seed_004_scenario_3_is_a_named_myth():
    verdict = _predict("q6", {"torch.equal(net_a.weight, net_b.weight)": False,
                              "net_b.weight.is_leaf": True, "net_b.weight.requires_grad": True},
                       part="seed")
    assert _myths(verdict) == {"step_inside_no_grad_breaks"}
    verdict = _predict("q6", {"net_a.weight._version > version_before": False,
                              "torch.equal(spare.weight, spare_before)": False,
                              "torch.equal(stranger, stranger_before)": True}, part="how")
    assert _myths(verdict) == {"step_uses_data", "step_updates_all"}


def test_q7_eval_and_detach_do_not_save_memory():
    verdict = _predict("q7", {"quiet_bytes == 0": True, "inference_bytes == 0": True,
                              "eval_bytes == 0": True, "detached_bytes == 0": True,
                              "eval_bytes < train_bytes": True})
    assert _myths(verdict) == {"eval_is_no_grad", "detach_saves_memory"}


# ---------------------------------------------------------------- code questions

EVAL_ONLY = "def predict(model, batch):\n    model.eval()\n    return model(batch)\n"
DETACH_AFTER = ("def predict(model, batch):\n    model.eval()\n"
                "    return model(batch).detach()\n")
NO_GRAD_ONLY = ("def predict(model, batch):\n    with torch.no_grad():\n"
                "        return model(batch)\n")
FREEZE = ("def predict(model, batch):\n    model.eval()\n"
          "    for p in model.parameters():\n        p.requires_grad_(False)\n"
          "    return model(batch)\n")
LEFT_OFF = ("def predict(model, batch):\n    model.eval()\n    torch.set_grad_enabled(False)\n"
            "    return model(batch)\n")


@pytest.mark.parametrize("src, myths", [
    (EVAL_ONLY, {"eval_is_no_grad"}),
    (DETACH_AFTER, {"detach_saves_memory"}),
    (FREEZE, {"inference_freezes_params"}),
    (LEFT_OFF, {"grad_mode_scope"}),
])
def test_q8_inference_shortcuts_are_caught(src, myths):
    for variant in ("visible", "hidden"):
        verdict = _code(src, part="quiet", variant=variant)
        assert verdict["score"] < 1 and _myths(verdict) == myths, verdict


def test_q8_no_grad_without_eval_keeps_dropout():
    assert _code(NO_GRAD_ONLY, part="quiet")["score"] == 1
    verdict = _code(NO_GRAD_ONLY, part="eval", variant="hidden")
    assert verdict["score"] == 0 and _myths(verdict) == {"no_grad_disables_dropout"}


def test_q8_inference_mode_is_a_right_answer_too():
    src = ("def predict(model, batch):\n    model.eval()\n    with torch.inference_mode():\n"
           "        return model(batch)\n")
    for part in ("quiet", "eval"):
        assert _code(src, part=part, variant="hidden")["score"] == 1


def test_q9_outside_no_grad_names_the_leaf_error():
    src = ("def sgd_step(params, lr):\n    for p in params:\n        if p.grad is not None:\n"
           "            p -= lr * p.grad\n")
    verdict = _code(src, part="update")
    assert verdict["score"] == 0 and _myths(verdict) == {"leaf_inplace_ok"}
    assert "a leaf Variable" in verdict["findings"][0]["text"]


def test_q9_data_update_is_right_in_value_but_not_in_how():
    src = ("def sgd_step(params, lr):\n    for p in params:\n        if p.grad is not None:\n"
           "            p.data -= lr * p.grad\n")
    assert _code(src, part="update", variant="hidden")["score"] == 1
    verdict = _code(src, part="how", variant="hidden")
    assert verdict["score"] < 1 and _myths(verdict) == {"data_is_safe"}


def test_q9_rebinding_moves_nothing():
    src = ("def sgd_step(params, lr):\n    for p in params:\n        if p.grad is not None:\n"
           "            p = p - lr * p.grad\n")
    assert _code(src, part="update")["score"] < 1


def test_q9_updating_a_none_grad_raises_a_clear_error():
    src = ("def sgd_step(params, lr):\n    with torch.no_grad():\n        for p in params:\n"
           "            p -= lr * p.grad\n")
    verdict = _code(src, part="update")
    assert verdict["score"] == 0 and "TypeError" in verdict["findings"][0]["text"]


def test_q10_the_buggy_version_names_the_leaf_error():
    src = ("def clip_centres(model, limit):\n    for p in model.parameters():\n"
           "        p.clamp_(-limit, limit)\n    return model\n")
    assert _myths(_code(src)) == {"leaf_inplace_ok"}


@pytest.mark.parametrize("body, myth", [
    ("        p.data.clamp_(-limit, limit)\n", "data_is_safe"),
    ("        p = p.clamp(-limit, limit)\n", None),
])
def test_q10_tempting_fixes_fail(body, myth):
    src = f"def clip_centres(model, limit):\n    for p in model.parameters():\n{body}    return model\n"
    verdict = _code(src, variant="hidden")
    assert verdict["score"] < 1
    if myth:
        assert myth in _myths(verdict)


BUGGY_VALIDATION = ("def validation_loss(model, batches):\n    model.eval()\n    total = 0.0\n"
                    "    for x, y in batches:\n"
                    "        total = total + nn.functional.mse_loss(model(x), y)\n"
                    "    return total / len(batches)\n")


def test_q11_the_buggy_version_fails_both_parts():
    for part in ("record", "result"):
        verdict = _code(BUGGY_VALIDATION, part=part)
        assert verdict["score"] < 1 and _myths(verdict) == {"eval_is_no_grad"}


def test_q11_item_at_the_end_fixes_the_result_but_not_the_memory():
    src = BUGGY_VALIDATION.replace("return total / len(batches)",
                                   "return (total / len(batches)).item()")
    assert _code(src, part="result")["score"] == 1
    verdict = _code(src, part="record")
    assert verdict["score"] < 1 and _myths(verdict) == {"detach_saves_memory"}
