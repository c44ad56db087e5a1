"""Lesson 04, hooks: the questions of ``source/04_hooks/04_hooks.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts off its namespace; a code question computes its reference with torch in
the oracle *before* running the learner's function (and, for a hook, the
backward passes that call it), then compares.
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
    run_learner,
    values_equal,
)

lesson = Lesson("04_hooks", "Hooks: inspection probes")


def _values(v) -> Any:
    """A tensor's values as (nested) lists; lists of tensors element-wise; the rest as is."""
    if v is None:
        return None
    if tf.is_tensor(v):
        return tf._tolist(v)
    if isinstance(v, list | tuple):
        return [_values(x) for x in v]
    return v


def _error(err) -> ExceptionName | None:
    return None if err is None else ExceptionName(type(err).__name__)


def _myth_if(wrong_value_of, key: str):
    """Name misconception ``key`` when the wrong answer equals ``wrong_value_of(expected)``."""

    def choose(given: Any, expected: Any) -> str | None:
        try:
            wrong = wrong_value_of(expected)
        except Exception:
            return None
        return key if values_equal(given, wrong) else None

    return choose


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
    if given in (None, [], [None]):
        return "nonleaf_grad_never_computed"
    return None


@lesson.register
class Q1StationProbe(Predict):
    qid = "q1"
    title = "What the probe at a transit station sees"
    code = STATION_PROBE
    items = [
        Item("seen", "the probe is called once, with d loss / d station = 2 * station = "
             "[4, 8, 12]: the gradient of a non-leaf *is* computed on the way back to x. Give "
             "the list the probe filled: a list holding one list.", _seen_myth),
        Item("station.grad", "the gradient passed the probe but is not stored: station is a "
             "non-leaf and nobody called retain_grad(). Its .grad is None.",
             "nonleaf_grad_stored"),
        Item("x.grad", "the chain rule goes on through station: d loss / d x = 2 * station * 2 "
             "= 8 * x, stored on the sorting centre.", None),
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


def _same_as(key: str, myth: str):
    """The wrong answer is what another item holds (e.g. the accumulated log)."""

    def choose(given: Any, expected: Any) -> str | None:
        facts = Q2LeafProbes().scenario()
        return myth if values_equal(given, facts[key]) else None

    return choose


def _not_accumulated(given: Any, expected: Any) -> str | None:
    return "grad_accumulates_not" if values_equal(given, [2.0, 4.0]) else None


@lesson.register
class Q2LeafProbes(Predict):
    qid = "q2"
    title = "A probe at a sorting centre, and the one after the desk"
    code = LEAF_PROBES
    items = [
        Item("probe", "register_hook on a leaf fires *before* the gradient is added into .grad: "
             "it sees each pass's own gradient, [3, 3] and then 2 * w = [2, 4].",
             _same_as("after", "leaf_hook_sees_accumulated")),
        Item("after", "a post-accumulate-grad hook fires *after* AccumulateGrad: p.grad is the "
             "running total, [3, 3] and then [3 + 2, 3 + 4].",
             _same_as("probe", "post_hook_sees_pass")),
        Item("w.grad", "backward adds into .grad: [3, 3] + [2, 4].", _not_accumulated),
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

RAW = [5.0, 0.5, -4.0]  # the unclipped gradient at the station, for naming the misconception


@lesson.register
class Q3ClippingProbe(Predict):
    qid = "q3"
    title = "A probe that changes what passes"
    code = CLIPPING_PROBE
    items = [
        Item("x.grad", "a hook that *returns* a tensor replaces the gradient for everything "
             "upstream: x receives the clipped [1, 0.5, -1], not [5, 0.5, -4].",
             _myth_if(lambda e: RAW, "hook_return_ignored")),
        Item("station.grad", "retain_grad()'s monitor always reads last, after every tensor "
             "hook, whatever the order they were installed in: it keeps the clipped gradient.",
             _myth_if(lambda e: RAW, "retain_grad_sees_raw")),
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


def _err_myth(raises_myth: str, silent_myth: str | None = None):
    def choose(given: Any, expected: Any) -> str | None:
        if expected is not None and given is None:
            return raises_myth
        if expected is None and given is not None:
            return silent_myth
        return None

    return choose


@lesson.register
class Q4WhereProbesGo(Predict):
    qid = "q4"
    title = "Where a probe can be installed"
    code = WHERE_PROBES_GO
    items = [
        Item("hook_on_data", "no gradient will ever pass a tensor that does not require grad, so "
             "torch refuses the probe with a RuntimeError (\"cannot register a hook on a tensor "
             "that doesn't require gradient\").", _err_myth("hook_on_constant")),
        Item("hook_on_station", "a transit station is exactly where register_hook is most "
             "useful: no error.", _err_myth("hook_on_constant", "hook_on_constant")),
        Item("post_on_station", "only a leaf has a .grad to accumulate into; a post-accumulate "
             "hook on a non-leaf raises RuntimeError.", _err_myth("post_hook_on_nonleaf")),
        Item("post_on_weight", "a parameter is a leaf that requires grad: the post-accumulate "
             "hook is accepted.", _err_myth("post_hook_on_nonleaf", "post_hook_on_nonleaf")),
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


def _shape_myth(given: Any, expected: Any) -> str | None:
    if expected is None and given is not None:
        return "constant_gets_grad"  # the data batch would need requires_grad for a gradient
    if isinstance(given, list | tuple) and given != expected:
        return "grad_input_is_param_grad"
    return None


@lesson.register
class Q5ModuleProbes(Predict):
    qid = "q5"
    title = "Probes on every layer"
    code = MODULE_PROBES
    items = [
        Item("order", "backward walks from the output back to the input, so the last layer's "
             "backward hook fires first.", _order_myth),
        Item("grad_in['last']", "grad_input holds the gradient with respect to the layer's "
             "*input*, the Tanh output: one row per example, [5, 3]. The weight's gradient "
             "([1, 3]) is in .grad, not here.", _shape_myth),
        Item("grad_in['first']", "the first layer's input is the data batch, which does not "
             "require grad: its gradient is never computed and grad_input[0] is None.",
             _shape_myth),
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


def _cost_myth(given: Any, expected: Any) -> str | None:
    if not isinstance(given, int | float) or isinstance(given, bool):
        return None
    if expected == 0 and given > 0:
        return "hook_costs_most"
    if expected > 0 and given == 0:
        return "hook_is_free_when_storing"
    if expected > 0 and given > expected:
        return "hook_costs_most"
    return None


@lesson.register
class Q6ProbeCost(Predict):
    qid = "q6"
    title = "What a probe costs (seed 000's table, measured)"
    code = PROBE_COST
    items = [
        Item("noop", "a hook that keeps nothing costs nothing: the gradient passes and is freed "
             "as usual.", _cost_myth),
        Item("clone", "each stored clone is a tensor shaped like the station: 64 * 32 numbers "
             "* 4 bytes.", _cost_myth),
        Item("retain", "retain_grad() keeps one .grad shaped like the station: the same bytes "
             "as the cloning probe.", _cost_myth),
    ]

    def facts(self, ns):
        return {k: int(ns[k]) for k in ("noop", "clone", "retain")}


# --------------------------------------------------------------------------- Q7 clip probe

CLIP_CASES = {
    "visible": {
        "station": ([1.0, -2.0, 3.0, 0.5], [5.0, 0.5, -4.0, -0.2], 1.0),
        "leaf": ([1.0, 2.0, 3.0], [0.2, -3.0, 1.5], 0.5),
        "handle": ([1.0, -2.0, 3.0], [5.0, 0.5, -4.0], 1.0),
    },
    "hidden": {
        "station": ([[0.5, -1.0], [2.0, 0.0]], [[3.0, -0.1], [-0.3, -7.0]], 0.25),
        "leaf": ([-1.0, 0.5], [4.0, -0.05], 2.0),
        "handle": ([0.5, 0.25], [-9.0, 9.0], 0.1),
    },
}


def _clip_run(fn: LearnerFunction | None, values, weights, limit, case: str):
    """Run one clipping case; ``fn=None`` is the reference (torch's own clamp hook)."""
    import torch

    leaf = torch.tensor(values, requires_grad=True)
    target = leaf if case == "leaf" else leaf * 2
    if fn is None:
        handle = target.register_hook(lambda g: g.clamp(-limit, limit))
    else:
        handle = run_learner(fn, target, limit).result
    if case == "handle":
        handle.remove()
    (target * torch.tensor(weights)).sum().backward()
    if case == "leaf":  # a second report: its gradient is one number expanded to every entry
        (target.sum() * 3.0).backward()
    return tf.grad_values(leaf)


CLIP_TEXT = {
    "station": "at a transit station, the gradient reaching the leaf is clipped",
    "leaf": "at a sorting centre, each pass's gradient is clipped before it is added to .grad "
            "(two backward passes, the second from target.sum() * 3)",
    "handle": "the returned handle removes the probe: after handle.remove() nothing is clipped",
}


@lesson.register
class Q7ClipProbe(WriteCode):
    qid = "q7"
    title = "Install a clipping probe"
    function_name = "attach_clip"
    part_names = ["station", "leaf", "handle"]

    def grade_code(self, fn, part, variant):
        cases = CLIP_CASES["hidden" if variant == "hidden" else "visible"]
        findings, right = [], 0
        names = [p for p in self.part_names if part is None or p == part]
        for name in names:
            values, weights, limit = cases[name]
            want = _clip_run(None, values, weights, limit, name)
            unclipped = _clip_run(None, values, weights, float("inf"), name)
            try:
                got = _clip_run(fn, values, weights, limit, name)
            except LearnerCodeError as exc:
                findings.append(Finding(False, f"{CLIP_TEXT[name]} -- your function raised "
                                               f"{exc.summary}", part=name))
                continue
            except Exception as exc:  # raised by the learner's hook during backward
                text = f"{CLIP_TEXT[name]} -- no, it failed: {type(exc).__name__}: " \
                       f"{str(exc).splitlines()[0] if str(exc) else ''}"
                myth = None
                if "memory location" in str(exc) or "inplace" in str(exc).replace("-", ""):
                    myth = "hook_inplace_edit"
                    text += f" [Misconception: {myth_text(myth)}.]"
                elif name == "handle" and isinstance(exc, AttributeError):
                    text += " (return the handle that register_hook gives you)"
                findings.append(Finding(False, text, misconception=myth, part=name))
                continue
            if values_equal(got, want):
                right += 1
                findings.append(Finding(True, f"{CLIP_TEXT[name]} -- yes.", part=name))
                continue
            text = f"{CLIP_TEXT[name]} -- no: the leaf's .grad is {got}, torch's clamp hook gives " \
                   f"{want}."
            myth = None
            if name != "handle" and values_equal(got, unclipped):
                myth = "hook_return_ignored"
                text += " Nothing was clipped: does your hook *return* the clipped gradient?"
            elif name == "leaf":
                text += " Clip the gradient of each pass (register_hook), not the accumulated " \
                        ".grad."
                myth = "leaf_hook_sees_accumulated"
            if myth:
                text += f" [Misconception: {myth_text(myth)}.]"
            findings.append(Finding(False, text, misconception=myth, part=name))
        return Verdict(self.qid, findings)


# --------------------------------------------------------------------------- Q8 layer norms

NORM_MODELS = {
    "visible": {
        "mlp": ("nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(), "
                "nn.Linear(8, 2))", (16, 4)),
    },
    "hidden": {
        "nested": ("nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Sequential(nn.Linear(5, 5), "
                   "nn.Sigmoid()), nn.Linear(5, 3))", (7, 6)),
    },
}


def _build(spec: str, shape, seed: int = 0):
    import torch

    torch.manual_seed(seed)
    model = eval(spec, {"nn": torch.nn})  # noqa: S307 -- our own constant specs
    return model, torch.randn(*shape)


def _reference_norms(spec: str, shape) -> dict[str, float]:
    """Norm of d model(x).sum() / d output, for every nn.Linear, by retain_grad()."""
    import torch

    model, x = _build(spec, shape)
    outputs = {}

    def keep(name):
        def hook(module, args, output):
            output.retain_grad()
            outputs[name] = output
        return hook

    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_hook(keep(name))
    model(x).sum().backward()
    return {name: float(torch.linalg.vector_norm(out.grad)) for name, out in outputs.items()}


HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _leftover_hooks(model) -> list[str]:
    left = []
    for name, m in model.named_modules():
        for attr in HOOK_DICTS:
            if len(getattr(m, attr, {}) or {}):
                left.append(f"{name or 'model'}.{attr}")
    return left


@lesson.register
class Q8LayerNorms(WriteCode):
    qid = "q8"
    title = "Monitor every layer"
    function_name = "output_grad_norms"
    part_names = ["norms", "cleanup"]

    def grade_code(self, fn, part, variant):
        models = dict(NORM_MODELS["visible"])
        if variant == "hidden":
            models.update(NORM_MODELS["hidden"])
        findings, right, total = [], 0, 0
        for label, (spec, shape) in models.items():
            want = _reference_norms(spec, shape)
            model, x = _build(spec, shape)
            try:
                run = run_learner(fn, model, x)
            except LearnerCodeError as exc:
                for p in self.part_names:
                    if part in (None, p):
                        total += 1
                        findings.append(Finding(False, f"model `{label}`: your function raised "
                                                       f"{exc.summary}", part=p))
                continue
            if part in (None, "norms"):
                total += 1
                ok, text = self._norms(run, want, label)
                right += ok
                findings.append(Finding(ok, text, part="norms"))
            if part in (None, "cleanup"):
                total += 1
                left = _leftover_hooks(model)
                if left:
                    myth = "hooks_pile_up"
                    findings.append(Finding(False, f"model `{label}`: probes left installed on "
                                                   f"{', '.join(left)}: remove every handle "
                                                   f"before returning. [Misconception: "
                                                   f"{myth_text(myth)}.]", part="cleanup",
                                            misconception=myth))
                else:
                    right += 1
                    findings.append(Finding(True, f"model `{label}`: no probe left installed "
                                                  "-- yes.", part="cleanup"))
        return Verdict(self.qid, findings)

    @staticmethod
    def _norms(run: CodeRun, want: dict[str, float], label: str) -> tuple[bool, str]:
        res = run.result
        if not isinstance(res, dict):
            return False, f"model `{label}`: return a dict {{layer name: norm}}, got " \
                          f"{type(res).__name__}."
        got = {}
        for k, v in res.items():
            if tf.is_tensor(v):
                v = tf._tolist(v)
            got[k] = v
        if set(got) != set(want):
            return False, (f"model `{label}`: expected one entry per nn.Linear, named as in "
                           f"model.named_modules(): {sorted(want)}; got {sorted(map(str, got))}.")
        bad = [k for k in want if not values_equal(got[k], want[k], 1e-4)]
        if bad:
            shown = ", ".join(f"{k}: yours {got[k]!r}, torch {want[k]:.6g}" for k in bad)
            return False, (f"model `{label}`: wrong norms ({shown}). Use the gradient with "
                           "respect to each layer's *output* (grad_output[0]) of "
                           "model(x).sum(), and its norm over all entries.")
        return True, f"model `{label}`: every layer's output-gradient norm is right -- yes."


# --------------------------------------------------------------------------- Q9 aliased log

def _reference_history(steps: int) -> list:
    import torch

    w = torch.tensor([1.0, -1.0], requires_grad=True)
    history = []
    w.register_post_accumulate_grad_hook(lambda p: history.append(tf._tolist(p.grad)))
    for step in range(steps):
        (w * torch.tensor([float(step + 1), 2.0])).sum().backward()
    return history


@lesson.register
class Q9AliasedLog(WriteCode):
    qid = "q9"
    title = "Find the bug: the log that repeats itself"
    function_name = "grad_history"

    def grade_code(self, fn, part, variant):
        steps = 4 if variant == "hidden" else 3
        want = _reference_history(steps)

        def count(run: CodeRun):
            res = run.result
            n = len(res) if isinstance(res, list | tuple) else None
            return n == steps, f"expected {steps} entries, got {n if n is not None else res!r}"

        def entries(run: CodeRun):
            got = _values(list(run.result))
            if values_equal(got, want):
                return True, ""
            if values_equal(got, [want[-1]] * steps):
                return False, (f"every entry equals the last running total {want[-1]}: each one "
                               "is the same .grad tensor, updated in place by the next backward")
            return False, f"expected {want}, got {got}"

        return self.run_and_require(fn, [
            Requirement(f"one entry per micro-batch ({steps} micro-batches)", count),
            Requirement("entry k is the running .grad after micro-batch k", entries,
                        "grad_log_aliases"),
        ], part, args=(steps,))


# --------------------------------------------------------------------------- Q10 piled probes

def _reference_training(steps: int) -> list[float]:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    norms = []
    for _ in range(steps):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        norms.append(float(torch.linalg.vector_norm(model.weight.grad)))
        opt.step()
    return norms


@lesson.register
class Q10PiledProbes(WriteCode):
    qid = "q10"
    title = "Find the bug: probes that pile up"
    function_name = "train_with_log"

    def grade_code(self, fn, part, variant):
        steps = 5 if variant == "hidden" else 3
        want = _reference_training(steps)

        def count(run: CodeRun):
            res = run.result
            n = len(res) if isinstance(res, list | tuple) else None
            detail = f"expected {steps} entries, got {n if n is not None else res!r}"
            if n == steps * (steps + 1) // 2:
                detail += f" = 1 + 2 + ... + {steps}: step k ran k probes"
            return n == steps, detail

        def values(run: CodeRun):
            got = _values(list(run.result))
            return values_equal(got, want, 1e-4), \
                f"expected the weight's gradient norm at each step, {want}, got {got}"

        return self.run_and_require(fn, [
            Requirement(f"one log entry per training step ({steps} steps)", count,
                        "hooks_pile_up"),
            Requirement("entry k is the norm of the weight's gradient at step k", values,
                        "hooks_pile_up"),
        ], part, args=(steps,))
