"""Lesson 01 (leaf tensors): typical wrong answers get feedback aimed at the mistake.

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

A = "01_leaves"
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


Q1 = {"flour": True, "dough": False, "bread": False, "meat": True, "water": True, "salt": True}
Q2 = {"salt.requires_grad": False, "bread.requires_grad": True, "flour.grad_fn is None": True,
      "dough.grad_fn is None": False, "meat.grad_fn is None": True}
Q3 = {"w.grad": [0.5, -1.0, 2.0], "parcel.grad": None, "station.grad": None}
Q4 = {"w.grad": False, "parcel.grad": False, "station.grad": True, "kept.grad": False}
Q5 = {"a.grad": -2.0, "b.grad": -3.75}
Q7 = {"e.grad_fn": "MulBackward0", "accumulate_grad_nodes": 2, "c.is_leaf": False}

KITCHEN = """\
def stock_kitchen():
    flour = torch.tensor([2.0, 1.0], requires_grad=True)
    sauce = torch.tensor([0.5, 0.5])
    dough = flour * 0.5 + sauce
    glaze = sauce * 2
    return {"flour": flour, "sauce": sauce, "dough": dough, "glaze": glaze}
"""
WALK = """\
def sorting_centres(t):
    if t.grad_fn is None:
        return [t] if t.requires_grad else []
    found, seen, todo = [], set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if type(node).__name__ == "AccumulateGrad":
            found.append(node.variable)
        todo.extend(nxt for nxt, _ in node.next_functions)
    return found
"""
CENTRE = _lesson["q10"].starter  # the program as the release gives it
NO_EDGE = WALK.replace("    if t.grad_fn is None:\n        return [t] if t.requires_grad else []\n",
                       "").replace("[t.grad_fn]", "[n for n, _ in t.grad_fn.next_functions]")
PARCELS = """\
def weigh_parcels():
    w = torch.zeros(3)
    w.require_grad = True
    weights = torch.tensor([1.0, 2.0, 3.0])
    (w * weights).sum().backward()
    return w
"""

# (question, answer, the misconception named, or None and a phrase the feedback says instead)
WRONG = [
    # Q1: each blank has one wrong value, and each names the belief behind it
    ("q1", {**Q1, "water": False}, "leaf_means_trainable"),
    ("q1", {**Q1, "salt": False}, "no_grad_inputs_make_nonleaf"),
    ("q1", {**Q1, "dough": True}, "output_can_be_leaf"),
    ("q1", {**Q1, "bread": True}, "output_can_be_leaf"),
    ("q1", {**Q1, "flour": False}, "created_is_not_leaf"),
    ("q1", {**Q1, "meat": False}, "created_is_not_leaf"),
    # Q2
    ("q2", {**Q2, "salt.requires_grad": True}, "requires_grad_spreads"),
    ("q2", {**Q2, "bread.requires_grad": False}, "requires_grad_not_inherited"),
    ("q2", {**Q2, "flour.grad_fn is None": False}, "grad_fn_on_leaf"),
    ("q2", {**Q2, "dough.grad_fn is None": True}, "output_can_be_leaf"),
    ("q2", {**Q2, "meat.grad_fn is None": False}, "grad_fn_on_leaf"),
    # Q3
    ("q3", {**Q3, "station.grad": [0.5, -1.0, 2.0]}, "nonleaf_grad_stored"),
    ("q3", {**Q3, "station.grad": [1.0, 1.0, 1.0]}, "nonleaf_grad_stored"),
    ("q3", {**Q3, "parcel.grad": [1.0, 2.0, 3.0]}, "constant_gets_grad"),
    ("q3", {**Q3, "w.grad": [1.0, 2.0, 3.0]}, (None, "d cost / d w_i = parcel_i")),
    ("q3", {**Q3, "w.grad": None}, (None, "stored on w because w is a leaf")),
    # Q4
    ("q4", {**Q4, "station.grad": False}, "nonleaf_grad_silent"),
    ("q4", {**Q4, "parcel.grad": True}, "leaf_means_trainable"),
    ("q4", {**Q4, "kept.grad": True}, (None, "station without a monitor")),
    ("q4", {**Q4, "w.grad": True}, (None, "leaf's .grad is always silent")),
    # Q5: one route only, either route, or a slip in the chain rule
    ("q5", {"a.grad": -3.0, "b.grad": -3.75}, "one_route_only"),
    ("q5", {"a.grad": 1.0, "b.grad": -3.75}, "one_route_only"),
    ("q5", {"a.grad": -2.0, "b.grad": -0.75}, "one_route_only"),
    ("q5", {"a.grad": 2.0, "b.grad": 3.75}, (None, "both routes add up")),
    # Q6
    ("q6", [0.5, 0.5], "mean_grad_halved"),
    ("q6", [2.0, 2.0], (None, "the 1/2 of the mean")),
    ("q6", [0.25, 0.25], (None, "2/2 = 1")),
    # Q7
    ("q7", {**Q7, "accumulate_grad_nodes": 4}, "accumulate_per_use"),
    ("q7", {**Q7, "accumulate_grad_nodes": 5}, "graph_is_all_leaves"),
    ("q7", {**Q7, "accumulate_grad_nodes": 0}, "graph_is_all_leaves"),
    ("q7", {**Q7, "c.is_leaf": True}, "graph_is_all_leaves"),
    ("q7", {**Q7, "e.grad_fn": None}, "output_can_be_leaf"),
    ("q7", {**Q7, "e.grad_fn": "AddBackward0"}, (None, "made by `*`")),
    # Q8: what the learner's code made
    ("q8", KITCHEN.replace("glaze = sauce * 2", "glaze = flour + sauce"),
     (None, "Your `glaze` has grad_fn `AddBackward0`: it was made from `flour`")),
    ("q8", KITCHEN.replace("requires_grad=True", "require_grad=True"), "require_grad_typo"),
    ("q8", KITCHEN.replace("flour = torch.tensor([2.0, 1.0], requires_grad=True)",
                           "flour = torch.tensor([2.0, 1.0])\n    flour.require_grad = True"),
     "require_grad_typo"),
    ("q8", KITCHEN.replace("sauce = torch.tensor([0.5, 0.5])",
                           "sauce = torch.tensor([0.5, 0.5], requires_grad=True)"),
     "leaf_means_trainable"),
    ("q8", KITCHEN.replace("glaze = sauce * 2", "glaze = (sauce * 2).requires_grad_()"),
     "leaf_means_trainable"),
    ("q8", KITCHEN.replace("requires_grad=True)", "requires_grad=True) * 1.0"),
     "output_can_be_leaf"),
    ("q8", KITCHEN.replace("dough = flour * 0.5 + sauce", "dough = sauce * 0.5"),
     (None, "no recorded recipe step made it from `flour`")),
    ("q8", KITCHEN.replace("glaze = sauce * 2", "glaze = sauce"), (None, "`sauce` itself")),
    # Q9: the learner's walk, on live graphs
    ("q9", WALK.replace("node is None or node in seen", "node is None"), "accumulate_per_use"),
    ("q9", WALK.replace("return [t] if t.requires_grad else []", "return [t]"),
     "constant_gets_grad"),
    ("q9", WALK.replace("return [t] if t.requires_grad else []", "return []"),
     (None, "its own sorting centre")),
    ("q9", WALK.replace("found.append(node.variable)", "found.append(node)"),
     (None, "`.variable`")),
    ("q9", WALK.replace("todo.extend(nxt for nxt, _ in node.next_functions)",
                        "todo.extend(nxt for nxt, _ in node.next_functions[:1])"),
     (None, "follow every entry of `next_functions`")),
    ("q9", NO_EDGE, (None, "on graph `leaf`")),
    # Q10: the copy line, repaired in the ways learners try
    ("q10", CENTRE.replace("w = w * 1.0", "w = w.clone()"), "clone_cuts_history"),
    ("q10", CENTRE.replace("w = w * 1.0", "w = w.detach()"), "detach_keeps_grad"),
    ("q10", CENTRE.replace("w = w * 1.0", "w = torch.tensor(w)"), "detach_keeps_grad"),
    ("q10", CENTRE.replace("    loss.backward()\n", "    w.retain_grad()\n    loss.backward()\n"),
     (None, "with a monitor")),
    ("q10", CENTRE.replace("    w = w * 1.0 ", "    with torch.no_grad():\n        w = w * 1.0 "),
     "no_grad_result_has_history"),
    ("q10", CENTRE.replace("    w = w * 1.0                      # \"work on a copy, to be safe\"\n",
                           "").replace("(w ** 2)", "(w ** 3)"), (None, "2*w = [2.0, 4.0, 6.0]")),
    # Q11: the flag
    ("q11", PARCELS.replace("w = torch.zeros(3)\n    w.require_grad = True",
                            "w = torch.zeros(3, require_grad=True)"), "require_grad_typo"),
    ("q11", PARCELS.replace("w.require_grad = True", "w.require_grad_()"), "require_grad_typo"),
    ("q11", PARCELS.replace("w = torch.zeros(3)\n    w.require_grad = True",
                            "w = torch.randn(3, require_grad=True)"), "require_grad_typo"),
    ("q11", PARCELS.replace("w = torch.zeros(3)\n    w.require_grad = True",
                            "w = torch.zeros(3, requires_grad=True) * 1"), "output_can_be_leaf"),
    ("q11", PARCELS.replace("w.require_grad = True", "weights.requires_grad = True").replace(
        "    weights = torch.tensor([1.0, 2.0, 3.0])\n", "").replace(
        "    w = torch.zeros(3)\n", "    w = torch.zeros(3)\n    weights = torch.tensor([1.0, 2.0, 3.0])\n"),
     (None, "an ordinary parcel")),
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


def test_q8_glaze_made_from_flour_is_told_what_torch_made_and_names_no_belief():
    verdict = _ask("q8", KITCHEN.replace("glaze = sauce * 2", "glaze = flour + sauce"))
    (bad,) = _wrong(verdict)
    assert bad["misconception"] is None
    assert "grad_fn `AddBackward0`: it was made from `flour`" in bad["text"]
    assert "semi-finished dish" in bad["text"]
    assert verdict["score"] == 4 / 5


RIGHT = [
    ("q3", {**Q3, "w.grad": torch.tensor([0.5, -1.0, 2.0])}),
    ("q3", {**Q3, "w.grad": (0.5, -1, 2)}),  # a tuple and an int
    ("q5", {"a.grad": torch.tensor(-2.0), "b.grad": -3.75}),
    ("q6", torch.tensor([1.0, 1.0])),
    ("q6", [1, 1]),
    ("q7", {**Q7, "accumulate_grad_nodes": torch.tensor(2)}),
    ("q8", KITCHEN.replace("torch.tensor([2.0, 1.0], requires_grad=True)",
                           "nn.Parameter(torch.tensor([2.0, 1.0]))")),
    ("q8", KITCHEN.replace("torch.tensor([2.0, 1.0], requires_grad=True)",
                           "torch.ones(2).requires_grad_()").replace("glaze = sauce * 2",
                                                                   "glaze = sauce.clone()")),
    ("q9", WALK.replace("found, seen, todo = [], set(), [t.grad_fn]",
                        "found, seen, todo = [], [], [t.grad_fn]").replace(
        "seen.add(node)", "seen.append(node)")),
    ("q10", CENTRE.replace("w = w * 1.0", "w = (w * 1.0).detach().requires_grad_()")),
    ("q10", CENTRE.replace("    w = w * 1.0                      # \"work on a copy, to be safe\"\n",
                           "    centre = w\n    w = w * 1.0\n").replace("return w", "return centre")),
    ("q11", PARCELS.replace("w.require_grad = True", "w.requires_grad_()")),
    ("q11", PARCELS.replace("w = torch.zeros(3)\n    w.require_grad = True",
                            "w = torch.zeros(3, requires_grad=True)")),
]


@pytest.mark.parametrize("qid, answer", RIGHT, ids=[f"{c[0]}-{i}" for i, c in enumerate(RIGHT)])
def test_a_correct_answer_written_differently_passes(qid, answer):
    verdict = _ask(qid, answer)
    assert verdict["passed"], [f["text"] for f in verdict["findings"] if f["status"] != "right"]


def test_q9_hidden_graphs_pass_for_the_walk_and_catch_a_first_route_walk():
    assert _ask("q9", WALK, variant="hidden")["passed"]
    first_only = WALK.replace("todo.extend(nxt for nxt, _ in node.next_functions)",
                              "todo.extend(nxt for nxt, _ in node.next_functions[:1])")
    hidden = _ask("q9", first_only, variant="hidden")
    assert len(hidden["findings"]) == 6 and hidden["score"] < 1


@pytest.mark.parametrize("qid, starter", [
    ("q8", "def stock_kitchen():\n    # YOUR CODE HERE\n    raise NotImplementedError()\n"),
    ("q10", CENTRE), ("q11", PARCELS),
])
def test_an_untouched_answer_is_not_answered_yet(qid, starter):
    verdict = _ask(qid, starter)
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not any(f["misconception"] for f in verdict["findings"])


def test_a_crash_on_one_graph_says_which_graph_and_the_others_are_still_checked():
    verdict = _ask("q9", NO_EDGE)
    statuses = [f["status"] for f in verdict["findings"]]
    assert statuses.count("right") == 2 and statuses.count("wrong") == 2
    assert any("on graph `leaf`" in f["text"] for f in verdict["findings"])
