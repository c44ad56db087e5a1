"""The torch behaviour that lessons 06, 07, 08 and docs/doctor.md state, asserted live.

Each test's docstring names the lesson and the claim. If a future torch changes one of these
behaviours, the suite fails here instead of the text going stale.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from course.doctor import diagnose


def _backward_error(out):
    try:
        out.sum().backward()
    except RuntimeError as exc:
        return str(exc)
    return None


# --------------------------------------------------------------------------- silent in-place edits


def test_numpy_write_bypasses_the_version_counter():
    """06 section 7, 07 case 4, 08 section 4: a write through ``t.detach().numpy()`` moves no
    version counter, so backward uses the forged saved value without a word (like ``.data``)."""
    x = torch.tensor([0.5, 1.5], requires_grad=True)
    s = x.sigmoid()
    s.detach().numpy()[:] = 5.0
    assert s._version == 0
    assert _backward_error(s) is None
    assert x.grad.tolist() == [-20.0, -20.0]                  # 5 * (1 - 5)
    true = torch.sigmoid(x.detach()) * (1 - torch.sigmoid(x.detach()))
    assert torch.allclose(true, torch.tensor([0.2350, 0.1491]), atol=1e-4)


def test_data_edit_bypasses_the_version_counter():
    """06 section 7: an edit through ``.data`` leaves the version at 0 and the gradient wrong."""
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (w * w).sum()
    w.data.mul_(10)
    loss.backward()
    assert w._version == 0 and w.grad.tolist() == [20.0, 40.0, 60.0]


def test_no_grad_edit_of_an_unsaved_value_before_backward_is_silent():
    """06 sections 3 and 7, 07 summary: ``z = a*b; with no_grad(): z.mul_(2)`` before backward
    raises nothing; the loss sees the doubled z, the gradient is ``b`` (not ``2b``)."""
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    b = torch.tensor([3.0, 4.0])
    z = a * b
    with torch.no_grad():
        z.mul_(2)
    loss = z.sum()
    loss.backward()
    assert z._version == 1 and loss.item() == 22.0
    assert a.grad.tolist() == [3.0, 4.0]


def test_no_grad_edit_of_a_saved_value_raises():
    """06 section 7: the same edit under ``no_grad()`` on a value mul saved makes backward raise."""
    v = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    loss = (v * v).sum()
    with torch.no_grad():
        v.mul_(10)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# --------------------------------------------------------------------------- indexed assignment


@pytest.mark.parametrize("index, node, grad", [
    (0, "CopySlices", [0.0, 2.0, 2.0]),
    (slice(1, None), "CopySlices", [2.0, 0.0, 0.0]),
    ("mask", "IndexPutBackward0", [2.0, 0.0, 0.0]),
    ([0, 2], "IndexPutBackward0", [0.0, 2.0, 0.0]),
])
def test_indexed_assignment_nodes(index, node, grad):
    """06 sections 1 and 6: ``t[i] = v`` and slices record ``CopySlices``; a mask or an index list
    (``h[h > 0] = 1``, lesson 07 Q10's form) records ``IndexPutBackward0``; version + 1, the
    overwritten slots get gradient 0."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    z = x * 2
    z[(z > 3) if index == "mask" else index] = 0.0
    assert type(z.grad_fn).__name__ == node and z._version == 1
    assert torch.autograd.grad(z.sum(), x)[0].tolist() == grad


# --------------------------------------------------------------------------- error texts


def test_inplace_error_text_on_the_pinned_torch():
    """06 section 4 (version-dependent): torch 2.13 names ``output 0 of Sigmoid``; the stable
    pieces the course's checks match are in the message."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    s = x.sigmoid()
    s.add_(1)
    text = _backward_error(s)
    assert "modified by an inplace operation" in text
    assert "is at version 1; expected version 0" in text
    assert "output 0 of Sigmoid" in text


def test_anomaly_mode_names_the_failed_node_and_its_forward_line():
    """06 section 4 (version-dependent): anomaly mode reports ``Error detected in TanhBackward0``
    as a UserWarning and points at the tanh line, not the in-place line."""
    x = torch.tensor([0.5, 1.5], requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autograd.set_detect_anomaly(True):
            act = (x * 3).tanh()
            scaled = act * 2
            act.mul_(0.5)
            assert _backward_error(scaled) is not None
    report = str(caught[0].message)
    assert "Error detected in TanhBackward0" in report
    assert ".tanh()" in report.splitlines()[-2]


def test_anomaly_mode_raises_on_nan_made_in_backward():
    """06 section 4: a NaN produced in backward lands silently in ``.grad``; anomaly mode raises a
    RuntimeError naming the backward function."""
    x = torch.tensor([0.0, 1.0], requires_grad=True)
    (x.sqrt() * 0).sum().backward()
    assert torch.isnan(x.grad[0]) and x.grad[1] == 0
    x.grad = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autograd.set_detect_anomaly(True), pytest.raises(
                RuntimeError, match="SqrtBackward0.*nan"):
            (x.sqrt() * 0).sum().backward()


# --------------------------------------------------------------------------- a Python number saved


@pytest.mark.parametrize("make", [lambda x: x * 2, lambda x: 2 * x, lambda x: x / 2,
                                  lambda x: x * torch.tensor(2.0)])
def test_multiplying_by_a_number_saves_it_so_backward_twice_raises(make):
    """08 section 2: ``(x*2).sum()`` cannot be backwarded twice: ``MulBackward0`` saved the number
    (``_saved_other``, a 0-dim tensor) and the first backward freed it."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = make(x).sum()
    out.backward()
    with pytest.raises(RuntimeError, match="second time"):
        out.backward()


def test_adding_a_number_saves_nothing_so_backward_twice_works():
    """08 section 2: ``(x+2).sum()`` saved nothing, so a second backward runs (and accumulates)."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = (x + 2).sum()
    out.backward()
    out.backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_the_capstone_gain_crashes_on_step_two_because_of_its_saved_number():
    """08 sections 1-2: ``torch.randn(16, requires_grad=True) * 0.5`` saved 0.5; the second step's
    backward reaches that node and raises. ``+ 0.5`` would not crash, yet is still no leaf."""
    gain = torch.randn(16, requires_grad=True) * 0.5
    saved = gain.grad_fn._saved_other
    assert type(gain.grad_fn).__name__ == "MulBackward0"
    assert isinstance(saved, torch.Tensor) and saved.dim() == 0 and saved.item() == 0.5
    w = torch.randn(16, requires_grad=True)
    (w * gain).sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        (w * gain).sum().backward()

    shifted = torch.randn(16, requires_grad=True) + 0.5
    for _ in range(2):
        (w * shifted).sum().backward()
    assert not shifted.is_leaf


# --------------------------------------------------------------------------- zero versus cut


@pytest.mark.parametrize("op", [torch.round, torch.sign, torch.floor])
def test_step_functions_are_recorded_and_send_zeros(op):
    """07 section 6: ``round``, ``sign``, ``floor`` are recorded (a grad_fn) and send gradient 0."""
    w = torch.tensor([0.7, -1.2, 2.4], requires_grad=True)
    out = op(w)
    assert out.requires_grad and out.grad_fn is not None
    assert torch.autograd.grad(out.sum(), w)[0].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("op", [lambda t: t > 0, torch.argmax, lambda t: t.long()])
def test_comparisons_argmax_and_integer_casts_cut_the_graph(op):
    """07 section 6: comparisons, ``argmax`` and integer casts give a leaf with no grad_fn."""
    w = torch.tensor([0.7, -1.2, 2.4], requires_grad=True)
    out = op(w)
    assert not out.requires_grad and out.grad_fn is None and out.is_leaf


def test_the_doctor_calls_step_functions_zero_and_comparisons_cut():
    """07 section 6, docs/doctor.md: the doctor says ``zero`` for round/sign/floor and ``cut``
    for a comparison, argmax or ``.long()``."""
    torch.manual_seed(0)
    names = ("round", "sign", "floor", "compare", "argmax", "long", "keep")
    m = nn.ModuleDict({n: nn.Linear(3, 1) for n in names})
    xb = torch.randn(5, 3)

    def step():
        return (m["keep"](xb) + m["round"](xb).round() + m["sign"](xb).sign()
                + m["floor"](xb).floor() + (m["compare"](xb) > 0).float()
                + m["argmax"](xb).argmax() + m["long"](xb).long()).pow(2).mean()

    status = {row.name.split(".")[0]: row.status for row in diagnose(m, step=step).per_parameter}
    assert status == {"round": "zero", "sign": "zero", "floor": "zero", "compare": "cut",
                      "argmax": "cut", "long": "cut", "keep": "ok"}


# --------------------------------------------------------------------------- hooks and autograd.grad


def test_autograd_grad_runs_tensor_and_module_hooks_but_not_post_accumulate_hooks():
    """docs/doctor.md: during ``torch.autograd.grad`` (so ``diagnose(loss=...)``) tensor hooks and
    module backward hooks run; post-accumulate-grad hooks do not (no ``.grad`` is written); a
    ``backward()`` runs all three."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 1))
    seen = []
    net[2].weight.register_hook(lambda g: seen.append("tensor"))
    net[2].register_full_backward_hook(lambda m, gi, go: seen.append("module"))
    net[2].weight.register_post_accumulate_grad_hook(lambda p: seen.append("post-accumulate"))
    x = torch.randn(4, 2)
    diagnose(net, loss=net(x).sum())
    assert sorted(seen) == ["module", "tensor"]
    assert all(p.grad is None for p in net.parameters())
    seen.clear()
    net(x).sum().backward()
    assert sorted(seen) == ["module", "post-accumulate", "tensor"]


def test_l06_q1_add_saves_no_tensor_and_mul_by_a_number_saves_only_the_number():
    """Lesson 06, Q1's explanation: `add_` saves no tensor, and `mul_(2)` saves only the number
    2, not the tensor it multiplies (so repacking that tensor later breaks nothing)."""
    x = torch.ones(2, requires_grad=True)
    z = x * 1
    z.add_(1)
    assert not [a for a in dir(z.grad_fn) if a.startswith("_saved_")
                and isinstance(getattr(z.grad_fn, a), torch.Tensor)]
    z.mul_(2)
    assert z.grad_fn._saved_self is None and z.grad_fn._saved_other.item() == 2.0


# --------------------------------------------------------------- claims stated no wider than true


def test_l06_inference_tensors_have_no_version_counter():
    """06 section 1: every tensor has a version counter starting at 0 and each in-place change
    adds one, except tensors made under ``torch.inference_mode()``."""
    t = torch.zeros(2)
    assert t._version == 0
    t.add_(1)
    assert t._version == 1
    with torch.inference_mode():
        skipped = torch.zeros(2)
    with pytest.raises(RuntimeError, match="do not track version counter"):
        _ = skipped._version


def test_only_a_saved_value_makes_backward_raise_and_a_leaf_edit_is_refused_at_once():
    """03 section 2, 07 case 4, 08 section 4, the in-place misconception: after an in-place
    edit, backward() raises only when the edit overwrote a value saved for backward; an
    in-place edit of a leaf that requires grad is refused at the edit itself."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = torch.tensor([3.0, 4.0], requires_grad=True)
    z = x * y                      # saves x and y, not z
    z.add_(1)
    assert _backward_error(z) is None
    s = x.tanh()                   # saves its output
    s.add_(1)
    assert "modified by an inplace operation" in _backward_error(s)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)


def test_l02_q4_a_failed_backward_adds_nothing_only_when_it_fails_first():
    """02 Q4's hint: the second ``loss.backward()`` raises before any gradient reaches x; a
    backward that fails halfway keeps what it had already added."""
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    loss = (x * x).sum()
    loss.backward()
    first = x.grad.clone()
    with pytest.raises(RuntimeError):
        loss.backward()
    assert torch.equal(x.grad, first)             # nothing added by the failed call
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    s = (b * 1).sigmoid()
    s.add_(1)                                      # sigmoid's saved output overwritten
    with pytest.raises(RuntimeError):
        ((a * 3).sum() + s.sum()).backward()
    assert a.grad is not None                      # a's branch ran before the failure
    torch.testing.assert_close(a.grad, torch.autograd.grad((a * 3).sum(), a)[0])


def test_pow_saves_base_and_exponent_and_its_output_for_a_tensor_exponent():
    """The saved-values misconception: pow saves its base and exponent, and its output too
    when the exponent is a tensor."""
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    by_number = w ** 3
    saved = {n for n in dir(by_number.grad_fn) if n.startswith("_saved_")}
    assert saved == {"_saved_self", "_saved_exponent"}
    by_tensor = w ** torch.tensor([2.0, 3.0], requires_grad=True)
    saved = {n for n in dir(by_tensor.grad_fn) if n.startswith("_saved_")}
    assert saved == {"_saved_self", "_saved_exponent", "_saved_result"}


def test_l08_a_data_clamp_is_passed_through_with_the_clamped_values():
    """08 section 4: after ``pred.data.clamp_(min=0)`` the gradient flows through the clamped
    entries as if nothing cut them (a real clamp sends them 0), computed from the clamped
    values (neither the unclamped gradient nor the clamp's)."""
    w = torch.tensor([-1.0, 2.0], requires_grad=True)

    def grad(edit):
        w.grad = None
        pred = w * 1.0
        pred = edit(pred)
        ((pred - 2) ** 2).sum().backward()
        return w.grad.tolist()

    def forged(p):
        p.data.clamp_(min=0)
        return p

    passed_through = (2 * (w.detach().clamp(min=0) - 2)).tolist()  # d/dp (p - 2)^2 at the clamp
    assert grad(forged) == passed_through
    assert grad(forged) != grad(lambda p: p.clamp(min=0))        # a real clamp: 0 where cut
    assert grad(forged) != grad(lambda p: p)                     # no clamp at all
