"""Lesson 02, where gradients are kept: the questions of ``source/02_retain_grad``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts off its namespace; a code question computes its reference with torch in
the oracle *before* running the learner's function (so nothing the learner's
code does to torch can change it), then compares.
"""

from __future__ import annotations

import functools
from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName, LearnerFunction
from autograder.lessons.l01_leaves import describe, is_parameter
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
)
from course.i18n import N_, _

lesson = Lesson("02_retain_grad", N_("Where gradients are kept"),
                preload=("torch._dynamo",))  # its checks train with optimizers


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
    title = N_("Reports pile up")
    code = REPORTS
    items = [
        Item("monday", "Monday's report is d/dw sum(parcels * w) = parcels, filed on the "
             "sorting centre w."),
        Item("tuesday", "`backward()` adds into .grad: Tuesday's gradient 2*w is added on top of "
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
alarm = w.grad is None             # the parcel-sorting article's check_grad_flow test
(w * w).sum().backward()
opt.zero_grad(set_to_none=False)
after_zeros = w.grad
"""


def _cleared_to_zeros(given: Any, expected: Any) -> str | None:
    """Zeros where torch 2 leaves None: the belief that clearing the desk files zeros."""
    zeros = isinstance(given, list) and given and all(v == 0 for v in given)
    return "zero_grad_fills_zeros" if expected is None and zeros else None


@lesson.register
class Q2ZeroGrad(Predict):
    qid = "q2"
    title = N_("What zero_grad() leaves behind")
    code = ZERO_GRAD
    items = [
        Item("after_default", "Since torch 2.0, zero_grad() sets .grad to None "
             "(set_to_none=True is the default): the desk is cleared, no report is left on it.",
             _cleared_to_zeros),
        Item("alarm", "Right after zero_grad() every healthy parameter has .grad None (False "
             "would mean a report is still on the desk), so a `grad is None` check raises a "
             "false alarm.", "zero_grad_fills_zeros"),
        Item("after_zeros", "`zero_grad(set_to_none=False)` keeps the tensor and fills it with "
             "zeros: one 0.0 per element of w."),
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
    if given in (None, [], [None]) and expected:
        return "nonleaf_grad_never_computed"
    return None


def _one_route(given: Any, expected: Any) -> str | None:
    """original.grad with one route's report only: through the suspect or the late station."""
    import torch

    original = torch.tensor([2.0, 4.0])
    routes = [[0.75, 0.75], (0.5 * 2 * original).tolist()]
    return "one_route_only" if any(values_equal(given, r) for r in routes) else None


@lesson.register
class Q3Monitors(Predict):
    qid = "q3"
    title = N_("Monitors before and after the audit")
    code = MONITORS
    items = [
        Item("suspect_station.grad", "`check_result` is the mean of 2 numbers, so d/d station = "
             "1/2 for each; the monitor was installed before backward, so it is kept.",
             part="grads"),
        Item("seen", "The probe sees the gradient flowing through late_station during backward: "
             "d check_result / d late_station = 1/2 for each element. Non-leaf gradients are "
             "computed; they are only not stored.", _seen_myth, part="grads", single=True),
        Item("late_station.grad", "`retain_grad()` after backward() comes too late: nothing was "
             "stored, and .grad stays None.", _late_myth, part="grads"),
        Item("original.grad", "`original` reaches check_result by two routes: 0.5*1.5 through the "
             "suspect station plus 0.5*2*original through the late one; a leaf keeps the sum.",
             _one_route, part="grads"),
        Item("late_station.retains_grad", "The flag records that retain_grad() was called, "
             "even though it was called too late to store anything.",
             "retains_grad_means_stored", part="flags"),
        Item("original.retains_grad", "`retains_grad` is about non-leaves: on a leaf "
             "retain_grad() is a no-op and the flag stays False (a leaf keeps .grad anyway).",
             "retains_grad_on_leaf", part="flags"),
    ]

    def facts(self, ns):
        return {
            "suspect_station.grad": tf.grad_values(ns["suspect_station"]),
            "seen": ns["seen"],
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
    title = N_("Backward twice")
    code = TWICE
    items = [
        Item("second", "The first backward freed the x that `x * x` saved, so the second one "
             "raises RuntimeError (answer the class, RuntimeError, or None).", _second_myth),
        Item("again", "`x + 1` and `sum` saved no tensors, so there was nothing to free: the "
             "second backward works (answer None).", _again_myth),
        Item("x.grad", "Every pass that ran added into x.grad: 2*x from the first `loss` pass "
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


@functools.cache
def _memory_facts() -> dict[str, int]:
    """Q5's scenario, run once more (once per check): the myth chooser compares with it."""
    return Q5Memory().scenario()


def _mem_myth(key: str):
    """A retained size equal to the parameter grads', or one that does not grow with the batch."""

    def choose(given: Any, expected: Any) -> str | None:
        if not isinstance(given, int | float) or isinstance(given, bool):
            return None
        others = [v for k, v in _memory_facts().items() if k != key]
        return "retain_cost_fixed" if any(values_equal(given, v) for v in others) else None

    return choose


@lesson.register
class Q5Memory(Predict):
    qid = "q5"
    title = N_("What the monitors cost")
    code = MEMORY
    items = [
        # each explanation ends with the same advice on counting bytes
        Item("small", "A retained .grad has the shape of its station: with batch 1 the stations "
             "are 1x8, 1x8 and 1x2. Count bytes, not numbers: numel() * element_size(), and a "
             "float32 number takes 4 bytes.", _mem_myth("small")),
        Item("large", "With batch 100 every station has 100 rows: the cost of the monitors grows "
             "with the batch, the parameters' does not. Count bytes, not numbers: numel() * "
             "element_size(), and a float32 number takes 4 bytes.", _mem_myth("large")),
        Item("param_grad_bytes", "One .grad per parameter, shaped like it: 4x8 + 8 + 8x2 + 2 = "
             "58 numbers, whatever the batch (the two backward calls add into the same "
             "tensors). Count bytes, not numbers: numel() * element_size(), and a float32 "
             "number takes 4 bytes.", _mem_myth("param_grad_bytes")),
    ]

    def facts(self, ns):
        return {k: int(ns[k]) for k in ("small", "large", "param_grad_bytes")}


# --------------------------------------------------------------------------- write code


def _monitor_after_backward(source: str) -> bool:
    """Whether the learner's source installs its monitor after its (first) backward()."""
    retain, backward = source.find(".retain_grad("), source.find(".backward(")
    return retain >= 0 and backward >= 0 and retain > backward


def _missing_report(fn):
    """A crash on a .grad that is None: the monitor came too late, or never."""

    def choose(exc: LearnerCodeError) -> str | None:
        if "'NoneType' object has no attribute" not in exc.summary:
            return None
        if _monitor_after_backward(fn.source):
            return "retain_grad_after_backward"
        return None if ".retain_grad(" in fn.source or "register_hook" in fn.source \
            else "nonleaf_grad_stored"

    return choose


def _on_case(name: str, fn: LearnerFunction, *args):
    """A run of the learner's function on one case; a crash says on which case."""

    def run():
        try:
            return run_learner(fn, *args)
        except LearnerCodeError as exc:
            raise LearnerCodeError(_("{error}, on model `{name}`", error=exc.summary,
                                     name=name), exc.exc_type) from None

    return run


MODELS = {
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


def _cases(table: dict, variant: str) -> dict:
    return dict(table["visible"], **(table["hidden"] if variant == "hidden" else {}))


def _audit(model, x) -> tuple[list, list]:
    """Torch's reference audit: every station (layer output) monitored, then backward on the
    last one's sum. Returns the stations and their kept gradients."""
    h, stations = x, []
    for layer in model:
        h = layer(h)
        h.retain_grad()
        stations.append(h)
    h.sum().backward()
    return stations, [tf._grad(s) for s in stations]


def _first_station_requirement(name: str, spec, shape, fn: LearnerFunction) -> Requirement:
    model, x = _build(spec, shape)
    stations, grads = _audit(model, x)  # the reference, computed before any learner code runs
    want = tf._tolist(grads[0])
    weight = tf.grad_values(model[0].weight)
    layers = [type(layer).__name__ for layer in model]

    def test(run):
        got = run.result
        if got is None:
            if any("not a leaf" in w for w in run.warnings):
                return False, _("you returned None, and torch warned that you read the .grad "
                                "of a transit station without a monitor: backward computes that "
                                "report but files it nowhere unless retain_grad() was called "
                                "first"), "nonleaf_grad_stored"
            if _monitor_after_backward(fn.source):
                return False, _("you returned None: your retain_grad() comes after backward(), "
                                "when the report has already passed"), \
                    "retain_grad_after_backward"
            return False, _("you returned None: the station you monitored was not on the route "
                            "backward took. Run the later layers on that very tensor: "
                            "`model(x)` makes new, unmonitored stations"), "monitor_watches_layer"
        if not tf.is_tensor(got):
            return False, _("you returned {type}: return the tensor in `.grad`",
                            type=type(got).__name__)
        values = tf._tolist(got)
        if values_equal(values, want, 1e-4):
            return True
        for k, g in enumerate(grads[1:], start=1):
            if values_equal(values, tf._tolist(g), 1e-4):
                return False, _("that is the report at the output of layer {index} (`{layer}`), "
                                "not of `model[0]`: monitor the first station", index=k,
                                layer=layers[k])
        if weight is not None and values_equal(values, weight, 1e-4):
            return False, _("that is the report of `model[0].weight`, the layer's sorting "
                            "centre: a monitor watches one tensor, here the layer's output"), \
                "monitor_watches_layer"
        if values_equal(values, [[2 * v for v in row] for row in want], 1e-4):
            return False, _("that is twice torch's report: backward ran twice and the reports "
                            "added up"), "grad_accumulates_not"
        if values_equal(values, tf._tolist(stations[0]), 1e-4):
            return False, _("that is the station's own value: return its `.grad`")
        return False, _("torch's report at `model[0]`'s output has shape {shape}; yours has "
                        "shape {yours} and other values", shape=list(grads[0].shape),
                        yours=list(got.shape))

    return Requirement(_("model `{name}` ({layers}): the report kept at the first station is "
                         "torch's", name=name, layers=" -> ".join(layers)), test)


@lesson.register
class Q6HiddenGradient(WriteCode):
    qid = "q6"
    title = N_("Monitor the first transit station")
    function_name = "first_station_grad"

    def grade_code(self, fn, part, variant):
        verdicts = []
        for name, (spec, shape) in _cases(MODELS, variant).items():
            requirement = _first_station_requirement(name, spec, shape, fn)
            model, x = _build(spec, shape)  # a fresh copy for the learner
            verdicts.append(score(self.qid, [requirement], _on_case(name, fn, model, x),
                                  on_error=_missing_report(fn)))
        return Verdict.merge(self.qid, verdicts)


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


def _bytes_requirement(name: str, spec, shape, dtype, fn: LearnerFunction) -> Requirement:
    import torch

    model, x = _build(spec, shape, getattr(torch, dtype) if dtype else None)
    grads = _audit(model, x)[1]  # the reference
    want, count = _nbytes(grads), sum(int(g.numel()) for g in grads)
    size = int(grads[0].element_size())
    params = _nbytes(list(model.parameters()))
    last = _nbytes(grads[-1:])

    def test(run):
        got = run.result
        if tf.is_tensor(got) and got.numel() == 1:
            got = got.item()
        if not isinstance(got, int | float) or isinstance(got, bool):
            return False, _("you returned {type}: return the number of bytes (an int)",
                            type=type(got).__name__)
        if values_equal(got, want, 1e-9):
            return True
        said = _("torch's monitors keep {want} bytes; you returned {got}", want=want,
                 got=repr(got))
        if values_equal(got, count * 4, 1e-9) and size != 4:
            return False, _("{said}, 4 bytes per element: these are {dtype} numbers of {size} "
                            "bytes each: ask `element_size()`", said=said, dtype=dtype,
                            size=size), "float_is_four_bytes"
        if values_equal(got, count, 1e-9):
            return False, _("{said}, the number of elements: multiply by `element_size()`",
                            said=said)
        if values_equal(got, params, 1e-9):
            return False, _("{said}, what the parameters take: a retained .grad has the shape "
                            "of its station (batch x features), not of a parameter",
                            said=said), "retain_cost_fixed"
        if values_equal(got, want + params, 1e-9):
            return False, _("{said}: that adds the parameters' .grad; count the monitors' only",
                            said=said)
        if values_equal(got, last, 1e-9):
            return False, _("{said}, the last station's alone: retain every layer's output",
                            said=said)
        if values_equal(got, 0, 1e-9):
            myth = "retain_grad_after_backward" if _monitor_after_backward(fn.source) else None
            return False, _("{said}: nothing was kept. Call retain_grad() on every station "
                            "before backward()", said=said), myth
        return False, _("{said}. Retain every layer's output, backward the last one's sum, and "
                        "add numel() * element_size() of each retained .grad", said=said)

    return Requirement(_("model `{name}`: the bytes the monitors keep", name=name), test)


@lesson.register
class Q7RetainedBytes(WriteCode):
    qid = "q7"
    title = N_("Measure what the monitors cost")
    function_name = "retained_grad_bytes"

    def grade_code(self, fn, part, variant):
        import torch

        verdicts = []
        for name, (spec, shape, dtype) in _cases(BYTES_CASES, variant).items():
            requirement = _bytes_requirement(name, spec, shape, dtype, fn)
            model, x = _build(spec, shape, getattr(torch, dtype) if dtype else None)
            verdicts.append(score(self.qid, [requirement], _on_case(name, fn, model, x),
                                  on_error=_missing_report(fn)))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- find the bug


def _centre_requirement() -> Requirement:
    return Requirement("`w` is still the sorting centre",
                       lambda run: is_parameter("w", run.result, theme="logistics"))


@lesson.register
class Q8LateMonitor(WriteCode):
    qid = "q8"
    title = N_("Find the bug: the monitor that arrived after the audit")
    function_name = "audit_station"
    starter = """\
def audit_station():
    centre = torch.tensor([2.0, 4.0], requires_grad=True)
    station = centre * 1.5                 # Double-11: watch this transit station
    cost = (station ** 2).mean()
    cost.backward()
    station.retain_grad()                  # install the monitor
    return station
"""

    def grade_code(self, fn, part, variant):
        import torch

        centre = torch.tensor([2.0, 4.0], requires_grad=True)  # the intended audit, run first
        station = centre * 1.5
        station.retain_grad()
        (station ** 2).mean().backward()
        want = tf.grad_values(station)

        def still_station(run):
            t = run.result
            if tf.is_tensor(t) and not tf.is_leaf(t):
                return True
            return False, _("{description}: return the transit station itself, made from "
                            "`centre`", description=describe("station", t, theme="logistics"))

        def kept(run):
            t = run.result
            g = tf.grad_values(t) if tf.is_tensor(t) else None
            if g is not None and values_equal(g, want):
                return True
            if g is None and tf.is_tensor(t) and tf.retains_grad(t):
                return False, _("the monitor is there (`retains_grad` is True) but `.grad` is "
                                "None: it was installed after the audit"), \
                    "retain_grad_after_backward"
            if g is None:
                return False, _("`.grad` is None and the station has no monitor: backward "
                                "files no report on a transit station by itself"), \
                    "nonleaf_grad_stored"
            if values_equal(g, [2 * v for v in want]):
                return False, _("torch's report is {want}; yours is twice that: backward ran "
                                "twice and the reports added up", want=want), \
                    "grad_accumulates_not"
            return False, _("torch's report at the station is {want}; yours is {grad}",
                            want=want, grad=g)

        return self.run_and_require(fn, [
            Requirement("the returned tensor is still the transit station", still_station),
            Requirement("its .grad holds torch's report d cost / d station", kept),
        ], part)


TRAIN_START, TRAIN_TARGET, TRAIN_LR = [1.0, -1.0], [3.0, 2.0], 0.1
TRAIN_STEPS = {"visible": [3], "hidden": [3, 1, 6]}  # 3 is the notebook's default


def _train(steps: int, clear: bool) -> list:
    """Torch's training loop of the notebook, with (``clear``) or without zero_grad()."""
    import torch

    w = torch.tensor(TRAIN_START, requires_grad=True)
    target = torch.tensor(TRAIN_TARGET)
    opt = torch.optim.SGD([w], lr=TRAIN_LR)
    for _step in range(steps):
        if clear:
            opt.zero_grad()
        ((w - target) ** 2).sum().backward()
        opt.step()
    return tf._tolist(w)


def _clears(source: str) -> bool:
    return any(s in source for s in ("zero_grad(", "grad.zero_(", "grad = None"))


@lesson.register
class Q9PilingReports(WriteCode):
    qid = "q9"
    title = N_("Find the bug: reports that pile up")
    function_name = "train_centre"
    starter = """\
def train_centre(steps=3):
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    target = torch.tensor([3.0, 2.0])
    opt = torch.optim.SGD([w], lr=0.1)
    for _ in range(steps):
        loss = ((w - target) ** 2).sum()
        loss.backward()
        opt.step()
    return w
"""

    def grade_code(self, fn, part, variant):
        def trained(steps: int) -> Requirement:
            want, piled = _train(steps, clear=True), _train(steps, clear=False)

            def test(run):
                got = tf._tolist(run.result) if tf.is_tensor(run.result) else run.result
                if values_equal(got, want):
                    return True
                said = _("torch's loop ends at {want}; yours at {got}",
                         want=[round(v, 4) for v in want],
                         got=[round(v, 4) for v in got] if isinstance(got, list) else repr(got))
                if steps != 3 and values_equal(got, _train(3, clear=True)):
                    return False, _("{said}, where 3 steps end: let the loop run `steps` times",
                                    said=said)
                if values_equal(got, TRAIN_START) and steps:
                    return False, _("{said}: w never moved, the report was cleared before "
                                    "step() could use it", said=said), \
                        "zero_grad_misplaced" if _clears(fn.source) else None
                if values_equal(got, piled):
                    if _clears(fn.source):
                        return False, _("{said}, as if nothing were cleared: clear the desk in "
                                        "every step, before `backward()`", said=said), \
                            "zero_grad_misplaced"
                    return False, _("{said}: every step's report piled on the last", said=said), \
                        "grad_accumulates_not"
                if not _clears(fn.source):
                    return False, _("{said}: your loop never clears the desk, so every step's "
                                    "report piles on the last", said=said), "grad_accumulates_not"
                return False, said

            return Requirement(_("after {steps} step(s) `w` is where torch's loop, each step "
                                 "using its own report, puts it", steps=steps), test)

        steps = TRAIN_STEPS[variant if variant in TRAIN_STEPS else "visible"]
        verdicts = [self.run_and_require(fn, [_centre_requirement(), trained(steps[0])], part)]
        verdicts += [score(self.qid, [trained(n)], lambda n=n: run_learner(fn, n), part)
                     for n in steps[1:]]
        return Verdict.merge(self.qid, verdicts)


def _detached(fn):
    def choose(exc: LearnerCodeError) -> str | None:
        if "does not require grad" in exc.summary and ".detach()" in fn.source:
            return "detach_keeps_grad"
        return None

    return choose


@lesson.register
class Q10TwoReports(WriteCode):
    qid = "q10"
    title = N_("Find the bug: two reports from one route")
    function_name = "audit_two_reports"
    starter = """\
def audit_two_reports():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    station = w.exp()                      # exp saves its result for backward
    speed = station.sum()
    cost = (station * station).sum()
    speed.backward()
    cost.backward()
    return w
"""

    def grade_code(self, fn, part, variant):
        import torch

        def report(loss) -> list:  # the intended audit, run by torch first
            w = torch.tensor([1.0, 2.0], requires_grad=True)
            station = w.exp()
            loss(station).backward()
            return tf.grad_values(w)

        want = report(lambda s: s.sum() + (s * s).sum())
        speed, cost = report(lambda s: s.sum()), report(lambda s: (s * s).sum())

        def both(run):
            g = tf.grad_values(run.result) if tf.is_tensor(run.result) else None
            if g is not None and values_equal(g, want, 1e-4):
                return True
            said = _("torch's w.grad for both reports is {want}; yours is {grad}",
                     want=[round(v, 3) for v in want],
                     grad=g if g is None else [round(v, 3) for v in g])
            if g is not None and values_equal(g, speed, 1e-4):
                myth = "detach_in_loss_harmless" if ".detach()" in fn.source else None
                return False, _("{said}, the gradient of `speed` alone: no report came back "
                                "from `cost`", said=said), myth
            if g is not None and values_equal(g, cost, 1e-4):
                return False, _("{said}, the gradient of `cost` alone: `speed`'s report was "
                                "lost or cleared", said=said)
            return False, said

        return self.run_and_require(fn, [
            _centre_requirement(),
            Requirement("`w.grad` holds torch's d(speed + cost)/dw", both),
        ], part, on_error=_detached(fn))
