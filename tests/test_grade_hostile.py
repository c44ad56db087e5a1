"""Hostile and broken submissions: each gets a clear result and never stops the run.

One ``autograder grade`` run over a class of bad submissions of the hand-made ``ps1``
(tests/hostile/course.py); every one of them is built on top of honest answers whose
score is known, and none may score above it. A second run does the same for this
course's first assignment with submissions that tamper with torch, the checks and
IPython's traceback display (the checks run in the oracle, outside the learner's reach).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from helpers import make_course as make_real_course
from helpers import submission as real_submission
from helpers import submit as real_submit
from hostile.course import SOLVED, answered, make_course, submit

from autograder.grading.sandbox import sandbox_problem
from autograder.pipeline import nbgrader, nbgrader_env, read_scores

pytestmark = [pytest.mark.grading, pytest.mark.slow]

SANDBOXED = sandbox_problem() is None
SANDBOX_ARGS = [] if SANDBOXED else ["--no-sandbox"]

Q1 = SOLVED["q1_answer"]  # honest part of most hostile submissions: Q1 right = 2 points


def with_cell(nb, source: str, after: str = "q1_answer"):
    """Insert a code cell (learner code) right after the cell ``after``."""
    idx = next(i for i, c in enumerate(nb.cells)
               if c.metadata.get("nbgrader", {}).get("grade_id") == after)
    nb.cells.insert(idx + 1, nbformat.v4.new_code_cell(source))
    return nb


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def build_class(course: Path) -> dict[str, float]:
    """Write the hostile class; return each student's honest score (the ceiling)."""
    honest: dict[str, float] = {}

    def add(student, nb=None, ceiling=2.0, **kw):
        submit(course, student, nb, **kw)
        honest[student] = ceiling

    add("control", answered(course, {"q1_answer": Q1}))
    add("invalid_json", raw='{"cells": [', ceiling=0)
    nb = answered(course, {"q1_answer": Q1})
    nb.nbformat = 5
    add("wrong_nbformat", raw=json.dumps(nb), ceiling=0)
    (course / "submitted" / "missing_notebook" / "ps1").mkdir(parents=True)
    (course / "submitted" / "missing_notebook" / "ps1" / "notes.txt").write_text("oops")
    honest["missing_notebook"] = 0
    add("renamed", answered(course, {"q1_answer": Q1}), name="ps1 (copy).ipynb", ceiling=0)
    folder = submit(course, "extra_files", answered(course, {"q1_answer": Q1}))
    (folder / "data.csv").write_text("a,b\n1,2\n")
    honest["extra_files"] = 2
    folder = submit(course, "symlinks", with_cell(answered(course, {"q1_answer": Q1}),
                                                  "print(open('gradebook_link').read()[:20])"))
    os.symlink(course / "gradebook.db", folder / "gradebook_link")
    os.symlink("/etc/passwd", folder / "passwd")
    honest["symlinks"] = 2
    nb = answered(course, {"q1_answer": Q1})
    nb.cells.remove(cell(nb, "q2_test"))
    add("deleted_test", nb)
    nb = answered(course, {"q1_answer": Q1})
    idx = nb.cells.index(cell(nb, "q1_test"))
    dup = nbformat.from_dict(json.loads(json.dumps(cell(nb, "q1_test"))))
    dup.id = "dupcopy"
    nb.cells.insert(idx + 1, dup)
    add("duplicated_test", nb)
    nb = answered(course, {"q1_answer": Q1})
    cell(nb, "q2_test").source = "pass  # tests removed"
    cell(nb, "q3_test").metadata.nbgrader.update(grade=False, points=100)
    add("edited_tests", nb)
    nb = answered(course, {"q1_answer": Q1})
    cell(nb, "q2_test").cell_type = "markdown"
    del cell(nb, "q2_test")["outputs"], cell(nb, "q2_test")["execution_count"]
    cell(nb, "q2_answer").metadata.nbgrader["points"] = 50
    add("changed_types", nb)
    add("huge_output", with_cell(answered(course, {"q1_answer": Q1}),
                                 "for _ in range(40):\n    print('x' * 1_000_000)"))
    add("os_exit", with_cell(answered(course, {**SOLVED, "q1_answer": Q1}),
                             "import os\nos._exit(3)", after="q1_test"))
    add("segfault", with_cell(answered(course, {**SOLVED, "q1_answer": Q1}),
                              "import ctypes\nctypes.string_at(0)", after="q1_test"))
    add("memory_bomb", with_cell(answered(course, {"q1_answer": Q1}),
                                 "hog = bytearray(64 << 30)"))
    add("traceback_hidden", with_cell(
        answered(course, {"q1_answer": Q1}),
        "ip = get_ipython()\nip.showtraceback = lambda *a, **k: None\n"
        "ip._showtraceback = lambda *a, **k: None"))
    add("sleeper", with_cell(answered(course, {**SOLVED, "q1_answer": Q1}),
                             "import time\ntime.sleep(10**9)", after="q1_test"), ceiling=7)
    add("big_file", with_cell(answered(course, {"q1_answer": Q1}),
                              "with open('big.bin', 'wb') as f:\n"
                              "    f.truncate(0)\n    f.write(b'0' * (200 << 20))"))
    home = [str(p) for p in Path("~").expanduser().glob(".*") if p.is_file()][:2]
    spy = (f"import os, glob\nCOURSE = {str(course)!r}\nseen = []\n"
           "for p in [COURSE + '/source/ps1/ps1.ipynb', COURSE + '/gradebook.db',\n"
           f"          COURSE + '/release/ps1/ps1.ipynb', *{home!r}]:\n"
           "    try:\n"
           "        os.listdir(p) if os.path.isdir(p) else open(p, 'rb').read(100)\n"
           "        seen.append(p)\n"
           "    except Exception as exc:\n"
           "        print('blocked', p, type(exc).__name__)\n"
           "seen += glob.glob(COURSE + '/submitted/*')\n"
           "try:\n"
           "    open(COURSE + '/gradebook.db', 'ab').write(b'pwned')\n"
           "    seen.append('wrote gradebook')\n"
           "except Exception as exc:\n"
           "    print('blocked write', type(exc).__name__)\n"
           "print('SEEN', seen)\n")
    if SANDBOXED:
        add("spy", with_cell(answered(course, {"q1_answer": Q1}), spy))
        add("ignores_interrupt", with_cell(
            answered(course, {**SOLVED, "q1_answer": Q1}),
            "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
            after="q1_test"))
        add("fork_bomb", with_cell(answered(course, {"q1_answer": Q1}),
                                   "import os\nwhile True:\n    try:\n        os.fork()\n"
                                   "    except OSError:\n        pass", after="q1_test"))
    return honest


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("hostile"))
    honest = build_class(course)
    db = course / "gradebook.db"
    proc = subprocess.run(
        [sys.executable, "-m", "autograder", "grade", "ps1", "--workers", "2", "--timeout", "3",
         "--notebook-timeout", "20", "--memory", "3G", "--max-file-size", "16M",
         "--max-procs", "200", *SANDBOX_ARGS],
        cwd=course, env=nbgrader_env(), capture_output=True, text=True, timeout=900)
    rows = {r["student"]: r for r in json.loads(
        (course / "grade-reports" / "ps1.json").read_text())["submissions"]}
    return course, honest, proc, rows, read_scores(course, "ps1"), db


def reasons(rows, student) -> str:
    return " | ".join(rows[student]["reasons"])


def test_the_run_finishes_and_reports_every_submission(hostile):
    course, honest, proc, rows, _, _ = hostile
    assert proc.returncode == 1, proc.stdout + proc.stderr  # some could not be graded
    assert set(rows) == set(honest), (proc.stdout, proc.stderr)
    assert "could not be graded" in proc.stderr
    for student in honest:
        assert student in proc.stdout


def test_no_submission_scores_above_its_honest_answers(hostile):
    _, honest, proc, rows, scores, _ = hostile
    for student, ceiling in honest.items():
        if student in scores:
            assert scores[student].score <= ceiling, (student, scores[student].per_cell,
                                                      rows[student])


def test_the_control_submission_gets_its_honest_score(hostile):
    _, _, _, rows, scores, _ = hostile
    assert scores["control"].score == 2 and rows["control"]["status"] == "graded"


@pytest.mark.parametrize("student, status, words", [
    ("invalid_json", "failed", "not valid JSON"),
    ("wrong_nbformat", "failed", "nbformat 5"),
    ("missing_notebook", "failed", "no gradable notebook"),
    ("renamed", "failed", "renamed"),
    ("symlinks", "problems", "symbolic link gradebook_link"),
    ("deleted_test", "problems", "q2_test"),
    ("duplicated_test", "problems", "duplicated"),
    ("edited_tests", "problems", "q2_test was edited"),
    ("changed_types", "problems", "cell_type"),
    ("huge_output", "problems", "dropped"),
    ("os_exit", "problems", "exited with status 3"),
    ("segfault", "problems", "signal 11"),
    ("sleeper", "problems", "ran longer than its limit of 3 s (the configured timeout)"),
])
def test_each_bad_submission_gets_a_clear_reason(hostile, student, status, words):
    _, _, proc, rows, _, _ = hostile
    assert rows[student]["status"] == status, rows[student]
    assert words in reasons(rows, student), rows[student]


def test_honest_answers_still_count_in_broken_submissions(hostile):
    _, _, _, rows, scores, _ = hostile
    for student in ("extra_files", "symlinks", "duplicated_test", "edited_tests",
                    "changed_types", "huge_output", "traceback_hidden", "deleted_test"):
        assert scores[student].per_cell["q1_test"] == 2, (student, rows[student])
    # graded as far as the kernel lived: Q1 ran before the kernel died
    for student in ("os_exit", "segfault"):
        assert scores[student].score == 2, (student, scores[student].per_cell)
    # an interrupted sleep costs its cell only; the rest of the notebook is graded as stock does
    assert scores["sleeper"].score == 7


def test_memory_bomb_and_big_file_fail_in_the_learner_cell_only(hostile):
    course, _, _, rows, scores, _ = hostile
    assert scores["memory_bomb"].per_cell["q1_test"] == 2
    assert scores["big_file"].per_cell["q1_test"] == 2
    nb = nbformat.read(str(course / "autograded" / "big_file" / "ps1" / "ps1.ipynb"), 4)
    errors = [o.get("ename") for c in nb.cells for o in c.get("outputs", [])]
    assert "OSError" in errors
    assert not (course / "autograded" / "big_file" / "ps1" / "big.bin").exists()


def test_symbolic_links_are_not_followed_into_autograded(hostile):
    course, _, _, _, _, _ = hostile
    out = course / "autograded" / "symlinks" / "ps1"
    assert not (out / "gradebook_link").exists() and not (out / "passwd").exists()


def test_duplicated_test_cell_does_not_abort_the_run(hostile):
    """Stock nbgrader stops the whole run at this submission ("old version of the metadata")."""
    _, _, _, rows, scores, _ = hostile
    assert rows["duplicated_test"]["status"] != "failed"
    assert scores["duplicated_test"].per_cell["q1_test"] == 2


@pytest.mark.skipif(not SANDBOXED, reason="needs the sandbox (root and namespaces)")
def test_learner_code_cannot_read_the_course_or_write_the_gradebook(hostile):
    course, _, _, _, _, db = hostile
    nb = nbformat.read(str(course / "autograded" / "spy" / "ps1" / "ps1.ipynb"), 4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "SEEN []" in text, text
    assert text.count("blocked") >= 5
    assert b"pwned" not in db.read_bytes()


@pytest.mark.skipif(not SANDBOXED, reason="needs the sandbox (root and namespaces)")
def test_fork_bomb_and_ignored_interrupts_are_contained(hostile):
    _, _, _, rows, scores, _ = hostile
    assert scores["fork_bomb"].per_cell["q1_test"] == 2
    assert rows["ignores_interrupt"]["status"] == "problems"
    assert "did not respond" in reasons(rows, "ignores_interrupt") \
        or "took longer than 20 s" in reasons(rows, "ignores_interrupt")
    assert scores["ignores_interrupt"].per_cell["q1_test"] == 2
    assert scores["ignores_interrupt"].per_cell["q2_test"] == 0


TAMPER = {
    "tamper_torch": "import torch\ntorch.Tensor.is_leaf = property(lambda self: True)\n"
                    "torch.Tensor.grad = property(lambda self: torch.ones(3))",
    "tamper_checks": "import autograder\nautograder.grade = lambda *a, **k: None\n"
                     "autograder.check = lambda *a, **k: None",
    "tamper_traceback": "ip = get_ipython()\nip.showtraceback = lambda *a, **k: None\n"
                        "ip._showtraceback = lambda *a, **k: None",
    "tamper_oracle": "import autograder.client as c\nc.ask = lambda *a, **k: {'passed': True}",
}


def test_tampering_with_torch_checks_or_ipython_earns_nothing_on_the_course(tmp_path):
    assignment = "01_leaves"
    course = make_real_course(tmp_path)
    nbgrader("generate_assignment", assignment, "--force", course=course)
    real_submit(course, "full", assignment, real_submission(assignment))
    for student, code in TAMPER.items():
        nb = real_submission(assignment, solve=set())
        idx = next(i for i, c in enumerate(nb.cells)
                   if c.metadata.get("nbgrader", {}).get("grade_id") == "setup")
        new = nbformat.v4.new_code_cell(code)
        nb.cells.insert(idx + 1, new)
        real_submit(course, student, assignment, nb)
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", assignment, *SANDBOX_ARGS],
                          cwd=course, env=nbgrader_env(), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    scores = read_scores(course, assignment)
    assert scores["full"].score == scores["full"].max_score > 0
    for student in TAMPER:
        assert scores[student].score == 0, (student, scores[student].per_cell)
