"""A shared gradebook on a real PostgreSQL server (started by the test on 127.0.0.1).

The course's ``nbgrader_config.py`` takes the gradebook from ``NBGRADER_DB_URL``. On the
same submissions of ``01_leaves``, the tool chain runs against PostgreSQL: nbgrader's
``generate_assignment``, ``autograder grade``, stock ``nbgrader autograde``,
``generate_feedback``, ``export``, the Formgrader's data API and ``autograder report``; the
scores and the class report must equal those of the same submissions graded with the default
SQLite gradebook, and the report's numbers those its planted answers imply
(``known_answers.py``). A second grader on the same database (another course folder, so the
folder lock does not see it) is refused plainly.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import make_course
from known_answers import HALF, WATER, built, by, check_myths, check_rows, submit_class
from servers import Postgres, postgres_bin

from autograder import analytics
from autograder.grading.sandbox import sandbox_problem
from autograder.grading.state import DatabaseLock
from autograder.pipeline import nbgrader_env

pytestmark = [pytest.mark.grading, pytest.mark.slow]

ASSIGNMENT = "01_leaves"
COURSE_ID = "leaf-tensors"
SANDBOX_ARGS = [] if sandbox_problem() is None else ["--no-sandbox"]
#: learner -> (answer cells solved, None for all; planted wrong answers)
CLASS = {"full": (None, []), "partial": (HALF, [WATER]), "blank": (set(), [])}


def run(course: Path, *args: str, db: str | None, check: bool = True):
    env = nbgrader_env()
    env.pop("NBGRADER_DB_URL", None)
    if db:
        env["NBGRADER_DB_URL"] = db
    proc = subprocess.run([sys.executable, "-m", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=900)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def per_cell(db_url: str) -> dict[str, tuple[float, dict]]:
    from nbgrader.api import Gradebook

    out = {}
    with Gradebook(db_url, COURSE_ID) as gb:
        for sub in gb.assignment_submissions(ASSIGNMENT):
            cells = {g.name: g.score for nb in sub.notebooks for g in nb.grades}
            out[sub.student_id] = (sub.score, cells)
    return out


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    if postgres_bin() is None:
        if shutil.which("apt-get"):
            pytest.fail("PostgreSQL is not installed: `apt-get install postgresql` (.ci/run "
                        "installs it)")
        pytest.skip("no PostgreSQL here")
    server = Postgres(tmp_path_factory.mktemp("pg")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def graded(pg, tmp_path_factory):
    """The same class graded into SQLite and into PostgreSQL."""
    courses = {}
    for kind in ("sqlite", "postgres"):
        course = make_course(tmp_path_factory.mktemp(kind))
        submit_class(course, CLASS)
        courses[kind] = course
    url = pg.createdb("gradebook")

    def grade(kind: str) -> None:
        db = url if kind == "postgres" else None
        run(courses[kind], "nbgrader", "generate_assignment", ASSIGNMENT, "--force", db=db)
        run(courses[kind], "autograder", "grade", ASSIGNMENT, "--workers", "2", *SANDBOX_ARGS,
            db=db)

    with ThreadPoolExecutor(2) as pool:  # the two courses side by side (their kernels wait)
        list(pool.map(grade, courses))
    sqlite = per_cell(f"sqlite:///{courses['sqlite'] / 'gradebook.db'}")
    ours = per_cell(url)
    reports = {"sqlite": report(courses["sqlite"], None, tmp_path_factory.mktemp("r-sqlite")),
               "postgres": report(courses["postgres"], url, tmp_path_factory.mktemp("r-pg"))}
    return courses["postgres"], url, sqlite, ours, reports


def report(course: Path, db: str | None, out: Path) -> dict:
    """``autograder report``'s CSV files, built in this process on the gradebook ``db``."""
    old = os.environ.pop("NBGRADER_DB_URL", None)
    if db:
        os.environ["NBGRADER_DB_URL"] = db
    try:
        analytics.build(course, [ASSIGNMENT], out=out)
    finally:
        os.environ.pop("NBGRADER_DB_URL", None)
        if old is not None:
            os.environ["NBGRADER_DB_URL"] = old
    got = built(out)
    got.pop("html")
    return got


def test_autograder_grade_on_postgres_gives_the_sqlite_scores(graded):
    course, url, sqlite, ours, _ = graded
    assert not (course / "gradebook.db").exists()  # everything went to the server
    assert set(ours) == {"full", "partial", "blank"}
    assert ours == sqlite
    assert ours["full"][0] > ours["partial"][0] > ours["blank"][0] == 0


def test_the_class_report_on_postgres_is_exact_and_the_sqlite_one(graded):
    _, _, _, _, reports = graded
    assert reports["postgres"] == reports["sqlite"]
    rep = reports["postgres"]
    check_rows(by(rep["questions"], "label"), CLASS)
    check_myths(rep["misconceptions"], CLASS, len(CLASS))
    assert [(r["key"], r["learner_ids"], r["questions"]) for r in rep["misconceptions"]] == \
        [("leaf_means_trainable", "partial", "Q1(tricky):1")]
    assert rep["attention"] == []


def test_stock_nbgrader_and_the_rest_of_the_chain_on_postgres(graded, tmp_path):
    course, url, sqlite, ours, reports = graded
    run(course, "nbgrader", "autograde", ASSIGNMENT, "--force", db=url)
    assert per_cell(url) == sqlite  # stock nbgrader, same database: same scores
    # its graded notebooks carry the same verdicts, replaced, not added: the same report
    assert report(course, url, tmp_path) == reports["postgres"]
    run(course, "nbgrader", "generate_feedback", ASSIGNMENT, "--force", db=url)
    for student in ours:
        assert (course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").exists()
    run(course, "nbgrader", "export", db=url)
    with open(course / "grade-reports" / "grades.csv") as f:
        exported = {r["student_id"]: float(r["raw_score"]) for r in csv.DictReader(f)
                    if r["assignment"] == ASSIGNMENT}
    assert exported == {s: v[0] for s, v in sqlite.items()}
    # the Formgrader's pages are served from nbgrader's API over the same gradebook
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    api = NbGraderAPI(coursedir=CourseDirectory(root=str(course), db_url=url,
                                                course_id=COURSE_ID))
    assignment = api.get_assignment(ASSIGNMENT)
    assert assignment["num_submissions"] == 3
    subs = {s["student"]: s for s in api.get_submissions(ASSIGNMENT)}
    assert {s: v["score"] for s, v in subs.items()} == {s: v[0] for s, v in sqlite.items()}


def test_a_second_grader_on_the_same_database_is_refused(graded, tmp_path):
    """Another course folder (another machine) on the same PostgreSQL gradebook."""
    course, url, _, _, _ = graded
    other = tmp_path / "other"
    shutil.copytree(course, other, ignore=shutil.ignore_patterns("autograded", "feedback"))
    holder = DatabaseLock(url, COURSE_ID)
    holder.acquire()  # what a running `autograder grade` holds for its whole run
    try:
        proc = run(other, "autograder", "grade", ASSIGNMENT, *SANDBOX_ARGS, db=url,
                   check=False)
    finally:
        holder.release()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "same gradebook" in proc.stderr and "Traceback" not in proc.stderr
    assert not (other / "autograded").exists()
    # released: the other folder now grades, into the same gradebook, without duplicates
    run(other, "autograder", "grade", ASSIGNMENT, "--workers", "2", *SANDBOX_ARGS, db=url)
    from nbgrader.api import Gradebook

    with Gradebook(url, COURSE_ID) as gb:
        assert len(gb.assignment_submissions(ASSIGNMENT)) == 3
