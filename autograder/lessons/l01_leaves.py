"""Lesson 01, leaf tensors: the questions of ``source/01_leaves/01_leaves.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts with :mod:`autograder.torchfacts`; a code question runs the learner's
function and tells the learner what torch reports about the tensors it made.
"""

from __future__ import annotations

from typing import Any

from autograder import torchfacts as tf
from autograder.questions import (
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    Verdict,
    WriteCode,
    run_learner,
    score,
    values_equal,
    warns,
)
from course.i18n import N_, _, is_chinese
from course.themes import GLOSSARY, GLOSSARY_ZH

lesson = Lesson("01_leaves", N_("Leaf tensors"))

KITCHEN = """\
flour = torch.tensor(2.0, requires_grad=True)   # bought at the market, we will tune it
water = torch.tensor(3.0)                       # bottled, used as is
salt = water * 0.01                             # mixed from bottled things only
dough = flour * 0.5 + water                     # semi-finished dish
bread = dough.sigmoid()                         # the finished bread
meat = nn.Linear(3, 2).weight                   # marinated meat: a layer's parameter
"""


@lesson.register
class Q1LeafOrNot(Predict):
    qid = "q1"
    title = N_("Leaf or not?")
    code = KITCHEN
    items = [  # one wrong value per item, so each names the one belief it reveals
        Item("flour", "`flour` was created by hand, not by an operation: a market ingredient.",
             "created_is_not_leaf", part="basics"),
        Item("dough", "`dough` came out of `*` and `+` on flour, which requires grad: a "
             "semi-finished dish with a grad_fn.", "output_can_be_leaf", part="basics"),
        Item("bread", "`bread` came out of sigmoid on dough: not a leaf.", "output_can_be_leaf",
             part="basics"),
        Item("meat", "A layer's weight is an nn.Parameter made by hand inside nn.Linear: a leaf "
             "that requires grad.", "created_is_not_leaf", part="basics"),
        Item("water", "`water` does not require grad, and every tensor that does not require "
             "grad is a leaf by convention.", "leaf_means_trainable", part="tricky"),
        Item("salt", "`salt` was computed, but only from water, which does not require grad: no "
             "history is recorded, so salt is a leaf too.", "no_grad_inputs_make_nonleaf",
             part="tricky"),
    ]

    def facts(self, ns):
        return {k: tf.is_leaf(ns[k]) for k in ("flour", "dough", "bread", "meat", "water", "salt")}


@lesson.register
class Q2FlagsAndRecipes(Predict):
    qid = "q2"
    title = N_("requires_grad and grad_fn")
    code = KITCHEN
    items = [
        Item("salt.requires_grad", "A result requires grad only if one of its own inputs "
             "does; salt = water * 0.01 has none, although it was computed after flour.",
             "requires_grad_spreads"),
        Item("bread.requires_grad", "`requires_grad` spreads downstream along recorded "
             "operations, from flour to dough to bread.", "requires_grad_not_inherited"),
        Item("flour.grad_fn is None", "A tensor made by hand has no recipe step: grad_fn is "
             "None even though it requires grad.", "grad_fn_on_leaf"),
        Item("dough.grad_fn is None", "`dough`'s grad_fn is the `+` step (AddBackward0) that "
             "made it.", "output_can_be_leaf"),
        Item("meat.grad_fn is None", "A parameter is a leaf: its grad_fn is None.",
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
cost = station.sum()                                     # the network's delivery cost
cost.backward()
"""


def _unless_none(key: str):
    """A wrong answer that is not None names ``key``: a gradient was expected where none is."""
    return lambda given, expected: key if expected is None and given is not None else None


@lesson.register
class Q3WhatGradHolds(Predict):
    qid = "q3"
    title = N_("What does .grad hold after backward()?")
    code = PARCELS
    items = [
        Item("w.grad", "With `cost = sum(parcel * w)`, d cost / d w_i = parcel_i, and it is "
             "stored on w because w is a leaf that requires grad (a sorting centre files its "
             "report). Give the values as a list.", part="values"),
        Item("parcel.grad", "Nobody audits an ordinary parcel: it does not require grad, so its "
             ".grad stays None.", _unless_none("constant_gets_grad"), part="none"),
        Item("station.grad", "`station`'s gradient was computed on the way back to w but not "
             "stored: a transit station files no report.", _unless_none("nonleaf_grad_stored"),
             part="none"),
    ]

    def facts(self, ns):
        return {k: tf.grad_values(ns[k.split(".")[0]]) for k in ("w.grad", "parcel.grad",
                                                                 "station.grad")}


@lesson.register
class Q4Warnings(Predict):
    qid = "q4"
    title = N_("Which reads of .grad warn?")
    code = PARCELS + """\
kept = parcel * w          # another transit station, with a monitor installed
kept.retain_grad()
kept.sum().backward()
"""
    items = [
        Item("w.grad", "Reading a leaf's .grad is always silent."),
        Item("parcel.grad", "`parcel` is a leaf (it does not require grad): reading its .grad "
             "is silent and gives None.", "leaf_means_trainable"),
        Item("station.grad", "Reading `.grad` of a non-leaf returns None and emits a UserWarning "
             "that points at retain_grad().", "nonleaf_grad_silent"),
        Item("kept.grad", "After `retain_grad()` the transit station keeps its report, and "
             "reading it is silent: the warning is only for a station without a monitor."),
    ]

    def facts(self, ns):
        return {k: warns(lambda k=k: ns[k.split(".")[0]].grad)
                for k in ("w.grad", "parcel.grad", "station.grad", "kept.grad")}


TWO_ROUTES = """\
a = torch.tensor(2.0, requires_grad=True)
b = torch.tensor(3.0, requires_grad=True)
c = a + b
d = a * b
e = c * d
e.backward()
"""

# Question 5 asks for the same graph at other inputs, so the lesson's worked
# example cannot simply be copied.
TWO_ROUTES_EXERCISE = TWO_ROUTES.replace("2.0", "1.5").replace("3.0", "-2.0")


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
    title = N_("The two-route graph by hand")
    code = TWO_ROUTES_EXERCISE
    items = [
        Item("a.grad", "`a` reaches e by two routes, through c and through d; "
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
    title = N_("The printed x.grad of a popular tutorial")
    code = MEAN
    items = [
        Item("x.grad", "z = (2*x_1 + 2*x_2) / 2, so dz/dx_i = 2/2 = 1 for each i: the 2 of "
             "`x * 2` times the 1/2 of the mean.", _mean_myth),
    ]

    def facts(self, ns):
        return {"x.grad": tf.grad_values(ns["x"])}


TWO_ROUTES_FORWARD = TWO_ROUTES.replace("e.backward()\n", "")


def _accumulate_nodes(fn, per_use: bool = False) -> int:
    """AccumulateGrad nodes behind ``fn``: distinct ones, or one per edge that reaches one."""
    seen, stack, count = set(), [fn], 0
    while stack:
        node = stack.pop()
        if node is None:
            continue
        if type(node).__name__ == "AccumulateGrad" and (per_use or id(node) not in seen):
            count += 1
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.extend(nxt for nxt, _edge in node.next_functions)
    return count


def _graph_facts() -> dict[str, Any]:
    import torch

    ns = {"torch": torch}
    exec(TWO_ROUTES_FORWARD, ns)  # noqa: S102 -- our own scenario
    e = ns["e"]
    return {"uses": _accumulate_nodes(e.grad_fn, per_use=True),
            "tensors": sum(1 for k in "abcde" if tf.is_tensor(ns[k]))}


def _grad_fn_myth(given: Any, expected: Any) -> str | None:
    return "output_can_be_leaf" if given is None else None


def _nodes_myth(given: Any, expected: Any) -> str | None:
    if not isinstance(given, int) or isinstance(given, bool):
        return None
    facts = _graph_facts()
    if given == facts["uses"]:  # a and b are each used twice: one node per use
        return "accumulate_per_use"
    if given in (0, facts["tensors"]):  # no such nodes, or one per tensor: a graph of tensors
        return "graph_is_all_leaves"
    return None


@lesson.register
class Q7RealGraph(Predict):
    qid = "q7"
    title = N_("What the graph is made of")
    code = TWO_ROUTES_FORWARD
    items = [
        Item("e.grad_fn", "`e` was made by `*`, so its grad_fn is a MulBackward0 node (the "
             "sorting rule stamped on its waybill). Give the class name as a string.",
             _grad_fn_myth),
        Item("accumulate_grad_nodes", "Each leaf that requires grad is reached through exactly "
             "one AccumulateGrad node, however many operations use it: the routes from both "
             "uses of a meet there.", _nodes_myth),
        Item("c.is_leaf", "`c` is an intermediate result: the graph is not 'all leaves'.",
             "graph_is_all_leaves"),
    ]

    def facts(self, ns):
        return {
            "e.grad_fn": tf.grad_fn_name(ns["e"]),
            "accumulate_grad_nodes": _accumulate_nodes(ns["e"].grad_fn),
            "c.is_leaf": tf.is_leaf(ns["c"]),
        }


# --------------------------------------------------------------------------- write code


def _reachable_leaves(t) -> list:
    """Leaves that backward() from ``t`` would fill .grad on, in discovery order."""
    if tf.is_leaf(t):
        return [t] if tf.requires_grad(t) else []
    out, seen, stack = [], set(), [tf._grad_fn(t)]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ == "AccumulateGrad":
            out.append(fn.variable)
        stack.extend(nxt for nxt, _edge in fn.next_functions)
    return out


def _typo(t) -> bool:
    """Whether ``t`` carries the plain attribute ``t.require_grad = True`` leaves behind."""
    try:
        return "require_grad" in tf._getattr(t, "__dict__", {})
    except Exception:  # noqa: BLE001 -- a learner's odd object: no evidence either way
        return False


def _role(theme: str, t) -> str:
    """The glossary's word for what ``t`` is, as a sentence says it: "a market ingredient"
    (the Chinese edition's word from ``GLOSSARY_ZH``, which takes no article)."""
    if is_chinese():
        return GLOSSARY_ZH[theme][tf.kind(t)]
    word = GLOSSARY[theme][tf.kind(t)]
    return ("an " if word[0] in "aeiou" else "a ") + word


def _joined(names: list[str]) -> str:
    """``a``, ``b`` and ``c``: a list of names in a sentence."""
    if len(names) < 2:
        return "".join(names)
    return _("{names} and {last}", names=_(", ").join(names[:-1]), last=names[-1])


def describe(name: str, t, made: dict | None = None, theme: str = "kitchen") -> str:
    """What torch reports about a tensor the learner made, in the words of ``theme``'s glossary:
    "your `glaze` has grad_fn `AddBackward0`: it was made from `flour`, so it is a semi-finished
    dish". ``made`` names the learner's other tensors, to say which ones it was made from."""
    if not tf.is_tensor(t):
        return _("your `{name}` is a {type}, not a tensor", name=name, type=type(t).__name__)
    role = _role(theme, t)
    fn = tf.grad_fn_name(t)
    if fn is None:
        return _("your `{name}` is a leaf with requires_grad={flag}: {role}", name=name,
                 flag=tf.requires_grad(t), role=role)
    sources = [f"`{other}`" for other, o in (made or {}).items()
               if other != name and any(leaf is o for leaf in _reachable_leaves(t))]
    if sources:
        return _("your `{name}` has grad_fn `{grad_fn}`: it was made from {sources}, so it is "
                 "{role}", name=name, grad_fn=fn, sources=_joined(sources), role=role)
    return _("your `{name}` has grad_fn `{grad_fn}`, so it is {role}", name=name, grad_fn=fn,
             role=role)


def is_parameter(name: str, t, made: dict | None = None, theme: str = "kitchen"):
    """A requirement's verdict on "``t`` is a leaf that requires grad", from what torch reports
    about it: True, or (False, what it is, the belief its making reveals)."""
    if tf.is_tensor(t) and tf.is_leaf(t) and tf.requires_grad(t):
        return True
    text = describe(name, t, made, theme)
    if not tf.is_tensor(t):
        return False, text
    if _typo(t):
        return False, _("{description}; `{name}.require_grad = True` only set an unused "
                        "attribute", description=text, name=name), "require_grad_typo"
    if tf.grad_fn_name(t) == "CloneBackward0":
        return False, _("{description}: clone() is recorded like any operation",
                        description=text), "clone_cuts_history"
    if not tf.is_leaf(t) and tf.retains_grad(t):
        return False, _("{description} with a monitor: it keeps that report, but the leaf it "
                        "was made from is the one to tune", description=text)
    if not tf.is_leaf(t):  # made by an operation on a tensor that requires grad
        return False, _("{description}. Create it directly, with `requires_grad=True`",
                        description=text), "output_can_be_leaf"
    return False, _("{description}. Create it with `requires_grad=True`", description=text)


def _is_constant(name: str, t, made: dict):
    """A requirement's verdict on "``t`` is a leaf that does not require grad"."""
    if tf.is_tensor(t) and tf.is_leaf(t) and not tf.requires_grad(t):
        return True
    text = describe(name, t, made)
    if tf.is_tensor(t) and tf.is_leaf(t):  # given requires_grad=True, as if a leaf needed it
        return False, _("{description}; a bottled sauce is used as is, and it is a leaf "
                        "anyway", description=text), "leaf_means_trainable"
    return False, _("{description}. Make it from bottled things only", description=text)


def _kitchen_requirements() -> list[Requirement]:
    def made(run) -> dict:
        if not isinstance(run.result, dict):
            raise TypeError(_("return a dict of tensors, not {type}",
                              type=type(run.result).__name__))
        return run.result

    def get(run, key: str):
        if key not in made(run):
            raise KeyError(_("your dict has no key {key!r}", key=key))
        return made(run)[key]

    def dough(run):
        t, f = get(run, "dough"), get(run, "flour")
        if tf.is_tensor(t) and not tf.is_leaf(t) and any(x is f for x in _reachable_leaves(t)):
            return True
        text = describe("dough", t, made(run))
        if tf.is_tensor(t) and tf.is_leaf(t):
            return False, _("{description}: no recorded recipe step made it from `flour`",
                            description=text)
        return False, _("{description}, but its recipe does not lead back to your `flour`",
                        description=text)

    def computed(run):
        t, s = get(run, "glaze"), get(run, "sauce")
        ok = tf.is_tensor(t) and tf.is_tensor(s) and t is not s and not tf.shares_storage(t, s)
        return ok, _("your `glaze` is `sauce` itself (the same storage): compute a new tensor "
                     "from it, e.g. `sauce * 2`")

    return [
        Requirement("`flour` is a market ingredient: a leaf that requires grad",
                    lambda run: is_parameter("flour", get(run, "flour"), made(run))),
        Requirement("`sauce` is bottled: a leaf that does not require grad",
                    lambda run: _is_constant("sauce", get(run, "sauce"), made(run))),
        Requirement("`dough` is a semi-finished dish made from `flour`", dough),
        Requirement("`glaze`, computed from `sauce` only, is a leaf that does not require grad",
                    lambda run: _is_constant("glaze", get(run, "glaze"), made(run))),
        Requirement("`glaze` is a new tensor, not `sauce` itself", computed),
    ]


@lesson.register
class Q8BuildKitchen(WriteCode):
    qid = "q8"
    title = N_("Stock the kitchen")
    function_name = "stock_kitchen"

    def grade_code(self, fn, part, variant):
        return self.run_and_require(fn, _kitchen_requirements(), part)


GRAPHS = {
    "two routes": """\
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


def _centres_requirement(name: str, out, expected: list) -> Requirement:
    """The learner's list for graph ``name`` holds exactly the leaves ``expected``."""

    def test(run):
        got = run.result
        if not isinstance(got, list | tuple):
            return False, _("you returned {type}: return a list of tensors",
                            type=type(got).__name__)
        others = [g for g in got if not tf.is_tensor(g)]
        if others:
            return False, _("your list holds {type} objects: return each AccumulateGrad node's "
                            "`.variable`, the leaf tensor itself", type=type(others[0]).__name__)
        if len({id(g) for g in got}) < len(got):
            return False, _("your list names the same sorting centre more than once: a leaf "
                            "has one AccumulateGrad node, however many routes reach it; visit "
                            "each node once"), "accumulate_per_use"
        extra = [g for g in got if not any(g is e for e in expected)]
        missing = len([e for e in expected if not any(g is e for g in got)])
        if any(tf.is_leaf(g) and not tf.requires_grad(g) for g in extra):
            return False, _("your list holds a tensor that does not require grad: an ordinary "
                            "parcel gets no report, so it is nobody's sorting centre"), \
                "constant_gets_grad"
        if extra:
            return False, _("your list holds {count} tensor(s) that are not leaves backward() "
                            "fills: a transit station is not a sorting centre", count=len(extra))
        if missing and tf.is_leaf(out):
            return False, _("`out` is itself a leaf that requires grad: it is its own sorting "
                            "centre, `[out]`")
        if missing:
            return False, _("you found {found} of the {count} sorting centres: follow every "
                            "entry of `next_functions`, not only the first", found=len(got),
                            count=len(expected))
        return True

    return Requirement(_("graph `{name}`: `sorting_centres(out)` finds its {count} sorting "
                         "centre(s)", name=name, count=len(expected)), test)


@lesson.register
class Q9FindSortingCentres(WriteCode):
    qid = "q9"
    title = N_("Walk the real graph")
    function_name = "sorting_centres"

    def grade_code(self, fn, part, variant):
        import torch

        graphs = dict(GRAPHS, **(HIDDEN_GRAPHS if variant == "hidden" else {}))
        verdicts = []
        for name, code in graphs.items():
            torch.manual_seed(0)
            ns = {"torch": torch, "nn": torch.nn}
            exec(compile(code, f"<graph {name}>", "exec"), ns)  # noqa: S102 -- our own graphs
            out = ns["out"]

            def run(out=out, name=name):
                try:
                    return run_learner(fn, out)
                except LearnerCodeError as exc:  # say on which graph
                    raise LearnerCodeError(_("{error}, on graph `{name}`", error=exc.summary,
                                             name=name), exc.exc_type) from None

            verdicts.append(score(self.qid, [_centres_requirement(name, out,
                                                                  _reachable_leaves(out))], run))
        return Verdict.merge(self.qid, verdicts)


def _reference_grad(values: list[float], loss) -> list:
    """The gradient torch computes for a fresh sorting centre with ``values``."""
    import torch

    ref = torch.tensor(values, requires_grad=True)
    loss(ref).backward()
    return tf.grad_values(ref)


def _copy_error(fn):
    """A crash whose cause is in the source: the copy line cut the centre off its history."""

    def choose(exc: LearnerCodeError) -> str | None:
        if "does not require grad" not in exc.summary:
            return None
        if ".detach()" in fn.source or ".data" in fn.source:
            return "detach_keeps_grad"
        if "torch.tensor(w" in fn.source:
            return "detach_keeps_grad"
        if "no_grad" in fn.source:
            return "no_grad_result_has_history"
        return None

    return choose


CENTRE = [1.0, 2.0, 3.0]  # the sorting centre of the buggy program in the notebook


@lesson.register
class Q10RebuiltCentre(WriteCode):
    qid = "q10"
    title = N_("Find the bug: the sorting centre that became a transit station")
    function_name = "tune_centre"
    starter = """\
def tune_centre():
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = w * 1.0                      # "work on a copy, to be safe"
    loss = (w ** 2).sum()
    loss.backward()
    return w
"""

    def grade_code(self, fn, part, variant):
        want = _reference_grad(CENTRE, lambda w: (w ** 2).sum())  # the intended program

        def grad(run):
            t = run.result
            g = tf.grad_values(t) if tf.is_tensor(t) else None
            same = tf.is_tensor(t) and values_equal(tf._tolist(t), CENTRE)
            return (same and g is not None and values_equal(g, want),
                    _("torch's gradient of sum(w ** 2) for w = {centre} is 2*w = {want}; your "
                      "tensor holds {values} with .grad {grad}", centre=CENTRE, want=want,
                      values=tf._tolist(t) if tf.is_tensor(t) else t, grad=g))

        def silent(run):
            if not run.warnings:
                return True
            said = run.warnings[0]
            myth = ("torch_tensor_silent" if "torch.tensor(sourceTensor)" in said
                    or "copy construct" in said else
                    "nonleaf_grad_silent" if "is not a leaf Tensor" in said else None)
            if len(said) > 160:
                said = said[:160] + "…"
            return False, _("your function warned: `{warning}`",
                            warning=said.replace("`", "'")), myth

        return self.run_and_require(fn, [
            Requirement("the returned `w` is a sorting centre: a leaf that requires grad",
                        lambda run: is_parameter("w", run.result, theme="logistics")),
            Requirement("its .grad holds torch's d loss / d w = 2*w", grad),
            Requirement("no warning is emitted", silent),
        ], part, on_error=_copy_error(fn))


PARCEL_WEIGHTS = [1.0, 2.0, 3.0]  # the data of the buggy program in the notebook


@lesson.register
class Q11Typo(WriteCode):
    qid = "q11"
    title = N_("Find the bug: require_grad")
    function_name = "weigh_parcels"
    starter = """\
def weigh_parcels():
    w = torch.zeros(3)
    w.require_grad = True
    weights = torch.tensor([1.0, 2.0, 3.0])
    (w * weights).sum().backward()
    return w
"""

    def grade_code(self, fn, part, variant):
        import torch

        want = _reference_grad([0.0] * 3, lambda w: (w * torch.tensor(PARCEL_WEIGHTS)).sum())

        def grad(run):
            g = tf.grad_values(run.result) if tf.is_tensor(run.result) else None
            return g is not None and values_equal(g, want), \
                _("torch's w.grad for this report is the parcel weights {want}; yours is {grad}",
                  want=want, grad=g)

        return self.run_and_require(fn, [
            Requirement("`w` is a sorting centre: a leaf that requires grad",
                        lambda run: is_parameter("w", run.result, theme="logistics")),
            Requirement("after backward, `w.grad` holds the parcel weights", grad),
        ], part)
