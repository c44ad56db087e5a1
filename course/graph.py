"""A model of autograd's history as a ``networkx.DiGraph`` (first used in lesson 01).

``build_graph(e, namespace=globals())`` walks ``e.grad_fn`` and ``next_functions``
the way backward does, and returns a graph whose nodes are named in the learner's
words (``a``, ``c``, ``mul``), never by memory address.

Node ids are the display names. Every node has ``kind`` (see ``course.themes``):

* ``function``: a backward function. ``torch_class`` is its torch class name
  (``MulBackward0``; ``AccumulateGrad`` for the node that stores a leaf's ``.grad``).
* ``parameter``: a leaf tensor that requires grad, reached through
  ``AccumulateGrad.variable``.
* ``intermediate``: a non-leaf tensor: an output, or a named tensor whose
  ``grad_fn is`` a node of the graph (matched by identity, with its ``output_nr``).
* ``constant``: a tensor that does not require grad (see "what can be recovered").

Tensor nodes also carry ``shape``, ``is_leaf``, ``requires_grad``, ``grad_fn``
(class name or ``None``), ``retains_grad``, ``has_hooks`` (``t._backward_hooks``
non-empty), ``is_output``, ``named`` and ``grad`` (a detached copy of ``.grad``
where torch keeps one, read without the non-leaf ``UserWarning``; else ``None``).

Edges point the way values flow in the forward pass (input -> consumer), the
reverse of ``next_functions``: for a backward function ``F`` and each
``(P, k) = F.next_functions[i]`` with ``P`` not ``None`` there is a path
``P -> F`` (through the tensor node of output ``k`` of ``P`` when that tensor
is named). Edge attributes: ``input_nr`` (``i``), ``grad`` (``None``; the
``BackwardStepper`` fills it with the gradient torch sent along the edge); a value a step
uses twice (``w * w``: ``next_functions`` names the same node twice) is one edge with
``input_nrs`` ``(0, 1)`` and ``uses`` 2 (drawn with a "×2").

What can be recovered, and what cannot:

* Tensors that do not require grad are not part of torch's graph. The ones a
  backward formula saved (``node._saved_self``, ``_saved_other``, ``_saved_mat1``
  ...) are found and shown, when the namespace names them. A constant the formula
  does not need (the ``water`` in ``flour * 0.5 + water``) leaves no trace, and
  after ``backward()`` has freed the saved values none can be found. The widgets'
  scenarios know their recipe and add those edges themselves
  (:func:`add_constant_input`).
* Python numbers (``0.5``) are not tensors and never appear.
* A tensor is named only if the namespace holds that very object (``is``);
  names starting with ``_`` (IPython's ``_``, ``_11``) are skipped; an
  ``nn.Module`` in the namespace names its parameters (``model.0.weight``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping

import networkx as nx

__all__ = ["build_graph", "tensor_names", "op_name", "add_constant_input", "graph_summary"]


def op_name(torch_class: str) -> str:
    """A readable name of a backward function: ``MulBackward0`` -> ``mul``."""
    if torch_class == "AccumulateGrad":
        return "accumulate"
    name = re.sub(r"Backward\d*$", "", torch_class)
    return name.lower() or torch_class


def tensor_names(namespace: Mapping | None) -> dict[int, tuple[str, object]]:
    """``id(tensor) -> (name, tensor)`` for the tensors a namespace names.

    The first name wins; private names (``_x``) are skipped; modules contribute
    their parameters as ``module.sub.weight``.
    """
    import torch

    found: dict[int, tuple[str, object]] = {}
    for name, value in dict(namespace or {}).items():
        if not isinstance(name, str) or name.startswith("_"):
            continue
        if isinstance(value, torch.Tensor):
            found.setdefault(id(value), (name, value))
        elif isinstance(value, torch.nn.Module):
            for pname, p in value.named_parameters():
                found.setdefault(id(p), (f"{name}.{pname}", p))
    return found


def _quiet_grad(t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = t.grad
    return None if g is None else g.detach().clone()


def _has_hooks(t) -> bool:
    return bool(getattr(t, "_backward_hooks", None))


def _tensor_attrs(t, name: str, named: bool, is_output: bool) -> dict:
    if not t.requires_grad:
        kind = "constant"
    else:
        kind = "parameter" if t.is_leaf else "intermediate"
    return {
        "name": name,
        "kind": kind,
        "shape": tuple(t.shape),
        "is_leaf": bool(t.is_leaf),
        "requires_grad": bool(t.requires_grad),
        "grad_fn": None if t.grad_fn is None else type(t.grad_fn).__name__,
        "retains_grad": bool(t.retains_grad) if not t.is_leaf else False,
        "has_hooks": _has_hooks(t),
        "grad": _quiet_grad(t),
        "is_output": is_output,
        "named": named,
        "tensor": t,
    }


_SAVED_NAMES: dict[type, list[str]] = {}


def _saved_tensors(fn) -> list[tuple[str, object]]:
    """The tensors a backward function saved, as ``(field, tensor)``; none once freed."""
    import torch

    out = []
    names = _SAVED_NAMES.get(type(fn))
    if names is None:  # the same for every function of a class (dir() is slow)
        names = _SAVED_NAMES[type(fn)] = [a for a in dir(fn) if a.startswith("_saved_")]
    for attr in names:
        try:
            value = getattr(fn, attr)
        except RuntimeError:  # freed by backward(); the values are gone
            continue
        values = value if isinstance(value, tuple | list) else (value,)
        out.extend((attr[len("_saved_"):], v) for v in values if isinstance(v, torch.Tensor))
    return out


class _Namer:
    """Unique display names: the learner's names first, then op names (``mul``, ``mul_1``)."""

    def __init__(self, taken: Iterable[str]):
        self.taken = set(taken)

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name = f"{base}_{i}"
            i += 1
        self.taken.add(name)
        return name


def build_graph(*outputs, namespace: Mapping | None = None) -> nx.DiGraph:
    """The autograd history of one or more output tensors, as a ``networkx.DiGraph``.

    ``namespace`` (e.g. ``globals()`` or ``locals()``) names the tensors. See the
    module docstring for the node kinds, attributes and edge direction.

    >>> a = torch.tensor(2., requires_grad=True); b = a * 3
    >>> sorted(build_graph(b, namespace={"a": a, "b": b}).nodes)
    ['a', 'accumulate(a)', 'b', 'mul']
    """
    import torch

    if len(outputs) == 1 and isinstance(outputs[0], list | tuple):
        outputs = tuple(outputs[0])
    for t in outputs:
        if not isinstance(t, torch.Tensor):
            from course.i18n import _

            raise TypeError(_("build_graph expects tensors, got {type}", type=type(t).__name__))
    names = tensor_names(namespace)
    namer = _Namer(name for name, _ in names.values())
    g = nx.DiGraph(outputs=[])

    tensor_nodes: dict[int, str] = {}  # id(tensor) -> node; the graph holds the tensor alive

    def add_tensor(t, is_output=False, fallback="tensor") -> str:
        entry = names.get(id(t))
        existing = tensor_nodes.get(id(t))
        if existing is not None:
            g.nodes[existing]["is_output"] |= is_output
            return existing
        node = entry[0] if entry else namer.fresh(fallback)
        g.add_node(node, **_tensor_attrs(t, node, entry is not None, is_output))
        tensor_nodes[id(t)] = node
        return node

    # 1. Backward functions reachable from the outputs, in the order backward meets them.
    #    An AccumulateGrad node is named after its leaf: ``accumulate(a)``.
    fn_ids: dict[int, str] = {}
    fns: list = []
    todo = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while todo:
        fn = todo.pop(0)
        if id(fn) in fn_ids:
            continue
        cls = type(fn).__name__
        leaf = add_tensor(fn.variable, fallback="leaf") if cls == "AccumulateGrad" else None
        node = namer.fresh(f"accumulate({leaf})" if leaf else op_name(cls))
        fn_ids[id(fn)] = node
        fns.append(fn)
        g.add_node(node, name=node, kind="function", torch_class=cls, node=fn)
        if leaf:
            g.add_edge(leaf, node, input_nr=0, input_nrs=(0,), uses=1, grad=None)
        todo.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)

    # 2. Tensor nodes: outputs, named non-leaves (t.grad_fn is node); leaves were added above.
    produced: dict[tuple[int, int], str] = {}  # (id(fn), output_nr) -> tensor node

    for i, t in enumerate(outputs):
        node = add_tensor(t, is_output=True, fallback="output" if i == 0 else f"output{i}")
        g.graph["outputs"].append(node)
        if t.grad_fn is not None:
            produced[(id(t.grad_fn), t.output_nr)] = node
    for _name, t in names.values():
        if t.grad_fn is not None and id(t.grad_fn) in fn_ids:
            produced.setdefault((id(t.grad_fn), t.output_nr), add_tensor(t))

    # 3. Edges, forward direction, through a named tensor when one holds that output. A
    #    value used twice by one step (``w * w``) is two torch edges: one edge here, whose
    #    ``input_nrs`` lists both inputs (and ``uses`` counts them).
    for fn in fns:
        consumer = fn_ids[id(fn)]
        for i, (nxt, k) in enumerate(fn.next_functions):
            if nxt is None:
                continue
            source = produced.get((id(nxt), k)) or fn_ids[id(nxt)]
            if g.has_edge(source, consumer):
                edge = g.edges[source, consumer]
                edge["input_nrs"] += (i,)
                edge["uses"] = len(edge["input_nrs"])
            else:
                g.add_edge(source, consumer, input_nr=i, input_nrs=(i,), uses=1, grad=None)
    for (fn_id, _k), node in produced.items():
        g.add_edge(fn_ids[fn_id], node, input_nr=0, input_nrs=(0,), uses=1, grad=None)

    # 4. Constants the backward formulas saved, when the namespace names them.
    for fn in fns:
        for _field, t in _saved_tensors(fn):
            if not t.requires_grad and id(t) in names:
                add_constant_input(g, add_tensor(t), fn_ids[id(fn)])
    return g


def add_constant_input(g: nx.DiGraph, constant: str, consumer: str, tensor=None) -> None:
    """Draw ``constant`` (a no-grad tensor node) as an input of node ``consumer``.

    Torch keeps no edge for such an input; this marks the edge ``recovered=True``.
    If ``consumer`` is a tensor node, the edge goes to the function that made it.
    A ``constant`` not yet in the graph is added from ``tensor``.
    """
    if constant not in g:
        if tensor is None:
            raise KeyError(f"{constant!r} is not in the graph; pass its tensor")
        g.add_node(constant, **_tensor_attrs(tensor, constant, True, False))
    if g.nodes[consumer].get("kind") != "function":
        makers = [p for p in g.predecessors(consumer) if g.nodes[p]["kind"] == "function"]
        consumer = makers[0] if makers else consumer
    if constant != consumer and not g.has_edge(constant, consumer):
        g.add_edge(constant, consumer, input_nr=None, grad=None, recovered=True)


def graph_summary(g: nx.DiGraph) -> list[str]:
    """One line per node, in a stable order: ``name: kind torch_class/shape flags``."""
    lines = []
    for node in nx.topological_sort(g):
        d = g.nodes[node]
        if d["kind"] == "function":
            lines.append(f"{node}: function {d['torch_class']}")
            continue
        flags = [f for f in ("retains_grad", "has_hooks", "is_output") if d.get(f)]
        grad = "" if d["grad"] is None else f" grad={d['grad'].flatten().tolist()}"
        lines.append(f"{node}: {d['kind']} {list(d['shape'])} {' '.join(flags)}{grad}".rstrip())
    return lines
