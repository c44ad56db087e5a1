"""Lesson 05 (no_grad): typical wrong answers get feedback aimed at the mistake they show.

Every wrong answer below is written as a learner would answer, from the misconceptions and the
exercise texts; each asserts the misconception its evidence names (or, where the answer shows
no belief the course names, that no label is given and the text says what happened). Correct
answers written differently must pass.
"""

from __future__ import annotations

import ast

import pytest
import torch
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode

A = "05_no_grad"


def _ask(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": answer})


def _predict(qid, answer, part=None):
    return _ask(qid, encode(answer), part)


QIDS = {"predict": "q8", "sgd_step": "q9", "clip_centres": "q10", "validation_loss": "q11"}


def _code(src, part=None, variant="visible"):
    name = ast.parse(src).body[0].name
    return _ask(QIDS[name], {"__function__": src, "name": name}, part, variant)


def _wrong(verdict, part=None):
    return [f for f in verdict["findings"] if f["status"] == "wrong"
            and (part is None or f["part"] in (part, None))]


def _myths(verdict, part=None):
    return {f["misconception"] for f in _wrong(verdict, part)}


def _passes(verdict):
    assert verdict["passed"], [f["text"] for f in verdict["findings"] if f["status"] != "right"]


# ---------------------------------------------------------------- predict questions

Q1 = {"w.requires_grad": True, "quiet.requires_grad": False, "quiet.is_leaf": True,
      "loud.is_leaf": False, "later.requires_grad": False, "mixed.requires_grad": True}
Q2 = {"error": RuntimeError, "z.is_leaf": True, "x.grad": [1.0, 1.0]}
Q3 = {f"{k}.requires_grad": k in "af" for k in "abcdef"}
Q4 = {"frozen.requires_grad": False, "frozen.is_inference()": True,
      "quiet.is_inference()": False, "frozen_error": RuntimeError, "w.grad": [2.0, 4.0]}
Q5 = {"out_eval.requires_grad": True, "out_quiet.requires_grad": False,
      "torch.equal(out_eval, out_quiet)": True, "torch.equal(again_1, again_2)": False}
Q6 = {"torch.equal(net_a.weight, net_b.weight)": True, "net_b.weight.is_leaf": True,
      "net_b.weight.requires_grad": True, "net_a.weight._version > version_before": True,
      "torch.equal(spare.weight, spare_before)": True,
      "torch.equal(stranger, stranger_before)": True}
Q7 = {"quiet_bytes == 0": True, "inference_bytes == 0": True, "eval_bytes == 0": False,
      "detached_bytes == 0": False, "eval_bytes < train_bytes": True}
RIGHT = {"q1": Q1, "q2": Q2, "q3": Q3, "q4": Q4, "q5": Q5, "q6": Q6, "q7": Q7}

PREDICT_WRONG = [
    ("q1", {"w.requires_grad": False}, {"no_grad_flips_flag"}),
    ("q1", {"quiet.requires_grad": True, "quiet.is_leaf": False}, {"no_grad_result_has_history"}),
    ("q1", {"loud.is_leaf": True}, {"grad_mode_scope"}),                 # still off after it
    ("q1", {"w.requires_grad": False, "loud.is_leaf": True}, {"no_grad_flips_flag"}),
    ("q1", {"later.requires_grad": True}, {"no_grad_wears_off"}),
    ("q1", {"mixed.requires_grad": False}, {"no_grad_result_unusable"}),
    ("q2", {"error": None}, {"no_grad_backward_silent"}),
    ("q2", {"x.grad": [3.0, 3.0]}, {"no_grad_branch_counts"}),
    ("q2", {"x.grad": torch.tensor([3.0, 3.0])}, {"no_grad_branch_counts"}),
    ("q2", {"x.grad": None}, {"no_grad_result_unusable"}),
    ("q2", {"z.is_leaf": False}, {"no_grad_wears_off"}),
    ("q3", {"a.requires_grad": False}, {"grad_mode_scope"}),              # the outer one wins
    ("q3", {"b.requires_grad": True}, {"grad_mode_scope"}),
    ("q3", {"d.requires_grad": True}, {"grad_mode_scope"}),
    ("q3", {"e.requires_grad": True}, {"grad_mode_scope"}),
    ("q4", {"frozen_error": None, "w.grad": [4.0, 8.0]}, {"inference_mode_is_no_grad"}),
    ("q4", {"quiet.is_inference()": True}, {"inference_mode_is_no_grad"}),
    ("q4", {"frozen.is_inference()": False}, {"inference_mode_is_no_grad"}),
    ("q4", {"w.grad": None}, {"no_grad_result_unusable"}),
    ("q4", {"frozen.requires_grad": True}, {"no_grad_result_has_history"}),
    ("q5", {"out_eval.requires_grad": False}, {"eval_is_no_grad"}),
    ("q5", {"out_quiet.requires_grad": True}, {"no_grad_result_has_history"}),
    ("q5", {"torch.equal(out_eval, out_quiet)": False}, {"no_grad_changes_values"}),
    ("q5", {"torch.equal(again_1, again_2)": True}, {"no_grad_disables_dropout"}),
    ("q6", {"torch.equal(net_a.weight, net_b.weight)": False}, {"step_inside_no_grad_breaks"}),
    ("q6", {"net_b.weight.is_leaf": False}, {"step_inside_no_grad_breaks"}),
    ("q6", {"net_b.weight.requires_grad": False}, {"no_grad_flips_flag"}),
    ("q6", {"net_a.weight._version > version_before": False}, {"step_uses_data"}),
    ("q6", {"torch.equal(spare.weight, spare_before)": False}, {"step_updates_all"}),
    ("q6", {"torch.equal(stranger, stranger_before)": False}, {"step_updates_all"}),
    ("q7", {"eval_bytes == 0": True}, {"eval_is_no_grad"}),
    ("q7", {"detached_bytes == 0": True}, {"detach_saves_memory"}),
    ("q7", {"quiet_bytes == 0": False}, {"no_grad_keeps_activations"}),
    ("q7", {"eval_bytes < train_bytes": False}, {None}),   # the Dropout mask: explained, no label
]


@pytest.mark.parametrize("qid, change, myths", PREDICT_WRONG)
def test_predict_wrong_answers_name_what_they_show(qid, change, myths):
    verdict = _predict(qid, {**RIGHT[qid], **change})
    assert _myths(verdict) == myths
    assert 0 < verdict["score"] < 1
    for f in _wrong(verdict):
        assert "torch says" in f["text"]


@pytest.mark.parametrize("qid", sorted(RIGHT))
def test_predict_right_answers_pass(qid):
    _passes(_predict(qid, RIGHT[qid]))


def test_predict_answers_written_differently_pass():
    _passes(_predict("q2", {**Q2, "x.grad": torch.tensor([1.0, 1.0]), "error": "RuntimeError"}))
    _passes(_predict("q4", {**Q4, "w.grad": (2, 4), "frozen_error": RuntimeError("x")}))


# ---------------------------------------------------------------- Q8: predict()

EVAL_ONLY = "def predict(model, batch):\n    model.eval()\n    return model(batch)\n"
DETACH_AFTER = ("def predict(model, batch):\n    model.eval()\n"
                "    return model(batch).detach()\n")
DETACH_INPUT = ("def predict(model, batch):\n    model.eval()\n"
                "    return model(batch.detach())\n")
MODULE_FLAG = ("def predict(model, batch):\n    model.eval()\n    model.requires_grad = False\n"
               "    return model(batch)\n")
NO_GRAD_ONLY = ("def predict(model, batch):\n    with torch.no_grad():\n"
                "        return model(batch)\n")
FREEZE = ("def predict(model, batch):\n    model.eval()\n"
          "    for p in model.parameters():\n        p.requires_grad_(False)\n"
          "    return model(batch)\n")
LEFT_OFF = ("def predict(model, batch):\n    model.eval()\n    torch.set_grad_enabled(False)\n"
            "    return model(batch)\n")
NO_PARENS = ("def predict(model, batch):\n    model.eval()\n    with torch.no_grad:\n"
             "        return model(batch)\n")


@pytest.mark.parametrize("src, part, myths", [
    (EVAL_ONLY, "quiet", {"eval_is_no_grad"}),
    (DETACH_AFTER, "quiet", {"detach_saves_memory"}),
    (DETACH_INPUT, "quiet", {"detach_no_grad_confused"}),
    (MODULE_FLAG, "quiet", {"module_requires_grad_attr"}),
    (FREEZE, "quiet", {"inference_freezes_params"}),
    (LEFT_OFF, "quiet", {"grad_mode_scope"}),
    (NO_GRAD_ONLY, "eval", {"no_grad_disables_dropout"}),
])
def test_q8_inference_shortcuts_are_caught(src, part, myths):
    for variant in ("visible", "hidden"):
        verdict = _code(src, variant=variant)
        assert not verdict["passed"] and _myths(verdict, part) == myths, verdict
    if part == "quiet" and src in (EVAL_ONLY, DETACH_INPUT):
        text = " ".join(f["text"] for f in _wrong(verdict))
        assert "grad_fn `AddmmBackward0`" in text and "bytes" in text


def test_q8_no_grad_without_eval_is_right_about_recording():
    verdict = _code(NO_GRAD_ONLY)
    assert {f["part"] for f in _wrong(verdict)} == {"eval"}
    assert "training mode" in _wrong(verdict)[0]["text"]


def test_q8_a_crash_is_reported_for_every_part():
    verdict = _code(NO_PARENS)
    assert {f["part"] for f in _wrong(verdict)} == {"quiet", "eval"}
    assert all("context manager" in f["text"] for f in _wrong(verdict))


def test_q8_untouched_stub_is_not_answered():
    verdict = _code("def predict(model, batch):\n    raise NotImplementedError()\n")
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not any(f["misconception"] for f in verdict["findings"])


@pytest.mark.parametrize("body", [
    "    model.eval()\n    with torch.inference_mode():\n        return model(batch)\n",
    "    model.eval()\n    with torch.set_grad_enabled(False):\n        out = model(batch)\n"
    "    return out\n",
    "    was = model.training\n    model.eval()\n    with torch.no_grad():\n"
    "        out = model(batch)\n    model.train(was)\n    return out\n",
])
def test_q8_right_answers_written_differently_pass(body):
    _passes(_code(f"def predict(model, batch):\n{body}", variant="hidden"))


def test_q8_decorator_form_passes():
    src = ("@torch.no_grad()\ndef predict(model, batch):\n    model.eval()\n"
           "    return model(batch)\n")
    _passes(_ask("q8", {"__function__": src, "name": "predict"}, variant="hidden"))


# ---------------------------------------------------------------- Q9: sgd_step()

def _sgd(body):
    return f"def sgd_step(params, lr):\n{body}"


OUTSIDE = _sgd("    for p in params:\n        if p.grad is not None:\n"
               "            p -= lr * p.grad\n")
VIA_DATA = _sgd("    for p in params:\n        if p.grad is not None:\n"
                "            p.data -= lr * p.grad\n")
REBIND = _sgd("    with torch.no_grad():\n        for p in params:\n"
              "            if p.grad is not None:\n                p = p - lr * p.grad\n")
NO_NONE_CHECK = _sgd("    with torch.no_grad():\n        for p in params:\n"
                     "            p -= lr * p.grad\n")
DETACH_THEN_EDIT = _sgd("    for p in params:\n        if p.grad is not None:\n"
                        "            p.detach_()\n            p -= lr * p.grad\n")
SWITCH_LEFT_OFF = _sgd("    torch.set_grad_enabled(False)\n    for p in params:\n"
                       "        if p.grad is not None:\n            p -= lr * p.grad\n")
WRONG_SIGN = _sgd("    with torch.no_grad():\n        for p in params:\n"
                  "            if p.grad is not None:\n                p += lr * p.grad\n")


def test_q9_outside_no_grad_names_the_leaf_error_for_both_parts():
    verdict = _code(OUTSIDE)
    assert verdict["score"] == 0 and _myths(verdict) == {"leaf_inplace_ok"}
    assert {f["part"] for f in verdict["findings"]} == {"update", "how"}
    assert "a leaf Variable" in verdict["findings"][0]["text"]


@pytest.mark.parametrize("src, part, myths, says", [
    (VIA_DATA, "how", {"data_is_safe"}, "version counter did not"),
    (REBIND, None, {None}, "only rebinds"),
    (NO_NONE_CHECK, None, {"step_updates_all"}, "NoneType"),
    (DETACH_THEN_EDIT, "update", {"inference_freezes_params"}, "no longer require"),
    (SWITCH_LEFT_OFF, "how", {"grad_mode_scope"}, "still off"),
    (WRONG_SIGN, "update", {None}, "torch.optim.SGD` makes it"),
])
def test_q9_wrong_updates_are_told_what_happened(src, part, myths, says):
    verdict = _code(src, variant="hidden")
    assert not verdict["passed"]
    assert _myths(verdict, part) == myths, verdict
    assert any(says in f["text"] for f in _wrong(verdict, part))
    if part:
        assert all(f["part"] == part for f in _wrong(verdict)), verdict


@pytest.mark.parametrize("body", [
    "    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n"
    "                p.add_(p.grad, alpha=-lr)\n",
    "    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n"
    "                p.copy_(p - lr * p.grad)\n",
    "    for p in params:\n        if p.grad is not None:\n"
    "            with torch.no_grad():\n                p.sub_(lr * p.grad)\n",
])
def test_q9_right_answers_written_differently_pass(body):
    _passes(_code(_sgd(body), variant="hidden"))


# ---------------------------------------------------------------- Q10: clip_centres()

BUGGY_CLIP = ("def clip_centres(model, limit):\n    for p in model.parameters():\n"
              "        p.clamp_(-limit, limit)\n    return model\n")


def _clip(loop_body, before="", indent="    "):
    return (f"def clip_centres(model, limit):\n{before}{indent}for p in model.parameters():\n"
            f"{loop_body}    return model\n")


def test_q10_the_given_program_is_not_answered_yet():
    verdict = _code(BUGGY_CLIP)
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not any(f["misconception"] for f in verdict["findings"])


@pytest.mark.parametrize("src, myths, says", [
    (_clip("        p.data.clamp_(-limit, limit)\n"), {"data_is_safe"}, "`.data`"),
    (_clip("        p = p.clamp(-limit, limit)\n"), {None}, "only rebinds"),
    (_clip("        p.requires_grad_(False)\n        p.clamp_(-limit, limit)\n"),
     {"inference_freezes_params"}, "no longer requires grad"),
    (_clip("        p.clamp_(-limit, limit)\n", before="    torch.set_grad_enabled(False)\n"),
     {"grad_mode_scope"}, "still off"),
    (_clip("        p.clamp_(-limit, limit)\n", before="    model.eval()\n"),
     {"eval_is_no_grad"}, "a leaf Variable"),
    (BUGGY_CLIP.replace("    return", "    p.grad = None\n    return"), {"leaf_inplace_ok"},
     "a leaf Variable"),
])
def test_q10_tempting_fixes_fail_with_the_reason(src, myths, says):
    verdict = _code(src, variant="hidden")
    assert not verdict["passed"] and _myths(verdict) == myths, verdict
    assert any(says in f["text"] for f in _wrong(verdict))


@pytest.mark.parametrize("body", [
    "    with torch.no_grad():\n        for p in model.parameters():\n"
    "            p.copy_(p.clamp(-limit, limit))\n    return model\n",
    "    for p in model.parameters():\n        p.detach().clamp_(-limit, limit)\n    return model\n",
    "    with torch.no_grad():\n        for p in model.parameters():\n"
    "            p.clamp_(min=-limit, max=limit)\n",
])
def test_q10_right_answers_written_differently_pass(body):
    _passes(_code(f"def clip_centres(model, limit):\n{body}", variant="hidden"))


# ---------------------------------------------------------------- Q11: validation_loss()

BUGGY_VALIDATION = ("def validation_loss(model, batches):\n    model.eval()\n    total = 0.0\n"
                    "    for x, y in batches:\n"
                    "        total = total + nn.functional.mse_loss(model(x), y)\n"
                    "    return total / len(batches)\n")
SOLVED = BUGGY_VALIDATION.replace("    for x, y", "    with torch.no_grad():\n     for x, y")


def _variant_of(old, new, src=BUGGY_VALIDATION):
    assert old in src
    return src.replace(old, new)


def test_q11_the_given_program_is_not_answered_yet():
    verdict = _code(BUGGY_VALIDATION)
    assert {f["status"] for f in verdict["findings"]} == {"todo"}


@pytest.mark.parametrize("src, part, myths", [
    (_variant_of("return total / len(batches)", "return (total / len(batches)).item()"),
     "record", {"detach_saves_memory"}),
    (_variant_of("total = total + nn.functional.mse_loss(model(x), y)",
                 "total = total + nn.functional.mse_loss(model(x), y).item()"),
     "record", {"detach_saves_memory"}),
    (_variant_of("model(x)", "model(x.detach())"), None, {"detach_no_grad_confused"}),
    (_variant_of("    model.eval()\n", "", SOLVED), "record", {"no_grad_disables_dropout"}),
    (_variant_of("    return total / len(batches)",
                 "    with torch.no_grad():\n        return total / len(batches)"),
     "record", {"detach_saves_memory"}),
    (_variant_of("    model.eval()\n", "    model.eval()\n    model.requires_grad_(False)\n"),
     "result", {"inference_freezes_params"}),
])
def test_q11_wrong_fixes_name_what_they_show(src, part, myths):
    verdict = _code(src, variant="hidden")
    assert not verdict["passed"] and _myths(verdict, part) == myths, verdict
    if part:
        assert all(f["part"] == part for f in _wrong(verdict)), verdict


def test_q11_item_at_the_end_fixes_the_result_but_not_the_memory():
    src = _variant_of("return total / len(batches)", "return (total / len(batches)).item()")
    verdict = _code(src)
    assert {f["part"] for f in _wrong(verdict)} == {"record"}
    assert any("bytes" in f["text"] for f in _wrong(verdict))


@pytest.mark.parametrize("src", [
    "@torch.no_grad()\n" + BUGGY_VALIDATION,
    _variant_of("    for x, y", "    with torch.inference_mode():\n     for x, y"),
    _variant_of("return total / len(batches)", "return float(total) / len(batches)", SOLVED),
])
def test_q11_right_answers_written_differently_pass(src):
    name = "validation_loss"
    _passes(_ask("q11", {"__function__": src, "name": name}, variant="hidden"))
