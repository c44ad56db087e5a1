"""Lesson 03, detach(): the questions of ``source/03_detach/03_detach.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts with :mod:`autograder.torchfacts`; a code question runs the learner's
function in the oracle and compares what it does with a reference computation
run by torch at the same moment (never with typed-in numbers).

A misconception is named only from evidence: the value a learner predicted, what torch
reports about the tensors their code made (a ``grad_fn``, a shared storage, a warning, a
gradient equal to that of a known wrong program), or which switch their code used.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import warnings
from typing import Any

from autograder import torchfacts as tf
from autograder.encoding import ExceptionName, LearnerFunction
from autograder.questions import (
    WRONG,
    Item,
    LearnerCodeError,
    Lesson,
    Predict,
    Requirement,
    Verdict,
    WriteCode,
    define_learner,
    run_learner,
    score,
    values_equal,
    warns,
)
from course.i18n import N_, _

lesson = Lesson("03_detach", "detach() and its cousins",
                preload=("torch._dynamo",))  # its checks train with optimizers


def _error(ns: dict, name: str = "error"):
    err = ns.get(name)
    return None if err is None else ExceptionName(type(err).__name__)


def _when(value: Any, key: str):
    """An item's myth: ``key`` when the learner gave ``value``, else no label."""
    return lambda given, expected: key if values_equal(given, value) else None


def _if_no_error(key: str):
    """An item about whether code raises: ``key`` when the learner said it does not."""
    return lambda given, expected: key if given is None and expected is not None else None


# --------------------------------------------------------------------------- predict

RELABEL = """\
meat = nn.Linear(2, 2).weight     # market ingredient (a layer's parameter)
stew = meat.tanh()                # semi-finished dish
packed = stew.detach()            # vacuum-packed stew
"""


@lesson.register
class Q1Relabelled(Predict):
    qid = "q1"
    title = N_("What detach() returns")
    code = RELABEL
    items = [
        Item("packed.is_leaf", "`detach()` returns a tensor with no recorded history: a leaf.",
             "detach_keeps_grad"),
        Item("packed.requires_grad", "The package carries no recipe to trace back: `detach()` "
             "returns a tensor with `requires_grad=False`, even when the original requires grad.",
             "detach_keeps_grad"),
        Item("packed.grad_fn is None", "No recipe step is attached to the package: `grad_fn` "
             "is `None`.", "detach_keeps_grad"),
        Item("same storage", "Same stew, no recipe: `packed.data_ptr() == stew.data_ptr()`; "
             "`detach()` copies nothing.", "detach_copies"),
    ]

    def facts(self, ns):
        packed, stew = ns["packed"], ns["stew"]
        return {
            "packed.is_leaf": tf.is_leaf(packed),
            "packed.requires_grad": tf.requires_grad(packed),
            "packed.grad_fn is None": tf.grad_fn_name(packed) is None,
            "same storage": tf.shares_storage(packed, stew),
        }


BROTH = """\
bones = torch.tensor([0.0, 0.0], requires_grad=True)   # market ingredient
broth = bones.exp()                    # exp keeps its output for backward
packed = broth.detach()                # vacuum-packed: the same broth
remade = broth.detach().clone()        # re-made from scratch
remade[1] = 7.0
packed[0] = 5.0
try:
    broth.sum().backward()
    error = None
except RuntimeError as exc:
    error = exc
"""


@lesson.register
class Q2SharedBroth(Predict):
    qid = "q2"
    title = N_("Writing through the vacuum pack")
    code = BROTH
    items = [
        Item("broth[0]", "`packed` shares `broth`'s storage, so `packed[0] = 5.0` wrote into "
             "the pot itself.", _when(1.0, "detach_copies"), part="shared"),
        Item("broth[1]", "`remade` is a real copy (`detach().clone()`): writing into it leaves "
             "`broth` alone.", _when(7.0, "clone_shares_storage"), part="shared"),
        Item("error", "`exp` saved its output for backward; the write through `packed` bumped "
             "the version counter that `packed` shares with `broth`, so backward raises "
             "`RuntimeError` ('modified by an inplace operation'). Answer `RuntimeError` or "
             "`None`.", None, part="backward"),
    ]

    def judge(self, item, answer, expected):
        finding = super().judge(item, answer, expected)
        if item.key == "error" and finding.status == WRONG and answer.get("error") is None:
            # No error predicted: did the learner think the write missed the broth, or that
            # autograd would not notice it? Their broth[0] says which.
            first = answer.get("broth[0]")
            myth = ("detach_copies" if values_equal(first, 1.0) else
                    "inplace_never_checked" if values_equal(first, 5.0) else None)
            finding = dataclasses.replace(finding, misconception=myth)
        return finding

    def facts(self, ns):
        values = tf._tolist(ns["broth"])
        return {"broth[0]": values[0], "broth[1]": values[1], "error": _error(ns)}


COPIES = """\
sauce = torch.tensor([1.0, 2.0], requires_grad=True) * 3   # a semi-finished sauce
copy_a = sauce.clone()
copy_b = sauce.detach().clone()
copy_c = torch.tensor(sauce)     # does this line warn?
"""


@lesson.register
class Q3Copies(Predict):
    qid = "q3"
    title = N_("Three ways to copy")
    code = COPIES
    items = [
        Item("copy_a.is_leaf", "`clone()` is an operation like any other: it records "
             "`CloneBackward0`, so `copy_a` is a non-leaf that stays on the recipe.",
             "clone_cuts_history", part="clone"),
        Item("copy_a.requires_grad", "`clone()` keeps the history: gradients flow back through "
             "`copy_a` to the original.", "clone_cuts_history", part="clone"),
        Item("copy_b.requires_grad", "`detach()` cut the history before `clone()` copied the "
             "data: a fresh leaf without grad.", "detach_keeps_grad", part="fresh"),
        Item("copy_c.requires_grad", "`torch.tensor(t)` copies the values into a new leaf "
             "without grad (`requires_grad` defaults to `False`).", "detach_keeps_grad",
             part="fresh"),
        Item("copy_c warns", "`torch.tensor(t)` on a tensor emits a `UserWarning` recommending "
             "`t.detach().clone()`.", "torch_tensor_silent", part="fresh"),
    ]

    def facts(self, ns):
        import torch

        sauce = ns["sauce"]
        return {
            "copy_a.is_leaf": tf.is_leaf(ns["copy_a"]),
            "copy_a.requires_grad": tf.requires_grad(ns["copy_a"]),
            "copy_b.requires_grad": tf.requires_grad(ns["copy_b"]),
            "copy_c.requires_grad": tf.requires_grad(ns["copy_c"]),
            "copy_c warns": warns(lambda: torch.tensor(sauce)),
        }


SWITCHES = """\
flour = torch.tensor([1.0, 2.0], requires_grad=True)   # market ingredient
dough = flour * 2                                       # semi-finished dish
try:
    dough.requires_grad_(False)
    error = None
except RuntimeError as exc:
    error = exc
dough.detach_()
"""


@lesson.register
class Q4Switches(Predict):
    qid = "q4"
    title = N_("requires_grad_(False) and detach_()")
    code = SWITCHES
    items = [
        Item("error", "`requires_grad_` can change the flag of leaves only; on a semi-finished "
             "dish it raises `RuntimeError`. Answer `RuntimeError` or `None`.",
             _if_no_error("requires_grad_off_nonleaf")),
        Item("dough.is_leaf", "`detach_()` cuts `dough` off its recipe in place: it becomes a "
             "leaf.", "detach_inplace_harmless"),
        Item("dough.requires_grad", "After `detach_()`, `dough` no longer requires grad.",
             "detach_inplace_harmless"),
        Item("flour.requires_grad", "Nothing touched `flour`: cutting `dough` off its recipe "
             "does not change the ingredient it was made from.", None),
    ]

    def facts(self, ns):
        return {
            "error": _error(ns),
            "dough.is_leaf": tf.is_leaf(ns["dough"]),
            "dough.requires_grad": tf.requires_grad(ns["dough"]),
            "flour.requires_grad": tf.requires_grad(ns["flour"]),
        }


FREEZE = """\
model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
model[0].weight.detach()               # "freeze" attempt 1 (the five-scenarios article)
model[0].bias.requires_grad_(False)    # freeze attempt 2
model[1].weight.detach_()              # the kitchen article's loop body
loss = model(torch.ones(2, 3)).sum()
loss.backward()
"""


@lesson.register
class Q5Freeze(Predict):
    qid = "q5"
    title = N_("Which freeze works?")
    code = FREEZE
    items = [
        Item("model[0].weight.grad is None", "`p.detach()` returns a new tensor that is thrown "
             "away; the parameter itself still requires grad and gets its gradient.",
             "detach_freezes"),
        Item("model[0].bias.grad is None", "`requires_grad_(False)` freezes the parameter: "
             "backward leaves its `.grad` at `None`.", None),
        Item("model[1].weight.grad is None", "On a leaf parameter, `detach_()` switches "
             "`requires_grad` off in place: that one is frozen too.", "detach_inplace_harmless"),
        Item("model[1].bias.grad is None", "Nobody touched `model[1].bias`: it trains.", None),
    ]

    def facts(self, ns):
        m = ns["model"]
        return {
            "model[0].weight.grad is None": tf.grad_values(m[0].weight) is None,
            "model[0].bias.grad is None": tf.grad_values(m[0].bias) is None,
            "model[1].weight.grad is None": tf.grad_values(m[1].weight) is None,
            "model[1].bias.grad is None": tf.grad_values(m[1].bias) is None,
        }


RESIDUAL = """\
w = torch.tensor(0.1, requires_grad=True)     # one weight, shared by every block
x = torch.tensor(1.0, requires_grad=True)
h = x
for _ in range(3):
    h = w * h + h                 # residual block, skip path kept
h.backward()
x2 = torch.tensor(1.0, requires_grad=True)
g = x2
for _ in range(3):
    g = w * g + g.detach()        # the kitchen article's block: identity.detach()
g.backward()
"""


@lesson.register
class Q6Residual(Predict):
    qid = "q6"
    title = N_("The residual block, by hand")
    code = RESIDUAL
    items = [
        Item("x.grad", "Each block maps `h` to `(w + 1) * h`, so dh/dx = (w + 1)**3 = 1.1**3.",
             None),
        Item("x2.grad", "With the skip path vacuum-packed, only `w * g` carries gradient: "
             "dg/dx2 = w**3 = 0.1**3. The skip path's 1 is gone from every factor.",
             _when(1.1 ** 3, "residual_detach_harmless")),
    ]

    def facts(self, ns):
        return {"x.grad": tf.grad_values(ns["x"]), "x2.grad": tf.grad_values(ns["x2"])}


# --------------------------------------------------------------------------- write code helpers

NO_GRAD = ("no_grad", "set_grad_enabled", "inference_mode")


def _uses(fn: LearnerFunction, *names: str) -> bool:
    """Whether the learner's code names any of ``names`` (as a name or an attribute)."""
    try:
        tree = ast.parse(fn.source)
    except SyntaxError:
        return False
    return any((isinstance(n, ast.Attribute) and n.attr in names)
               or (isinstance(n, ast.Name) and n.id in names) for n in ast.walk(tree))


def _close(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    return torch.allclose(torch.tensor(a), torch.tensor(b), rtol=1e-4, atol=1e-7)


def _norm(values) -> str:
    import torch

    return "`None`" if values is None else f"{float(torch.tensor(values).norm()):.4g}"


def _raised(exc: BaseException) -> str:
    """``RuntimeError: <torch's message>``, as a learner's error is shown."""
    return f"{type(exc).__name__}: {exc}"


def _listing(items) -> str:
    """Items of a list inside a sentence, separated as the current language separates them."""
    # TRANSLATORS: the separator between the items of a list inside a sentence
    return _(", ").join(items)


@dataclasses.dataclass
class _Loss:
    """A loss the learner's function returned, after the checker's ``backward()`` on it."""

    value: Any
    failure: str | None  # why backward could not run, or None


def _loss_run(fn: LearnerFunction, *args) -> _Loss:
    loss = run_learner(fn, *args).result
    if not tf.is_tensor(loss):
        return _Loss(loss, _("your function returned {type}, not a tensor: backward needs the "
                             "loss tensor", type=type(loss).__name__))
    try:
        loss.backward()
    except RuntimeError as exc:
        return _Loss(loss, _("`loss.backward()` raised RuntimeError: {error}",
                             error=str(exc).splitlines()[0]))
    return _Loss(loss, None)


def _backward_runs(fn: LearnerFunction, name: str) -> Requirement:
    """Backward runs on the returned loss; a loss with nothing recorded, from code that switched
    recording off, names the detach()/no_grad() confusion."""

    def test(r: _Loss):
        unrecorded = r.failure is not None and "does not have a grad_fn" in r.failure
        return (r.failure is None, r.failure or "",
                "detach_no_grad_confused" if unrecorded and _uses(fn, *NO_GRAD) else None)

    return Requirement(_("{case}: `loss.backward()` runs on the loss you return", case=name),
                       test)


def _after_backward(test):
    """A requirement's test that needs the gradients: not checked when backward did not run."""
    def checked(r: _Loss):
        if r.failure is not None:
            return False, _("there is no gradient to compare: backward did not run")
        return test(r)
    return checked


# --------------------------------------------------------------------------- Q7 snapshot


def _snapshot_cases(variant: str) -> dict[str, Any]:
    import torch

    torch.manual_seed(3)
    w = torch.randn(3, requires_grad=True)
    cases = {
        _("on a semi-finished dish `(w * 2).exp()`"): (w * 2).exp(),
        _("on a layer's weight"): torch.nn.Linear(3, 2).weight,
    }
    if variant == "hidden":
        cases[_("on a view `t[1:]` of a market ingredient")] = \
            torch.randn(4, 3, requires_grad=True)[1:]
        cases[_("on bottled sauce (no grad)")] = torch.randn(5)
    return cases


def _copy_requirements(name: str, original) -> list[Requirement]:
    import torch

    before, version = tf._tolist(original), tf.version(original)

    def values(run):
        res = run.result
        if not tf.is_tensor(res):
            return False, _("your function returned {type}, not a tensor",
                            type=type(res).__name__)
        got = tf._tolist(res)
        return values_equal(got, before), _("your copy holds {copy}, `t` holds {original}",
                                            copy=got, original=before)

    def fresh(run):
        res = run.result
        if res is original:
            return False, _("you returned `t` itself, not a copy")
        recipe = tf.grad_fn_name(res)
        if recipe is not None:
            return (False, _("your copy has grad_fn `{grad_fn}`: it is still on the recipe of "
                             "`t`", grad_fn=recipe),
                    "clone_cuts_history" if recipe == "CloneBackward0" else None)
        if tf.requires_grad(res):
            return False, _("your copy is a leaf that requires grad: a snapshot has no recipe "
                            "to trace and should not ask for a gradient")
        return True, ""

    def separate(run):
        res = run.result
        with torch.no_grad():
            res.add_(1.0)  # a write into the copy must not reach the original
        if values_equal(tf._tolist(original), before) and tf.version(original) == version:
            return True, ""
        if res is original:
            return False, _("you returned `t` itself: writing into it is writing into `t`")
        detached = tf.is_leaf(res) and not tf.requires_grad(res)
        return (False, _("writing into your copy changed `t`: they share one storage (the "
                         "same pot, vacuum-packed)"), "detach_copies" if detached else None)

    def silent(run):
        if not run.warnings:
            return True, ""
        said = run.warnings[0].splitlines()[0]
        return (False, _("your function warned: `{warning}`", warning=said),
                "torch_tensor_silent" if "copy construct from a tensor" in said else None)

    return [
        Requirement(_("{case}: the same values", case=name), values),
        Requirement(_("{case}: a leaf that does not require grad", case=name), fresh),
        Requirement(_("{case}: its own storage", case=name), separate),
        Requirement(_("{case}: no warning", case=name), silent),
    ]


@lesson.register
class Q7Snapshot(WriteCode):
    qid = "q7"
    title = N_("Re-make the broth from scratch")
    function_name = "snapshot"

    def grade_code(self, fn, part, variant):
        return Verdict.merge(self.qid, [
            score(self.qid, _copy_requirements(name, t), lambda t=t: run_learner(fn, t), part)
            for name, t in _snapshot_cases(variant).items()])


# --------------------------------------------------------------------------- Q8 freeze


def _freeze_models(variant: str) -> dict[str, Any]:
    import torch
    from torch import nn

    def model(middle):
        return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), middle, nn.Tanh(), nn.Linear(6, 1))

    torch.manual_seed(4)
    models = {_("a middle `nn.Linear(6, 6)`"): model(nn.Linear(6, 6))}
    if variant == "hidden":  # a layer with sub-layers: freeze all of its parameters
        torch.manual_seed(5)
        models[_("a middle `nn.Sequential(Linear, ReLU, Linear)`")] = model(
            nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6)))
    return models


def _train_step(model) -> None:
    """One ordinary training step: an SGD optimizer over *all* parameters, as usual."""
    import torch

    torch.manual_seed(11)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def _freeze_belief(fn: LearnerFunction, model) -> str | None:
    """Why the layer still trains, read off what the learner's code did to the model."""
    layer = model[2]
    if tf.grad_values(model[0].weight) is None:
        return "detach_activation_freezes_one"  # the route through the layer was cut instead
    if vars(layer).get("requires_grad") is False or any(
            vars(m).get("requires_grad") is False for m in layer.modules()):
        return "module_requires_grad_attr"  # a plain attribute on the module, read by nobody
    if not layer.training:
        return "eval_freezes"
    if _uses(fn, *NO_GRAD):
        return "no_grad_flips_flag"
    if _uses(fn, "detach"):
        return "detach_freezes"
    return None


def _freeze_requirements(fn, label, model, reference, before) -> list[Requirement]:
    """What torch reports about the model once the learner froze ``model[2]`` and one
    training step ran (the tests read the layer then, whatever the learner did to it)."""
    import torch

    layer = model[2]

    def middle():
        return dict(layer.named_parameters())

    def frozen_flags(_run):
        on = [f"`{n}`" for n, p in middle().items() if tf.requires_grad(p)]
        detail = (_("{names} still has `requires_grad=True`", names=_listing(on)) if len(on) == 1
                  else _("{names} still have `requires_grad=True`", names=_listing(on)))
        return not on, detail, _freeze_belief(fn, model)

    def no_grads(_run):
        stored = [_("`{name}` (norm {norm})", name=n, norm=_norm(tf.grad_values(p)))
                  for n, p in middle().items() if tf.grad_values(p) is not None]
        return not stored, _("backward stored a gradient on {params}", params=_listing(stored))

    def unchanged(_run):
        moved = {n: float((p.detach() - before[n]).abs().max()) for n, p in middle().items()
                 if n in before and not torch.equal(p.detach(), before[n])}
        moves = [_("`{name}` by up to {amount}", name=n, amount=format(d, ".3g"))
                 for n, d in moved.items()]
        return not moved, _("the step moved {moves}", moves=_listing(moves))

    def others_train(_run):
        if tf.grad_values(model[0].weight) is None:
            return (False, _("the first layer got no gradient at all (`.grad` is `None`): the "
                             "route back through the middle layer was cut"),
                    "detach_activation_freezes_one")
        ref = dict(reference.named_parameters())
        bad = [_("`{name}` (norm {norm}, torch's reference {reference})", name=n,
                 norm=_norm(tf.grad_values(p)), reference=_norm(tf.grad_values(ref[n])))
               for n, p in model.named_parameters()
               if not n.startswith("2.") and n in ref
               and not _close(tf.grad_values(p), tf.grad_values(ref[n]))]
        return not bad, _("these gradients differ from those of the model with the layer "
                          "frozen correctly: {params}", params=_listing(bad))

    return [
        Requirement(_("{case}: every parameter of the layer has `requires_grad=False`",
                      case=label), frozen_flags),
        Requirement(_("{case}: backward leaves the layer's `.grad` at `None`", case=label),
                    no_grads),
        Requirement(_("{case}: an SGD step over `model.parameters()` leaves the layer "
                      "unchanged", case=label), unchanged),
        Requirement(_("{case}: the layers before and after it still get their gradients",
                      case=label), others_train),
    ]


@lesson.register
class Q8FreezeLayer(WriteCode):
    qid = "q8"
    title = N_("Freeze the middle layer")
    function_name = "freeze"

    def grade_code(self, fn, part, variant):
        verdicts = []
        for label, model in _freeze_models(variant).items():
            reference = copy.deepcopy(model)
            reference[2].requires_grad_(False)  # the correct freeze, done by the grader
            _train_step(reference)
            before = {n: p.detach().clone() for n, p in model[2].named_parameters()}

            def run(model=model):
                result = run_learner(fn, model[2])
                try:
                    _train_step(model)
                except Exception as exc:
                    raise LearnerCodeError(
                        _("{error} (in the training step after your `freeze`)",
                          error=_raised(exc)), type(exc).__name__) from None
                return result

            verdicts.append(score(self.qid, _freeze_requirements(fn, label, model, reference,
                                                                 before), run, part))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- Q9 custom loss


def _loss_cases(variant: str) -> dict[str, tuple]:
    """name -> (random seed, mid layer, head, batch size, inputs, outputs)."""
    from torch import nn

    cases = {_("with a batch of 6"): (20, lambda: nn.Linear(4, 3), lambda: nn.Linear(3, 1), 6,
                                      4, 1)}
    if variant == "hidden":
        cases[_("with a two-layer `mid_layer` and two outputs")] = (
            21, lambda: nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)),
            lambda: nn.Linear(3, 2), 10, 5, 2)
    return cases


def _intended_grads(mid, head, x, target, aux_weight: float):
    """mid's and head's gradients of main + aux_weight * aux, computed by torch now."""
    import torch.nn.functional as F

    mid, head = copy.deepcopy(mid), copy.deepcopy(head)
    feat = mid(x)
    loss = F.mse_loss(head(feat.tanh()), target) + aux_weight * (feat ** 2).mean()
    loss.backward()
    return loss, [tf.grad_values(p) for p in mid.parameters()], \
        [tf.grad_values(p) for p in head.parameters()]


@lesson.register
class Q9CustomLoss(WriteCode):
    qid = "q9"
    title = N_("Find the bug: the five-scenarios article's custom loss")
    function_name = "custom_loss"
    starter = '''\
def custom_loss(output, target, feat):
    main = F.mse_loss(output, target)
    aux = (feat.detach() ** 2).mean()      # "detach, so as not to disturb the graph"
    return main + 0.1 * aux
'''

    def grade_code(self, fn, part, variant):
        import torch

        verdicts = []
        for name, (seed, make_mid, make_head, n, d_in, d_out) in _loss_cases(variant).items():
            torch.manual_seed(seed)
            mid, head = make_mid(), make_head()
            x, target = torch.randn(n, d_in), torch.randn(n, d_out)
            ref_loss, ref_mid, ref_head = _intended_grads(mid, head, x, target, 0.1)
            _unused, main_mid, _unused = _intended_grads(mid, head, x, target, 0.0)
            unweighted, _unused, _unused = _intended_grads(mid, head, x, target, 1.0)

            def run(mid=mid, head=head, x=x, target=target):
                feat = mid(x)
                return _loss_run(fn, head(feat.tanh()), target, feat)

            def value(r, ref_loss=ref_loss, unweighted=unweighted):
                if not tf.is_tensor(r.value):
                    return False, _("your function returned {type}", type=type(r.value).__name__)
                got, want = tf._tolist(r.value), tf._tolist(ref_loss)
                values = {"got": f"{got:.6g}", "want": f"{want:.6g}"}
                if values_equal(got, tf._tolist(unweighted), 1e-5):
                    detail = _("your loss is {got}, `main + 0.1 * aux` is {want}: that is "
                               "`main + aux`, the auxiliary term lost its factor 0.1", **values)
                else:
                    detail = _("your loss is {got}, `main + 0.1 * aux` is {want}", **values)
                return values_equal(got, want, 1e-5), detail

            def head_grad(_loss, head=head, ref_head=ref_head):
                got = [tf.grad_values(p) for p in head.parameters()]
                return all(_close(g, r) for g, r in zip(got, ref_head, strict=True)), \
                    _("the output layer's weight gradient has norm {norm}, torch's reference "
                      "{reference}", norm=_norm(got[0]), reference=_norm(ref_head[0]))

            def mid_grad(_loss, mid=mid, ref_mid=ref_mid, main_mid=main_mid):
                got = [tf.grad_values(p) for p in mid.parameters()]
                if all(_close(g, r) for g, r in zip(got, ref_mid, strict=True)):
                    return True, ""
                if all(_close(g, m) for g, m in zip(got, main_mid, strict=True)):
                    return (False, _("`mid_layer` receives exactly what the main loss alone "
                                     "gives it: the auxiliary term sends it nothing"),
                            "detach_no_grad_confused" if _uses(fn, *NO_GRAD)
                            else "detach_in_loss_harmless")
                return False, _("its first weight gradient has norm {norm}, the intended "
                                "loss's {reference}", norm=_norm(got[0]),
                                reference=_norm(ref_mid[0]))

            verdicts.append(score(self.qid, [
                Requirement(_("{case}: the loss value is `main + 0.1 * aux`", case=name),
                            value),
                _backward_runs(fn, name),
                Requirement(_("{case}: the output layer gets the right gradient", case=name),
                            _after_backward(head_grad)),
                Requirement(_("{case}: `mid_layer` gets the gradient of both terms",
                              case=name), _after_backward(mid_grad)),
            ], run, part))
        return Verdict.merge(self.qid, verdicts)


# --------------------------------------------------------------------------- Q10 residual


def _stack(width: int, depth: int, seed: int):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return [(nn.Linear(width, width), nn.Linear(width, width)) for _unused in range(depth)]


def _kept_block(x, conv1, conv2, training=True):
    return conv2(conv1(x).relu()) + x


def _plain_block(x, conv1, conv2, training=True):
    return conv2(conv1(x).relu())


def _cut_block(x, conv1, conv2, training=True):
    return conv2(conv1(x).relu()) + x.detach()


@lesson.register
class Q10ResidualBug(WriteCode):
    qid = "q10"
    title = N_("Find the bug: the kitchen article's residual block")
    function_name = "resnet_block"
    starter = '''\
def resnet_block(x, conv1, conv2, training=True):
    identity = x
    x = conv1(x).relu()
    x = conv2(x)
    x = x + (identity.detach() if training else identity)
    return x
'''

    def grade_code(self, fn, part, variant):
        import torch

        width, depth, seed = (12, 24, 8) if variant == "hidden" else (16, 20, 7)
        layers = _stack(width, depth, seed)
        torch.manual_seed(seed + 100)
        x0 = torch.randn(4, width)

        def run_stack(block, training):
            x = x0.clone().requires_grad_(True)
            h = x
            for conv1, conv2 in layers:
                h = block(h, conv1, conv2, training)
            h.sum().backward()
            for conv1, conv2 in layers:  # the layers are shared: keep their grads clean
                for p in (*conv1.parameters(), *conv2.parameters()):
                    p.grad = None
            return tf._tolist(h), tf.grad_values(x)

        ref_out, ref_grad = run_stack(_kept_block, True)
        # (the same gradient as a block without skip path: the belief is named only when the
        # output is the residual one)
        cut_grad = run_stack(_cut_block, True)[1]
        plain_out = run_stack(_plain_block, True)[0]

        def run():
            block = define_learner(fn)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return {mode: run_stack(block, mode == "training")
                            for mode in ("training", "eval")}
            except Exception as exc:
                raise LearnerCodeError(_("{error} (in a stack of your blocks)",
                                         error=_raised(exc)),
                                       type(exc).__name__) from None

        def forward(mode):
            def test(results):
                out = results[mode][0]
                if _close(out, ref_out):
                    return True, ""
                if mode == "eval" and _close(out, tf._tolist(x0)):
                    return False, _("in eval mode the stack returns its input unchanged: "
                                    "`x + identity if training else identity` reads as "
                                    "`(x + identity) if training else identity`")
                if _close(out, plain_out):
                    return False, _("your block has no skip path: it returns "
                                    "`conv2(relu(conv1(x)))` without `+ x`")
                return False, _("the output differs from that of `conv2(relu(conv1(x))) + x`")
            return test

        def grad_in(mode):
            def test(results):
                g = results[mode][1]
                if _close(g, ref_grad):
                    return True, ""
                detail = _("through {depth} blocks your input gradient has norm {norm}; with the "
                           "skip path kept it is {reference}", depth=depth, norm=_norm(g),
                           reference=_norm(ref_grad))
                cut = _close(g, cut_grad) and _close(results[mode][0], ref_out)
                return False, detail, "residual_detach_harmless" if cut else None
            return test

        return score(self.qid, [
            Requirement("in training mode, the output is that of a residual block",
                        forward("training")),
            Requirement("in eval mode, the output is that of a residual block", forward("eval")),
            Requirement(_("in training mode, the input gradient through {depth} blocks is the "
                          "residual one", depth=depth), grad_in("training")),
            Requirement(_("in eval mode, the input gradient through {depth} blocks is the "
                          "residual one", depth=depth), grad_in("eval")),
        ], run, part)


# --------------------------------------------------------------------------- Q11 discriminator


def _gan_cases(variant: str) -> dict[str, tuple]:
    """name -> (random seed, G, D, noise size, batch)."""
    from torch import nn

    cases = {_("with linear `G` and `D`"): (30, lambda: nn.Linear(2, 3),
                                            lambda: nn.Linear(3, 1), 2, 5)}
    if variant == "hidden":
        cases[_("with two-layer `G` and `D`")] = (
            31, lambda: nn.Sequential(nn.Linear(4, 6), nn.Tanh()),
            lambda: nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 1)), 4, 7)
    return cases


def _bce_grads(D, G, z, real, with_fake: bool, swapped: bool = False):
    import torch
    import torch.nn.functional as F

    real_label, fake_label = (torch.zeros_like, torch.ones_like) if swapped else \
        (torch.ones_like, torch.zeros_like)
    D, G = copy.deepcopy(D), copy.deepcopy(G)
    logits = D(real)
    loss = F.binary_cross_entropy_with_logits(logits, real_label(logits))
    if with_fake:
        fake_logits = D(G(z).detach())
        loss = loss + F.binary_cross_entropy_with_logits(fake_logits, fake_label(fake_logits))
    loss.backward()
    return loss, [tf.grad_values(p) for p in D.parameters()]


@lesson.register
class Q11Discriminator(WriteCode):
    qid = "q11"
    title = N_("The GAN discriminator step")
    function_name = "discriminator_loss"

    def grade_code(self, fn, part, variant):
        import torch

        verdicts = []
        for name, (seed, make_g, make_d, nz, n) in _gan_cases(variant).items():
            torch.manual_seed(seed)
            G, D = make_g(), make_d()
            z = torch.randn(n, nz)
            real = torch.randn(n, next(D.parameters()).shape[1])
            ref_loss, ref_d = _bce_grads(D, G, z, real, True)
            real_only = _bce_grads(D, G, z, real, False)[1]
            swapped = _bce_grads(D, G, z, real, True, swapped=True)[0]

            def run(D=D, G=G, z=z, real=real):
                return _loss_run(fn, D, G, z, real)

            def value(r, ref_loss=ref_loss, swapped=swapped):
                if not tf.is_tensor(r.value):
                    return False, _("your function returned {type}", type=type(r.value).__name__)
                got, want = tf._tolist(r.value), tf._tolist(ref_loss)
                values = {"got": f"{got:.6g}", "want": f"{want:.6g}"}
                if values_equal(got, tf._tolist(swapped), 1e-5):
                    detail = _("your loss is {got}, the discriminator's BCE loss is {want}: your "
                               "targets are swapped (the real batch is labelled 1, the fake 0)",
                               **values)
                else:
                    detail = _("your loss is {got}, the discriminator's BCE loss is {want}",
                               **values)
                return values_equal(got, want, 1e-5), detail

            def d_grads(_loss, D=D, ref_d=ref_d, real_only=real_only):
                got = [tf.grad_values(p) for p in D.parameters()]
                if all(_close(g, r) for g, r in zip(got, ref_d, strict=True)):
                    return True, ""
                if all(_close(g, r) for g, r in zip(got, real_only, strict=True)):
                    return (False, _("`D` learns from the real batch only: the fake term sends "
                                     "`D` no gradient, because the route was cut after `D`, not "
                                     "between `G` and `D`"),
                            "detach_no_grad_confused" if _uses(fn, *NO_GRAD)
                            else "detach_activation_freezes_one")
                return False, _("`D`'s first weight gradient has norm {norm}, the reference "
                                "step's {reference}", norm=_norm(got[0]),
                                reference=_norm(ref_d[0]))

            def g_clean(_loss, G=G):
                got = [(n, tf.grad_values(p)) for n, p in G.named_parameters()]
                hit = [_("`{name}` (norm {norm})", name=n, norm=_norm(g))
                       for n, g in got if g is not None]
                return (not hit, _("backward put a gradient on the generator's {params}",
                                   params=_listing(hit)), "fake_batch_not_detached")

            verdicts.append(score(self.qid, [
                Requirement(_("{case}: the loss value is the discriminator's BCE loss",
                              case=name), value),
                _backward_runs(fn, name),
                Requirement(_("{case}: the discriminator gets its gradients", case=name),
                            _after_backward(d_grads)),
                Requirement(_("{case}: the generator gets no gradient from this step",
                              case=name), _after_backward(g_clean)),
            ], run, part))
        return Verdict.merge(self.qid, verdicts)
