"""course.memory's byte counts, against real torch tensors of known sizes."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import course


def test_tensor_bytes_known_sizes_and_dtypes():
    assert course.tensor_bytes(torch.zeros(3, 4)) == 3 * 4 * 4
    assert course.tensor_bytes(torch.zeros(3, 4, dtype=torch.float64)) == 3 * 4 * 8
    assert course.tensor_bytes(torch.zeros(10, dtype=torch.bool)) == 10
    assert course.tensor_bytes(torch.tensor(2.0)) == 4
    assert course.tensor_bytes() == 0


def test_tensor_bytes_counts_each_storage_once():
    x = torch.randn(8, 16)
    assert course.tensor_bytes(x, x, x.t(), x[0], x.view(-1)) == 8 * 16 * 4
    y = torch.randn(8, 16)
    assert course.tensor_bytes(x, y) == 2 * 8 * 16 * 4
    assert course.tensor_bytes(x, x.clone()) == 2 * 8 * 16 * 4
    assert course.tensor_bytes(x, y, exclude=[x.t()]) == 8 * 16 * 4  # x's storage left out
    assert course.tensor_bytes(x, exclude=y) == 8 * 16 * 4


def test_tensor_bytes_takes_iterables_and_none():
    model = nn.Linear(5, 3)  # 15 weights + 3 biases
    assert course.tensor_bytes(model.parameters()) == 18 * 4
    assert course.tensor_bytes([torch.ones(2), None], None) == 8
    with pytest.raises(TypeError, match="tensors"):
        course.tensor_bytes([1.5])


def test_saved_bytes_counts_what_backward_needs():
    x = torch.randn(64, 32, requires_grad=True)
    assert course.saved_bytes(lambda: torch.tanh(x)) == 64 * 32 * 4  # tanh keeps its output
    assert course.saved_bytes(lambda: x + 1) == 0  # add keeps nothing
    assert course.saved_bytes(lambda: x * x) == 64 * 32 * 4  # x saved twice, counted once
    x64 = torch.randn(64, 32, dtype=torch.float64, requires_grad=True)
    assert course.saved_bytes(lambda: torch.tanh(x64)) == 64 * 32 * 8


def test_saved_bytes_is_zero_when_nothing_is_recorded():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    batch = torch.randn(8, 16)
    assert course.saved_bytes(lambda: model(batch)) > 0
    with torch.no_grad():
        assert course.saved_bytes(lambda: model(batch)) == 0
    with torch.inference_mode():
        assert course.saved_bytes(lambda: model(batch)) == 0
    assert course.saved_bytes(lambda: model(batch).detach()) > 0  # detach comes too late


def test_saved_bytes_can_leave_out_the_parameters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    batch = torch.randn(8, 16)
    # Linear 1 keeps the batch (its weight is not needed: the batch does not require grad);
    # the ReLU keeps its output, which Linear 2 keeps as its input too (one storage); Linear 2
    # also keeps its weight, a parameter.
    activations = 8 * 16 * 4 + 8 * 32 * 4
    assert course.saved_bytes(lambda: model(batch), exclude=model.parameters()) == activations
    assert course.saved_bytes(lambda: model(batch)) == activations + 4 * 32 * 4


def test_saved_bytes_survives_temporaries_freed_while_fn_runs():
    x = torch.randn(256, requires_grad=True)

    def run():
        for _ in range(10):
            y = torch.sin(x * 2)  # sin keeps its input, x * 2, a fresh tensor each time
            del y  # the graph goes, and the allocator may hand its storage out again

    assert course.saved_bytes(run) == 10 * 256 * 4


def test_kept_grad_bytes_retain_grad_and_cloning_probe_agree():
    x = torch.randn(64, 32, requires_grad=True)
    station = torch.tanh(x)
    station.retain_grad()
    station.sum().backward()
    retained = course.kept_grad_bytes(station)

    y = torch.randn(64, 32, requires_grad=True)
    other = torch.tanh(y)
    copies = []
    other.register_hook(lambda g: copies.append(g.clone()))
    other.sum().backward()

    assert retained == course.tensor_bytes(copies) == 64 * 32 * 4
    assert course.kept_grad_bytes(x, y) == 2 * 64 * 32 * 4  # the leaves' .grad


def test_kept_grad_bytes_is_zero_and_silent_without_grads():
    w = torch.randn(3, requires_grad=True)
    station = w * 2
    station.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading the non-leaf's .grad must not warn
        assert course.kept_grad_bytes(station) == 0
    assert course.kept_grad_bytes(torch.randn(3, requires_grad=True)) == 0
    assert course.kept_grad_bytes([w, station]) == 3 * 4


def test_step_memory_of_a_training_step_adds_up():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    batch = torch.randn(128, 64)
    stations = []

    def forward():
        h = batch
        for layer in model:
            h = layer(h)
            h.retain_grad()
            stations.append(h)

    saved = course.saved_bytes(forward, exclude=model.parameters())
    stations[-1].sum().backward()
    assert saved == 128 * 64 * 4 + 128 * 256 * 4  # the batch and the ReLU output
    assert course.kept_grad_bytes(stations) == (2 * 128 * 256 + 128 * 10) * 4
    assert course.kept_grad_bytes(model.parameters()) == course.tensor_bytes(model.parameters())


def test_memory_names_are_exported_lazily():
    for name in ("tensor_bytes", "saved_bytes", "kept_grad_bytes"):
        assert name in course.__all__
        assert "lesson 02" in getattr(course, name).__doc__
