"""Lesson 06 (in-place operations): typical wrong answers get feedback aimed at the mistake.

Every wrong answer below is written as a learner would answer, from the misconceptions and the
exercise texts; each asserts the misconception its evidence names (or, where the answer shows
no belief the course names, that no label is given). Correct answers written differently pass.
"""

from __future__ import annotations

import importlib

import pytest
import torch
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode

A = "06_inplace"
_lesson = importlib.import_module(f"autograder.lessons.l{A}").lesson
NAMES = {"q7": "squash", "q8": "renormalise_", "q9": "forward_backward", "q10": "clipped_step"}


def _ask(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": encode(answer)})


def _code(qid, source, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": {"__function__": source, "name": NAMES[qid]}})


def _wrong(verdict, part=None):
    return [f for f in verdict["findings"] if f["status"] == "wrong"
            and (part is None or f["part"] in (part, None))]


def _myths(verdict, part=None):
    return {f["misconception"] for f in _wrong(verdict, part)}


def _passes(verdict):
    assert verdict["passed"], [f["text"] for f in verdict["findings"] if f["status"] != "right"]


# ---------------------------------------------------------------- predict questions

Q1 = {"error": None, "x.grad": [6.0, 8.0], "z._version": 2}
Q2 = {"err_a": RuntimeError, "err_b": None, "err_m": None, "err_p": RuntimeError,
      "err_q": None, "err_r": RuntimeError}
Q3 = {"h._version": 2, "h.grad_fn": "CopySlices", "w._version": 1}
Q4 = {"err_mul": RuntimeError, "err_index": RuntimeError, "w": [0.5, 1.0, 1.5],
      "w.is_leaf": True}
Q5 = {"grad_after_data": [12.0, 27.0, 48.0], "w._version": 0, "err_no_grad": RuntimeError}
Q6 = {"failed_node": "SigmoidBackward0", "points_at": "act", "culprit": "c"}
RIGHT = {"q1": Q1, "q2": Q2, "q3": Q3, "q4": Q4, "q5": Q5, "q6": Q6}
ALL_EDITS_ALLOWED = [0.0, 0.5, 0.75]  # w if the two refused edits had taken place

PREDICT_WRONG = [
    ("q1", {"error": RuntimeError, "x.grad": None}, {"inplace_always_fatal"}),
    ("q1", {"x.grad": None}, {"inplace_grad_none"}),
    ("q1", {"x.grad": [3.0, 4.0]}, {"inplace_not_recorded"}),
    ("q1", {"x.grad": torch.tensor([3.0, 4.0])}, {"inplace_not_recorded"}),
    ("q1", {"z._version": 1}, {"version_counts_wrong"}),
    ("q1", {"z._version": 0}, {"version_counts_wrong"}),
    ("q2", dict.fromkeys(Q2, RuntimeError), {"inplace_always_fatal"}),
    ("q2", dict.fromkeys(Q2), {"inplace_never_checked"}),
    ("q2", {"err_b": RuntimeError}, {"saved_values_confused"}),      # sqrt saves its input?
    ("q2", {"err_m": RuntimeError}, {"saved_values_confused"}),      # mul saves its output?
    ("q2", {"err_q": RuntimeError}, {"saved_values_confused"}),      # c needs no gradient
    ("q2", {"err_r": None}, {"saved_values_confused"}),              # the parcel c is saved
    ("q3", {"w._version": 2}, {"data_is_safe"}),
    ("q3", {"w._version": 0}, {"no_grad_edit_unchecked"}),
    ("q3", {"h.grad_fn": "AddBackward0"}, {"index_assign_untracked"}),
    ("q3", {"h._version": 1}, {"version_counts_wrong"}),
    ("q3", {"h.grad_fn": "IndexPutBackward0"}, {None}),              # tracked, other node
    ("q4", {"err_mul": None, "err_index": None, "w": ALL_EDITS_ALLOWED}, {"leaf_inplace_ok"}),
    ("q4", {"w": ALL_EDITS_ALLOWED}, {"refused_edit_applied"}),
    ("q4", {"w": [0.25, 0.5, 0.75]}, {"refused_edit_applied"}),
    ("q4", {"err_index": None}, {"leaf_inplace_ok"}),
    ("q4", {"w.is_leaf": False}, {"no_grad_edit_makes_nonleaf"}),
    ("q4", {"w": [1.0, 2.0, 3.0]}, {None}),
    ("q5", {"grad_after_data": [3.0, 12.0, 27.0]}, {"data_is_safe"}),
    ("q5", {"grad_after_data": RuntimeError}, {"data_is_safe"}),
    ("q5", {"grad_after_data": None}, {"inplace_grad_none"}),
    ("q5", {"w._version": 1}, {"data_is_safe"}),
    ("q5", {"err_no_grad": None}, {"no_grad_edit_unchecked"}),
    ("q6", {"points_at": "act.mul_(0.5)"}, {"anomaly_points_at_inplace"}),
    ("q6", {"failed_node": "MulBackward0"}, {"anomaly_points_at_inplace"}),
    ("q6", {"culprit": "b"}, {"saved_values_confused"}),
    ("q6", {"culprit": ["a", "b", "c"]}, {"inplace_always_fatal"}),
    ("q6", {"failed_node": "TanhBackward0"}, {None}),                # the section's example
]


@pytest.mark.parametrize("qid, change, myths", PREDICT_WRONG)
def test_predict_wrong_answers_name_what_they_show(qid, change, myths):
    verdict = _ask(qid, {**RIGHT[qid], **change})
    assert _myths(verdict) == myths
    assert 0 < verdict["score"] < 1


@pytest.mark.parametrize("qid", sorted(RIGHT))
def test_predict_right_answers_pass(qid):
    _passes(_ask(qid, RIGHT[qid]))


def test_predict_answers_written_differently_pass():
    _passes(_ask("q1", {**Q1, "x.grad": torch.tensor([6.0, 8.0])}))
    _passes(_ask("q4", {**Q4, "w": torch.tensor([0.5, 1.0, 1.5]), "err_mul": "RuntimeError"}))
    _passes(_ask("q5", {**Q5, "grad_after_data": (12, 27, 48)}))


def test_q2_parts_score_separately():
    half = {**Q2, "err_p": None, "err_q": RuntimeError, "err_r": None}
    assert _ask("q2", half, part="outputs")["score"] == 1
    assert _ask("q2", half, part="inputs")["score"] == 0


# ---------------------------------------------------------------- Q7: squash()

def _squash(body):
    return f"def squash(x):\n{body}"


SQUASH_WRONG = [
    (_squash("    t = torch.tanh(2 * x)\n    t.mul_(3).add_(1)\n    return t\n"),
     {"saved_values_confused"}, "modified by an inplace operation"),
    (_squash("    return 3 * torch.tanh(2 * x) + 1\n"), {None}, "`_version` 0"),
    (_squash("    t = torch.tanh(2 * x)\n    with torch.no_grad():\n        t.mul_(3).add_(1)\n"
             "    return t\n"), {"no_grad_edit_unchecked"}, "modified by an inplace operation"),
    (_squash("    t = torch.tanh(2 * x)\n    t.data.mul_(3).add_(1)\n    return t\n"),
     {"data_is_safe", None}, "`x.grad` should be"),
    (_squash("    x.mul_(2)\n    return 3 * torch.tanh(x) + 1\n"), {"leaf_inplace_ok"},
     "a leaf Variable"),
]


@pytest.mark.parametrize("src, myths, says", SQUASH_WRONG)
def test_q7_wrong_finishes_are_told_what_happened(src, myths, says):
    verdict = _code("q7", src, variant="hidden")
    assert not verdict["passed"] and _myths(verdict) == myths, verdict
    assert any(says in f["text"] for f in _wrong(verdict))


@pytest.mark.parametrize("body", [
    "    out = 3 * torch.tanh(2 * x)\n    out += 1\n    return out\n",
    "    return torch.tanh(x * 2).mul(3).add_(1)\n",
    "    out = torch.tanh(2 * x) * 3\n    with torch.no_grad():\n        out.add_(1)\n"
    "    return out\n",
])
def test_q7_right_answers_written_differently_pass(body):
    _passes(_code("q7", _squash(body), variant="hidden"))


def test_q7_untouched_stub_is_not_answered():
    verdict = _code("q7", _squash("    raise NotImplementedError()\n"))
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not any(f["misconception"] for f in verdict["findings"])


# ---------------------------------------------------------------- Q8: renormalise_()

def _renorm(body):
    return f"def renormalise_(w):\n{body}"


@pytest.mark.parametrize("src, part, myths", [
    (_renorm("    w.data.div_(w.data.norm())\n    return w\n"), "safe", {"data_is_safe"}),
    (_renorm("    w.div_(w.norm())\n    return w\n"), None, {"leaf_inplace_ok"}),
    (_renorm("    with torch.no_grad():\n        w = w / w.norm()\n    return w\n"), None,
     {None}),
    (_renorm("    with torch.no_grad():\n        w.div_(w.norm())\n    w.grad = None\n"
             "    return w\n"), "safe", {None}),
    (_renorm("    w.requires_grad_(False)\n    w.div_(w.norm())\n    return w\n"), "edit",
     {"inference_freezes_params"}),
])
def test_q8_wrong_rescales_name_what_they_show(src, part, myths):
    verdict = _code("q8", src, variant="hidden")
    assert not verdict["passed"] and _myths(verdict, part) == myths, verdict
    if part:
        assert {f["part"] for f in _wrong(verdict)} == {part}, verdict


def test_q8_the_leaf_error_is_diagnosed_for_both_parts():
    verdict = _code("q8", _renorm("    w.div_(w.norm())\n    return w\n"))
    assert verdict["score"] == 0 and {f["part"] for f in verdict["findings"]} == {"edit", "safe"}
    assert all("a leaf Variable that requires grad" in f["text"] for f in verdict["findings"])


@pytest.mark.parametrize("body", [
    "    with torch.no_grad():\n        w /= w.norm()\n    return w\n",
    "    with torch.no_grad():\n        w.copy_(w / w.norm())\n    return w\n",
    "    w.detach().div_(w.norm().item())\n    return w\n",
])
def test_q8_right_answers_written_differently_pass(body):
    _passes(_code("q8", _renorm(body), variant="hidden"))


# ---------------------------------------------------------------- Q9: forward_backward()

BUGGY_SHIFT = _lesson["q9"].starter  # the program as the release gives it
SHIFT_LINE = "    act += 0.1                       # shift the activation a little\n"


def _shift(new_line):
    assert SHIFT_LINE in BUGGY_SHIFT
    return BUGGY_SHIFT.replace(SHIFT_LINE, new_line)


def test_q9_the_given_program_is_not_answered_yet():
    verdict = _code("q9", BUGGY_SHIFT)
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not any(f["misconception"] for f in verdict["findings"])


@pytest.mark.parametrize("src, myths, says", [
    (_shift("    act.add_(0.1)\n"), {"saved_values_confused"}, "modified by an inplace"),
    (_shift("    with torch.no_grad():\n        act += 0.1\n"), {"no_grad_edit_unchecked"},
     "modified by an inplace"),
    (_shift("    act.data += 0.1\n"), {"data_is_safe"}, "computed out of place"),
    (_shift("    act = act.detach() + 0.1\n"), {"detach_keeps_grad"}, "does not require grad"),
    (_shift(""), {None}, "the shifted loss"),
])
def test_q9_wrong_fixes_are_told_what_happened(src, myths, says):
    verdict = _code("q9", src)
    assert not verdict["passed"] and _myths(verdict) == myths, verdict
    assert any(says in f["text"] for f in _wrong(verdict))


@pytest.mark.parametrize("line", [
    "    act = act + 0.1\n",
    "    act = act.clone()\n    act += 0.1\n",
    "    act = torch.add(act, 0.1)\n",
])
def test_q9_right_fixes_written_differently_pass(line):
    _passes(_code("q9", _shift(line)))


# ---------------------------------------------------------------- Q10: clipped_step()

CLIP_HEAD = """\
def clipped_step():
    w = torch.tensor([0.5, -2.0, 3.0], requires_grad=True)
    x = torch.tensor([1.0, 2.0, 3.0])
    loss = (w * w * x).sum()
"""


def _clipped(body):
    return CLIP_HEAD + body + "    return w\n"


@pytest.mark.parametrize("src, part, myths", [
    (_clipped("    loss.backward()\n    w.data.clamp_(-1, 1)\n"), "clip", {"data_is_safe"}),
    (_clipped("    with torch.no_grad():\n        w.clamp_(-1, 1)\n    loss.backward()\n"), None,
     {"no_grad_edit_unchecked"}),
    (_clipped("    loss.backward()\n    w.clamp_(-1, 1)\n"), None, {"leaf_inplace_ok"}),
    (_clipped("    loss.backward()\n    w = w.clamp(-1, 1)\n"), "grad", {None}),
    (_clipped("    w.detach().clamp_(-1, 1)\n    loss.backward()\n"), None, {"detach_copies"}),
])
def test_q10_wrong_fixes_name_what_they_show(src, part, myths):
    verdict = _code("q10", src)
    assert not verdict["passed"] and _myths(verdict, part) == myths, verdict
    if part == "clip":
        assert {f["part"] for f in _wrong(verdict)} == {"clip"}


@pytest.mark.parametrize("body", [
    "    loss.backward()\n    with torch.no_grad():\n        w.clamp_(-1, 1)\n",
    "    loss.backward()\n    with torch.no_grad():\n        w.copy_(w.clamp(-1, 1))\n",
    "    loss.backward()\n    w.detach().clamp_(-1, 1)\n",
])
def test_q10_right_fixes_written_differently_pass(body):
    _passes(_code("q10", _clipped(body)))
