"""Lesson 01, leaf tensors: the questions of ``source/01_leaves/01_leaves.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts with :mod:`autograder.torchfacts`; a code question runs the learner's
function and inspects what it returns.
"""

from __future__ import annotations

from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import LearnerFunction
from autograder.questions import (
    CodeRun,
    Finding,
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    Verdict,
    WriteCode,
    run_learner,
    values_equal,
    warns,
)

lesson = Lesson("01_leaves", "Leaf tensors")

KITCHEN = """\
flour = torch.tensor(2.0, requires_grad=True)   # bought at the market, we will tune it
water = torch.tensor(3.0)                       # bottled, used as is
salt = water * 0.01                             # mixed from bottled things only
dough = flour * 0.5 + water                     # semi-finished dish
bread = dough.sigmoid()                         # the finished bread
meat = nn.Linear(3, 2).weight                   # marinated meat: a layer's parameter
"""


def _leaf_myth(key: str):
    def choose(given: Any, expected: Any) -> str | None:
        if expected is True and given is False:
            if key in ("water", "salt"):
                return "leaf_means_trainable" if key == "water" else "no_grad_inputs_make_nonleaf"
            return "created_is_not_leaf"
        if expected is False and given is True:
            return "output_can_be_leaf"
        return None

    return choose


@lesson.register
class Q1LeafOrNot(Predict):
    qid = "q1"
    title = "Leaf or not?"
    code = KITCHEN
    items = [
        Item("flour", "flour was created by hand, not by an operation: a market ingredient.",
             _leaf_myth("flour"), part="basics"),
        Item("dough", "dough came out of `*` and `+` on flour, which requires grad: a "
             "semi-finished dish with a grad_fn.", _leaf_myth("dough"), part="basics"),
        Item("bread", "bread came out of sigmoid on dough: not a leaf.", _leaf_myth("bread"),
             part="basics"),
        Item("meat", "a layer's weight is an nn.Parameter made by hand inside nn.Linear: a leaf "
             "that requires grad.", _leaf_myth("meat"), part="basics"),
        Item("water", "water does not require grad, and every tensor that does not require "
             "grad is a leaf by convention.", _leaf_myth("water"), part="tricky"),
        Item("salt", "salt was computed, but only from water, which does not require grad: no "
             "history is recorded, so salt is a leaf too.", _leaf_myth("salt"), part="tricky"),
    ]

    def facts(self, ns):
        return {k: tf.is_leaf(ns[k]) for k in ("flour", "dough", "bread", "meat", "water", "salt")}


@lesson.register
class Q2FlagsAndRecipes(Predict):
    qid = "q2"
    title = "requires_grad and grad_fn"
    code = KITCHEN
    items = [
        Item("salt.requires_grad", "an operation's result requires grad only if one of its "
             "inputs does; water*0.01 has none.", "no_grad_inputs_make_nonleaf"),
        Item("bread.requires_grad", "requires_grad spreads downstream from flour to dough to "
             "bread.", "output_can_be_leaf"),
        Item("flour.grad_fn is None", "a tensor made by hand has no recipe step: grad_fn is "
             "None even though it requires grad.", "grad_fn_on_leaf"),
        Item("dough.grad_fn is None", "dough's grad_fn is the `+` step (AddBackward0) that "
             "made it.", "output_can_be_leaf"),
        Item("meat.grad_fn is None", "a parameter is a leaf: its grad_fn is None.",
             "grad_fn_on_leaf"),
    ]

    def facts(self, ns):
        return {
            "salt.requires_grad": tf.requires_grad(ns["salt"]),
            "bread.requires_grad": tf.requires_grad(ns["bread"]),
            "flour.grad_fn is None": tf.grad_fn_name(ns["flour"]) is None,
            "dough.grad_fn is None": tf.grad_fn_name(ns["dough"]) is None,
            "meat.grad_fn is None": tf.grad_fn_name(ns["meat"]) is None,
        }


PARCELS = """\
w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)   # sorting centre: its settings
parcel = torch.tensor([0.5, -1.0, 2.0])                  # an ordinary parcel
station = parcel * w                                     # transit station
report = station.sum()                                   # the efficiency report
report.backward()
"""


def _grad_myth(given: Any, expected: Any) -> str | None:
    if expected is None and given is not None:
        return "nonleaf_grad_stored"
    if expected is not None and given is None:
        return "nonleaf_grad_never_computed"
    return None


@lesson.register
class Q3WhatGradHolds(Predict):
    qid = "q3"
    title = "What does .grad hold after backward()?"
    code = PARCELS
    items = [
        Item("w.grad", "report = sum(parcel * w), so d report / d w = parcel, stored on w because "
             "w is a leaf that requires grad. Give the values as a list.", None, part="values"),
        Item("parcel.grad", "nobody audits an ordinary parcel: it does not require grad, so its "
             ".grad stays None.", "constant_gets_grad", part="none"),
        Item("station.grad", "station's gradient was computed on the way back to w but not "
             "stored: it is a non-leaf.", _grad_myth, part="none"),
    ]

    def facts(self, ns):
        return {k: tf.grad_values(ns[k.split(".")[0]]) for k in ("w.grad", "parcel.grad",
                                                                 "station.grad")}


@lesson.register
class Q4Warnings(Predict):
    qid = "q4"
    title = "Which reads of .grad warn?"
    code = PARCELS + """\
kept = parcel * w          # another transit station, with a monitor installed
kept.retain_grad()
kept.sum().backward()
"""
    items = [
        Item("w.grad", "reading a leaf's .grad is always silent.", None),
        Item("parcel.grad", "parcel is a leaf (it does not require grad): reading its .grad "
             "is silent and gives None.", "leaf_means_trainable"),
        Item("station.grad", "reading .grad of a non-leaf returns None and emits a UserWarning "
             "that points at retain_grad().", "nonleaf_grad_silent"),
        Item("kept.grad", "after retain_grad() the non-leaf keeps its gradient, and reading it "
             "is silent.", None),
    ]

    def facts(self, ns):
        return {k: warns(lambda k=k: ns[k.split(".")[0]].grad)
                for k in ("w.grad", "parcel.grad", "station.grad", "kept.grad")}


SEED003 = """\
a = torch.tensor(2.0, requires_grad=True)
b = torch.tensor(3.0, requires_grad=True)
c = a + b
d = a * b
e = c * d
e.backward()
"""

# Question 5 asks for the same graph at other inputs, so the lesson's worked
# example cannot simply be copied.
SEED003_EXERCISE = SEED003.replace("2.0", "1.5").replace("3.0", "-2.0")


def _route_myth(routes_at):
    """A wrong gradient equal to one route's contribution alone: the routes were not added."""

    def choose(given: Any, expected: Any) -> str | None:
        import torch

        a, b = torch.tensor(1.5), torch.tensor(-2.0)
        if isinstance(given, int | float) and any(
            values_equal(given, float(r)) for r in routes_at(a, b)
        ):
            return "one_route_only"
        return None

    return choose


@lesson.register
class Q5TwoRoutes(Predict):
    qid = "q5"
    title = "Seed 003 by hand"
    code = SEED003_EXERCISE
    items = [
        Item("a.grad", "a reaches e by two routes, through c and through d; "
             "de/da = d * dc/da + c * dd/da = d + c*b. The contributions of both routes add up.",
             _route_myth(lambda a, b: [a * b, (a + b) * b])),
        Item("b.grad", "de/db = d * dc/db + c * dd/db = d + c*a.",
             _route_myth(lambda a, b: [a * b, (a + b) * a])),
    ]

    def facts(self, ns):
        return {"a.grad": tf.grad_values(ns["a"]), "b.grad": tf.grad_values(ns["b"])}


MEAN = """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = x * 2
z = y.mean()
z.backward()
"""


def _mean_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and values_equal(given, [e / 2 for e in expected]):
        return "mean_grad_halved"
    return None


@lesson.register
class Q6MeanMyth(Predict):
    qid = "q6"
    title = "Seed 004's printed x.grad"
    code = MEAN
    items = [
        Item("x.grad", "z = (2*x_1 + 2*x_2) / 2, so dz/dx_i = 2/2 = 1 for each i.", _mean_myth),
    ]

    def facts(self, ns):
        return {"x.grad": tf.grad_values(ns["x"])}


SEED003_FORWARD = """\
a = torch.tensor(2.0, requires_grad=True)
b = torch.tensor(3.0, requires_grad=True)
c = a + b
d = a * b
e = c * d
"""


def _count_accumulate(fn, seen=None) -> int:
    seen = set() if seen is None else seen
    if fn is None or id(fn) in seen:
        return 0
    seen.add(id(fn))
    own = 1 if type(fn).__name__ == "AccumulateGrad" else 0
    return own + sum(_count_accumulate(nxt, seen) for nxt, _ in fn.next_functions)


@lesson.register
class Q7RealGraph(Predict):
    qid = "q7"
    title = "What the graph is made of"
    code = SEED003_FORWARD
    items = [
        Item("e.grad_fn", "e was made by `*`, so its grad_fn is a MulBackward0 node. Give the "
             "class name as a string.", "graph_is_all_leaves"),
        Item("accumulate_grad_nodes", "each leaf that requires grad is reached through exactly "
             "one AccumulateGrad node, however many routes lead to it.", "graph_is_all_leaves"),
        Item("c.is_leaf", "c is an intermediate result: the graph is not 'all leaves'.",
             "graph_is_all_leaves"),
    ]

    def facts(self, ns):
        return {
            "e.grad_fn": tf.grad_fn_name(ns["e"]),
            "accumulate_grad_nodes": _count_accumulate(ns["e"].grad_fn),
            "c.is_leaf": tf.is_leaf(ns["c"]),
        }


# --------------------------------------------------------------------------- write code


def _kitchen_requirements() -> list[Requirement]:
    def get(run: CodeRun, key: str):
        res = run.result
        if not isinstance(res, dict) or key not in res:
            raise KeyError(f"return a dict with the key {key!r}")
        t = res[key]
        if not tf.is_tensor(t):
            raise TypeError(f"{key!r} must be a tensor")
        return t

    def flour(run):
        t = get(run, "flour")
        return tf.is_leaf(t) and tf.requires_grad(t), "flour must be a leaf that requires grad"

    def sauce(run):
        t = get(run, "sauce")
        return tf.is_leaf(t) and not tf.requires_grad(t), "sauce must be a leaf without grad"

    def dough(run):
        t, f = get(run, "dough"), get(run, "flour")
        if tf.is_leaf(t):
            return False, "dough must come out of an operation on flour (a non-leaf)"
        leaves = _reachable_leaves(t)
        return any(x is f for x in leaves), "dough's history must lead back to flour"

    def glaze(run):
        t = get(run, "glaze")
        return (tf.is_leaf(t) and not tf.requires_grad(t),
                "glaze must be computed from sauce alone, so it records no history")

    def computed(run):
        t = get(run, "glaze")
        s = get(run, "sauce")
        return (not tf.shares_storage(t, s) and t.numel() > 0,
                "glaze must be a new tensor computed from sauce, not sauce itself")

    return [
        Requirement("`flour` is a market ingredient: a leaf that requires grad", flour,
                    "created_is_not_leaf"),
        Requirement("`sauce` is bottled: a leaf that does not require grad", sauce,
                    "leaf_means_trainable"),
        Requirement("`dough` is a semi-finished dish made from flour", dough,
                    "output_can_be_leaf"),
        Requirement("`glaze` is computed from sauce only, and is therefore a leaf", glaze,
                    "no_grad_inputs_make_nonleaf"),
        Requirement("`glaze` is a new tensor, not sauce itself", computed),
    ]


def _reachable_leaves(t) -> list:
    """Leaves that backward() from ``t`` would fill .grad on, in discovery order."""
    if tf.is_leaf(t):
        return [t] if tf.requires_grad(t) else []
    out, seen, stack = [], set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ == "AccumulateGrad":
            out.append(fn.variable)
        stack.extend(nxt for nxt, _ in fn.next_functions)
    return out


@lesson.register
class Q8BuildKitchen(WriteCode):
    qid = "q8"
    title = "Stock the kitchen"
    function_name = "stock_kitchen"

    def grade_code(self, fn, part, variant):
        return self.run_and_require(fn, _kitchen_requirements(), part)


GRAPHS = {
    "seed003": """\
a = torch.tensor(2.0, requires_grad=True)
b = torch.tensor(3.0, requires_grad=True)
out = (a + b) * (a * b)
""",
    "parcel": """\
w1 = torch.randn(5, requires_grad=True)
w2 = torch.randn(5, requires_grad=True)
parcel = torch.randn(5)
out = (parcel * w1 + w2).sum()
""",
    "leaf": """\
out = torch.randn(3, requires_grad=True)
""",
    "constant": """\
out = torch.randn(3) * 2
""",
}
HIDDEN_GRAPHS = {
    "sequential": """\
model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))
out = model(torch.randn(2, 4)).sum()
""",
    "reused": """\
w = torch.randn(2, requires_grad=True)
frozen = torch.randn(2, requires_grad=True).detach()
out = (w * w * frozen).sum() + w.sum()
""",
}


def _same_tensors(given, expected) -> bool:
    if not isinstance(given, list | tuple):
        return False
    if len(given) != len(expected):
        return False
    return all(any(g is e for g in given) for e in expected)


@lesson.register
class Q9FindSortingCentres(WriteCode):
    qid = "q9"
    title = "Walk the real graph"
    function_name = "sorting_centres"

    def grade_code(self, fn: LearnerFunction, part, variant):
        import torch

        graphs = dict(GRAPHS)
        if variant == "hidden":
            graphs.update(HIDDEN_GRAPHS)
        findings, right = [], 0
        for name, code in graphs.items():
            torch.manual_seed(0)
            ns = {"torch": torch, "nn": torch.nn}
            exec(compile(code, f"<graph {name}>", "exec"), ns)  # noqa: S102
            expected = _reachable_leaves(ns["out"])
            try:
                run = run_learner(fn, ns["out"])
            except LearnerCodeError as exc:
                findings.append(Finding(False, f"graph `{name}`: your function raised {exc.summary}"))
                continue
            if _same_tensors(run.result, expected):
                right += 1
                findings.append(Finding(True, f"graph `{name}`: found all {len(expected)} "
                                              "sorting centres."))
            else:
                got = len(run.result) if isinstance(run.result, list | tuple) else run.result
                findings.append(Finding(
                    False,
                    f"graph `{name}`: expected the {len(expected)} leaf tensor(s) that require "
                    f"grad, got {got!r}. Walk grad_fn.next_functions; an AccumulateGrad node's "
                    "`.variable` is the leaf. A leaf output that requires grad is its own "
                    "sorting centre; a tensor that does not require grad has none.",
                    misconception="graph_is_all_leaves",
                ))
        return Verdict(self.qid, findings)


@lesson.register
class Q10RebuiltCentre(WriteCode):
    qid = "q10"
    title = "Find the bug: the sorting centre that became a transit station"
    function_name = "tune_centre"

    def grade_code(self, fn, part, variant):
        def leaf(run):
            t = run.result
            return tf.is_tensor(t) and tf.is_leaf(t) and tf.requires_grad(t), \
                "return the sorting centre itself: a leaf that requires grad"

        def grad(run):
            import torch

            t = run.result
            g = tf.grad_values(t)
            ref = torch.tensor(tf._tolist(t), requires_grad=True)  # same values, clean history
            (ref ** 2).sum().backward()
            want = tf.grad_values(ref)
            return g is not None and values_equal(g, want), \
                f".grad should be d/dw sum(w**2) = 2*w = {want}, found {g}"

        def silent(run):
            return not run.warnings, f"your function warned: {run.warnings}"

        return self.run_and_require(fn, [
            Requirement("the returned tensor is a leaf that requires grad", leaf,
                        "output_can_be_leaf"),
            Requirement("its .grad holds d loss / d w = 2*w", grad, "nonleaf_grad_stored"),
            Requirement("no warning is emitted", silent, "nonleaf_grad_silent"),
        ], part)


PARCEL_WEIGHTS = [1.0, 2.0, 3.0]  # the data of the buggy program in the notebook


@lesson.register
class Q11Typo(WriteCode):
    qid = "q11"
    title = "Find the bug: require_grad"
    function_name = "weigh_parcels"

    def grade_code(self, fn, part, variant):
        def leaf(run):
            t = run.result
            return tf.is_tensor(t) and tf.is_leaf(t) and tf.requires_grad(t), \
                "w must be a leaf that requires grad"

        def grad(run):
            import torch

            ref = torch.zeros(3, requires_grad=True)  # the intended program, run by torch
            (ref * torch.tensor(PARCEL_WEIGHTS)).sum().backward()
            want = tf.grad_values(ref)
            g = tf.grad_values(run.result)
            return g is not None and values_equal(g, want), \
                f"w.grad should be the parcel weights {want}, found {g}"

        return self.run_and_require(fn, [
            Requirement("w is a leaf that requires grad", leaf, "require_grad_typo"),
            Requirement("after backward, w.grad holds the parcel weights", grad,
                        "require_grad_typo"),
        ], part)
