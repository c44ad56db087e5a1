"""Lesson 04, hooks: the questions of ``source/04_hooks/04_hooks.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts off its namespace; a code question computes its reference with torch in
the oracle *before* running the learner's function (and, for a hook, the
backward passes that call it), then compares.

A misconception is named only from evidence: the value a learner predicted (compared with
what a known wrong belief predicts), or what torch reports about what their code did (a
gradient equal to a known wrong program's, a probe that edited its argument, probes left
installed, which forward pass the probes were on).
"""

from __future__ import annotations

import ast
import functools
import warnings
from dataclasses import dataclass
from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName, LearnerFunction, TensorValue
from autograder.questions import (
    CodeRun,
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    Verdict,
    WriteCode,
    learner_namespace,
    run_learner,
    score,
    values_equal,
)
from course.i18n import N_, _

lesson = Lesson("04_hooks", "Hooks: inspection probes",
                preload=("torch._dynamo",))  # its checks train with optimizers


def _values(v) -> Any:
    """A tensor's values as (nested) lists; lists of tensors element-wise; the rest as is."""
    if v is None:
        return None
    if tf.is_tensor(v):
        return tf._tolist(v)
    if isinstance(v, TensorValue):
        return v.values
    if isinstance(v, list | tuple):
        return [_values(x) for x in v]
    return v


def _error(err) -> ExceptionName | None:
    return None if err is None else ExceptionName(type(err).__name__)


@functools.cache
def _namespace(qid: str) -> dict:
    """The namespace of a predict question's code, run once per check (to read what a wrong
    belief would predict, e.g. the other probe's log or a parameter's shape)."""
    import torch

    torch.manual_seed(0)
    ns = learner_namespace()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(lesson[qid].code, f"<scenario 04_hooks/{qid}>", "exec"), ns)  # noqa: S102
    return ns


def _uses(fn: LearnerFunction, *names: str) -> bool:
    """Whether the learner's code names any of ``names`` (as a name or an attribute)."""
    try:
        tree = ast.parse(fn.source)
    except SyntaxError:
        return False
    return any((isinstance(n, ast.Attribute) and n.attr in names)
               or (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(tree))


def _rounded(v: Any) -> Any:
    """Values as a learner reads them: float32 noise rounded away (-0.4, not -0.40000000596)."""
    if isinstance(v, list | tuple):
        return [_rounded(x) for x in v]
    return round(v, 6) if isinstance(v, float) else v


def _raises(given: Any) -> bool:
    return isinstance(given, ExceptionName)


def _raised(exc: BaseException) -> str:
    """``RuntimeError: <the first line of torch's message>``, as a learner's error is shown."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"


def _listing(items) -> str:
    """Items of a list inside a sentence, separated as the current language separates them."""
    # TRANSLATORS: the separator between the items of a list inside a sentence
    return _(", ").join(items)


# --------------------------------------------------------------------------- Q1 non-leaf probe

STATION_PROBE = """\
x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)     # a sorting centre
station = x * 2                                            # a transit station
seen = []
station.register_hook(lambda g: seen.append(g.tolist()))   # an inspection probe
loss = (station ** 2).sum()
loss.backward()
"""


def _seen_myth(given: Any, expected: Any) -> str | None:
    if _values(given) in (None, [], [None]):
        return "nonleaf_grad_never_computed"
    return None


def _stored_myth(given: Any, expected: Any) -> str | None:
    return "nonleaf_grad_stored" if isinstance(_values(given), list) else None


@lesson.register
class Q1StationProbe(Predict):
    qid = "q1"
    title = N_("What the probe at a transit station sees")
    code = STATION_PROBE
    items = [
        Item("seen", "The probe is called once, with d loss / d station = 2 * station = "
             "[4, 8, 12]: the gradient of a non-leaf is computed on the way back to `x`. Give "
             "the list the probe filled: a list holding one list.", _seen_myth, single=True),
        Item("station.grad", "The gradient passed the probe but is not stored: `station` is a "
             "transit station and nobody called `retain_grad()`. Its `.grad` is `None`.",
             _stored_myth),
        Item("x.grad", "The chain rule goes on through `station`: d loss / d x = "
             "2 * station * 2 = 8 * x, stored on the sorting centre.", None),
    ]

    def facts(self, ns):
        return {"seen": ns["seen"], "station.grad": tf.grad_values(ns["station"]),
                "x.grad": tf.grad_values(ns["x"])}


# --------------------------------------------------------------------------- Q2 leaf probes

LEAF_PROBES = """\
w = torch.tensor([1.0, 2.0], requires_grad=True)           # a sorting centre
probe, after = [], []
w.register_hook(lambda g: probe.append(g.tolist()))
w.register_post_accumulate_grad_hook(lambda p: after.append(p.grad.tolist()))
(w * 3).sum().backward()                                    # first report
(w * w).sum().backward()                                    # second report, no zero_grad()
"""


def _log_of(name: str, myth: str):
    """The wrong answer is the other probe's log: the learner swapped what the two see."""
    return lambda given, expected: myth if values_equal(_values(given),
                                                        _namespace("q2")[name]) else None


def _last_report(given: Any, expected: Any) -> str | None:
    second = _namespace("q2")["probe"][-1]  # the second pass's own report, not the total
    return "grad_accumulates_not" if values_equal(_values(given), second) else None


@lesson.register
class Q2LeafProbes(Predict):
    qid = "q2"
    title = N_("A probe at a sorting centre, and one behind the desk")
    code = LEAF_PROBES
    items = [
        Item("probe", "`register_hook` on a leaf fires *before* the report is added into "
             "`.grad`: it sees each pass's own gradient, [3, 3] and then 2 * w = [2, 4].",
             _log_of("after", "leaf_hook_sees_accumulated")),
        Item("after", "A post-accumulate-grad hook fires *after* `AccumulateGrad`: `p.grad` is "
             "the running total, [3, 3] and then [3 + 2, 3 + 4].",
             _log_of("probe", "post_hook_sees_pass")),
        Item("w.grad", "Backward adds into `.grad`: [3, 3] + [2, 4].", _last_report),
    ]

    def facts(self, ns):
        return {"probe": ns["probe"], "after": ns["after"], "w.grad": tf.grad_values(ns["w"])}


# --------------------------------------------------------------------------- Q3 clipping probe

CLIPPING_PROBE = """\
x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
station = x * 1.0
station.retain_grad()                                       # a monitor, installed first
station.register_hook(lambda g: g.clamp(-1.0, 1.0))         # a probe that clips
(station * torch.tensor([5.0, 0.5, -4.0])).sum().backward()
"""

RAW = [5.0, 0.5, -4.0]  # the unclipped gradient at the station: what the two beliefs predict


@lesson.register
class Q3ClippingProbe(Predict):
    qid = "q3"
    title = N_("A probe that changes what passes")
    code = CLIPPING_PROBE
    items = [
        Item("x.grad", "A hook that *returns* a tensor replaces the gradient for everything "
             "upstream: `x` receives the clipped [1, 0.5, -1], not [5, 0.5, -4].",
             lambda given, expected: "hook_return_ignored" if values_equal(given, RAW)
             else None),
        Item("station.grad", "The `retain_grad()` monitor always reads last, after every tensor "
             "hook, whatever the order they were installed in: it keeps the clipped gradient.",
             lambda given, expected: "retain_grad_sees_raw" if values_equal(given, RAW)
             else None),
    ]

    def facts(self, ns):
        return {"x.grad": tf.grad_values(ns["x"]), "station.grad": tf.grad_values(ns["station"])}


# --------------------------------------------------------------------------- Q4 errors

WHERE_PROBES_GO = """\
def try_register(register):
    try:
        register(lambda g: None)
        return None
    except Exception as exc:
        return exc

data = torch.randn(3)                                   # an ordinary parcel
station = torch.randn(3, requires_grad=True) * 2        # a transit station
weight = nn.Linear(3, 1).weight                         # a sorting centre
hook_on_data = try_register(data.register_hook)
hook_on_station = try_register(station.register_hook)
post_on_station = try_register(station.register_post_accumulate_grad_hook)
post_on_weight = try_register(weight.register_post_accumulate_grad_hook)
"""


def _if_accepted(myth: str):
    """Torch refuses this probe: ``myth`` when the learner said it is accepted."""
    return lambda given, expected: myth if given is None else None


def _if_refused(myth: str | None):
    """Torch accepts this probe: ``myth`` when the learner said it raises."""
    return lambda given, expected: myth if _raises(given) else None


@lesson.register
class Q4WhereProbesGo(Predict):
    qid = "q4"
    title = N_("Where a probe can be installed")
    code = WHERE_PROBES_GO
    items = [
        Item("hook_on_data", "No gradient will ever pass an ordinary parcel (a tensor that does "
             "not require grad), so torch refuses the probe with a `RuntimeError` (\"cannot "
             "register a hook on a tensor that doesn't require gradient\").",
             _if_accepted("hook_on_constant")),
        Item("hook_on_station", "A transit station requires grad, and backward computes its "
             "gradient on the way back: `register_hook` is accepted there, and is the way to see "
             "that gradient.", _if_refused("hook_only_on_leaves")),
        Item("post_on_station", "Only a leaf has a `.grad` desk to accumulate into; a "
             "post-accumulate hook on a transit station raises `RuntimeError`.",
             _if_accepted("post_hook_on_nonleaf")),
        Item("post_on_weight", "A parameter is a leaf that requires grad (a sorting centre with "
             "a `.grad` desk): the post-accumulate hook is accepted.", _if_refused(None)),
    ]

    def facts(self, ns):
        return {k: _error(ns[k]) for k in ("hook_on_data", "hook_on_station", "post_on_station",
                                           "post_on_weight")}


# --------------------------------------------------------------------------- Q5 module hooks

MODULE_PROBES = """\
model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))
batch = torch.randn(5, 4)                               # input data: no grad
order, grad_in = [], {}

def probe(name):
    def hook(module, grad_input, grad_output):
        order.append(name)
        g = grad_input[0]
        grad_in[name] = None if g is None else list(g.shape)
    return hook

model[0].register_full_backward_hook(probe("first"))
model[2].register_full_backward_hook(probe("last"))
model(batch).sum().backward()
"""


def _order_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list | tuple) and list(given) == list(reversed(expected)):
        return "backward_hooks_forward_order"
    return None


def _shape_myth(layer: int):
    """grad_input[0]'s shape: a parameter's shape reveals one belief, the data batch's another."""

    def choose(given: Any, expected: Any) -> str | None:
        ns = _namespace("q5")
        shape = _values(given)
        params = [list(p.shape) for p in ns["model"][layer].parameters()]
        if shape in params:
            return "grad_input_is_param_grad"
        if expected is None and shape == list(ns["batch"].shape):
            return "constant_gets_grad"  # the data batch would need requires_grad for that
        return None

    return choose


@lesson.register
class Q5ModuleProbes(Predict):
    qid = "q5"
    title = N_("Probes on every layer")
    code = MODULE_PROBES
    items = [
        Item("order", "Backward walks from the final delivery back to the input, so the last "
             "layer's backward hook fires first.", _order_myth),
        Item("grad_in['last']", "`grad_input` holds the gradient with respect to the layer's "
             "*input*, the `Tanh` output: one row per example, [5, 3]. The weight's gradient "
             "([1, 3]) is in `.grad`, not here.", _shape_myth(2)),
        Item("grad_in['first']", "The first layer's input is the data batch, an ordinary parcel "
             "that does not require grad: its gradient is never computed and `grad_input[0]` is "
             "`None`.", _shape_myth(0)),
    ]

    def facts(self, ns):
        return {"order": ns["order"], "grad_in['last']": ns["grad_in"]["last"],
                "grad_in['first']": ns["grad_in"]["first"]}


# --------------------------------------------------------------------------- Q6 memory

PROBE_COST = """\
def kept_bytes(probe):
    \"\"\"Bytes of the tensors `probe` keeps alive after backward: numel * element_size.\"\"\"
    x = torch.randn(64, 32, requires_grad=True)
    station = torch.tanh(x)                             # 64 x 32 float32 numbers
    kept = probe(station)                               # the list the probe fills
    station.sum().backward()
    if station.retains_grad:
        kept.append(station.grad)
    return sum(t.numel() * t.element_size() for t in kept)

def noop_probe(station):
    station.register_hook(lambda g: None)               # looks, keeps nothing
    return []

def clone_probe(station):
    copies = []
    station.register_hook(lambda g: copies.append(g.clone()))
    return copies

def monitor(station):
    station.retain_grad()
    return []

noop = kept_bytes(noop_probe)
clone = kept_bytes(clone_probe)
retain = kept_bytes(monitor)
"""


def _number(given: Any) -> bool:
    return isinstance(given, int | float) and not isinstance(given, bool)


def _noop_myth(given: Any, expected: Any) -> str | None:
    return "hook_costs_most" if _number(given) and given > expected else None


def _clone_myth(given: Any, expected: Any) -> str | None:
    if not _number(given):
        return None
    if given == 0:
        return "hook_is_free_when_storing"
    return "hook_costs_most" if given > expected else None


@lesson.register
class Q6ProbeCost(Predict):
    qid = "q6"
    title = N_("What a probe costs (the parcel-sorting article's table, measured)")
    code = PROBE_COST
    items = [
        Item("noop", "A hook that keeps nothing costs nothing: the gradient passes and is freed "
             "as usual.", _noop_myth),
        Item("clone", "Each stored clone is a tensor shaped like the station: 64 * 32 = 2048 "
             "numbers of 4 bytes each (float32).", _clone_myth),
        Item("retain", "`retain_grad()` keeps one `.grad` shaped like the station: the same "
             "bytes as the cloning probe, no more.", None),
    ]

    def facts(self, ns):
        return {k: int(ns[k]) for k in ("noop", "clone", "retain")}


# --------------------------------------------------------------------------- Q7 clip probe

CLIP_CASES = {  # part -> cases (values, weights, limit); the hidden tests add the second ones
    "station": [([1.0, -2.0, 3.0, 0.5], [5.0, 0.5, -4.0, -0.2], 1.0),
                ([[0.5, -1.0], [2.0, 0.0]], [[3.0, -0.1], [-0.3, -7.0]], 0.25)],
    "leaf": [([1.0, 2.0, 3.0], [0.2, -3.0, 1.5], 0.5),
             ([-1.0, 0.5], [4.0, -0.05], 2.0)],
    "handle": [([1.0, -2.0, 3.0], [5.0, 0.5, -4.0], 1.0),
               ([0.5, 0.25], [-9.0, 9.0], 0.1)],
}

CLIP_TEXT = {  # marked here, translated where a requirement is made
    "station": N_("at a transit station, the gradient reaching the leaf is clipped"),
    "leaf": N_("at a sorting centre, each pass's report is clipped before it is added to `.grad` "
               "(two backward passes, the second from `target.sum() * 3`)"),
    "handle": N_("the returned handle takes the probe off: after `handle.remove()` nothing is "
                 "clipped"),
}


@dataclass
class _Clipped:
    """What one clipping case did: the leaf's .grad, and what the learner's probe did."""

    grad: Any
    edited_in_place: bool = False
    probes: int = 0
    handle: str | None = None  # the type of what was returned, when it is not a handle


def _clip_run(fn: LearnerFunction | None, values, weights, limit, case: str,
              on_total: bool = False) -> _Clipped:
    """Run one clipping case. ``fn=None`` is torch's own clamp probe (the reference);
    ``on_total`` clips the accumulated ``.grad`` instead (what a desk probe would do)."""
    import torch

    leaf = torch.tensor(values, requires_grad=True)
    target = leaf if case == "leaf" else leaf * 2
    out = _Clipped(None)
    passing = []  # a witness probe before the learner's: was the passing gradient edited?
    if fn is None:
        if on_total:
            def clip_total(p):
                p.grad.clamp_(-limit, limit)  # returns None: a desk probe must

            handle = leaf.register_post_accumulate_grad_hook(clip_total)
        else:
            handle = target.register_hook(lambda g: g.clamp(-limit, limit))
    else:
        target.register_hook(lambda g: passing.append((g, tf.version(g))))
        handle = run_learner(fn, target, limit).result
        out.probes = len(target._backward_hooks or {}) - 1 + \
            len(getattr(target, "_post_accumulate_grad_hooks", None) or {})
    try:
        if case == "handle":
            if callable(getattr(handle, "remove", None)):
                handle.remove()
            else:
                out.handle = type(handle).__name__
        (target * torch.tensor(weights)).sum().backward()
        if case == "leaf":  # a second report: one number expanded to every entry
            (target.sum() * 3.0).backward()
    except LearnerCodeError:
        raise
    except Exception as exc:  # raised by the learner's probe during backward
        raise LearnerCodeError(_("{error} (in backward, from your probe)",
                                 error=_raised(exc)),
                               type(exc).__name__) from None
    out.grad = tf.grad_values(leaf)
    out.edited_in_place = any(tf.version(g) != v for g, v in passing)
    return out


def _edited_in_place(exc: LearnerCodeError) -> str | None:
    text = exc.summary.replace("-", "")
    return "hook_inplace_edit" if "memory location" in text or "inplace" in text else None


def _clip_requirement(part: str, values, weights, limit) -> Requirement:
    want = _clip_run(None, values, weights, limit, part).grad
    unclipped = _clip_run(None, values, weights, float("inf"), part).grad
    on_total = _clip_run(None, values, weights, limit, part, on_total=True).grad
    kept_on = _clip_run(None, values, weights, limit, "station").grad if part == "handle" else None

    def test(r: _Clipped):
        if r.handle == "NoneType":
            return False, _("your function returned `None`, not the handle: return what "
                            "`register_hook` gives you")
        if r.handle is not None:
            return False, _("your function returned a {type}, not the handle: return what "
                            "`register_hook` gives you", type=r.handle)
        if r.edited_in_place:
            return (False, _("your probe edited the passing gradient in place (its version "
                             "counter moved): return a new tensor instead"), "hook_inplace_edit")
        if values_equal(r.grad, want):
            return True, ""
        if part == "handle":
            got = _("the leaf's `.grad` is {grad}; with the probe taken off it is {want}",
                    grad=_rounded(r.grad), want=_rounded(want))
        else:
            got = _("the leaf's `.grad` is {grad}; torch's clamp probe gives {want}",
                    grad=_rounded(r.grad), want=_rounded(want))
        if part == "handle" and values_equal(r.grad, kept_on):
            return False, _("{comparison}: the probe was still on the line after "
                            "`handle.remove()` (is the handle you return the one of the clipping "
                            "probe?)", comparison=got)
        if values_equal(r.grad, unclipped):
            if r.probes <= 0:
                return False, _("{comparison}: your function installed no probe on `t`",
                                comparison=got)
            return (False, _("nothing was clipped: {comparison}. A probe changes what passes "
                             "only by *returning* the new tensor", comparison=got),
                    "hook_return_ignored")
        if part == "leaf" and values_equal(r.grad, on_total):
            return False, _("{comparison}: your probe clipped the running total in `.grad`, not "
                            "each pass's report before it was added", comparison=got)
        return False, got

    return Requirement(_("{requirement} (limit {limit})", requirement=_(CLIP_TEXT[part]),
                         limit=limit), test, part=part)


@lesson.register
class Q7ClipProbe(WriteCode):
    qid = "q7"
    title = N_("Install a clipping probe")
    function_name = "attach_clip"
    part_names = ["station", "leaf", "handle"]

    def grade_code(self, fn, part, variant):
        verdicts = []
        for name in self.part_names:
            if part not in (None, name):
                continue
            cases = CLIP_CASES[name] if variant == "hidden" else CLIP_CASES[name][:1]
            for values, weights, limit in cases:
                verdicts.append(score(
                    self.qid, [_clip_requirement(name, values, weights, limit)],
                    lambda v=values, w=weights, lim=limit, n=name: _clip_run(fn, v, w, lim, n),
                    name, on_error=_edited_in_place))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- Q8 layer norms

NORM_MODELS = {
    "mlp": ("nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), "
            "nn.Linear(8, 2))", (16, 4)),
    "nested": ("nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Sequential(nn.Linear(5, 5), "
               "nn.Sigmoid()), nn.Linear(5, 3))", (7, 6)),
    "deep": ("nn.Sequential(nn.Sequential(nn.Linear(3, 4), nn.Tanh()), nn.Linear(4, 4), "
             "nn.Sequential(nn.ReLU(), nn.Sequential(nn.Linear(4, 2))))", (5, 3)),  # hidden only
}


def _build(spec: str, shape, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    model = eval(spec, {"nn": torch.nn})  # noqa: S307 -- our own constant specs
    return model, torch.randn(*shape)


def _reference_norms(spec: str, shape) -> dict[str, dict[str, float | None]]:
    """For every nn.Linear: the norm of d model(x).sum() / d output (by retain_grad()), and the
    norms a probe on the wrong tensor would report (its input, its weight)."""
    import torch

    model, x = _build(spec, shape)
    outputs, inputs = {}, {}

    def keep(name):
        def hook(module, args, output):
            output.retain_grad()
            outputs[name] = output
            if args[0].requires_grad:
                args[0].retain_grad()
            inputs[name] = args[0]
        return hook

    linears = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    for name, m in linears.items():
        m.register_forward_hook(keep(name))
    model(x).sum().backward()

    def norm(t):
        g = None if t is None else t.grad
        return None if g is None else float(torch.linalg.vector_norm(g))

    return {
        "output": {n: norm(o) for n, o in outputs.items()},
        "input": {n: norm(i) for n, i in inputs.items()},
        "weight": {n: float(torch.linalg.vector_norm(m.weight.grad)) for n, m in linears.items()},
    }


HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
HOOK_KINDS = {"_forward_hooks": N_("forward hooks"), "_forward_pre_hooks": N_("forward pre hooks"),
              "_backward_hooks": N_("backward hooks"),
              "_backward_pre_hooks": N_("backward pre hooks")}


def _leftover_hooks(model) -> list[str]:
    left = []
    for name, m in model.named_modules():
        for attr in HOOK_DICTS:
            if len(getattr(m, attr, {}) or {}):
                left.append(_("`{module}` ({kind})", module=name or "model",
                              kind=_(HOOK_KINDS[attr])))
        for pname, p in m.named_parameters(recurse=False):
            if len(p._backward_hooks or {}) or len(getattr(p, "_post_accumulate_grad_hooks",
                                                           None) or {}):
                left.append(_("`{param}` (tensor hook)",
                              param=(name + "." if name else "") + pname))
    return left


@dataclass
class _Monitored:
    """The learner's result, and how often the model ran forward while their function ran."""

    result: Any
    forwards: int


def _monitor_run(fn: LearnerFunction, model, x) -> _Monitored:
    import torch

    count = [0]

    def counter(module, args, output):
        if module is model:
            count[0] += 1

    handle = torch.nn.modules.module.register_module_forward_hook(counter)
    try:
        result = run_learner(fn, model, x).result
    except LearnerCodeError as exc:
        if "'NoneType' object has no attribute" in exc.summary and _uses(fn, "grad_input"):
            raise LearnerCodeError(
                _("{error}. `grad_input[0]` is `None` at the first layer, whose input is the "
                  "data batch (an ordinary parcel); the gradient at a layer's output is "
                  "`grad_output[0]`", error=exc.summary), exc.exc_type) from None
        raise
    finally:
        handle.remove()
    return _Monitored(result, count[0])


def _norm_requirements(label: str, model, want) -> list[Requirement]:
    out = want["output"]

    def norms(r: _Monitored):
        res = r.result
        if not isinstance(res, dict):
            return False, _("return a dict {{layer name: norm}}, not {type}",
                            type=type(res).__name__)
        got = {str(k): _values(v) for k, v in res.items()}
        missing = sorted(set(out) - set(got))
        if (not got or missing) and r.forwards > 1:
            return (False, _("your probes saw nothing of the backward pass (missing {layers}): "
                             "the model ran forward {n} times, and tensor probes installed on the "
                             "outputs of one pass never see the next pass's outputs",
                             layers=_listing(f"`{k}`" for k in missing), n=r.forwards),
                    "monitor_watches_layer")
        if set(got) != set(out):
            top = {k for k in out if "." not in k}
            names = {"expected": sorted(out), "got": sorted(got)}
            if set(got) == top:
                return False, _("expected one entry per `nn.Linear`, named as in "
                                "`model.named_modules()`: {expected}; got {got}: "
                                "`named_children()` lists only the top level; `named_modules()` "
                                "names the nested layers too", **names)
            return False, _("expected one entry per `nn.Linear`, named as in "
                            "`model.named_modules()`: {expected}; got {got}", **names)

        def same(ref):
            return all(ref[k] is not None and values_equal(got[k], ref[k], 1e-4) for k in out)

        if same(out):
            return True, ""
        if same(want["weight"]):
            return (False, _("these are the norms of each layer's `weight.grad`: a probe on "
                             "the weight sees the weight's gradient, not the one at the layer's "
                             "output"), "monitor_watches_layer")
        inputs = {k: v for k, v in want["input"].items() if v is not None}
        if inputs and all(values_equal(got[k], v, 1e-4) for k, v in inputs.items()):
            return False, _("these are the norms at each layer's *input* (`grad_input[0]`); "
                            "the output's gradient is `grad_output[0]`")
        shown = _listing(_("`{layer}`: yours {yours}, torch {torch}", layer=k, yours=repr(got[k]),
                           torch=format(out[k], ".6g"))
                         for k in out if not values_equal(got[k], out[k], 1e-4))
        return False, _("wrong norms ({norms}). Use the gradient of `model(x).sum()` with "
                        "respect to each layer's *output* (`grad_output[0]`), and its norm over "
                        "all entries", norms=shown)

    def cleanup(_r):
        left = _leftover_hooks(model)
        return (not left, _("probes left installed on {places}: remove every handle before "
                            "returning", places=_listing(left)), "hooks_pile_up")

    return [
        Requirement(_("model `{label}`: every layer's output-gradient norm", label=label), norms,
                    part="norms"),
        Requirement(_("model `{label}`: no probe left installed", label=label), cleanup,
                    part="cleanup"),
    ]


@lesson.register
class Q8LayerNorms(WriteCode):
    qid = "q8"
    title = N_("Monitor every layer")
    function_name = "output_grad_norms"
    part_names = ["norms", "cleanup"]

    def grade_code(self, fn, part, variant):
        # nested layers in the visible check too: the question asks for them by name
        labels = ["mlp", "nested", "deep"] if variant == "hidden" else ["mlp", "nested"]
        verdicts = []
        for label in labels:
            spec, shape = NORM_MODELS[label]
            want = _reference_norms(spec, shape)
            model, x = _build(spec, shape)
            verdicts.append(score(self.qid, _norm_requirements(label, model, want),
                                  lambda m=model, x=x: _monitor_run(fn, m, x), part))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- Q9 aliased log

def _reference_history(steps: int) -> tuple[list, list]:
    """The running .grad after each micro-batch, and each micro-batch's own report."""
    import torch

    w = torch.tensor([1.0, -1.0], requires_grad=True)
    history, reports = [], []
    w.register_post_accumulate_grad_hook(lambda p: history.append(tf._tolist(p.grad)))
    w.register_hook(lambda g: reports.append(tf._tolist(g)))
    for step in range(steps):
        (w * torch.tensor([float(step + 1), 2.0])).sum().backward()
    return history, reports


def _count(steps: int, text: str, piled: str | None = None) -> Requirement:
    """The requirement ``text`` (already translated): the result has ``steps`` entries."""

    def test(run: CodeRun):
        res = run.result
        n = len(res) if isinstance(res, list | tuple) else None
        if n is None:
            return False, _("expected {steps} entries, got a {type}", steps=steps,
                            type=type(res).__name__)
        if piled and n == steps * (steps + 1) // 2 and n != steps:
            return False, _("expected {steps} entries, got {n} = 1 + 2 + ... + {steps}: step k "
                            "ran k probes", steps=steps, n=n), piled
        if n == 0:
            return False, _("expected {steps} entries, got 0: no probe saw a backward pass (was "
                            "it removed before `backward()`?)", steps=steps)
        return n == steps, _("expected {steps} entries, got {n}", steps=steps, n=n)

    return Requirement(text, test)


@lesson.register
class Q9AliasedLog(WriteCode):
    qid = "q9"
    title = N_("Find the bug: the log that repeats itself")
    function_name = "grad_history"
    starter = '''\
def grad_history(steps):
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    history = []
    w.register_post_accumulate_grad_hook(lambda p: history.append(p.grad))
    for step in range(steps):
        batch = torch.tensor([float(step + 1), 2.0])
        (w * batch).sum().backward()          # no zero_grad(): micro-batch reports add up
    return history
'''

    def grade_code(self, fn, part, variant):
        steps = 4 if variant == "hidden" else 3
        want, reports = _reference_history(steps)

        def entries(run: CodeRun):
            if not isinstance(run.result, list | tuple):
                return False, _("your function returned a {type}, not a list",
                                type=type(run.result).__name__)
            got = _values(list(run.result))
            if values_equal(got, want):
                return True, ""
            if values_equal(got, [want[-1]] * steps):
                return (False, _("every entry equals the last running total {total}: each one "
                                 "is the same `.grad` tensor, updated in place by the next "
                                 "backward", total=want[-1]),
                        "detach_copies" if _uses(fn, "detach") and not _uses(fn, "clone")
                        else "grad_log_aliases")
            if values_equal(got, reports):
                return (False, _("the entries are each micro-batch's own report {reports}, not "
                                 "the running total in `.grad`", reports=reports),
                        "leaf_hook_sees_accumulated" if _uses(fn, "register_hook") else None)
            return False, _("expected {want}, got {got}", want=want, got=got)

        return self.run_and_require(fn, [
            _count(steps, _("one entry per micro-batch ({steps} micro-batches)", steps=steps)),
            Requirement("entry k is the running `.grad` after micro-batch k", entries),
        ], part, args=(steps,))


# --------------------------------------------------------------------------- Q10 piled probes

@dataclass
class _Probed:
    """The learner's result, and the most tensor probes left installed on one tensor that
    their function registered a probe on."""

    result: Any
    warnings: list[str]
    most_installed: int


def _probed_run(fn: LearnerFunction, *args: Any) -> _Probed:
    """Run the learner's function, noting every tensor it calls ``register_hook`` on (this runs
    in the checker's throw-away fork of a check: the patch dies with it)."""
    import torch

    hooked: list = []
    original = torch.Tensor.register_hook

    def register_hook(self, hook):
        hooked.append(self)
        return original(self, hook)

    torch.Tensor.register_hook = register_hook
    try:
        run = run_learner(fn, *args)
    finally:
        torch.Tensor.register_hook = original
    most = max((len(t._backward_hooks or {}) for t in hooked), default=0)
    return _Probed(run.result, run.warnings, most)


def _reference_training(steps: int) -> list[float]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    norms = []
    for _step in range(steps):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        norms.append(float(torch.linalg.vector_norm(model.weight.grad)))
        opt.step()
    return norms


@lesson.register
class Q10PiledProbes(WriteCode):
    qid = "q10"
    title = N_("Find the bug: probes that pile up")
    function_name = "train_with_log"
    starter = '''\
def train_with_log(steps):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    log = []
    for step in range(steps):
        model.weight.register_hook(lambda g: log.append(g.norm().item()))
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return log
'''

    def grade_code(self, fn, part, variant):
        steps = 5 if variant == "hidden" else 3
        want = _reference_training(steps)

        def values(run: CodeRun):
            if not isinstance(run.result, list | tuple):
                return False, _("your function returned a {type}, not a list",
                                type=type(run.result).__name__)
            got = _values(list(run.result))
            if values_equal(got, want, 1e-4):
                return True, ""
            logs = {"want": _rounded(want), "got": _rounded(got)}
            if not (isinstance(got, list) and len(got) == steps):
                return False, _("the reference run logs {want}, yours {got}", **logs)
            first = next(k for k in range(steps) if not values_equal(got[k], want[k], 1e-4))
            if first:
                return False, _("the reference run logs {want}, yours {got}: from step {step} on "
                                "the training itself differs (keep the loop as it is given, "
                                "`opt.zero_grad()` included)", step=first + 1, **logs)
            return False, _("the reference run logs {want}, yours {got}: already at step 1 the "
                            "logged number is not the weight's gradient norm", **logs)

        def one_probe(run: _Probed):
            if run.most_installed <= 1:
                return True, ""
            return (False, _("after {steps} steps, {n} probes are still installed on one "
                             "tensor: each step added one, so step k ran k probes. Dropping the "
                             "repeated numbers from the log hides the pile-up; it does not stop "
                             "it", steps=steps, n=run.most_installed), "hooks_pile_up")

        return score(self.qid, [
            _count(steps, _("one entry per training step ({steps} steps)", steps=steps),
                   piled="hooks_pile_up"),
            Requirement("entry k is the norm of the weight's gradient at step k", values),
            Requirement("the probes do not pile up: at most one on the weight", one_probe),
        ], lambda: _probed_run(fn, steps), part)
