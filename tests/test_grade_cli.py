"""``autograder grade`` gives the same scores as stock ``nbgrader autograde``, in the real gradebook.

A handmade course (hostile/course.py) is graded twice on the same submissions: first by
stock ``nbgrader autograde``, then by ``autograder grade --force``; per-cell scores are read
back with ``nbgrader.api.Gradebook`` after each and must be identical. Then the nbgrader
workflow carries on unchanged from what ``autograder grade`` wrote (``export``,
``generate_feedback``). This course's own eight assignments get the same comparison, outputs
included, in test_grading_pipeline.py.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import nbformat
import pytest
from hostile.course import SOLVED, VISIBLE_ONLY, WRONG, answered, make_course, submit

from autograder.grading.sandbox import sandbox_problem
from autograder.pipeline import nbgrader, nbgrader_env, read_scores

pytestmark = [pytest.mark.grading]

# Where the sandbox cannot be set up, the command must refuse (tested below) and the
# other tests grade with the explicit opt-out.
SANDBOX_ARGS = [] if sandbox_problem() is None else ["--no-sandbox"]


def grade(course: Path, *args: str, check_exit: int | None = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", *args, *SANDBOX_ARGS],
                          cwd=course, env=nbgrader_env(), capture_output=True, text=True,
                          timeout=900)
    if check_exit is not None:
        assert proc.returncode == check_exit, proc.stdout + proc.stderr
    return proc


def report(course: Path, assignment: str) -> dict[str, dict]:
    data = json.loads((course / "grade-reports" / f"{assignment}.json").read_text())
    return {row["student"]: row for row in data["submissions"]}


def as_table(scores) -> dict[str, tuple[float, float, dict]]:
    return {s: (v.score, v.max_score, v.per_cell) for s, v in scores.items()}


@pytest.fixture(scope="module")
def handmade(tmp_path_factory):
    """ps1 graded by stock nbgrader, then by ``autograder grade --force``."""
    course = make_course(tmp_path_factory.mktemp("handmade"))
    submit(course, "full", answered(course, SOLVED))
    submit(course, "blank", answered(course, {}))
    submit(course, "partial", answered(course, {"q2_answer": SOLVED["q2_answer"]}))
    submit(course, "wrong", answered(course, WRONG))
    submit(course, "visible_only", answered(course, {**SOLVED, **VISIBLE_ONLY}))
    edited = answered(course, WRONG)
    for cell in edited.cells:  # a learner who deletes the asserts of a locked test cell
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "q2_test":
            cell.source = '"""Q2 tests."""\npass'
    submit(course, "edited_test", edited)
    nbgrader("autograde", "ps1", "--force", course=course)
    stock = as_table(read_scores(course, "ps1"))
    proc = grade(course, "ps1", "--force", "--workers", "2")
    ours = as_table(read_scores(course, "ps1"))
    return course, stock, ours, proc


def test_handmade_scores_identical_to_stock(handmade):
    _, stock, ours, proc = handmade
    assert set(stock) == {"full", "blank", "partial", "wrong", "visible_only", "edited_test"}
    assert ours == stock, proc.stdout


def test_handmade_scores_are_the_expected_ones(handmade):
    _, _, ours, _ = handmade
    assert ours["full"][0] == ours["full"][1] == 7
    assert ours["blank"][0] == 0
    assert ours["partial"][0] == 3
    assert ours["wrong"][0] == 0
    # the hidden test of Q1 comes from the gradebook, not from the submission
    assert ours["visible_only"][2]["q1_test"] == 0 and ours["visible_only"][0] == 5
    assert ours["edited_test"][2]["q2_test"] == 0


def test_report_and_summary_list_every_submission(handmade):
    course, stock, _, proc = handmade
    rows = report(course, "ps1")
    assert set(rows) == set(stock)
    assert all(r["status"] in ("graded", "problems") for r in rows.values()), rows
    assert rows["full"]["score"] == 7 and rows["full"]["status"] == "graded"
    assert "q2_test" in rows["edited_test"]["reasons"][0] and "edited" in \
        rows["edited_test"]["reasons"][0]
    with open(course / "grade-reports" / "ps1.csv") as f:
        assert {r["student"] for r in csv.DictReader(f)} == set(stock)
    assert "6 submissions" in proc.stdout and "edited_test" in proc.stdout


def test_nbgrader_workflow_continues_from_our_output(handmade):
    course, _, ours, _ = handmade
    for student in ours:
        assert (course / "autograded" / student / "ps1" / "ps1.ipynb").exists()
    nbgrader("export", course=course)
    with open(course / "grades.csv") as f:
        exported = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f)}
    assert exported == {s: v[0] for s, v in ours.items()}
    nbgrader("generate_feedback", "ps1", "--student", "visible_only", "--force", course=course)
    html = (course / "feedback" / "visible_only" / "ps1" / "ps1.html").read_text()
    text = unescape(re.sub(r"<[^>]+>", "", html))
    assert "square(-4) == 16" in text  # the hidden test, restored from the gradebook


def test_rerun_grades_only_what_is_missing_or_changed(handmade):
    """A re-run skips what is graded and unchanged; the class's record only grows: the rows of
    the learners a run did not grade (or skipped) stay those of the run that graded them."""
    course, _, ours, _ = handmade
    before = report(course, "ps1")
    proc = grade(course, "ps1", "--student", "full", "--student", "blank")
    assert "2 skipped" in proc.stdout
    data = json.loads((course / "grade-reports" / "ps1.json").read_text())
    assert data["this_run"] == {"blank": "skipped", "full": "skipped"}
    assert report(course, "ps1") == before
    # a newer submission of one student is graded again, the rest are not
    submit(course, "blank", answered(course, SOLVED))
    (course / "submitted" / "blank" / "ps1" / "timestamp.txt").write_text(
        "2099-01-01 00:00:00.000000 UTC")
    (course / "autograded" / "blank" / "ps1" / "timestamp.txt").write_text(
        "2000-01-01 00:00:00.000000 UTC")
    proc = grade(course, "ps1")
    assert "1 graded" in proc.stdout and "5 skipped" in proc.stdout, proc.stdout
    rows = report(course, "ps1")
    assert rows["blank"]["status"] == "graded" and rows["blank"]["score"] == 7
    assert rows["blank"]["run"] > before["blank"]["run"]
    assert {s: r for s, r in rows.items() if s != "blank"} == \
        {s: r for s, r in before.items() if s != "blank"}
    assert read_scores(course, "ps1")["full"].score == ours["full"][0]


def test_refuses_plainly_without_a_sandbox(handmade, tmp_path):
    """Run as an unprivileged user, where namespaces cannot be set up: exit 2, say why."""
    course = handmade[0]
    if sandbox_problem() is None:  # we can sandbox here: drop root to see the refusal
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
               sys.executable, "-m", "autograder", "grade", "ps1", "--course", str(course)]
    else:
        cmd = [sys.executable, "-m", "autograder", "grade", "ps1", "--course", str(course)]
    env = dict(nbgrader_env(), HOME=str(tmp_path))
    proc = subprocess.run(cmd, cwd="/", env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "cannot sandbox" in proc.stderr and "--no-sandbox" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_grade_help_lists_the_options():
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", "--help"],
                          capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0
    for opt in ("--workers", "--student", "--timeout", "--notebook-timeout", "--memory",
                "--force", "--no-sandbox"):
        assert opt in proc.stdout


def test_grades_a_released_assignment_the_gradebook_does_not_know(tmp_path):
    """Released through the exchange from a committed release/, never generated on this
    machine: `autograder grade` records the assignment itself (nbgrader's own
    generate_assignment, into a scratch release folder) and grades; release/ is untouched."""
    course = make_course(tmp_path)
    (course / "gradebook.db").unlink()
    released = (course / "release" / "ps1" / "ps1.ipynb").read_bytes()
    submit(course, "full", answered(course, SOLVED))
    submit(course, "blank", answered(course, {}))
    proc = grade(course, "ps1")
    assert "not in the gradebook yet" in proc.stderr
    rows = report(course, "ps1")
    assert {s: (r["status"], r["score"]) for s, r in rows.items()} == \
        {"full": ("graded", 7.0), "blank": ("graded", 0.0)}, proc.stdout
    assert (course / "release" / "ps1" / "ps1.ipynb").read_bytes() == released


def test_a_runaway_cell_is_stopped_at_its_measured_limit(tmp_path):
    """The course allows 120 s per cell; the solution's cells take milliseconds, so with
    `--cell-limit-floor 3` a learner's endless loop is interrupted after 3 s, reported with
    its limit and why; the other submissions score as under the fixed limit, and the loop's
    own submission loses only that (ungraded) cell."""
    course = make_course(tmp_path)
    cfg = course / "nbgrader_config.py"
    cfg.write_text(cfg.read_text().replace("timeout = 10", "timeout = 120"))
    loop = answered(course, SOLVED)
    for i, cell in enumerate(loop.cells):
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "q1_answer":
            loop.cells.insert(i + 1, nbformat.v4.new_code_cell("while True:\n    pass"))
            break
    submit(course, "loops", loop)
    submit(course, "full", answered(course, SOLVED))
    submit(course, "partial", answered(course, {"q2_answer": SOLVED["q2_answer"]}))
    grade(course, "ps1", "--no-calibrate", "--student", "full", "--student", "partial")
    fixed = as_table(read_scores(course, "ps1"))
    proc = grade(course, "ps1", "--force", "--cell-limit-floor", "3")
    ours = as_table(read_scores(course, "ps1"))
    assert {s: ours[s] for s in fixed} == fixed
    assert ours["loops"] == ours["full"]  # the loop cost its own cell, nothing else
    rows = report(course, "ps1")
    (why,) = [r for r in rows["loops"]["reasons"] if "limit" in r]
    assert "limit of 3 s" in why and "solution's" in why and "interrupted" in why, why
    assert rows["full"]["status"] == rows["partial"]["status"] == "graded"
    assert "cell limits from the solution's times" in proc.stdout
    meta = json.loads((course / "grade-reports" / "ps1.json").read_text())
    assert meta["cell_limits_measured"]["id:q1_answer"] < 3
    nb = nbformat.read(course / "autograded" / "loops" / "ps1" / "ps1.ipynb", as_version=4)
    assert any(o.get("ename") == "CellTimeoutError" for c in nb.cells if c.cell_type == "code"
               for o in c.outputs)
