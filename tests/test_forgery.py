"""Red team: no code in a submitted notebook raises its grade above what its answers earn.

A class of real ``01_leaves`` submissions is graded by the real ``autograder grade`` (sandboxed
where this machine allows it) and read back from the real gradebook. Every forger answers Q6
right (1 point, its honest score) and leaves the rest as released, then tries one way to make
the other graded cells pass anyway: in the kernel (replacing or rewrapping the checks, an import
hook, IPython's input and AST transformers, a custom exception handler, the kernel's replies,
fake verdicts, a verdict copied from another learner's graded notebook, a fake checker process,
forged records in the notebook's metadata, reaching into the grading worker's or the checker's
descriptors), or from a write-code answer inside the checker itself. Each must score exactly 1:
never more (the forgery earned nothing), never less (its honest answer still counts).

The same module grades the class's broken submissions (no notebook, a renamed one, invalid
JSON) and checks what the instructor then sees: the grade-run record keeps every learner
through a partial re-grade, and ``nbgrader export`` marks who was not graded and why.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest
from helpers import make_course, meta, submission, submit

from autograder.grading.sandbox import sandbox_problem
from autograder.grading.verify import ENAME, METADATA_KEY
from autograder.pipeline import nbgrader, nbgrader_env, read_scores
from autograder.verdict import MIME_TYPE

pytestmark = [pytest.mark.grading, pytest.mark.slow]

A = "01_leaves"
SANDBOX_ARGS = [] if sandbox_problem() is None else ["--no-sandbox"]
HONEST = {"q6_answer": "q6_x_grad = [1.0, 1.0]"}  # Q6 right: 1 point, the rest as released

#: a verdict every check would accept
PASS = ('{"question": "q", "parts": [], "findings": [{"status": "right", "ok": true, '
        '"text": "ok", "part": null}], "passed": true, "score": 1.0, "answered": true}')

#: learner code run right after the setup cell; each keeps Q6's honest check and fakes the rest
KERNEL_FORGERIES = {
    "replaced_module": '''
import sys, types, autograder
real = autograder
fake = types.ModuleType("autograder")
fake.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})
fake.grade = lambda lesson, q, answer, part=None: (
    real.grade(lesson, q, answer, part) if q == "q6" else None)
fake.verify = lambda *args, **kwargs: None
sys.modules["autograder"] = fake
''',
    "rebound_through_dict": '''
import autograder
real_grade = autograder.grade
vars(autograder)["grade"] = lambda lesson, q, answer, part=None: (
    real_grade(lesson, q, answer, part) if q == "q6" else None)
vars(autograder)["verify"] = lambda *args, **kwargs: None
''',
    "import_hook": '''
import sys, types, importlib.abc, importlib.util
real = sys.modules.pop("autograder")
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "autograder" else None
    def create_module(self, spec):
        m = types.ModuleType("autograder")
        m.__dict__.update({k: v for k, v in vars(real).items() if not k.startswith("__")})
        m.grade = lambda lesson, q, a, part=None: real.grade(lesson, q, a, part) if q == "q6" else None
        m.verify = lambda *args, **kwargs: None
        return m
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, Finder())
''',
    "input_transformer": '''
def blank_other_checks(lines):
    text = "".join(lines)
    if "from autograder import" in text and '"q6"' not in text:
        return ["pass\\n"]
    return lines
get_ipython().input_transformers_post.append(blank_other_checks)
''',
    "ast_transformer": '''
import ast
class DropChecks(ast.NodeTransformer):
    def visit_Expr(self, node):
        call = node.value
        if (isinstance(call, ast.Call) and getattr(call.func, "id", "") in ("grade", "verify")
                and getattr(call.args[1], "value", "") != "q6"):
            return ast.Pass()
        return node
get_ipython().ast_transformers.append(DropChecks())
''',
    "custom_exception_handler": '''
ip = get_ipython()
ip.set_custom_exc((AssertionError,), lambda *args, **kwargs: None)
real_run_cell = ip.run_cell
def run_cell(*args, **kwargs):  # and the execution reports no error either
    result = real_run_cell(*args, **kwargs)
    if result.error_in_exec is not None and "Q6" not in str(result.error_in_exec):
        result.error_in_exec = None
    return result
ip.run_cell = run_cell
''',
    "traceback_display_and_event": '''
import sys
ip = get_ipython()
real_show = ip.showtraceback
def show(*args, **kwargs):
    if "Q6" in str(sys.exc_info()[1]):
        return real_show(*args, **kwargs)
ip.showtraceback = show
def forget_the_error(result):
    if result.error_in_exec is not None and "Q6" not in str(result.error_in_exec):
        result.error_in_exec = None
ip.events.register("post_run_cell", forget_the_error)
''',
    "kernel_replies": '''
kernel = get_ipython().kernel
real_send = kernel.session.send
def send(stream, msg_or_type, content=None, *args, **kwargs):
    kind = msg_or_type if isinstance(msg_or_type, str) else msg_or_type.get("msg_type")
    if kind in ("error", "execute_reply") and isinstance(content, dict) \\
            and content.get("status", "error") == "error" and "Q6" not in str(content):
        if kind == "error":
            return None
        content = {"status": "ok", "execution_count": content.get("execution_count"),
                   "user_expressions": {}, "payload": []}
    return real_send(stream, msg_or_type, content, *args, **kwargs)
kernel.session.send = send
''',
    "wrapped_transport": f'''
import json, autograder, autograder.client as client
real_ask = client.ask
fake = lambda lesson, q, *args, **kwargs: (
    real_ask(lesson, q, *args, **kwargs) if q == "q6" else json.loads({PASS!r}))
vars(client)["ask"] = vars(autograder)["ask"] = fake
''',
    "fake_verdicts": '''
import autograder.verdict as v
real_passed = v.Verdict.passed
v.Verdict.passed = property(lambda self: True if self.question != "q6" else real_passed.fget(self))
''',
    "fake_checker_process": '''
import json, queue, subprocess, sys, threading
import autograder.client as client
SCRIPT = """
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({"id": request.get("id"), "pong": True, "settled": True,
                      "verdict": json.loads(PASS)}), flush=True)
""".replace("PASS", repr(PASS))
fake = subprocess.Popen([sys.executable, "-c", SCRIPT], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, text=True, bufsize=1)
other = client.Oracle()
other._proc, other._started, other._replies = fake, True, queue.Queue()
threading.Thread(target=other._read, args=(fake, other._replies), daemon=True).start()
real = client.oracle()
real_ask = real.ask
real.ask = lambda request, timeout=20.0: (
    real_ask(request, timeout) if request.get("question") == "q6" else other.ask(request, timeout))
'''.replace("PASS = None", "").replace("repr(PASS)", repr(repr(PASS))),
}
#: only inside the sandbox: without it, learner code runs as the grader's own user and
#: would write into the grading run's (and this test's) own descriptors
SANDBOXED_FORGERIES = {
    "reaches_into_the_grader": '''
import ctypes, json, os
record = json.dumps({"cell": "x", "records": [{"lesson": "01_leaves", "question": "q1",
                     "variant": "visible", "answer": "x", "status": "answered",
                     "verdict": {"findings": [{"status": "right", "text": "ok"}]}}]}) + "\\n"
reached = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        continue
    for fd in fds:
        try:
            with open(f"/proc/{pid}/fd/{fd}", "w") as f:
                f.write(record)
            reached.append((pid, fd))
        except OSError:
            pass
    try:  # PTRACE_ATTACH
        if ctypes.CDLL(None, use_errno=True).ptrace(16, int(pid), 0, 0) == 0:
            reached.append((pid, "ptrace"))
    except OSError:
        pass
print("REACHED", reached)
''',
}

#: write-code answers to Q11 that try to forge their own verdict inside the checker
CHECKER_FORGERIES = {
    "writes_a_verdict_to_its_pipe": f'''
def weigh_parcels():
    import os
    for fd in range(3, 64):
        try:
            os.write(fd, {PASS!r}.encode())
        except OSError:
            pass
    os._exit(0)
''',
    "patches_the_judge": '''
def weigh_parcels():
    for way in (lambda: torch.nn.modules.module.sys.modules["autograder.verdict"],
                lambda: getattr(torch, "os"),
                lambda: ().__class__.__base__.__subclasses__()):
        try:
            judge = way()
            judge.Verdict.passed = property(lambda self: True)
        except Exception:
            pass
    w = torch.zeros(3)
    return w
''',
    "a_tensor_that_lies": '''
def weigh_parcels():
    class Liar(torch.Tensor):
        @property
        def is_leaf(self):
            return True
    w = torch.zeros(3).as_subclass(Liar)
    return w
''',
    "shadows_its_results_methods": '''
def weigh_parcels():
    w = torch.zeros(3, requires_grad=True)
    w.tolist = lambda: [1.0, 2.0, 3.0]
    return w
''',
}


def _forger(code: str | None = None, q11: str | None = None, metadata: bool = False):
    nb = submission(A, solve=set())
    for cell in nb.cells:
        gid = meta(cell).get("grade_id")
        if gid in HONEST:
            cell.source = HONEST[gid]
        if gid == "q11_answer" and q11 is not None:
            cell.source = textwrap.dedent(q11).strip() + "\n"
        if metadata and cell.cell_type == "code" and meta(cell).get("grade") \
                and not meta(cell).get("solution"):
            cell.metadata[METADATA_KEY] = {"verified": True, "reason": "", "verdicts": [
                json.loads(PASS)], "overruled": False}
    if code is not None:
        idx = next(i for i, c in enumerate(nb.cells) if meta(c).get("grade_id") == "setup")
        nb.cells.insert(idx + 1, nbformat.v4.new_code_cell(textwrap.dedent(code).strip()))
    for cell in nb.cells:
        cell.setdefault("id", f"x{id(cell)}")
    return nb


def _grade(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", "grade", A, "--workers", "2",
                           *args, *SANDBOX_ARGS], cwd=course, env=nbgrader_env(),
                          capture_output=True, text=True, timeout=1800)


def _copied_verdicts(course: Path) -> dict[str, dict]:
    """The verdicts another learner's graded notebook shows, by question."""
    nb = nbformat.read(str(course / "autograded" / "full" / A / f"{A}.ipynb"), 4)
    out = {}
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            data = o.get("data", {}).get(MIME_TYPE)
            if data and data.get("passed"):
                out.setdefault(data["question"], data)
    return out


@pytest.fixture(scope="module")
def red_team(tmp_path_factory):
    """Run 1: the honest class (the full solution, the Q6-only control, broken submissions).
    Run 2, a partial re-grade of the forgers only, one of which replays run 1's verdicts."""
    course = make_course(tmp_path_factory.mktemp("forgery"))
    nbgrader("generate_assignment", A, "--force", course=course)
    submit(course, "full", A, submission(A))
    submit(course, "control", A, _forger())
    (course / "submitted" / "no_notebook" / A).mkdir(parents=True)
    (course / "submitted" / "no_notebook" / A / "notes.txt").write_text("forgot it")
    renamed = course / "submitted" / "renamed" / A
    renamed.mkdir(parents=True)
    nbformat.write(_forger(), str(renamed / f"{A}-Copy1.ipynb"))
    (course / "submitted" / "corrupt" / A).mkdir(parents=True)
    (course / "submitted" / "corrupt" / A / f"{A}.ipynb").write_text('{"cells": [')
    first = _grade(course)
    copied = _copied_verdicts(course)
    forgers = dict(KERNEL_FORGERIES, **({} if SANDBOX_ARGS else SANDBOXED_FORGERIES))
    forgers["copied_verdict"] = (
        "import json, autograder, autograder.client as client\n"
        f"COPIED = json.loads({json.dumps(copied)!r})\n"
        "real_ask = client.ask\n"
        "vars(autograder)['ask'] = lambda lesson, q, *a, **k: (\n"
        "    real_ask(lesson, q, *a, **k) if q == 'q6' else COPIED[q])\n")
    for name, code in forgers.items():
        submit(course, name, A, _forger(code))
    for name, q11 in CHECKER_FORGERIES.items():
        submit(course, name, A, _forger(q11=q11))
    submit(course, "forged_metadata", A, _forger(KERNEL_FORGERIES["rebound_through_dict"],
                                                 metadata=True))
    runaway = submission(A)  # all right, but Q10's answer loops for ever
    for cell in runaway.cells:
        if meta(cell).get("grade_id") == "q10_answer":
            head, sep, tail = cell.source.rpartition("def tune_centre():\n")  # the last one
            cell.source = head + sep + "    while True:\n        pass\n" + tail
    submit(course, "runaway", A, runaway)
    names = [*forgers, *CHECKER_FORGERIES, "forged_metadata", "runaway"]
    second = _grade(course, *[arg for n in names for arg in ("--student", n)])
    return course, first, second, names, copied


def test_the_honest_class_is_graded_and_the_broken_submissions_say_why(red_team):
    course, first, _, _, _ = red_team
    assert first.returncode == 1, first.stdout + first.stderr  # three could not be graded
    scores = read_scores(course, A)
    assert scores["full"].score == scores["full"].max_score == 26
    assert scores["control"].score == 1
    for words in ("no .ipynb file", "renamed?", "not valid JSON"):
        assert words in first.stdout
    assert "did you forget" not in first.stdout  # nbgrader's advice, which does not apply


@pytest.mark.parametrize("forger", [*KERNEL_FORGERIES, *SANDBOXED_FORGERIES, "copied_verdict",
                                    *CHECKER_FORGERIES, "forged_metadata"])
def test_a_forgery_earns_nothing_and_costs_the_honest_answer_nothing(red_team, forger):
    course, _, second, names, copied = red_team
    if forger not in names:
        pytest.skip("needs the sandbox (root and namespaces)")
    score = read_scores(course, A)[forger]
    assert score.score == 1, (forger, score.per_cell, second.stdout[-3000:])
    assert score.per_cell["q6_mean"] == 1
    # and it was a real forgery: nbgrader's own rule would have given the points
    nb = nbformat.read(str(course / "autograded" / forger / A / f"{A}.ipynb"), 4)
    records = {meta(c)["grade_id"]: c.metadata.get(METADATA_KEY, {}) for c in nb.cells
               if meta(c).get("grade") and not meta(c).get("solution")}
    overruled = [gid for gid, r in records.items() if r.get("overruled")]
    if forger in CHECKER_FORGERIES:  # refused inside the checker: Q11 failed honestly there
        findings = [f["text"] for v in records["q11_flag"]["verdicts"] for f in v["findings"]]
        assert not records["q11_flag"]["verified"] and not overruled, (forger, records)
        assert any("checker runs your function" in t or "checker does not run" in t
                   or "is not run by the checker" in t for t in findings), findings
    elif forger != "reaches_into_the_grader":
        assert overruled, (forger, "the kernel showed no forged pass")


def test_the_copied_verdicts_were_real_ones(red_team):
    _, _, _, _, copied = red_team
    assert len(copied) >= 10 and all(v["passed"] for v in copied.values())


def test_a_forged_cell_shows_why_it_scored_0_and_the_instructor_is_told(red_team):
    course, _, second, _, _ = red_team
    nb = nbformat.read(str(course / "autograded" / "replaced_module" / A / f"{A}.ipynb"), 4)
    cell = next(c for c in nb.cells if meta(c).get("grade_id") == "q1_basics")
    first = cell.outputs[0]
    assert first.output_type == "error" and first.ename == ENAME
    assert len(first.traceback) == 1 and "Q1" in first.traceback[0]
    assert cell.metadata[METADATA_KEY]["overruled"] is True
    rows = {r["student"]: r for r in json.loads(
        (course / "grade-reports" / f"{A}.json").read_text())["submissions"]}
    reason = "; ".join(rows["replaced_module"]["reasons"])
    assert rows["replaced_module"]["status"] == "problems"
    assert "could not be verified" in reason and 'Q1, graded part "basics"' in reason
    # the control answered Q6 only: its other cells failed honestly, nothing was overruled
    assert rows["control"]["status"] == "graded", rows["control"]


def test_learner_code_reaches_neither_the_worker_nor_the_checker(red_team):
    course, _, _, _, _ = red_team
    if SANDBOX_ARGS:
        pytest.skip("without the sandbox the kernel runs as the grader's own user")
    nb = nbformat.read(str(course / "autograded" / "reaches_into_the_grader" / A / f"{A}.ipynb"),
                       4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    reached = text.split("REACHED", 1)[1].splitlines()[0]
    # only the kernel's own children (none here) could be reached; the worker (PID 1 of
    # the sandbox) and the checker are not dumpable
    assert reached.strip() == "[]", reached


def test_a_partial_regrade_keeps_the_whole_class_in_the_record(red_team):
    course, _, second, names, _ = red_team
    data = json.loads((course / "grade-reports" / f"{A}.json").read_text())
    assert sorted(data["this_run"]) == sorted(names)
    rows = {r["student"]: r for r in data["submissions"]}
    assert {"full", "control", "no_notebook", "renamed", "corrupt"} <= set(rows)
    assert rows["full"]["status"] == "graded" and rows["corrupt"]["status"] == "failed"
    assert rows["full"]["run"] < rows[names[0]]["run"]


def test_the_export_tells_not_graded_from_zero(red_team):
    course, _, _, _, _ = red_team
    nbgrader("export", course=course)
    assert not (course / "grades.csv").exists()  # nothing lands in the repository root
    with open(course / "grade-reports" / "grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert rows["full"]["status"] == "graded" and float(rows["full"]["score"]) == 26
    assert rows["control"]["status"] == "graded" and float(rows["control"]["score"]) == 1
    for student, words in (("no_notebook", "no .ipynb file"), ("renamed", "renamed?"),
                           ("corrupt", "not valid JSON")):
        assert rows[student]["status"] == "not graded", rows[student]
        assert rows[student]["score"] == "" and words in rows[student]["reason"]
    assert rows["replaced_module"]["status"] == "graded with problems"
    assert "could not be verified" in rows["replaced_module"]["reason"]
    assert not (course / "autograded" / "no_notebook").exists()


def test_stock_nbgrader_cannot_tell_a_forgery(red_team, tmp_path):
    """Why the README leads with ``autograder grade``: stock ``nbgrader autograde`` scores a
    graded cell by the absence of an error in the learner's own kernel."""
    course = make_course(tmp_path)
    nbgrader("generate_assignment", A, "--force", course=course)
    submit(course, "replaced_module", A, _forger(KERNEL_FORGERIES["replaced_module"]))
    nbgrader("autograde", A, course=course)
    assert read_scores(course, A)["replaced_module"].score == 26


def test_the_class_report_shows_the_forgers_and_counts_no_forged_verdict(red_team, tmp_path):
    """``autograder report`` reads the verified record: a forger's cells carry no verdict of
    their own (the checker never gave one), and the forger is listed under "needs attention"
    with the cells that lost their points."""
    from known_answers import built

    from autograder import analytics

    course, _, _, names, _ = red_team
    analytics.build(course, [A], out=tmp_path)
    rep = built(tmp_path)
    flagged = {a["learner"] for a in rep["attention"] if a["why"] == "graded with problems"
               and "could not be verified" in a["detail"]}
    assert {"replaced_module", "kernel_replies", "copied_verdict"} <= flagged
    assert "control" not in flagged and "full" not in flagged
    q1 = next(r for r in rep["questions"] if r["label"] == "Q1 (basics)")
    # full and runaway answered Q1 right; every forger "passed" it without a verdict
    assert int(q1["full"]) == 2, q1


def test_a_runaway_answer_costs_only_its_own_question(red_team):
    """Q10's answer loops for ever. Its check is given its cell's time left (the cell's limit
    is measured: 10 s here), so it ends with the check's own verdict before the cell is cut,
    and Q11's check, next, starts at once: only Q10's points are lost, as under stock
    nbgrader (whose 120 s cells outlast the check's own 20 s). Every cell shows one line."""
    course, _, second, _, _ = red_team
    scores = read_scores(course, A)
    full, runaway = scores["full"].per_cell, scores["runaway"].per_cell
    assert runaway == dict(full, q10_centre=0), runaway
    nb = nbformat.read(str(course / "autograded" / "runaway" / A / f"{A}.ipynb"), 4)
    for cell in nb.cells:
        if meta(cell).get("grade_id") not in ("q10_check", "q10_centre", "q11_check",
                                                 "q11_flag"):
            continue
        for o in cell.outputs:
            shown = "\n".join(o.get("traceback", [])) or str(o.get("data", {}).get(
                "text/plain", "")) or o.get("text", "")
            assert "Traceback" not in shown and "/autograder/" not in shown, shown
            if o.output_type == "error":
                assert len(o.traceback) == 1, o.traceback
        if meta(cell).get("grade_id") == "q10_centre":
            assert any("does your code loop forever" in str(o.get("data", {}))
                       for o in cell.outputs), cell.outputs
