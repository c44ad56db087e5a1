"""Unit tests of the checks: answers from the notebooks, misconceptions, tampering, the oracle."""

from __future__ import annotations

import ast
import importlib
import json
import math
import queue
import re
import threading
import time

import pytest
import torch
from helpers import (
    ROOT,
    assignments,
    is_answer,
    is_graded_test,
    isolated_evaluate,
    meta,
    notebook_path,
    read,
    strip_markers,
)

import autograder
from autograder import client
from autograder.encoding import LearnerFunction, decode, encode
from autograder.misconceptions import MISCONCEPTIONS
from autograder.questions import Item, Predict, values_equal

ASSIGNMENTS = assignments()


def _graded_calls(assignment):
    """(qid, part, variant, answer variable name) of every grade/verify call in graded cells."""
    calls = []
    for cell in read(notebook_path(assignment)).cells:
        if not is_graded_test(cell):
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in {"grade", "verify"}:
                kw = {k.arg: k.value.value for k in node.keywords}
                variant = kw.get("variant", "hidden" if node.func.id == "verify" else "visible")
                calls.append((node.args[1].value, kw.get("part"), variant, node.args[2].id))
    return calls


def _answers(assignment, where):
    """Run the answer cells of the source (solved) or release (blank) notebook here."""
    ns = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math}
    sources = {}
    for cell in read(notebook_path(assignment, ROOT / where)).cells:
        if not is_answer(cell):
            continue
        src = strip_markers(cell.source)
        sources[meta(cell)["grade_id"]] = src
        try:
            exec(compile(src, meta(cell)["grade_id"], "exec"), ns)
        except NotImplementedError:
            pass  # the release stub, after the template was assigned
    defs = {}
    for src in sources.values():  # the last definition of a name wins, as in the kernel
        for node in ast.parse(src).body:
            if isinstance(node, ast.FunctionDef):
                defs[node.name] = ast.get_source_segment(src, node)
    return ns, defs


def _encode(name, ns, defs):
    value = ns.get(name, ...)
    if callable(value) and name in defs:
        return {"__function__": defs[name], "name": name}
    return encode(value)


def _evaluate(assignment, qid, part, variant, answer_json):
    """Check through the kernel-side oracle: learner code runs in its forked children, never
    in this process (some of it patches torch on purpose)."""
    return isolated_evaluate({"lesson": assignment, "question": qid, "part": part,
                              "variant": variant, "answer": answer_json})


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solutions_pass_every_check(assignment):
    ns, defs = _answers(assignment, "source")
    for qid, part, variant, var in _graded_calls(assignment):
        verdict = _evaluate(assignment, qid, part, variant, _encode(var, ns, defs))
        assert verdict["score"] == 1.0 and verdict["answered"], (qid, part, verdict)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_blank_answers_fail_every_check(assignment):
    ns, defs = _answers(assignment, "release")
    for qid, part, variant, var in _graded_calls(assignment):
        verdict = _evaluate(assignment, qid, part, variant, _encode(var, ns, defs))
        assert verdict["score"] < 1.0 or not verdict["answered"], (qid, part, verdict)


def _lesson(assignment):
    return importlib.import_module(f"autograder.lessons.l{assignment}").lesson


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_untouched_answers_are_not_answered_and_name_no_misconception(assignment):
    """The release as a learner opens it: every question says "not answered yet", none blames a
    belief the learner was never asked about (an untouched stub, the given buggy program)."""
    ns, defs = _answers(assignment, "release")
    names = _answer_variables(assignment)
    for qid in _lesson(assignment).questions:
        var = names[qid]
        verdict = _evaluate(assignment, qid, None, "visible", _encode(var, ns, defs))
        assert not verdict["passed"], (qid, verdict)
        statuses = {f["status"] for f in verdict["findings"]}
        assert statuses == {"todo"}, (qid, [f["text"] for f in verdict["findings"]])
        assert not any(f["misconception"] for f in verdict["findings"]), qid


def _literal(value):
    """What a learner types for a value the scenario's own code produced: a tensor as its
    list of values, anything else as it is (None when it is not plain data)."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        items = [_literal(v) for v in value]
        return None if any(i is None and v is not None for i, v in zip(items, value,
                                                                       strict=True)) else items
    return None


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_value_a_predict_questions_own_code_produces_is_always_accepted(assignment):
    """For every blank whose name is an expression of the question's code (``seen``,
    ``x.grad``, ``station.is_leaf``): the value that expression has after the code ran, typed
    as a learner types it, is right, whatever shape the explanation prefers. (Not the blanks
    that ask a yes/no question about a variable, such as "is ``flour`` a leaf?".)"""
    from autograder.questions import learner_namespace

    tried = 0
    for qid, question in _lesson(assignment).questions.items():
        if not isinstance(question, Predict) or type(question).scenario is not Predict.scenario:
            continue  # a scenario of its own: its blanks are not read off ``code``
        torch.manual_seed(0)
        ns = learner_namespace()
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(question.code, qid, "exec"), ns)  # noqa: S102
        facts = question.facts(ns)
        for item in question.items:
            try:
                value = eval(item.key, ns)  # noqa: S307 -- the course's own question code
            except Exception:
                continue  # a blank that names no expression ("error", "order", ...)
            literal = _literal(value)
            if (literal is None and value is not None) or (
                    isinstance(facts[item.key], bool) != isinstance(literal, bool)):
                continue  # not plain data, or the blank asks a yes/no question about it
            finding = question.judge(item, {item.key: literal}, facts[item.key])
            assert finding.status == "right", (qid, item.key, literal, finding.text)
            tried += 1
    assert tried or not any(isinstance(q, Predict) for q in _lesson(assignment).questions.values())


def _answer_variables(assignment):
    """qid -> the name of the variable or function its graded cells pass."""
    return {qid: var for qid, _part, _variant, var in _graded_calls(assignment)}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_find_the_bug_starters_are_the_programs_the_release_gives(assignment):
    _ns, defs = _answers(assignment, "release")
    for qid, question in _lesson(assignment).questions.items():
        starter = getattr(question, "starter", None)
        if starter is None:
            continue
        given = defs.get(question.function_name)
        assert given is not None, f"{qid}: the release defines no {question.function_name}"
        assert ast.dump(ast.parse(starter)) == ast.dump(ast.parse(given)), qid


def _shown(verdict):
    return [(f["status"], f["text"]) for f in verdict["findings"]]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_hidden_tests_check_more_than_the_visible_check(assignment):
    """A hidden block that finds, for the solution's answer, exactly what the visible check
    found tests nothing hidden: it must run other inputs, graphs or items."""
    ns, defs = _answers(assignment, "source")
    calls = _graded_calls(assignment)
    hidden = [(q, p, var) for q, p, variant, var in calls if variant != "visible"]
    for qid, part, var in hidden:
        answer = _encode(var, ns, defs)
        seen = _evaluate(assignment, qid, part, "visible", answer)
        secret = _evaluate(assignment, qid, part, "hidden", answer)
        assert secret["passed"], (qid, part, secret)
        assert _shown(secret) != _shown(seen), f"{assignment} {qid} {part}: hidden = visible"


def _heading(line):
    text = line.lstrip("#").strip()
    text = re.sub(r"^\d+\.\s*", "", text)
    return text.replace("`", "")


def test_every_misconception_names_a_section_of_its_lesson_that_exists():
    headings = {}
    for assignment in ASSIGNMENTS:
        lines = [ln for c in read(notebook_path(assignment)).cells if c.cell_type == "markdown"
                 for ln in c.source.splitlines() if ln.startswith("#")]
        headings[assignment] = {_heading(ln) for ln in lines}
    missing = [k for k, m in MISCONCEPTIONS.items()
               if m.lesson not in headings or _heading(m.section) not in headings[m.lesson]]
    assert not missing, f"misconceptions without an existing section: {missing}"


def test_every_error_signature_names_a_known_misconception():
    from autograder.misconceptions import ERROR_SIGNATURES, diagnose_error

    for kind, text, key in ERROR_SIGNATURES:
        assert key in MISCONCEPTIONS
        assert diagnose_error(kind, f"... {text} ...") == key
    assert diagnose_error("ValueError", "anything") is None


# ---------------------------------------------------------------- lesson 01 feedback

def _l01(qid, answer, part=None, variant="visible"):
    return _evaluate("01_leaves", qid, part, variant, encode(answer))


def _myths(verdict):
    return {f["misconception"] for f in verdict["findings"] if not f["ok"]}


Q1_RIGHT = {"flour": True, "dough": False, "bread": False, "meat": True, "water": True,
            "salt": True}


@pytest.mark.parametrize("wrong, myth", [
    ({"water": False}, "leaf_means_trainable"),
    ({"salt": False}, "no_grad_inputs_make_nonleaf"),
    ({"dough": True}, "output_can_be_leaf"),
    ({"flour": False}, "created_is_not_leaf"),
])
def test_q1_names_the_misconception(wrong, myth):
    verdict = _l01("q1", {**Q1_RIGHT, **wrong})
    assert myth in _myths(verdict)
    assert 0 < verdict["score"] < 1
    (bad,) = [f for f in verdict["findings"] if not f["ok"]]
    assert "torch says" in bad["text"] and bad["misconception"] == myth
    shown = autograder.format_verdict(verdict)  # the learner reads the belief's name
    assert MISCONCEPTIONS[myth].name in shown and "\u2717" in shown


def test_q1_parts_score_separately():
    assert _l01("q1", {**Q1_RIGHT, "water": False, "salt": False}, part="basics")["score"] == 1
    assert _l01("q1", {**Q1_RIGHT, "water": False, "salt": False}, part="tricky")["score"] == 0


def test_unanswered_and_non_bool_answers_get_plain_words():
    verdict = _l01("q1", {**Q1_RIGHT, "salt": ...})
    assert not verdict["passed"] and verdict["answered"]  # answered in part
    (salt,) = [f for f in verdict["findings"] if f["item"] == "salt"]
    assert salt["status"] == "todo" and "not answered yet" in salt["text"]
    assert salt["misconception"] is None
    verdict = _l01("q1", {**Q1_RIGHT, "salt": "yes"})
    assert any("True or False" in f["text"] for f in verdict["findings"])


def test_q3_station_grad_is_not_stored():
    verdict = _l01("q3", {"w.grad": [0.5, -1.0, 2.0], "parcel.grad": None,
                          "station.grad": [0.5, -1.0, 2.0]})
    assert _myths(verdict) == {"nonleaf_grad_stored"}


def test_q4_silent_non_leaf_read_is_a_myth():
    verdict = _l01("q4", {"w.grad": False, "parcel.grad": False, "station.grad": False,
                          "kept.grad": False})
    assert _myths(verdict) == {"nonleaf_grad_silent"}


def test_q5_one_route_only():
    verdict = _l01("q5", {"a.grad": -3.0, "b.grad": -3.75})  # d alone: a*b = -3
    assert _myths(verdict) == {"one_route_only"}


def test_q6_seed_printout_is_a_named_myth():
    assert _myths(_l01("q6", [0.5, 0.5])) == {"mean_grad_halved"}
    assert _l01("q6", torch.tensor([1.0, 1.0]))["score"] == 1.0  # a tensor answer is fine too


def _fn(src):
    name = ast.parse(src).body[0].name
    return {"__function__": src, "name": name}


def test_code_question_reports_the_learners_exception():
    verdict = _evaluate("01_leaves", "q8", None, "visible",
                        _fn("def stock_kitchen():\n    raise NotImplementedError()\n"))
    assert verdict["score"] == 0
    assert "NotImplementedError" in verdict["findings"][0]["text"]


def test_code_question_explains_missing_globals():
    verdict = _evaluate("01_leaves", "q11", None, "visible",
                        _fn("def weigh_parcels():\n    return helper()\n"))
    assert "on its own" in verdict["findings"][0]["text"]


# ---------------------------------------------------------------- live torch, not constants

def test_expected_answers_come_from_running_the_scenario():
    class Flipped(Predict):
        qid = "tmp"
        code = "t = torch.tensor(1.0, requires_grad=True)\nu = t * 2\n"
        items = [Item("u", "")]

        def facts(self, ns):
            return {"u": ns["u"].is_leaf}

    q = Flipped()
    assert q.grade({"u": False}).score == 1.0
    q.code = "t = torch.tensor(1.0)\nu = t * 2\n"  # no grad upstream: u becomes a leaf
    assert q.grade({"u": False}).score == 0.0


# ---------------------------------------------------------------- tampering

def test_tampered_torch_in_the_kernel_does_not_change_expected_answers(monkeypatch):
    monkeypatch.setattr(torch.Tensor, "is_leaf", property(lambda self: True), raising=False)
    assert torch.tensor(1.0, requires_grad=True).mul(2).is_leaf is True  # the tamper works here
    verdict = client.ask("01_leaves", "q1", {k: True for k in Q1_RIGHT})
    assert verdict["score"] < 1.0
    assert client.ask("01_leaves", "q1", Q1_RIGHT)["score"] == 1.0


def test_learner_code_that_patches_torch_cannot_fake_a_leaf_structure():
    src = (
        "def stock_kitchen():\n"
        "    torch.Tensor.is_leaf = property(lambda self: not self.requires_grad or True)\n"
        "    torch.Tensor.requires_grad = property(lambda self: True)\n"
        "    x = torch.tensor(1.0, requires_grad=True) * 2\n"
        "    return {'flour': x, 'sauce': x, 'dough': x, 'glaze': x}\n"
    )
    verdict = _evaluate("01_leaves", "q8", None, "visible", _fn(src))
    assert verdict["score"] < 0.5, verdict


def test_a_tensor_subclass_cannot_lie_about_being_a_leaf():
    src = (
        "def tune_centre():\n"
        "    class Liar(torch.Tensor):\n"
        "        @property\n"
        "        def is_leaf(self):\n"
        "            return True\n"
        "    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)\n"
        "    v = (w * 1.0).as_subclass(Liar)\n"
        "    (v ** 2).sum().backward()\n"
        "    return v\n"
    )
    verdict = _evaluate("01_leaves", "q10", None, "visible", _fn(src))
    assert verdict["score"] < 1.0


def test_the_checks_cannot_be_rebound_from_a_learners_cell():
    """Graded cells run after the learner's code, in the same kernel: the functions they call
    (and what those call) cannot be replaced by assigning to the modules."""
    from autograder import feedback, verdict

    for module, name in [(autograder, "grade"), (autograder, "verify"), (autograder, "check"),
                         (autograder, "_require"), (client, "ask"), (client, "oracle"),
                         (verdict, "Verdict"), (feedback, "headline")]:
        with pytest.raises(AttributeError, match="cannot be"):
            setattr(module, name, lambda *a, **k: None)
        with pytest.raises(AttributeError, match="cannot be"):
            delattr(module, name)
    with pytest.raises(AssertionError, match="Q6"):
        autograder.grade("01_leaves", "q6", [0.5, 0.5])


def test_a_hanging_answer_times_out_and_the_oracle_keeps_working():
    src = "def weigh_parcels():\n    while True:\n        pass\n"
    oracle = client.oracle()
    verdict = oracle.ask({"op": "evaluate", "lesson": "01_leaves", "question": "q11",
                          "answer": _fn(src)}, timeout=2)
    assert verdict["score"] == 0 and "longer than 2 s" in verdict["findings"][0]["text"]
    oracle.forget()
    assert client.ask("01_leaves", "q6", [1.0, 1.0])["score"] == 1.0


def test_an_answer_that_kills_its_process_gets_a_clear_verdict():
    src = "def weigh_parcels():\n    raise SystemExit(3)\n"
    verdict = client.oracle().ask({"op": "evaluate", "lesson": "01_leaves", "question": "q11",
                                   "answer": _fn(src)})
    assert "exited with code 3" in verdict["findings"][0]["text"]
    client.oracle().forget()
    assert client.ask("01_leaves", "q6", [1.0, 1.0])["score"] == 1.0


def test_the_oracle_restarts_after_dying():
    oracle = client.oracle()
    assert client.ask("01_leaves", "q6", [1.0, 1.0])["score"] == 1.0
    oracle._proc.kill()
    oracle._proc.wait()
    oracle.forget()
    assert client.ask("01_leaves", "q6", [1.0, 1.0])["score"] == 1.0
    assert oracle._alive()


class _FakeOracleProcess:
    """A stand-in for the oracle process: answers every request with a fixed verdict.

    ``eof`` holds its end of output back until the test releases it, the way a busy
    machine schedules a dead process's reader thread late.
    """

    def __init__(self, eof: threading.Event | None = None):
        self._lines: queue.Queue = queue.Queue()
        self._eof = eof
        self.dead = False
        self.stdin = self
        self.stdout = self

    def write(self, text: str) -> None:
        request = json.loads(text)
        self._lines.put(json.dumps({"id": request["id"], "settled": True,
                                    "verdict": {"score": 1.0, "op": request["op"]}}))

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.dead = True

    def __iter__(self):
        while not self.dead:
            try:
                yield self._lines.get(timeout=0.05)
            except queue.Empty:
                continue
        if self._eof is not None:
            self._eof.wait(10)

    def poll(self):
        return 0 if self.dead else None

    def wait(self, timeout=None):
        return 0

    def kill(self) -> None:
        self.dead = True


def test_a_dead_oracles_late_end_of_output_is_not_taken_for_the_next_ones(monkeypatch):
    oracle = client.Oracle()
    late = threading.Event()
    first = _FakeOracleProcess(eof=late)
    oracle.start(spawn=lambda *a, **k: first)
    assert oracle.ask({"op": "evaluate", "n": 1})["score"] == 1.0
    first.kill()
    started = []

    def spawn(*args, **kwargs):  # the next process starts; only then the dead one's end
        started.append(_FakeOracleProcess())
        late.set()
        time.sleep(0.2)  # its reader puts the end of output now
        return started[-1]

    monkeypatch.setattr(client.subprocess, "Popen", spawn)
    assert oracle.ask({"op": "evaluate", "n": 2})["score"] == 1.0
    assert len(started) == 1  # answered by the first restart, not by a second one
    assert oracle._alive()
    oracle.stop()


def test_a_repeated_check_is_answered_from_memory_but_a_timeout_is_not():
    oracle = client.oracle()
    oracle.forget()
    first = client.ask("01_leaves", "q6", [1.0, 1.0])
    oracle._proc.kill()
    oracle._proc.wait()
    assert client.ask("01_leaves", "q6", [1.0, 1.0]) == first  # same request: from memory
    assert not oracle._alive()
    assert client.ask("01_leaves", "q6", [0.5, 0.5])["score"] == 0  # a new one: asked
    assert oracle._alive()
    hang = {"op": "evaluate", "lesson": "01_leaves", "question": "q11",
            "answer": _fn("def weigh_parcels():\n    while True:\n        pass\n")}
    t0 = time.monotonic()
    for _ in range(2):
        assert "longer than 1 s" in oracle.ask(hang, timeout=1)["findings"][0]["text"]
    assert time.monotonic() - t0 >= 2  # evaluated twice: a timeout is not remembered


def test_a_visible_check_and_the_graded_cells_of_its_parts_share_one_evaluation():
    """The README's promise: the graded cells after a visible check cost nothing. The check asks
    the whole question; each part's graded cell takes its view from the remembered verdict."""
    oracle = client.oracle()
    oracle.forget()
    answer = {**Q1_RIGHT, "water": False}
    whole = autograder.check("01_leaves", "q1", answer)
    assert len(oracle._settled) == 1
    autograder.grade("01_leaves", "q1", answer, part="basics")  # all right: no error
    with pytest.raises(AssertionError, match="Q1 \\(tricky\\): 1 of 2 right"):
        autograder.grade("01_leaves", "q1", answer, part="tricky")
    assert len(oracle._settled) == 1  # no second evaluation
    assert whole.verdict.for_part("tricky").score == 0.5


def test_feedback_renders_as_text_and_html():
    fb = autograder.check("01_leaves", "q6", [0.5, 0.5])
    assert not fb.passed and "mean" in repr(fb) and "<li" in fb._repr_html_()
    assert autograder.check("01_leaves", "q6", [1.0, 1.0]).passed


def test_a_belief_shown_by_several_wrong_items_is_named_once():
    from autograder import feedback
    from autograder.verdict import Finding, Verdict

    verdict = Verdict("q9", [Finding("wrong", f"`{k}`: no.", item=k,
                                     misconception="nonleaf_grad_stored") for k in "abc"]
                      + [Finding("right", "`d`: right.", item="d")])
    for shown in (feedback.text(verdict), feedback.html(verdict)):
        assert shown.count("common belief") == 1, shown
        first, second = [m.start() for m in re.finditer(": no.", shown)][:2]
        assert first < shown.index("common belief") < second  # under the first wrong item


def test_unknown_question_and_part_are_reported():
    assert "Unknown question" in _l01("q99", 1)["findings"][0]["text"]
    assert "no part" in _l01("q1", Q1_RIGHT, part="nope")["findings"][0]["text"]


# ---------------------------------------------------------------- encoding

def test_encoding_round_trip():
    data = encode({"a": ..., "b": RuntimeError, "c": torch.tensor([1.0, 2.0]), "d": [None, True],
                   "e": float("nan")})
    back = decode(data)
    assert back["a"] is Ellipsis and back["b"] == "RuntimeError"
    assert back["c"].values == [1.0, 2.0] and math.isnan(back["e"])
    assert values_equal(back["c"], [1.0, 2.0])


def test_functions_travel_as_source():
    out = decode(_fn("def f():\n    return 1\n"))
    assert isinstance(out, LearnerFunction) and out.name == "f"


def test_lesson_modules_import_without_side_effects():
    for a in ASSIGNMENTS:
        importlib.import_module(f"autograder.lessons.l{a}")


HANG = "def weigh_parcels():\n    while True:\n        pass\n"


def test_an_interrupted_check_is_stopped_in_the_checker_too():
    """Interrupting a kernel that waits for a check (the learner's stop button, or a grader's
    cell limit) raises one line, no traceback through the course, and stops the check in the
    oracle: the next check is answered at once, not after the runaway one's 20 s."""
    import signal

    # A kernel turns SIGINT into KeyboardInterrupt (Python's default handler); in the full
    # suite something before this test may have left this process another handler
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    oracle = client.oracle()
    oracle.forget()
    assert client.ask("01_leaves", "q6", [1.0, 1.0])["score"] == 1.0  # started
    asked, stop = threading.Event(), threading.Event()

    def interrupt():  # once the check is waited for, as the stop button does (again if lost)
        asked.wait(10)
        while not stop.wait(1.0):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    timer = threading.Thread(target=interrupt, daemon=True)
    timer.start()
    try:
        with pytest.raises(client.CheckStopped) as stopped:
            asked.set()
            oracle.ask({"op": "evaluate", "lesson": "01_leaves", "question": "q11",
                        "answer": _fn(HANG)})
    finally:
        stop.set()
        timer.join()
        signal.signal(signal.SIGINT, found)
    shown = stopped.value._render_traceback_()
    assert len(shown) == 1 and "q11" in shown[0] and "/" not in shown[0]
    t0 = time.monotonic()
    assert client.ask("01_leaves", "q6", [0.5, 0.5])["score"] == 0
    assert time.monotonic() - t0 < 5


def _service():
    """The grader's checker as the grading worker runs it: requests on stdin, verdicts on
    stdout, the driver's control channel on fd 3 and its records on fd 4."""
    import os
    import subprocess
    import sys

    ctl_r, ctl_w = os.pipe()
    log_r, log_w = os.pipe()
    code = ("import os; os.dup2(int(os.environ['CTL']), 3); os.dup2(int(os.environ['LOG']), 4);"
            "from autograder import oracle; oracle.serve(control=3, log=4)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, bufsize=1,
                            pass_fds=(ctl_r, log_w),
                            env={**os.environ, "CTL": str(ctl_r), "LOG": str(log_w)})
    os.close(ctl_r)
    os.close(log_w)
    control = os.fdopen(ctl_w, "w", buffering=1)
    records = os.fdopen(log_r, "r")
    ids = iter(range(1, 1000))

    def ask(answer, qid="q6", timeout=20.0):
        rid = next(ids)
        proc.stdin.write(json.dumps({"op": "evaluate", "id": rid, "lesson": "01_leaves",
                                     "question": qid, "answer": answer,
                                     "timeout": timeout}) + "\n")
        while True:
            reply = json.loads(proc.stdout.readline())
            if reply.get("id") == rid:
                return reply["verdict"]

    def cell(tag, limit, run):
        control.write(json.dumps({"begin": tag, "limit": limit}) + "\n")
        assert json.loads(records.readline()) == {"began": tag}  # the window is open
        out = run()
        control.write(json.dumps({"end": tag}) + "\n")
        return out, json.loads(records.readline())

    def close():
        proc.stdin.close()
        control.close()
        proc.wait(timeout=10)

    return proc, ask, cell, close


def test_the_graders_checker_records_each_cells_checks():
    """What the driver scores from: per cell, every verdict the checker gave during it, with
    the answer's digest; settled verdicts remembered by the checker (not the kernel) and
    recorded again in the cell that asks; a check given at most its cell's time left."""
    proc, ask, cell, close = _service()
    try:
        proc.stdin.write(json.dumps({"op": "ping", "id": 0, "preload": ["01_leaves"]}) + "\n")
        assert json.loads(proc.stdout.readline())["pong"]
        verdict, first = cell("a", 30.0, lambda: ask([1.0, 1.0]))
        assert verdict["passed"] and first["cell"] == "a"
        [record] = first["records"]
        assert (record["question"], record["status"], record["verdict"]["passed"]) == \
            ("q6", "answered", True)
        _, again = cell("b", 30.0, lambda: ask([1.0, 1.0]))
        assert [r["status"] for r in again["records"]] == ["remembered"]
        assert again["records"][0]["answer"] == record["answer"]
        _, other = cell("c", 30.0, lambda: (ask([1.0, 1.0]), ask([0.5, 0.5])))
        assert len({r["answer"] for r in other["records"]}) == 2
        t0 = time.monotonic()
        verdict, capped = cell("d", 2.0, lambda: ask(_fn(HANG), "q11"))
        assert time.monotonic() - t0 < 5  # not the check's own 20 s
        assert "longer than 0.5 s" in verdict["findings"][0]["text"]
        assert capped["records"][0]["status"] == "timeout"
        _, between = cell("e", 30.0, lambda: None)
        assert between["records"] == []  # nothing carried over from another cell
    finally:
        close()
