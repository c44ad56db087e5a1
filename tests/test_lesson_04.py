"""Lesson 04 (hooks): typical wrong answers get the misconception they reveal."""

from __future__ import annotations

import ast

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


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if not f["ok"]}


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
def test_right_predictions_score_full(qid):
    assert _predict(qid, RIGHT[qid])["score"] == 1.0


@pytest.mark.parametrize("qid, wrong, myth", [
    ("q1", {"seen": None}, "nonleaf_grad_never_computed"),
    ("q1", {"station.grad": [4.0, 8.0, 12.0]}, "nonleaf_grad_stored"),
    ("q2", {"probe": [[3.0, 3.0], [5.0, 7.0]]}, "leaf_hook_sees_accumulated"),
    ("q2", {"after": [[3.0, 3.0], [2.0, 4.0]]}, "post_hook_sees_pass"),
    ("q2", {"w.grad": [2.0, 4.0]}, "grad_accumulates_not"),
    ("q3", {"x.grad": [5.0, 0.5, -4.0]}, "hook_return_ignored"),
    ("q3", {"station.grad": [5.0, 0.5, -4.0]}, "retain_grad_sees_raw"),
    ("q4", {"hook_on_data": None}, "hook_on_constant"),
    ("q4", {"post_on_station": None}, "post_hook_on_nonleaf"),
    ("q5", {"order": ["first", "last"]}, "backward_hooks_forward_order"),
    ("q5", {"grad_in['last']": [1, 3]}, "grad_input_is_param_grad"),
    ("q5", {"grad_in['first']": [5, 4]}, "constant_gets_grad"),
    ("q6", {"noop": 8192}, "hook_costs_most"),
    ("q6", {"clone": 16384}, "hook_costs_most"),
    ("q6", {"clone": 0}, "hook_is_free_when_storing"),
])
def test_wrong_prediction_names_the_misconception(qid, wrong, myth):
    verdict = _predict(qid, {**RIGHT[qid], **wrong})
    assert _myths(verdict) == {myth}
    assert 0 < verdict["score"] < 1 or len(RIGHT[qid]) == 1
    (bad,) = [f for f in verdict["findings"] if not f["ok"]]
    assert "torch says" in bad["text"] and MISCONCEPTIONS[myth].name in bad["text"]


def test_lesson_04_misconceptions_name_their_lesson():
    mine = [k for k, m in MISCONCEPTIONS.items() if m.lesson == A]
    assert len(mine) >= 10


CLIP = "def attach_clip(t, limit):\n    return t.register_hook(lambda g: g.clamp(-limit, limit))\n"


@pytest.mark.parametrize("variant", ["visible", "hidden"])
def test_clip_probe_solution_passes(variant):
    assert _code("q7", CLIP, variant=variant)["score"] == 1.0


@pytest.mark.parametrize("src, part, myth", [
    (CLIP.replace("return t.register_hook(lambda g: g.clamp(-limit, limit))",
                  "return t.register_hook(lambda g: print(g.clamp(-limit, limit)))"),
     "station", "hook_return_ignored"),
    (CLIP.replace("g.clamp(", "g.clamp_("), "leaf", "hook_inplace_edit"),
])
def test_clip_probe_mistakes(src, part, myth):
    verdict = _code("q7", src, part=part)
    assert verdict["score"] == 0 and _myths(verdict) == {myth}


def test_clip_probe_without_handle_loses_only_the_handle_part():
    src = CLIP.replace("return t.register_hook", "t.register_hook")
    assert _code("q7", src, part="station")["score"] == 1.0
    verdict = _code("q7", src, part="handle")
    assert verdict["score"] == 0 and "handle" in verdict["findings"][0]["text"]


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


def test_layer_norms_solution_passes_hidden_models():
    assert _code("q8", NORMS, variant="hidden")["score"] == 1.0


def test_layer_norms_left_installed_fail_cleanup_only():
    src = NORMS.replace("    for h in handles:\n        h.remove()\n", "")
    assert _code("q8", src, part="norms")["score"] == 1.0
    verdict = _code("q8", src, part="cleanup")
    assert verdict["score"] == 0 and _myths(verdict) == {"hooks_pile_up"}


def test_layer_norms_of_weights_are_not_output_norms():
    src = NORMS.replace("grad_output[0].norm().item()", "0.0")
    src = src.replace("    model(x).sum().backward()\n",
                      "    model(x).sum().backward()\n    for n, m in model.named_modules():\n"
                      "        if isinstance(m, nn.Linear):\n"
                      "            norms[n] = m.weight.grad.norm().item()\n")
    verdict = _code("q8", src, part="norms")
    assert verdict["score"] == 0 and "output" in verdict["findings"][0]["text"]


HISTORY_BUG = '''def grad_history(steps):
    w = torch.tensor([1.0, -1.0], requires_grad=True)
    history = []
    w.register_post_accumulate_grad_hook(lambda p: history.append(p.grad))
    for step in range(steps):
        (w * torch.tensor([float(step + 1), 2.0])).sum().backward()
    return history
'''


def test_aliased_log_is_named_and_the_clone_fixes_it():
    verdict = _code("q9", HISTORY_BUG)
    assert verdict["score"] == 0.5 and _myths(verdict) == {"grad_log_aliases"}
    fixed = HISTORY_BUG.replace("p.grad)", "p.grad.clone())")
    assert _code("q9", fixed, variant="hidden")["score"] == 1.0
    as_lists = HISTORY_BUG.replace("p.grad)", "p.grad.tolist())")
    assert _code("q9", as_lists)["score"] == 1.0


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


def test_piled_probes_are_named_and_removing_the_handle_fixes_them():
    verdict = _code("q10", TRAIN_BUG)
    assert verdict["score"] == 0 and "hooks_pile_up" in _myths(verdict)
    assert "1 + 2 + ... + 3" in verdict["findings"][0]["text"]
    fixed = TRAIN_BUG.replace("        opt.step()\n", "        opt.step()\n        handle.remove()\n")
    assert _code("q10", fixed, variant="hidden")["score"] == 1.0
