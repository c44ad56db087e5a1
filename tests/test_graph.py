"""course.graph.build_graph compared with live torch on the seed examples."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch
from torch import nn

from course.graph import build_graph, op_name, tensor_names


def basics():
    a = torch.tensor(2.0, requires_grad=True)
    b = torch.tensor(3.0, requires_grad=True)
    c = a + b
    d = a * b
    e = c * d
    return {"a": a, "b": b, "c": c, "d": d, "e": e}


def functions(g):
    return {n for n, d in g.nodes(data=True) if d["kind"] == "function"}


def assert_edges_match_next_functions(g):
    """Every torch edge F.next_functions[i] = (P, k) is a path P -> (tensor) -> F."""
    by_fn = {id(d["node"]): n for n, d in g.nodes(data=True) if d["kind"] == "function"}
    for n, d in g.nodes(data=True):
        if d["kind"] != "function":
            continue
        expected = {i: by_fn[id(p)] for i, (p, _k) in enumerate(d["node"].next_functions)
                    if p is not None}
        got = {}
        for p, _, e in g.in_edges(n, data=True):
            if e.get("recovered"):
                continue
            assert e["uses"] == len(e["input_nrs"]) and e["input_nr"] == e["input_nrs"][0]
            for k in e["input_nrs"]:
                if g.nodes[p]["kind"] == "function":
                    got[k] = p
                elif g.nodes[p]["kind"] == "intermediate":  # a named tensor between functions
                    (maker,) = [m for m in g.predecessors(p)
                                if g.nodes[m]["kind"] == "function"]
                    got[k] = maker
        if d["torch_class"] != "AccumulateGrad":
            assert got == expected, n


def test_basics_kinds_names_and_edges():
    t = basics()
    g = build_graph(t["e"], namespace=t)
    kinds = {n: g.nodes[n]["kind"] for n in "abcde"}
    assert kinds == {"a": "parameter", "b": "parameter", "c": "intermediate",
                     "d": "intermediate", "e": "intermediate"}
    classes = sorted(g.nodes[n]["torch_class"] for n in functions(g))
    assert classes == ["AccumulateGrad", "AccumulateGrad", "AddBackward0", "MulBackward0",
                       "MulBackward0"]
    # leaves are reached through AccumulateGrad.variable, and named after the learner's names
    assert g.nodes["accumulate(a)"]["node"].variable is t["a"]
    assert g.has_edge("a", "accumulate(a)")
    # a named intermediate sits on its grad_fn: t.grad_fn is node
    (maker,) = g.predecessors("c")
    assert g.nodes[maker]["node"] is t["c"].grad_fn
    assert g.graph["outputs"] == ["e"]
    assert_edges_match_next_functions(g)
    for n, d in g.nodes(data=True):
        if d["kind"] != "function":
            assert d["is_leaf"] == t[n].is_leaf and d["requires_grad"] == t[n].requires_grad
            assert d["grad_fn"] == (None if t[n].grad_fn is None else type(t[n].grad_fn).__name__)
    assert not any("0x" in str(n) for n in g.nodes)  # never memory addresses


def test_basics_grads_after_backward_equal_torch_and_read_quietly():
    t = basics()
    t["c"].retain_grad()
    t["d"].register_hook(lambda grad: None)
    t["e"].backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading a non-leaf .grad must not warn
        g = build_graph(t["e"], namespace=t)
    assert g.nodes["a"]["grad"].item() == t["a"].grad.item() == -2.0 + 23.0  # 21
    assert g.nodes["b"]["grad"].item() == t["b"].grad.item() == 16.0
    assert g.nodes["c"]["grad"].item() == t["c"].grad.item() == 6.0
    assert g.nodes["d"]["grad"] is None and g.nodes["e"]["grad"] is None
    assert g.nodes["c"]["retains_grad"] and not g.nodes["d"]["retains_grad"]
    assert g.nodes["d"]["has_hooks"] and not g.nodes["c"]["has_hooks"]


def test_kitchen_flour_dough_bread():
    flour = torch.tensor(2.0, requires_grad=True)
    water = torch.tensor(3.0)
    dough = flour * 0.5 + water
    bread = dough.sigmoid()
    ns = {"flour": flour, "water": water, "dough": dough, "bread": bread}
    g = build_graph(bread, namespace=ns)
    assert g.nodes["flour"]["kind"] == "parameter"
    assert g.nodes["dough"]["kind"] == "intermediate" and g.nodes["bread"]["is_output"]
    assert g.nodes["sigmoid"]["torch_class"] == "SigmoidBackward0"
    # water is not needed by AddBackward0's formula, so torch keeps no trace of it
    assert "water" not in g
    assert_edges_match_next_functions(g)
    bread.backward()
    g = build_graph(bread, namespace=ns)
    torch.testing.assert_close(g.nodes["flour"]["grad"], flour.grad)


def test_parcel_constant_recovered_from_saved_tensor():
    torch.manual_seed(0)
    w1 = torch.randn(5, requires_grad=True)
    w2 = torch.randn(5, requires_grad=True)
    input_package = torch.randn(5)
    processed = input_package * w1
    final = processed.sum()
    ns = {"w1": w1, "w2": w2, "input_package": input_package, "processed": processed,
          "final": final}
    g = build_graph(final, namespace=ns)
    assert g.nodes["input_package"]["kind"] == "constant"
    assert g.nodes["input_package"]["shape"] == (5,)
    assert g.has_edge("input_package", "mul") and g.edges["input_package", "mul"]["recovered"]
    assert "w2" not in g  # w2 does not feed final
    final.backward()
    g = build_graph(final, namespace=ns)
    torch.testing.assert_close(g.nodes["w1"]["grad"], input_package)
    assert "input_package" not in g  # backward freed the saved values: documented limit


def test_sequential_parameters_named_from_module():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    x = torch.randn(2, 3)
    loss = model(x).pow(2).mean()
    g = build_graph(loss, namespace={"model": model, "x": x, "loss": loss})
    params = {n for n, d in g.nodes(data=True) if d["kind"] == "parameter"}
    assert params == {f"model.{p}" for p, _ in model.named_parameters()}
    assert g.nodes["model.0.weight"]["shape"] == (4, 3)
    assert g.nodes["x"]["kind"] == "constant"
    assert_edges_match_next_functions(g)
    loss.backward()
    g = build_graph(loss, namespace={"model": model, "loss": loss})
    for name, p in model.named_parameters():
        torch.testing.assert_close(g.nodes[f"model.{name}"]["grad"], p.grad)


def test_unnamed_nodes_get_op_names_and_several_outputs():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    g = build_graph(a * 2, (a + 1).exp())
    assert {"mul", "add", "exp"} <= set(g.nodes)
    assert g.graph["outputs"] == ["output", "output1"]
    assert op_name("AddmmBackward0") == "addmm" and op_name("AccumulateGrad") == "accumulate"


def test_private_names_are_skipped_and_first_name_wins():
    a = torch.tensor(1.0, requires_grad=True)
    names = tensor_names({"_": a, "_11": a, "weight": a, "alias": a})
    assert [n for n, _ in names.values()] == ["weight"]


def test_leaf_output_and_type_errors():
    a = torch.tensor(1.0, requires_grad=True)
    g = build_graph(a, namespace={"a": a})
    assert list(g.nodes) == ["a"]
    with pytest.raises(TypeError):
        build_graph(3.0)


def test_importing_course_stays_cheap():
    code = ("import sys, course; heavy = [m for m in ('torch', 'matplotlib', 'ipywidgets',"
            " 'networkx') if m in sys.modules]; print(heavy); assert not heavy;"
            " assert callable(course.build_graph)")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_value_used_twice_by_one_step_is_one_edge_used_twice():
    """``w * w``: torch's MulBackward0 names w's AccumulateGrad twice in ``next_functions``
    (each input sends its own gradient); the graph keeps both inputs on one edge, and the
    drawing writes "×2" on it (lesson 04's explorer: why each pass sends 6·w)."""
    from course import draw

    w = torch.tensor([1.0, -2.0], requires_grad=True)
    station = w * w
    loss = (3 * station).sum()
    g = build_graph(loss, namespace={"w": w, "station": station, "loss": loss})
    assert_edges_match_next_functions(g)
    assert [p for p, _ in station.grad_fn.next_functions] == [
        g.nodes["accumulate(w)"]["node"]] * 2
    (square,) = [n for n in g.predecessors("station") if g.nodes[n]["kind"] == "function"]
    edge = g.edges["accumulate(w)", square]
    assert edge["input_nrs"] == (0, 1) and edge["uses"] == 2
    single = build_graph((3 * w).sum(), namespace={"w": w})
    assert [u for _, _, u in single.edges(data="uses")] == [1] * len(single.edges)
    fig = draw.draw_graph(g, theme="technical")
    assert "\u00d72" in [t.get_text() for t in fig.axes[0].texts]
    import matplotlib.pyplot as plt
    plt.close(fig)
