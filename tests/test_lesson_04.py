"""Lesson 04 (hooks): typical wrong answers get feedback aimed at the mistake they make.

Each wrong answer below is written as a learner would answer, from the misconceptions and the
exercise texts. ``myth`` is the belief its feedback must name, or ``None`` where no belief has
the answer's signature (then the feedback must say precisely what torch did instead).
"""

from __future__ import annotations

import ast
import re

import pytest
from helpers import isolated_evaluate as evaluate

from autograder.encoding import encode
from autograder.misconceptions import MISCONCEPTIONS

A = "04_hooks"


def _ask(qid, answer, part=None, variant="visible"):
    return evaluate({"lesson": A, "question": qid, "part": part, "variant": variant,
                     "answer": answer})


def _predict(qid, answer, part=None):
    return _ask(qid, encode(answer), part)


def _code(qid, src, part=None, variant="visible"):
    name = ast.parse(src).body[0].name
    return _ask(qid, {"__function__": src, "name": name}, part, variant)


def _wrong(verdict):
    return [f for f in verdict["findings"] if f["status"] == "wrong"]


def _myths(verdict):
    return {f["misconception"] for f in _wrong(verdict)} - {None}


def test_lesson_04_misconceptions_name_their_lesson_and_section():
    mine = [k for k, m in MISCONCEPTIONS.items() if m.lesson == A]
    assert len(mine) >= 12
    assert {"hook_only_on_leaves", "monitor_watches_layer"} <= set(mine)
    assert all(MISCONCEPTIONS[k].section for k in mine)


RIGHT = {
    "q1": {"seen": [[4.0, 8.0, 12.0]], "station.grad": None, "x.grad": [8.0, 16.0, 24.0]},
    "q2": {"probe": [[3.0, 3.0], [2.0, 4.0]], "after": [[3.0, 3.0], [5.0, 7.0]],
           "w.grad": [5.0, 7.0]},
    "q3": {"x.grad": [1.0, 0.5, -1.0], "station.grad": [1.0, 0.5, -1.0]},
    "q4": {"hook_on_data": RuntimeError, "hook_on_station": None,
           "post_on_station": RuntimeError, "post_on_weight": None},
    "q5": {"order": ["last", "first"], "grad_in['last']": [5, 3], "grad_in['first']": None},
    "q6": {"noop": 0, "clone": 8192, "retain": 8192},
}


@pytest.mark.parametrize("qid", sorted(RIGHT))
def test_right_predictions_pass(qid):
    assert _predict(qid, RIGHT[qid])["passed"]


def test_right_predictions_written_differently_pass():
    import torch

    assert _predict("q1", {**RIGHT["q1"], "x.grad": torch.tensor([8, 16, 24])})["passed"]
    assert _predict("q5", {**RIGHT["q5"], "grad_in['last']": torch.Size([5, 3])})["passed"]
    assert _predict("q6", {"noop": 0.0, "clone": 8192.0, "retain": 2 ** 13})["passed"]


PREDICT_WRONG = [  # (qid, changed items, myth per wrong item)
    ("q1", {"seen": None}, {"seen": "nonleaf_grad_never_computed"}),
    ("q1", {"seen": []}, {"seen": "nonleaf_grad_never_computed"}),
    ("q1", {"seen": [[8.0, 16.0, 24.0]]}, {"seen": None}),
    ("q1", {"station.grad": [4.0, 8.0, 12.0]}, {"station.grad": "nonleaf_grad_stored"}),
    ("q1", {"x.grad": [4.0, 8.0, 12.0]}, {"x.grad": None}),
    ("q2", {"probe": [[3.0, 3.0], [5.0, 7.0]]}, {"probe": "leaf_hook_sees_accumulated"}),
    ("q2", {"after": [[3.0, 3.0], [2.0, 4.0]]}, {"after": "post_hook_sees_pass"}),
    ("q2", {"w.grad": [2.0, 4.0]}, {"w.grad": "grad_accumulates_not"}),
    ("q2", {"w.grad": [3.0, 3.0]}, {"w.grad": None}),
    ("q3", {"x.grad": [5.0, 0.5, -4.0]}, {"x.grad": "hook_return_ignored"}),
    ("q3", {"station.grad": [5.0, 0.5, -4.0]}, {"station.grad": "retain_grad_sees_raw"}),
    ("q3", {"x.grad": [1.0, 0.5, 1.0]}, {"x.grad": None}),
    ("q4", {"hook_on_data": None}, {"hook_on_data": "hook_on_constant"}),
    ("q4", {"hook_on_station": RuntimeError}, {"hook_on_station": "hook_only_on_leaves"}),
    ("q4", {"post_on_station": None}, {"post_on_station": "post_hook_on_nonleaf"}),
    ("q4", {"post_on_weight": RuntimeError}, {"post_on_weight": None}),
    ("q4", {"hook_on_data": ValueError}, {"hook_on_data": None}),
    ("q5", {"order": ["first", "last"]}, {"order": "backward_hooks_forward_order"}),
    ("q5", {"order": ["last"]}, {"order": None}),
    ("q5", {"grad_in['last']": [1, 3]}, {"grad_in['last']": "grad_input_is_param_grad"}),
    ("q5", {"grad_in['last']": [5, 1]}, {"grad_in['last']": None}),
    ("q5", {"grad_in['first']": [5, 4]}, {"grad_in['first']": "constant_gets_grad"}),
    ("q5", {"grad_in['first']": [3, 4]}, {"grad_in['first']": "grad_input_is_param_grad"}),
    ("q6", {"noop": 8192}, {"noop": "hook_costs_most"}),
    ("q6", {"clone": 16384}, {"clone": "hook_costs_most"}),
    ("q6", {"clone": 0}, {"clone": "hook_is_free_when_storing"}),
    ("q6", {"clone": 2048, "retain": 2048}, {"clone": None, "retain": None}),
]


@pytest.mark.parametrize("qid, changed, myths", PREDICT_WRONG)
def test_wrong_prediction_is_told_what_torch_did_and_which_belief(qid, changed, myths):
    verdict = _predict(qid, {**RIGHT[qid], **changed})
    assert not verdict["passed"]
    wrong = {f["item"]: f for f in _wrong(verdict)}
    assert set(wrong) == set(myths)
    for item, myth in myths.items():
        assert wrong[item]["misconception"] == myth, item
        assert "torch says" in wrong[item]["text"]


# ---------------------------------------------------------------- write-code questions

CLIP = "def attach_clip(t, limit):\n    return t.register_hook(lambda g: g.clamp(-limit, limit))\n"

NORMS = '''def output_grad_norms(model, x):
    norms, handles = {}, []
    def probe(name):
        def hook(module, grad_input, grad_output):
            norms[name] = grad_output[0].norm().item()
        return hook
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            handles.append(m.register_full_backward_hook(probe(name)))
    model(x).sum().backward()
    for h in handles:
        h.remove()
    return norms
'''

WEIGHT_PROBES = '''def output_grad_norms(model, x):
    norms, handles = {}, []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            handles.append(m.weight.register_hook(
                lambda g, name=name: norms.__setitem__(name, g.norm().item())))
    model(x).sum().backward()
    for h in handles:
        h.remove()
    return norms
'''

EARLIER_PASS = '''def output_grad_norms(model, x):
    norms, outs, handles = {}, {}, []
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            handles.append(m.register_forward_hook(
                lambda mod, i, o, name=name: outs.__setitem__(name, o)))
    model(x)
    for h in handles:
        h.remove()
    for name, o in outs.items():
        o.register_hook(lambda g, name=name: norms.__setitem__(name, g.norm().item()))
    model(x).sum().backward()
    return norms
'''

HISTORY_BUG = '''def grad_history(steps):
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    history = []
    w.register_post_accumulate_grad_hook(lambda p: history.append(p.grad))
    for step in range(steps):
        (w * torch.tensor([float(step + 1), 2.0])).sum().backward()
    return history
'''

TRAIN_BUG = '''def train_with_log(steps):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    log = []
    for step in range(steps):
        handle = model.weight.register_hook(lambda g: log.append(g.norm().item()))
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return log
'''

CODE_WRONG = [  # (qid, source, part, variant, the misconceptions named; set() = none)
    ("q7", CLIP.replace("lambda g: g.clamp(-limit, limit)",
                        "lambda g: print(g.clamp(-limit, limit))"), "station", "visible",
     {"hook_return_ignored"}),
    ("q7", CLIP.replace("g.clamp(", "g.clamp_("), "station", "visible", {"hook_inplace_edit"}),
    ("q7", CLIP.replace("g.clamp(", "g.clamp_("), "leaf", "hidden", {"hook_inplace_edit"}),
    ("q7", CLIP.replace("return t.register_hook", "t.register_hook"), "handle", "visible", set()),
    ("q7", "def attach_clip(t, limit):\n    return t.register_post_accumulate_grad_hook("
           "lambda p: p.grad.clamp_(-limit, limit))\n", "station", "visible",
     {"post_hook_on_nonleaf"}),
    ("q7", "def attach_clip(t, limit):\n    return t.clamp(-limit, limit)\n", "station",
     "visible", set()),
    ("q7", "def attach_clip(t, limit):\n    h = t.register_hook(lambda g: g.clamp(-limit, limit))"
           "\n    t.register_hook(lambda g: g.clamp(-limit, limit))\n    return h\n", "handle",
     "visible", set()),
    ("q8", NORMS.replace("    for h in handles:\n        h.remove()\n", ""), "cleanup", "visible",
     {"hooks_pile_up"}),
    ("q8", WEIGHT_PROBES, "norms", "visible", {"monitor_watches_layer"}),
    ("q8", EARLIER_PASS, "norms", "hidden", {"monitor_watches_layer"}),
    ("q8", NORMS.replace("named_modules", "named_children"), "norms", "hidden", set()),
    ("q8", NORMS.replace("named_modules", "named_children"), "norms", "visible", set()),
    ("q8", NORMS.replace("grad_output[0]", "grad_input[0]"), "norms", "visible", set()),
    ("q9", HISTORY_BUG.replace("p.grad)", "p.grad.data)"), None, "visible", {"grad_log_aliases"}),
    ("q9", HISTORY_BUG.replace("p.grad)", "p.grad.detach())"), None, "visible",
     {"detach_copies"}),
    ("q9", HISTORY_BUG.replace("w.register_post_accumulate_grad_hook(lambda p: "
                               "history.append(p.grad))",
                               "w.register_hook(lambda g: history.append(g))"), None, "visible",
     {"leaf_hook_sees_accumulated"}),
    ("q9", HISTORY_BUG.replace("    return history", "    return history[-1].clone()"), None,
     "visible", set()),
    ("q10", TRAIN_BUG.replace("        opt.zero_grad()\n",
                              "        handle.remove()\n        opt.zero_grad()\n"), None,
     "visible", set()),
    ("q10", TRAIN_BUG.replace("g.norm().item()", "g.norm()"), None, "hidden", {"hooks_pile_up"}),
    # the probes still pile up; only the repeated numbers are dropped from the log
    ("q10", TRAIN_BUG.replace("    return log", "    return list(dict.fromkeys(log))"), None,
     "visible", {"hooks_pile_up"}),
    ("q10", TRAIN_BUG.replace("    return log", "    return list(dict.fromkeys(log))"), None,
     "hidden", {"hooks_pile_up"}),
    ("q10", TRAIN_BUG.replace("        opt.zero_grad()\n", "").replace(
        "        opt.step()\n", "        opt.step()\n        handle.remove()\n"), None, "visible",
     set()),
]


@pytest.mark.parametrize("qid, src, part, variant, myths", CODE_WRONG)
def test_wrong_code_is_told_what_torch_found(qid, src, part, variant, myths):
    whole = _code(qid, src, variant=variant)
    from autograder.verdict import Verdict

    verdict = Verdict.from_json(whole).for_part(part)
    assert not verdict.passed and verdict.answered
    assert set(verdict.misconceptions) == myths
    for f in verdict.findings:
        assert "[Misconception" not in f.text and " -- " not in f.text
        assert not re.search(r"\bseed\b", f.text, re.I)


def test_clip_probe_without_handle_loses_only_the_handle_part():
    src = CLIP.replace("return t.register_hook", "t.register_hook")
    verdict = _code("q7", src)
    parts = {f["part"]: f for f in verdict["findings"]}
    assert parts["station"]["status"] == parts["leaf"]["status"] == "right"
    assert parts["handle"]["status"] == "wrong" and "`None`" in parts["handle"]["text"]


def test_piled_probes_are_counted():
    (count, *_) = _wrong(_code("q10", TRAIN_BUG))
    assert "1 + 2 + ... + 3" in count["text"] and count["misconception"] == "hooks_pile_up"


def test_a_log_cleaned_of_its_repeats_is_told_the_probes_still_pile_up():
    src = TRAIN_BUG.replace("    return log", "    return list(dict.fromkeys(log))")
    (piled,) = _wrong(_code("q10", src))
    assert "3 probes are still installed" in piled["text"], piled["text"]


def test_the_probe_list_is_right_as_the_code_leaves_it_and_as_its_one_entry():
    assert _predict("q1", RIGHT["q1"])["passed"]
    assert _predict("q1", {**RIGHT["q1"], "seen": [4.0, 8.0, 12.0]})["passed"]
    assert not _predict("q1", {**RIGHT["q1"], "seen": [[4.0, 8.0, 12.0]] * 2})["passed"]


def test_grad_input_crash_says_which_layer_has_none():
    verdict = _code("q8", NORMS.replace("grad_output[0]", "grad_input[0]"))
    assert all("`grad_output[0]`" in f["text"] for f in _wrong(verdict))


CORRECT = [
    ("q7", CLIP),
    ("q7", "def attach_clip(t, limit):\n    def clip(g):\n        return torch.clamp(g, -limit, "
           "limit)\n    handle = t.register_hook(clip)\n    return handle\n"),
    ("q8", NORMS),
    ("q8", NORMS.replace("grad_output[0].norm().item()", "torch.linalg.vector_norm("
                         "grad_output[0])")),
    ("q8", '''def output_grad_norms(model, x):
    norms, handles = {}, []
    def keep(name):
        def hook(module, inputs, output):
            output.register_hook(lambda g: norms.__setitem__(name, g.norm().item()))
        return hook
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            handles.append(m.register_forward_hook(keep(name)))
    model(x).sum().backward()
    for h in handles:
        h.remove()
    return norms
'''),
    ("q9", HISTORY_BUG.replace("p.grad)", "p.grad.clone())")),
    ("q9", HISTORY_BUG.replace("p.grad)", "p.grad.tolist())")),
    ("q9", HISTORY_BUG.replace("p.grad)", "p.grad.detach().clone())")),
    ("q10", TRAIN_BUG.replace("        opt.step()\n", "        opt.step()\n        handle.remove()\n")),
    ("q10", TRAIN_BUG.replace("    for step in range(steps):\n        handle = ",
                              "    handle = ").replace(
        "        opt.zero_grad()\n", "    for step in range(steps):\n        opt.zero_grad()\n")),
    ("q10", TRAIN_BUG.replace("    for step in range(steps):\n        handle = ",
                              "    handle = ").replace(
        "        opt.zero_grad()\n", "    for step in range(steps):\n        opt.zero_grad()\n")
     .replace("    return log", "    handle.remove()\n    return log")),
]


@pytest.mark.parametrize("qid, src", CORRECT)
def test_correct_code_written_differently_passes_hidden_tests(qid, src):
    assert _code(qid, src, variant="hidden")["passed"]


@pytest.mark.parametrize("qid, src", [
    ("q7", "def attach_clip(t, limit):\n    raise NotImplementedError()\n"),
    ("q8", "def output_grad_norms(model, x):\n    raise NotImplementedError()\n"),
    ("q9", "def grad_history(steps):\n    raise NotImplementedError()\n"),
])
def test_untouched_stub_is_not_answered(qid, src):
    verdict = _code(qid, src)
    assert {f["status"] for f in verdict["findings"]} == {"todo"}
    assert not _myths(verdict)
