"""Lesson 02, where gradients are kept: the questions of ``source/02_retain_grad``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts off its namespace; a code question computes its reference with torch in
the oracle *before* running the learner's function (so nothing the learner's
code does to torch can change it), then compares.
"""

from __future__ import annotations

from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName, LearnerFunction
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
    myth_text,
    raised_finding,
    run_learner,
    values_equal,
)

lesson = Lesson("02_retain_grad", "Where gradients are kept")


def _values(t) -> Any:
    """A tensor's values as (nested) lists, or None."""
    return None if t is None else tf._tolist(t)


def _nbytes(tensors) -> int:
    return sum(int(t.numel()) * int(t.element_size()) for t in tensors)


def _error(err) -> ExceptionName | None:
    return None if err is None else ExceptionName(type(err).__name__)


# --------------------------------------------------------------------------- Q1 accumulation

REPORTS = """\
w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)   # a sorting centre
parcels = torch.tensor([2.0, 0.0, -1.0])
(parcels * w).sum().backward()        # Monday's efficiency report
monday = w.grad.clone()
(w * w).sum().backward()              # Tuesday's report, no zero_grad() in between
tuesday = w.grad.clone()
"""


def _tuesday_myth(given: Any, expected: Any) -> str | None:
    import torch

    w = torch.tensor([1.0, 2.0, 3.0])
    if values_equal(given, (2 * w).tolist()):  # Tuesday's gradient alone: overwritten
        return "grad_accumulates_not"
    return None


@lesson.register
class Q1Accumulation(Predict):
    qid = "q1"
    title = "Reports pile up"
    code = REPORTS
    items = [
        Item("monday", "d/dw sum(parcels * w) = parcels, stored on the sorting centre w.", None),
        Item("tuesday", "backward() adds into .grad: Tuesday's gradient 2*w is added on top of "
             "Monday's parcels.", _tuesday_myth),
    ]

    def facts(self, ns):
        return {"monday": _values(ns["monday"]), "tuesday": _values(ns["tuesday"])}


# --------------------------------------------------------------------------- Q2 zero_grad

ZERO_GRAD = """\
w = torch.tensor([1.0, -2.0], requires_grad=True)
opt = torch.optim.SGD([w], lr=0.1)
(w * w).sum().backward()
opt.step()
opt.zero_grad()
after_default = w.grad
alarm = w.grad is None             # seed 000's check_grad_flow test
(w * w).sum().backward()
opt.zero_grad(set_to_none=False)
after_zeros = w.grad
"""


def _zero_myth(given: Any, expected: Any) -> str | None:
    if expected is None and given is not None:
        return "zero_grad_fills_zeros"
    if expected is not None and given is None:
        return "zero_grad_fills_zeros"
    return None


@lesson.register
class Q2ZeroGrad(Predict):
    qid = "q2"
    title = "What zero_grad() leaves behind"
    code = ZERO_GRAD
    items = [
        Item("after_default", "since torch 2.0, zero_grad() sets .grad to None "
             "(set_to_none=True is the default).", _zero_myth),
        Item("alarm", "right after zero_grad() every healthy parameter has .grad None, so a "
             "`grad is None` check raises a false alarm.", "grad_none_check_enough"),
        Item("after_zeros", "zero_grad(set_to_none=False) keeps the tensor and fills it with "
             "zeros: one 0.0 per element of w.", _zero_myth),
    ]

    def facts(self, ns):
        return {
            "after_default": _values(ns["after_default"]),
            "alarm": bool(ns["alarm"]),
            "after_zeros": _values(ns["after_zeros"]),
        }


# --------------------------------------------------------------------------- Q3 monitors

MONITORS = """\
original = torch.tensor([2.0, 4.0], requires_grad=True)   # a sorting centre
suspect_station = original * 1.5     # a transit station in the Double-11 surge
suspect_station.retain_grad()        # monitor installed before the audit
late_station = original * original   # a second transit station
seen = []
late_station.register_hook(lambda g: seen.append(g.tolist()))   # an inspection probe
check_result = (suspect_station + late_station).mean()
check_result.backward()
late_station.retain_grad()           # this monitor arrives after the audit
original.retain_grad()               # a monitor on a sorting centre
"""


def _late_myth(given: Any, expected: Any) -> str | None:
    if expected is None and given is not None:
        return "retain_grad_after_backward"
    return None


def _seen_myth(given: Any, expected: Any) -> str | None:
    if given is None and expected is not None:
        return "nonleaf_grad_never_computed"
    return None


def _late_flag_myth(given: Any, expected: Any) -> str | None:
    if expected is True and given is False:
        return "retains_grad_means_stored"
    return None


def _leaf_flag_myth(given: Any, expected: Any) -> str | None:
    if expected is False and given is True:
        return "retains_grad_on_leaf"
    return None


@lesson.register
class Q3Monitors(Predict):
    qid = "q3"
    title = "Monitors before and after the audit"
    code = MONITORS
    items = [
        Item("suspect_station.grad", "check_result is the mean of 2 numbers, so d/d station = "
             "1/2 for each; the monitor was installed before backward, so it is kept.", None,
             part="grads"),
        Item("seen", "the probe sees the gradient flowing through late_station during backward: "
             "d check_result / d late_station = 1/2 for each element. Non-leaf gradients are "
             "computed; they are only not stored.", _seen_myth, part="grads"),
        Item("late_station.grad", "retain_grad() after backward() comes too late: nothing was "
             "stored, and .grad stays None.", _late_myth, part="grads"),
        Item("original.grad", "original reaches check_result by two routes: 0.5*1.5 through the "
             "suspect station plus 0.5*2*original through the late one; a leaf keeps the sum.",
             None, part="grads"),
        Item("late_station.retains_grad", "the flag records that retain_grad() was called, "
             "even though it was called too late to store anything.", _late_flag_myth,
             part="flags"),
        Item("original.retains_grad", "retains_grad is about non-leaves: on a leaf "
             "retain_grad() is a no-op and the flag stays False (a leaf keeps .grad anyway).",
             _leaf_flag_myth, part="flags"),
    ]

    def facts(self, ns):
        return {
            "suspect_station.grad": tf.grad_values(ns["suspect_station"]),
            "seen": ns["seen"][0] if ns["seen"] else None,
            "late_station.grad": tf.grad_values(ns["late_station"]),
            "original.grad": tf.grad_values(ns["original"]),
            "late_station.retains_grad": tf.retains_grad(ns["late_station"]),
            "original.retains_grad": tf.retains_grad(ns["original"]),
        }


# --------------------------------------------------------------------------- Q4 retain_graph

TWICE = """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
loss = (x * x).sum()          # x * x saves x for backward
loss.backward()
try:
    loss.backward()           # audit the same route a second time
    second = None
except RuntimeError as err:
    second = err
plain = (x + 1).sum()         # + and sum save no tensors for backward
plain.backward()
try:
    plain.backward()
    again = None
except RuntimeError as err:
    again = err
"""


def _second_myth(given: Any, expected: Any) -> str | None:
    if expected is not None and given is None:
        return "graph_survives_backward"
    return None


def _again_myth(given: Any, expected: Any) -> str | None:
    if expected is None and given is not None:
        return "second_backward_always_fails"
    return None


def _twice_grad_myth(given: Any, expected: Any) -> str | None:
    import torch

    x = torch.tensor([1.0, 2.0])
    if values_equal(given, (4 * x + 2).tolist()):  # both `loss` passes counted
        return "graph_survives_backward"
    if values_equal(given, (2 * x + 1).tolist()):  # only one `plain` pass counted
        return "second_backward_always_fails"
    if values_equal(given, [1.0, 1.0]):  # only the last pass: overwritten, not added
        return "grad_accumulates_not"
    return None


@lesson.register
class Q4Twice(Predict):
    qid = "q4"
    title = "Backward twice"
    code = TWICE
    items = [
        Item("second", "the first backward freed the x that `x * x` saved, so the second one "
             "raises RuntimeError (answer the class, RuntimeError, or None).", _second_myth),
        Item("again", "`x + 1` and `sum` saved no tensors, so there was nothing to free: the "
             "second backward works (answer None).", _again_myth),
        Item("x.grad", "every pass that ran added into x.grad: 2*x from the first `loss` pass "
             "(the failed one added nothing), then 1 per element from each of the two `plain` "
             "passes.", _twice_grad_myth),
    ]

    def facts(self, ns):
        return {
            "second": _error(ns["second"]),
            "again": _error(ns["again"]),
            "x.grad": tf.grad_values(ns["x"]),
        }


# --------------------------------------------------------------------------- Q5 memory

MEMORY = """\
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))   # 58 parameters

def retained_bytes(batch):
    h = torch.randn(batch, 4)
    stations = []
    for layer in model:
        h = layer(h)
        h.retain_grad()           # a monitor at every transit station
        stations.append(h)
    h.sum().backward()
    return sum(s.grad.numel() * s.grad.element_size() for s in stations)

small = retained_bytes(1)
large = retained_bytes(100)
param_grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
"""


def _memory_facts() -> dict[str, int]:
    """Q5's scenario, run once more: the myth choosers compare a wrong answer with it."""
    return Q5Memory().scenario()


def _mem_myth(key: str):
    """A retained size equal to the parameter grads', or one that does not grow with the batch."""

    def choose(given: Any, expected: Any) -> str | None:
        if not isinstance(given, int | float) or isinstance(given, bool):
            return None
        facts = _memory_facts()
        others = [v for k, v in facts.items() if k != key]
        if any(values_equal(given, v) for v in others):
            return "retain_cost_fixed"
        return None

    return choose


def _bytes_why(what: str) -> str:
    return (f"{what} Count bytes: numel() * element_size(), and a float32 number takes 4 bytes.")


@lesson.register
class Q5Memory(Predict):
    qid = "q5"
    title = "What the monitors cost"
    code = MEMORY
    items = [
        Item("small", _bytes_why("A retained .grad has the shape of its station: with batch 1 the "
             "stations are 1x8, 1x8 and 1x2."), _mem_myth("small")),
        Item("large", _bytes_why("With batch 100 every station has 100 rows: the cost of the "
             "monitors grows with the batch, the parameters' does not."), _mem_myth("large")),
        Item("param_grad_bytes", _bytes_why("One .grad per parameter, shaped like it: 4x8 + 8 + "
             "8x2 + 2 = 58 numbers, whatever the batch (the two backward calls add into the "
             "same tensors)."), _mem_myth("param_grad_bytes")),
    ]

    def facts(self, ns):
        return {k: int(ns[k]) for k in ("small", "large", "param_grad_bytes")}


# --------------------------------------------------------------------------- write code


def _graph_freed(exc: LearnerCodeError) -> str | None:
    """A second backward through a freed graph: the learner thinks the graph survives."""
    if exc.exc_type == "RuntimeError" and ("second time" in exc.summary
                                           or "retain_graph" in exc.summary):
        return "graph_survives_backward"
    return None


def _run(fn: LearnerFunction, *args) -> tuple[CodeRun | None, Finding | None]:
    """Run the learner's function; a raise becomes a finding (naming a myth where we can)."""
    try:
        return run_learner(fn, *args), None
    except LearnerCodeError as exc:
        return None, raised_finding(exc, _graph_freed)


HIDDEN_CASES = {
    "visible": {
        "tanh": ("nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))", (5, 3)),
        "relu": ("nn.Sequential(nn.Linear(2, 6), nn.ReLU(), nn.Linear(6, 6), nn.ReLU(), "
                 "nn.Linear(6, 1))", (4, 2)),
    },
    "hidden": {
        "single": ("nn.Sequential(nn.Linear(5, 3))", (2, 5)),
        "sigmoid": ("nn.Sequential(nn.Linear(3, 3), nn.Sigmoid(), nn.Linear(3, 4), nn.Tanh(), "
                    "nn.Linear(4, 2))", (6, 3)),
    },
}


def _build(spec: str, shape: tuple[int, int], dtype=None):
    import torch

    torch.manual_seed(0)
    model = eval(spec, {"nn": torch.nn})  # noqa: S307 -- our own constant specs
    x = torch.randn(*shape)
    if dtype is not None:
        model, x = model.to(dtype), x.to(dtype)
    return model, x


def _cases(variant: str) -> dict:
    cases = dict(HIDDEN_CASES["visible"])
    if variant == "hidden":
        cases.update(HIDDEN_CASES["hidden"])
    return cases


@lesson.register
class Q6HiddenGradient(WriteCode):
    qid = "q6"
    title = "Monitor the first transit station"
    function_name = "first_station_grad"

    def grade_code(self, fn, part, variant):
        import torch

        findings, right = [], 0
        cases = _cases(variant)
        for name, (spec, shape) in cases.items():
            model, x = _build(spec, shape)
            h = model[0](x)  # the reference, computed before any learner code runs
            out = h
            for layer in list(model)[1:]:
                out = layer(out)
            (want,) = torch.autograd.grad(out.sum(), h)
            want = tf._tolist(want)
            run, problem = _run(fn, model, x)
            if problem:
                problem.text = f"model `{name}`: {problem.text}"
                findings.append(problem)
                continue
            got = run.result
            if got is None:
                findings.append(Finding(
                    False, f"model `{name}`: you returned None. Call retain_grad() on the first "
                    "station *before* backward(), then return its .grad. [Misconception: "
                    f"{myth_text('retain_grad_after_backward')}.]",
                    misconception="retain_grad_after_backward"))
            elif not tf.is_tensor(got):
                findings.append(Finding(False, f"model `{name}`: return a tensor, not "
                                               f"{type(got).__name__}."))
            elif values_equal(tf._tolist(got), want, 1e-4):
                right += 1
                findings.append(Finding(True, f"model `{name}`: the gradient at the first "
                                              "station is right."))
            else:
                findings.append(Finding(
                    False, f"model `{name}`: expected d model(x).sum() / d model[0](x) "
                    f"(shape {list(h.shape)}), got values of shape {list(got.shape)}: "
                    "retain the *output of model[0]*, not x or a parameter."))
            if run.warnings:
                findings.append(Finding(
                    False, f"model `{name}`: your function warned ({run.warnings[0][:90]}...): "
                    "it read .grad of a non-leaf that kept nothing. [Misconception: "
                    f"{myth_text('nonleaf_grad_silent')}.]",
                    misconception="nonleaf_grad_silent"))
        return Verdict(self.qid, findings)


BYTES_CASES = {
    "visible": {
        "act_heavy": ("nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))", (256, 8),
                      None),
        "param_heavy": ("nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))",
                        (1, 256), None),
    },
    "hidden": {
        "float64": ("nn.Sequential(nn.Linear(6, 3), nn.Sigmoid(), nn.Linear(3, 3), nn.Tanh())",
                    (7, 6), "float64"),
        "one_layer": ("nn.Sequential(nn.Linear(5, 2))", (3, 5), None),
    },
}


def _reference_retained(model, x) -> tuple[int, int, int]:
    """(retained bytes, their element count, parameter-grad bytes) for one step."""
    h = x
    stations = []
    for layer in model:
        h = layer(h)
        h.retain_grad()
        stations.append(h)
    h.sum().backward()
    grads = [tf._grad(s) for s in stations]
    params = [p for p in model.parameters()]
    return _nbytes(grads), sum(int(g.numel()) for g in grads), _nbytes(params)


@lesson.register
class Q7RetainedBytes(WriteCode):
    qid = "q7"
    title = "Measure what the monitors cost"
    function_name = "retained_grad_bytes"

    def grade_code(self, fn, part, variant):
        import torch

        cases = dict(BYTES_CASES["visible"])
        if variant == "hidden":
            cases.update(BYTES_CASES["hidden"])
        findings, right = [], 0
        for name, (spec, shape, dtype) in cases.items():
            model, x = _build(spec, shape, getattr(torch, dtype) if dtype else None)
            want, count, param_bytes = _reference_retained(model, x)
            model, x = _build(spec, shape, getattr(torch, dtype) if dtype else None)
            run, problem = _run(fn, model, x)
            if problem:
                problem.text = f"model `{name}`: {problem.text}"
                findings.append(problem)
                continue
            got = run.result
            if values_equal(got, want, 1e-9):
                right += 1
                findings.append(Finding(True, f"model `{name}`: {want} bytes -- right."))
                continue
            text = f"model `{name}`: expected {want} bytes, got {got!r}."
            myth = None
            if values_equal(got, count, 1e-9):
                text += " That is the number of elements: multiply by element_size() (4 bytes " \
                        "for float32, 8 for float64)."
            elif values_equal(got, param_bytes, 1e-9):
                myth = "retain_cost_fixed"
                text += " That is what the parameters' grads take: a retained .grad has the " \
                        "shape of its station (batch x features)."
            elif values_equal(got, 0, 1e-9):
                myth = "retain_grad_after_backward"
                text += " Nothing was kept: call retain_grad() on every station before backward()."
            else:
                text += " Retain the output of every layer, run backward on the last one's " \
                        "sum, and add numel() * element_size() of each retained .grad."
            if myth:
                text += f" [Misconception: {myth_text(myth)}.]"
            findings.append(Finding(False, text, misconception=myth))
        return Verdict(self.qid, findings)


# --------------------------------------------------------------------------- find the bug


@lesson.register
class Q8LateMonitor(WriteCode):
    qid = "q8"
    title = "Find the bug: the monitor that arrived after the audit"
    function_name = "audit_station"

    def grade_code(self, fn, part, variant):
        import torch

        centre = torch.tensor([2.0, 4.0], requires_grad=True)  # the intended audit, run first
        station = centre * 1.5
        station.retain_grad()
        (station ** 2).mean().backward()
        want = tf.grad_values(station)

        def still_station(run):
            t = run.result
            return (tf.is_tensor(t) and not tf.is_leaf(t),
                    "return the transit station itself (a non-leaf made from centre)")

        def kept(run):
            g = tf.grad_values(run.result)
            return (g is not None and values_equal(g, want),
                    f"station.grad should be d report / d station = {want}, found {g}")

        def flagged(run):
            return tf.retains_grad(run.result), "the station should carry a monitor"

        return self.run_and_require(fn, [
            Requirement("the returned tensor is still the transit station", still_station,
                        "output_can_be_leaf"),
            Requirement("the station carries a monitor (retains_grad)", flagged),
            Requirement("its .grad holds the gradient of the report", kept,
                        "retain_grad_after_backward"),
        ], part, on_error=_graph_freed)


TRAIN_START, TRAIN_TARGET, TRAIN_LR, TRAIN_STEPS = [1.0, -1.0], [3.0, 2.0], 0.1, 3


@lesson.register
class Q9PilingReports(WriteCode):
    qid = "q9"
    title = "Find the bug: reports that pile up"
    function_name = "train_centre"

    def grade_code(self, fn, part, variant):
        import torch

        w = torch.tensor(TRAIN_START, requires_grad=True)  # the intended loop, run first
        target = torch.tensor(TRAIN_TARGET)
        opt = torch.optim.SGD([w], lr=TRAIN_LR)
        for _ in range(TRAIN_STEPS):
            opt.zero_grad()
            ((w - target) ** 2).sum().backward()
            opt.step()
        want = tf._tolist(w)

        def trained(run):
            t = run.result
            got = tf._tolist(t)
            return (values_equal(got, want),
                    f"after {TRAIN_STEPS} steps w should be {[round(v, 4) for v in want]}, "
                    f"found {[round(v, 4) for v in got]}")

        def centre(run):
            t = run.result
            return (tf.is_tensor(t) and tf.is_leaf(t) and tf.requires_grad(t),
                    "return the sorting centre w (a leaf that requires grad)")

        return self.run_and_require(fn, [
            Requirement("w is still the sorting centre", centre),
            Requirement("each step used only its own gradient", trained, "grad_accumulates_not"),
        ], part, on_error=_graph_freed)


@lesson.register
class Q10TwoReports(WriteCode):
    qid = "q10"
    title = "Find the bug: two reports from one route"
    function_name = "audit_two_reports"

    def grade_code(self, fn, part, variant):
        import torch

        w = torch.tensor([1.0, 2.0], requires_grad=True)  # the intended audit, run first
        station = w.exp()
        (station.sum() + (station * station).sum()).backward()
        want = tf.grad_values(w)

        def centre(run):
            t = run.result
            return (tf.is_tensor(t) and tf.is_leaf(t) and tf.requires_grad(t),
                    "return the sorting centre w (a leaf that requires grad)")

        def both(run):
            g = tf.grad_values(run.result)
            ok = g is not None and values_equal(g, want, 1e-4)
            return ok, (f"w.grad should hold the gradients of both reports added up, {want}, "
                        f"found {g}")

        return self.run_and_require(fn, [
            Requirement("w is still the sorting centre", centre),
            Requirement("w.grad holds d(speed + cost)/dw", both),
        ], part, on_error=_graph_freed)
