"""The learner-facing helpers of the course: analogies, graph drawing, widgets.

Importing ``course`` is cheap and has no side effects; torch, matplotlib and
ipywidgets are imported by the submodules that need them, when they are used.
"""

from __future__ import annotations

import importlib

_LAZY = {  # public name -> submodule
    "tensor_table": "facts",
    "caught_warnings": "facts",
    "finite_difference": "facts",
    "assert_close": "facts",
    "quiet_grad": "facts",
    "build_graph": "graph",
    "draw_graph": "draw",
    "show": "draw",
    "GraphExplorer": "widgets",
    "BackwardStepper": "widgets",
    "RetainExplorer": "explorers",
    "SkipPathExplorer": "explorers",
    "HookExplorer": "explorers",
    "NoGradExplorer": "explorers",
    "InplaceExplorer": "explorers",
    "DoctorExplorer": "explorers",
    "diagnose": "doctor",
    "tensor_bytes": "memory",
    "saved_bytes": "memory",
    "kept_grad_bytes": "memory",
    "set_language": "i18n",
    "language": "i18n",
}


__all__ = ["seed_everything", *_LAZY]


def seed_everything(seed: int = 0) -> None:
    """Fix torch's and Python's random seeds (notebooks call this in their setup cell)."""
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"course.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'course' has no attribute {name!r}")
