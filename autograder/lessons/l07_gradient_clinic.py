"""Lesson 07, the gradient clinic: the questions of ``source/07_gradient_clinic/07_gradient_clinic.ipynb``.

Seed 004's five "where did my gradient go?" scenarios, plus true vanishing gradients, as
debugging cases. Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the facts with
:mod:`autograder.torchfacts`; a find-the-bug question runs the learner's repaired function for a
few dozen training steps on a fixed-seed tiny problem, next to a reference run done by torch at
the same moment, and compares what each parameter received and how far the loss fell (never
typed-in numbers).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName
from autograder.questions import (
    Finding,
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    Verdict,
    WriteCode,
    define_learner,
    learner_namespace,
    myth_text,
    run_learner,
    score_requirements,
    values_equal,
)

lesson = Lesson("07_gradient_clinic", "The gradient clinic")

A = "07_gradient_clinic"


def _error(ns: dict, name: str):
    err = ns.get(name)
    return None if err is None else ExceptionName(type(err).__name__)


# --------------------------------------------------------------------------- predict

ALARM = """\
class Router(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Linear(2, 1)
        self.side = nn.Linear(2, 1)

    def forward(self, x):
        return self.main(x) + self.side(x) * 0.0    # the side route is switched off

def check_grad_flow(model):                         # seed 000's alarm
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

_ALL_ROUTER = ["main.weight", "main.bias", "side.weight", "side.bias"]


def _alarm_backward_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and any(str(n).startswith("side") for n in given):
        return "zero_gradient_is_none"
    return "grad_none_check_enough"


def _side_grad_myth(given: Any, expected: Any) -> str | None:
    return "zero_gradient_is_none" if given is None else None


def _zero_grad_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and len(given) < len(expected):
        return "zero_grad_fills_zeros"
    return None


@lesson.register
class Q1Alarm(Predict):
    qid = "q1"
    title = "The seed's alarm"
    code = ALARM
    items = [
        Item("after_backward", "every parameter took part in the forward pass, so backward "
             "stored a gradient on each: the side route's gradient is a tensor of zeros, not "
             "None. The alarm stays silent although side never learns. Give the list of names "
             "in named_parameters() order ([] for none).", _alarm_backward_myth, part="zeros"),
        Item("side_grad", "side(x) * 0.0 is a recorded multiplication: the route back to side "
             "exists and carries 0. The report arrives, and says 0.", _side_grad_myth,
             part="zeros"),
        Item("after_zero_grad", "since torch 2.0, zero_grad() sets every .grad to None "
             "(set_to_none=True): right after it, the alarm names every parameter, healthy or "
             "not. Give the names in named_parameters() order.", _zero_grad_myth,
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
with torch.no_grad():             # seed 004: "step() in the wrong place"
    opt.step()
"""


def _mul_myth(given: Any, expected: Any) -> str | None:
    return "inplace_always_fatal" if given is not None else None


def _sigmoid_myth(given: Any, expected: Any) -> str | None:
    return "inplace_grad_none" if given is None else None


def _d_myth(given: Any, expected: Any) -> str | None:
    return "no_grad_branch_counts" if given is not None else None


def _e_myth(given: Any, expected: Any) -> str | None:
    return "no_grad_result_unusable" if given is None else None


def _step_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and values_equal(given, [1.0, -1.0]):
        return "step_inside_no_grad_breaks"
    return None


@lesson.register
class Q2Loud(Predict):
    qid = "q2"
    title = "In-place and no_grad(): loud, silent or harmless?"
    code = LOUD
    items = [
        Item("error_mul", "mul by a number saves nothing of z for backward, so changing z in "
             "place breaks nothing: backward runs and a.grad = 3 * b. Answer RuntimeError or "
             "None.", _mul_myth, part="inplace"),
        Item("error_sigmoid", "sigmoid saved its output s for backward; s.mul_(2) bumped its "
             "version counter, so backward raises RuntimeError ('modified by an inplace "
             "operation'). It never silently drops the gradient.", _sigmoid_myth,
             part="inplace"),
        Item("d.grad", "the route through d was never recorded (doubled has no grad_fn): d gets "
             "nothing, silently. Answer None or a list.", _d_myth, part="no_grad"),
        Item("e.grad", "doubled works as a constant (bottled sauce): e still gets its gradient, "
             "d(sum(doubled * e))/de = doubled = [2.0, 4.0].", _e_myth, part="no_grad"),
        Item("w", "step() already switches grad off while it updates, so the extra no_grad() "
             "changes nothing: w - 0.5 * 2w = 0. Give the values as a list.", _step_myth,
             part="no_grad"),
    ]

    def facts(self, ns):
        return {
            "error_mul": _error(ns, "error_mul"),
            "error_sigmoid": _error(ns, "error_sigmoid"),
            "d.grad": tf.grad_values(ns["d"]),
            "e.grad": tf.grad_values(ns["e"]),
            "w": tf._tolist(ns["w"]),
        }


BRANCH = """\
def tricky_forward(x, flag):      # seed 004, scenario 5
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
    if isinstance(given, list) and any(g is None for g in given):
        return "zero_gradient_is_none"
    return None


@lesson.register
class Q3Branch(Predict):
    qid = "q3"
    title = "The branch that multiplies by zero"
    code = BRANCH
    items = [
        Item("grads", "x * 0 is a recorded multiplication: backward reaches x and stores 0.0 "
             "(so .item() works). Give the four floats as a list.", _grads_myth, part="zero"),
        Item("y_off.grad_fn", "x * 0 records MulBackward0 like any product: the route exists, "
             "it just carries 0. Give the class name as a string.", "zero_gradient_is_none",
             part="zero"),
        Item("y_cut.requires_grad", "x.detach() has no history, so nothing computed from it "
             "requires grad: this is the branch that gives None (and makes backward raise), "
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
            h = h.detach() + out       # seed 001's identity.detach()
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


def _fade_myth(name: str):
    def choose(given: Any, expected: Any) -> str | None:
        if not isinstance(given, bool):
            return None
        if name == "sigmoid":
            return "sigmoid_stack_healthy"
        if name == "relu_residual_detached":
            return "residual_detach_harmless"
        return "residual_fades"
    return choose


@lesson.register
class Q4Fade(Predict):
    qid = "q4"
    title = "Which stacks fade?"
    code = FADE
    items = [
        Item("sigmoid", "sigmoid's slope is at most 0.25: twelve plain sigmoid layers multiply "
             "the gradient by small factors twelve times, and the first layer gets almost "
             "nothing.", _fade_myth("sigmoid")),
        Item("sigmoid_residual", "h + sigmoid(layer(h)) has Jacobian I + (small): the identity "
             "route carries the gradient past every block unchanged, whatever the activation.",
             _fade_myth("sigmoid_residual")),
        Item("relu_residual", "the skip path carries the gradient from the last block to the "
             "first untouched.", _fade_myth("relu_residual")),
        Item("relu_residual_detached", "with h.detach() the skip path carries no gradient: only "
             "the product of the layers' own Jacobians is left, as in a plain stack.",
             _fade_myth("relu_residual_detached")),
    ]

    def facts(self, ns):
        return {k: bool(v) for k, v in ns["fades"].items()}


# --------------------------------------------------------------------------- shared problem

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


def _setting(variant: str) -> tuple[int, int]:
    """(seed, width) of the visible and the hidden checks."""
    return (1, 6) if variant == "hidden" else (0, 8)


def _flat(values: Any) -> list[float]:
    if isinstance(values, list):
        return [v for item in values for v in _flat(item)]
    return [float(values)]


def _close(a: Any, b: Any, rtol: float = 1e-4, atol: float = 1e-6) -> bool:
    if a is None or b is None:
        return a is None and b is None
    fa, fb = _flat(a), _flat(b)
    return len(fa) == len(fb) and all(
        math.isfinite(x) and abs(x - y) <= atol + rtol * abs(y) for x, y in zip(fa, fb, strict=True))


def _max_abs(values: Any) -> float:
    flat = _flat(values)
    return max((abs(v) for v in flat), default=0.0)


class Watch:
    """Parameter hooks recording the largest |gradient| each parameter received, and a snapshot
    of the values, to tell afterwards who got a gradient (None, zero, non-zero) and who moved."""

    def __init__(self, model):
        self.params = [(n, p) for n, p in model.named_parameters() if tf.requires_grad(p)]
        self.largest: dict[str, float | None] = {n: None for n, _ in self.params}
        self.before = {n: tf._tolist(p) for n, p in self.params}
        self.handles = [p.register_hook(self._hook(n)) for n, p in self.params]

    def _hook(self, name: str):
        def hook(grad):
            m = _max_abs(tf._tolist(grad))
            old = self.largest[name]
            self.largest[name] = m if old is None else max(old, m)
        return hook

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def starved(self) -> list[str]:
        """Parameters that never received a non-zero gradient, with what they got instead."""
        out = []
        for name, m in self.largest.items():
            if m is None:
                out.append(f"{name} (None: no route back)")
            elif m == 0.0:
                out.append(f"{name} (zeros)")
        return out

    def unmoved(self) -> list[str]:
        return [n for n, p in self.params if tf._tolist(p) == self.before[n]]


def _score(qid: str, checks: list[tuple[str, str, Any, str | None]], part: str | None) -> Verdict:
    """Score ``(part, text, test, myth)`` checks of ``part``; ``test()`` -> ``(ok, detail)``.
    The tests close over what the grader measured, so the framework's scorer gets no run."""
    return score_requirements(qid, None, [
        Requirement(text, lambda _run, test=test: test(), myth, p) for p, text, test, myth in checks
    ], part)


def _failed(qid: str, text: str, myth: str | None = None) -> Verdict:
    if myth:
        text += f" [Misconception: {myth_text(myth)}.]"
    return Verdict(qid, [Finding(False, text, misconception=myth)])


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) > 160:
        first = first[:157].rsplit(" ", 1)[0] + " ..."
    return f"{type(exc).__name__}: {first}"


def _sgd_run(model, forward, loss_fn, x, y, steps: int, lr: float):
    """The grader's own training loop around a forward / a loss: losses before and after."""
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        loss_fn(forward(model, x), y).backward()
        opt.step()


# --------------------------------------------------------------------------- write code: report


def _report_cases(variant: str):
    """(description, model, loss, stale) cases for grad_flow_report; ``stale``: leave earlier
    gradients in .grad before the call."""
    import torch
    import torch.nn.functional as F

    ns = clinic()
    seed, width = _setting(variant)
    x, y = ns["clinic_problem"](seed)
    cases = []

    gated = ns["gated_model"](seed, width)
    gated.fine.bias.requires_grad_(False)           # frozen: not to be reported
    h = torch.tanh(gated.embed(x))
    loss = F.mse_loss(torch.where(gated.gate(h) > 0, gated.fine(h), gated.coarse(h)), y)
    cases.append(("a hard gate, right after zero_grad()", gated, loss, False))

    model = ns["clinic_model"](seed, width)
    model.spare = torch.nn.Linear(4, 1)             # registered, never used
    h = torch.relu(model.embed(x) - 100.0)          # every ReLU dead: zero gradients upstream
    loss = F.mse_loss(model.head(h), y)
    cases.append(("dead ReLUs and an unused layer", model, loss, variant == "hidden"))

    if variant == "hidden":
        healthy = ns["clinic_model"](seed + 5, width)
        loss = F.mse_loss(healthy.head(torch.tanh(healthy.embed(x))), y)
        cases.append(("a healthy model with last step's gradients still in .grad", healthy,
                      loss, True))
    return cases


def _reference_statuses(model, loss) -> dict[str, str]:
    import torch

    named = [(n, p) for n, p in model.named_parameters() if tf.requires_grad(p)]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True,
                                retain_graph=True)
    out = {}
    for (n, _), g in zip(named, grads, strict=True):
        out[n] = "none" if g is None else "zero" if _max_abs(tf._tolist(g)) == 0.0 else "ok"
    return out


def _stale_grads(model, x_shape) -> None:
    """Fill .grad with an earlier step's (non-zero) gradients, as a loop without zero_grad."""
    import torch

    torch.manual_seed(99)
    for p in model.parameters():
        if tf.requires_grad(p):
            p.grad = torch.randn_like(p)


@lesson.register
class Q5Report(WriteCode):
    qid = "q5"
    title = "An alarm that tells None from zero"
    function_name = "grad_flow_report"
    part_names = ["statuses", "hygiene"]

    def grade_code(self, fn, part, variant):
        import torch

        checks = []
        for desc, model, loss, stale in _report_cases(variant):
            if stale:
                _stale_grads(model, None)
            expected = _reference_statuses(model, loss)
            before = {n: tf.grad_values(p) for n, p in model.named_parameters()}
            try:
                run = run_learner(fn, model, loss)
                result, error = run.result, None
            except LearnerCodeError as exc:
                result, error = None, exc.summary

            def statuses(result=result, error=error, expected=expected):
                if error:
                    return False, f"your function raised {error}"
                if not isinstance(result, dict):
                    return False, f"return a dict of name -> status, not {type(result).__name__}"
                wrong = [f"{n}: you said {result.get(n)!r}, torch says {s!r}"
                         for n, s in expected.items() if result.get(n) != s]
                extra = sorted(set(result) - set(expected))
                if extra:
                    wrong.append(f"{extra} should not be reported (frozen, or not a parameter)")
                return not wrong, "; ".join(wrong)

            def untouched(error=error, model=model, before=before):
                if error:
                    return False, f"your function raised {error}"
                changed = [n for n, p in model.named_parameters()
                           if not _same_grad(tf.grad_values(p), before[n])]
                return not changed, (f"the .grad of {changed} changed: the alarm must read "
                                     "the gradients without writing any")

            def graph_kept(error=error, model=model, loss=loss):
                if error:
                    return False, f"your function raised {error}"
                try:
                    torch.autograd.grad(loss, [p for p in model.parameters()
                                               if tf.requires_grad(p)], allow_unused=True)
                except RuntimeError as exc:
                    return False, (f"afterwards the training step's own backward() fails "
                                   f"({_first_line(exc)}): keep the graph (retain_graph=True)")
                return True, ""

            checks += [
                ("statuses", f"{desc}: every trainable parameter gets the right status",
                 statuses, "grad_none_check_enough"),
                ("hygiene", f"{desc}: .grad left exactly as it was", untouched,
                 "grad_none_check_enough" if stale else None),
                ("hygiene", f"{desc}: the loss can still be backpropagated", graph_kept,
                 "graph_survives_backward"),
            ]
        return _score(self.qid, checks, part)


def _same_grad(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return _flat(a) == _flat(b)


# --------------------------------------------------------------------------- write code: deep


def _deep_data(width: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(200 + seed)
    x = torch.randn(32, width, generator=g)
    y = torch.tanh(x @ torch.randn(width, width, generator=g) / math.sqrt(width))
    return x, y


@lesson.register
class Q6DeepNet(WriteCode):
    qid = "q6"
    title = "A deep stack whose first layer learns"
    function_name = "deep_net"
    part_names = ["flow", "training"]

    def grade_code(self, fn, part, variant):
        import torch
        import torch.nn.functional as F

        depth, width, seed = (20, 6, 1) if variant == "hidden" else (24, 8, 0)
        torch.manual_seed(seed)
        try:
            run = run_learner(fn, depth, width)
        except LearnerCodeError as exc:
            return _failed(self.qid, f"Your function raised {exc.summary}")
        model = run.result
        if not isinstance(model, torch.nn.Module):
            return _failed(self.qid, f"deep_net must return an nn.Module, not "
                                     f"{type(model).__name__}")
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        square = [m for m in linears if tuple(m.weight.shape) == (width, width)]
        x, y = _deep_data(width, seed)
        try:
            out = model(x)
            loss = F.mse_loss(out, y)
            first, last = square[0].weight, square[-1].weight
            g_first, g_last = torch.autograd.grad(loss, [first, last])
            n_first = math.sqrt(sum(v * v for v in _flat(tf._tolist(g_first))))
            n_last = math.sqrt(sum(v * v for v in _flat(tf._tolist(g_last))))
        except Exception as exc:
            return _failed(self.qid, f"Running your network on a ({32}, {width}) batch failed: "
                                     f"{_first_line(exc)}")
        ratio = n_first / n_last if n_last > 0 else 0.0
        first_before = tf._tolist(first)
        losses = []
        try:
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            for _ in range(30):
                opt.zero_grad()
                step_loss = F.mse_loss(model(x), y)
                step_loss.backward()
                opt.step()
                losses.append(float(step_loss.detach()))
            losses.append(float(F.mse_loss(model(x), y).detach()))
        except Exception as exc:
            losses = [float("nan")]
            train_error = _first_line(exc)
        else:
            train_error = None
        moved = math.sqrt(sum((a - b) ** 2 for a, b in zip(_flat(tf._tolist(first)),
                                                             _flat(first_before), strict=True)))
        size = math.sqrt(sum(v * v for v in _flat(first_before))) or 1.0

        def shape():
            ok = len(square) >= depth and tuple(out.shape) == (32, width)
            return ok, (f"found {len(square)} Linear({width}, {width}) layers and an output of "
                        f"shape {tuple(out.shape)}; expected at least {depth} such layers and "
                        f"(32, {width})")

        def flow():
            ok = 1e-2 <= ratio <= 1e2
            return ok, (f"the first layer's gradient norm is {ratio:.2g} times the last "
                        "layer's; it should be between 0.01 and 100 times")

        def learns():
            if train_error:
                return False, f"training raised {train_error}"
            if not all(math.isfinite(v) for v in losses):
                return False, (f"in 30 SGD steps the loss went {losses[0]:.3g} -> "
                               f"{losses[-1]:.3g}: the gradients exploded instead of vanishing "
                               "(blocks that keep adding unbounded values grow with depth: "
                               "bound them, e.g. with tanh, or normalise)")
            ok = losses[-1] < losses[0] and moved / size >= 1e-5
            return ok, (f"in 30 SGD steps the loss went {losses[0]:.3g} -> {losses[-1]:.3g} and "
                        f"the first layer's weights moved by {moved / size:.2g} of their norm "
                        "(need a falling loss and at least 1e-5)")

        return _score(self.qid, [
            ("flow", f"{depth} square layers, input and output of width {width}", shape, None),
            ("flow", "the first layer's gradient is within a factor 100 of the last layer's",
             flow, "sigmoid_stack_healthy"),
            ("training", "the loss falls and the first layer learns", learns,
             "sigmoid_stack_healthy"),
        ], part)


# --------------------------------------------------------------------------- find the bug

def _reference_monitor(model, x, y):
    import torch
    import torch.nn.functional as F

    h = torch.tanh(model.embed(x))
    out = model.head(h)
    loss = F.mse_loss(out, y)
    gh, go = torch.autograd.grad(loss, [h, out], retain_graph=True)
    loss.backward()
    return {"hidden": float(gh.norm()), "output": float(go.norm())}


@lesson.register
class Q7Monitor(WriteCode):
    qid = "q7"
    title = "Find the bug: the monitor that reads an empty desk (case 1)"
    function_name = "activation_grad_norms"

    def grade_code(self, fn, part, variant):
        ns = clinic()
        seed, width = _setting(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["clinic_model"](seed, width)
        reference = copy.deepcopy(model)
        expected = _reference_monitor(reference, x, y)
        try:
            run = run_learner(fn, model, x, y)
        except LearnerCodeError as exc:
            myth = "retain_grad_after_backward" if "NoneType" in exc.summary else None
            return _failed(self.qid, f"Your function raised {exc.summary}", myth)
        res = run.result

        def norms():
            if not isinstance(res, dict):
                return False, f"return a dict with the keys 'hidden' and 'output', not {res!r}"
            wrong = [f"{k}: you returned {res.get(k)!r}, torch says {v:.6g}"
                     for k, v in expected.items()
                     if not isinstance(res.get(k), int | float) or not _close(res.get(k), v)]
            return not wrong, "; ".join(wrong)

        def params():
            pairs = list(zip(model.named_parameters(), reference.parameters(), strict=True))
            wrong = [n for (n, p), r in pairs
                     if not _close(tf.grad_values(p), tf.grad_values(r))]
            return not wrong, (f"{wrong} do not hold exactly one backward's gradient (backward "
                               "must run once, and the monitors must not change it)")

        def quiet():
            return not run.warnings, f"your function warned: {run.warnings}"

        return _score(self.qid, [
            ("main", "the gradient norms at the hidden activation and the output", norms,
             "retain_grad_after_backward"),
            ("main", "the parameters got one backward's gradient", params, None),
            ("main", "no warning (no .grad read off a transit station without a monitor)", quiet,
             "nonleaf_grad_silent"),
        ], part)


def _huber_batches(variant: str):
    import torch

    g = torch.Generator().manual_seed(40 if variant == "hidden" else 41)
    pred = torch.randn(12, 1, generator=g)
    target = pred + torch.linspace(-2.5, 2.5, 12).unsqueeze(1)   # small and large errors
    return pred, target


@lesson.register
class Q8Huber(WriteCode):
    qid = "q8"
    title = "Find the bug: the loss that goes quiet near the target (case 2)"
    function_name = "huber_loss"
    part_names = ["gradient", "training"]

    def grade_code(self, fn, part, variant):
        import torch
        import torch.nn.functional as F

        try:
            loss_fn = define_learner(fn)
        except LearnerCodeError as exc:
            return _failed(self.qid, f"Your function failed: {exc.summary}")

        pred0, target = _huber_batches(variant)
        ref_pred = pred0.clone().requires_grad_(True)
        F.huber_loss(ref_pred, target).backward()
        pred = pred0.clone().requires_grad_(True)
        try:
            value = loss_fn(pred, target)
            value.backward()
            grad, got = tf.grad_values(pred), float(value.detach())
            error = None
        except Exception as exc:
            grad, got, error = None, float("nan"), _first_line(exc)
        want = float(F.huber_loss(pred0, target))

        ns = clinic()
        seed, width = _setting(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["clinic_model"](seed, width)
        reference = copy.deepcopy(model)

        def forward(m, inputs):
            return m.head(torch.tanh(m.embed(inputs)))

        start = float(F.huber_loss(forward(model, x), y).detach())
        _sgd_run(reference, forward, F.huber_loss, x, y, 40, 0.1)
        ref_end = float(F.huber_loss(forward(reference, x), y).detach())
        watch = Watch(model)
        try:
            _sgd_run(model, forward, loss_fn, x, y, 40, 0.1)
            train_error = None
        except Exception as exc:
            train_error = _first_line(exc)
        finally:
            watch.close()
        end = float(F.huber_loss(forward(model, x), y).detach())

        def value_ok():
            if error:
                return False, f"your loss raised {error}"
            return _close(got, want), f"your loss is {got:.6g}, F.huber_loss says {want:.6g}"

        def grad_ok():
            if error:
                return False, f"your loss raised {error}"
            small = [i for i, d in enumerate(_flat(tf._tolist(pred0 - target))) if abs(d) < 1]
            g = _flat(grad) if grad is not None else []
            dead = [i for i in small if g and g[i] == 0.0]
            detail = ("the predictions within 1.0 of their target get gradient 0: that branch "
                      "is computed from a detached tensor" if dead else
                      "the gradient with respect to the predictions differs from "
                      "F.huber_loss's")
            return _close(grad, tf.grad_values(ref_pred)), detail

        def trains():
            if train_error:
                return False, f"training raised {train_error}"
            ok = (start - end) >= 0.9 * (start - ref_end)
            return ok, (f"in 40 SGD steps your loss took the Huber loss from {start:.4g} to "
                        f"{end:.4g}; the reference run reached {ref_end:.4g}")

        def fed():
            starved = watch.starved()
            return not starved, f"never received a non-zero gradient: {starved}"

        return _score(self.qid, [
            ("gradient", "the value equals F.huber_loss", value_ok, None),
            ("gradient", "every prediction gets the Huber gradient, near the target too",
             grad_ok, "detach_in_loss_harmless"),
            ("training", "every parameter receives a gradient while training", fed, None),
            ("training", "the loss falls as far as with the reference loss", trains,
             "detach_in_loss_harmless"),
        ], part)


def _train_reference(model, x, y, steps=30):
    import torch
    import torch.nn.functional as F

    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    for _ in range(steps):
        opt.zero_grad()
        loss = F.mse_loss(model.head(torch.tanh(model.embed(x))), y)
        loss.backward()
        opt.step()


def _training_checks(watch: Watch, start: float, end: float, ref_end: float, error: str | None,
                     steps: int, fed_myth: str | None, fall_myth: str | None):
    def fed():
        if error:
            return False, f"training raised {error}"
        starved = watch.starved()
        return not starved, f"never received a non-zero gradient: {starved}"

    def moved():
        if error:
            return False, f"training raised {error}"
        still = watch.unmoved()
        return not still, f"never moved: {still}"

    def falls():
        if error:
            return False, f"training raised {error}"
        ok = math.isfinite(end) and (start - end) >= 0.9 * (start - ref_end)
        return ok, (f"in {steps} steps the loss went {start:.4g} -> {end:.4g}, a fall of "
                    f"{start - end:.3g}; the reference run, where every parameter learns, "
                    f"falls by {start - ref_end:.3g}")

    return [
        ("gradients", "every parameter receives a non-zero gradient", fed, fed_myth),
        ("training", "every parameter moves", moved, fed_myth),
        ("training", "the loss falls as far as in the reference run", falls, fall_myth),
    ]


@lesson.register
class Q9NoGrad(WriteCode):
    qid = "q9"
    title = "Find the bug: monitoring switched off on the first stretch (case 3)"
    function_name = "train"
    part_names = ["gradients", "training"]

    def grade_code(self, fn, part, variant):
        import torch
        import torch.nn.functional as F

        ns = clinic()
        seed, width = _setting(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["clinic_model"](seed, width)
        reference = copy.deepcopy(model)

        def measure(m):
            with torch.no_grad():
                return float(F.mse_loss(m.head(torch.tanh(m.embed(x))), y))

        start = measure(model)
        _train_reference(reference, x, y)
        watch = Watch(model)
        try:
            run_learner(fn, model, x, y)
            error = None
        except LearnerCodeError as exc:
            error = exc.summary
        finally:
            watch.close()
        return _score(self.qid, _training_checks(
            watch, start, measure(model), measure(reference), error, 30,
            "no_grad_branch_counts", "no_grad_branch_counts"), part)


def _forward_inplace_reference(model, x):
    import torch

    return model.head(torch.tanh(model.embed(x)).clamp(min=0))


@lesson.register
class Q10InPlace(WriteCode):
    qid = "q10"
    title = "Find the bug: negatives wiped in place (case 4)"
    function_name = "forward"
    part_names = ["gradients", "training"]

    def grade_code(self, fn, part, variant):
        import torch
        import torch.nn.functional as F

        try:
            forward = define_learner(fn)
        except LearnerCodeError as exc:
            return _failed(self.qid, f"Your function failed: {exc.summary}")
        ns = clinic()
        seed, width = _setting(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["clinic_model"](seed, width)
        reference = copy.deepcopy(model)
        with torch.no_grad():
            start = float(F.mse_loss(_forward_inplace_reference(model, x), y))
            try:
                same = _close(tf._tolist(forward(model, x)),
                              tf._tolist(_forward_inplace_reference(model, x)))
            except Exception:
                same = False
        _sgd_run(reference, lambda m, v: _forward_inplace_reference(m, v), F.mse_loss, x, y,
                 30, 0.2)
        watch = Watch(model)
        try:
            _sgd_run(model, forward, F.mse_loss, x, y, 30, 0.2)
            error = None
        except Exception as exc:
            error = _first_line(exc)
        finally:
            watch.close()
        with torch.no_grad():
            end = float(F.mse_loss(_forward_inplace_reference(model, x), y))
            ref_end = float(F.mse_loss(_forward_inplace_reference(reference, x), y))

        def values():
            return same, ("the output differs from head(tanh(embed(x)) with the negative "
                          "activations set to 0)")

        checks = _training_checks(watch, start, end, ref_end, error, 30, None, None)
        checks.insert(0, ("gradients", "the output keeps the negatives wiped (same values as "
                          "before the fix)", values, None))
        if error and "inplace" in error:
            checks = [(p, t, f, "inplace_never_checked" if m is None else m)
                      for p, t, f, m in checks]
        return _score(self.qid, checks, part)


def _forward_gate_reference(model, x):
    import torch

    h = torch.tanh(model.embed(x))
    g = torch.sigmoid(model.gate(h))
    return g * model.fine(h) + (1 - g) * model.coarse(h)


@lesson.register
class Q11Gate(WriteCode):
    qid = "q11"
    title = "Find the bug: the gate that never learns (case 5)"
    function_name = "gated_forward"
    part_names = ["gradients", "training"]

    def grade_code(self, fn, part, variant):
        import torch
        import torch.nn.functional as F

        try:
            forward = define_learner(fn)
        except LearnerCodeError as exc:
            return _failed(self.qid, f"Your function failed: {exc.summary}")
        ns = clinic()
        seed, width = _setting(variant)
        x, y = ns["clinic_problem"](seed)
        model = ns["gated_model"](seed, width)
        reference = copy.deepcopy(model)
        with torch.no_grad():
            try:
                start = float(F.mse_loss(forward(model, x), y))
            except Exception:
                start = float("nan")
            ref_start = float(F.mse_loss(_forward_gate_reference(reference, x), y))
        _sgd_run(reference, _forward_gate_reference, F.mse_loss, x, y, 40, 0.2)
        watch = Watch(model)
        try:
            _sgd_run(model, forward, F.mse_loss, x, y, 40, 0.2)
            error = None
        except Exception as exc:
            error = _first_line(exc)
        finally:
            watch.close()
        with torch.no_grad():
            try:
                end = float(F.mse_loss(forward(model, x), y))
            except Exception:
                end = float("nan")
            ref_end = float(F.mse_loss(_forward_gate_reference(reference, x), y))
        # Compare falls from each run's own start (a soft gate starts elsewhere than a hard one).
        ref_end_same_fall = start - (ref_start - ref_end)
        return _score(self.qid, _training_checks(
            watch, start, end, ref_end_same_fall, error, 40, "hard_choice_trains", None), part)
