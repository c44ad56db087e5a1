"""Lesson 03 (detach): typical wrong answers get feedback aimed at the mistake they make.

Each wrong answer below is written as a learner would answer, from the misconceptions and the
exercise texts. ``myth`` is the belief its feedback must name, or ``None`` where no belief has
the answer's signature (then the feedback must say precisely what torch did instead).
"""

from __future__ import annotations

import ast
import re

import pytest
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode
from autograder.misconceptions import MISCONCEPTIONS

A = "03_detach"


def _ev(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": answer})


def _predict(qid, answer, part=None):
    return _ev(qid, encode(answer), part)


def _code(qid, src, variant="visible", part=None):
    name = ast.parse(src).body[0].name
    return _ev(qid, {"__function__": src, "name": name}, part, variant)


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if f["status"] == "wrong"} - {None}


def _wrong(verdict):
    return [f for f in verdict["findings"] if f["status"] == "wrong"]


def test_lesson_misconceptions_are_registered_for_this_lesson():
    used = {"detach_copies", "detach_freezes", "detach_keeps_grad", "clone_shares_storage",
            "clone_cuts_history", "torch_tensor_silent", "requires_grad_off_nonleaf",
            "detach_inplace_harmless", "residual_detach_harmless", "detach_in_loss_harmless",
            "detach_activation_freezes_one", "fake_batch_not_detached",
            "module_requires_grad_attr", "eval_freezes", "detach_no_grad_confused"}
    for key in used:
        assert MISCONCEPTIONS[key].lesson == A, key
        assert MISCONCEPTIONS[key].section, key


# ---------------------------------------------------------------- predict questions

RIGHT = {
    "q1": {"packed.is_leaf": True, "packed.requires_grad": False,
           "packed.grad_fn is None": True, "same storage": True},
    "q2": {"broth[0]": 5.0, "broth[1]": 1.0, "error": RuntimeError},
    "q3": {"copy_a.is_leaf": False, "copy_a.requires_grad": True,
           "copy_b.requires_grad": False, "copy_c.requires_grad": False, "copy_c warns": True},
    "q4": {"error": RuntimeError, "dough.is_leaf": True, "dough.requires_grad": False,
           "flour.requires_grad": True},
    "q5": {"model[0].weight.grad is None": False, "model[0].bias.grad is None": True,
           "model[1].weight.grad is None": True, "model[1].bias.grad is None": False},
    "q6": {"x.grad": 1.1 ** 3, "x2.grad": 0.1 ** 3},
}


@pytest.mark.parametrize("qid", sorted(RIGHT))
def test_right_predictions_pass(qid):
    assert _predict(qid, RIGHT[qid])["passed"]


def test_right_predictions_written_differently_pass():
    import torch

    assert _predict("q6", {"x.grad": torch.tensor(1.331), "x2.grad": 0.001})["passed"]
    assert _predict("q2", {"broth[0]": 5, "broth[1]": 1, "error": RuntimeError})["passed"]


PREDICT_WRONG = [  # (qid, changed items, myth per wrong item)
    ("q1", {"same storage": False}, {"same storage": "detach_copies"}),
    ("q1", {"packed.requires_grad": True}, {"packed.requires_grad": "detach_keeps_grad"}),
    ("q1", {"packed.is_leaf": False, "packed.grad_fn is None": False},
     {"packed.is_leaf": "detach_keeps_grad", "packed.grad_fn is None": "detach_keeps_grad"}),
    ("q2", {"broth[0]": 1.0, "error": None},
     {"broth[0]": "detach_copies", "error": "detach_copies"}),
    ("q2", {"error": None}, {"error": "inplace_never_checked"}),
    ("q2", {"broth[1]": 7.0}, {"broth[1]": "clone_shares_storage"}),
    ("q2", {"error": ValueError}, {"error": None}),
    ("q3", {"copy_a.is_leaf": True, "copy_a.requires_grad": False},
     {"copy_a.is_leaf": "clone_cuts_history", "copy_a.requires_grad": "clone_cuts_history"}),
    ("q3", {"copy_c warns": False}, {"copy_c warns": "torch_tensor_silent"}),
    ("q3", {"copy_b.requires_grad": True}, {"copy_b.requires_grad": "detach_keeps_grad"}),
    ("q3", {"copy_c.requires_grad": True}, {"copy_c.requires_grad": "detach_keeps_grad"}),
    ("q4", {"error": None}, {"error": "requires_grad_off_nonleaf"}),
    ("q4", {"dough.is_leaf": False, "dough.requires_grad": True},
     {"dough.is_leaf": "detach_inplace_harmless", "dough.requires_grad": "detach_inplace_harmless"}),
    ("q4", {"flour.requires_grad": False}, {"flour.requires_grad": None}),
    ("q4", {"error": TypeError}, {"error": None}),
    ("q5", {"model[0].weight.grad is None": True}, {"model[0].weight.grad is None": "detach_freezes"}),
    ("q5", {"model[1].weight.grad is None": False},
     {"model[1].weight.grad is None": "detach_inplace_harmless"}),
    ("q5", {"model[0].bias.grad is None": False}, {"model[0].bias.grad is None": None}),
    ("q6", {"x2.grad": 1.1 ** 3}, {"x2.grad": "residual_detach_harmless"}),
    ("q6", {"x2.grad": 0.0}, {"x2.grad": None}),
    ("q6", {"x.grad": 1.0}, {"x.grad": None}),
]


@pytest.mark.parametrize("qid, changed, myths", PREDICT_WRONG)
def test_wrong_prediction_is_told_what_torch_did_and_which_belief(qid, changed, myths):
    verdict = _predict(qid, {**RIGHT[qid], **changed})
    assert not verdict["passed"]
    wrong = {f["item"]: f for f in _wrong(verdict)}
    assert set(wrong) == set(myths)
    for item, myth in myths.items():
        assert wrong[item]["misconception"] == myth, item
        assert "torch says" in wrong[item]["text"]


def test_q2_parts_share_the_copy_belief():
    answer = {"broth[0]": 1.0, "broth[1]": 1.0, "error": None}
    from autograder.verdict import Verdict

    whole = Verdict.from_json(_predict("q2", answer))
    for part in ("shared", "backward"):
        assert whole.for_part(part).misconceptions == ["detach_copies"]


# ---------------------------------------------------------------- write-code questions

SNAPSHOT = "def snapshot(t):\n    {}\n"
FREEZE = "def freeze(layer):\n{}"
LOSS = "def custom_loss(output, target, feat):\n    main = F.mse_loss(output, target)\n{}"
BLOCK = ("def resnet_block(x, conv1, conv2, training=True):\n    identity = x\n"
         "    x = conv1(x).relu()\n    x = conv2(x)\n{}")
DISC = "def discriminator_loss(D, G, z, real):\n{}"
BCE = ("    return (F.binary_cross_entropy_with_logits(r, torch.ones_like(r))\n"
       "            + F.binary_cross_entropy_with_logits(f, torch.zeros_like(f)))\n")

CODE_WRONG = [  # (qid, source, variant, the misconceptions named; set() = none, precise text)
    ("q7", SNAPSHOT.format("return t.detach()"), "visible", {"detach_copies"}),
    ("q7", SNAPSHOT.format("return t.clone()"), "visible", {"clone_cuts_history"}),
    ("q7", SNAPSHOT.format("return torch.tensor(t)"), "hidden", {"torch_tensor_silent"}),
    ("q7", SNAPSHOT.format("return t.data"), "visible", {"detach_copies"}),
    ("q7", SNAPSHOT.format("return t"), "visible", set()),
    ("q7", SNAPSHOT.format("return t.detach().clone().requires_grad_()"), "visible", set()),
    ("q7", SNAPSHOT.format("c = t.clone()\n    c.requires_grad_(False)\n    return c"), "visible",
     {"requires_grad_off_nonleaf"}),  # crashes: torch refuses the flag on a non-leaf
    ("q8", FREEZE.format("    for p in layer.parameters():\n        p.detach()\n"), "visible",
     {"detach_freezes"}),
    ("q8", FREEZE.format("    layer.eval()\n"), "visible", {"eval_freezes"}),
    ("q8", FREEZE.format("    layer.requires_grad = False\n"), "hidden",
     {"module_requires_grad_attr"}),
    ("q8", FREEZE.format("    with torch.no_grad():\n        for p in layer.parameters():\n"
                         "            p.grad = None\n"), "visible", {"no_grad_flips_flag"}),
    ("q8", FREEZE.format("    for p in layer.parameters():\n        p.requires_grad_(False)\n"
                         "    layer.register_forward_hook(lambda m, i, o: o.detach())\n"),
     "visible", {"detach_activation_freezes_one"}),
    ("q8", FREEZE.format("    layer.weight.requires_grad_(False)\n"), "visible", set()),
    ("q9", LOSS.format("    with torch.no_grad():\n        aux = (feat ** 2).mean()\n"
                       "    return main + 0.1 * aux\n"), "visible", {"detach_no_grad_confused"}),
    ("q9", LOSS.format("    aux = (feat.data ** 2).mean()\n    return main + 0.1 * aux\n"),
     "visible", {"detach_in_loss_harmless"}),
    ("q9", LOSS.format("    aux = (feat.detach().requires_grad_() ** 2).mean()\n"
                       "    return main + 0.1 * aux\n"), "hidden", {"detach_in_loss_harmless"}),
    ("q9", LOSS.format("    aux = (feat ** 2).mean()\n    return main + aux\n"), "visible", set()),
    ("q9", "def custom_loss(output, target, feat):\n    with torch.no_grad():\n"
           "        main = F.mse_loss(output, target)\n        aux = (feat ** 2).mean()\n"
           "    return main + 0.1 * aux\n", "visible", {"detach_no_grad_confused"}),
    ("q9", LOSS.format("    aux = (feat ** 2).mean()\n    return (main + 0.1 * aux).item()\n"),
     "visible", set()),
    ("q10", BLOCK.format("    return x + identity.detach()\n"), "visible",
     {"residual_detach_harmless"}),
    ("q10", "def resnet_block(x, conv1, conv2, training=True):\n    identity = x.detach()\n"
            "    return conv2(conv1(x).relu()) + identity\n", "hidden",
     {"residual_detach_harmless"}),
    ("q10", BLOCK.format("    return x + identity if training else identity\n"), "visible",
     set()),
    ("q10", BLOCK.format("    return x\n"), "visible", set()),
    ("q11", DISC.format("    r, f = D(real), D(G(z))\n" + BCE), "visible",
     {"fake_batch_not_detached"}),
    ("q11", DISC.format("    fake = G(z)\n    r = D(real)\n    with torch.no_grad():\n"
                        "        f = D(fake)\n" + BCE), "visible", {"detach_no_grad_confused"}),
    ("q11", DISC.format("    r, f = D(real), D(G(z)).detach()\n" + BCE), "hidden",
     {"detach_activation_freezes_one"}),
    ("q11", DISC.format("    with torch.no_grad():\n        r, f = D(real), D(G(z))\n" + BCE),
     "visible", {"detach_no_grad_confused"}),
    ("q11", DISC.format("    fake = G(z)\n    fake.requires_grad_(False)\n"
                        "    r, f = D(real), D(fake)\n" + BCE), "visible",
     {"requires_grad_off_nonleaf"}),
    ("q11", DISC.format("    r, f = D(real), D(G(z).detach())\n"
                        + BCE.replace("ones_like(r)", "zeros_like(r)")
                        .replace("zeros_like(f)", "ones_like(f)")), "visible", set()),
]


@pytest.mark.parametrize("qid, src, variant, myths", CODE_WRONG)
def test_wrong_code_is_told_what_torch_found(qid, src, variant, myths):
    verdict = _code(qid, src, variant)
    assert not verdict["passed"] and verdict["answered"]
    assert _myths(verdict) == myths
    for f in _wrong(verdict):
        assert "[Misconception" not in f["text"] and " -- " not in f["text"]
        assert not re.search(r"\bseed\b", f["text"], re.I)


def test_q7_names_the_grad_fn_the_copy_got():
    (bad, *_) = _wrong(_code("q7", SNAPSHOT.format("return t.clone()")))
    assert "`CloneBackward0`" in bad["text"]


def test_q8_says_which_parameters_still_train():
    verdict = _code("q8", FREEZE.format("    layer.weight.requires_grad_(False)\n"))
    texts = " ".join(f["text"] for f in _wrong(verdict))
    assert "`bias`" in texts and "`weight`" not in texts


def test_q10_reports_the_vanished_gradient_norm():
    verdict = _code("q10", BLOCK.format("    return x + identity.detach()\n"))
    assert all("norm" in f["text"] for f in _wrong(verdict))


CORRECT = [
    ("q7", SNAPSHOT.format("return t.clone().detach()")),
    ("q7", SNAPSHOT.format("return torch.tensor(t.tolist())")),
    ("q7", "def snapshot(t):\n    with torch.no_grad():\n        return t.clone()\n"),
    ("q8", FREEZE.format("    layer.requires_grad_(False)\n")),
    ("q8", FREEZE.format("    for p in layer.parameters():\n        p.requires_grad = False\n")),
    ("q8", FREEZE.format("    for p in layer.parameters():\n        p.detach_()\n")),
    ("q9", LOSS.format("    return main + 0.1 * (feat.clone() ** 2).mean()\n")),
    ("q10", BLOCK.format("    return x + identity.clone()\n")),
    ("q11", DISC.format("    with torch.no_grad():\n        fake = G(z)\n"
                        "    r, f = D(real), D(fake)\n" + BCE)),
    ("q11", DISC.format("    @torch.no_grad()\n    def make_fake():\n        return G(z)\n"
                        "    r, f = D(real), D(make_fake())\n" + BCE)),
    ("q7", "@torch.no_grad()\ndef snapshot(t):\n    return t.clone()\n"),
]


@pytest.mark.parametrize("qid, src", CORRECT)
def test_correct_code_written_differently_passes_hidden_tests(qid, src):
    assert _code(qid, src, "hidden")["passed"]


@pytest.mark.parametrize("qid, src", [
    ("q7", "def snapshot(t):\n    raise NotImplementedError()\n"),
    ("q8", "def freeze(layer):\n    raise NotImplementedError()\n"),
    ("q11", "def discriminator_loss(D, G, z, real):\n    raise NotImplementedError()\n"),
])
def test_untouched_stub_is_not_answered(qid, src):
    verdict = _code(qid, src)
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not _myths(verdict)

