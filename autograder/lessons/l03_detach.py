"""Lesson 03, detach(): the questions of ``source/03_detach/03_detach.ipynb``.

Every expected answer is read off live torch when the question is checked: a
predict question runs the very code the notebook shows (``code``) and reads the
facts with :mod:`autograder.torchfacts`; a code question runs the learner's
function in the oracle and compares what it does with a reference computation
run by torch at the same moment (never with typed-in numbers).
"""

from __future__ import annotations

import copy
import warnings
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
    myth_text,
    run_learner,
    score_requirements,
    values_equal,
    warns,
)

lesson = Lesson("03_detach", "detach() and its cousins")


def _error(ns: dict, name: str = "error"):
    err = ns.get(name)
    return None if err is None else ExceptionName(type(err).__name__)


# --------------------------------------------------------------------------- predict

RELABEL = """\
meat = nn.Linear(2, 2).weight     # market ingredient (a layer's parameter)
stew = meat.tanh()                # semi-finished dish
packed = stew.detach()            # vacuum-packed stew
"""


@lesson.register
class Q1Relabelled(Predict):
    qid = "q1"
    title = "What detach() returns"
    code = RELABEL
    items = [
        Item("packed.is_leaf", "detach() returns a tensor with no recorded history: a leaf.",
             "detach_keeps_grad"),
        Item("packed.requires_grad", "the package carries no recipe to trace back: detach() "
             "returns a tensor with requires_grad=False, even when the original requires grad.",
             "detach_keeps_grad"),
        Item("packed.grad_fn is None", "no recipe step is attached to the package: grad_fn is "
             "None.", "detach_keeps_grad"),
        Item("same storage", "same stew, no recipe: packed.data_ptr() == stew.data_ptr(); "
             "detach() copies nothing.", "detach_copies"),
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


def _broth_myth(given: Any, expected: Any) -> str | None:
    # broth[0] still 1.0, or no error: the learner thinks packed was a copy.
    if values_equal(given, 1.0) or given is None:
        return "detach_copies"
    if values_equal(given, 7.0):
        return "clone_shares_storage"
    return None


@lesson.register
class Q2SharedBroth(Predict):
    qid = "q2"
    title = "Writing through the vacuum pack"
    code = BROTH
    items = [
        Item("broth[0]", "packed shares broth's storage, so packed[0] = 5.0 wrote into broth.",
             _broth_myth, part="shared"),
        Item("broth[1]", "remade is a real copy (detach().clone()): writing into it leaves "
             "broth alone.", _broth_myth, part="shared"),
        Item("error", "exp saved its output for backward; the write through packed bumped the "
             "version counter that packed shares with broth, so backward raises RuntimeError "
             "('modified by an inplace operation'). Answer RuntimeError or None.", _broth_myth,
             part="backward"),
    ]

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
    title = "Three ways to copy"
    code = COPIES
    items = [
        Item("copy_a.is_leaf", "clone() is an operation like any other: it records "
             "CloneBackward0, so copy_a is a non-leaf that stays on the recipe.",
             "clone_cuts_history", part="clone"),
        Item("copy_a.requires_grad", "clone() keeps the history: gradients flow back through "
             "copy_a to the original.", "clone_cuts_history", part="clone"),
        Item("copy_b.requires_grad", "detach() cut the history before clone() copied the "
             "data: a fresh leaf without grad.", "detach_keeps_grad", part="fresh"),
        Item("copy_c.requires_grad", "torch.tensor(t) copies the values into a new leaf "
             "without grad (requires_grad defaults to False).", "detach_keeps_grad",
             part="fresh"),
        Item("copy_c warns", "torch.tensor(t) on a tensor emits a UserWarning recommending "
             "t.detach().clone().", "torch_tensor_silent", part="fresh"),
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
    title = "requires_grad_(False) and detach_()"
    code = SWITCHES
    items = [
        Item("error", "requires_grad_ can change the flag of leaves only; on a computed tensor "
             "it raises RuntimeError. Answer RuntimeError or None.", "requires_grad_off_nonleaf"),
        Item("dough.is_leaf", "detach_() cuts dough off its recipe in place: it becomes a leaf.",
             "detach_inplace_harmless"),
        Item("dough.requires_grad", "after detach_() dough no longer requires grad.",
             "detach_inplace_harmless"),
        Item("flour.requires_grad", "nothing touched flour: cutting dough off its recipe does "
             "not change the ingredient it was made from.", None),
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
model[0].weight.detach()               # "freeze" attempt 1 (seed 004)
model[0].bias.requires_grad_(False)    # freeze attempt 2
model[1].weight.detach_()              # seed 001's loop body
loss = model(torch.ones(2, 3)).sum()
loss.backward()
"""


@lesson.register
class Q5Freeze(Predict):
    qid = "q5"
    title = "Which freeze works?"
    code = FREEZE
    items = [
        Item("model[0].weight.grad is None", "p.detach() returns a new tensor that is thrown "
             "away; the parameter itself still requires grad and gets its gradient.",
             "detach_freezes"),
        Item("model[0].bias.grad is None", "requires_grad_(False) freezes the parameter: "
             "backward leaves its .grad at None.", None),
        Item("model[1].weight.grad is None", "on a leaf parameter, detach_() switches "
             "requires_grad off in place: that one is frozen too.", "detach_inplace_harmless"),
        Item("model[1].bias.grad is None", "nobody touched model[1].bias: it trains.", None),
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
    g = w * g + g.detach()        # seed 001's block: identity.detach()
g.backward()
"""


def _residual_myth(given: Any, expected: Any) -> str | None:
    import torch

    kept = float((torch.tensor(1.0) + torch.tensor(0.1)) ** 3)
    if isinstance(given, int | float) and values_equal(given, kept) and not values_equal(
        expected, kept
    ):
        return "residual_detach_harmless"
    return None


@lesson.register
class Q6Residual(Predict):
    qid = "q6"
    title = "The residual block of seed 001, by hand"
    code = RESIDUAL
    items = [
        Item("x.grad", "each block maps h to (w + 1) * h, so dh/dx = (w + 1)**3 = 1.1**3.",
             None),
        Item("x2.grad", "with the skip path detached, only w * g carries gradient: "
             "dg/dx2 = w**3 = 0.1**3. The skip path's 1 is gone from every factor.",
             _residual_myth),
    ]

    def facts(self, ns):
        return {"x.grad": tf.grad_values(ns["x"]), "x2.grad": tf.grad_values(ns["x2"])}


# --------------------------------------------------------------------------- write code


def _cases_snapshot(variant: str) -> dict[str, Any]:
    import torch

    torch.manual_seed(3)
    w = torch.randn(3, requires_grad=True)
    cases = {
        "a semi-finished dish (w * 2).exp()": (w * 2).exp(),
        "a layer's weight": torch.nn.Linear(3, 2).weight,
    }
    if variant == "hidden":
        cases["a view t[1:] of a leaf"] = torch.randn(4, 3, requires_grad=True)[1:]
        cases["bottled sauce (no grad)"] = torch.randn(5)
    return cases


@lesson.register
class Q7Snapshot(WriteCode):
    qid = "q7"
    title = "Re-make the broth from scratch"
    function_name = "snapshot"

    def grade_code(self, fn, part, variant):
        import torch

        findings, right, total = [], 0, 0
        for name, original in _cases_snapshot(variant).items():
            before = tf._tolist(original)
            version = tf.version(original)
            try:
                run = run_learner(fn, original)
            except LearnerCodeError as exc:
                total += 1
                findings.append(Finding(False, f"{name}: your function raised {exc.summary}"))
                continue
            res = run.result

            def values(res=res, before=before):
                return tf.is_tensor(res) and values_equal(tf._tolist(res), before), \
                    "return a tensor with the same values"

            def fresh(res=res):
                return tf.is_tensor(res) and tf.is_leaf(res) and not tf.requires_grad(res), \
                    "the copy must be a leaf that does not require grad (no recipe history)"

            def separate(res=res, original=original, before=before, version=version):
                if not tf.is_tensor(res):
                    return False, "not a tensor"
                with torch.no_grad():
                    res.add_(1.0)  # a write into the copy must not reach the original
                same = values_equal(tf._tolist(original), before) and \
                    tf.version(original) == version
                return same, "writing into your copy changed the original (shared storage)"

            def silent(run=run):
                return not run.warnings, f"your function warned: {run.warnings}"

            for text, test, myth in [
                ("same values", values, None),
                ("a leaf without grad", fresh, "clone_cuts_history"),
                ("its own storage", separate, "detach_copies"),
                ("no warning", silent, "torch_tensor_silent"),
            ]:
                total += 1
                try:
                    ok, detail = test()
                except Exception as exc:
                    ok, detail = False, f"could not be checked ({type(exc).__name__}: {exc})"
                if ok:
                    right += 1
                    findings.append(Finding(True, f"{name}: {text} -- yes."))
                else:
                    msg = f"{name}: {text} -- no: {detail}."
                    if myth:
                        msg += f" [Misconception: {myth_text(myth)}.]"
                    findings.append(Finding(False, msg, misconception=myth))
        return Verdict(self.qid, findings)


def _freeze_model(variant: str):
    import torch
    from torch import nn

    torch.manual_seed(5 if variant == "hidden" else 4)
    if variant == "hidden":  # a layer with sub-layers: freeze all of its parameters
        middle = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))
    else:
        middle = nn.Linear(6, 6)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), middle, nn.Tanh(), nn.Linear(6, 1))


def _train_step(model) -> None:
    """One ordinary training step: an SGD optimizer over *all* parameters, as usual."""
    import torch

    torch.manual_seed(11)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


@lesson.register
class Q8FreezeLayer(WriteCode):
    qid = "q8"
    title = "Freeze the middle layer"
    function_name = "freeze"

    def grade_code(self, fn, part, variant):
        model = _freeze_model(variant)
        reference = copy.deepcopy(model)
        for p in reference[2].parameters():  # the correct freeze, done by the grader
            p.requires_grad_(False)
        try:
            run = run_learner(fn, model[2])
        except LearnerCodeError as exc:
            return Verdict(self.qid, [Finding(False, f"Your function raised {exc.summary}")])
        middle = list(model[2].parameters())
        middle_ids = {id(p) for p in middle}
        before = [tf._tolist(p) for p in middle]
        _train_step(model)
        _train_step(reference)

        def frozen_flags(_run):
            return not any(tf.requires_grad(p) for p in middle), \
                "some parameter of the layer still has requires_grad=True"

        def no_grads(_run):
            return all(tf.grad_values(p) is None for p in middle), \
                "backward still stored a gradient on the layer's parameters"

        def unchanged(_run):
            ok = all(values_equal(tf._tolist(p), b) for p, b in zip(middle, before, strict=True))
            return ok, "the optimizer step changed the layer"

        def others_train(_run):
            pairs = [(p, r) for p, r in zip(model.parameters(), reference.parameters(),
                                            strict=True) if id(p) not in middle_ids]
            ok = all(_close(tf.grad_values(p), tf.grad_values(r)) for p, r in pairs)
            return ok, ("the layers before and after it must still get their gradients: the "
                        "gradient has to flow *through* the frozen layer")

        return score_requirements(self.qid, run, [
            Requirement("every parameter of the layer has requires_grad=False", frozen_flags,
                        "detach_freezes"),
            Requirement("after backward, the layer's .grad is None", no_grads, "detach_freezes"),
            Requirement("an SGD step over model.parameters() leaves the layer unchanged",
                        unchanged, "detach_freezes"),
            Requirement("the other layers still receive the right gradients", others_train,
                        "detach_activation_freezes_one"),
        ])


def _close(a, b) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    return torch.allclose(torch.tensor(a), torch.tensor(b), rtol=1e-4, atol=1e-7)


@lesson.register
class Q9CustomLoss(WriteCode):
    qid = "q9"
    title = "Find the bug: seed 004's custom loss"
    function_name = "custom_loss"

    def grade_code(self, fn, part, variant):
        import torch
        import torch.nn.functional as F
        from torch import nn

        torch.manual_seed(21 if variant == "hidden" else 20)
        mid, head = nn.Linear(4, 3), nn.Linear(3, 1)
        ref_mid, ref_head = copy.deepcopy(mid), copy.deepcopy(head)
        x, target = torch.randn(6, 4), torch.randn(6, 1)

        # The intended loss, run by torch now: main loss + 0.1 * auxiliary loss on the feature.
        ref_feat = ref_mid(x)
        ref_loss = F.mse_loss(ref_head(ref_feat.tanh()), target) + 0.1 * (ref_feat ** 2).mean()
        ref_loss.backward()

        feat = mid(x)
        output = head(feat.tanh())
        try:
            run = run_learner(fn, output, target, feat)
            loss = run.result
            if not tf.is_tensor(loss):
                raise LearnerCodeError(f"it returned {type(loss).__name__}, not a tensor",
                                       "TypeError")
            loss.backward()
        except LearnerCodeError as exc:
            return Verdict(self.qid, [Finding(False, f"Your function failed: {exc.summary}")])
        except RuntimeError as exc:
            return Verdict(self.qid, [Finding(
                False, f"backward() on your loss raised RuntimeError: {str(exc).splitlines()[0]}",
                misconception="detach_in_loss_harmless")])

        def value(_run):
            got, want = tf._tolist(loss), tf._tolist(ref_loss)
            return values_equal(got, want, 1e-5), f"the loss is {got}, expected {want}"

        def head_grad(_run):
            return _close(tf.grad_values(head.weight), tf.grad_values(ref_head.weight)), \
                "the output layer's gradient differs from the intended loss's"

        def mid_grad(_run):
            return _close(tf.grad_values(mid.weight), tf.grad_values(ref_mid.weight)), \
                ("mid_layer's gradient is missing the auxiliary loss's share: the feature was "
                 "cut off its recipe inside the loss")

        return score_requirements(self.qid, run, [
            Requirement("the loss value is main + 0.1 * aux", value),
            Requirement("the output layer gets the right gradient", head_grad),
            Requirement("mid_layer gets the gradient of *both* losses", mid_grad,
                        "detach_in_loss_harmless"),
        ])


def _stack(width: int, depth: int, seed: int):
    import torch
    from torch import nn

    torch.manual_seed(seed)
    return [(nn.Linear(width, width), nn.Linear(width, width)) for _ in range(depth)]


def _through(block, layers, x, training):
    h = x
    for conv1, conv2 in layers:
        h = block(h, conv1, conv2, training)
    return h


def _reference_block(x, conv1, conv2, training=True):
    return conv2(conv1(x).relu()) + x


@lesson.register
class Q10ResidualBug(WriteCode):
    qid = "q10"
    title = "Find the bug: seed 001's residual block"
    function_name = "resnet_block"

    def grade_code(self, fn, part, variant):
        import torch

        width, depth, seed = (12, 24, 8) if variant == "hidden" else (16, 20, 7)
        layers = _stack(width, depth, seed)
        torch.manual_seed(seed + 100)
        x0 = torch.randn(4, width)

        def run_stack(block, training):
            x = x0.clone().requires_grad_(True)
            out = _through(block, layers, x, training)
            out.sum().backward()
            for conv1, conv2 in layers:  # the layers are shared: keep their grads clean
                for p in (*conv1.parameters(), *conv2.parameters()):
                    p.grad = None
            return out, x

        ref_out, ref_x = run_stack(_reference_block, True)
        results = {}
        try:
            block = define_learner(fn)
            for mode, training in (("training", True), ("eval", False)):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    results[mode] = run_stack(block, training)
        except LearnerCodeError as exc:
            return Verdict(self.qid, [Finding(False, f"Your function failed: {exc.summary}")])
        except Exception as exc:
            return Verdict(self.qid, [Finding(
                False, f"Your function raised {type(exc).__name__}: {exc}")])

        ref_norm = float(torch.tensor(tf.grad_values(ref_x)).norm())

        def forward(_run):
            out, _ = results["training"]
            return _close(tf._tolist(out), tf._tolist(ref_out)), \
                "the block's output values differ from conv2(relu(conv1(x))) + x"

        def grad_in(mode):
            def test(_run):
                _, x = results[mode]
                g = tf.grad_values(x)
                got = float(torch.tensor(g).norm()) if g is not None else 0.0
                return _close(g, tf.grad_values(ref_x)), (
                    f"through {depth} blocks the input gradient has norm {got:.3g}; with the "
                    f"skip path kept it is {ref_norm:.3g}")
            return test

        return score_requirements(self.qid, None, [
            Requirement("the output values are those of a residual block", forward),
            Requirement(f"in training mode, the input gradient through {depth} blocks is the "
                        "residual one", grad_in("training"), "residual_detach_harmless"),
            Requirement(f"in eval mode, the input gradient through {depth} blocks is the "
                        "residual one", grad_in("eval"), "residual_detach_harmless"),
        ])


@lesson.register
class Q11Discriminator(WriteCode):
    qid = "q11"
    title = "The GAN discriminator step"
    function_name = "discriminator_loss"

    def grade_code(self, fn, part, variant):
        import torch
        import torch.nn.functional as F
        from torch import nn

        torch.manual_seed(31 if variant == "hidden" else 30)
        G, D = nn.Linear(2, 3), nn.Linear(3, 1)
        refG, refD = copy.deepcopy(G), copy.deepcopy(D)
        z, real = torch.randn(5, 2), torch.randn(5, 3)

        fake = refG(z).detach()
        real_logits, fake_logits = refD(real), refD(fake)
        ref_loss = (F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
                    + F.binary_cross_entropy_with_logits(fake_logits,
                                                         torch.zeros_like(fake_logits)))
        ref_loss.backward()

        try:
            run = run_learner(fn, D, G, z, real)
            loss = run.result
            if not tf.is_tensor(loss):
                raise LearnerCodeError(f"it returned {type(loss).__name__}, not a tensor",
                                       "TypeError")
            loss.backward()
        except LearnerCodeError as exc:
            return Verdict(self.qid, [Finding(False, f"Your function failed: {exc.summary}")])

        def value(_run):
            got, want = tf._tolist(loss), tf._tolist(ref_loss)
            return values_equal(got, want, 1e-5), f"the loss is {got}, expected {want}"

        def d_grads(_run):
            return (_close(tf.grad_values(D.weight), tf.grad_values(refD.weight))
                    and _close(tf.grad_values(D.bias), tf.grad_values(refD.bias))), \
                "the discriminator's gradients differ from the reference step's"

        def g_clean(_run):
            grads = [tf.grad_values(p) for p in G.parameters()]
            return all(g is None for g in grads), \
                "the discriminator's loss put gradients on the generator's parameters"

        return score_requirements(self.qid, run, [
            Requirement("the loss value is the discriminator's BCE loss", value),
            Requirement("the discriminator gets its gradients", d_grads),
            Requirement("the generator gets no gradient from this step", g_clean,
                        "fake_batch_not_detached"),
        ])
