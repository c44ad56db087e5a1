"""Lesson 06, in-place operations: the questions of ``source/06_inplace/06_inplace.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts with :mod:`autograder.torchfacts`; a code question runs the learner's
function in the oracle and compares it with a reference computation that torch
runs there and then. Whether an in-place edit breaks backward is never typed in:
the scenario is run and the exception, if any, is what torch raised.
"""

from __future__ import annotations

import re
from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName
from autograder.questions import (
    CodeRun,
    Item,
    Lesson,
    Predict,
    Requirement,
    WriteCode,
    learner_namespace,
    values_equal,
)

lesson = Lesson("06_inplace", "In-place operations and the version counter")


def _error(err) -> ExceptionName | None:
    """The answer a learner gives for 'which exception?': the class name, or None."""
    return None if err is None else ExceptionName(type(err).__name__)


def _raise_myth(given: Any, expected: Any) -> str | None:
    """Wrong about whether backward raises: which way round?"""
    if expected is None and given is not None:
        return "inplace_always_fatal"
    if expected is not None and given is None:
        return "inplace_never_checked"
    return None


# --------------------------------------------------------------------------- Q1

SEED004_PLUS = """\
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


def _grad_none_myth(given: Any, expected: Any) -> str | None:
    if given is None and expected is not None:
        return "inplace_grad_none"
    return None


def _unscaled_myth(given: Any, expected: Any) -> str | None:
    """x.grad given as y, as if z.mul_(2) had not been recorded."""
    if given is None:
        return "inplace_grad_none"
    if isinstance(given, list) and isinstance(expected, list) and values_equal(
        given, [e / 2 for e in expected]
    ):
        return "inplace_not_recorded"
    return None


@lesson.register
class Q1SeedExample(Predict):
    qid = "q1"
    title = "Seed 004's in-place example, one step further"
    code = SEED004_PLUS
    items = [
        Item("error", "mul saved its inputs x and y, not its output z; add_ and mul_ by a number "
             "need nothing saved. Nothing the audit needs was repacked, so backward runs.",
             _raise_myth),
        Item("x.grad", "the in-place ops are recorded like any other: z = 2*(x*y + 1), so "
             "dz/dx = 2*y. Give a list of floats.", _unscaled_myth),
        Item("z._version", "every in-place op bumps the tensor's version counter by one.",
             "version_counts_wrong"),
    ]

    def facts(self, ns):
        return {"error": _error(ns["error"]), "x.grad": tf.grad_values(ns["x"]),
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


def _saves_myth(given: Any, expected: Any) -> str | None:
    if expected is None and given is not None:
        return "inplace_always_fatal"
    if expected is not None and given is None:
        return "saved_values_confused"
    return None


@lesson.register
class Q2WhoSaves(Predict):
    qid = "q2"
    title = "Does backward raise? Who kept a sample"
    code = WHO_SAVES
    items = [
        Item("err_a", "sigmoid saves its output (d sigmoid = s*(1-s)); a.mul_(2) overwrites "
             "exactly that sample, so backward raises.", _raise_myth, part="outputs"),
        Item("err_b", "sqrt saves its *output* (d sqrt(h) = 1/(2*sqrt(h))), not its input: "
             "changing h afterwards does not touch what sqrt's backward reads.", _saves_myth,
             part="outputs"),
        Item("err_m", "mul saves its inputs, not its output: overwriting m is harmless.",
             _saves_myth, part="outputs"),
        Item("err_p", "for p = g * x, the gradient for x needs g, so mul saved g; g.zero_() "
             "overwrote it.", _raise_myth, part="inputs"),
        Item("err_q", "c does not require grad, so nobody needs the gradient for c and mul did "
             "not save k (it saved only c, to compute k's gradient).", _saves_myth,
             part="inputs"),
        Item("err_r", "to compute x's gradient, mul needs c, so it saved c although c does not "
             "require grad; c.add_(1) overwrote that sample.", _raise_myth, part="inputs"),
    ]

    def facts(self, ns):
        return {k: _error(ns[k]) for k in ("err_a", "err_b", "err_m", "err_p", "err_q", "err_r")}


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
        if given > expected:
            return "data_is_safe"
        if given < expected:
            return "no_grad_edit_unchecked"
    return None


def _grad_fn_myth(given: Any, expected: Any) -> str | None:
    if given in ("MulBackward0", "AddBackward0", None):
        return "index_assign_untracked"
    return None


@lesson.register
class Q3Versions(Predict):
    qid = "q3"
    title = "The version counter and CopySlices"
    code = VERSIONS
    items = [
        Item("h._version", "h was changed in place twice (add_ and the indexed assignment); each "
             "in-place change bumps its version by one.", "version_counts_wrong"),
        Item("h.grad_fn", "an indexed assignment is an in-place copy into a slice, recorded as a "
             "CopySlices node that becomes h's grad_fn. Give the class name as a string.",
             _grad_fn_myth),
        Item("w._version", "the edit under no_grad() is counted (no_grad stops recording, not "
             "counting); the edit through .data is not counted at all.", _w_version_myth),
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


def _leaf_values_myth(given: Any, expected: Any) -> str | None:
    if isinstance(given, list) and isinstance(expected, list) and len(given) == len(expected):
        if values_equal(given, [e / 2 for e in expected]) or (
            values_equal(given[1:], [e / 2 for e in expected[1:]])
        ):
            return "leaf_inplace_ok"
    return None


@lesson.register
class Q4LeafEdits(Predict):
    qid = "q4"
    title = "In place on a leaf that requires grad"
    code = LEAF_EDITS
    items = [
        Item("err_mul", "an in-place op on a leaf that requires grad raises 'a leaf Variable "
             "that requires grad is being used in an in-place operation'.", "leaf_inplace_ok"),
        Item("err_index", "an indexed assignment is an in-place op too, so it raises the same "
             "way (through a view of the leaf).", "leaf_inplace_ok"),
        Item("w", "the two refused edits changed nothing; only the edit under no_grad() took "
             "place. Give the values as a list.", _leaf_values_myth),
        Item("w.is_leaf", "an edit under no_grad() records no operation: w is still a leaf, "
             "and it still requires grad.", "no_grad_edit_makes_nonleaf"),
    ]

    def facts(self, ns):
        w = ns["w"]
        return {"err_mul": _error(ns["err_mul"]), "err_index": _error(ns["err_index"]),
                "w": tf._tolist(w), "w.is_leaf": tf.is_leaf(w)}


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

    if given is None:
        return "inplace_grad_none"
    # The gradient of the loss that was actually computed, at the old w.
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (w ** 3).sum().backward()
    if isinstance(given, list) and values_equal(given, tf.grad_values(w)):
        return "data_is_safe"
    return None


@lesson.register
class Q5DataVsNoGrad(Predict):
    qid = "q5"
    title = ".data or no_grad(): silent or loud?"
    code = DATA_VS_NO_GRAD
    items = [
        Item("grad_after_data", "pow's backward computes 3*w**2 from the *saved* w, which .data "
             "changed to w+1 without bumping the version: you get 3*(w+1)**2, silently wrong. "
             "Give a list of floats.", _data_grad_myth, part="data"),
        Item("w._version", ".data returns a tensor with its own version counter: edits through "
             "it are invisible to the version check.", "data_is_safe", part="data"),
        Item("err_no_grad", "no_grad() stops recording, but the edit still bumps v's version, "
             "so backward notices that the saved v changed and raises.", "no_grad_edit_unchecked",
             part="no_grad"),
    ]

    def facts(self, ns):
        return {"grad_after_data": ns["grad_after_data"], "w._version": tf.version(ns["w"]),
                "err_no_grad": _error(ns["err_no_grad"])}


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


@lesson.register
class Q6ReadTheReport(Predict):
    qid = "q6"
    title = "Find the culprit with anomaly mode"
    code = ANOMALY
    items = [
        Item("failed_node", "anomaly mode names the backward function that found its saved "
             "value changed: the one of the op that saved the overwritten tensor. Give the "
             "class name as a string.", "saved_values_confused"),
        Item("points_at", "anomaly mode prints the forward line of the op whose backward "
             "failed, not the in-place line. Give the name assigned on that line.",
             "anomaly_points_at_inplace"),
        Item("culprit", "the culprit is the in-place edit of a tensor that some backward "
             "function saved; (a) and (b) overwrite tensors nobody saved. Answer 'a', 'b' or "
             "'c'.", "inplace_always_fatal"),
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


def _backward_outcome(run: CodeRun, x) -> tuple[str | None, list | None]:
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


SQUASH_INPUTS = {"visible": [[0.5, -1.0, 2.0]], "hidden": [[0.5, -1.0, 2.0], [[0.1, 0.2],
                                                                              [-0.3, 3.0]]]}


@lesson.register
class Q7SafeFinish(WriteCode):
    qid = "q7"
    title = "Write an in-place finish that backward accepts"
    function_name = "squash"

    def grade_code(self, fn, part, variant):
        import torch

        from autograder.questions import Finding, Verdict

        verdicts = []
        for values in SQUASH_INPUTS["hidden" if variant == "hidden" else "visible"]:
            x = torch.tensor(values, requires_grad=True)
            ref_x = torch.tensor(values, requires_grad=True)
            ref = 3 * torch.tanh(2 * ref_x) + 1       # the reference, out of place
            ref.sum().backward()
            want_values, want_grad = tf._tolist(ref.detach()), tf.grad_values(ref_x)

            def values_ok(run, want=want_values):
                out = run.result
                if not tf.is_tensor(out):
                    return False, f"return a tensor, not {type(out).__name__}"
                got = tf._tolist(out.detach())
                return values_equal(got, want), f"expected 3*tanh(2*x) + 1 = {want}, got {got}"

            def inplace_ok(run, x=x):
                out = run.result
                return (tf.is_tensor(out) and not tf.is_leaf(out) and tf.version(out) >= 1,
                        "the returned tensor must come out of operations on x and be finished "
                        f"in place (its _version is {tf.version(out) if tf.is_tensor(out) else '-'})")

            def backward_ok(run, x=x, want=want_grad):
                err, grad = _backward_outcome(run, x)
                if err:
                    return False, (f"backward raised {err}: one of your in-place ops overwrote "
                                   "a value saved for backward (tanh saves its output)")
                return values_equal(grad, want), f"x.grad should be {want}, found {grad}"

            verdicts.append(self.run_and_require(fn, [
                Requirement("the values are 3*tanh(2*x) + 1", values_ok),
                Requirement("the result was finished in place (its version counter moved)",
                            inplace_ok, "inplace_always_fatal"),
                Requirement("backward runs and gives the right x.grad", backward_ok,
                            "saved_values_confused"),
            ], part, args=(x,)))
        findings: list[Finding] = []
        for i, v in enumerate(verdicts):
            for f in v.findings:
                if len(verdicts) > 1:
                    f.text = f"input {i + 1}: {f.text}"
                findings.append(f)
        return Verdict(self.qid, findings)


RENORM_START = [3.0, 4.0, 0.0]


@lesson.register
class Q8Renormalise(WriteCode):
    qid = "q8"
    title = "Rescale a sorting centre in place, in the open"
    function_name = "renormalise_"
    part_names = ["edit", "safe"]

    def grade_code(self, fn, part, variant):
        import torch

        w = torch.tensor(RENORM_START, requires_grad=True)
        (w * torch.tensor([1.0, 2.0, 3.0])).sum().backward()   # the audit already ran
        grad_before = tf.grad_values(w)
        version_before = tf.version(w)
        ref = torch.tensor(RENORM_START)
        want = tf._tolist(ref / ref.norm())

        def same(run):
            out = run.result
            return out is w and tf.is_leaf(w) and tf.requires_grad(w), \
                "return the very tensor you were given, still a leaf that requires grad"

        def values(run):
            got = tf._tolist(w.detach())
            return values_equal(got, want), f"w should now be w / w.norm() = {want}, found {got}"

        def recorded(run):
            return tf.version(w) > version_before, (
                "the version counter did not move: an edit through .data is invisible to "
                "autograd's checks; edit w itself under torch.no_grad()")

        def grad_kept(run):
            g = tf.grad_values(w)
            return g is not None and values_equal(g, grad_before), \
                f"leave w.grad alone: it was {grad_before}, now {g}"

        return self.run_and_require(fn, [
            Requirement("you returned w itself, still a leaf that requires grad", same,
                        part="edit"),
            Requirement("w holds w / w.norm()", values, part="edit"),
            Requirement("the edit bumped w's version counter (no .data)", recorded,
                        "data_is_safe", part="safe"),
            Requirement("w.grad is untouched", grad_kept, part="safe"),
        ], part, args=(w,))


# --------------------------------------------------------------------------- find the bug

ACT_W = [[0.5, -1.0], [2.0, 0.3]]  # the data of the buggy program in the notebook
ACT_X = [1.0, 2.0]


@lesson.register
class Q9ShiftedActivation(WriteCode):
    qid = "q9"
    title = "Find the bug: the activation shifted in place"
    function_name = "forward_backward"

    def grade_code(self, fn, part, variant):
        import torch

        ref_w = torch.tensor(ACT_W, requires_grad=True)   # the intended program, out of place
        act = (ref_w @ torch.tensor(ACT_X)).sigmoid()
        act = act + 0.1
        (act ** 2).sum().backward()
        want = tf.grad_values(ref_w)

        def leaf(run):
            w = run.result
            return (tf.is_tensor(w) and tf.is_leaf(w) and tf.requires_grad(w)
                    and values_equal(tf._tolist(w.detach()), ACT_W)), \
                "return w, unchanged: a leaf that requires grad"

        def grad(run):
            g = tf.grad_values(run.result)
            return g is not None and values_equal(g, want), \
                f"w.grad should be the gradient of the shifted loss, {want}; found {g}"

        return self.run_and_require(fn, [
            Requirement("w is returned as it was, a leaf that requires grad", leaf),
            Requirement("backward ran and w.grad is right", grad, "saved_values_confused"),
        ], part)


CLIP_W = [0.5, -2.0, 3.0]
CLIP_X = [1.0, 2.0, 3.0]


@lesson.register
class Q10DataClip(WriteCode):
    qid = "q10"
    title = "Find the bug: clipping through .data"
    function_name = "clipped_step"
    part_names = ["grad", "clip"]

    def grade_code(self, fn, part, variant):
        import torch

        ref_w = torch.tensor(CLIP_W, requires_grad=True)     # the loss at the original w
        (ref_w * ref_w * torch.tensor(CLIP_X)).sum().backward()
        want_grad = tf.grad_values(ref_w)
        want_w = tf._tolist(torch.tensor(CLIP_W).clamp(-1, 1))

        def leaf(run):
            w = run.result
            return tf.is_tensor(w) and tf.is_leaf(w) and tf.requires_grad(w), \
                "return w, a leaf that requires grad"

        def grad(run):
            g = tf.grad_values(run.result)
            return g is not None and values_equal(g, want_grad), (
                f"w.grad should be the gradient at the weights the loss was computed with, "
                f"{want_grad}; found {g}")

        def clipped(run):
            got = tf._tolist(run.result.detach())
            return values_equal(got, want_w), f"w should end clipped to [-1, 1]: {want_w}, " \
                f"found {got}"

        def recorded(run):
            return tf.version(run.result) >= 1, (
                "the clip did not bump w's version counter: it went through .data, which hides "
                "the edit from autograd; clip under torch.no_grad() after backward")

        return self.run_and_require(fn, [
            Requirement("w is a leaf that requires grad", leaf, part="grad"),
            Requirement("w.grad is the true gradient of the loss", grad, "data_is_safe",
                        part="grad"),
            Requirement("w ends clipped to [-1, 1]", clipped, part="clip"),
            Requirement("the clip is visible to the version counter (no .data)", recorded,
                        "data_is_safe", part="clip"),
        ], part)
