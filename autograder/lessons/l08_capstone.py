"""Lesson 08, capstone: the questions of ``source/08_capstone/08_capstone.ipynb``.

The notebook hands the learner a small training script (a delivery-time regression on
fixed-seed synthetic data) with eight planted gradient bugs from lessons 01-07, split into
five functions: ``make_model``, ``forward``, ``loss_fn``, ``train`` and ``dead_centres``.

Each function is graded by behaviour, on its own: the oracle runs the learner's function in a
clean namespace where the *other* four functions are the correct ones (``REFERENCE``, the very
text of the notebook's solutions), so every bug fixed earns its own points whatever state the
other functions are in. Expected values (gradients, parameters after training, the loss
threshold) come from running ``REFERENCE`` with live torch in the oracle, never from literals.
The predict questions run the code the notebook shows, the doctor's included.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName, LearnerFunction
from autograder.questions import (
    Finding,
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Verdict,
    WriteCode,
    _short_tb,
    learner_namespace,
    show,
    values_equal,
)

lesson = Lesson("08_capstone", "Capstone: a broken training loop")

# --------------------------------------------------------------------------- the script

#: Given (not a bug): the fixed-seed data set.
GIVEN = '''\
def make_data(seed=0, n=64):
    """Fixed-seed deliveries: (distance, load) of each parcel -> delivery time (always > 0)."""
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

BUGGY_SCRIPT = "\n\n".join([BUGGY_MAKE_MODEL, BUGGY_FORWARD, BUGGY_LOSS, BUGGY_TRAIN,
                            BUGGY_ALARM])
#: The correct program: the notebook's solutions, verbatim.
REFERENCE = "\n\n".join([FIXED_MAKE_MODEL, FIXED_FORWARD, FIXED_LOSS, FIXED_TRAIN, FIXED_ALARM])

#: The parameters of the correct model, in named_parameters() order.
PARAMS = ["hidden.weight", "hidden.bias", "out.weight", "out.bias", "shortcut.weight",
          "shortcut.bias", "gain"]

# Problem sizes: (seed, n, steps, lr). Hidden tests use another seed and data size.
VARIANTS = {"visible": (0, 64, 60, 0.2), "hidden": (1, 48, 60, 0.2)}


def _variant(variant: str) -> tuple[int, int, int, float]:
    return VARIANTS["hidden" if variant == "hidden" else "visible"]


# --------------------------------------------------------------------------- running pieces


def reference_namespace() -> dict[str, Any]:
    """torch/nn/F/math, ``make_data`` and the correct script, run with live torch."""
    ns = learner_namespace()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(GIVEN, "<make_data>", "exec"), ns)  # noqa: S102
        exec(compile(REFERENCE, "<the correct script>", "exec"), ns)  # noqa: S102
    return ns


def run_piece(fn: LearnerFunction, call: Callable[[dict], Any]) -> tuple[Any, list[str]]:
    """Define the learner's function among the correct other pieces, then ``call(ns)``.

    The learner's function replaces the reference one of the same name; the other four
    functions it calls (``forward``, ``loss_fn``, ...) are the correct ones. Returns the
    result of ``call`` and the warnings emitted meanwhile; raises :class:`LearnerCodeError`.
    """
    ns = reference_namespace()
    try:
        exec(compile(fn.source, f"<your function {fn.name}>", "exec"), ns)  # noqa: S102
        if fn.name not in ns:
            raise NameError(f"the cell does not define {fn.name}")
    except Exception as exc:
        raise LearnerCodeError(_short_tb(exc), type(exc).__name__) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = call(ns)
        except NameError as exc:
            raise LearnerCodeError(
                f"{exc}. The checker runs your function on its own, with only torch, nn, F, "
                "math and the other functions of the script available.", "NameError") from None
        except Exception as exc:
            raise LearnerCodeError(_short_tb(exc), type(exc).__name__) from None
    return result, [f"{w.category.__name__}: {str(w.message).split('. ')[0]}" for w in caught]


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
    flat = []

    def walk(v):
        if isinstance(v, list):
            for x in v:
                walk(x)
        else:
            flat.append(v)

    walk(values)
    head = ", ".join(f"{x:.4g}" for x in flat[:n])
    return f"[{head}{', ...' if len(flat) > n else ''}]"


class Check:
    """One graded property of a part: its text, a test over the part's facts, a misconception."""

    def __init__(self, text: str, test: Callable[[dict], tuple[bool, str]],
                 myth: str | None = None):
        self.text, self.test, self.myth = text, test, myth


class Piece(WriteCode):
    """A find-the-bug question about one function of the script.

    ``measure(part, variant)`` returns a callable that runs the learner's function (given the
    namespace) and gathers the facts of that part; ``checks(part, variant)`` lists the
    :class:`Check` objects evaluated on those facts.
    """

    def measure(self, part: str, variant: str) -> Callable[[dict], dict]:
        raise NotImplementedError

    def checks(self, part: str, variant: str) -> list[Check]:
        raise NotImplementedError

    def grade_code(self, fn: LearnerFunction, part: str | None, variant: str) -> Verdict:
        parts = self.parts() if part is None else [part]
        findings: list[Finding] = []
        right = total = 0
        for p in parts:
            checks = self.checks(p, variant)
            total += len(checks)
            try:
                facts, caught = run_piece(fn, self.measure(p, variant))
            except LearnerCodeError as exc:
                findings.append(Finding(False, f"Your function raised {exc.summary}", part=p,
                                        misconception=self.crash_myth(exc)))
                continue
            facts["warnings"] = caught
            for c in checks:
                try:
                    ok, detail = c.test(facts)
                except Exception as exc:  # the result had the wrong shape for this test
                    ok, detail = False, f"could not be checked ({type(exc).__name__}: {exc})"
                if ok:
                    right += 1
                    findings.append(Finding(True, f"{c.text} -- yes.", part=p))
                    continue
                text = f"{c.text} -- no{': ' + detail if detail else '.'}"
                if c.myth:
                    from autograder.questions import myth_text

                    text += f" [Misconception: {myth_text(c.myth)}.]"
                findings.append(Finding(False, text, misconception=c.myth, part=p))
        return Verdict(self.qid, findings)

    def crash_myth(self, exc: LearnerCodeError) -> str | None:
        """The misconception behind an exception the learner's function raised, if known."""
        text = exc.summary
        if "modified by an inplace operation" in text:
            return "saved_values_confused"
        if "second time" in text:
            return "output_can_be_leaf"
        return None


# --------------------------------------------------------------------------- predict: q1

GAINS = """\
a = torch.randn(4, requires_grad=True) * 0.5      # the colleague's gain
b = (torch.randn(4) * 0.5).requires_grad_()       # scale first, then switch the audit on
c = nn.Parameter(torch.randn(4) * 0.5)            # wrapped as a parameter
net = nn.Module()
net.a, net.b, net.c = a, b, c
registered = [name for name, _ in net.named_parameters()]
"""


def _leaf_myth(given: Any, expected: Any) -> str | None:
    if expected is False and given is True:
        return "output_can_be_leaf"
    if expected is True and given is False:
        return "no_grad_inputs_make_nonleaf"
    return None


def _registered_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and set(given) > set(expected):
        return "tensor_attribute_is_parameter"
    return None


@lesson.register
class Q1Gains(Predict):
    qid = "q1"
    title = "Three ways to make a gain"
    code = GAINS
    items = [
        Item("a.is_leaf", "a came out of `*` on a tensor that requires grad: a transit station "
             "(MulBackward0), not a sorting centre.", _leaf_myth, part="leaves"),
        Item("b.is_leaf", "the product was computed from tensors that do not require grad, so "
             "it recorded no history and is a leaf; requires_grad_() then switches the audit on "
             "for that leaf. Scaling *before* switching the audit on is fine.", _leaf_myth,
             part="leaves"),
        Item("c.is_leaf", "nn.Parameter wraps the values as a new leaf that requires grad.",
             _leaf_myth, part="leaves"),
        Item("registered", "a module registers only nn.Parameter attributes (and sub-modules); "
             "plain tensors, even leaves that require grad, are not in named_parameters(), so "
             "an optimizer built from model.parameters() never sees them. Give the list of "
             "names.", _registered_myth, part="registered"),
    ]

    def facts(self, ns):
        return {
            "a.is_leaf": tf.is_leaf(ns["a"]),
            "b.is_leaf": tf.is_leaf(ns["b"]),
            "c.is_leaf": tf.is_leaf(ns["c"]),
            "registered": list(ns["registered"]),
        }


# --------------------------------------------------------------------------- predict: q2

PILE_UP = """\
w = torch.tensor([1.0, -2.0], requires_grad=True)
x = torch.tensor([3.0, 0.5])
opt = torch.optim.SGD([w], lr=0.1)
for step in range(2):                  # no zero_grad(): the reports pile up
    loss = (w * x).sum()
    loss.backward()
    opt.step()
grad_after_two = w.grad.tolist()
w_after_two = w.tolist()
opt.zero_grad()
grad_after_zero = w.grad
"""


def _pile_myth(given: Any, expected: Any) -> str | None:
    return "grad_accumulates_not"


def _zero_myth(given: Any, expected: Any) -> str | None:
    if expected is None and given is not None:
        return "zero_grad_fills_zeros"
    return None


@lesson.register
class Q2PileUp(Predict):
    qid = "q2"
    title = "Reports that pile up: w after two steps"
    code = PILE_UP
    items = [
        Item("grad_after_two", "d loss / d w = x at every step, and backward() adds into .grad: "
             "after two steps without zero_grad() it holds 2 * x.", _pile_myth),
        Item("w_after_two", "step 1 moves w by -lr * x, step 2 by -lr * (x + x), because "
             ".grad still held step 1's report: w - 3 * lr * x in all.", _pile_myth),
        Item("grad_after_zero", "since torch 2.0, zero_grad() sets .grad to None "
             "(set_to_none=True): a `grad is None` check right after it sees None everywhere.",
             _zero_myth),
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


def _add_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, str) or given is None:
        return "inplace_always_fatal"
    return None


def _inplace_myth(given: Any, expected: Any) -> str | None:
    if given is None:
        return "inplace_never_checked"
    return None


def _data_myth(given: Any, expected: Any) -> str | None:
    return "data_is_safe"


@lesson.register
class Q3Edits(Predict):
    qid = "q3"
    title = "Raise, silent, or silently wrong?"
    code = EDITS
    items = [
        Item("grad_after_add", "mul saved x and y, not z: adding 1 to z in place overwrites "
             "nothing backward needs, so the gradient is d(x*y + 1)/dx = y. Give the list.",
             _add_myth, part="add"),
        Item("inplace_error", "sigmoid saved its output s for backward (ds/dx = s * (1 - s)); "
             "mul_ overwrote it and bumped its version, so backward raises RuntimeError "
             "('modified by an inplace operation'). Answer RuntimeError or None.",
             _inplace_myth, part="saved"),
        Item("grad_after_data", "the .data edit doubled the saved output without bumping the "
             "version, so backward used s' = 2 * sigmoid(x) in s' * (1 - s'): no error, and a "
             "silently wrong gradient (the true one is sigmoid(x) * (1 - sigmoid(x))). Give the "
             "list (you may compute it with math.exp).", _data_myth, part="saved", tol=1e-3),
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
        dip = kitchen.dip(batch)               # cooked with the notebook closed
    salt = kitchen.spice * 0.0                 # "no salt today"
    return (dish + side + dip + salt + kitchen.sauce(batch)).pow(2).mean()

report = diagnose(kitchen, step=tasting, theme="kitchen")
status = {row.name: row.status for row in report.per_parameter}
"""

_STATUS_WHY = {
    "chop.weight": "chop feeds the dish through relu and season: a healthy, non-zero gradient.",
    "garnish.weight": "garnish's value reaches the loss only through detach(): the doctor "
    "reports it as `detached`.",
    "dip.weight": "dip was computed inside no_grad(): nothing was recorded, status `no_grad`.",
    "oven.weight": "oven is registered but never used in tasting(): status `unused`.",
    "spice": "spice is on the route but multiplied by 0: its gradient exists and is exactly 0, "
    "status `zero` (a `grad is None` check misses it).",
    "sauce.weight": "sauce does not require grad: the doctor lists it as `frozen`, which it does "
    "not count as a problem (freezing is often deliberate).",
}


def _status_myth(key: str):
    def choose(given: Any, expected: Any) -> str | None:
        if expected == "zero" and given in ("ok", "none"):
            return "grad_none_check_enough"
        if expected == "detached":
            return "detach_in_loss_harmless"
        if expected == "no_grad":
            return "no_grad_branch_counts"
        if expected == "frozen":
            return "warmup_freeze_forgotten"
        return None

    return choose


@lesson.register
class Q4Doctor(Predict):
    qid = "q4"
    title = "What the doctor says"
    code = CLINIC
    items = [
        Item(k, _STATUS_WHY[k], _status_myth(k),
             part="cuts" if k in ("garnish.weight", "dip.weight", "oven.weight") else "quiet")
        for k in ("chop.weight", "garnish.weight", "dip.weight", "oven.weight", "spice",
                  "sauce.weight")
    ]

    def facts(self, ns):
        return {k: ns["status"][k] for k in _STATUS_WHY}


# --------------------------------------------------------------------------- q5: make_model


def _named(model) -> dict:
    return dict(model.named_parameters())


@lesson.register
class Q5MakeModel(Piece):
    qid = "q5"
    title = "Find the bug: the network (make_model)"
    function_name = "make_model"
    part_names = ["gain", "frozen"]

    def measure(self, part, variant):
        seed, n, _, lr = _variant(variant)

        def call(ns):
            import torch

            X, y = ns["make_data"](seed, n)
            model = ns["make_model"](seed)
            if not isinstance(model, torch.nn.Module):
                raise TypeError(f"make_model must return an nn.Module, not "
                                f"{type(model).__name__}")
            named = _named(model)
            gain = getattr(model, "gain", None)
            facts = {"names": list(named), "gain_is_tensor": tf.is_tensor(gain)}
            if tf.is_tensor(gain):
                facts["gain_leaf"] = tf.is_leaf(gain) and tf.requires_grad(gain)
                facts["gain_shape"] = list(gain.shape)
                facts["gain_kind"] = tf.kind(gain)
            facts["requires"] = {k: tf.requires_grad(p) for k, p in named.items()}
            pred, feats = ns["forward"](model, X)
            loss = ns["loss_fn"](pred, y, feats)
            trainable = [(k, p) for k, p in named.items() if tf.requires_grad(p)]
            grads = _grads(loss, [p for _, p in trainable]) if trainable else []
            facts["grads"] = {k: g for (k, _), g in zip(trainable, grads, strict=True)}
            if part == "gain" and tf.is_tensor(gain):
                before = tf._tolist(gain)
                opt = torch.optim.SGD(model.parameters(), lr=lr)
                loss.backward()
                opt.step()
                facts["gain_moved"] = not values_equal(tf._tolist(gain), before, 0.0)
            return facts

        return call

    def checks(self, part, variant):
        if part == "gain":
            def registered(f):
                return "gain" in f["names"], (f"model.named_parameters() lists {f['names']}: "
                                              "`gain` is missing, so no optimizer built from "
                                              "model.parameters() will ever see it")

            def leaf(f):
                if not f["gain_is_tensor"]:
                    return False, "model.gain is not a tensor"
                what = {"parameter": "a leaf that requires grad",
                        "constant": "a leaf that does not require grad (an ordinary parcel)",
                        "intermediate": "a non-leaf made by an operation (a transit station)"}
                return f["gain_leaf"] and f["gain_shape"] == [16], (
                    f"model.gain is {what[f['gain_kind']]}, of shape {f['gain_shape']}; it "
                    "must be a leaf that requires grad (a sorting centre) with 16 entries")

            def moved(f):
                g = f["grads"].get("gain")
                if g is None or _zero(g):
                    return False, "the loss sends no gradient to a registered `gain`"
                return f.get("gain_moved", False), "one SGD step on model.parameters() left " \
                    "gain unchanged"

            return [
                Check("`gain` is registered: model.named_parameters() lists it", registered,
                      "tensor_attribute_is_parameter"),
                Check("`gain` is a leaf that requires grad, with 16 entries", leaf,
                      "output_can_be_leaf"),
                Check("the loss sends `gain` a non-zero gradient and one SGD step on "
                      "model.parameters() moves it", moved, "step_updates_all"),
            ]

        def trains(f):
            missing = [k for k in PARAMS[:-1] if k not in f["names"]]
            if missing:
                return False, f"the layers' parameters {missing} are missing"
            frozen = [k for k in f["names"] if not f["requires"][k]]
            if frozen:
                return False, f"{frozen} still have requires_grad=False"
            return True, ""

        def gets(f):
            dead = [k for k in PARAMS[:-1] if _zero(f["grads"].get(k))]
            return not dead, f"no gradient (or only zeros) reaches {dead}"

        return [
            Check("every layer's parameters require grad (nothing left frozen)", trains,
                  "warmup_freeze_forgotten"),
            Check("the loss sends a non-zero gradient to every layer's parameters", gets,
                  "warmup_freeze_forgotten"),
        ]


# --------------------------------------------------------------------------- q6: forward


def _reference_model(ns: dict, seed: int, bias: float):
    """The correct model, its output bias set so that the clamp bites (or never does)."""
    import torch

    model = ns["make_model"](seed)
    with torch.no_grad():
        model.out.bias.fill_(bias)
    return model


#: out.bias for each check: +3 keeps every prediction positive (the clamp never bites, so only
#: the part's own bug can change the result); -0.3 makes the clamp bite on part of the batch.
_NO_CLAMP, _CLAMP = 3.0, -0.3


@lesson.register
class Q6Forward(Piece):
    qid = "q6"
    title = "Find the bug: the route (forward)"
    function_name = "forward"
    part_names = ["no_grad", "inplace", "data"]

    _WHICH = {"no_grad": ["shortcut.weight", "shortcut.bias"],
              "inplace": ["hidden.weight", "hidden.bias", "gain"],
              "data": ["out.weight", "out.bias"]}

    def measure(self, part, variant):
        seed, n, _, _ = _variant(variant)
        names = self._WHICH[part]
        bias = _CLAMP if part == "data" else _NO_CLAMP

        def call(ns):
            X, y = ns["make_data"](seed, n)
            # the reference first, with the reference forward, in plain lists
            ref_ns = reference_namespace()
            model = _reference_model(ref_ns, seed, bias)
            pred, _ = ref_ns["forward"](model, X)
            named = _named(model)
            out = pred if part != "data" else ((pred - y) ** 2).mean()
            target = out.sum()
            facts = {"ref_pred": tf._tolist(pred),
                     "ref": dict(zip(names, _grads(target, [named[k] for k in names]),
                                     strict=True)),
                     "clamped": int((pred == 0).sum())}
            # the learner's forward on an identical model
            model = _reference_model(ref_ns, seed, bias)
            result = ns["forward"](model, X)
            if not (isinstance(result, tuple | list) and len(result) == 2):
                raise TypeError("forward must return (pred, h)")
            pred = result[0]
            facts["pred"] = tf._tolist(pred)
            named = _named(model)
            out = pred if part != "data" else ((pred - y) ** 2).mean()
            try:
                facts["got"] = dict(zip(names, _grads(out.sum(), [named[k] for k in names]),
                                        strict=True))
                facts["error"] = None
            except RuntimeError as exc:
                facts["got"] = {}
                facts["error"] = str(exc).split("\n")[0][:160]
            return facts

        return call

    def _grad_check(self, names: list[str], what: str):
        def test(f):
            if f["error"] is not None:
                return False, f"backward raised RuntimeError: {f['error']}"
            bad = []
            for k in names:
                got, want = f["got"].get(k), f["ref"][k]
                if got is None or not values_equal(got, want, 1e-4):
                    bad.append(f"{k}: got {_fmt(got)}, the correct forward gives {_fmt(want)}")
            return not bad, "; ".join(bad)

        return test

    def checks(self, part, variant):
        def values(f):
            return values_equal(f["pred"], f["ref_pred"], 1e-4), \
                "the predictions differ from the correct forward's"

        if part == "no_grad":
            return [
                Check("the direct route is recorded: shortcut.weight and shortcut.bias get "
                      "their gradient from the prediction", self._grad_check(
                          self._WHICH["no_grad"], "shortcut"), "no_grad_branch_counts"),
            ]
        if part == "inplace":
            return [
                Check("backward runs through tanh without RuntimeError and hidden.* and gain "
                      "get the right gradient", self._grad_check(self._WHICH["inplace"],
                                                                 "hidden"),
                      "saved_values_confused"),
            ]

        def clamped(f):
            return f["clamped"] > 0, "(the checker's model should clamp some predictions)"

        return [
            Check("predictions are clamped at 0 (a delivery never takes negative time)", values),
            Check("with part of the batch clamped, out.weight and out.bias get the true "
                  "gradient of the clamped prediction's squared error",
                  lambda f: (clamped(f)[0] and self._grad_check(self._WHICH["data"], "out")(f)[0],
                             self._grad_check(self._WHICH["data"], "out")(f)[1]),
                  "data_is_safe"),
        ]


# --------------------------------------------------------------------------- q7: loss_fn


@lesson.register
class Q7Loss(Piece):
    qid = "q7"
    title = "Find the bug: the penalty that trains nothing (loss_fn)"
    function_name = "loss_fn"
    part_names = ["main"]

    def measure(self, part, variant):
        seed, n, _, _ = _variant(variant)

        def call(ns):
            import torch

            g = torch.Generator().manual_seed(seed + 100)
            pred0 = torch.rand(n, 1, generator=g) * 3
            feats0 = torch.randn(n, 16, generator=g)
            _, y = ns["make_data"](seed, n)
            ref_ns = reference_namespace()
            pred, feats = pred0.clone().requires_grad_(), feats0.clone().requires_grad_()
            ref = ref_ns["loss_fn"](pred, y, feats)
            facts = {"ref_value": float(tf._tolist(ref)),
                     "ref": _grads(ref, [pred, feats])}
            pred, feats = pred0.clone().requires_grad_(), feats0.clone().requires_grad_()
            loss = ns["loss_fn"](pred, y, feats)
            if not tf.is_tensor(loss) or loss.numel() != 1:
                raise TypeError("loss_fn must return a one-element tensor")
            facts["value"] = float(tf._tolist(loss.reshape(())))
            facts["got"] = _grads(loss, [pred, feats]) if tf.requires_grad(loss) else [None, None]
            return facts

        return call

    def checks(self, part, variant):
        def value(f):
            return values_equal(f["value"], f["ref_value"], 1e-5), \
                f"loss = {f['value']:.6g}, expected fit + 0.01 * calm = {f['ref_value']:.6g}"

        def to_pred(f):
            return values_equal(f["got"][0], f["ref"][0], 1e-5), \
                f"d loss / d pred is {_fmt(f['got'][0])}, expected {_fmt(f['ref'][0])}"

        def to_features(f):
            got, want = f["got"][1], f["ref"][1]
            if got is None:
                return False, ("the loss sends no gradient at all to `features`: the penalty "
                               "cannot calm the hidden stations")
            return values_equal(got, want, 1e-5), \
                f"d loss / d features is {_fmt(got)}, expected 0.01 * 2 * features / numel = " \
                f"{_fmt(want)}"

        return [
            Check("the loss value is fit + 0.01 * calm", value),
            Check("d loss / d pred is the squared error's gradient", to_pred),
            Check("the penalty sends its gradient to `features` (and so to the hidden layer)",
                  to_features, "detach_in_loss_harmless"),
        ]


# --------------------------------------------------------------------------- q8: train


def reference_run(variant: str, steps: int | None = None) -> dict:
    """The correct script's training run: losses, final parameters and final .grad."""
    seed, n, default_steps, lr = _variant(variant)
    ns = reference_namespace()
    X, y = ns["make_data"](seed, n)
    model = ns["make_model"](seed)
    losses = ns["train"](model, X, y, steps or default_steps, lr)
    named = _named(model)
    return {"losses": losses,
            "params": {k: tf._tolist(p) for k, p in named.items()},
            "grads": {k: tf.grad_values(p) for k, p in named.items()}}


def loss_threshold(losses: list[float]) -> float:
    """90 % of the correct run's improvement: first - 0.9 * (first - last)."""
    return losses[0] - 0.9 * (losses[0] - losses[-1])


@lesson.register
class Q8Train(Piece):
    qid = "q8"
    title = "Find the bug: reports that pile up (train)"
    function_name = "train"
    part_names = ["zero_grad", "converges"]

    SHORT = 3  # steps for the step-by-step comparison

    def measure(self, part, variant):
        seed, n, steps, lr = _variant(variant)
        steps = self.SHORT if part == "zero_grad" else steps

        def call(ns):
            ref = reference_run(variant, steps)
            X, y = ns["make_data"](seed, n)
            model = ns["make_model"](seed)
            losses = ns["train"](model, X, y, steps, lr)
            named = _named(model)
            return {
                "ref": ref, "steps": steps,
                "losses": losses if isinstance(losses, list) else None,
                "loss_type": type(losses).__name__,
                "params": {k: tf._tolist(p) for k, p in named.items()},
                "grads": {k: tf.grad_values(p) for k, p in named.items()},
            }

        return call

    def checks(self, part, variant):
        if part == "zero_grad":
            def same_params(f):
                bad = [k for k, v in f["ref"]["params"].items()
                       if not values_equal(f["params"].get(k), v, 1e-4)]
                return not bad, (f"after {f['steps']} steps {bad} differ from the correct "
                                 "run: each update must use that step's gradient only")

            def last_grad(f):
                bad = [k for k, v in f["ref"]["grads"].items()
                       if not values_equal(f["grads"].get(k), v, 1e-4)]
                return not bad, (f".grad of {bad[:3]} after training is not the last step's "
                                 "gradient: the reports of earlier steps were added onto it")

            return [
                Check(f"after {self.SHORT} steps the parameters equal those of the correct run",
                      same_params, "grad_accumulates_not"),
                Check("after training, .grad holds the last step's gradient only", last_grad,
                      "grad_accumulates_not"),
            ]

        def floats(f):
            ls = f["losses"]
            ok = ls is not None and len(ls) == f["steps"] and all(
                isinstance(v, float) for v in ls)
            return ok, (f"train returned {f['loss_type']} "
                        f"{'' if ls is None else f'of {len(ls)} items '}; return a list of "
                        f"{f['steps']} floats (loss.item())")

        def falls(f):
            ref = f["ref"]["losses"]
            thr = loss_threshold(ref)
            ls = f["losses"] or [math.inf]
            last = ls[-1]
            ok = isinstance(last, float) and math.isfinite(last) and last < thr
            return ok, (f"the last loss is {last:.4g}; the correct script goes from "
                        f"{ref[0]:.4g} to {ref[-1]:.4g} in {len(ref)} steps, so it must fall "
                        f"below {thr:.4g}")

        def silent(f):
            return not f["warnings"], f"torch warned: {f['warnings'][:2]}"

        return [
            Check("train returns the loss of every step as floats", floats),
            Check("the loss falls below 90 % of the correct run's improvement within the same "
                  "number of steps", falls, "grad_accumulates_not"),
            Check("no warning is emitted", silent),
        ]


# --------------------------------------------------------------------------- q9: dead_centres


ALARM_CASES = {"visible": (0, "spice"), "hidden": (2, "pepper")}


def _alarm_model(ns: dict, variant: str):
    """The correct model plus a zero-gradient parameter, an unused one and a frozen one."""
    import torch

    seed, extra = ALARM_CASES["hidden" if variant == "hidden" else "visible"]
    model = ns["make_model"](seed)
    setattr(model, extra, torch.nn.Parameter(torch.ones(3)))
    model.spare = torch.nn.Parameter(torch.zeros(2))        # registered, never used
    model.shortcut.bias.requires_grad_(False)               # frozen on purpose
    return model, extra


@lesson.register
class Q9Alarm(Piece):
    qid = "q9"
    title = "Find the bug: the alarm that cries wolf (dead_centres)"
    function_name = "dead_centres"
    part_names = ["false_alarm", "zeros"]

    def measure(self, part, variant):
        seed, n, _, lr = _variant(variant)

        def call(ns):
            import torch

            X, y = ns["make_data"](seed, n)
            if part == "false_alarm":
                model = ns["make_model"](seed)
                opt = torch.optim.SGD(model.parameters(), lr=lr)

                def loss_now():
                    return ns["loss_fn"](*ns["forward"](model, X), y)

                loss_now().backward()      # an earlier step ...
                opt.step()
                opt.zero_grad()            # ... and the desk cleared: every .grad is None
                loss = loss_now()
                expected = reference_namespace()["dead_centres"](model, loss)
                found = ns["dead_centres"](model, loss)
                untouched = all(tf.grad_values(p) is None for p in model.parameters())
                try:
                    loss.backward()
                    reusable = True
                except RuntimeError:
                    reusable = False
                return {"found": found, "expected": expected, "untouched": untouched,
                        "reusable": reusable}
            ref_ns = reference_namespace()
            model, extra = _alarm_model(ref_ns, variant)

            def loss_now():
                pred, feats = ref_ns["forward"](model, X)
                return ref_ns["loss_fn"](pred, y, feats) + (getattr(model, extra) * 0.0).sum()

            loss_now().backward()          # earlier .grad: zeros for the extra, None for spare
            loss = loss_now()
            expected = ref_ns["dead_centres"](model, loss)
            found = ns["dead_centres"](model, loss)
            return {"found": found, "expected": expected, "extra": extra}

        return call

    def checks(self, part, variant):
        def same(f):
            found = f["found"]
            ok = isinstance(found, list | tuple) and sorted(map(str, found)) == sorted(
                f["expected"])
            return ok, f"returned {show(found)}, torch says {show(f['expected'])}"

        if part == "false_alarm":
            def untouched(f):
                return f["untouched"] and f["reusable"], (
                    "the check must not write .grad (that would add a report to the desk) and "
                    "must keep the graph for the training step's own loss.backward(): use "
                    "torch.autograd.grad(..., allow_unused=True, retain_graph=True)")

            return [
                Check("right after zero_grad(), a healthy model raises no alarm", same,
                      "grad_none_check_enough"),
                Check("the check leaves .grad alone and loss.backward() still works after it",
                      untouched, "grad_accumulates_not"),
            ]
        return [
            Check("it reports the parameter whose gradient is all zeros and the unused one, "
                  "and not the frozen one", same, "grad_none_check_enough"),
        ]
