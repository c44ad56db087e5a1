"""Lesson 08 (capstone): each bug earns its own points, typical wrong answers get a hint aimed at
their actual mistake (a misconception only where the answer carries its signature), and correct
answers written differently pass."""

from __future__ import annotations

import ast
import math

import pytest
from helpers import isolated_evaluate as evaluate

from autograder import client
from autograder.encoding import encode
from autograder.lessons import l08_capstone as L

A = "08_capstone"


@pytest.fixture(scope="module", autouse=True)
def _oracle_with_the_lesson_loaded():
    """Checks fork from an oracle that has loaded this lesson, as a notebook's setup cell
    makes it: none of them pays the first optimizer's import of torch._dynamo again."""
    oracle = client.oracle()
    oracle.stop()
    oracle.start(preload=[A])


def _ask(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": encode(answer)})


def _code(qid, source, part=None, variant="visible"):
    name = ast.parse(source).body[0].name
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": {"__function__": source, "name": name}})


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if f["status"] == "wrong"} - {None}


def _wrong_texts(verdict):
    return " ".join(f["text"] for f in verdict["findings"] if f["status"] == "wrong")


def _sigmoid(v):
    return 1 / (1 + math.exp(-v))


def _edit(source, old, new):
    assert old in source, old
    return source.replace(old, new)


RIGHT = {
    "q1": {"a.is_leaf": False, "b.is_leaf": True, "c.is_leaf": True, "registered": ["c"]},
    "q2": {"grad_after_two": [6.0, 1.0], "w_after_two": [0.1, -2.15], "grad_after_zero": None},
    "q3": {"grad_after_add": [2.0, 3.0], "inplace_error": RuntimeError,
           "grad_after_data": [2 * _sigmoid(v) * (1 - 2 * _sigmoid(v)) for v in (0.5, -1.0)]},
    "q4": {"chop.weight": "ok", "garnish.weight": "detached", "dip.weight": "no_grad",
           "oven.weight": "unused", "spice": "zero", "sauce.weight": "frozen"},
}
TRUE_SLOPE = [_sigmoid(v) * (1 - _sigmoid(v)) for v in (0.5, -1.0)]

# (question, wrong items, the misconception it must name or None, a phrase the hint must say)
PREDICT_WRONG = [
    ("q1", {"a.is_leaf": True}, "output_can_be_leaf", "MulBackward0"),
    ("q1", {"b.is_leaf": False}, "no_grad_inputs_make_nonleaf", "recorded no history"),
    ("q1", {"c.is_leaf": False}, "no_grad_inputs_make_nonleaf", "new leaf"),
    ("q1", {"registered": ["a", "b", "c"]}, "tensor_attribute_is_parameter", "registers only"),
    ("q1", {"registered": ["b", "c"]}, "tensor_attribute_is_parameter", "registers only"),
    ("q1", {"registered": []}, None, "registers only"),
    ("q2", {"grad_after_two": [3.0, 0.5]}, "grad_accumulates_not", "adds into"),
    ("q2", {"w_after_two": [0.4, -2.1]}, "grad_accumulates_not", "still held"),
    ("q2", {"w_after_two": [0.7, -2.05]}, None, "w - 3 * lr * x"),
    ("q2", {"grad_after_zero": [0.0, 0.0]}, "zero_grad_fills_zeros", "sets `.grad` to `None`"),
    ("q2", {"grad_after_zero": 0.0}, "zero_grad_fills_zeros", "sets `.grad` to `None`"),
    ("q2", {"grad_after_zero": [6.0, 1.0]}, None, "sets `.grad` to `None`"),
    ("q3", {"grad_after_add": RuntimeError}, "inplace_always_fatal", "overwrites nothing"),
    ("q3", {"grad_after_add": None}, "inplace_grad_none", "overwrites nothing"),
    ("q3", {"inplace_error": None}, "inplace_never_checked", "bumped its version"),
    ("q3", {"grad_after_data": TRUE_SLOPE}, "data_is_safe", "silently wrong"),
    ("q3", {"grad_after_data": None}, "inplace_grad_none", "no error"),
    ("q3", {"grad_after_data": RuntimeError}, None, "without bumping the version"),
    ("q4", {"spice": "ok"}, "grad_none_check_enough", "exactly 0"),
    ("q4", {"spice": "none"}, "zero_gradient_is_none", "exactly 0"),
    ("q4", {"garnish.weight": "ok"}, "detach_in_loss_harmless", "`detach()`"),
    ("q4", {"dip.weight": "detached"}, "detach_no_grad_confused", "`no_grad()`"),
    ("q4", {"dip.weight": "frozen"}, "no_grad_flips_flag", "`no_grad()`"),
    ("q4", {"sauce.weight": "ok"}, "constant_gets_grad", "does not require grad"),
    ("q4", {"oven.weight": "none"}, None, "never used"),
]


@pytest.mark.parametrize("qid, wrong, myth, phrase", PREDICT_WRONG)
def test_a_wrong_prediction_gets_an_aimed_hint(qid, wrong, myth, phrase):
    verdict = _ask(qid, {**RIGHT[qid], **wrong})
    assert not verdict["passed"]
    (finding,) = [f for f in verdict["findings"] if f["status"] == "wrong"]
    assert finding["misconception"] == myth, finding
    assert phrase in finding["text"], finding["text"]


@pytest.mark.parametrize("qid", sorted(RIGHT))
def test_right_predictions_pass_also_written_differently(qid):
    assert _ask(qid, RIGHT[qid])["passed"]
    variants = {"q1": {"registered": ("c",)}, "q2": {"grad_after_two": [6, 1]},
                "q3": {"grad_after_add": [2, 3], "inplace_error": "RuntimeError"}, "q4": {}}
    assert _ask(qid, {**RIGHT[qid], **variants[qid]})["passed"]


def test_an_untouched_prediction_is_not_answered():
    verdict = _ask("q2", {k: ... for k in RIGHT["q2"]})
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not _myths(verdict)


# ---------------------------------------------------------------- the script's pieces

PIECES = {
    "q5": (L.BUGGY_MAKE_MODEL, L.FIXED_MAKE_MODEL),
    "q6": (L.BUGGY_FORWARD, L.FIXED_FORWARD),
    "q7": (L.BUGGY_LOSS, L.FIXED_LOSS),
    "q8": (L.BUGGY_TRAIN, L.FIXED_TRAIN),
    "q9": (L.BUGGY_ALARM, L.FIXED_ALARM),
}
TOUCHED = "\n_touched = True  # graded: no longer the program as the notebook gives it\n"


@pytest.mark.parametrize("qid", sorted(PIECES))
def test_the_given_program_is_not_answered_yet_and_blames_nothing(qid):
    verdict = _code(qid, PIECES[qid][0])
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not _myths(verdict)
    assert "find the bug" in verdict["findings"][0]["text"]


@pytest.mark.parametrize("qid", sorted(PIECES))
@pytest.mark.parametrize("variant", ["visible", "hidden"])
def test_the_colleagues_code_fails_every_part_and_the_fix_passes(qid, variant):
    buggy, fixed = PIECES[qid]
    assert _code(qid, fixed, None, variant)["passed"]
    verdict = _code(qid, buggy + TOUCHED, None, variant)
    for part in L.lesson[qid].parts():
        mine = [f for f in verdict["findings"] if f["part"] in (part, None)]
        assert any(f["status"] == "wrong" and f["misconception"] for f in mine), (part, mine)


def test_hidden_checks_run_on_other_data():
    for qid, (_buggy, fixed) in PIECES.items():
        seen, secret = _code(qid, fixed), _code(qid, fixed, variant="hidden")
        assert secret["passed"]
        assert [f["text"] for f in seen["findings"]] != [f["text"] for f in secret["findings"]]


M, F, LO, T, D = (L.FIXED_MAKE_MODEL, L.FIXED_FORWARD, L.FIXED_LOSS, L.FIXED_TRAIN,
                  L.FIXED_ALARM)
GAIN = "nn.Parameter(torch.randn(16) * 0.5)"
BIAS_BASE = "    base = model.shortcut(x)                   # recorded: the direct route trains"
H_LINE = "    h = torch.tanh(model.hidden(x)) * model.gain   # out of place: tanh's output stays intact"
CLAMP = "    pred = (model.out(h) + base).clamp(min=0)  # a recorded clamp: its gradient is right"
CALM = "    calm = (features ** 2).mean()              # the penalty must reach the hidden layer"
ZERO = "        opt.zero_grad()                        # clear last step's reports first\n"
STEP = "        opt.step()\n"
BACKWARD = "        loss.backward()\n"

# (question, the learner's program, {part: misconception or None}, a phrase the hint must say)
CODE_WRONG = [
    ("q5", _edit(M, GAIN, "(torch.randn(16) * 0.5).requires_grad_()"),
     {"gain": "tensor_attribute_is_parameter"}, "plain tensor stored on the module"),
    ("q5", _edit(M, GAIN, "nn.Parameter(torch.randn(16)) * 0.5"),
     {"gain": {"output_can_be_leaf", "tensor_attribute_is_parameter"}}, "grad_fn `MulBackward0`"),
    ("q5", _edit(M, GAIN, "nn.Parameter(torch.randn(16))"), {"gain": None}, "keep `torch.randn"),
    ("q5", _edit(L.BUGGY_MAKE_MODEL, "    return model",
                 "    model.hidden.requires_grad = True\n    model.gain = "
                 "nn.Parameter(model.gain.detach())\n    return model"),
     {"frozen": "module_requires_grad_attr"}, "plain Python attribute"),
    ("q5", _edit(M, "    return model",
                 "    model.hidden.bias.requires_grad_(False)\n    return model"),
     {"frozen": "warmup_freeze_forgotten"}, "`hidden.bias`"),
    ("q5", _edit(M, "torch.randn(16)", "torch.randn(16, require_grad=True)"),
     {"gain": "require_grad_typo", "frozen": "require_grad_typo"}, "require_grad"),
    ("q5", _edit(M, f"model.gain = {GAIN}",
                 "model.register_parameter('gain', torch.randn(16) * 0.5)"),
     {"gain": "tensor_attribute_is_parameter", "frozen": "tensor_attribute_is_parameter"},
     "TypeError"),
    ("q6", _edit(L.BUGGY_FORWARD, "    with torch.no_grad():                      # the direct "
                 "route is a fixed baseline: save memory\n        base", "    base"),
     {"inplace": "saved_values_confused", "data": "data_is_safe"}, "modified by an inplace"),
    ("q6", _edit(F, BIAS_BASE, "    base = model.shortcut(x).detach()"),
     {"no_grad": "detach_keeps_grad"}, "`detach()` cut `base`"),
    ("q6", _edit(F, H_LINE, "    h = torch.tanh(model.hidden(x))\n    h.data *= model.gain"),
     {"inplace": "data_is_safe"}, "`.data`"),
    ("q6", _edit(F, CLAMP, "    pred = model.out(h) + base"), {"data": None}, "below 0"),
    ("q6", _edit(F, CLAMP, "    pred = model.out(h) + base\n    with torch.no_grad():\n"
                 "        pred.clamp_(min=0)"), {"data": None}, "monitoring switched off"),
    ("q6", _edit(F, "return pred, h", "return pred, h.detach()"),
     {"inplace": "detach_in_loss_harmless"}, "does not require grad"),
    ("q7", _edit(LO, CALM, "    calm = (features ** 2).detach().mean()"),
     {"main": "detach_in_loss_harmless"}, "no report reaches `features`"),
    ("q7", _edit(LO, CALM, "    calm = (features.data ** 2).mean()"),
     {"main": "detach_in_loss_harmless"}, "no report reaches `features`"),
    ("q7", _edit(LO, CALM, "    with torch.no_grad():\n        calm = (features ** 2).mean()"),
     {"main": "no_grad_branch_counts"}, "no report reaches `features`"),
    ("q7", _edit(LO, "fit + 0.01 * calm", "fit + calm"), {"main": None}, "`fit + 0.01 * calm` is"),
    ("q7", _edit(LO, "fit + 0.01 * calm", "fit + 0.01 * calm.item()"),
     {"main": "detach_in_loss_harmless"}, "no report reaches `features`"),
    ("q8", _edit(L.BUGGY_TRAIN, BACKWARD, BACKWARD + ZERO),
     {"zero_grad": "zero_grad_misplaced", "converges": "zero_grad_misplaced"},
     "between `backward()` and `step()`"),
    ("q8", _edit(L.BUGGY_TRAIN, "    losses = []\n", "    losses = []\n    opt.zero_grad()\n"),
     {"zero_grad": "zero_grad_misplaced", "converges": "zero_grad_misplaced"}, "pile"),
    ("q8", _edit(L.BUGGY_TRAIN, "loss.backward()", "loss.backward(retain_graph=True)"),
     {"zero_grad": "grad_accumulates_not", "converges": "grad_accumulates_not"}, "colleague's"),
    ("q8", _edit(T, "losses.append(loss.item())", "losses.append(loss)"), {"converges": None},
     "`loss.item()`"),
    ("q8", _edit(T, ZERO, "        for p in model.parameters():\n            p.grad.zero_()\n"),
     {"zero_grad": "zero_grad_fills_zeros", "converges": "zero_grad_fills_zeros"}, "zero_"),
    ("q9", _edit(L.BUGGY_ALARM, "if p.grad is None]",
                 "if p.requires_grad and (p.grad is None or not p.grad.any())]"),
     {"false_alarm": "grad_none_check_enough"}, "every parameter"),
    ("q9", '''\
def dead_centres(model, loss):
    loss.backward()
    return [n for n, p in model.named_parameters()
            if p.requires_grad and (p.grad is None or not p.grad.any())]
''', {"false_alarm": {"grad_accumulates_not", "graph_survives_backward"}}, "wrote `.grad`"),
    ("q9", _edit(D, "allow_unused=True,\n                                retain_graph=True)",
                 "allow_unused=True)"), {"false_alarm": "graph_survives_backward"},
     "freed the graph"),
    ("q9", _edit(D, "if g is None or not g.any()", "if g is None"),
     {"zeros": "zero_gradient_is_none"}, "all zeros"),
    ("q9", _edit(D, " if p.requires_grad]", "]"), {"zeros": None}, "does not require grad"),
]


@pytest.mark.parametrize("qid, source, expected, phrase", CODE_WRONG,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CODE_WRONG)])
def test_a_wrong_repair_gets_an_aimed_hint(qid, source, expected, phrase):
    verdict = _code(qid, source)
    assert not verdict["passed"]
    for part in L.lesson[qid].parts():
        mine = [f for f in verdict["findings"]
                if f["part"] in (part, None) and f["status"] == "wrong"]
        if part not in expected:
            assert not mine, (part, mine)  # the parts are graded independently
            continue
        want = expected[part]
        want = set(want) if isinstance(want, set) else {want} - {None}
        assert mine and {f["misconception"] for f in mine} - {None} == want, (part, mine)
    assert phrase in _wrong_texts(verdict), _wrong_texts(verdict)


CODE_RIGHT = [
    ("q5", _edit(M, GAIN, "nn.Parameter(torch.randn(16, requires_grad=True) * 0.5)")),
    ("q5", _edit(M, f"model.gain = {GAIN}",
                 "model.register_parameter('gain', nn.Parameter(torch.randn(16) * 0.5))")),
    ("q5", _edit(L.BUGGY_MAKE_MODEL, "    model.hidden.requires_grad_(False)                 "
                 "      # warm-up: unfreeze it later\n",
                 "    for p in model.parameters():\n        p.requires_grad_(True)\n")
     .replace("torch.randn(16, requires_grad=True) * 0.5", "nn.Parameter(torch.randn(16) * 0.5)")),
    ("q5", _edit(M, f"    model.gain = {GAIN}",
                 "    with torch.no_grad():\n        model.gain = nn.Parameter(torch.randn(16) * 0.5)")),
    ("q6", _edit(F, CLAMP, "    pred = F.relu(model.out(h) + base)")),
    ("q6", _edit(F, CLAMP, "    pred = model.out(h) + base\n    pred.clamp_(min=0)")),
    ("q6", _edit(F, CLAMP, "    pred = model.out(h) + base\n"
                 "    pred = torch.where(pred > 0, pred, torch.zeros_like(pred))")),
    ("q6", _edit(F, H_LINE, "    h = torch.tanh(model.hidden(x)).clone()\n    h *= model.gain")),
    ("q7", _edit(LO, CALM, "    calm = features.pow(2).mean()")),
    ("q7", _edit(LO, CALM, "    calm = F.mse_loss(features, torch.zeros_like(features))")),
    ("q8", _edit(T, ZERO, "").replace(STEP, STEP + ZERO)),
    ("q8", _edit(T, ZERO, "        model.zero_grad()\n")),
    ("q8", _edit(T, ZERO, "        for p in model.parameters():\n            p.grad = None\n")),
    ("q8", _edit(T, ZERO, "        opt.zero_grad(set_to_none=False)\n")),
    ("q9", _edit(D, "if g is None or not g.any()", "if g is None or g.abs().sum() == 0")),
    ("q9", '''\
def dead_centres(model, loss):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True,
                                retain_graph=True, materialize_grads=True)
    return [n for (n, _), g in zip(named, grads) if g.norm() == 0]
'''),
]


@pytest.mark.parametrize("qid, source", CODE_RIGHT,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CODE_RIGHT)])
def test_a_correct_repair_written_differently_passes(qid, source):
    verdict = _code(qid, source)
    assert verdict["passed"], [f["text"] for f in verdict["findings"] if f["status"] != "right"]


def test_make_model_parts_are_independent():
    only_gain = _edit(L.BUGGY_MAKE_MODEL, "torch.randn(16, requires_grad=True) * 0.5", GAIN)
    verdict = _code("q5", only_gain)
    assert all(f["status"] == ("right" if f["part"] == "gain" else "wrong")
               for f in verdict["findings"])


@pytest.mark.parametrize("fixed_part, old, new", [
    ("no_grad", "    with torch.no_grad():                      # the direct route is a fixed "
     "baseline: save memory\n        base", "    base"),
    ("inplace", "h *= model.gain", "h = h * model.gain"),
    ("data", "    pred.data.clamp_(min=0)", "    pred = pred.clamp(min=0)"),
])
def test_forward_parts_are_independent(fixed_part, old, new):
    verdict = _code("q6", _edit(L.BUGGY_FORWARD, old, new))
    for part in L.lesson["q6"].parts():
        mine = [f["status"] for f in verdict["findings"] if f["part"] == part]
        assert (set(mine) == {"right"}) == (part == fixed_part), (part, mine)


def test_a_train_that_crashes_reports_the_error_in_every_part():
    source = _edit(T, "loss.backward()", "loss.backward(); raise ValueError('oops')")
    verdict = _code("q8", source)
    assert [f["part"] for f in verdict["findings"]] == ["zero_grad", "converges"]
    assert all("ValueError" in f["text"] and f["status"] == "wrong" for f in verdict["findings"])
    assert not _myths(verdict)


def test_the_loss_threshold_comes_from_the_reference_run():
    run = L.reference_run("visible")
    losses = run["losses"]
    assert L.loss_threshold(losses) == pytest.approx(losses[-1] + 0.1 * (losses[0] - losses[-1]))
    assert losses[-1] < losses[0]


def test_no_title_or_hint_calls_an_article_seed():
    for q in L.lesson.questions.values():
        assert "seed" not in q.title.lower()
        for item in getattr(q, "items", []):
            assert "seed" not in item.why.lower()
