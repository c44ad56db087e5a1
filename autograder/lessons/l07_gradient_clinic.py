"""Lesson 07, the gradient clinic: the questions of ``source/07_gradient_clinic/07_gradient_clinic.ipynb``.

The five "where did my gradient go?" cases of the five-scenarios article, plus true vanishing
gradients, as debugging cases. Every expected answer is read off live torch when the question
is checked: a predict question runs the very code the notebook shows (``code``) and reads the
facts with :mod:`autograder.torchfacts`; a find-the-bug question runs the learner's repaired
function on the clinic's tiny problem next to a reference computation done by torch in the same
check (the gradients of one backward, and a short training run done once per check), and
compares what each parameter received and where the loss ended (never typed-in numbers).

A misconception is named only from evidence: the value a learner predicted, what torch reports
about what their code did (a gradient of zeros or ``None``, a gradient that differs from
torch's reference, a ``.grad`` that holds every step's report, a warning, an exception), or the
switch their code used (``.data``, ``detach()``, ``no_grad()``, a comparison).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
import torch.nn.functional as F

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName, LearnerFunction
from autograder.misconceptions import diagnose_error
from autograder.questions import (
    WRONG,
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    WriteCode,
    define_learner,
    learner_namespace,
    run_learner,
    score,
    values_equal,
)
from course.i18n import N_, _, is_chinese

lesson = Lesson("07_gradient_clinic", "The gradient clinic",
                preload=("torch._dynamo",))  # its checks train with optimizers


# --------------------------------------------------------------------------- small helpers


def _error(ns: dict, name: str):
    err = ns.get(name)
    return None if err is None else ExceptionName(type(err).__name__)


def _flat(values: Any) -> list[float]:
    if isinstance(values, list | tuple):
        return [v for item in values for v in _flat(item)]
    return [float(values)]


def _values(t: Any) -> Any:
    """A tensor's values as (nested) Python floats, read with torch's own descriptors."""
    return tf._tolist(t) if tf.is_tensor(t) else t


def _close(a: Any, b: Any, rtol: float = 1e-4, atol: float = 1e-6) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        fa, fb = _flat(_values(a)), _flat(_values(b))
    except (TypeError, ValueError):
        return False
    return len(fa) == len(fb) and all(
        math.isfinite(x) and abs(x - y) <= atol + rtol * abs(y) for x, y in zip(fa, fb, strict=True))


def _max_abs(values: Any) -> float:
    return max((abs(v) for v in _flat(_values(values))), default=0.0)


def _number(value: Any) -> float | None:
    """A float from a number or a one-element tensor (``norm()`` with or without ``.item()``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if tf.is_tensor(value):
        flat = _flat(tf._tolist(value))
        return flat[0] if len(flat) == 1 else None
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > 160:
        first = first[:157].rsplit(" ", 1)[0] + " ..."
    return f"{type(exc).__name__}: {first}"


def _uses(fn: LearnerFunction, *words: str) -> bool:
    """Whether the learner's code uses one of ``words`` (``.data``, ``detach(``, ...)."""
    return any(w in fn.source for w in words)


def _crash(exc: BaseException, text: str) -> LearnerCodeError:
    """An exception raised by torch while the checker used what the learner's code made;
    ``text`` is the finding: torch's error (``_first_line(exc)``) and where it happened."""
    return LearnerCodeError(text, type(exc).__name__)


def _names(items: list[str]) -> str:
    """Names as code spans, listed the way the current language lists them."""
    return ("、" if is_chinese() else ", ").join(f"`{n}`" for n in items)


def _findings(parts: list[str]) -> str:
    """Several findings of one check, as one text."""
    return ("；" if is_chinese() else "; ").join(parts)


def _given(message: str, key: str = "out"):
    """Decorate a requirement's test: it first needs the learner's result (``facts[key]``) to be
    what ``message`` asks for (a text marked with ``N_`` whose ``{type}`` is filled with the type
    of what was returned instead, ``facts["type"]``)."""
    def wrap(test):
        def checked(facts):
            if facts.get(key) is None:
                return False, _(message, type=facts["type"])
            return test(facts)
        return checked
    return wrap


# --------------------------------------------------------------------------- predict

ALARM = """\
class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Linear(2, 1)
        self.side = nn.Linear(2, 1)

    def forward(self, x):
        return self.main(x) + self.side(x) * 0.0    # the side route is switched off

def check_grad_flow(model):                         # the parcel-sorting article's alarm
    return [name for name, p in model.named_parameters() if p.grad is None]

router = Router()
opt = torch.optim.SGD(router.parameters(), lr=0.1)
loss = router(torch.ones(4, 2)).pow(2).mean()
loss.backward()
after_backward = check_grad_flow(router)
side_grad = router.side.weight.grad.tolist()
opt.step()
opt.zero_grad()
after_zero_grad = check_grad_flow(router)
"""


def _alarm_backward_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and any(str(n).startswith("side") for n in given):
        return "zero_gradient_is_none"  # the route multiplied by 0 taken for no route
    return None


def _zero_grad_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and set(map(str, given)) < set(expected):
        return "zero_grad_fills_zeros"  # some parameter still has a .grad after zero_grad()
    return None


@lesson.register
class Q1Alarm(Predict):
    qid = "q1"
    title = N_("The alarm of the parcel-sorting article")
    code = ALARM
    items = [
        Item("after_backward", "every parameter took part in the forward pass, so backward filed "
             "a report on each: `side`'s is a tensor of zeros, not `None`. The alarm stays silent "
             "although `side` never learns. Give the names in `named_parameters()` order (`[]` "
             "for none).", _alarm_backward_myth, part="zeros"),
        Item("side_grad", "`side(x) * 0.0` is a recorded multiplication: the route back to "
             "`side` exists and carries 0. The report arrives, and says 0 (a nested list: one "
             "row of two weights).",
             lambda given, expected: "zero_gradient_is_none" if given is None else None,
             part="zeros"),
        Item("after_zero_grad", "since torch 2.0, `zero_grad()` sets every `.grad` to `None` "
             "(`set_to_none=True`): right after it, the alarm names every parameter, healthy or "
             "not. Give the names in `named_parameters()` order.", _zero_grad_myth,
             part="zero_grad"),
    ]

    def facts(self, ns):
        return {
            "after_backward": list(ns["after_backward"]),
            "side_grad": ns["side_grad"],
            "after_zero_grad": list(ns["after_zero_grad"]),
        }


LOUD = """\
a = torch.tensor([1.0, 2.0], requires_grad=True)
b = torch.tensor([3.0, 4.0], requires_grad=True)
z = a * b
z.mul_(3)                         # in place on a product
try:
    z.sum().backward()
    error_mul = None
except RuntimeError as exc:
    error_mul = exc

c = torch.tensor([0.5, -0.5], requires_grad=True)
s = c.sigmoid()
s.mul_(2)                         # in place on sigmoid's output
try:
    s.sum().backward()
    error_sigmoid = None
except RuntimeError as exc:
    error_sigmoid = exc

d = torch.tensor([1.0, 2.0], requires_grad=True)
e = torch.tensor([5.0, 6.0], requires_grad=True)
with torch.no_grad():
    doubled = d * 2               # computed with the monitors off
(doubled * e).sum().backward()

w = torch.tensor([1.0, -1.0], requires_grad=True)
opt = torch.optim.SGD([w], lr=0.5)
(w * w).sum().backward()          # w.grad = 2 * w
with torch.no_grad():             # a tutorial: "step() in the wrong place"
    opt.step()
"""


def _is_zeros(value: Any) -> bool:
    try:
        flat = _flat(value.values if hasattr(value, "values") else value)
    except (TypeError, ValueError):
        return False
    return bool(flat) and all(v == 0 for v in flat)


def _d_myth(given: Any, expected: Any) -> str | None:
    if given is None:
        return None
    if _is_zeros(given):
        return "grad_none_means_vanished"  # the unrecorded route taken for a route carrying 0
    return "no_grad_branch_counts" if isinstance(given, list) else None


@lesson.register
class Q2Loud(Predict):
    qid = "q2"
    title = N_("In-place and no_grad(): loud, silent or harmless?")
    code = LOUD
    items = [
        Item("error_mul", "mul by a number saves nothing of `z` for backward, so changing `z` in "
             "place breaks nothing: backward runs and `a.grad = 3 * b`. Answer `RuntimeError` or "
             "`None`.",
             lambda given, expected: "inplace_always_fatal" if isinstance(given, str) else None,
             part="inplace"),
        Item("error_sigmoid", "sigmoid saved its output `s` for backward; `s.mul_(2)` bumped its "
             "version counter, so backward raises `RuntimeError` (\"modified by an inplace "
             "operation\").", part="inplace"),
        Item("d.grad", "the route through `d` was never recorded (`doubled` has no `grad_fn`): "
             "`d` gets no report at all, silently, so `d.grad` stays `None`.", _d_myth,
             part="no_grad"),
        Item("e.grad", "`doubled` works as a constant (bottled sauce): `e` still gets its "
             "gradient, d(sum(doubled * e))/de = doubled = [2.0, 4.0].",
             lambda given, expected: "no_grad_result_unusable" if given is None else None,
             part="no_grad"),
        Item("w", "`step()` already switches grad off while it updates, so the extra "
             "`no_grad()` changes nothing: w - 0.5 * 2w = 0. Give the values as a list.",
             lambda given, expected: ("step_inside_no_grad_breaks"
                                      if values_equal(given, [1.0, -1.0]) else None),
             part="no_grad"),
    ]

    def judge(self, item, answer, expected):
        finding = super().judge(item, answer, expected)
        if item.key == "error_sigmoid" and finding.status == WRONG and answer.get(item.key) is None:
            # no error expected from overwriting sigmoid's output: if the product's edit was
            # expected to raise, the two were swapped (what each saves); else nothing is checked
            swapped = isinstance(answer.get("error_mul"), str)
            finding.misconception = "saved_values_confused" if swapped else "inplace_never_checked"
        return finding

    def facts(self, ns):
        return {
            "error_mul": _error(ns, "error_mul"),
            "error_sigmoid": _error(ns, "error_sigmoid"),
            "d.grad": tf.grad_values(ns["d"]),
            "e.grad": tf.grad_values(ns["e"]),
            "w": tf._tolist(ns["w"]),
        }


BRANCH = """\
def tricky_forward(x, flag):      # the five-scenarios article, scenario 5
    if flag:
        y = x * 2
    else:
        y = x * 0                 # this branch's gradient is always 0
    return y

x = torch.tensor(5.0, requires_grad=True)
grads = []
for i in range(4):
    flag = (i % 2 == 0)
    y = tricky_forward(x, flag)
    y.backward()
    grads.append(x.grad.item())   # crashes if x.grad is None
    x.grad = None

y_off = tricky_forward(x, False)
y_cut = tricky_forward(x.detach(), True)
"""


def _grads_myth(given: Any, expected: Any) -> str | None:
    if given is None or (isinstance(given, list) and any(g is None for g in given)):
        return "zero_gradient_is_none"
    return None


@lesson.register
class Q3Branch(Predict):
    qid = "q3"
    title = N_("The branch that multiplies by zero")
    code = BRANCH
    items = [
        Item("grads", "`x * 0` is a recorded multiplication: backward reaches `x` and stores "
             "0.0 (so `.item()` works). Give the four floats as a list.", _grads_myth,
             part="zero"),
        Item("y_off.grad_fn", "`x * 0` records `MulBackward0` like any product: the route "
             "exists, it just carries 0. Give the class name as a string.",
             lambda given, expected: "zero_gradient_is_none" if given is None else None,
             part="zero"),
        Item("y_cut.requires_grad", "`x.detach()` has no history, so nothing computed from it "
             "requires grad: this is the branch that gives `None` (and makes backward raise), "
             "not the one multiplied by 0.", "detach_keeps_grad", part="cut"),
    ]

    def facts(self, ns):
        return {
            "grads": list(ns["grads"]),
            "y_off.grad_fn": tf.grad_fn_name(ns["y_off"]),
            "y_cut.requires_grad": tf.requires_grad(ns["y_cut"]),
        }


FADE = """\
def first_over_last(act, skip, depth=12, width=16):
    torch.manual_seed(1)
    layers = [nn.Linear(width, width) for _ in range(depth)]
    h = torch.randn(4, width)
    for layer in layers:
        out = act(layer(h))
        if skip == "kept":
            h = h + out                # residual block
        elif skip == "detached":
            h = h.detach() + out       # the kitchen article's identity.detach()
        else:
            h = out                    # plain stack
    h.sum().backward()
    return (layers[0].weight.grad.norm() / layers[-1].weight.grad.norm()).item()

ratios = {
    "sigmoid": first_over_last(torch.sigmoid, "none"),
    "sigmoid_residual": first_over_last(torch.sigmoid, "kept"),
    "relu_residual": first_over_last(torch.relu, "kept"),
    "relu_residual_detached": first_over_last(torch.relu, "detached"),
}
fades = {name: ratio < 1e-3 for name, ratio in ratios.items()}
"""


@lesson.register
class Q4Fade(Predict):
    qid = "q4"
    title = N_("Which stacks fade?")
    code = FADE
    # each blank is True or False: the one wrong value means one belief
    items = [
        Item("sigmoid", "sigmoid's slope is at most 0.25: twelve plain sigmoid layers multiply "
             "the report by small factors twelve times, and the first layer gets almost "
             "nothing.", "sigmoid_stack_healthy"),
        Item("sigmoid_residual", "`h + sigmoid(layer(h))` has Jacobian I + (small): the "
             "identity route carries the report past every block unchanged, whatever the "
             "activation.", "residual_fades"),
        Item("relu_residual", "the skip path carries the report from the last block to the "
             "first untouched.", "residual_fades"),
        Item("relu_residual_detached", "with `h.detach()` the skip path carries no report: only "
             "the product of the layers' own Jacobians is left, as in a plain stack.",
             "residual_detach_harmless"),
    ]

    def facts(self, ns):
        return {k: bool(v) for k, v in ns["fades"].items()}


# --------------------------------------------------------------------------- the clinic

# The clinic's tiny problem and patients, shown in the notebook before the exercises and
# executed here from the same text.
CLINIC = """\
def clinic_problem(seed=0, n=32):
    \"\"\"A tiny regression problem: n parcels with 4 features, one target each.\"\"\"
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = torch.sin(x @ torch.randn(4, 1, generator=g))
    return x, y


def clinic_model(seed=0, width=8):
    \"\"\"embed -> tanh -> head.\"\"\"
    torch.manual_seed(seed)
    return nn.ModuleDict({"embed": nn.Linear(4, width), "head": nn.Linear(width, 1)})


def gated_model(seed=0, width=8):
    \"\"\"embed -> tanh -> a gate mixing a fine and a coarse head.\"\"\"
    torch.manual_seed(seed)
    model = nn.ModuleDict({"embed": nn.Linear(4, width), "gate": nn.Linear(width, 1),
                           "fine": nn.Linear(width, 1), "coarse": nn.Linear(width, 1)})
    with torch.no_grad():
        model.gate.bias.fill_(3.0)      # the gate starts out preferring the fine head
    return model
"""


def clinic() -> dict[str, Any]:
    """``clinic_problem``, ``clinic_model`` and ``gated_model``, defined from :data:`CLINIC`."""
    ns = learner_namespace()
    exec(compile(CLINIC, "<clinic>", "exec"), ns)  # noqa: S102 -- our own text
    return ns


def _patient(variant: str) -> tuple[int, int, str]:
    """(seed, width, how the findings name the patient): the notebook's patient for the
    visible check, another one (other weights and data, width 6) for the hidden tests. The
    name fills the ``{patient}`` at the start of the requirements' texts."""
    if variant == "hidden":
        return 1, 6, _("Another patient (width 6, new data): ")
    return 0, 8, ""


def _trainable(model) -> list[tuple[str, Any]]:
    return [(n, p) for n, p in model.named_parameters() if tf.requires_grad(p)]


def _sgd(model, loss_of, steps: int, lr: float) -> None:
    """The grader's own training loop: ``steps`` SGD steps on ``loss_of(model)``."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _step in range(steps):
        opt.zero_grad()
        loss_of(model).backward()
        opt.step()


def _status(grad: Any) -> str:
    """The three kinds of answer of section 1: no route, a report of zeros, a report."""
    if grad is None:
        return "none"
    return "zero" if _max_abs(grad) == 0.0 else "ok"


def _statuses(model, loss) -> dict[str, str]:
    """torch's answer for each trainable parameter of ``model``: none, zero or ok."""
    named = _trainable(model)
    grads = torch.autograd.grad(loss, [p for __, p in named], allow_unused=True,
                                retain_graph=True)
    return {n: _status(g) for (n, __), g in zip(named, grads, strict=True)}


def _starved_text(statuses: dict[str, str]) -> str:
    """The parameters that get no useful report, each with what it gets (empty: none)."""
    words = {"none": N_("`{name}` (`None`: no route back)"), "zero": N_("`{name}` (zeros)")}
    return ("、" if is_chinese() else ", ").join(
        _(words[s], name=n) for n, s in statuses.items() if s != "ok")


class Watch:
    """Parameter hooks recording every gradient each parameter received (the largest entry,
    how many reports, their sum) and a snapshot of the values, to tell afterwards who got a
    gradient (None, zero, non-zero), who moved, and whether ``.grad`` piled reports up."""

    def __init__(self, model):
        self.params = _trainable(model)
        self.largest: dict[str, float | None] = {n: None for n, _ in self.params}
        self.count = {n: 0 for n, _ in self.params}
        self.total: dict[str, list[float] | None] = {n: None for n, _ in self.params}
        self.before = {n: tf._tolist(p) for n, p in self.params}
        self.handles = [p.register_hook(self._hook(n)) for n, p in self.params]

    def _hook(self, name: str):
        def hook(grad):
            flat = _flat(tf._tolist(grad))
            m = max((abs(v) for v in flat), default=0.0)
            old = self.largest[name]
            self.largest[name] = m if old is None else max(old, m)
            self.count[name] += 1
            total = self.total[name]
            self.total[name] = flat if total is None else [a + b for a, b in zip(total, flat, strict=True)]
        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def statuses(self) -> dict[str, str]:
        return {n: _status(None if m is None else [m]) for n, m in self.largest.items()}

    def unmoved(self) -> list[str]:
        return [n for n, p in self.params if tf._tolist(p) == self.before[n]]

    def piled_up(self) -> list[str]:
        """Parameters whose ``.grad`` holds the sum of several steps' reports (no zero_grad)."""
        out = []
        for n, p in self.params:
            g = tf.grad_values(p)
            if self.count[n] > 1 and g is not None and self.total[n] is not None \
                    and _close(g, self.total[n], rtol=1e-3, atol=1e-6) \
                    and not _close(g, [t / self.count[n] for t in self.total[n]], 1e-3, 1e-6):
                out.append(n)
        return out

    def cleared(self) -> bool:
        """Every parameter got reports, yet every ``.grad`` is None at the end."""
        return all(c > 0 for c in self.count.values()) and \
            all(tf.grad_values(p) is None for _, p in self.params)


def _fall_text(start: float, end: float, ref_end: float, steps: int) -> str:
    return _("in {steps} SGD steps your run took the loss from {start:.4g} to {end:.4g}; the "
             "reference run reaches {ref_end:.4g}", steps=steps, start=start, end=end,
             ref_end=ref_end)


def _same_end(end: float, ref_end: float) -> bool:
    return math.isfinite(end) and abs(end - ref_end) <= 1e-3 * abs(ref_end) + 1e-6


# --------------------------------------------------------------------------- write code: report


def _report_cases(variant: str):
    """(description, model, loss, stale) cases for grad_flow_report; ``stale``: leave earlier
    gradients in .grad before the call."""
    ns = clinic()
    seed, width, _patient_name = _patient(variant)
    x, y = ns["clinic_problem"](seed)
    cases = []

    gated = ns["gated_model"](seed, width)
    gated.fine.bias.requires_grad_(False)           # frozen: not to be reported
    h = torch.tanh(gated.embed(x))
    loss = F.mse_loss(torch.where(gated.gate(h) > 0, gated.fine(h), gated.coarse(h)), y)
    cases.append((N_("a hard gate, right after `zero_grad()`"), gated, loss, False))

    model = ns["clinic_model"](seed, width)
    model.spare = torch.nn.Linear(4, 1)             # registered, never used
    h = torch.relu(model.embed(x) - 100.0)          # every ReLU dead: zero gradients upstream
    loss = F.mse_loss(model.head(h), y)
    cases.append((N_("dead ReLUs and an unused layer"), model, loss, variant == "hidden"))

    if variant == "hidden":
        healthy = ns["clinic_model"](seed + 5, width)
        loss = F.mse_loss(healthy.head(torch.tanh(healthy.embed(x))), y)
        cases.append((N_("a healthy model with last step's gradients still in `.grad`"),
                      healthy, loss, True))
    return cases


def _stale_grads(model) -> None:
    """Fill .grad with an earlier step's (non-zero) gradients, as a loop without zero_grad."""
    torch.manual_seed(99)
    for __, p in _trainable(model):
        p.grad = torch.randn_like(p)


def _report_myth(said: dict, truth: dict, readings: list[dict]) -> str | None:
    """The belief a wrong report shows: read off `.grad` (it equals a reading of `.grad`), zeros
    taken for no route, or no route taken for zeros."""
    mine = {n: said.get(n) for n in truth}
    if any(mine == r for r in readings):
        return "grad_none_check_enough"
    wrong = [(mine[n], s) for n, s in truth.items() if mine[n] != s]
    if ("none", "zero") in wrong:
        return "zero_gradient_is_none"
    if ("zero", "none") in wrong:
        return "grad_none_means_vanished"
    return None


@lesson.register
class Q5Report(WriteCode):
    qid = "q5"
    title = N_("An alarm that tells None from zero")
    function_name = "grad_flow_report"
    part_names = ["statuses", "hygiene"]

    def grade_code(self, fn, part, variant):
        cases = []
        for desc, model, loss, stale in _report_cases(variant):
            if stale:
                _stale_grads(model)
            truth = _statuses(model, loss)          # torch's answer, before any learner code
            before = {n: tf.grad_values(p) for n, p in model.named_parameters()}
            cases.append((desc, model, loss, truth, before))

        def run():
            return [run_learner(fn, model, loss).result for _desc, model, loss, *_rest in cases]

        requirements = []
        for i, (desc, model, loss, truth, before) in enumerate(cases):
            def statuses(results, i=i, model=model, truth=truth, before=before):
                said = results[i]
                if not isinstance(said, dict):
                    return False, _("return a dict of name -> status, not `{type}`",
                                    type=type(said).__name__)
                wrong = [_("`{name}`: you said {said}, torch says {truth}", name=n,
                           said=repr(said.get(n)), truth=repr(s))
                         for n, s in truth.items() if said.get(n) != s]
                extra = sorted(set(map(str, said)) - set(truth))
                if extra:
                    wrong.append(_("{names} should not be in the report (frozen, or not a "
                                   "trainable parameter)", names=_names(extra)))
                readings = [{n: _status(g) for n, g in before.items() if n in truth},
                            {n: _status(tf.grad_values(p)) for n, p in model.named_parameters()
                             if n in truth}]
                return not wrong, _findings(wrong), _report_myth(said, truth, readings)

            def untouched(results, model=model, before=before):
                changed = [n for n, p in model.named_parameters()
                           if not _same_grad(tf.grad_values(p), before[n])]
                return not changed, _("your function changed `.grad` of {names}: the alarm must "
                                      "look without writing (`torch.autograd.grad` writes no "
                                      "`.grad`; `backward()` adds into it)",
                                      names=_names(changed))

            def graph_kept(results, model=model, loss=loss):
                try:
                    torch.autograd.grad(loss, [p for __, p in _trainable(model)],
                                        allow_unused=True)
                except RuntimeError as exc:
                    return (False, _("afterwards the training step's own `backward()` fails "
                                     "({error}): keep the route (`retain_graph=True`)",
                                     error=_first_line(exc)),
                            diagnose_error("RuntimeError", str(exc)))
                return True, ""

            case = _(desc)
            requirements += [
                Requirement(_("{case}: every trainable parameter gets torch's status", case=case),
                            statuses, part="statuses"),
                Requirement(_("{case}: `.grad` left exactly as it was", case=case), untouched,
                            part="hygiene"),
                Requirement(_("{case}: the loss can still be backpropagated", case=case),
                            graph_kept, part="hygiene"),
            ]
        return score(self.qid, requirements, run)


def _same_grad(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return _flat(a) == _flat(b)


# --------------------------------------------------------------------------- write code: deep


def _deep_data(width: int, seed: int):
    g = torch.Generator().manual_seed(200 + seed)
    x = torch.randn(32, width, generator=g)
    y = torch.tanh(x @ torch.randn(width, width, generator=g) / math.sqrt(width))
    return x, y


def _has_skip(model, x) -> bool | None:
    """Whether the output still depends on the input with every Linear set to zero: only an
    identity route (a skip connection that is not detached) carries the input through then."""
    try:
        probe = copy.deepcopy(model)
        with torch.no_grad():
            for m in probe.modules():
                if isinstance(m, torch.nn.Linear):
                    m.weight.zero_()
                    if m.bias is not None:
                        m.bias.zero_()
        xin = x.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(probe(xin).sum(), [xin], allow_unused=True)
    except Exception:
        return None
    return g is not None and _max_abs(g) > 0.0


def _measure_deep(fn: LearnerFunction, depth: int, width: int, seed: int) -> dict:
    """Build the learner's network, measure its gradient flow, then train it for 30 steps."""
    torch.manual_seed(seed)
    model = run_learner(fn, depth, width).result
    if not isinstance(model, torch.nn.Module):
        return {"module": None, "type": type(model).__name__}
    square = [m for m in model.modules()
              if isinstance(m, torch.nn.Linear) and tuple(m.weight.shape) == (width, width)]
    x, y = _deep_data(width, seed)
    facts = {"module": True, "square": len(square), "ratio": None, "losses": [],
             "train_error": None, "moved": 0.0}
    try:
        out = model(x)
        facts["shape"] = tuple(out.shape)
        if square:
            loss = F.mse_loss(out, y)
            g_first, g_last = torch.autograd.grad(loss, [square[0].weight, square[-1].weight])
            n_first = math.sqrt(sum(v * v for v in _flat(tf._tolist(g_first))))
            n_last = math.sqrt(sum(v * v for v in _flat(tf._tolist(g_last))))
            facts["ratio"] = n_first / n_last if n_last > 0 else 0.0
    except Exception as exc:
        raise _crash(exc, _("{error} (running your network on a (32, {width}) batch)",
                            error=_first_line(exc), width=width)) from None
    facts["skip"] = _has_skip(model, x)
    if not square:
        return facts
    first = square[0].weight
    first_before = _flat(tf._tolist(first))
    try:
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _step in range(30):
            opt.zero_grad()
            step_loss = F.mse_loss(model(x), y)
            step_loss.backward()
            opt.step()
            facts["losses"].append(float(step_loss.detach()))
        facts["losses"].append(float(F.mse_loss(model(x), y).detach()))
    except Exception as exc:
        facts["train_error"] = _first_line(exc)
    after = _flat(tf._tolist(first))
    size = math.sqrt(sum(v * v for v in first_before)) or 1.0
    facts["moved"] = math.sqrt(sum((a - b) ** 2 for a, b in zip(after, first_before, strict=True))) / size
    return facts


@lesson.register
class Q6DeepNet(WriteCode):
    qid = "q6"
    title = N_("A deep stack whose first layer learns")
    function_name = "deep_net"
    part_names = ["flow", "training"]

    def grade_code(self, fn, part, variant):
        depth, width, seed = (20, 6, 1) if variant == "hidden" else (24, 8, 0)
        detached = _uses(fn, "detach(")

        def fade_myth(facts):
            """A stack whose report fades: its skip path detached, or a plain stack."""
            if (facts["ratio"] or 0.0) >= 1e-2:
                return None
            return "residual_detach_harmless" if detached and not facts["skip"] else \
                "sigmoid_stack_healthy"

        module = _given(N_("return an `nn.Module`, not `{type}`"), "module")

        @module
        def shape(facts):
            ok = facts["square"] >= depth and facts.get("shape") == (32, width)
            return ok, _("found {found} `nn.Linear({width}, {width})` layers and an output of "
                         "shape {shape}; expected at least {depth} such layers and (32, {width})",
                         found=facts["square"], width=width, shape=facts.get("shape"),
                         depth=depth)

        @module
        def flow(facts):
            ratio = facts["ratio"]
            if ratio is None:
                return False, _("there is no `nn.Linear({width}, {width})` layer to measure",
                                width=width)
            if ratio < 1e-2:
                myth = fade_myth(facts)
                if myth == "residual_detach_harmless":
                    return False, _("the first layer's gradient is {ratio:.2g} times the last "
                                    "layer's: the report fades on its way back through the "
                                    "stack (the skip path is detached: it carries no report)",
                                    ratio=ratio), myth
                return False, _("the first layer's gradient is {ratio:.2g} times the last "
                                "layer's: the report fades on its way back through the stack",
                                ratio=ratio), myth
            if ratio > 1e2:
                return False, _("the first layer's gradient is {ratio:.2g} times the last "
                                "layer's: it grows on its way back", ratio=ratio), (
                    "residual_never_explodes" if facts["skip"] else None)
            return True, ""

        @module
        def learns(facts):
            if facts["train_error"]:
                return False, _("training raised {error}", error=facts["train_error"])
            losses = facts["losses"]
            if not losses:
                return False, _("there is no `nn.Linear({width}, {width})` layer to train",
                                width=width)
            if not all(math.isfinite(v) for v in losses) or losses[-1] > 10 * losses[0]:
                return False, _("in 30 SGD steps the loss went {start:.3g} -> {end:.3g}: it "
                                "exploded instead of vanishing (blocks that keep adding "
                                "unbounded values grow with depth: bound them, e.g. with "
                                "`tanh`, or normalise)", start=losses[0], end=losses[-1]), (
                    "residual_never_explodes" if facts["skip"] else None)
            ok = losses[-1] < losses[0] and facts["moved"] >= 1e-5
            return ok, _("in 30 SGD steps the loss went {start:.3g} -> {end:.3g} and the first "
                         "layer's weights moved by {moved:.2g} of their norm (need a falling "
                         "loss and at least 1e-5)", start=losses[0], end=losses[-1],
                         moved=facts["moved"]), fade_myth(facts)

        return score(self.qid, [
            Requirement(_("{depth} layers of width {width}: at least {depth} square layers, "
                          "input and output of width {width}", depth=depth, width=width),
                        shape, part="flow"),
            Requirement(_("{depth} layers of width {width}: the first layer's gradient is "
                          "within a factor 100 of the last layer's", depth=depth, width=width),
                        flow, part="flow"),
            Requirement(_("{depth} layers of width {width}: the loss falls and the first layer "
                          "learns", depth=depth, width=width), learns, part="training"),
        ], lambda: _measure_deep(fn, depth, width, seed))


# --------------------------------------------------------------------------- find the bug


def _reference_monitor(model, x, y):
    h = torch.tanh(model.embed(x))
    out = model.head(h)
    loss = F.mse_loss(out, y)
    gh, go = torch.autograd.grad(loss, [h, out], retain_graph=True)
    loss.backward()
    return {"hidden": float(gh.norm()), "output": float(go.norm())}


def _late_monitor_myth(fn: LearnerFunction):
    """Reading an empty desk: a monitor installed after backward(), or none at all."""
    src = fn.source
    backward = src.find(".backward(")
    monitor = src.rfind("retain_grad(")
    if monitor >= 0 and backward >= 0 and monitor > backward:
        return "retain_grad_after_backward"
    if monitor < 0 and "register_hook(" not in src:
        return "nonleaf_grad_stored"
    return None


@lesson.register
class Q7Monitor(WriteCode):
    qid = "q7"
    title = N_("Find the bug: the monitor that reads an empty desk (case 1)")
    function_name = "activation_grad_norms"
    starter = '''\
def activation_grad_norms(model, x, y):
    h = torch.tanh(model.embed(x))       # transit station: the hidden activation
    out = model.head(h)                  # transit station: the output
    loss = F.mse_loss(out, y)
    loss.backward()
    h.retain_grad()                      # install the monitors
    out.retain_grad()
    return {"hidden": h.grad.norm().item(), "output": out.grad.norm().item()}
'''

    def grade_code(self, fn, part, variant):
        ns = clinic()
        seed, width, pre = _patient(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["clinic_model"](seed, width)
        reference = copy.deepcopy(model)
        expected = _reference_monitor(reference, x, y)
        ref_grads = [tf.grad_values(r) for r in reference.parameters()]

        def norms(run):
            res = run.result
            if not isinstance(res, dict):
                return False, _("return a dict with the keys 'hidden' and 'output', not "
                                "{result}", result=repr(res))
            wrong = []
            for k, v in expected.items():
                got = _number(res.get(k))
                if got is None or not _close(got, v):
                    wrong.append(_("`{key}`: you returned {given}, torch says {value:.6g}", key=k,
                                   given=repr(res.get(k)), value=v))
            return not wrong, _findings(wrong)

        def params(run):
            mine = [(n, tf.grad_values(p)) for n, p in model.named_parameters()]
            bad = [n for (n, g), r in zip(mine, ref_grads, strict=True) if not _close(g, r)]
            if not bad:
                return True, ""
            if all(g is None for __, g in mine):
                return False, _("the parameters hold no gradient: `backward()` must run once "
                                "(`torch.autograd.grad` writes no `.grad`)")
            for k in (2, 3):
                if all(g is not None and _close(g, [v * k for v in _flat(r)])
                       for (__, g), r in zip(mine, ref_grads, strict=True)):
                    return False, _("the parameters hold {k} times one backward's gradient: "
                                    "backward ran {k} times and `.grad` adds up", k=k), \
                        "grad_accumulates_not"
            return False, _("{names} do not hold exactly one backward's gradient (backward must "
                            "run once, and the monitors must not change it)", names=_names(bad))

        def quiet(run):
            if not run.warnings:
                return True, ""
            myth = ("nonleaf_grad_silent" if any("not a leaf" in w for w in run.warnings)
                    else None)
            return False, _("your function warned: {warning}", warning=run.warnings[0]), myth

        return score(self.qid, [
            Requirement(_("{patient}the gradient norms at the hidden activation and the output",
                          patient=pre), norms),
            Requirement(_("{patient}the parameters got one backward's gradient", patient=pre),
                        params),
            Requirement(_("{patient}no warning (no `.grad` read off a transit station without a "
                          "monitor)", patient=pre), quiet),
        ], lambda: run_learner(fn, model, x, y),
            on_error=lambda exc: _late_monitor_myth(fn) if "NoneType" in exc.summary else None)


def _huber_batches(variant: str):
    g = torch.Generator().manual_seed(40 if variant == "hidden" else 41)
    pred = torch.randn(12, 1, generator=g)
    target = pred + torch.linspace(-2.5, 2.5, 12).unsqueeze(1)   # small and large errors
    return pred, target


def _clinic_forward(m, inputs):
    return m.head(torch.tanh(m.embed(inputs)))


@lesson.register
class Q8Huber(WriteCode):
    qid = "q8"
    title = N_("Find the bug: the loss that goes quiet near the target (case 2)")
    function_name = "huber_loss"
    part_names = ["gradient", "training"]
    starter = '''\
def huber_loss(pred, target):
    err = (pred - target).detach().abs()     # "only needed to choose the branch"
    small = err < 1.0
    quadratic = 0.5 * err ** 2
    linear = (pred - target).abs() - 0.5
    return torch.where(small, quadratic, linear).mean()
'''
    STEPS = 40

    def grade_code(self, fn, part, variant):
        seed, width, pre = _patient(variant)
        detached = _uses(fn, "detach(", ".data")
        # the reference, done by torch before any learner code runs
        pred0, target = _huber_batches(variant)
        ref_pred = pred0.clone().requires_grad_(True)
        F.huber_loss(ref_pred, target).backward()
        ref_grad = tf.grad_values(ref_pred)
        want = float(F.huber_loss(pred0, target))
        near = [i for i, d in enumerate(_flat(tf._tolist(pred0 - target))) if abs(d) < 1]
        ns = clinic()
        x, y = ns["clinic_problem"](seed)
        model = ns["clinic_model"](seed, width)
        reference = copy.deepcopy(model)
        start = float(F.huber_loss(_clinic_forward(model, x), y).detach())
        _sgd(reference, lambda m: F.huber_loss(_clinic_forward(m, x), y), self.STEPS, 0.1)
        ref_end = float(F.huber_loss(_clinic_forward(reference, x), y).detach())

        def run():
            pred = pred0.clone().requires_grad_(True)
            value = run_learner(fn, pred, target).result
            try:
                value.backward()
            except Exception as exc:
                raise _crash(exc, _("{error} (when backward ran from the loss your function "
                                    "returned)", error=_first_line(exc))) from None
            facts = {"value": _number(value), "grad": tf.grad_values(pred), "error": None}
            loss_fn = define_learner(fn)
            watch = Watch(model)
            try:
                _sgd(model, lambda m: loss_fn(_clinic_forward(m, x), y), self.STEPS, 0.1)
            except Exception as exc:
                facts["error"] = _first_line(exc)
            finally:
                watch.close()
            facts["watch"] = watch
            facts["end"] = float(F.huber_loss(_clinic_forward(model, x), y).detach())
            return facts

        def value_ok(facts):
            got = facts["value"]
            if got is None:
                return False, _("return the loss as a one-element tensor")
            return _close(got, want), _("your loss is {got:.6g}, `F.huber_loss` says {want:.6g}",
                                        got=got, want=want)

        def grad_ok(facts):
            g = facts["grad"]
            if _close(g, ref_grad):
                return True, ""
            flat = _flat(g) if g is not None else []
            dead = [i for i in near if flat and flat[i] == 0.0 and _flat(ref_grad)[i] != 0.0]
            if dead:
                return False, _("the {n} predictions within 1.0 of their target get gradient 0: "
                                "that branch is computed from a detached tensor, so its route "
                                "back is cut", n=len(dead)), (
                    "detach_in_loss_harmless" if detached else None)
            return False, _("the gradient with respect to the predictions differs from "
                            "`F.huber_loss`'s")

        def fed(facts):
            if facts["error"]:
                return False, _("training raised {error}", error=facts["error"])
            statuses = facts["watch"].statuses()
            starved = _starved_text(statuses)
            return not starved, _("no useful report reaches {starved}", starved=starved)

        def trains(facts):
            if facts["error"]:
                return False, _("training raised {error}", error=facts["error"])
            end = facts["end"]
            return _same_end(end, ref_end), _fall_text(start, end, ref_end, self.STEPS), (
                "detach_in_loss_harmless" if detached and end > ref_end else None)

        return score(self.qid, [
            Requirement(_("{patient}the value equals `F.huber_loss`", patient=pre), value_ok,
                        part="gradient"),
            Requirement(_("{patient}every prediction gets `F.huber_loss`'s gradient, near the "
                          "target too", patient=pre), grad_ok, part="gradient"),
            Requirement(_("{patient}every parameter receives a gradient while training",
                          patient=pre), fed, part="training"),
            Requirement(_("{patient}{steps} SGD steps with your loss end where they end with "
                          "`F.huber_loss`", patient=pre, steps=self.STEPS), trains,
                        part="training"),
        ], run, on_error=lambda exc: ("detach_in_loss_harmless" if detached
                                      and "does not require grad" in exc.summary else None))


def _cut_myth(fn: LearnerFunction) -> str | None:
    """The switch that cut a route in the learner's code."""
    if _uses(fn, "no_grad"):
        return "no_grad_branch_counts"
    if _uses(fn, "detach(", ".data"):
        return "detach_keeps_grad"
    return None


@lesson.register
class Q9NoGrad(WriteCode):
    qid = "q9"
    title = N_("Find the bug: monitoring switched off on the first stretch (case 3)")
    function_name = "train"
    part_names = ["gradients", "training"]
    starter = '''\
def train(model, x, y, steps=30):
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with torch.no_grad():                # "the embedding needs no history: save memory"
            h = torch.tanh(model.embed(x))
        loss = F.mse_loss(model.head(h), y)
        loss.backward()
        with torch.no_grad():                # a tutorial: "step() here is the wrong place"
            opt.step()
        losses.append(loss.item())
    return losses
'''

    def grade_code(self, fn, part, variant):
        ns = clinic()
        seed, width, pre = _patient(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["clinic_model"](seed, width)
        reference = copy.deepcopy(model)

        def measure(m):
            with torch.no_grad():
                return float(F.mse_loss(_clinic_forward(m, x), y))

        start = measure(model)
        _sgd(reference, lambda m: F.mse_loss(_clinic_forward(m, x), y), 30, 0.2)
        ref_end = measure(reference)
        watch = Watch(model)

        def run():
            try:
                run_learner(fn, model, x, y)
            finally:
                watch.close()
            return measure(model)

        def why_stuck(end) -> tuple[str, str | None]:
            if watch.cleared():
                return (_("Every parameter got its report (the checker's probes saw it), but "
                          "`.grad` is `None` when `step()` runs: `zero_grad()` sits between "
                          "`backward()` and `step()`"), "zero_grad_misplaced")
            piled = watch.piled_up()
            if piled:
                return (_("The `.grad` of {names} holds the sum of every step's report: "
                          "`zero_grad()` no longer clears the desk at each step",
                          names=_names(piled)), "zero_grad_misplaced")
            if any(s == "none" for s in watch.statuses().values()):
                return "", _cut_myth(fn)
            return "", None

        def fed(end):
            statuses = watch.statuses()
            if all(s == "none" for s in statuses.values()):
                return False, _("no parameter received a gradient: `backward()` never ran")
            starved = _starved_text(statuses)
            return not starved, _("no useful report reaches {starved}", starved=starved), \
                _cut_myth(fn)

        def moved(end):
            still = watch.unmoved()
            if not still:
                return True, ""
            why, myth = why_stuck(end)
            if why:
                return False, _("never moved: {names}. {why}", names=_names(still), why=why), myth
            return False, _("never moved: {names}", names=_names(still)), myth

        def falls(end):
            if _same_end(end, ref_end):
                return True, ""
            why, myth = why_stuck(end)
            fall = _fall_text(start, end, ref_end, 30)
            if why:
                return False, _("{fall}. {why}", fall=fall, why=why), myth
            return False, fall, myth

        return score(self.qid, [
            Requirement(_("{patient}every parameter receives a non-zero gradient", patient=pre),
                        fed, part="gradients"),
            Requirement(_("{patient}every parameter moves", patient=pre), moved,
                        part="training"),
            Requirement(_("{patient}the loss ends where the reference run's ends (the same "
                          "loop, every parameter recorded)", patient=pre), falls,
                        part="training"),
        ], run)


def _forward_inplace_reference(model, x):
    return model.head(torch.tanh(model.embed(x)).clamp(min=0))


@lesson.register
class Q10InPlace(WriteCode):
    qid = "q10"
    title = N_("Find the bug: negatives wiped in place (case 4)")
    function_name = "forward"
    part_names = ["gradients", "training"]
    starter = '''\
def forward(model, x):
    h = torch.tanh(model.embed(x))
    h[h < 0] = 0                             # wipe the negative activations
    return model.head(h)
'''

    def grade_code(self, fn, part, variant):
        ns = clinic()
        seed, width, pre = _patient(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["clinic_model"](seed, width)
        hidden_edit = _uses(fn, ".data", ".numpy(")
        # the reference, done by torch before any learner code runs
        reference = copy.deepcopy(model)
        ref_out = _forward_inplace_reference(reference, x)
        names = [n for n, __ in _trainable(reference)]
        ref_grads = [tf._tolist(g) for g in torch.autograd.grad(
            F.mse_loss(ref_out, y), [p for __, p in _trainable(reference)])]
        ref_out = tf._tolist(ref_out.detach())
        with torch.no_grad():
            unclamped = tf._tolist(_clinic_forward(model, x))
            start = float(F.mse_loss(_forward_inplace_reference(model, x), y))
        _sgd(reference, lambda m: F.mse_loss(_forward_inplace_reference(m, x), y), 30, 0.2)
        with torch.no_grad():
            ref_end = float(F.mse_loss(_forward_inplace_reference(reference, x), y))

        def run():
            out = run_learner(fn, model, x).result
            if not tf.is_tensor(out):
                return {"out": None, "type": type(out).__name__}
            try:
                grads = torch.autograd.grad(F.mse_loss(out, y),
                                            [p for __, p in _trainable(model)], allow_unused=True)
            except Exception as exc:
                raise _crash(exc, _("{error} (when backward ran through your output)",
                                    error=_first_line(exc))) from None
            facts = {"out": tf._tolist(out.detach()),
                     "grads": [None if g is None else tf._tolist(g) for g in grads],
                     "error": None}
            forward = define_learner(fn)
            watch = Watch(model)
            try:
                _sgd(model, lambda m: F.mse_loss(forward(m, x), y), 30, 0.2)
            except Exception as exc:
                facts["error"] = _first_line(exc)
            finally:
                watch.close()
            facts["watch"] = watch
            with torch.no_grad():
                facts["end"] = float(F.mse_loss(_forward_inplace_reference(model, x), y))
            return facts

        tensor = _given(N_("return the output tensor, not `{type}`"))

        @tensor
        def values(facts):
            out = facts["out"]
            if _close(out, ref_out):
                return True, ""
            if _close(out, unclamped):
                return False, _("your output is `head(tanh(embed(x)))`: the negative activations "
                                "are no longer set to 0")
            return False, _("your output differs from it")

        @tensor
        def gradients(facts):
            bad = [n for n, g, r in zip(names, facts["grads"], ref_grads, strict=True)
                   if not _close(g, r)]
            if not bad:
                return True, ""
            missing = [n for n, g in zip(names, facts["grads"], strict=True) if g is None]
            if missing:
                return False, _("{names} get no gradient (`None`: no route back)",
                                names=_names(missing)), _cut_myth(fn)
            if hidden_edit:
                return False, _("the gradient of {names} differs from torch's: the edit through "
                                "`.data` was hidden from autograd, so backward used the edited "
                                "`tanh` output and let the wiped entries pass gradient back to "
                                "`embed`", names=_names(bad)), "data_is_safe"
            return False, _("the gradient of {names} differs from torch's", names=_names(bad))

        @tensor
        def moved(facts):
            if facts["error"]:
                return False, _("training raised {error}", error=facts["error"]), \
                    diagnose_error(facts["error"].split(":")[0], facts["error"])
            still = facts["watch"].unmoved()
            return not still, _("never moved: {names}", names=_names(still)), _cut_myth(fn)

        @tensor
        def falls(facts):
            if facts["error"]:
                return False, _("training raised {error}", error=facts["error"])
            end = facts["end"]
            return _same_end(end, ref_end), _fall_text(start, end, ref_end, 30), (
                "data_is_safe" if hidden_edit else None)

        def on_error(exc):
            if "modified by an inplace operation" in exc.summary and _uses(fn, "no_grad"):
                return "no_grad_edit_unchecked"
            return None

        return score(self.qid, [
            Requirement(_("{patient}the output keeps the negatives wiped (the values of "
                          "`head(tanh(embed(x)).clamp(min=0))`)", patient=pre),
                        values, part="gradients"),
            Requirement(_("{patient}every parameter gets the gradient torch computes for "
                          "`head(tanh(embed(x)).clamp(min=0))`", patient=pre),
                        gradients, part="gradients"),
            Requirement(_("{patient}every parameter moves in {steps} SGD steps", patient=pre,
                          steps=30), moved, part="training"),
            Requirement(_("{patient}the loss ends where the reference run's ends", patient=pre),
                        falls, part="training"),
        ], run, on_error=on_error)


def _forward_gate_reference(model, x):
    h = torch.tanh(model.embed(x))
    g = torch.sigmoid(model.gate(h))
    return g * model.fine(h) + (1 - g) * model.coarse(h)


def _gate_myth(fn: LearnerFunction, statuses: dict[str, str]) -> str | None:
    """A hard choice (a comparison: no route to the gate, zeros to the unpicked branch), or a
    route kept but carrying zeros (`0 * gate(h)`), taken for a gradient that trains."""
    if _uses(fn, ">", "<", "where(", "argmax(", ".round(", "sign("):
        return "hard_choice_trains"
    if any(s == "zero" for s in statuses.values()):
        return "grad_none_check_enough"
    return None


@lesson.register
class Q11Gate(WriteCode):
    qid = "q11"
    title = N_("Find the bug: the gate that never learns (case 5)")
    function_name = "gated_forward"
    part_names = ["gradients", "training"]
    starter = '''\
def gated_forward(model, x):
    h = torch.tanh(model.embed(x))
    choose_fine = model.gate(h) > 0          # per parcel: fine or coarse?
    return torch.where(choose_fine, model.fine(h), model.coarse(h))
'''
    STEPS = 40

    def grade_code(self, fn, part, variant):
        ns = clinic()
        seed, width, pre = _patient(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["gated_model"](seed, width)
        reference = copy.deepcopy(model)
        with torch.no_grad():
            ref_start = float(F.mse_loss(_forward_gate_reference(reference, x), y))
        _sgd(reference, lambda m: F.mse_loss(_forward_gate_reference(m, x), y), self.STEPS, 0.2)
        with torch.no_grad():
            ref_end = float(F.mse_loss(_forward_gate_reference(reference, x), y))

        def run():
            out = run_learner(fn, model, x).result
            if not tf.is_tensor(out):
                return {"out": None, "type": type(out).__name__}
            try:
                statuses = _statuses(model, F.mse_loss(out, y))
            except Exception as exc:
                raise _crash(exc, _("{error} (when backward ran through your output)",
                                    error=_first_line(exc))) from None
            facts = {"out": out, "statuses": statuses, "error": None}
            forward = define_learner(fn)
            with torch.no_grad():
                facts["start"] = float(F.mse_loss(forward(model, x), y))
            watch = Watch(model)
            try:
                _sgd(model, lambda m: F.mse_loss(forward(m, x), y), self.STEPS, 0.2)
                with torch.no_grad():
                    facts["end"] = float(F.mse_loss(forward(model, x), y))
            except Exception as exc:
                facts["error"] = _first_line(exc)
            finally:
                watch.close()
            facts["watch"] = watch
            return facts

        tensor = _given(N_("return the output tensor, not `{type}`"))

        @tensor
        def fed(facts):
            starved = _starved_text(facts["statuses"])
            return not starved, _("no useful report reaches {starved}", starved=starved), \
                _gate_myth(fn, facts["statuses"])

        @tensor
        def moved(facts):
            if facts["error"]:
                return False, _("training raised {error}", error=facts["error"])
            still = facts["watch"].unmoved()
            return not still, _("never moved: {names}", names=_names(still)), \
                _gate_myth(fn, facts["watch"].statuses())

        @tensor
        def falls(facts):
            if facts["error"]:
                return False, _("training raised {error}", error=facts["error"])
            start, end = facts["start"], facts["end"]
            # each run's fall from its own start (a soft gate starts elsewhere than a hard one)
            ok = math.isfinite(end) and (start - end) >= 0.9 * (ref_start - ref_end)
            return ok, _("in {steps} SGD steps your run took the loss from {start:.4g} to "
                         "{end:.4g}, a fall of {fall:.3g}; the soft gate's reference run falls "
                         "by {ref_fall:.3g}", steps=self.STEPS, start=start, end=end,
                         fall=start - end, ref_fall=ref_start - ref_end), _gate_myth(
                fn, facts["watch"].statuses())

        return score(self.qid, [
            Requirement(_("{patient}`embed`, `gate`, `fine` and `coarse` all get a non-zero "
                          "gradient", patient=pre), fed, part="gradients"),
            Requirement(_("{patient}every parameter moves in {steps} SGD steps", patient=pre,
                          steps=self.STEPS), moved, part="training"),
            Requirement(_("{patient}the loss falls at least 90 % as far as with the soft gate "
                          "`g * fine + (1 - g) * coarse`", patient=pre), falls,
                        part="training"),
        ], run)
