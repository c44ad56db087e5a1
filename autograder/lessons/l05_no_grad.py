"""Lesson 05, switching the monitors off: the questions of ``source/05_no_grad/05_no_grad.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``; question 7 first
runs ``SAVED_BYTES``, the notebook's import of lesson 02's helper in section 6) and reads the
facts; a code question runs the learner's function in the oracle, counting the
tensors autograd saves for backward while it runs, and compares what it did with
what torch's own tools (``torch.optim.SGD``, ``torch.clamp``, ``no_grad``) do.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName, LearnerFunction
from autograder.questions import (
    CodeRun,
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    WriteCode,
    learner_namespace,
    run_learner,
    score_run,
    values_equal,
)

lesson = Lesson("05_no_grad", "Switching the monitors off")

# Captured before any learner code runs in the oracle (see autograder.torchfacts).
_is_inference = torch._C.TensorBase.is_inference
_is_grad_enabled = torch.is_grad_enabled
_set_grad_enabled = torch._C._set_grad_enabled
_saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks
_no_grad = torch.no_grad
_equal = torch.equal


def _error_name(err) -> ExceptionName | None:
    return None if err is None else ExceptionName(type(err).__name__)


# --------------------------------------------------------------------------- Q1

QUIET = """\
w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)   # a sorting centre
with torch.no_grad():                # monitoring switched off
    quiet = w * 2
loud = w * 2                         # monitoring back on
later = quiet + 1                    # after the block, from quiet only
mixed = quiet + w                    # after the block, from quiet and w
"""


def _flag_myth(if_true: str, if_false: str):
    def choose(given: Any, expected: Any) -> str | None:
        if given is True and expected is False:
            return if_true
        if given is False and expected is True:
            return if_false
        return None

    return choose


@lesson.register
class Q1MonitorsOff(Predict):
    qid = "q1"
    title = "Made with the monitors off"
    code = QUIET
    items = [
        Item("w.requires_grad", "no_grad() does not touch the flags of existing tensors: it only "
             "stops recording new operations. w is still a sorting centre.",
             "no_grad_flips_flag", part="inside"),
        Item("quiet.requires_grad", "nothing is recorded inside no_grad(), so a result made there "
             "does not require grad, even from w.", "no_grad_result_has_history", part="inside"),
        Item("quiet.is_leaf", "no recorded operation made quiet, so it is a leaf (an ordinary "
             "parcel with no waybill history).", "no_grad_result_has_history", part="inside"),
        Item("loud.is_leaf", "after the block recording is on again: w * 2 gets a grad_fn and is "
             "a transit station.", "output_can_be_leaf", part="inside"),
        Item("later.requires_grad", "quiet stays a tensor without history after the block ends: "
             "quiet + 1 has no input that requires grad, so nothing is recorded.",
             "no_grad_wears_off", part="after"),
        Item("mixed.requires_grad", "one input (w) requires grad, so quiet + w is recorded; "
             "quiet enters that record as a constant.",
             _flag_myth("no_grad_wears_off", "output_can_be_leaf"), part="after"),
    ]

    def facts(self, ns):
        return {
            "w.requires_grad": tf.requires_grad(ns["w"]),
            "quiet.requires_grad": tf.requires_grad(ns["quiet"]),
            "quiet.is_leaf": tf.is_leaf(ns["quiet"]),
            "loud.is_leaf": tf.is_leaf(ns["loud"]),
            "later.requires_grad": tf.requires_grad(ns["later"]),
            "mixed.requires_grad": tf.requires_grad(ns["mixed"]),
        }


# --------------------------------------------------------------------------- Q2

SEED004 = """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
with torch.no_grad():
    y = x * 2                        # a transit station built with the monitors off
z = (y + 1).sum()
try:
    z.backward()
    error = None
except RuntimeError as err:
    error = err
total = (y + x).sum()                # one route through y, one straight from x
total.backward()
"""


def _branch_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and values_equal(given, [3.0 * e for e in expected]):
        return "no_grad_branch_counts"
    if given is None:
        return "no_grad_result_unusable"
    return None


@lesson.register
class Q2BackwardThroughQuiet(Predict):
    qid = "q2"
    title = "Backward through a tensor made under no_grad"
    code = SEED004
    items = [
        Item("error", "z was computed from y only, and y records no history: nothing on the route "
             "requires grad, so backward() raises RuntimeError ('does not require grad and does "
             "not have a grad_fn'). Answer with the class (RuntimeError) or None.",
             "no_grad_backward_silent"),
        Item("z.is_leaf", "z was computed from tensors that do not require grad only: a leaf.",
             "no_grad_wears_off"),
        Item("x.grad", "the route through y was recorded with the monitors off, so only the "
             "direct route x -> total reports back: d total / dx = 1 for each element. (The "
             "failed backward before stored nothing.)", _branch_myth),
    ]

    def facts(self, ns):
        return {"error": _error_name(ns["error"]), "z.is_leaf": tf.is_leaf(ns["z"]),
                "x.grad": tf.grad_values(ns["x"])}


# --------------------------------------------------------------------------- Q3

SWITCHES = """\
p = torch.tensor(2.0, requires_grad=True)

@torch.no_grad()
def quick_look(t):
    return t * 3

with torch.no_grad():
    with torch.enable_grad():
        a = p * 2
    b = p * 2

with torch.set_grad_enabled(False):
    c = p * 2

with torch.enable_grad():
    d = quick_look(p)

torch.set_grad_enabled(False)
e = p * 2
torch.set_grad_enabled(True)
f = p * 2
"""

_SCOPE = "grad_mode_scope"


@lesson.register
class Q3WhichSwitchWins(Predict):
    qid = "q3"
    title = "Which switch wins?"
    code = SWITCHES
    items = [
        Item("a.requires_grad", "enable_grad() is the innermost switch when a = p * 2 runs: "
             "recording is on again inside it.", _SCOPE, part="blocks"),
        Item("b.requires_grad", "when enable_grad()'s block ends, the no_grad() around it is in "
             "force again.", _SCOPE, part="blocks"),
        Item("c.requires_grad", "set_grad_enabled(False) is no_grad() with a flag: "
             "set_grad_enabled(is_training) switches on a variable.", _SCOPE, part="blocks"),
        Item("d.requires_grad", "the decorator switches recording off inside quick_look, which is "
             "the innermost switch when t * 3 runs.", _SCOPE, part="calls"),
        Item("e.requires_grad", "called as a plain function, set_grad_enabled(False) switches "
             "recording off until something switches it on again.", _SCOPE, part="calls"),
        Item("f.requires_grad", "set_grad_enabled(True) switched recording back on.", _SCOPE,
             part="calls"),
    ]

    def scenario(self):
        try:
            return super().scenario()
        finally:
            _set_grad_enabled(True)  # the scenario flips the global switch itself

    def facts(self, ns):
        return {f"{k}.requires_grad": tf.requires_grad(ns[k]) for k in "abcdef"}


# --------------------------------------------------------------------------- Q4

INFERENCE = """\
w = torch.tensor([1.0, 2.0], requires_grad=True)
with torch.inference_mode():
    frozen = w * 2                   # the strictest switch
with torch.no_grad():
    quiet = w * 2
try:
    (frozen * w).sum().backward()
    frozen_error = None
except RuntimeError as err:
    frozen_error = err
(quiet * w).sum().backward()
"""


@lesson.register
class Q4InferenceMode(Predict):
    qid = "q4"
    title = "inference_mode() versus no_grad()"
    code = INFERENCE
    items = [
        Item("frozen.requires_grad", "nothing is recorded in inference mode either.",
             "no_grad_result_has_history"),
        Item("frozen.is_inference()", "a tensor made in inference mode is an *inference tensor*, "
             "marked for good.", "inference_mode_is_no_grad"),
        Item("quiet.is_inference()", "no_grad() makes ordinary tensors: only inference_mode() "
             "marks them.", "inference_mode_is_no_grad"),
        Item("frozen_error", "frozen * w must save frozen for w's gradient, and an inference "
             "tensor cannot be saved for backward: RuntimeError. (frozen.clone() outside "
             "inference mode is an ordinary tensor.)", "inference_mode_is_no_grad"),
        Item("w.grad", "quiet is an ordinary tensor without history: it takes part as a constant "
             "(bottled sauce), so d sum(quiet * w) / dw = quiet = [2, 4].",
             "no_grad_result_unusable"),
    ]

    def facts(self, ns):
        return {
            "frozen.requires_grad": tf.requires_grad(ns["frozen"]),
            "frozen.is_inference()": bool(_is_inference(ns["frozen"])),
            "quiet.is_inference()": bool(_is_inference(ns["quiet"])),
            "frozen_error": _error_name(ns["frozen_error"]),
            "w.grad": tf.grad_values(ns["w"]),
        }


# --------------------------------------------------------------------------- Q5

EVAL = """\
model = nn.Sequential(nn.Linear(3, 16), nn.Dropout(0.5), nn.Linear(16, 1))
batch = torch.ones(4, 3)
model.eval()
out_eval = model(batch)              # evaluation mode, monitors on
with torch.no_grad():
    out_quiet = model(batch)         # evaluation mode, monitors off
model.train()
with torch.no_grad():
    again_1 = model(batch)           # training mode, monitors off
    again_2 = model(batch)
"""


@lesson.register
class Q5EvalIsNotNoGrad(Predict):
    qid = "q5"
    title = "model.eval() is not no_grad()"
    code = EVAL
    items = [
        Item("out_eval.requires_grad", "eval() only switches layers like Dropout and BatchNorm to "
             "their evaluation behaviour; recording goes on (out_eval has a grad_fn).",
             "eval_is_no_grad"),
        Item("out_quiet.requires_grad", "no_grad() switched recording off.",
             "no_grad_result_has_history"),
        Item("torch.equal(out_eval, out_quiet)", "no_grad() changes what is recorded, never the "
             "numbers: both ran in evaluation mode, where dropout does nothing.",
             "no_grad_changes_values"),
        Item("torch.equal(again_1, again_2)", "no_grad() does not touch model.training: in "
             "training mode dropout still draws a fresh random mask on every call.",
             "no_grad_disables_dropout"),
    ]

    def facts(self, ns):
        return {
            "out_eval.requires_grad": tf.requires_grad(ns["out_eval"]),
            "out_quiet.requires_grad": tf.requires_grad(ns["out_quiet"]),
            "torch.equal(out_eval, out_quiet)": bool(_equal(ns["out_eval"], ns["out_quiet"])),
            "torch.equal(again_1, again_2)": bool(_equal(ns["again_1"], ns["again_2"])),
        }


# --------------------------------------------------------------------------- Q6

STEP = """\
net_a = nn.Linear(3, 1)
net_b = nn.Linear(3, 1)
net_b.load_state_dict(net_a.state_dict())                # two identical networks
spare = nn.Linear(3, 1)                                  # registered, but not in the loss
stranger = torch.tensor([0.5], requires_grad=True)       # in the loss, never registered
opt_a = torch.optim.SGD([*net_a.parameters(), *spare.parameters()], lr=0.1, weight_decay=0.1)
opt_b = torch.optim.SGD(net_b.parameters(), lr=0.1, weight_decay=0.1)
batch = torch.ones(4, 3)
(net_a(batch) * stranger).sum().backward()
(net_b(batch) * stranger).sum().backward()
spare_before = spare.weight.detach().clone()
stranger_before = stranger.detach().clone()
version_before = net_a.weight._version
opt_a.step()                         # the usual way
with torch.no_grad():
    opt_b.step()                     # what seed 004 says not to do
"""


@lesson.register
class Q6StepInsideNoGrad(Predict):
    qid = "q6"
    title = "optimizer.step() inside no_grad()"
    code = STEP
    items = [
        Item("torch.equal(net_a.weight, net_b.weight)", "step() switches recording off itself "
             "before it updates anything, so wrapping it in no_grad() changes nothing: the two "
             "networks get the same update.", "step_inside_no_grad_breaks", part="seed"),
        Item("net_b.weight.is_leaf", "step() updates the parameter in place under disabled grad: "
             "it stays the same leaf.", "step_inside_no_grad_breaks", part="seed"),
        Item("net_b.weight.requires_grad", "no_grad() never changes a tensor's flag; the "
             "parameter is as trainable as before.", "no_grad_flips_flag", part="seed"),
        Item("net_a.weight._version > version_before", "step() writes into the parameter itself "
             "(p.add_(...)), and the version counter counts that write; a write through .data "
             "would not be counted.", "step_uses_data", part="how"),
        Item("torch.equal(spare.weight, spare_before)", "spare is registered but its .grad is "
             "None (it was not in the loss): step() skips it, weight decay included.",
             "step_updates_all", part="how"),
        Item("torch.equal(stranger, stranger_before)", "stranger has a gradient, but no "
             "optimizer was given it: step() updates only the parameters registered with it.",
             "step_updates_all", part="how"),
    ]

    def facts(self, ns):
        return {
            "torch.equal(net_a.weight, net_b.weight)": bool(
                _equal(ns["net_a"].weight, ns["net_b"].weight)),
            "net_b.weight.is_leaf": tf.is_leaf(ns["net_b"].weight),
            "net_b.weight.requires_grad": tf.requires_grad(ns["net_b"].weight),
            "net_a.weight._version > version_before": tf.version(ns["net_a"].weight)
            > ns["version_before"],
            "torch.equal(spare.weight, spare_before)": bool(
                _equal(ns["spare"].weight, ns["spare_before"])),
            "torch.equal(stranger, stranger_before)": bool(
                _equal(ns["stranger"], ns["stranger_before"])),
        }


# --------------------------------------------------------------------------- Q7

#: The notebook's measuring helper, ``course.memory.saved_bytes`` (section 6 shows this very text).
SAVED_BYTES = "from course import saved_bytes\n"

MEMORY = """\
model = nn.Sequential(nn.Linear(100, 200), nn.ReLU(), nn.Dropout(0.1), nn.Linear(200, 10))
batch = torch.randn(32, 100)
train_bytes = saved_bytes(lambda: model(batch))
model.eval()
eval_bytes = saved_bytes(lambda: model(batch))
detached_bytes = saved_bytes(lambda: model(batch).detach())
with torch.no_grad():
    quiet_bytes = saved_bytes(lambda: model(batch))
with torch.inference_mode():
    inference_bytes = saved_bytes(lambda: model(batch))
"""


@lesson.register
class Q7WhatIsSaved(Predict):
    qid = "q7"
    title = "What is kept for the audit?"
    code = MEMORY
    items = [
        Item("quiet_bytes == 0", "with the monitors off nothing is recorded, so nothing is "
             "saved for backward: every activation can be freed as soon as the next layer used "
             "it.", "no_grad_keeps_activations"),
        Item("inference_bytes == 0", "inference mode records nothing either.",
             "no_grad_keeps_activations"),
        Item("eval_bytes == 0", "eval() changes what the layers compute, not whether it is "
             "recorded: the inputs of both Linear layers and the ReLU output are still saved.",
             "eval_is_no_grad"),
        Item("detached_bytes == 0", "detach() comes after the forward pass: by then every "
             "activation has already been saved (the copies were kept while the model ran).",
             "detach_saves_memory"),
        Item("eval_bytes < train_bytes", "in training mode Dropout saves its random mask for "
             "backward, and the last Linear keeps Dropout's output; in evaluation mode Dropout "
             "passes the ReLU's output on untouched, so neither is kept. Less, but not zero.",
             "eval_is_no_grad"),
    ]

    def scenario(self):
        # The notebook imported saved_bytes in section 6: import it the same way first.
        torch.manual_seed(0)
        ns = learner_namespace()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name, text in (("saved_bytes", SAVED_BYTES), (self.qid, self.code)):
                exec(compile(text, f"<scenario {self.lesson}/{name}>", "exec"), ns)  # noqa: S102
        return self.facts(ns)

    def facts(self, ns):
        return {
            "quiet_bytes == 0": ns["quiet_bytes"] == 0,
            "inference_bytes == 0": ns["inference_bytes"] == 0,
            "eval_bytes == 0": ns["eval_bytes"] == 0,
            "detached_bytes == 0": ns["detached_bytes"] == 0,
            "eval_bytes < train_bytes": ns["eval_bytes"] < ns["train_bytes"],
        }


# --------------------------------------------------------------------------- write code


class _Counted:
    """A learner run, with the bytes autograd saved for backward while it ran."""

    def __init__(self, run: CodeRun, saved: int, grad_mode_after: bool):
        self.result = run.result
        self.warnings = run.warnings
        self.saved = saved
        self.grad_mode_after = grad_mode_after


def _run_counting(fn: LearnerFunction, *args) -> _Counted:
    """Run the learner's function with grad mode on, counting what is saved for backward."""
    sizes: list[int] = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    _set_grad_enabled(True)
    with _saved_tensors_hooks(pack, lambda t: t):
        run = run_learner(fn, *args)
    after = bool(_is_grad_enabled())
    _set_grad_enabled(True)
    return _Counted(run, sum(sizes), after)


def _leaf_edit_error(exc: LearnerCodeError) -> str | None:
    return "leaf_inplace_ok" if "a leaf Variable that requires grad" in exc.summary else None


def _values(t) -> Any:
    if isinstance(t, int | float) and not isinstance(t, bool):
        return float(t)
    if not tf.is_tensor(t):
        raise TypeError(f"expected a tensor or a number, got {type(t).__name__}")
    return tf._tolist(t)


def _still_trainable(params) -> tuple[bool, str]:
    frozen = [name for name, p in params if not (tf.is_leaf(p) and tf.requires_grad(p))]
    return not frozen, f"these are no longer leaves that require grad: {frozen}"


def _grad_mode_back(run: _Counted) -> tuple[bool, str]:
    return run.grad_mode_after, ("grad mode was still off when your function returned: use a "
                                 "`with` block (or the decorator) so the switch flips back")


def _nothing_saved(run: _Counted) -> tuple[bool, str]:
    return run.saved == 0, (f"autograd saved {run.saved} bytes of tensors for backward while "
                            "your function ran: the forward pass was recorded")


def _why_saved(run: _Counted) -> str:
    """Recorded, yet the result has no history: it was detached (or .item()) afterwards."""
    res = run.result
    detached_after = not (tf.is_tensor(res) and tf.requires_grad(res))
    return "detach_saves_memory" if detached_after else "eval_is_no_grad"


# --------------------------------------------------------------------------- Q8


def _inference_model(variant: str):
    torch.manual_seed(5 if variant == "hidden" else 4)
    if variant == "hidden":
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6),
                                    torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(6, 2))
        model(torch.randn(16, 4))  # give BatchNorm running statistics of its own
    else:
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(),
                                    torch.nn.Dropout(0.5), torch.nn.Linear(8, 2))
    model.train()
    return model, torch.randn(5, 4)


@lesson.register
class Q8Predict(WriteCode):
    qid = "q8"
    title = "Deliver without auditing (write code)"
    function_name = "predict"
    part_names = ["quiet", "eval"]

    def grade_code(self, fn, part, variant):
        model, batch = _inference_model(variant)
        reference = copy.deepcopy(model).eval()
        with _no_grad():
            want = tf._tolist(reference(batch))

        def no_history(run):
            out = run.result
            return (tf.is_tensor(out) and not tf.requires_grad(out),
                    "the output still requires grad: the forward pass was recorded")

        def trainable(run):
            return _still_trainable(list(model.named_parameters()))

        def values(run):
            got = _values(run.result)
            return values_equal(got, want), ("the output differs from the model's output in "
                                             "evaluation mode (is dropout still active?)")

        return score_run(self.qid, lambda: _run_counting(fn, model, batch), [
            Requirement("the output records no history", no_history, "eval_is_no_grad",
                        part="quiet"),
            Requirement("nothing was saved for backward while predict ran", _nothing_saved,
                        _why_saved, part="quiet"),
            Requirement("the model's parameters are still trainable afterwards", trainable,
                        "inference_freezes_params", part="quiet"),
            Requirement("grad mode is back on after the call", _grad_mode_back, _SCOPE,
                        part="quiet"),
            Requirement("the output is the model's evaluation-mode output", values,
                        "no_grad_disables_dropout", part="eval"),
        ], part)


# --------------------------------------------------------------------------- Q9


def _sgd_problem(variant: str):
    """Three tensors that require grad; two got a gradient from a loss, one did not."""
    torch.manual_seed(9 if variant == "hidden" else 8)
    w = torch.randn(3, requires_grad=True)
    b = torch.randn(1, requires_grad=True)
    idle = torch.randn(2, requires_grad=True)  # never used: its .grad stays None
    x = torch.randn(3)
    ((w * x).sum() * b + b ** 2).sum().backward()
    lr = 0.05 if variant == "hidden" else 0.1
    return {"w": w, "b": b, "idle": idle}, lr


def _sgd_reference(params: dict, lr: float) -> dict:
    """What torch.optim.SGD does to copies of the same tensors."""
    copies = {}
    for name, p in params.items():
        c = p.detach().clone().requires_grad_(True)
        g = tf._grad(p)
        c.grad = None if g is None else g.detach().clone()
        copies[name] = c
    torch.optim.SGD(list(copies.values()), lr=lr).step()
    return {name: tf._tolist(c) for name, c in copies.items()}


@lesson.register
class Q9SgdStep(WriteCode):
    qid = "q9"
    title = "Update the sorting centres by hand (write code)"
    function_name = "sgd_step"
    part_names = ["update", "how"]

    def grade_code(self, fn, part, variant):
        params, lr = _sgd_problem(variant)
        want = _sgd_reference(params, lr)
        versions = {name: tf.version(p) for name, p in params.items()}

        def moved(run):
            bad = [n for n in ("w", "b") if not values_equal(tf._tolist(params[n]), want[n])]
            return not bad, (f"{bad} should hold p - lr * p.grad, as torch.optim.SGD computes "
                             "(update the tensors you were given, in place)")

        def idle(run):
            return values_equal(tf._tolist(params["idle"]), want["idle"]), \
                "a tensor whose .grad is None must be left alone, as step() does"

        def trainable(run):
            return _still_trainable(list(params.items()))

        def in_place(run):
            silent = [n for n in ("w", "b") if tf.version(params[n]) == versions[n]]
            return not silent, (f"the version counter of {silent} did not move: the write went "
                                "through .data (or nowhere), where autograd cannot see it")

        def no_warning(run):
            return not run.warnings, f"your function warned: {run.warnings}"

        params_list = [params["w"], params["idle"], params["b"]]
        return score_run(self.qid, lambda: _run_counting(fn, params_list, lr), [
            Requirement("every tensor with a gradient moved as torch.optim.SGD moves it", moved,
                        part="update"),
            Requirement("the tensor whose .grad is None was left alone", idle,
                        "step_updates_all", part="update"),
            Requirement("the tensors are still leaves that require grad", trainable,
                        part="update"),
            Requirement("each update was written in place, visible to the version counter",
                        in_place, "data_is_safe", part="how"),
            Requirement("grad mode is back on after the call", _grad_mode_back, _SCOPE,
                        part="how"),
            Requirement("no warning was emitted", no_warning, part="how"),
        ], part, on_error=_leaf_edit_error)


# --------------------------------------------------------------------------- Q10


@lesson.register
class Q10ClipCentres(WriteCode):
    qid = "q10"
    title = "Find the bug: clipping the sorting centres"
    function_name = "clip_centres"

    def grade_code(self, fn, part, variant):
        torch.manual_seed(10)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
        limit = 0.1 if variant == "hidden" else 0.25
        named = list(model.named_parameters())
        want = {n: tf._tolist(p.detach().clamp(-limit, limit)) for n, p in named}
        versions = {n: tf.version(p) for n, p in named}

        def clipped(run):
            bad = [n for n, p in named if not values_equal(tf._tolist(p), want[n])]
            return not bad, (f"{bad} are not clipped to [-{limit}, {limit}] (clip the model's own "
                             "parameters, in place; `p = p.clamp(...)` only renames)")

        def trainable(run):
            return _still_trainable(named)

        def in_place(run):
            silent = [n for n, p in named if tf.version(p) == versions[n]]
            return not silent, (f"the version counter of {silent} did not move: the write went "
                                "through .data, where autograd cannot see it")

        return score_run(self.qid, lambda: _run_counting(fn, model, limit), [
            Requirement("every parameter is clipped to [-limit, limit]", clipped),
            Requirement("the parameters are still leaves that require grad", trainable,
                        "inference_freezes_params"),
            Requirement("the edit was made in place, visible to the version counter", in_place,
                        "data_is_safe"),
            Requirement("grad mode is back on after the call", _grad_mode_back, _SCOPE),
        ], part, on_error=_leaf_edit_error)


# --------------------------------------------------------------------------- Q11


def _validation_problem():
    torch.manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(8, 1))
    batches = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(3)]
    return model, batches


@lesson.register
class Q11ValidationLoss(WriteCode):
    qid = "q11"
    title = "Find the bug: the logbook that keeps every parcel"
    function_name = "validation_loss"
    part_names = ["record", "result"]

    def grade_code(self, fn, part, variant):
        model, batches = _validation_problem()
        reference = copy.deepcopy(model).eval()
        with _no_grad():
            losses = [torch.nn.functional.mse_loss(reference(x), y) for x, y in batches]
            want = float(sum(losses) / len(losses))

        def value(run):
            got = _values(run.result)
            if isinstance(got, list):
                raise TypeError("return one number (a float or a 0-dim tensor)")
            return values_equal(got, want), f"expected the mean loss {want:.6f}, got {got:.6f}"

        def no_history(run):
            res = run.result
            if isinstance(_values(res), list):
                raise TypeError("return one number (a float or a 0-dim tensor)")
            return not (tf.is_tensor(res) and tf.requires_grad(res)), \
                "the returned loss still carries the recorded history of every batch"

        def trainable(run):
            return _still_trainable(list(model.named_parameters()))

        return score_run(self.qid, lambda: _run_counting(fn, model, batches), [
            Requirement("the mean validation loss is right", value, part="record"),
            Requirement("nothing was saved for backward while it ran", _nothing_saved,
                        _why_saved, part="record"),
            Requirement("it returns one number that records no history", no_history, "eval_is_no_grad",
                        part="result"),
            Requirement("the model's parameters are still trainable afterwards", trainable,
                        "inference_freezes_params", part="result"),
        ], part)

