"""Lesson 03 (detach): typical wrong answers get the misconception they reveal."""

from __future__ import annotations

import ast

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


def _code(qid, src, variant="visible"):
    name = ast.parse(src).body[0].name
    return _ev(qid, {"__function__": src, "name": name}, variant=variant)


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if not f["ok"]}


def test_lesson_misconceptions_are_registered_for_this_lesson():
    used = {"detach_copies", "detach_freezes", "detach_keeps_grad", "clone_shares_storage",
            "clone_cuts_history", "torch_tensor_silent", "requires_grad_off_nonleaf",
            "detach_inplace_harmless", "residual_detach_harmless", "detach_in_loss_harmless",
            "detach_activation_freezes_one", "fake_batch_not_detached"}
    for key in used:
        assert MISCONCEPTIONS[key].lesson == A, key


Q1_RIGHT = {"packed.is_leaf": True, "packed.requires_grad": False,
            "packed.grad_fn is None": True, "same storage": True}


def test_q1_thinks_detach_copies():
    verdict = _predict("q1", {**Q1_RIGHT, "same storage": False})
    assert _myths(verdict) == {"detach_copies"} and 0 < verdict["score"] < 1


def test_q1_thinks_detached_keeps_grad():
    assert _myths(_predict("q1", {**Q1_RIGHT, "packed.requires_grad": True})) == \
        {"detach_keeps_grad"}


def test_q2_copy_belief_is_named_on_both_parts():
    wrong = {"broth[0]": 1.0, "broth[1]": 1.0, "error": None}
    assert _myths(_predict("q2", wrong, part="shared")) == {"detach_copies"}
    assert _myths(_predict("q2", wrong, part="backward")) == {"detach_copies"}
    right = {"broth[0]": 5.0, "broth[1]": 1.0, "error": RuntimeError}
    assert _predict("q2", right)["score"] == 1.0


def test_q3_clone_and_torch_tensor_myths():
    wrong = {"copy_a.is_leaf": True, "copy_a.requires_grad": False,
             "copy_b.requires_grad": False, "copy_c.requires_grad": False, "copy_c warns": False}
    assert _myths(_predict("q3", wrong)) == {"clone_cuts_history", "torch_tensor_silent"}


def test_q4_requires_grad_off_on_a_non_leaf():
    wrong = {"error": None, "dough.is_leaf": True, "dough.requires_grad": False,
             "flour.requires_grad": True}
    assert _myths(_predict("q4", wrong)) == {"requires_grad_off_nonleaf"}


def test_q5_thinks_p_detach_freezes_p():
    wrong = {"model[0].weight.grad is None": True, "model[0].bias.grad is None": True,
             "model[1].weight.grad is None": True, "model[1].bias.grad is None": False}
    assert _myths(_predict("q5", wrong)) == {"detach_freezes"}


def test_q6_thinks_detaching_the_identity_is_harmless():
    assert _myths(_predict("q6", {"x.grad": 1.1 ** 3, "x2.grad": 1.1 ** 3})) == \
        {"residual_detach_harmless"}


@pytest.mark.parametrize("body, myth", [
    ("return t.detach()", "detach_copies"),
    ("return t.clone()", "clone_cuts_history"),
    ("return torch.tensor(t)", "torch_tensor_silent"),
])
def test_q7_wrong_copies(body, myth):
    verdict = _code("q7", f"def snapshot(t):\n    {body}\n", variant="hidden")
    assert verdict["score"] < 1 and myth in _myths(verdict)


def test_q8_p_detach_freezes_nothing():
    src = "def freeze(layer):\n    for p in layer.parameters():\n        p.detach()\n"
    verdict = _code("q8", src)
    assert verdict["score"] < 1 and _myths(verdict) == {"detach_freezes"}


def test_q8_detaching_the_activation_freezes_upstream_too():
    src = ("def freeze(layer):\n    for p in layer.parameters():\n        p.requires_grad_(False)\n"
           "    layer.register_forward_hook(lambda m, i, o: o.detach())\n")
    verdict = _code("q8", src)
    assert verdict["score"] < 1 and _myths(verdict) == {"detach_activation_freezes_one"}


def test_q8_module_level_switch_is_accepted():
    assert _code("q8", "def freeze(layer):\n    layer.requires_grad_(False)\n",
                 variant="hidden")["score"] == 1.0


def test_q9_seed_004_loss_is_named():
    src = ("def custom_loss(output, target, feat):\n"
           "    return F.mse_loss(output, target) + 0.1 * (feat.detach() ** 2).mean()\n")
    verdict = _code("q9", src)
    assert verdict["score"] < 1 and _myths(verdict) == {"detach_in_loss_harmless"}


def test_q10_seed_001_block_vanishes_and_says_so():
    src = ("def resnet_block(x, conv1, conv2, training=True):\n"
           "    identity = x\n"
           "    x = conv2(conv1(x).relu())\n"
           "    return x + (identity.detach() if training else identity)\n")
    verdict = _code("q10", src)
    assert verdict["score"] < 1 and _myths(verdict) == {"residual_detach_harmless"}
    (bad,) = [f for f in verdict["findings"] if not f["ok"]]
    assert "norm" in bad["text"]


def test_q11_forgotten_detach_trains_the_generator():
    src = ("def discriminator_loss(D, G, z, real):\n"
           "    r, f = D(real), D(G(z))\n"
           "    return (F.binary_cross_entropy_with_logits(r, torch.ones_like(r))\n"
           "            + F.binary_cross_entropy_with_logits(f, torch.zeros_like(f)))\n")
    verdict = _code("q11", src)
    assert verdict["score"] < 1 and _myths(verdict) == {"fake_batch_not_detached"}


def test_q11_no_grad_generator_is_accepted_too():
    src = ("def discriminator_loss(D, G, z, real):\n"
           "    with torch.no_grad():\n"
           "        fake = G(z)\n"
           "    r, f = D(real), D(fake)\n"
           "    return (F.binary_cross_entropy_with_logits(r, torch.ones_like(r))\n"
           "            + F.binary_cross_entropy_with_logits(f, torch.zeros_like(f)))\n")
    assert _code("q11", src, variant="hidden")["score"] == 1.0
