"""Lesson 06 (in-place operations): wrong answers get the feedback they deserve."""

from __future__ import annotations

import pytest
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode

A = "06_inplace"


def _ask(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": encode(answer)})


def _code(qid, name, source, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": {"__function__": source, "name": name}})


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if not f["ok"]}


Q1_RIGHT = {"error": None, "x.grad": [6.0, 8.0], "z._version": 2}
Q2_RIGHT = {"err_a": RuntimeError, "err_b": None, "err_m": None, "err_p": RuntimeError,
            "err_q": None, "err_r": RuntimeError}


@pytest.mark.parametrize("wrong, myth", [
    ({"error": RuntimeError}, "inplace_always_fatal"),
    ({"x.grad": None}, "inplace_grad_none"),
    ({"x.grad": [3.0, 4.0]}, "inplace_not_recorded"),
    ({"z._version": 1}, "version_counts_wrong"),
])
def test_q1_names_the_misconception(wrong, myth):
    verdict = _ask("q1", {**Q1_RIGHT, **wrong})
    assert _myths(verdict) == {myth}
    assert 0 < verdict["score"] < 1


def test_q2_every_inplace_op_breaks_backward_is_a_myth():
    everything_raises = dict.fromkeys(Q2_RIGHT, RuntimeError)
    verdict = _ask("q2", everything_raises)
    assert _myths(verdict) == {"inplace_always_fatal"}
    assert _ask("q2", everything_raises, part="outputs")["score"] == pytest.approx(1 / 3)


def test_q2_parts_score_separately():
    half = {**Q2_RIGHT, "err_p": None, "err_q": RuntimeError, "err_r": None}
    assert _ask("q2", half, part="outputs")["score"] == 1
    assert _ask("q2", half, part="inputs")["score"] == 0
    assert _myths(_ask("q2", half)) == {"inplace_never_checked", "inplace_always_fatal"}


def test_q3_counting_the_data_edit_is_the_data_myth():
    verdict = _ask("q3", {"h._version": 2, "h.grad_fn": "AddBackward0", "w._version": 2})
    assert _myths(verdict) == {"data_is_safe", "index_assign_untracked"}


def test_q5_thinking_data_is_safe():
    verdict = _ask("q5", {"grad_after_data": [3.0, 12.0, 27.0], "w._version": 0,
                          "err_no_grad": RuntimeError}, part="data")
    assert _myths(verdict) == {"data_is_safe"}
    verdict = _ask("q5", {"grad_after_data": [12.0, 27.0, 48.0], "w._version": 0,
                          "err_no_grad": None}, part="no_grad")
    assert _myths(verdict) == {"no_grad_edit_unchecked"}


def test_q6_culprit_and_report_come_from_live_torch():
    verdict = _ask("q6", {"failed_node": "SigmoidBackward0", "points_at": "act.mul_(0.5)",
                          "culprit": "c"})
    assert _myths(verdict) == {"anomaly_points_at_inplace"}


SQUASH_BROKEN = """\
def squash(x):
    t = torch.tanh(2 * x)
    t.mul_(3).add_(1)          # overwrites tanh's saved output
    return t
"""
SQUASH_OUT_OF_PLACE = """\
def squash(x):
    return 3 * torch.tanh(2 * x) + 1
"""


def test_q7_overwriting_tanh_output_fails_backward():
    verdict = _code("q7", "squash", SQUASH_BROKEN, variant="hidden")
    assert verdict["score"] < 1
    assert "saved_values_confused" in _myths(verdict)
    assert any("modified by an inplace operation" in f["text"] for f in verdict["findings"])


def test_q7_avoiding_inplace_altogether_is_not_enough():
    verdict = _code("q7", "squash", SQUASH_OUT_OF_PLACE)
    assert 0 < verdict["score"] < 1
    assert "inplace_always_fatal" in _myths(verdict)


def test_q8_data_edit_loses_the_safe_part():
    src = "def renormalise_(w):\n    w.data.div_(w.data.norm())\n    return w\n"
    assert _code("q8", "renormalise_", src, part="edit")["score"] == 1
    verdict = _code("q8", "renormalise_", src, part="safe")
    assert verdict["score"] < 1 and _myths(verdict) == {"data_is_safe"}


def test_q8_inplace_on_the_leaf_with_autograd_on_is_reported():
    src = "def renormalise_(w):\n    w.div_(w.norm())\n    return w\n"
    verdict = _code("q8", "renormalise_", src, part="edit")
    assert verdict["score"] == 0
    assert "a leaf Variable that requires grad" in verdict["findings"][0]["text"]


CLIP_DATA_AFTER_BACKWARD = """\
def clipped_step():
    w = torch.tensor([0.5, -2.0, 3.0], requires_grad=True)
    x = torch.tensor([1.0, 2.0, 3.0])
    loss = (w * w * x).sum()
    loss.backward()
    w.data.clamp_(-1, 1)
    return w
"""


def test_q10_moving_the_data_edit_after_backward_fixes_only_the_gradient():
    assert _code("q10", "clipped_step", CLIP_DATA_AFTER_BACKWARD, part="grad")["score"] == 1
    verdict = _code("q10", "clipped_step", CLIP_DATA_AFTER_BACKWARD, part="clip")
    assert verdict["score"] == 0.5 and _myths(verdict) == {"data_is_safe"}
