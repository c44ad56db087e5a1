"""Tamper-resistant reads of autograd facts, for use inside the oracle process.

Learner code that the oracle runs (a function written for a write-code question)
could patch ``torch.Tensor.is_leaf`` or ``builtins.isinstance`` in that process.
This module captures the C-level descriptors of ``torch._C.TensorBase`` and the
builtins it needs at import time, before any learner code runs, so the facts it
reports are torch's own. (``TensorBase`` is an immutable extension type: its
attributes cannot be reassigned.)
"""

from __future__ import annotations

import builtins
import warnings

import torch

_TensorBase = torch._C.TensorBase
_is_leaf = _TensorBase.is_leaf.__get__
_requires_grad = _TensorBase.requires_grad.__get__
_grad_fn = _TensorBase.grad_fn.__get__
_grad = _TensorBase.grad.__get__
_catch_warnings = warnings.catch_warnings
_simplefilter = warnings.simplefilter
_retains_grad = _TensorBase.retains_grad.__get__
_version = _TensorBase._version.__get__
_data_ptr = _TensorBase.data_ptr
_tolist = _TensorBase.tolist
_isinstance = builtins.isinstance
_type = builtins.type
_getattr = builtins.getattr


def is_tensor(obj) -> bool:
    """True when ``obj`` is a real tensor (a subclass counts; its Python overrides do not)."""
    return _isinstance(obj, _TensorBase)


def is_leaf(t) -> bool:
    return bool(_is_leaf(t))


def requires_grad(t) -> bool:
    return bool(_requires_grad(t))


def grad_fn_name(t) -> str | None:
    """Name of the backward node that made ``t`` (``'MulBackward0'``), or None for a leaf."""
    fn = _grad_fn(t)
    return None if fn is None else _type(fn).__name__


def grad_values(t):
    """``t.grad`` as a nested list, or None; never emits the non-leaf UserWarning."""
    with _catch_warnings():
        _simplefilter("ignore")
        g = _grad(t)
    return None if g is None else _tolist(g)


def retains_grad(t) -> bool:
    return bool(_retains_grad(t))


def version(t) -> int:
    return int(_version(t))


def shares_storage(a, b) -> bool:
    return _data_ptr(a) == _data_ptr(b)


def kind(t) -> str:
    """The course's three kinds of tensor, in technical words.

    ``'parameter'``: a leaf that requires grad (a sorting centre / market ingredient);
    ``'constant'``: a leaf that does not require grad (an ordinary parcel / bottled sauce);
    ``'intermediate'``: a non-leaf, made by an operation (a transit station / semi-finished dish).
    """
    if not is_leaf(t):
        return "intermediate"
    return "parameter" if requires_grad(t) else "constant"
