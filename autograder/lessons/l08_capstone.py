"""Lesson 08, capstone: the questions of ``source/08_capstone/08_capstone.ipynb``.

The notebook hands the learner a small training script (a delivery-time regression on fixed
synthetic data) with eight planted gradient bugs from lessons 01-07, split into five
functions: ``make_model``, ``forward``, ``loss_fn``, ``train`` and ``dead_centres``.

Each function is graded by behaviour, on its own: the oracle defines the learner's function
where the *other* four functions are the correct ones (``REFERENCE``, the very text of the
notebook's solutions), so every bug fixed earns its own points whatever state the other
functions are in. Expected values (gradients, parameters after training, the loss threshold)
come from running ``REFERENCE`` with live torch in the oracle, never from literals. Scoring,
crash diagnosis and the findings' wording are the shared ones (:func:`autograder.questions.score`).

A misconception is named only from evidence: the value a learner predicted, what torch reports
about what their function made (a ``grad_fn``, a frozen parameter, a plain module attribute),
a run equal to that of a known wrong program (the colleague's), or which tool their code used
(``.data``, ``detach()``, ``no_grad()``).
"""

from __future__ import annotations

import ast
import math
import warnings
from collections.abc import Callable
from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName, LearnerFunction
from autograder.questions import (
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    Verdict,
    WriteCode,
    _short_tb,
    define_learner,
    learner_namespace,
    score,
    show,
    values_equal,
)
from course.i18n import N_, _, is_chinese

lesson = Lesson("08_capstone", N_("Capstone: a broken training loop"),
                preload=("torch._dynamo",))  # its checks train with optimizers


# --------------------------------------------------------------------------- the script

#: Given (not a bug): the data set, from a fixed random seed.
GIVEN = '''\
def make_data(seed=0, n=64):
    """Each parcel's (distance, load) -> delivery time (always > 0), from a fixed random seed."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 2, generator=g)
    y = 1.5 + 0.5 * torch.sin(2 * X[:, :1]) + 0.3 * X[:, 1:] ** 2
    return X, y
'''

BUGGY_MAKE_MODEL = '''\
def make_model(seed=0):
    """The delivery network: two layers of sorting centres, a direct route and 16 gains."""
    torch.manual_seed(seed)
    model = nn.Module()
    model.hidden = nn.Linear(2, 16)                          # first layer of sorting centres
    model.out = nn.Linear(16, 1)                             # second layer
    model.shortcut = nn.Linear(2, 1)                         # the direct route
    model.gain = torch.randn(16, requires_grad=True) * 0.5   # one dial per hidden station
    model.hidden.requires_grad_(False)                       # warm-up: unfreeze it later
    return model
'''

FIXED_MAKE_MODEL = '''\
def make_model(seed=0):
    """The delivery network: two layers of sorting centres, a direct route and 16 gains."""
    torch.manual_seed(seed)
    model = nn.Module()
    model.hidden = nn.Linear(2, 16)
    model.out = nn.Linear(16, 1)
    model.shortcut = nn.Linear(2, 1)
    model.gain = nn.Parameter(torch.randn(16) * 0.5)         # a registered leaf
    return model                                             # nothing left frozen
'''

BUGGY_FORWARD = '''\
def forward(model, x):
    """Predicted delivery times (n, 1) and the hidden stations' activity (n, 16)."""
    with torch.no_grad():                      # the direct route is a fixed baseline: save memory
        base = model.shortcut(x)
    h = torch.tanh(model.hidden(x))
    h *= model.gain                            # in place, to save memory
    pred = model.out(h) + base
    pred.data.clamp_(min=0)                    # a delivery never takes negative time
    return pred, h
'''

FIXED_FORWARD = '''\
def forward(model, x):
    """Predicted delivery times (n, 1) and the hidden stations' activity (n, 16)."""
    base = model.shortcut(x)                   # recorded: the direct route trains
    h = torch.tanh(model.hidden(x)) * model.gain   # out of place: tanh's output stays intact
    pred = (model.out(h) + base).clamp(min=0)  # a recorded clamp: its gradient is right
    return pred, h
'''

BUGGY_LOSS = '''\
def loss_fn(pred, target, features):
    """Squared error, plus a small penalty that keeps the hidden stations calm."""
    fit = ((pred - target) ** 2).mean()
    calm = (features.detach() ** 2).mean()     # only a regulariser: keep it out of the graph
    return fit + 0.01 * calm
'''

FIXED_LOSS = '''\
def loss_fn(pred, target, features):
    """Squared error, plus a small penalty that keeps the hidden stations calm."""
    fit = ((pred - target) ** 2).mean()
    calm = (features ** 2).mean()              # the penalty must reach the hidden layer
    return fit + 0.01 * calm
'''

BUGGY_TRAIN = '''\
def train(model, X, y, steps=60, lr=0.2):
    """Plain SGD on the whole batch; returns the loss of every step, as floats."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        pred, features = forward(model, X)
        loss = loss_fn(pred, y, features)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
'''

FIXED_TRAIN = '''\
def train(model, X, y, steps=60, lr=0.2):
    """Plain SGD on the whole batch; returns the loss of every step, as floats."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()                        # clear last step's reports first
        pred, features = forward(model, X)
        loss = loss_fn(pred, y, features)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses
'''

BUGGY_ALARM = '''\
def dead_centres(model, loss):
    """Names of the trainable parameters to which `loss` sends no gradient, or only zeros."""
    return [name for name, p in model.named_parameters() if p.grad is None]
'''

FIXED_ALARM = '''\
def dead_centres(model, loss):
    """Names of the trainable parameters to which `loss` sends no gradient, or only zeros."""
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True,
                                retain_graph=True)      # .grad untouched, graph kept
    return [name for (name, _), g in zip(named, grads) if g is None or not g.any()]
'''

#: The correct program: the notebook's solutions, verbatim.
REFERENCE = "\n\n".join([FIXED_MAKE_MODEL, FIXED_FORWARD, FIXED_LOSS, FIXED_TRAIN, FIXED_ALARM])

#: The parameters of the correct model, in named_parameters() order.
PARAMS = ["hidden.weight", "hidden.bias", "out.weight", "out.bias", "shortcut.weight",
          "shortcut.bias", "gain"]
LAYERS = PARAMS[:-1]

# Problem sizes: (make_data/make_model argument, n, steps, lr). Hidden tests use other data.
VARIANTS = {"visible": (0, 64, 60, 0.2), "hidden": (1, 48, 60, 0.2)}


def _variant(variant: str) -> tuple[int, int, int, float]:
    return VARIANTS["hidden" if variant == "hidden" else "visible"]


def _where(variant: str) -> str:
    """How a requirement says which problem it was checked on (the hidden tests' is another):
    a parenthesis at the end of the requirement's text (its ``{where}``)."""
    if variant != "hidden":
        return ""
    seed, n, _steps, _lr = _variant(variant)
    return _(" (on {n} other parcels, network `make_model({seed})`)", n=n, seed=seed)


def _sep(kind: str = "list") -> str:
    """What joins the names of a list (``"list"``) or separate findings (``"findings"``) in
    the current language."""
    if is_chinese():
        return "、" if kind == "list" else "；"
    return ", " if kind == "list" else "; "


# --------------------------------------------------------------------------- running pieces


def reference_namespace() -> dict[str, Any]:
    """torch/nn/F/math, ``make_data`` and the correct script, run with live torch."""
    ns = learner_namespace()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(GIVEN, "<make_data>", "exec"), ns)  # noqa: S102
        exec(compile(REFERENCE, "<the correct script>", "exec"), ns)  # noqa: S102
    return ns


class Unusable(Exception):
    """What the learner's function returned cannot be checked; the message says why."""


def run_piece(fn: LearnerFunction, call: Callable[[dict, dict], dict]) -> dict:
    """The facts ``call(ns, ref)`` measures, with the warnings torch emitted meanwhile.

    The learner's function is defined as every lesson defines it (:func:`define_learner`),
    with the correct other pieces of the script beside it: ``ns`` holds it under its name and
    the correct other four; ``ref`` is the correct script alone. An exception raised inside the
    learner's function is a :class:`LearnerCodeError` (scored and diagnosed by the shared
    code); a result that cannot be measured gives the fact ``unusable``.
    """
    ns = reference_namespace()
    learner = define_learner(fn, extra=ns)

    def guarded(*args, **kwargs):
        try:
            return learner(*args, **kwargs)
        except NameError as exc:
            raise LearnerCodeError(
                _("{error}. The checker runs your function on its own, with only torch, nn, F, "
                  "math, make_data and the other functions of the script available.",
                  error=_quoted(f"NameError: {exc}")),
                "NameError") from None
        except Exception as exc:
            raise LearnerCodeError(_short_tb(exc), type(exc).__name__) from None

    ns[fn.name] = guarded
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            facts = call(ns, reference_namespace())
        except LearnerCodeError:
            raise
        except Unusable as exc:
            facts = {"unusable": str(exc)}
        except Exception as exc:  # what the function made broke the checker's measurement
            error = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
            facts = {"unusable": _("the checker could not use what your `{name}` made "
                                   "({error})", name=fn.name, error=_quoted(error))}
    facts["warnings"] = [f"{w.category.__name__}: {str(w.message).split('. ')[0]}"
                         for w in caught]
    facts["source"] = fn.source
    return facts


def need(text: str, test: Callable[[dict], Any], part: str = "main") -> Requirement:
    """A requirement on a piece's facts; an unusable result fails it and says why."""
    def guarded(facts: dict):
        if "unusable" in facts:
            return False, facts["unusable"]
        return test(facts)

    # ``text`` is already in the learner's language: every caller passes a ``_()`` call
    return Requirement(text=text, test=guarded, part=part)


def uses(source: str, *names: str) -> bool:
    """Whether the learner's code uses any of these names (``no_grad``) or, written with a
    leading dot, attributes (``.data``, ``.detach``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    seen = {"." + n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    seen |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return any(name in seen or "." + name in seen for name in names)


GRAD_OFF = ("no_grad", "inference_mode", "set_grad_enabled")


class Piece(WriteCode):
    """A find-the-bug question about one function of the script.

    ``measure(ns, ref, variant, parts)`` runs the learner's function (``ns[function_name]``)
    and returns the facts of ``parts``; ``requirements(variant)`` judges them. Each group of
    parts in ``runs`` is measured by a run of its own (default: all in one), so a crash in one
    scenario fails only the parts that scenario measures.
    """

    runs: list[list[str]] | None = None

    def measure(self, ns: dict, ref: dict, variant: str, parts: list[str]) -> dict:
        raise NotImplementedError

    def requirements(self, variant: str) -> list[Requirement]:
        raise NotImplementedError

    def grade_code(self, fn: LearnerFunction, part: str | None, variant: str) -> Verdict:
        reqs = self.requirements(variant)
        return Verdict.merge(self.qid, [
            score(self.qid, [r for r in reqs if r.part in group],
                  lambda group=group: run_piece(
                      fn, lambda ns, ref: self.measure(ns, ref, variant, group)))
            for group in self.runs or [self.parts()]])


def _named(model) -> dict:
    return dict(model.named_parameters())


def _grads(loss, tensors) -> list:
    """Gradients of ``loss`` for ``tensors`` as lists (None where unused); .grad untouched."""
    import torch

    gs = torch.autograd.grad(loss, tensors, allow_unused=True, retain_graph=True)
    return [None if g is None else tf._tolist(g) for g in gs]


def _zero(values) -> bool:
    if values is None:
        return True
    if isinstance(values, list):
        return all(_zero(v) for v in values)
    return values == 0


def _fmt(values, n: int = 3) -> str:
    """A short rendering of a (nested) list of floats."""
    if values is None:
        return "None"
    flat: list = []

    def walk(v):
        if isinstance(v, list):
            for x in v:
                walk(x)
        else:
            flat.append(v)

    walk(values)
    head = ", ".join(f"{x:.4g}" for x in flat[:n])
    return f"[{head}{', ...' if len(flat) > n else ''}]"


def _names(keys) -> str:
    return _sep().join(f"`{k}`" for k in keys)


def _quoted(text: str) -> str:
    """What torch or Python said, as code (it stays English in every language)."""
    return "`" + str(text).replace("`", "'") + "`"


def _raised(error: str) -> str:
    """A backward that raised ``RuntimeError`` with torch's message ``error``."""
    return _("backward raised `RuntimeError`: {error}", error=_quoted(error))


def _when(value: Any, key: str, tol: float = 1e-5):
    """An item's myth: ``key`` when the learner gave ``value``, else no label."""
    return lambda given, expected: key if values_equal(given, value, tol) else None


# --------------------------------------------------------------------------- predict: q1

GAINS = """\
a = torch.randn(4, requires_grad=True) * 0.5      # the colleague's gain
b = (torch.randn(4) * 0.5).requires_grad_()       # scale first, then switch the audit on
c = nn.Parameter(torch.randn(4) * 0.5)            # wrapped as a parameter
net = nn.Module()
net.a, net.b, net.c = a, b, c
registered = [name for name, _ in net.named_parameters()]
"""


def _registered_myth(given: Any, expected: Any) -> str | None:
    """Listing `a` or `b` as registered: a tensor stored on a module taken for a parameter."""
    if isinstance(given, list | tuple | set) and {"a", "b"} & {str(g) for g in given}:
        return "tensor_attribute_is_parameter"
    return None


@lesson.register
class Q1Gains(Predict):
    qid = "q1"
    title = N_("Three ways to make a gain")
    code = GAINS
    items = [
        Item("a.is_leaf", "`a` came out of `*` on a tensor that requires grad: a transit "
             "station (grad_fn `MulBackward0`), not a sorting centre.", "output_can_be_leaf",
             part="leaves"),
        Item("b.is_leaf", "the product was computed from tensors that do not require grad, so "
             "it recorded no history and is a leaf; `requires_grad_()` then switches the audit "
             "on for that leaf. Scaling *before* switching the audit on is fine.",
             "no_grad_inputs_make_nonleaf", part="leaves"),
        Item("c.is_leaf", "`nn.Parameter` wraps the values as a new leaf that requires grad, "
             "whatever made them.", "no_grad_inputs_make_nonleaf", part="leaves"),
        Item("registered", "a module registers only `nn.Parameter` attributes (and "
             "sub-modules); plain tensors, even leaves that require grad, are not in "
             "`named_parameters()`, so an optimizer built from `model.parameters()` never sees "
             "them. Give the list of names.", _registered_myth, part="registered"),
    ]

    def facts(self, ns):
        return {
            "a.is_leaf": tf.is_leaf(ns["a"]),
            "b.is_leaf": tf.is_leaf(ns["b"]),
            "c.is_leaf": tf.is_leaf(ns["c"]),
            "registered": list(ns["registered"]),
        }


# --------------------------------------------------------------------------- predict: q2

W0, XS, LR = [1.0, -2.0], [3.0, 0.5], 0.1
PILE_UP = f"""\
w = torch.tensor({W0}, requires_grad=True)
x = torch.tensor({XS})
opt = torch.optim.SGD([w], lr={LR})
for step in range(2):                  # no zero_grad(): the reports pile up
    loss = (w * x).sum()
    loss.backward()
    opt.step()
grad_after_two = w.grad.tolist()
w_after_two = w.tolist()
opt.zero_grad()
grad_after_zero = w.grad
"""
#: What a learner who thinks backward() overwrites .grad predicts: one report x per step.
OVERWRITTEN = {"grad": XS, "w": [w - 2 * LR * x for w, x in zip(W0, XS, strict=True)]}


def _zeros_myth(given: Any, expected: Any) -> str | None:
    zeros = given == 0 if isinstance(given, int | float) and not isinstance(given, bool) else (
        isinstance(given, list | tuple) and len(given) > 0 and _zero(list(given)))
    return "zero_grad_fills_zeros" if expected is None and zeros else None


@lesson.register
class Q2PileUp(Predict):
    qid = "q2"
    title = N_("Reports that pile up: w after two steps")
    code = PILE_UP
    items = [
        Item("grad_after_two", "d loss / d w = x at every step, and `backward()` adds into "
             "`.grad`: after two steps without `zero_grad()` it holds 2 * x.",
             _when(OVERWRITTEN["grad"], "grad_accumulates_not")),
        Item("w_after_two", "step 1 moves w by -lr * x, step 2 by -lr * (x + x), because "
             "`.grad` still held step 1's report: w - 3 * lr * x in all.",
             _when(OVERWRITTEN["w"], "grad_accumulates_not")),
        Item("grad_after_zero", "since torch 2.0, `zero_grad()` sets `.grad` to `None` "
             "(`set_to_none=True`): a `grad is None` check right after it sees `None` "
             "everywhere.", _zeros_myth),
    ]

    def facts(self, ns):
        g = ns["grad_after_zero"]
        return {
            "grad_after_two": list(ns["grad_after_two"]),
            "w_after_two": list(ns["w_after_two"]),
            "grad_after_zero": None if g is None else tf._tolist(g),
        }


# --------------------------------------------------------------------------- predict: q3

EDITS = """\
x = torch.tensor([0.5, -1.0], requires_grad=True)
y = torch.tensor([2.0, 3.0], requires_grad=True)

z = x * y
z.add_(1)                              # in place on a product
z.sum().backward()
grad_after_add = x.grad.tolist()

x.grad = None
s = torch.sigmoid(x)                   # sigmoid keeps its output for backward
s.mul_(2)                              # in place on that output
try:
    s.sum().backward()
    inplace_error = None
except RuntimeError as exc:
    inplace_error = exc

x.grad = None
s = torch.sigmoid(x)
s.data.mul_(2)                         # the same edit, through .data
s.sum().backward()
grad_after_data = x.grad.tolist()
"""


def _sigmoid_slope(v: float, scale: float = 1.0) -> float:
    s = 1 / (1 + math.exp(-v))
    return scale * s * (1 - s)


def _add_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, ExceptionName):
        return "inplace_always_fatal"
    if given is None:
        return "inplace_grad_none"
    return None


def _data_myth(given: Any, expected: Any) -> str | None:
    """The true slope (or the slope of 2 * sigmoid, as if the edit were recorded): thinks the
    `.data` edit leaves autograd right. None: thinks a troublesome edit drops the gradient."""
    if given is None:
        return "inplace_grad_none"
    for scale in (1.0, 2.0):
        if values_equal(given, [_sigmoid_slope(v, scale) for v in (0.5, -1.0)], 1e-3):
            return "data_is_safe"
    return None


@lesson.register
class Q3Edits(Predict):
    qid = "q3"
    title = N_("Raise, silent, or silently wrong?")
    code = EDITS
    items = [
        Item("grad_after_add", "`mul` saved `x` and `y`, not `z`: adding 1 to `z` in place "
             "overwrites nothing backward needs, so the gradient is d(x*y + 1)/dx = y. Give "
             "the list.", _add_myth, part="add"),
        Item("inplace_error", "`sigmoid` saved its output `s` for backward (ds/dx = s * (1 - "
             "s)); `mul_` overwrote it and bumped its version, so backward raises "
             "`RuntimeError` ('modified by an inplace operation'). Answer `RuntimeError` or "
             "`None`.", lambda given, expected: "inplace_never_checked" if given is None
             else None, part="saved"),
        Item("grad_after_data", "the `.data` edit doubled the saved output without bumping "
             "the version, so backward used s' = 2 * sigmoid(x) in s' * (1 - s'): no error, "
             "and a silently wrong gradient (the true one is sigmoid(x) * (1 - sigmoid(x))). "
             "Give the list (you may compute it with `math.exp`).", _data_myth, part="saved",
             tol=1e-3),
    ]

    def facts(self, ns):
        err = ns["inplace_error"]
        return {
            "grad_after_add": list(ns["grad_after_add"]),
            "inplace_error": None if err is None else ExceptionName(type(err).__name__),
            "grad_after_data": list(ns["grad_after_data"]),
        }


# --------------------------------------------------------------------------- predict: q4

CLINIC = """\
from course.doctor import diagnose

torch.manual_seed(0)
kitchen = nn.Module()
kitchen.chop = nn.Linear(3, 4)
kitchen.season = nn.Linear(4, 1)
kitchen.garnish = nn.Linear(3, 1)
kitchen.dip = nn.Linear(3, 1)
kitchen.oven = nn.Linear(3, 1)
kitchen.spice = nn.Parameter(torch.ones(1))
kitchen.sauce = nn.Linear(3, 1)
kitchen.sauce.requires_grad_(False)            # bottled: nobody adjusts it
batch = torch.randn(8, 3)

def tasting():
    dish = kitchen.season(torch.relu(kitchen.chop(batch)))
    side = kitchen.garnish(batch).detach()     # vacuum-packed
    with torch.no_grad():
        dip = kitchen.dip(batch)               # cooked with the recipe notebook closed
    salt = kitchen.spice * 0.0                 # "no salt today"
    return (dish + side + dip + salt + kitchen.sauce(batch)).pow(2).mean()

report = diagnose(kitchen, step=tasting, theme="kitchen")
status = {row.name: row.status for row in report.per_parameter}
"""

#: For each parameter, the wrong statuses that carry a belief's signature.
_STATUS_MYTHS = {
    "spice": {"none": "zero_gradient_is_none", "unused": "zero_gradient_is_none",
              "cut": "zero_gradient_is_none", "ok": "grad_none_check_enough"},
    "garnish.weight": {"ok": "detach_in_loss_harmless", "no_grad": "detach_no_grad_confused"},
    "dip.weight": {"ok": "no_grad_branch_counts", "detached": "detach_no_grad_confused",
                   "frozen": "no_grad_flips_flag"},
    "sauce.weight": {"ok": "constant_gets_grad"},
}


def _status_myth(key: str):
    return lambda given, expected: _STATUS_MYTHS.get(key, {}).get(given) \
        if isinstance(given, str) else None


@lesson.register
class Q4Doctor(Predict):
    qid = "q4"
    title = N_("What the doctor says")
    code = CLINIC
    items = [
        Item("chop.weight", "chop feeds the dish through `relu` and season: a healthy, non-zero "
             "gradient.", _status_myth("chop.weight"), part="quiet"),
        Item("garnish.weight", "garnish's value reaches the loss only through `detach()`: the "
             "doctor reports it as `detached`.", _status_myth("garnish.weight"), part="cuts"),
        Item("dip.weight", "dip was cooked inside `no_grad()`: nothing was recorded, status "
             "`no_grad`.", _status_myth("dip.weight"), part="cuts"),
        Item("oven.weight", "oven is registered but never used in `tasting()`: status "
             "`unused`.", _status_myth("oven.weight"), part="cuts"),
        Item("spice", "spice is on the route but multiplied by 0: its gradient exists and is "
             "exactly 0, status `zero` (a `grad is None` check misses it).",
             _status_myth("spice"), part="quiet"),
        Item("sauce.weight", "sauce does not require grad: the doctor lists it as `frozen`, "
             "which it does not count as a problem (freezing is often deliberate).",
             _status_myth("sauce.weight"), part="quiet"),
    ]

    def facts(self, ns):
        return {item.key: ns["status"][item.key] for item in self.items}


# --------------------------------------------------------------------------- q5: make_model


@lesson.register
class Q5MakeModel(Piece):
    qid = "q5"
    title = N_("Find the bug: the network (make_model)")
    function_name = "make_model"
    part_names = ["gain", "frozen"]
    starter = BUGGY_MAKE_MODEL

    def measure(self, ns, ref, variant, parts):
        import torch

        seed, n, _steps, _lr = _variant(variant)
        X, y = ref["make_data"](seed, n)
        model = ns["make_model"](seed)
        if not isinstance(model, torch.nn.Module):
            raise Unusable(_("`make_model` returned {kind}, not an `nn.Module`",
                             kind=type(model).__name__))
        named = _named(model)
        gain = getattr(model, "gain", None)
        facts: dict[str, Any] = {
            "names": list(named),
            "requires": {k: tf.requires_grad(p) for k, p in named.items()},
            # `module.requires_grad = ...` sets a plain attribute: its signature
            "flags": [f"model.{name}" if name else "model" for name, m in model.named_modules()
                      if "requires_grad" in vars(m)],
            "ref_gain": tf._tolist(ref["make_model"](seed).gain),
            "gain": None,
        }
        if tf.is_tensor(gain):
            facts["gain"] = {"kind": tf.kind(gain), "grad_fn": tf.grad_fn_name(gain),
                             "shape": list(gain.shape), "values": tf._tolist(gain)}
        ref["loss_fn"](*ref["forward"](model, X), y)  # the correct script runs on it
        return facts

    def requirements(self, variant):
        where = _where(variant)

        def registered(f):
            g = f["gain"]
            if "gain" in f["names"]:
                return True
            if g is None:
                return False, _("your `model` has no tensor `gain` at all")
            return (False, _("`model.named_parameters()` lists {names} and not `gain`: your "
                             "`gain` is a plain tensor stored on the module, so no optimizer "
                             "built from `model.parameters()` ever sees it (wrap it: "
                             "`nn.Parameter(...)`)", names=_names(f["names"])),
                    "tensor_attribute_is_parameter")

        def centre(f):
            g = f["gain"]
            if g is None:
                return False, _("your `model` has no tensor `gain`")
            if g["kind"] == "intermediate":
                return (False, _("your `gain` has grad_fn `{grad_fn}`: it was made by an "
                                 "operation on a tensor that requires grad, so it is a transit "
                                 "station, not a sorting centre", grad_fn=g["grad_fn"]),
                        "output_can_be_leaf")
            if g["kind"] == "constant":
                return False, _("your `gain` is a leaf that does not require grad (an ordinary "
                                "parcel): nobody audits it")
            return g["shape"] == [16], _("your `gain` has shape {shape}, not [16]",
                                         shape=g["shape"])

        def values(f):
            g = f["gain"]
            if g is None:
                return False, _("your `model` has no tensor `gain`")
            return values_equal(g["values"], f["ref_gain"], 1e-6), _(
                "your `gain` starts at {mine}, the correct script's at {want}: keep "
                "`torch.randn(16) * 0.5`, drawn after the three layers",
                mine=_fmt(g["values"]), want=_fmt(f["ref_gain"]))

        def frozen_detail(f, keys):
            names, one = _names(keys), len(keys) == 1
            if f["flags"]:
                flag = f["flags"][0]
                return ((_("`{flag}.requires_grad = ...` only set a plain Python attribute on "
                           "the module: {names} has `requires_grad=False`", flag=flag,
                           names=names) if one else
                         _("`{flag}.requires_grad = ...` only set a plain Python attribute on "
                           "the module: {names} have `requires_grad=False`", flag=flag,
                           names=names)), "module_requires_grad_attr")
            return ((_("{names} has `requires_grad=False`: the warm-up freeze was never undone, "
                       "so no report reaches it and `step()` skips it", names=names) if one else
                     _("{names} have `requires_grad=False`: the warm-up freeze was never "
                       "undone, so no report reaches them and `step()` skips them",
                       names=names)), "warmup_freeze_forgotten")

        def trains(f):
            missing = [k for k in LAYERS if k not in f["names"]]
            if missing:
                return False, _("the layers' parameters {names} are missing",
                                names=_names(missing))
            frozen = [k for k in LAYERS if not f["requires"][k]]
            if frozen:
                return (False, *frozen_detail(f, frozen))
            return True

        return [
            need(_("`gain` is registered as one of the network's parameters{where}",
                   where=where), registered, "gain"),
            need(_("`gain` is a sorting centre: a leaf that requires grad, with 16 entries"),
                 centre, "gain"),
            need(_("`gain` starts at the correct script's 16 values{where}", where=where), values,
                 "gain"),
            need(_("every layer's parameters require grad: nothing is left frozen{where}",
                   where=where), trains, "frozen"),
        ]


# --------------------------------------------------------------------------- q6: forward


def _reference_model(ref: dict, seed: int, bias: float):
    """The correct model, its output bias set so that the clamp bites (or never does)."""
    import torch

    model = ref["make_model"](seed)
    with torch.no_grad():
        model.out.bias.fill_(bias)
    return model


#: out.bias for each check: +3 keeps every prediction positive (the clamp never bites, so only
#: the part's own bug can change the result); -0.3 makes the clamp bite on part of the batch.
_NO_CLAMP, _CLAMP = 3.0, -0.3


@lesson.register
class Q6Forward(Piece):
    qid = "q6"
    title = N_("Find the bug: the route (forward)")
    function_name = "forward"
    part_names = ["no_grad", "inplace", "data"]
    starter = BUGGY_FORWARD

    #: the parameters whose reports each part compares, and the model it compares them on
    WHICH = {"no_grad": (["shortcut.weight", "shortcut.bias"], _NO_CLAMP),
             "inplace": (["hidden.weight", "hidden.bias", "gain"], _NO_CLAMP),
             "data": (["out.weight", "out.bias"], _CLAMP)}

    def measure(self, ns, ref, variant, parts):
        seed, n, _steps, _lr = _variant(variant)
        X, y = ref["make_data"](seed, n)
        facts: dict[str, Any] = {}
        for bias in (_NO_CLAMP, _CLAMP):
            model = _reference_model(ref, seed, bias)
            pred, h = ref["forward"](model, X)
            named = _named(model)
            facts[bias] = {"ref_pred": tf._tolist(pred),
                           "ref": dict(zip(PARAMS, _grads(ref["loss_fn"](pred, y, h),
                                                          [named[k] for k in PARAMS]),
                                           strict=True))}
            model = _reference_model(ref, seed, bias)
            out = ns["forward"](model, X)
            if not (isinstance(out, tuple | list) and len(out) == 2
                    and all(tf.is_tensor(t) for t in out)):
                raise Unusable(_("`forward` must return the pair `(pred, h)`; yours returned "
                                 "{kind}", kind=type(out).__name__))
            pred, h = out
            loss = ref["loss_fn"](pred, y, h)
            named = _named(model)
            facts[bias].update(pred=tf._tolist(pred), grad_fn=tf.grad_fn_name(pred),
                               h_tracked=tf.requires_grad(h))
            for part, (names, b) in self.WHICH.items():
                if b != bias:
                    continue
                try:  # only this part's route is traced: another part's bug cannot raise here
                    got = _grads(loss, [named[k] for k in names])
                    facts[part] = {"got": dict(zip(names, got, strict=True)), "error": None}
                except RuntimeError as exc:
                    facts[part] = {"got": {}, "error": str(exc).split("\n")[0][:160]}
                facts[part]["ref"] = {k: facts[bias]["ref"][k] for k in names}
        return facts

    @staticmethod
    def _same(f, part) -> tuple[bool, str]:
        bad = [_("`{name}` gets {got}, the correct forward's {want}", name=k,
                 got=_fmt(f[part]["got"].get(k)), want=_fmt(want))
               for k, want in f[part]["ref"].items()
               if f[part]["got"].get(k) is None or not values_equal(f[part]["got"][k], want,
                                                                     1e-4)]
        return not bad, _sep("findings").join(bad)

    def requirements(self, variant):
        where = _where(variant)

        def direct(f):
            ok, detail = self._same(f, "no_grad")
            if ok:
                return True
            if f["no_grad"]["error"]:
                return False, _raised(f["no_grad"]["error"])
            if any(f["no_grad"]["got"].get(k) is None for k in f["no_grad"]["ref"]):
                if uses(f["source"], ".detach"):
                    return (False, _("{detail}: `detach()` cut `base` off its route, so the "
                                     "direct route's sorting centres get no report",
                                     detail=detail), "detach_keeps_grad")
                if uses(f["source"], *GRAD_OFF):
                    return (False, _("{detail}: the direct route was computed with the "
                                     "monitoring switched off, so it has no route back",
                                     detail=detail), "no_grad_branch_counts")
            return False, detail

        def through_tanh(f):
            err = f["inplace"]["error"]
            if err:
                if "modified by an inplace operation" in err:
                    return (False, _("backward raised `RuntimeError` ('modified by an inplace "
                                     "operation'): `tanh` saved its output for backward, and "
                                     "your code changed that output in place"),
                            "saved_values_confused")
                return False, _raised(err)
            ok, detail = self._same(f, "inplace")
            if ok:
                return True
            if uses(f["source"], ".data"):
                return (False, _("{detail}: an edit through `.data` is invisible to autograd, "
                                 "so the reports come out silently wrong", detail=detail),
                        "data_is_safe")
            if not f[_NO_CLAMP]["h_tracked"]:
                return (False, _("the `h` your `forward` returns does not require grad, so the "
                                 "penalty computed from it sends no report to `hidden` and "
                                 "`gain` ({detail})", detail=detail),
                        "detach_in_loss_harmless" if uses(f["source"], ".detach") else None)
            return False, detail

        def clamped(f):
            mine, want = f[_CLAMP]["pred"], f[_CLAMP]["ref_pred"]
            if values_equal(mine, want, 1e-4):
                return True
            below = sum(1 for row in mine for v in row if v < 0) if isinstance(mine, list) \
                else 0
            return False, (_("your predictions differ from the correct forward's ({below} of "
                             "them are below 0)", below=below) if below else
                           _("your predictions differ from the correct forward's"))

        def true_report(f):
            ok, detail = self._same(f, "data")
            if ok:
                return True
            if f["data"]["error"]:
                return False, _raised(f["data"]["error"])
            made = f[_CLAMP]["grad_fn"]
            if uses(f["source"], ".data"):
                return (False, _("your `pred` has grad_fn `{grad_fn}`: the clamp made through "
                                 "`.data` is not on its recipe, so backward computes the report "
                                 "of the unclamped prediction ({detail})", grad_fn=made,
                                 detail=detail), "data_is_safe")
            if uses(f["source"], *GRAD_OFF):
                return (False, _("your `pred` has grad_fn `{grad_fn}`: the clamp ran with the "
                                 "monitoring switched off, so it is not on the recipe and "
                                 "backward computes the report of the unclamped prediction "
                                 "({detail})", grad_fn=made, detail=detail))
            return False, _("your `pred` has grad_fn `{grad_fn}`; {detail}", grad_fn=made,
                            detail=detail)

        return [
            need(_("the direct route is recorded: `shortcut.weight` and `shortcut.bias` get "
                   "their report from the loss{where}", where=where), direct, "no_grad"),
            need(_("backward runs through `tanh`, and `hidden.*` and `gain` get the correct "
                   "reports{where}", where=where), through_tanh, "inplace"),
            need(_("predictions are clamped at 0 (a delivery never takes negative time){where}",
                   where=where), clamped, "data"),
            need(_("with part of the batch clamped at 0, `out.weight` and `out.bias` get the "
                   "true report of the clamped prediction"), true_report, "data"),
        ]


# --------------------------------------------------------------------------- q7: loss_fn


@lesson.register
class Q7Loss(Piece):
    qid = "q7"
    title = N_("Find the bug: the penalty that trains nothing (loss_fn)")
    function_name = "loss_fn"
    starter = BUGGY_LOSS

    def measure(self, ns, ref, variant, parts):
        import torch

        seed, n, _steps, _lr = _variant(variant)
        g = torch.Generator().manual_seed(seed + 100)
        pred0 = torch.rand(n, 1, generator=g) * 3
        feats0 = torch.randn(n, 16, generator=g)
        _X, y = ref["make_data"](seed, n)
        pred, feats = pred0.clone().requires_grad_(), feats0.clone().requires_grad_()
        want = ref["loss_fn"](pred, y, feats)
        facts: dict[str, Any] = {"ref_value": float(want), "ref": _grads(want, [pred, feats])}
        pred, feats = pred0.clone().requires_grad_(), feats0.clone().requires_grad_()
        loss = ns["loss_fn"](pred, y, feats)
        if not tf.is_tensor(loss):
            raise Unusable(_("`loss_fn` must return a one-element tensor; yours returned {kind}",
                             kind=type(loss).__name__))
        if loss.numel() != 1:
            raise Unusable(_("`loss_fn` must return a one-element tensor; yours returned a "
                             "tensor of shape {shape}", shape=list(loss.shape)))
        facts["value"] = float(tf._tolist(loss.reshape(())))
        facts["grad_fn"] = tf.grad_fn_name(loss)
        facts["got"] = _grads(loss, [pred, feats]) if tf.requires_grad(loss) else [None, None]
        return facts

    def requirements(self, variant):
        where = _where(variant)

        def value(f):
            return values_equal(f["value"], f["ref_value"], 1e-5), _(
                "your loss is {mine:.6g}; `fit + 0.01 * calm` is {want:.6g}", mine=f["value"],
                want=f["ref_value"])

        def to_pred(f):
            got, want = f["got"][0], f["ref"][0]
            if got is None:
                return False, _("no report reaches `pred`: your loss has grad_fn `{grad_fn}`",
                                grad_fn=f["grad_fn"])
            return values_equal(got, want, 1e-5), _(
                "d loss / d pred is {mine}, the squared error's is {want}", mine=_fmt(got),
                want=_fmt(want))

        def to_features(f):
            got, want = f["got"][1], f["ref"][1]
            if got is None:
                myth = ("no_grad_branch_counts" if uses(f["source"], *GRAD_OFF)
                        else "detach_in_loss_harmless")
                return (False, _("your loss has grad_fn `{grad_fn}`, but no report reaches "
                                 "`features`: the penalty was computed from a copy cut off its "
                                 "route, so it calms nothing", grad_fn=f["grad_fn"]), myth)
            return values_equal(got, want, 1e-5), _(
                "d loss / d features is {mine}, expected 0.01 * 2 * features / numel = {want}",
                mine=_fmt(got), want=_fmt(want))

        return [
            need(_("the loss value is `fit + 0.01 * calm`{where}", where=where), value),
            need(_("d loss / d `pred` is the squared error's report"), to_pred),
            need(_("the penalty sends its report to `features` (and so on to `hidden` and "
                   "`gain`)"), to_features),
        ]


# --------------------------------------------------------------------------- q8: train


def _train_run(train, make_model, make_data, seed: int, n: int, steps: int, lr: float) -> dict:
    """A training run from ``make_model(seed)``: its losses, final parameters and .grad."""
    X, y = make_data(seed, n)
    model = make_model(seed)
    start = {k: tf._tolist(p) for k, p in _named(model).items()}
    losses = train(model, X, y, steps, lr)
    named = _named(model)
    return {"losses": losses, "start": start,
            "params": {k: tf._tolist(p) for k, p in named.items()},
            "grads": {k: tf.grad_values(p) for k, p in named.items()}}


def reference_run(variant: str, steps: int | None = None, script: str | None = None) -> dict:
    """The correct script's training run (or, with ``script``, that ``train`` among the
    correct other pieces: the colleague's, for the signature of piled-up reports)."""
    seed, n, default_steps, lr = _variant(variant)
    ns = reference_namespace()
    if script is not None:
        exec(compile(script, "<the colleague's train>", "exec"), ns)  # noqa: S102
    return _train_run(ns["train"], ns["make_model"], ns["make_data"], seed, n,
                      steps or default_steps, lr)


def loss_threshold(losses: list[float]) -> float:
    """90 % of the correct run's improvement: first - 0.9 * (first - last)."""
    return losses[0] - 0.9 * (losses[0] - losses[-1])


def zero_grad_between(source: str) -> bool:
    """Whether the training loop clears the reports after ``backward()`` and before
    ``step()``: the signature of a ``zero_grad()`` in the wrong place."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    loop = next((n for n in ast.walk(tree) if isinstance(n, ast.For | ast.While)), None)
    if loop is None:
        return False
    at: dict[str, int] = {}
    for i, stmt in enumerate(loop.body):
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                at.setdefault(node.func.attr, i)
    return at.keys() >= {"backward", "zero_grad", "step"} and \
        at["backward"] < at["zero_grad"] < at["step"]


def _floats(losses) -> list[float] | None:
    try:
        return [float(v) for v in losses]
    except (TypeError, ValueError, RuntimeError):
        return None


@lesson.register
class Q8Train(Piece):
    qid = "q8"
    title = N_("Find the bug: reports that pile up (train)")
    function_name = "train"
    part_names = ["zero_grad", "converges"]
    starter = BUGGY_TRAIN

    SHORT = 3  # steps for the step-by-step comparison
    PILE = 5  # first losses compared with the colleague's run, for the signature of piling up
    runs = [["zero_grad"], ["converges"]]

    def measure(self, ns, ref, variant, parts):
        seed, n, steps, lr = _variant(variant)

        def mine(k):
            return _train_run(ns["train"], ref["make_model"], ref["make_data"], seed, n, k, lr)

        if parts == ["zero_grad"]:
            return {"ref": reference_run(variant, self.SHORT), "mine": mine(self.SHORT),
                    "pile": reference_run(variant, self.SHORT, BUGGY_TRAIN)}
        return {"steps": steps, "ref_long": reference_run(variant, steps)["losses"],
                "mine": mine(steps), "pile": reference_run(variant, self.PILE, BUGGY_TRAIN)}

    def requirements(self, variant):
        where = _where(variant)
        short = self.SHORT

        def same(a: dict, b: dict, tol: float = 1e-4) -> list[str]:
            return [k for k, v in b.items() if not values_equal(a.get(k), v, tol)]

        def piled(f) -> bool:  # the run is the colleague's, whose reports pile up
            if "steps" not in f:
                return not same(f["mine"]["params"], f["pile"]["params"])
            first = (_floats(f["mine"]["losses"]) or [])[:self.PILE]
            return values_equal(first, f["pile"]["losses"], 1e-4) and \
                not values_equal(first, f["ref_long"][:self.PILE], 1e-4)

        def cleared(f) -> bool:  # the reports still pile up although the code clears them
            return uses(f["source"], "zero_grad") or "grad = None" in f["source"]

        def still(f) -> bool:
            return not same(f["mine"]["params"], f["mine"]["start"], 0.0)

        def stepwise(f):
            bad = same(f["mine"]["params"], f["ref"]["params"])
            if not bad:
                return True
            if piled(f):
                if cleared(f):
                    return (False, _("after {steps} steps your parameters are those of the "
                                     "colleague's run: each step added its report onto the ones "
                                     "before, whatever your `zero_grad()` cleared", steps=short),
                            "zero_grad_misplaced")
                return (False, _("after {steps} steps your parameters are those of the "
                                 "colleague's run: each step added its report onto the ones "
                                 "before", steps=short), "grad_accumulates_not")
            if still(f) and zero_grad_between(f["source"]):
                return (False, _("after {steps} steps no parameter has moved: your "
                                 "`zero_grad()` runs between `backward()` and `step()`, so it "
                                 "throws each step's reports away before `step()` can use them",
                                 steps=short), "zero_grad_misplaced")
            return False, _("after {steps} steps {names} differ from the correct run: each "
                            "update must use that step's report only, with plain SGD and the "
                            "given learning rate", steps=short, names=_names(bad[:3]))

        def last_report(f):
            grads = f["mine"]["grads"]
            if all(g is None for g in grads.values()) or not same(grads, f["ref"]["grads"]):
                return True
            if not same(grads, f["pile"]["grads"]):
                return (False, _("after training, `.grad` holds the sum of every step's report: "
                                 "the reports of earlier steps were never cleared"),
                        "zero_grad_misplaced" if cleared(f) else "grad_accumulates_not")
            return False, _("after training, `.grad` is not the last step's report")

        def floats(f):
            ls, k = f["mine"]["losses"], f["steps"]
            if isinstance(ls, list) and len(ls) == k and all(isinstance(v, float) for v in ls):
                return True
            if isinstance(ls, list) and ls and tf.is_tensor(ls[0]):
                return False, _("`train` returned a list of tensors: append `loss.item()`, a "
                                "float, not the loss tensor (which keeps its whole route alive)")
            if isinstance(ls, list | tuple):
                return False, _("`train` returned {kind} of {count} items; return a list of "
                                "{steps} floats (`loss.item()`)", kind=type(ls).__name__,
                                count=len(ls), steps=k)
            return False, _("`train` returned {kind}; return a list of {steps} floats "
                            "(`loss.item()`)", kind=type(ls).__name__, steps=k)

        def falls(f):
            ref = f["ref_long"]
            thr = loss_threshold(ref)
            ls = _floats(f["mine"]["losses"]) or [math.inf]
            last = ls[-1]
            if math.isfinite(last) and last < thr:
                return True
            numbers = {"last": last, "first": ref[0], "end": ref[-1], "steps": len(ref),
                       "threshold": thr}
            if piled(f):
                return (False, _("your last loss is {last:.4g}; the correct script goes from "
                                 "{first:.4g} to {end:.4g} in {steps} steps, so it must fall "
                                 "below {threshold:.4g}: the reports pile up from step to step",
                                 **numbers),
                        "zero_grad_misplaced" if cleared(f) else "grad_accumulates_not")
            if still(f) and zero_grad_between(f["source"]):
                return (False, _("your last loss is {last:.4g}; the correct script goes from "
                                 "{first:.4g} to {end:.4g} in {steps} steps, so it must fall "
                                 "below {threshold:.4g}: `zero_grad()` between `backward()` and "
                                 "`step()` leaves `step()` nothing to apply", **numbers),
                        "zero_grad_misplaced")
            return False, _("your last loss is {last:.4g}; the correct script goes from "
                            "{first:.4g} to {end:.4g} in {steps} steps, so it must fall below "
                            "{threshold:.4g}", **numbers)

        def silent(f):
            seen = list(dict.fromkeys(f["warnings"]))[:2]  # each warning once
            return not seen, _("torch warned: {warnings}",
                               warnings=_sep().join(map(_quoted, seen)))

        return [
            need(_("after {steps} steps the parameters equal those of the correct run{where}",
                   steps=short, where=where), stepwise, "zero_grad"),
            need(_("after training, `.grad` holds the last step's report only (or nothing, if "
                   "cleared after `step()`)"), last_report, "zero_grad"),
            need(_("`train` returns the loss of every step as floats{where}", where=where),
                 floats, "converges"),
            need(_("the loss falls below 90 % of the correct run's improvement within the same "
                   "number of steps"), falls, "converges"),
            need(_("no warning is emitted"), silent, "converges"),
        ]


# --------------------------------------------------------------------------- q9: dead_centres


ALARM_CASES = {"visible": (0, "spice"), "hidden": (2, "pepper")}


def _alarm_model(ref: dict, variant: str):
    """The correct model plus a zero-gradient parameter, an unused one and a frozen one."""
    import torch

    seed, extra = ALARM_CASES["hidden" if variant == "hidden" else "visible"]
    model = ref["make_model"](seed)
    setattr(model, extra, torch.nn.Parameter(torch.ones(3)))
    model.spare = torch.nn.Parameter(torch.zeros(2))        # registered, never used
    model.shortcut.bias.requires_grad_(False)               # frozen on purpose
    return model, extra


@lesson.register
class Q9Alarm(Piece):
    qid = "q9"
    title = N_("Find the bug: the alarm that cries wolf (dead_centres)")
    function_name = "dead_centres"
    part_names = ["false_alarm", "zeros"]
    starter = BUGGY_ALARM

    runs = [["false_alarm"], ["zeros"]]

    def measure(self, ns, ref, variant, parts):
        import torch

        seed, n, _steps, lr = _variant(variant)
        X, y = ref["make_data"](seed, n)
        if parts == ["false_alarm"]:
            model = ref["make_model"](seed)
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            ref["loss_fn"](*ref["forward"](model, X), y).backward()  # an earlier step ...
            opt.step()
            opt.zero_grad()            # ... and the desk cleared: every .grad is None
            loss = ref["loss_fn"](*ref["forward"](model, X), y)
            calm = {"expected": ref["dead_centres"](model, loss), "every": list(_named(model)),
                    "found": ns["dead_centres"](model, loss)}
            calm["written"] = [k for k, p in _named(model).items()
                               if tf.grad_values(p) is not None]
            try:
                loss.backward()
                calm["reusable"] = True
            except RuntimeError:
                calm["reusable"] = False
            return {"false_alarm": calm}

        model, extra = _alarm_model(ref, variant)

        def loss_now():
            pred, feats = ref["forward"](model, X)
            return ref["loss_fn"](pred, y, feats) + (getattr(model, extra) * 0.0).sum()

        loss_now().backward()          # earlier .grad: zeros for the extra, None for spare
        loss = loss_now()
        zeros = {"expected": ref["dead_centres"](model, loss), "extra": extra,
                 "stale": [k for k, p in _named(model).items() if tf.grad_values(p) is None]}
        zeros["found"] = ns["dead_centres"](model, loss)
        return {"zeros": zeros}

    def requirements(self, variant):
        where = _where(variant)

        def listed(found) -> list[str] | None:
            return sorted(map(str, found)) if isinstance(found, list | tuple) else None

        def quiet(f):
            c = f["false_alarm"]
            found = listed(c["found"])
            if found == sorted(c["expected"]):
                return True
            if found == sorted(c["every"]):
                return (False, _("your alarm named every parameter ({count}): right after "
                                 "`zero_grad()` every `.grad` is `None`, so a `grad is None` "
                                 "check flags every healthy sorting centre", count=len(found)),
                        "grad_none_check_enough")
            return False, _("your alarm returned {mine}; torch says {want}",
                            mine=show(c["found"]), want=show(c["expected"]))

        def untouched(f):
            written = f["false_alarm"]["written"]
            return (not written, _("your check wrote `.grad` of {names}: the training step's "
                                   "own `backward()` would add its report onto that one. Ask "
                                   "`torch.autograd.grad(...)` instead",
                                   names=_names(written[:3])), "grad_accumulates_not")

        def reusable(f):
            return (f["false_alarm"]["reusable"],
                    _("the training step's `loss.backward()` then raised `RuntimeError` "
                      "(backward through the graph a second time): your check freed the graph. "
                      "Pass `retain_graph=True`"), "graph_survives_backward")

        def zeros(f):
            z = f["zeros"]
            found, want = listed(z["found"]), sorted(z["expected"])
            if found == want:
                return True
            if found is None:
                return False, _("your alarm returned {mine}, not a list of names",
                                mine=show(z["found"]))
            if found == sorted(z["stale"]):
                return (False, _("your alarm named {names}: what `.grad` says is `None` now, "
                                 "which is neither this loss's reports nor only the trainable "
                                 "parameters", names=_names(found)), "grad_none_check_enough")
            notes = []
            if z["extra"] not in found:
                notes.append(_("`{name}` is missing: it is on the route but multiplied by 0, so "
                               "its report exists and is all zeros", name=z["extra"]))
            if "spare" not in found:
                notes.append(_("`spare` is missing: the loss never uses it, so it gets no "
                               "report"))
            if "shortcut.bias" in found:
                notes.append(_("`shortcut.bias` is frozen on purpose (`requires_grad=False`): "
                               "not a trainable parameter, so not an alarm"))
            others = [k for k in found if k not in want and k != "shortcut.bias"]
            if others:
                notes.append(_("{names} get a real, non-zero report", names=_names(others)))
            myth = ("zero_gradient_is_none" if z["extra"] not in found and "spare" in found
                    else None)
            return (False, _sep("findings").join(notes)
                    or _("torch says {want}", want=show(z["expected"])), myth)

        return [
            need(_("right after `zero_grad()`, a healthy network raises no alarm{where}",
                   where=where), quiet, "false_alarm"),
            need(_("the check leaves `.grad` alone"), untouched, "false_alarm"),
            need(_("`loss.backward()` still works after the check"), reusable, "false_alarm"),
            need(_("it reports the parameter whose report is all zeros and the unused one, and "
                   "not the frozen one{where}", where=where), zeros, "zeros"),
        ]

