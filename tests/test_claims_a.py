"""The torch behaviour that lessons 01, 02, 04 and 05 now state, asserted directly.

Each test names, in its docstring, the lesson and the claim its text makes (issue 20's
corrections and the traps added with them). If a future torch changes one of these
behaviours, the test fails here, instead of the notebook's text going stale.
"""

from __future__ import annotations


import pytest
import torch


# --- lesson 01: where the four rules stop -------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda w: w > 0,
    lambda w: w.argmax(),
    lambda w: w.long(),
    lambda w: w.detach(),
], ids=["comparison", "argmax", "long", "detach"])
def test_l01_non_differentiable_results_are_leaves(make):
    """Lesson 01, cell "Where the four rules stop": comparisons, argmax, integer casts and
    detach() of a tensor that requires grad give leaves with requires_grad=False."""
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    t = make(w)
    assert t.is_leaf and not t.requires_grad and t.grad_fn is None


def test_l01_round_is_recorded_and_sends_zeros():
    """Lesson 01: round() is recorded (RoundBackward0), unlike a comparison, and sends zeros."""
    w = torch.tensor([1.2, -2.7], requires_grad=True)
    r = w.round()
    assert not r.is_leaf and type(r.grad_fn).__name__ == "RoundBackward0"
    r.sum().backward()
    assert w.grad.tolist() == [0.0, 0.0]


def test_l01_in_place_makes_a_created_tensor_a_non_leaf():
    """Lesson 01: torch.zeros(3) is a leaf; after .add_(w) with w requiring grad it is a
    non-leaf carrying AddBackward0."""
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    shelf = torch.zeros(3)
    assert shelf.is_leaf
    shelf.add_(w)
    assert not shelf.is_leaf and shelf.requires_grad
    assert type(shelf.grad_fn).__name__ == "AddBackward0"


def test_l01_differentiable_output_is_never_a_leaf():
    """Lesson 01, rule 4: the output of differentiable operations on a sorting centre is a
    non-leaf."""
    w1 = torch.randn(5, requires_grad=True)
    w2 = torch.randn(5, requires_grad=True)
    route = ((torch.randn(5) * w1 + w2) ** 2).sum()
    assert not route.is_leaf and route.grad_fn is not None
