"""The torch behaviour that lessons 01, 02, 04 and 05 now state, asserted directly.

Each test names, in its docstring, the lesson and the claim its text makes (issue 20's
corrections and the traps added with them). If a future torch changes one of these
behaviours, the test fails here, instead of the notebook's text going stale.
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from torch import nn

import course

# --- lesson 01: where the four rules stop -------------------------------------------------


def test_l01_a_vector_output_needs_its_starting_gradient():
    """Lesson 01, "A vector output: where does backward() start?": backward() of a vector
    raises; backward(gradient=v) is the vector-Jacobian product, (y * v).sum().backward(),
    and with v all ones y.sum().backward(); for a non-linear y too (v^T times the Jacobian)."""
    x = torch.tensor([1.0, 2.0, -0.5], requires_grad=True)
    v = torch.tensor([1.0, 0.5, -2.0])
    with pytest.raises(RuntimeError, match="only for scalar outputs"):
        (x * 2).backward()
    (x.sin() * x).backward(gradient=v)
    vjp = x.grad.clone()
    x.grad = None
    ((x.sin() * x) * v).sum().backward()
    assert torch.equal(x.grad, vjp)
    jacobian = torch.autograd.functional.jacobian(lambda t: t.sin() * t, x.detach())
    assert torch.allclose(vjp, v @ jacobian)
    x.grad = None
    (x * 2).backward(gradient=torch.ones(3))
    ones = x.grad.clone()
    x.grad = None
    (x * 2).sum().backward()
    assert torch.equal(x.grad, ones)


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


# --- lesson 04: what probes can change, and the .grad they see -----------------------------


def test_l04_post_accumulate_hook_may_edit_grad_in_place():
    """Lesson 04, section 2 and summary: a post-accumulate-grad hook returns None but may edit
    p.grad in place (here halving it)."""
    w = torch.tensor([1.0, -1.0], requires_grad=True)

    def halve_on_desk(p):
        p.grad.mul_(0.5)

    w.register_post_accumulate_grad_hook(halve_on_desk)
    (w * 4).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0]


def test_l04_post_accumulate_hook_returning_a_tensor_raises():
    """Lesson 04, section 2: a post-accumulate-grad hook that returns a tensor makes backward
    raise RuntimeError."""
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    w.register_post_accumulate_grad_hook(lambda p: p.grad * 0.5)
    with pytest.raises(RuntimeError, match="should return None"):
        (w * 4).sum().backward()


def test_l04_grad_is_one_tensor_updated_in_place():
    """Lesson 04, cell 11: in an ordinary backward, p.grad is one tensor updated in place."""
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    refs = []
    w.register_post_accumulate_grad_hook(lambda p: refs.append(p.grad))
    (w * 2).sum().backward()
    (w**3).sum().backward()
    assert refs[0] is refs[1] and refs[0].tolist() == [5.0, 5.0]


def test_l04_create_graph_files_a_new_grad_each_pass():
    """Lesson 04, cell 11's exception (and the grad_log_aliases misconception's): with
    backward(create_graph=True), each pass makes a new .grad tensor, with a grad_fn only when
    the gradient depends on w (3w^2, not the constant 2 of w * 2), and torch warns about the
    reference cycle."""
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    refs = []
    w.register_post_accumulate_grad_hook(lambda p: refs.append(p.grad))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (w * 2).sum().backward(create_graph=True)
        (w**3).sum().backward(create_graph=True)
    assert refs[0] is not refs[1]
    assert [t.tolist() for t in refs] == [[2.0, 2.0], [5.0, 5.0]]
    assert refs[0].grad_fn is None and refs[1].grad_fn is not None
    assert w.grad.grad_fn is not None
    assert any("create_graph=True" in str(m.message) for m in caught)
    w.grad = None


def test_l04_retain_grad_reads_after_every_hook():
    """Lesson 04, cell 16 (since torch 2.0): a retain_grad() monitor installed before a
    scaling hook still keeps the scaled gradient."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    station = x * x
    station.retain_grad()
    station.register_hook(lambda g: g * 0.1)
    (3 * station).sum().backward()
    torch.testing.assert_close(station.grad, torch.full((3,), 0.3))


class _ExpThenScale(nn.Module):
    def forward(self, x):
        return x.exp() * 3


def test_l04_old_backward_hook_sees_only_the_last_operation():
    """Lesson 04, "The old backward probe": register_backward_hook reports the gradient at the
    input of the module's last operation (3, not 3*exp(x)) and warns with a FutureWarning;
    register_full_backward_hook reports the gradient at the module's input."""
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    seen = {}
    old, full = _ExpThenScale(), _ExpThenScale()
    old.register_backward_hook(lambda m, gi, go: seen.update(old=gi[0].detach().clone()))
    full.register_full_backward_hook(lambda m, gi, go: seen.update(full=gi[0].detach().clone()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old(x).sum().backward()
    assert any(issubclass(m.category, FutureWarning) and "deprecated" in str(m.message)
               for m in caught)
    full(x).sum().backward()
    torch.testing.assert_close(seen["old"], torch.full((2,), 3.0))
    torch.testing.assert_close(seen["full"], 3 * x.detach().exp())


def test_l04_full_backward_hook_may_replace_grad_input():
    """Lesson 04: a full backward hook that returns a tuple replaces grad_input, and the
    replacement is what reaches the input."""
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    layer = _ExpThenScale()
    layer.register_full_backward_hook(lambda m, gi, go: (gi[0].clamp(max=1.0),))
    layer(x).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0]


# --- lesson 05: views, threads and inference tensors ----------------------------------------


def test_l05_no_grad_view_keeps_requires_grad_but_no_route():
    """Lesson 05, section 1: a view w[0:2] made under no_grad() has requires_grad=True and
    is_leaf=True, no grad_fn; backward through it stores nothing; an in-place edit of it with
    grad mode on raises ("A view was created in no_grad mode")."""
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    with torch.no_grad():
        window = w[0:2]
    assert window.requires_grad and window.is_leaf and window.grad_fn is None
    (window * 2).sum().backward()
    assert window.grad is None and w.grad is None
    with pytest.raises(RuntimeError, match="view was created in no_grad mode"):
        window.mul_(2)


def test_l05_no_grad_result_is_a_leaf_without_grad():
    """Lesson 05, section 1: a (non-view) result made under no_grad() is a leaf with
    requires_grad=False."""
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    with torch.no_grad():
        quiet = w * 2
    assert quiet.is_leaf and not quiet.requires_grad and quiet.grad_fn is None


def test_l05_grad_mode_is_per_thread():
    """Lesson 05, section 3: grad mode is per thread; a thread started inside no_grad() records."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    seen = {}

    def worker():
        seen["enabled"] = torch.is_grad_enabled()
        seen["requires_grad"] = (w * 2).requires_grad

    with torch.no_grad():
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert not torch.is_grad_enabled()
    assert seen == {"enabled": True, "requires_grad": True}


def test_l05_enable_grad_cannot_undo_inference_mode():
    """Lesson 05, section 4: enable_grad() inside inference_mode() reports grad mode enabled,
    yet the result has requires_grad=False and is an inference tensor."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with torch.inference_mode():
        with torch.enable_grad():
            assert torch.is_grad_enabled()
            attempt = w * 2
    assert not attempt.requires_grad and attempt.is_inference()


@pytest.mark.parametrize("use, expected", [
    (lambda frozen, w: frozen + w, [1.0, 1.0]),
    (lambda frozen, w: w * frozen.sum(), [6.0, 6.0]),
    (lambda frozen, w: torch.cat([frozen, w]), [1.0, 1.0]),
], ids=["add", "times-sum", "cat"])
def test_l05_inference_tensor_joins_a_route_as_a_constant(use, expected):
    """Lesson 05, section 4 (was "can never join a monitored route"): frozen + w2,
    w2 * frozen.sum() and torch.cat([frozen, w2]) all backpropagate to w2."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with torch.inference_mode():
        frozen = w * 2
    use(frozen, w).sum().backward()
    assert w.grad.tolist() == expected


def test_l05_inference_tensor_cannot_be_saved_for_backward():
    """Lesson 05, section 4: frozen * w2 must save frozen and raises "Inference tensors cannot
    be saved for backward"."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with torch.inference_mode():
        frozen = w * 2
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (frozen * w).sum().backward()


def test_l05_view_made_in_inference_mode_is_not_an_inference_tensor():
    """Lesson 05, section 4: inside inference_mode(), new data is an inference tensor, but a
    view of an ordinary tensor is not, and keeps requires_grad=True."""
    n = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with torch.inference_mode():
        made = n * 2
        window = n[0:2]
    assert made.is_inference() and not made.requires_grad
    assert not window.is_inference() and window.requires_grad and window.grad_fn is None


def test_l05_view_made_in_inference_mode_sends_nothing_back():
    """Lesson 05, section 4: backward through a view taken inside inference_mode() stores
    nothing, neither in the view nor in the tensor it views."""
    n = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with torch.inference_mode():
        window = n[0:2]
    (window * 2).sum().backward()
    assert window.grad is None and n.grad is None


def test_l03_more_than_one_way_makes_a_second_pot():
    """Lesson 03's introduction: a second pot takes a copy; detach().clone() is the usual way
    and not the only one (torch.tensor(t) copies too, with a warning; clone().detach())."""
    broth = torch.tensor([1.0, 2.0], requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        copies = [broth.detach().clone(), broth.clone().detach(), torch.tensor(broth)]
    assert any("copy construct" in str(m.message) for m in caught)
    for pot in copies:
        assert pot.is_leaf and not pot.requires_grad
        assert pot.data_ptr() != broth.data_ptr()
        pot.add_(1)
    assert broth.tolist() == [1.0, 2.0]            # the first pot never moved


def test_l01_leaves_come_from_no_gradient_results_detach_data_and_no_grad():
    """The output_can_be_leaf misconception: with recording on, a differentiable result of a
    tensor that requires grad is a non-leaf; leaves come from results that carry no gradient,
    from detach() or .data, and from anything computed under no_grad()."""
    x = torch.tensor([1.0, -2.0], requires_grad=True)
    assert not (x * 2).is_leaf
    with torch.no_grad():
        quiet = x * 2
    for leaf in ((x > 0), x.argmax(), x.long(), x.detach() * 2, (x * 2).data, quiet):
        assert leaf.is_leaf and leaf.grad_fn is None
