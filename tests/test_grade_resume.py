"""A grading run that is killed, interrupted or terminated part-way loses nothing.

A class of six real ``01_leaves`` submissions (full, blank and half-solved patterns) is graded
once without interruption: that is each submission's true score. Then copies of the same
course are graded by runs that die at several points (SIGKILL while sanitizing, while
executing, after scoring but before the submission is recorded as graded) or are stopped
with SIGINT (once: finish what runs; twice: abandon it) or SIGTERM, and are graded again
with the README's plain ``autograder grade``. Every learner must end with exactly the true
score, nothing may be reported skipped that was not scored, and the gradebook and
``autograded/`` must hold one entry per submission.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from helpers import answer_ids, make_course, submission, submit
from hostile.course import SOLVED, answered
from hostile.course import make_course as make_handmade
from hostile.course import submit as submit_handmade

from autograder.grading.sandbox import sandbox_problem
from autograder.pipeline import nbgrader, nbgrader_env, read_scores

pytestmark = [pytest.mark.grading, pytest.mark.slow]

ASSIGNMENT = "01_leaves"
CLASS_SIZE = 6
SANDBOX_ARGS = [] if sandbox_problem() is None else ["--no-sandbox"]


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    tmp.mkdir(exist_ok=True)
    return nbgrader_env({"TMPDIR": str(tmp), **extra})


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "autograder", "grade", ASSIGNMENT, "--workers", "2",
            *args, *SANDBOX_ARGS]


def run(course: Path, tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(*args), cwd=course, env=_env(tmp, **env), capture_output=True,
                          text=True, timeout=900, start_new_session=True)


def report(course: Path) -> dict:
    return json.loads((course / "grade-reports" / f"{ASSIGNMENT}.json").read_text())


def statuses(course: Path) -> dict[str, str]:
    """Each submission's status in the last run (the record's rows keep earlier runs')."""
    return report(course)["this_run"]


def ledger(course: Path) -> dict[str, str]:
    with sqlite3.connect(course / "gradebook.db") as db:
        try:
            rows = db.execute("select student, state from autograder_graded "
                              "where assignment = ?", (ASSIGNMENT,)).fetchall()
        except sqlite3.OperationalError:  # killed before the table was made
            return {}
    return dict(rows)


def scores(course: Path) -> dict[str, tuple[float, dict]]:
    return {s: (v.score, v.per_cell) for s, v in read_scores(course, ASSIGNMENT).items()}


def leftover_processes(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline[:200]}")
    return found


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """The course with its assignment generated and a class of six submitted (the runs below
    die at the second to fourth of them)."""
    root = tmp_path_factory.mktemp("resume")
    course = make_course(root)
    nbgrader("generate_assignment", ASSIGNMENT, "--force", course=course)
    ids = answer_ids(ASSIGNMENT)
    half = len(ids) // 2
    patterns = {
        "s1_full": set(ids), "s2_blank": set(), "s3_first_half": set(ids[:half]),
        "s4_second_half": set(ids[half:]), "s5_odd": set(ids[1::2]), "s6_one": set(ids[:1]),
    }
    for student, solve in patterns.items():
        submit(course, student, ASSIGNMENT, submission(ASSIGNMENT, solve=solve))
    return course


@pytest.fixture(scope="module")
def truth(template, tmp_path_factory):
    """Each submission's score from one uninterrupted run."""
    course = tmp_path_factory.mktemp("truth") / "course"
    shutil.copytree(template, course)
    proc = run(course, course.parent / "tmp")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = scores(course)
    assert len(got) == CLASS_SIZE and got["s1_full"][0] > got["s3_first_half"][0] > 0
    assert got["s2_blank"][0] == 0
    return got


def fresh(template: Path, tmp_path: Path) -> Path:
    course = tmp_path / "course"
    shutil.copytree(template, course)
    return course


def assert_resumed(course: Path, tmp: Path, truth: dict, before: dict[str, str]) -> dict:
    """Re-run as the README says; check everything; return the re-run's statuses."""
    proc = run(course, tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    st = statuses(course)
    assert len(st) == CLASS_SIZE and set(st.values()) <= {"graded", "problems", "skipped"}, st
    # skipped is exactly what the killed run had finished, and nothing else
    assert {s for s, v in st.items() if v == "skipped"} == \
        {s for s, v in before.items() if v == "graded"}, (st, before)
    assert scores(course) == truth
    rows = {r["student"]: r for r in report(course)["submissions"]}
    for student, score in truth.items():
        assert rows[student]["score"] == score[0], rows[student]
    for student, state in before.items():  # a half-graded submission is said to be so
        if state == "grading":
            assert "stopped part-way" in " ".join(rows[student]["reasons"]), rows[student]
    assert set(ledger(course).values()) == {"graded"} and len(ledger(course)) == CLASS_SIZE
    # one autograded folder per submission, each with its graded notebook
    folders = sorted(p.name for p in (course / "autograded").iterdir())
    assert folders == sorted(truth)
    for student in truth:
        nb = nbformat.read(course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb",
                           as_version=4)
        assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    # the killed run's scratch folder went with the re-run; no worker outlived it
    assert not list(tmp.glob("autograder-grade-*"))
    assert not leftover_processes(str(tmp))
    return st


@pytest.mark.parametrize("point", ["sanitize:4", "execute:3", "score:2"])
def test_killed_run_resumes_with_true_scores(template, truth, tmp_path, point):
    course = fresh(template, tmp_path)
    tmp = tmp_path / "tmp"
    proc = run(course, tmp, AUTOGRADER_CRASH_AT=point)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    before = ledger(course)
    assert before, "the crash came before any submission was started"
    if point == "score:2":  # the second submission's scores are written, not yet recorded
        assert "graded" in before.values() and "grading" in before.values(), before
    # the killed run's report says that it did not finish
    assert report(course)["finished"] is False
    deadline = time.monotonic() + 15  # its workers see their pipe close and exit
    while leftover_processes(str(tmp)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftover_processes(str(tmp))
    assert_resumed(course, tmp, truth, before)


PROGRESS = re.compile(r"^\[[#-]+\] \d+/\d+ done")  # the progress line, one per submission


def _start_and_signal(course: Path, tmp: Path, signals: list[int], after: int):
    """Start a run; after ``after`` submissions are done, send ``signals`` to it."""
    proc = subprocess.Popen(_cmd(), cwd=course, env=_env(tmp), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines, second, done = [], None, 0
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line)
        done += bool(PROGRESS.match(line))
        if done == after:
            if second is None:  # a second grader on the same course refuses plainly
                second = run(course, tmp)
            for sig in signals:
                proc.send_signal(sig)
                time.sleep(0.3)
            break
    out, err = proc.communicate(timeout=600)
    return proc.returncode, out, "".join(lines) + err, second


@pytest.mark.parametrize("signals", [[signal.SIGINT], [signal.SIGTERM],
                                     [signal.SIGINT, signal.SIGINT]],
                         ids=["sigint", "sigterm", "sigint-twice"])
def test_interrupted_run_stops_cleanly_and_resumes(template, truth, tmp_path, signals):
    course = fresh(template, tmp_path)
    tmp = tmp_path / "tmp"
    code, out, err, second = _start_and_signal(course, tmp, signals, after=2)
    assert code == 128 + signals[0], out + err
    assert "Traceback" not in err, err
    name = signal.Signals(signals[0]).name
    assert f"stopped by {name}" in err and "not graded" in err, err
    assert second.returncode == 2 and "is grading this course" in second.stderr, second
    rep = report(course)
    assert rep["finished"] is False and rep["stopped_by"] == name
    st = rep["this_run"]
    assert len(st) == CLASS_SIZE and set(st.values()) <= {"graded", "problems", "not graded"}, st
    assert "not graded" in st.values()
    # what the report calls graded is graded in the gradebook, with its true score; what
    # it calls not graded has nothing in autograded/ and no ledger row
    book = ledger(course)
    for student, status in st.items():
        if status == "not graded":
            assert student not in book
            assert not (course / "autograded" / student).exists()
        else:
            assert book[student] == "graded" and scores(course)[student] == truth[student]
    if len(signals) == 2:  # abandoned: the two being executed were rolled back
        abandoned = [r for r in rep["submissions"] if "being executed" in " ".join(r["reasons"])]
        assert abandoned, rep["submissions"]
    assert_resumed(course, tmp, truth, book)


def test_a_second_run_waits_with_wait(template, tmp_path):
    """``--wait``: starts when the first run has released the course."""
    course = fresh(template, tmp_path)
    tmp = tmp_path / "tmp"
    first = subprocess.Popen(_cmd("--student", "s1_full", "--student", "s2_blank"), cwd=course,
                             env=_env(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    lock = course / ".autograder-grade.lock"
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    second = run(course, tmp, "--wait", "--student", "s1_full", "--student", "s2_blank")
    first.communicate(timeout=600)
    assert first.returncode == 0
    assert second.returncode == 0, second.stdout + second.stderr
    assert "waiting for" in second.stderr
    assert set(statuses(course).values()) == {"skipped"}


def test_stock_graded_course_is_resumed_by_its_scores(tmp_path):
    """Graded by stock ``nbgrader autograde`` (no ledger): skipped when every grade cell has
    a score; a submission whose scores are missing (a run killed before scoring it) is
    graded again instead of being skipped."""
    course = make_handmade(tmp_path)
    for student in ("a", "b", "c"):
        submit_handmade(course, student, answered(course, SOLVED))
    nbgrader("autograde", "ps1", "--force", course=course)
    with sqlite3.connect(course / "gradebook.db") as db:  # as a killed run leaves "b"
        db.execute("update grade set auto_score = NULL where notebook_id in (select n.id from "
                   "submitted_notebook n join submitted_assignment a on n.assignment_id = a.id "
                   "where a.student_id = 'b')")
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", "ps1", *SANDBOX_ARGS],
                          cwd=course, env=_env(tmp_path / "tmp"), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((course / "grade-reports" / "ps1.json").read_text())
    rows = {r["student"]: r for r in record["submissions"]}
    assert record["this_run"] == {"a": "skipped", "b": "graded", "c": "skipped"}
    assert "stopped part-way" in rows["b"]["reasons"][0]
    assert {s: v.score for s, v in read_scores(course, "ps1").items()} == \
        {"a": 7, "b": 7, "c": 7}


def test_a_stopped_run_reports_earlier_grades_as_graded(tmp_path):
    """Stopped before it reached them, a run lists what an earlier run graded as skipped
    (graded, untouched), not as "not graded"; only what is really ungraded is said to be."""
    course = make_handmade(tmp_path)
    for student in ("a0", "a1", "a2"):
        submit_handmade(course, student, answered(course, SOLVED))
    env = _env(tmp_path / "tmp")
    cmd = [sys.executable, "-m", "autograder", "grade", "ps1", "--workers", "2", *SANDBOX_ARGS]
    first = subprocess.run(cmd, cwd=course, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    for i in range(12):
        submit_handmade(course, f"b{i:02d}", answered(course, SOLVED))
    proc = subprocess.Popen(cmd, cwd=course, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        if PROGRESS.match(line):  # the first one done (a0, skipped): stop
            proc.send_signal(signal.SIGINT)
            break
    proc.communicate(timeout=600)
    assert proc.returncode == 128 + signal.SIGINT
    record = json.loads((course / "grade-reports" / "ps1.json").read_text())
    rows, this_run = {r["student"]: r for r in record["submissions"]}, record["this_run"]
    assert {s: this_run[s] for s in ("a0", "a1", "a2")} == dict.fromkeys(
        ("a0", "a1", "a2"), "skipped"), this_run
    assert all(rows[s]["score"] == 7 and rows[s]["status"] == "graded"
               for s in ("a0", "a1", "a2"))  # the record keeps the run that graded them
    assert "not graded" in {v for s, v in this_run.items() if s.startswith("b")}
