"""The torch behaviour that lessons 01, 02, 04 and 05 now state, asserted directly.

Each test names, in its docstring, the lesson and the claim its text makes (issue 20's
corrections and the traps added with them). If a future torch changes one of these
behaviours, the test fails here, instead of the notebook's text going stale.
"""

from __future__ import annotations

import pytest
import torch

import course

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


# --- lesson 02: finite differences, None versus zero for an optimizer ---------------------


def test_l02_finite_difference_rounding_is_about_1e_12():
    """Lesson 02, cell 9: on the quadratic report, float64 central differences match the
    by-hand gradient up to rounding of a few 1e-12 (the text no longer says 1e-9)."""
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    parcel = torch.tensor([0.5, -1.0, 2.0])
    by_hand = 2 * parcel.double() ** 2 * w.detach().double()
    fd = course.finite_difference(lambda v: ((parcel * v) ** 2).sum(), w)
    assert (fd - by_hand).abs().max().item() < 1e-10


@pytest.mark.parametrize("set_to_none, moves", [(True, False), (False, True)])
def test_l02_adam_skips_none_but_moves_a_zero_grad(set_to_none, moves):
    """Lesson 02, "A cleared desk is not a report that says zero": after one Adam step,
    zero_grad() (None) makes the next step skip the parameter; zero_grad(set_to_none=False)
    (zeros) lets Adam's momentum move it."""
    centre = torch.tensor([1.0, -1.0], requires_grad=True)
    adam = torch.optim.Adam([centre], lr=0.1)
    (centre * centre).sum().backward()
    adam.step()
    adam.zero_grad(set_to_none=set_to_none)
    assert (centre.grad is None) == set_to_none
    before = centre.detach().clone()
    adam.step()
    assert (not torch.equal(before, centre)) == moves
