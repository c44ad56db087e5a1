"""Counting the bytes autograd keeps alive (first taught in lesson 02, section 6).

Memory is counted **deterministically**: the bytes of the tensors a computation keeps alive, not
the process's memory use (which depends on the allocator and on everything else running). A
tensor's bytes are ``numel() * element_size()``; tensors that share a storage (a view, the same
tensor saved twice) hold it only once, so each storage is counted once, by its size.

* ``tensor_bytes(*tensors, exclude=())``: bytes held by some tensors (lesson 02, section 6).
* ``saved_bytes(fn, exclude=())``: bytes autograd saves for backward while ``fn()`` runs, the
  copies kept for the audit (lesson 02, section 6; lesson 05 measures ``no_grad()`` with it).
* ``kept_grad_bytes(*tensors)``: bytes of the gradients kept in ``.grad`` after backward
  (lesson 02, section 6; lesson 04 compares probes with it).

Each argument taking tensors also takes iterables of them (``model.parameters()``) and ``None``
(counted as nothing, like a ``.grad`` that was never filled).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

import torch

from course.i18n import _


def _tensors(items: Iterable[Any]):
    """Flatten tensors, ``None`` and iterables of them into tensors."""
    for item in items:
        if item is None:
            continue
        if isinstance(item, torch.Tensor):
            yield item
        elif isinstance(item, Iterable) and not isinstance(item, str | bytes):
            for t in item:
                if t is None:
                    continue
                if not isinstance(t, torch.Tensor):
                    raise TypeError(_("expected tensors, got {type}", type=type(t).__name__))
                yield t
        else:
            raise TypeError(_("expected tensors, got {type}", type=type(item).__name__))


def _storages(t: torch.Tensor):
    """``(key, nbytes)`` of each storage ``t`` keeps alive; the key identifies the storage."""
    if t.is_sparse:  # a sparse COO tensor keeps its indices and values
        yield from _storages(t._indices())
        yield from _storages(t._values())
        return
    try:
        storage = t.untyped_storage()
    except (RuntimeError, NotImplementedError):  # no storage of its own: count what it shows
        yield ("tensor", id(t)), t.numel() * t.element_size()
        return
    ptr = storage.data_ptr()
    key = (str(t.device), ptr) if ptr else ("tensor", id(t))
    yield key, storage.nbytes()


def _count(tensors: Iterable[torch.Tensor], skip: frozenset = frozenset()) -> int:
    sizes = {}
    for t in tensors:
        for key, n in _storages(t):
            if key not in skip:
                sizes[key] = n
    return sum(sizes.values())


def tensor_bytes(*tensors, exclude: Iterable[Any] = ()) -> int:
    """Bytes held by ``tensors``, each storage counted once (lesson 02, section 6).

    For a tensor with a storage of its own this is ``t.numel() * t.element_size()``: 4 bytes
    per float32 number, 8 per float64. A view shares its base's storage, so
    ``tensor_bytes(x, x.t(), x[0])`` is the bytes of ``x``, once. Storages shared with the
    tensors in ``exclude`` are not counted.
    """
    skip = frozenset(key for t in _tensors([exclude]) for key, _size in _storages(t))
    return _count(_tensors(tensors), skip)


def saved_bytes(fn, exclude=()) -> int:
    """Bytes of the tensors autograd saves for backward while ``fn()`` runs (lesson 02, section 6).

    Each storage is counted once. A ``Linear`` saves its input (and its weight), a ReLU its
    output, Dropout its mask; pass ``exclude=model.parameters()`` to leave out the weights,
    which the model holds anyway. Under ``torch.no_grad()`` nothing is saved: 0.
    """
    saved = []

    def pack(t):                  # autograd calls this for every tensor it saves for backward
        saved.append(t)           # holding it: no storage is freed and reused while fn() runs
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return tensor_bytes(saved, exclude=exclude)


def kept_grad_bytes(*tensors) -> int:
    """Bytes of the gradients ``tensors`` keep in ``.grad`` (lesson 02, section 6).

    A parameter keeps its accumulated gradient; a transit station (non-leaf) keeps one only
    after ``retain_grad()``. A tensor without a ``.grad`` counts 0, and reading a non-leaf's
    ``.grad`` here is silent (no UserWarning).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grads = [t.grad for t in _tensors(tensors)]
    return tensor_bytes(grads)
