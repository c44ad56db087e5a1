"""Lesson 06, in-place operations: the questions of ``source/06_inplace/06_inplace.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts with :mod:`autograder.torchfacts`; a code question runs the learner's
function in the oracle and compares it with a reference computation that torch
runs there and then. Whether an in-place edit breaks backward is never typed in:
the scenario is run and the exception, if any, is what torch raised.

A misconception is named only from evidence: the value a learner predicted (read with the
rest of the answer where one blank explains another: saying that every edit raises is not
the same mistake as misjudging one operation), or what torch reports about what the
learner's code did (the error backward raised, a version counter that did not move, a
gradient that equals the one a known wrong program gives).
"""

from __future__ import annotations

import re
from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import LearnerFunction
from autograder.questions import (
    WRONG,
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
    says_raises,
    values_equal,
)
from course.i18n import N_, _

lesson = Lesson("06_inplace", N_("In-place operations and the version counter"))








def _raise_myth(given: Any, expected: Any) -> str | None:
    """Wrong about whether backward raises: which way round?"""
    says = says_raises(given)
    if expected is None and says:
        return "inplace_always_fatal"
    if expected is not None and says is False:
        return "inplace_never_checked"
    return None


def _scaled(given: Any, expected: Any, factor: float) -> bool:
    given = plain(given)
    return (isinstance(given, list) and isinstance(expected, list) and len(given) == len(expected)
            and values_equal(given, [factor * e for e in expected]))


# --------------------------------------------------------------------------- Q1

ARTICLE_EXAMPLE = """\
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = torch.tensor([3.0, 4.0], requires_grad=True)
z = x * y
z.add_(1)             # in place on the transit station z
z.mul_(2)             # and once more
try:
    z.sum().backward()
    error = None
except RuntimeError as err:
    error = err
"""


def _unscaled_myth(given: Any, expected: Any) -> str | None:
    """x.grad given as None (nothing arrived), or as y (z.mul_(2) not recorded)."""
    if plain(given) is None:
        return "inplace_grad_none"
    if _scaled(given, expected, 0.5):
        return "inplace_not_recorded"
    return None


@lesson.register
class Q1ArticleExample(Predict):
    qid = "q1"
    title = N_("The five-scenarios article's in-place example, one step further")
    code = ARTICLE_EXAMPLE
    items = [
        Item("error", "`mul` saved its inputs `x` and `y`, not its output `z`; `add_` saves no "
             "tensor, and `mul_(2)` saves only the number 2, not `z`. Nothing the audit needs was "
             "repacked, so backward runs.", _raise_myth),
        Item("x.grad", "The in-place ops are recorded like any other: z = 2*(x*y + 1), so "
             "dz/dx = 2*y. Give a list of floats.", _unscaled_myth),
        Item("z._version", "Every in-place op bumps the tensor's version counter by one.",
             "version_counts_wrong"),
    ]

    def judge(self, item, answer, expected):
        finding = super().judge(item, answer, expected)
        # no x.grad because backward raised: the answer's first blank says why
        if (finding.status == WRONG and item.key == "x.grad" and plain(answer.get("x.grad")) is None
                and says_raises(answer.get("error"))):
            finding.misconception = "inplace_always_fatal"
        return finding

    def facts(self, ns):
        return {"error": exception_answer(ns["error"]), "x.grad": tf.grad_values(ns["x"]),
                "z._version": tf.version(ns["z"])}


# --------------------------------------------------------------------------- Q2

WHO_SAVES = """\
def backward_error(out):
    try:
        out.sum().backward()
    except RuntimeError as err:
        return err
    return None

x = torch.tensor([0.5, 1.5], requires_grad=True)   # a sorting centre
c = torch.tensor([2.0, 3.0])                       # an ordinary parcel

a = x.sigmoid()
a.mul_(2)                     # overwrite sigmoid's output
err_a = backward_error(a)

h = x * 2
b = h.sqrt()
h.add_(1)                     # overwrite sqrt's input
err_b = backward_error(b)

m = x * c
m.add_(1)                     # overwrite mul's output
err_m = backward_error(m)

g = x * 2
p = g * x
g.zero_()                     # overwrite an input of g * x
err_p = backward_error(p)

k = x * 2
q = k * c
k.zero_()                     # overwrite an input of k * c
err_q = backward_error(q)

r = x * c
c.add_(1)                     # overwrite the parcel c, an input of x * c
err_r = backward_error(r)
"""

_Q2_KEYS = ("err_a", "err_b", "err_m", "err_p", "err_q", "err_r")


@lesson.register
class Q2WhoSaves(Predict):
    qid = "q2"
    title = N_("Does backward raise? Who kept a sample")
    code = WHO_SAVES
    items = [
        Item("err_a", "`sigmoid` saves its output (d sigmoid = s*(1-s)); `a.mul_(2)` overwrites "
             "exactly that sample, so backward raises.", _raise_myth, part="outputs"),
        Item("err_b", "`sqrt` saves its *output* (d sqrt(h) = 1/(2*sqrt(h))), not its input: "
             "changing `h` afterwards does not touch what sqrt's backward reads.", _raise_myth,
             part="outputs"),
        Item("err_m", "`mul` saves its inputs, not its output: overwriting `m` is harmless.",
             _raise_myth, part="outputs"),
        Item("err_p", "For `p = g * x`, the gradient for `x` needs `g`, so `mul` saved `g`; "
             "`g.zero_()` overwrote it.", _raise_myth, part="inputs"),
        Item("err_q", "`c` does not require grad, so nobody needs the gradient for `c` and `mul` "
             "did not save `k` (it saved only `c`, to compute `k`'s gradient).", _raise_myth,
             part="inputs"),
        Item("err_r", "To compute `x`'s gradient, `mul` needs `c`, so it saved `c` although `c` "
             "does not require grad; `c.add_(1)` overwrote that sample.", _raise_myth,
             part="inputs"),
    ]

    def judge(self, item, answer, expected):
        finding = super().judge(item, answer, expected)
        if finding.status == WRONG and finding.misconception:
            # The same answer for all six is a belief about every in-place edit; mixed answers
            # know that some edits raise and misjudge what this operation saved.
            says = {says_raises(answer.get(k)) for k in _Q2_KEYS} - {None}
            if len(says) > 1:
                finding.misconception = "saved_values_confused"
        return finding

    def facts(self, ns):
        return {k: exception_answer(ns[k]) for k in _Q2_KEYS}


# --------------------------------------------------------------------------- Q3

VERSIONS = """\
w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
h = w * 2
h.add_(1)
h[0] = 0.0
with torch.no_grad():
    w.mul_(0.5)
w.data.add_(1)
"""


def _w_version_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, int) and isinstance(expected, int):
        if given == expected + 1:
            return "data_is_safe"              # counted the .data edit as well
        if given == expected - 1:
            return "no_grad_edit_unchecked"    # did not count the no_grad() edit
        return "version_counts_wrong"
    return None


def _grad_fn_myth(given: Any, expected: Any) -> str | None:
    if given in ("MulBackward0", "AddBackward0", None):
        return "index_assign_untracked"
    return None


@lesson.register
class Q3Versions(Predict):
    qid = "q3"
    title = N_("The version counter and CopySlices")
    code = VERSIONS
    items = [
        Item("h._version", "`h` was changed in place twice (`add_` and the indexed assignment); "
             "each in-place change bumps its version by one.", "version_counts_wrong"),
        Item("h.grad_fn", "An indexed assignment is an in-place copy into a slice, recorded as a "
             "`CopySlices` node that becomes `h`'s `grad_fn`. Give the class name as a string.",
             _grad_fn_myth),
        Item("w._version", "The edit under `no_grad()` is counted (`no_grad()` stops recording, "
             "not counting); the edit through `.data` is not counted at all.", _w_version_myth),
    ]

    def facts(self, ns):
        return {"h._version": tf.version(ns["h"]), "h.grad_fn": tf.grad_fn_name(ns["h"]),
                "w._version": tf.version(ns["w"])}


# --------------------------------------------------------------------------- Q4

LEAF_EDITS = """\
w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)    # a sorting centre
try:
    w.mul_(0.5)
    err_mul = None
except RuntimeError as err:
    err_mul = err
try:
    w[0] = 0.0
    err_index = None
except RuntimeError as err:
    err_index = err
with torch.no_grad():
    w.mul_(0.5)
"""


def _refused_edit_applied(given: Any, expected: Any) -> bool:
    """The values show the refused `w.mul_(0.5)` or `w[0] = 0.0` as if they had taken place."""
    given = plain(given)
    if not (isinstance(given, list) and isinstance(expected, list)
            and len(given) == len(expected) and expected):
        return False
    halved = [e / 2 for e in expected]
    candidates = [halved, [0.0, *expected[1:]], [0.0, *halved[1:]]]
    return any(values_equal(given, c) for c in candidates)


def _leaf_error_myth(given: Any, expected: Any) -> str | None:
    return "leaf_inplace_ok" if says_raises(given) is False and expected is not None else None


@lesson.register
class Q4LeafEdits(Predict):
    qid = "q4"
    title = N_("In place on a leaf that requires grad")
    code = LEAF_EDITS
    items = [
        Item("err_mul", "An in-place op on a leaf that requires grad raises 'a leaf Variable "
             "that requires grad is being used in an in-place operation'.", _leaf_error_myth),
        Item("err_index", "An indexed assignment is an in-place op too, so it raises the same "
             "way (through a view of the leaf).", _leaf_error_myth),
        Item("w", "The two refused edits changed nothing; only the edit under `no_grad()` took "
             "place. Give the values as a list."),
        Item("w.is_leaf", "An edit under `no_grad()` records no operation: `w` is still a leaf, "
             "and it still requires grad.", "no_grad_edit_makes_nonleaf"),
    ]

    def judge(self, item, answer, expected):
        finding = super().judge(item, answer, expected)
        if (finding.status == WRONG and item.key == "w"
                and _refused_edit_applied(answer.get("w"), expected)):
            # a learner who said the edits raise yet counts them holds another belief than one
            # who thinks they are allowed
            refused = any(says_raises(answer.get(k)) for k in ("err_mul", "err_index"))
            finding.misconception = "refused_edit_applied" if refused else "leaf_inplace_ok"
        return finding

    def facts(self, ns):
        w = ns["w"]
        return {"err_mul": exception_answer(ns["err_mul"]),
                "err_index": exception_answer(ns["err_index"]),
                "w": tf._tolist(w.detach()), "w.is_leaf": tf.is_leaf(w)}


# --------------------------------------------------------------------------- Q5

DATA_VS_NO_GRAD = """\
w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
loss = (w ** 3).sum()            # pow saves its input w
w.data.add_(1)                   # edit behind the audit's back
loss.backward()
grad_after_data = w.grad.tolist()

v = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
loss_v = (v ** 3).sum()
with torch.no_grad():
    v.add_(1)                    # the same edit, in the open
try:
    loss_v.backward()
    err_no_grad = None
except RuntimeError as err:
    err_no_grad = err
"""


def _data_grad_myth(given: Any, expected: Any) -> str | None:
    import torch

    given = plain(given)
    if given is None:
        return "inplace_grad_none"
    if says_raises(given):
        return "data_is_safe"  # expects the version check to catch the .data edit
    # the gradient of the loss that was actually computed, at the old w
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (w ** 3).sum().backward()
    if isinstance(given, list) and values_equal(given, tf.grad_values(w)):
        return "data_is_safe"
    return None


@lesson.register
class Q5DataVsNoGrad(Predict):
    qid = "q5"
    title = N_(".data or no_grad(): silent or loud?")
    code = DATA_VS_NO_GRAD
    items = [
        Item("grad_after_data", "pow's backward computes 3*w**2 from the *saved* `w`, which "
             "`.data` changed to w+1 without bumping the version: you get 3*(w+1)**2, silently "
             "wrong. Give a list of floats.", _data_grad_myth, part="data"),
        Item("w._version", "`.data` returns a tensor with its own version counter: edits through "
             "it are invisible to the version check.", "data_is_safe", part="data"),
        Item("err_no_grad", "`no_grad()` stops recording, but the edit still bumps `v`'s version, "
             "so backward notices that the saved `v` changed and raises.",
             "no_grad_edit_unchecked", part="no_grad"),
    ]

    def facts(self, ns):
        return {"grad_after_data": ns["grad_after_data"], "w._version": tf.version(ns["w"]),
                "err_no_grad": exception_answer(ns["err_no_grad"])}


# --------------------------------------------------------------------------- Q6

ANOMALY = """\
import warnings

x = torch.tensor([0.5, 1.5], requires_grad=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.autograd.set_detect_anomaly(True):
        hidden = x * 3
        hidden.add_(1)             # (a)
        act = hidden.sigmoid()
        out = act * 2
        out.add_(1)                # (b)
        act.mul_(0.5)              # (c)
        try:
            out.sum().backward()
            error = None
        except RuntimeError as err:
            error = err
report = str(caught[0].message) if caught else ""
"""

_FAILED_NODE = re.compile(r"Error detected in (\w+)")
_FRAME = re.compile(r'File "<scenario[^"]*", line (\d+)')
_MARK = re.compile(r"#\s*\(([a-z])\)\s*$")


def _culprits(code: str) -> list[str]:
    """The marked in-place lines whose removal alone makes backward succeed (run live)."""
    import torch

    lines = code.splitlines()
    found = []
    for i, line in enumerate(lines):
        mark = _MARK.search(line)
        if not mark:
            continue
        indent = line[: len(line) - len(line.lstrip())]
        trial = "\n".join(lines[:i] + [indent + "pass"] + lines[i + 1 :])
        ns = learner_namespace()
        torch.manual_seed(0)
        exec(compile(trial, "<trial>", "exec"), ns)  # noqa: S102 -- our own scenario
        if ns["error"] is None:
            found.append(mark.group(1))
    return found


def _node_myth(given: Any, expected: Any) -> str | None:
    """Naming the node of an in-place op (`mul_`, `add_`) instead of the one that saved."""
    if isinstance(given, str) and given.startswith(("Mul", "Add")):
        return "anomaly_points_at_inplace"
    return None


def _line_myth(given: Any, expected: Any) -> str | None:
    """Pointing at an in-place line (`act.mul_(0.5)`, or a mark) instead of the forward line."""
    if isinstance(given, str) and ("_(" in given or given.strip("() ") in ("a", "b", "c")):
        return "anomaly_points_at_inplace"
    return None


def _culprit_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list | tuple) and len(given) > 1:
        return "inplace_always_fatal"       # every in-place line must go
    if isinstance(given, str) and given.strip("() ") in ("a", "b"):
        return "saved_values_confused"      # an edit of a value nobody saved
    return None


@lesson.register
class Q6ReadTheReport(Predict):
    qid = "q6"
    title = N_("Find the culprit with anomaly mode")
    code = ANOMALY
    items = [
        Item("failed_node", "Anomaly mode names the backward function that found its saved "
             "value changed: the one of the op that saved the overwritten tensor. Give the "
             "class name as a string.", _node_myth),
        Item("points_at", "Anomaly mode prints the forward line of the op whose backward "
             "failed, not the in-place line. Give the name assigned on that line.", _line_myth),
        Item("culprit", "The culprit is the in-place edit of a tensor that some backward "
             "function saved; (a) and (b) overwrite tensors nobody saved. Answer 'a', 'b' or "
             "'c'.", _culprit_myth),
    ]

    def facts(self, ns):
        report = ns["report"]
        node = _FAILED_NODE.search(report)
        frames = _FRAME.findall(report)
        points_at = None
        if frames:
            line = self.code.splitlines()[int(frames[-1]) - 1]
            points_at = line.split("=")[0].strip()
        culprits = _culprits(self.code)
        return {
            "failed_node": node.group(1) if node else None,
            "points_at": points_at,
            "culprit": culprits[0] if len(culprits) == 1 else culprits,
        }


# --------------------------------------------------------------------------- write code


def _backward_outcome(run, x) -> tuple[str | None, list | None]:
    """Run backward from the learner's result once; cache (error text, x.grad)."""
    cache = run.__dict__.setdefault("_backward", {})
    if "outcome" not in cache:
        out = run.result
        try:
            out.sum().backward()
            cache["outcome"] = (None, tf.grad_values(x))
        except RuntimeError as exc:
            cache["outcome"] = (f"{type(exc).__name__}: {str(exc).split('. ')[0]}", None)
    return cache["outcome"]


def _cases(variant: str, visible: list, hidden: list) -> list:
    """The cases a check runs: the visible ones, plus the hidden ones for the hidden tests."""
    return visible + (hidden if variant == "hidden" else [])




def _show(values: Any) -> str:
    """Values as a learner reads them: 4 significant digits, nested lists kept."""
    if isinstance(values, list):
        return "[" + ", ".join(_show(v) for v in values) + "]"
    if isinstance(values, float):
        return f"{values:.4g}"
    return repr(values)


def _overwrite_belief(fn: LearnerFunction, message: str) -> str | None:
    """The belief behind a "modified by an inplace operation" error, from what the code used."""
    if "modified by an inplace operation" not in message:
        return None
    if ".detach(" in fn.source:
        return "detach_copies"           # edited a detached tensor: it shares the counter
    if "no_grad" in fn.source:
        return "no_grad_edit_unchecked"  # an edit under no_grad() still bumps the version
    return "saved_values_confused"       # overwrote what an operation saved


def _inplace_error(fn: LearnerFunction):
    """``on_error`` for the learner's function: the overwrite reading first, then the course's
    table of errors (a leaf edited in place, ...)."""
    def on_error(exc: LearnerCodeError) -> str | None:
        if "does not require grad and does not have a grad_fn" in exc.summary \
                and ".detach(" in fn.source:
            return "detach_keeps_grad"   # backward through a detached tensor finds no route
        return _overwrite_belief(fn, exc.summary)

    return on_error


SQUASH_INPUTS = [("", [0.5, -1.0, 2.0]),
                 (N_("A 2x2 input: "), [[0.1, 0.2], [-0.3, 3.0]])]


@lesson.register
class Q7SafeFinish(WriteCode):
    qid = "q7"
    title = N_("Write an in-place finish that backward accepts")
    function_name = "squash"

    def grade_code(self, fn, part, variant):
        import torch

        verdicts = []
        for case, values in _cases(variant, SQUASH_INPUTS[:1], SQUASH_INPUTS[1:]):
            label = _(case)
            x = torch.tensor(values, requires_grad=True)
            ref_x = torch.tensor(values, requires_grad=True)
            ref = 3 * torch.tanh(2 * ref_x) + 1       # the reference, out of place
            ref.sum().backward()
            want_values, want_grad = tf._tolist(ref.detach()), tf.grad_values(ref_x)

            def values_ok(run, want=want_values):
                out = run.result
                if not tf.is_tensor(out):
                    return False, _("return a tensor, not {kind}", kind=type(out).__name__)
                got = tf._tolist(out.detach())
                return values_equal(got, want), _("expected 3*tanh(2*x) + 1 = {want}, got {got}",
                                                  want=_show(want), got=_show(got))

            def inplace_ok(run):
                out = run.result
                if not tf.is_tensor(out):
                    return False, _("no tensor was returned")
                if tf.is_leaf(out):
                    return False, _("your result is a leaf with no recorded history: return the "
                                    "tensor computed from `x`")
                return tf.version(out) >= 1, _("your result has grad_fn `{name}` and `_version` "
                                               "0: no in-place operation was applied to it",
                                               name=tf.grad_fn_name(out))

            def backward_ok(run, x=x, want=want_grad):
                err, grad = _backward_outcome(run, x)
                if err and "modified by an inplace operation" in err:
                    return (False, _("backward raised {error}: an in-place op overwrote a value "
                                     "saved for backward (tanh saves its output)", error=err),
                            _overwrite_belief(fn, err))
                if err:
                    return False, _("backward raised {error}", error=err)
                if values_equal(grad, want):
                    return True, ""
                return (False, _("`x.grad` should be {want}, found {got}", want=_show(want),
                                 got=_show(grad)),
                        "data_is_safe" if ".data" in fn.source else None)

            verdicts.append(self.run_and_require(fn, [
                Requirement(_("{label}the values are 3*tanh(2*x) + 1", label=label), values_ok),
                Requirement(_("{label}the result was finished in place (its version counter "
                              "moved)", label=label), inplace_ok),
                Requirement(_("{label}backward runs and gives the right `x.grad`", label=label),
                            backward_ok),
            ], part, args=(x,), on_error=_inplace_error(fn)))
        return Verdict.merge(self.qid, verdicts)


RENORM_STARTS = [("", [3.0, 4.0, 0.0], [1.0, 2.0, 3.0]),
                 (N_("Another centre: "), [1.0, -2.0, 2.0, 4.0], [0.5, 0.5, -1.0, 2.0])]


@lesson.register
class Q8Renormalise(WriteCode):
    qid = "q8"
    title = N_("Rescale a sorting centre in place, in the open")
    function_name = "renormalise_"
    part_names = ["edit", "safe"]

    def grade_code(self, fn, part, variant):
        import torch

        verdicts = []
        for case, start, weights in _cases(variant, RENORM_STARTS[:1], RENORM_STARTS[1:]):
            label = _(case)
            w = torch.tensor(start, requires_grad=True)
            (w * torch.tensor(weights)).sum().backward()   # the audit already ran
            grad_before = tf.grad_values(w)
            version_before = tf.version(w)
            ref = torch.tensor(start)
            want = tf._tolist(ref / ref.norm())

            def same(run, w=w):
                out = run.result
                if out is w:
                    return (tf.is_leaf(w) and tf.requires_grad(w),
                            _("`w` no longer requires grad: it is no sorting centre any more"),
                            "inference_freezes_params")
                if tf.is_tensor(out):
                    name = tf.grad_fn_name(out)
                    if name:
                        return False, _("you returned a new tensor with grad_fn `{name}`, not `w` "
                                        "itself: `w = w / w.norm()` only rebinds the name",
                                        name=name)
                    return False, _("you returned a new tensor with no grad_fn, not `w` itself: "
                                    "`w = w / w.norm()` only rebinds the name")
                return False, _("return `w` itself")

            def values(run, w=w, want=want):
                got = tf._tolist(w.detach())
                return values_equal(got, want), \
                    _("`w` should now be w / w.norm() = {want}, found {got}", want=_show(want),
                      got=_show(got))

            def recorded(run, w=w, version_before=version_before, want=want):
                if tf.version(w) > version_before:
                    return True, ""
                if values_equal(tf._tolist(w.detach()), want):
                    return (False, _("`w` was rescaled but its version counter did not move: the "
                                     "edit went through `.data`, invisible to autograd's checks; "
                                     "edit `w` itself under `torch.no_grad()`"), "data_is_safe")
                return False, _("`w` was not written at all")

            def grad_kept(run, w=w, grad_before=grad_before):
                g = tf.grad_values(w)
                return g is not None and values_equal(g, grad_before), \
                    _("leave `w.grad` alone: it was {before}, now {now}",
                      before=_show(grad_before), now=_show(g))

            verdicts.append(self.run_and_require(fn, [
                Requirement(_("{label}you returned `w` itself, still a leaf that requires grad",
                              label=label), same, part="edit"),
                Requirement(_("{label}`w` holds w / w.norm()", label=label), values, part="edit"),
                Requirement(_("{label}the edit bumped `w`'s version counter (no `.data`)",
                              label=label), recorded, part="safe"),
                Requirement(_("{label}`w.grad` is untouched", label=label), grad_kept,
                            part="safe"),
            ], part, args=(w,), on_error=_inplace_error(fn)))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- find the bug

ACT_W = [[0.5, -1.0], [2.0, 0.3]]  # the data of the buggy program in the notebook
ACT_X = [1.0, 2.0]


def _returned_leaf(expected_values):
    def test(run):
        w = run.result
        if not tf.is_tensor(w):
            return False, _("return `w`, not {kind}", kind=type(w).__name__)
        if not tf.is_leaf(w):
            return False, _("the returned tensor has grad_fn `{name}`: it was made from `w`, "
                            "return the sorting centre itself", name=tf.grad_fn_name(w))
        return (tf.requires_grad(w) and values_equal(tf._tolist(w.detach()), expected_values),
                _("return `w` as it was made: a leaf that requires grad, with its values"))

    return test


@lesson.register
class Q9ShiftedActivation(WriteCode):
    qid = "q9"
    title = N_("Find the bug: the activation shifted in place")
    function_name = "forward_backward"
    starter = """\
def forward_backward():
    w = torch.tensor([[0.5, -1.0], [2.0, 0.3]], requires_grad=True)
    x = torch.tensor([1.0, 2.0])
    act = (w @ x).sigmoid()
    act += 0.1                       # shift the activation a little
    loss = (act ** 2).sum()
    loss.backward()
    return w
"""

    def grade_code(self, fn, part, variant):
        import torch

        ref_w = torch.tensor(ACT_W, requires_grad=True)   # the intended program, out of place
        act = (ref_w @ torch.tensor(ACT_X)).sigmoid()
        act = act + 0.1
        (act ** 2).sum().backward()
        want = tf.grad_values(ref_w)

        def grad(run):
            g = tf.grad_values(run.result) if tf.is_tensor(run.result) else None
            if g is not None and values_equal(g, want):
                return True, ""
            if g is None:
                return (False, _("`w.grad` is `None`: no recorded route led from the loss back "
                                 "to `w`"),
                        "detach_keeps_grad" if ".detach(" in fn.source else None)
            return (False, _("`w.grad` is {got}; the gradient of the shifted loss, computed out "
                             "of place by torch, is {want}", got=_show(g), want=_show(want)),
                    "data_is_safe" if ".data" in fn.source else None)

        return self.run_and_require(fn, [
            Requirement("`w` is returned as it was, a leaf that requires grad",
                        _returned_leaf(ACT_W)),
            Requirement("backward ran and `w.grad` is that of the out-of-place program", grad),
        ], part, on_error=_inplace_error(fn))


CLIP_W = [0.5, -2.0, 3.0]
CLIP_X = [1.0, 2.0, 3.0]


@lesson.register
class Q10DataClip(WriteCode):
    qid = "q10"
    title = N_("Find the bug: clipping through .data")
    function_name = "clipped_step"
    part_names = ["grad", "clip"]
    starter = """\
def clipped_step():
    w = torch.tensor([0.5, -2.0, 3.0], requires_grad=True)
    x = torch.tensor([1.0, 2.0, 3.0])
    loss = (w * w * x).sum()
    w.data.clamp_(-1, 1)             # keep the weights in range
    loss.backward()
    return w
"""

    def grade_code(self, fn, part, variant):
        import torch

        ref_w = torch.tensor(CLIP_W, requires_grad=True)     # the loss at the original w
        (ref_w * ref_w * torch.tensor(CLIP_X)).sum().backward()
        want_grad = tf.grad_values(ref_w)
        want_w = tf._tolist(torch.tensor(CLIP_W).clamp(-1, 1))

        def leaf(run):
            w = run.result
            if not tf.is_tensor(w):
                return False, _("return `w`, not {kind}", kind=type(w).__name__)
            if not tf.is_leaf(w):
                return False, _("the returned tensor has grad_fn `{name}`: `w = w.clamp(...)` "
                                "made a new tensor; clip the sorting centre itself",
                                name=tf.grad_fn_name(w))
            return tf.requires_grad(w), _("return `w`, a leaf that requires grad")

        def grad(run):
            w = run.result
            g = tf.grad_values(w) if tf.is_tensor(w) else None
            if g is not None and values_equal(g, want_grad):
                return True, ""
            if tf.is_tensor(w) and not tf.is_leaf(w):
                return False, _("the tensor you returned is not the sorting centre: the gradient "
                                "of the loss is stored on `w` itself, not on what you made from "
                                "it")
            return (False, _("`w.grad` is {got}; the gradient at the weights the loss was "
                             "computed with is {want}", got=_show(g), want=_show(want_grad)),
                    "data_is_safe" if ".data" in fn.source else None)

        def clipped(run):
            w = run.result
            if tf.is_tensor(w) and not tf.is_leaf(w):
                return False, _("the sorting centre itself was not clipped, only a new tensor")
            got = tf._tolist(w.detach())
            return values_equal(got, want_w), \
                _("`w` should end clipped to [-1, 1]: {want}, found {got}", want=_show(want_w),
                  got=_show(got))

        def recorded(run):
            if not tf.is_leaf(run.result):
                return False, _("the sorting centre itself was not edited")
            if tf.version(run.result) >= 1:
                return True, ""
            if values_equal(tf._tolist(run.result.detach()), want_w):
                return (False, _("`w` was clipped but its version counter is still 0: the clip "
                                 "went through `.data`, which hides the edit from autograd; clip "
                                 "under `torch.no_grad()` after backward"), "data_is_safe")
            return False, _("`w` was not edited in place")

        return self.run_and_require(fn, [
            Requirement("`w` is a leaf that requires grad", leaf, part="grad"),
            Requirement("`w.grad` is the gradient torch computes for the loss at the original "
                        "weights", grad, part="grad"),
            Requirement("`w` ends clipped to [-1, 1]", clipped, part="clip"),
            Requirement("the clip is visible to the version counter (no `.data`)", recorded,
                        part="clip"),
        ], part, on_error=_inplace_error(fn))
