"""Lesson 05, switching the monitors off: the questions of ``source/05_no_grad/05_no_grad.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``; question 7 first
runs ``SAVED_BYTES``, the notebook's import of lesson 02's helper in section 6) and reads the
facts; a code question runs the learner's function in the oracle, counting the
tensors autograd saves for backward while it runs, and compares what it did with
what torch's own tools (``torch.optim.SGD``, ``torch.clamp``, ``no_grad``) do.

A misconception is named only from evidence: the value a learner predicted (read with the
rest of the answer where one blank explains another), or what torch reports about what the
learner's code made and did (a ``grad_fn``, bytes saved for backward, a version counter that
did or did not move, the model's mode, the switch left off).
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
from torch.optim.sgd import sgd as _sgd_update  # SGD.step()'s own update (*)

from autograder import torchfacts as tf
from autograder.encoding import LearnerFunction
from autograder.questions import (
    WRONG,
    CodeRun,
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    Verdict,
    WriteCode,
    exception_answer,
    learner_namespace,
    plain,
    run_learner,
    says_raises,
    score,
    values_equal,
)
from course.i18n import N_, _, is_chinese

lesson = Lesson("05_no_grad", N_("Switching the monitors off"),
                preload=("torch._dynamo",))  # its checks train with optimizers

# Captured before any learner code runs in the oracle (see autograder.torchfacts).
_is_inference = torch._C.TensorBase.is_inference
_is_grad_enabled = torch.is_grad_enabled
_set_grad_enabled = torch._C._set_grad_enabled
_saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks
_no_grad = torch.no_grad
_equal = torch.equal
# (*) Building a torch.optim.SGD imports torch._dynamo, over a second in every forked check;
# the update function SGD.step() runs does not.








# --------------------------------------------------------------------------- Q1

QUIET = """\
w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)   # a sorting centre
with torch.no_grad():                # monitoring switched off
    quiet = w * 2
loud = w * 2                         # monitoring back on
later = quiet + 1                    # after the block, from quiet only
mixed = quiet + w                    # after the block, from quiet and w
"""


@lesson.register
class Q1MonitorsOff(Predict):
    qid = "q1"
    title = N_("Made with the monitors off")
    code = QUIET
    items = [
        Item("w.requires_grad", "`no_grad()` does not touch the flags of existing tensors: it only "
             "stops recording new operations. `w` is still a sorting centre.",
             "no_grad_flips_flag", part="inside"),
        Item("quiet.requires_grad", "Nothing is recorded inside `no_grad()`, so a result made "
             "there does not require grad, even from `w`.", "no_grad_result_has_history",
             part="inside"),
        Item("quiet.is_leaf", "No recorded operation made `quiet`, so it is a leaf (an ordinary "
             "parcel with no waybill history).", "no_grad_result_has_history", part="inside"),
        Item("loud.is_leaf", "The switch is back on once the block ends: `w * 2` gets a `grad_fn` "
             "and is a transit station.", "grad_mode_scope", part="inside"),
        Item("later.requires_grad", "`quiet` stays a tensor without history after the block ends: "
             "`quiet + 1` has no input that requires grad, so nothing is recorded.",
             "no_grad_wears_off", part="after"),
        Item("mixed.requires_grad", "One input (`w`) requires grad, so `quiet + w` is recorded; "
             "`quiet` enters that record as a constant.", "no_grad_result_unusable",
             part="after"),
    ]

    def judge(self, item, answer, expected):
        finding = super().judge(item, answer, expected)
        # loud is a leaf only if w lost its flag, when that is what the learner said
        if (finding.status == WRONG and item.key == "loud.is_leaf"
                and answer.get("w.requires_grad") is False):
            finding.misconception = "no_grad_flips_flag"
        return finding

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

BACKWARD_THROUGH_QUIET = """\
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


def _silent_myth(key: str):
    """An error item: ``key`` when the learner said nothing is raised."""
    def choose(given: Any, expected: Any) -> str | None:
        return key if says_raises(given) is False and expected is not None else None

    return choose


def _branch_myth(given: Any, expected: Any) -> str | None:
    given = plain(given)
    if given is None:
        return "no_grad_result_unusable"
    if isinstance(given, list) and isinstance(expected, list) and values_equal(
            given, [3.0 * e for e in expected]):
        return "no_grad_branch_counts"
    return None


@lesson.register
class Q2BackwardThroughQuiet(Predict):
    qid = "q2"
    title = N_("Backward through a tensor made under no_grad")
    code = BACKWARD_THROUGH_QUIET
    items = [
        Item("error", "`z` was computed from `y` only, and `y` records no history: nothing on the "
             "route requires grad, so `backward()` raises RuntimeError ('does not require grad "
             "and does not have a grad_fn'). Answer with the class (`RuntimeError`) or `None`.",
             _silent_myth("no_grad_backward_silent")),
        Item("z.is_leaf", "`z` was computed from tensors that do not require grad only: a leaf.",
             "no_grad_wears_off"),
        Item("x.grad", "The route through `y` was recorded with the monitors off, so only the "
             "direct route `x -> total` reports back: d total / dx = 1 for each element. (The "
             "failed backward before stored nothing.)", _branch_myth),
    ]

    def facts(self, ns):
        return {"error": exception_answer(ns["error"]), "z.is_leaf": tf.is_leaf(ns["z"]),
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
    title = N_("Which switch wins?")
    code = SWITCHES
    items = [
        Item("a.requires_grad", "`enable_grad()` is the innermost switch when `a = p * 2` runs: "
             "recording is on again inside it.", _SCOPE, part="blocks"),
        Item("b.requires_grad", "When `enable_grad()`'s block ends, the `no_grad()` around it is "
             "in force again.", _SCOPE, part="blocks"),
        Item("c.requires_grad", "`set_grad_enabled(False)` is `no_grad()` with a flag: "
             "`set_grad_enabled(is_training)` switches on a variable.", _SCOPE, part="blocks"),
        Item("d.requires_grad", "The decorator switches recording off inside `quick_look`, which "
             "is the innermost switch when `t * 3` runs.", _SCOPE, part="calls"),
        Item("e.requires_grad", "Called as a plain function, `set_grad_enabled(False)` switches "
             "recording off until something switches it on again.", _SCOPE, part="calls"),
        Item("f.requires_grad", "`set_grad_enabled(True)` switched recording back on.", _SCOPE,
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


def _inference_grad_myth(given: Any, expected: Any) -> str | None:
    """None: quiet cannot take part; twice the truth: frozen * w went through as well."""
    given = plain(given)
    if given is None:
        return "no_grad_result_unusable"
    if isinstance(given, list) and isinstance(expected, list) and values_equal(
            given, [2.0 * e for e in expected]):
        return "inference_mode_is_no_grad"
    return None


@lesson.register
class Q4InferenceMode(Predict):
    qid = "q4"
    title = N_("inference_mode() versus no_grad()")
    code = INFERENCE
    items = [
        Item("frozen.requires_grad", "Nothing is recorded in inference mode either.",
             "no_grad_result_has_history"),
        Item("frozen.is_inference()", "A tensor made in inference mode is an *inference tensor*, "
             "marked for good.", "inference_mode_is_no_grad"),
        Item("quiet.is_inference()", "`no_grad()` makes ordinary tensors: only "
             "`inference_mode()` marks them.", "inference_mode_is_no_grad"),
        Item("frozen_error", "`frozen * w` must save `frozen` for `w`'s gradient, and an "
             "inference tensor cannot be saved for backward: RuntimeError. (`frozen.clone()` "
             "outside inference mode is an ordinary tensor.)",
             _silent_myth("inference_mode_is_no_grad")),
        Item("w.grad", "The failed backward stored nothing, and `quiet` is an ordinary tensor "
             "without history: it takes part as a constant (bottled sauce), so "
             "d sum(quiet * w) / dw = quiet = [2, 4].", _inference_grad_myth),
    ]

    def facts(self, ns):
        return {
            "frozen.requires_grad": tf.requires_grad(ns["frozen"]),
            "frozen.is_inference()": bool(_is_inference(ns["frozen"])),
            "quiet.is_inference()": bool(_is_inference(ns["quiet"])),
            "frozen_error": exception_answer(ns["frozen_error"]),
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
    title = N_("model.eval() is not no_grad()")
    code = EVAL
    items = [
        Item("out_eval.requires_grad", "`eval()` only switches layers like Dropout and BatchNorm "
             "to their evaluation behaviour; recording goes on (`out_eval` has a `grad_fn`).",
             "eval_is_no_grad"),
        Item("out_quiet.requires_grad", "`no_grad()` switched recording off.",
             "no_grad_result_has_history"),
        Item("torch.equal(out_eval, out_quiet)", "`no_grad()` changes what is recorded, never "
             "the numbers: both ran in evaluation mode, where dropout does nothing.",
             "no_grad_changes_values"),
        Item("torch.equal(again_1, again_2)", "`no_grad()` does not touch `model.training`: in "
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
    opt_b.step()                     # what the five-scenarios article says not to do
"""


@lesson.register
class Q6StepInsideNoGrad(Predict):
    qid = "q6"
    title = N_("optimizer.step() inside no_grad()")
    code = STEP
    items = [
        Item("torch.equal(net_a.weight, net_b.weight)", "`step()` switches recording off itself "
             "before it updates anything, so wrapping it in `no_grad()` changes nothing: the two "
             "networks get the same update.", "step_inside_no_grad_breaks", part="harmless"),
        Item("net_b.weight.is_leaf", "`step()` updates the parameter in place with recording "
             "off: it stays the same leaf.", "step_inside_no_grad_breaks", part="harmless"),
        Item("net_b.weight.requires_grad", "`no_grad()` never changes a tensor's flag; the "
             "parameter is as trainable as before.", "no_grad_flips_flag", part="harmless"),
        Item("net_a.weight._version > version_before", "`step()` writes into the parameter "
             "itself (`p.add_(...)`), and the version counter counts that write; a write through "
             "`.data` would not be counted.", "step_uses_data", part="how"),
        Item("torch.equal(spare.weight, spare_before)", "`spare` is registered but its `.grad` "
             "is `None` (it was not in the loss): `step()` skips it, weight decay included.",
             "step_updates_all", part="how"),
        Item("torch.equal(stranger, stranger_before)", "`stranger` has a gradient, but no "
             "optimizer was given it: `step()` updates only the parameters registered with it.",
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
    title = N_("What is kept for the audit?")
    code = MEMORY
    items = [
        Item("quiet_bytes == 0", "With the monitors off nothing is recorded, so nothing is "
             "saved for backward: every activation can be freed as soon as the next layer used "
             "it.", "no_grad_keeps_activations"),
        Item("inference_bytes == 0", "Inference mode records nothing either.",
             "no_grad_keeps_activations"),
        Item("eval_bytes == 0", "`eval()` changes what the layers compute, not whether it is "
             "recorded: the inputs of both Linear layers and the ReLU output are still saved.",
             "eval_is_no_grad"),
        Item("detached_bytes == 0", "`detach()` comes after the forward pass: by then every "
             "activation has already been saved (the copies were kept while the model ran).",
             "detach_saves_memory"),
        # (False here is no belief the course names: what Dropout keeps is the point to learn)
        Item("eval_bytes < train_bytes", "In training mode Dropout saves its random mask for "
             "backward, and the last Linear keeps Dropout's output; in evaluation mode Dropout "
             "passes the ReLU's output on untouched, so neither is kept. Less, but not zero."),
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


def _score_counting(qid: str, fn: LearnerFunction, requirements: list[Requirement],
                    part: str | None, args: tuple, on_error=None) -> Verdict:
    """Run ``fn(*args)`` counting what is saved for backward, and judge the requirements."""
    return score(qid, requirements, lambda: _run_counting(fn, *args), part, on_error)


def _values(t) -> Any:
    if isinstance(t, int | float) and not isinstance(t, bool):
        return float(t)
    if not tf.is_tensor(t):
        raise TypeError(_("expected a tensor or a number, got {kind}", kind=type(t).__name__))
    return tf._tolist(t)


def _names(names) -> str:
    """Names as code spans, joined the current language's way (`w`, `b` / `w`、`b`)."""
    return ("、" if is_chinese() else ", ").join(f"`{n}`" for n in names)


#: what a result's history says, per result the learner returns (``what``): with its grad_fn,
#: and (a result that requires grad without one) without
_RECORDED = {
    "output": (N_("your output has grad_fn `{name}`: the forward pass was recorded"),
               N_("your output requires grad: the forward pass was recorded")),
    "loss": (N_("your loss has grad_fn `{name}`: the forward pass was recorded"),
             N_("your loss requires grad: the forward pass was recorded")),
}


def _why_recorded(fn: LearnerFunction, model) -> str | None:
    """The forward pass was recorded: the belief the code shows, if it shows one."""
    if ".detach(" in fn.source:
        return "detach_no_grad_confused"    # detached a tensor, expected recording to stop
    if getattr(model, "requires_grad", None) is False:
        return "module_requires_grad_attr"  # model.requires_grad = False, a plain attribute
    if not model.training:
        return "eval_is_no_grad"            # switched to evaluation mode, not recording off
    return None


def _no_history(fn: LearnerFunction, model, what: str):
    """``what``: ``"output"`` or ``"loss"``, the result the feedback names."""
    def test(run):
        res = run.result
        if not tf.is_tensor(res):
            return True, ""
        if not tf.requires_grad(res):
            return True, ""
        name = tf.grad_fn_name(res)
        with_fn, without = _RECORDED[what]
        text = _(with_fn, name=name) if name else _(without)
        return False, text, _why_recorded(fn, model)

    return test


def _nothing_saved(fn: LearnerFunction, model, name: str):
    def test(run):
        if run.saved == 0:
            return True, ""
        res = run.result
        saved = f"{run.saved:,}"
        if not (tf.is_tensor(res) and tf.requires_grad(res)):
            return (False, _("autograd saved {bytes} bytes for backward while `{name}` ran; your "
                             "result has no history, so it was cut off after the forward pass "
                             "had already been recorded", bytes=saved, name=name),
                    "detach_saves_memory")
        return (False, _("autograd saved {bytes} bytes for backward while `{name}` ran: the "
                         "forward pass was recorded", bytes=saved, name=name),
                _why_recorded(fn, model))

    return test


def _still_trainable(params):
    def test(run):
        frozen = [name for name, p in params if not (tf.is_leaf(p) and tf.requires_grad(p))]
        if not frozen:
            return True, ""
        if len(frozen) == 1:
            return False, _("{names} no longer requires grad: the next training step would not "
                            "train it", names=_names(frozen))
        return False, _("{names} no longer require grad: the next training step would not "
                        "train them", names=_names(frozen))

    return test


def _grad_mode_back(run: _Counted) -> tuple[bool, str]:
    return run.grad_mode_after, _("grad mode was still off when your function returned: use a "
                                  "`with` block (or the decorator) so the switch flips back")


#: how the feedback says a result is not the evaluation-mode output, per result (``what``):
#: the model left in training mode, or another difference
_NOT_EVAL = {
    "output": (N_("your output differs from the evaluation-mode output: the model was left in "
                  "training mode (`model.training` is True), so Dropout dropped at random"),
               N_("your output differs from the model's evaluation-mode output")),
    "loss": (N_("the loss differs from the evaluation-mode output: the model was left in "
                "training mode (`model.training` is True), so Dropout dropped at random"),
             N_("the loss differs from the model's evaluation-mode output")),
}


def _eval_output(model, want, what: str):
    """The result equals the model's evaluation-mode output (``want``); ``what``: ``"output"``
    or ``"loss"``, the result the feedback names."""
    def test(run):
        got = _values(run.result)
        if values_equal(got, want):
            return True, ""
        training, other = _NOT_EVAL[what]
        if model.training:
            quiet = tf.is_tensor(run.result) and not tf.requires_grad(run.result)
            return (False, _(training),
                    "no_grad_disables_dropout" if quiet else None)
        return False, _(other)

    return test


def _cases(variant: str, visible: list, hidden: list) -> list:
    """The cases a check runs: the visible ones, plus the hidden ones for the hidden tests."""
    return visible + (hidden if variant == "hidden" else [])


# --------------------------------------------------------------------------- Q8


def _inference_model(with_batchnorm: bool):
    torch.manual_seed(5 if with_batchnorm else 4)
    if with_batchnorm:
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
    title = N_("Deliver without auditing (write code)")
    function_name = "predict"
    part_names = ["quiet", "eval"]

    def grade_code(self, fn, part, variant):
        verdicts = []
        for case, with_bn in _cases(variant, [("", False)],
                                    [(N_("With BatchNorm and Dropout: "), True)]):
            label = _(case)
            model, batch = _inference_model(with_bn)
            with _no_grad():
                want = tf._tolist(copy.deepcopy(model).eval()(batch))
            verdicts.append(_score_counting(self.qid, fn, [
                Requirement(_("{label}the output records no history", label=label),
                            _no_history(fn, model, "output"), part="quiet"),
                Requirement(_("{label}nothing was saved for backward while `predict` ran",
                              label=label),
                            _nothing_saved(fn, model, "predict"), part="quiet"),
                Requirement(_("{label}the model's parameters are still trainable afterwards",
                              label=label),
                            _still_trainable(list(model.named_parameters())),
                            "inference_freezes_params", part="quiet"),
                Requirement(_("{label}grad mode is back on after the call", label=label),
                            _grad_mode_back, _SCOPE, part="quiet"),
                Requirement(_("{label}the output is the model's evaluation-mode output",
                              label=label),
                            _eval_output(model, want, "output"), part="eval"),
            ], part, (model, batch)))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- Q9


def _sgd_problem(seed: int):
    """Three tensors that require grad; two got a gradient from a loss, one did not."""
    torch.manual_seed(seed)
    w = torch.randn(3, requires_grad=True)
    b = torch.randn(1, requires_grad=True)
    idle = torch.randn(2, requires_grad=True)  # never used: its .grad stays None
    x = torch.randn(3)
    ((w * x).sum() * b + b ** 2).sum().backward()
    return {"w": w, "b": b, "idle": idle}


def _sgd_reference(params: dict, lr: float) -> dict:
    """What torch.optim.SGD(params, lr=lr).step() does to copies of the same tensors: its own
    update function, given (as step() gives it) only the tensors whose .grad is not None."""
    copies = {name: p.detach().clone() for name, p in params.items()}
    moved = [name for name, p in params.items() if tf._grad(p) is not None]
    with _no_grad():
        _sgd_update([copies[n] for n in moved], [tf._grad(params[n]).detach() for n in moved],
                    [None] * len(moved), weight_decay=0.0, momentum=0.0, lr=lr, dampening=0.0,
                    nesterov=False, maximize=False)
    return {name: tf._tolist(c) for name, c in copies.items()}


def _edit_errors(fn: LearnerFunction):
    """Beliefs the errors of a parameter edit reveal, before the course's table of errors."""
    def on_error(exc: LearnerCodeError) -> str | None:
        if exc.exc_type == "TypeError" and "NoneType" in exc.summary:
            return "step_updates_all"   # `lr * p.grad` with p.grad None: it got no gradient
        if "a leaf Variable that requires grad" in exc.summary and ".eval()" in fn.source:
            return "eval_is_no_grad"    # switched to evaluation mode, expected recording off
        return None

    return on_error


def _sgd_requirements(label: str, params: dict, lr: float) -> list[Requirement]:
    want = _sgd_reference(params, lr)
    before = {n: tf._tolist(p.detach()) for n, p in params.items()}
    versions = {n: tf.version(p) for n, p in params.items()}

    def now(n):
        return tf._tolist(params[n].detach())

    def moved(run):
        bad = [n for n in ("w", "b") if not values_equal(now(n), want[n])]
        if not bad:
            return True, ""
        if all(values_equal(now(n), before[n]) for n in bad):
            return False, _("{names} did not change: `p = p - lr * p.grad` makes a new tensor "
                            "and only rebinds the name `p`; write into the tensor itself "
                            "(`p -= lr * p.grad`)", names=_names(bad))
        n = bad[0]
        return False, _("`{name}` is now {got}; `torch.optim.SGD` makes it {want} "
                        "(p - lr * p.grad)", name=n, got=_short(now(n)), want=_short(want[n]))

    def idle(run):
        return values_equal(now("idle"), want["idle"]), \
            _("the tensor whose `.grad` is `None` changed: `step()` leaves such a tensor alone")

    def in_place(run):
        silent = [n for n in ("w", "b") if tf.version(params[n]) == versions[n]]
        if not silent:
            return True, ""
        if any(not values_equal(now(n), before[n]) for n in silent):
            return (False, _("the values of {names} changed but the version counter did not: "
                             "the write went through `.data`, where autograd cannot see it",
                             names=_names(silent)), "data_is_safe")
        return False, _("{names} were not written at all", names=_names(silent))

    def no_warning(run):
        return not run.warnings, _("your function warned: {warnings}", warnings=run.warnings)

    return [
        Requirement(_("{label}every tensor with a gradient moved as `torch.optim.SGD` moves it",
                      label=label), moved, part="update"),
        Requirement(_("{label}the tensor whose `.grad` is `None` was left alone", label=label),
                    idle, "step_updates_all", part="update"),
        Requirement(_("{label}the tensors are still leaves that require grad", label=label),
                    _still_trainable(list(params.items())), "inference_freezes_params",
                    part="update"),
        Requirement(_("{label}each update was written in place, visible to the version counter",
                      label=label), in_place, part="how"),
        Requirement(_("{label}grad mode is back on after the call", label=label),
                    _grad_mode_back, _SCOPE, part="how"),
        Requirement(_("{label}no warning was emitted", label=label), no_warning, part="how"),
    ]


def _short(values) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


@lesson.register
class Q9SgdStep(WriteCode):
    qid = "q9"
    title = N_("Update the sorting centres by hand (write code)")
    function_name = "sgd_step"
    part_names = ["update", "how"]

    def grade_code(self, fn, part, variant):
        verdicts = []
        for case, seed, lr in _cases(variant, [("", 8, 0.1)],
                                     [(N_("Other tensors, lr = 0.05: "), 9, 0.05)]):
            params = _sgd_problem(seed)
            reqs = _sgd_requirements(_(case), params, lr)
            args = ([params["w"], params["idle"], params["b"]], lr)
            verdicts.append(_score_counting(self.qid, fn, reqs, part, args, _edit_errors(fn)))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- Q10


def _clip_model(seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


_PROBE = [[0.5, -1.0, 2.0, 0.1], [1.5, 0.3, -0.7, 1.0]]  # a batch to train the clipped model on


def _train_grads(model) -> dict:
    """The gradients one training step gives each parameter (None where none arrives)."""
    for p in model.parameters():
        p.grad = None
    model(torch.tensor(_PROBE)).pow(2).sum().backward()
    return {n: tf.grad_values(p) for n, p in model.named_parameters()}


def _clip_requirements(label: str, model, limit: float) -> list[Requirement]:
    named = list(model.named_parameters())
    reference = copy.deepcopy(model)             # torch's own clip, on a copy
    with _no_grad():
        for p in reference.parameters():
            p.clamp_(-limit, limit)
    want = {n: tf._tolist(p.detach()) for n, p in reference.named_parameters()}
    want_grads = _train_grads(reference)
    before = {n: tf._tolist(p.detach()) for n, p in named}
    versions = {n: tf.version(p) for n, p in named}

    def clipped(run):
        bad = [n for n, p in named if not values_equal(tf._tolist(p.detach()), want[n])]
        if not bad:
            return True, ""
        if all(values_equal(tf._tolist(p.detach()), before[n]) for n, p in named if n in bad):
            return False, _("{names} did not change: `p = p.clamp(...)` makes a new tensor and "
                            "only rebinds the name; clip the parameters themselves, in place",
                            names=_names(bad))
        return False, _("{names} are not clipped to [-limit, limit]", names=_names(bad))

    def trains(run):
        frozen = [n for n, p in named if not tf.requires_grad(p)]
        if frozen:
            return (False, _("a training step would leave `{name}.grad` at `None`: it no "
                             "longer requires grad", name=frozen[0]), "inference_freezes_params")
        got = _train_grads(model)
        bad = [n for n in got if got[n] is None or not values_equal(got[n], want_grads[n])]
        if not bad:
            return True, ""
        if not all(values_equal(tf._tolist(p.detach()), want[n]) for n, p in named):
            return False, _("the parameters are not the clipped ones, so a training step gives "
                            "other gradients than the model torch clipped")
        return False, _("a training step gives `{name}` another gradient than the model torch "
                        "clipped under `no_grad()`", name=bad[0])

    def in_place(run):
        silent = [n for n, p in named if tf.version(p) == versions[n]]
        if not silent:
            return True, ""
        if any(not values_equal(tf._tolist(p.detach()), before[n]) for n, p in named
               if n in silent):
            return (False, _("the values of `{name}` changed but its version counter did not: "
                             "the write went through `.data`, where autograd cannot see it",
                             name=silent[0]), "data_is_safe")
        return False, _("{names} were not written at all", names=_names(silent))

    return [
        Requirement(_("{label}every parameter is clipped to [-{limit}, {limit}]", label=label,
                      limit=limit), clipped),
        Requirement(_("{label}the clipped model trains: a step gives the gradients torch gives "
                      "the model clipped under `no_grad()`", label=label), trains),
        Requirement(_("{label}the edit was made in place, visible to the version counter",
                      label=label), in_place),
        Requirement(_("{label}grad mode is back on after the call", label=label),
                    _grad_mode_back, _SCOPE),
    ]


@lesson.register
class Q10ClipCentres(WriteCode):
    qid = "q10"
    title = N_("Find the bug: clipping the sorting centres")
    function_name = "clip_centres"
    starter = """\
def clip_centres(model, limit):
    for p in model.parameters():
        p.clamp_(-limit, limit)
    return model
"""

    def grade_code(self, fn, part, variant):
        verdicts = []
        for case, seed, limit in _cases(variant, [("", 10, 0.25)],
                                        [(N_("Another model, limit 0.1: "), 12, 0.1)]):
            model = _clip_model(seed)
            reqs = _clip_requirements(_(case), model, limit)
            verdicts.append(_score_counting(self.qid, fn, reqs, part, (model, limit),
                                            _edit_errors(fn)))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- Q11


def _validation_problem(hidden: bool):
    torch.manual_seed(13 if hidden else 11)
    if hidden:
        model = torch.nn.Sequential(torch.nn.Linear(3, 6), torch.nn.BatchNorm1d(6),
                                    torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(6, 1))
        model(torch.randn(16, 3))  # running statistics of its own
        batches = [(torch.randn(6, 3), torch.randn(6, 1)) for _ in range(5)]
    else:
        model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(),
                                    torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
        batches = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(3)]
    model.train()
    return model, batches


def _one_number(res):
    if isinstance(_values(res), list):
        raise TypeError(_("return one number (a float or a 0-dim tensor)"))


@lesson.register
class Q11ValidationLoss(WriteCode):
    qid = "q11"
    title = N_("Find the bug: the logbook that keeps every parcel")
    function_name = "validation_loss"
    part_names = ["record", "result"]
    starter = """\
def validation_loss(model, batches):
    model.eval()
    total = 0.0
    for x, y in batches:
        total = total + nn.functional.mse_loss(model(x), y)
    return total / len(batches)
"""

    def grade_code(self, fn, part, variant):
        verdicts = []
        for case, hidden in _cases(variant, [("", False)],
                                   [(N_("With BatchNorm, 5 batches: "), True)]):
            label = _(case)
            model, batches = _validation_problem(hidden)
            reference = copy.deepcopy(model).eval()
            with _no_grad():
                losses = [torch.nn.functional.mse_loss(reference(x), y) for x, y in batches]
                want = float(sum(losses) / len(losses))

            def value(run, model=model, want=want):
                _one_number(run.result)
                return _eval_output(model, want, "loss")(run)

            def no_history(run, model=model):
                _one_number(run.result)
                return _no_history(fn, model, "loss")(run)

            verdicts.append(_score_counting(self.qid, fn, [
                Requirement(_("{label}the mean validation loss is right ({want})", label=label,
                              want=format(want, ".6f")), value, part="record"),
                Requirement(_("{label}nothing was saved for backward while it ran", label=label),
                            _nothing_saved(fn, model, "validation_loss"), part="record"),
                Requirement(_("{label}it returns one number that records no history",
                              label=label), no_history, part="result"),
                Requirement(_("{label}the model's parameters are still trainable afterwards",
                              label=label),
                            _still_trainable(list(model.named_parameters())),
                            "inference_freezes_params", part="result"),
            ], part, (model, batches)))
        return Verdict.merge(self.qid, verdicts)
