"""``autograder report``: the class report's numbers are exactly those of the answers planted.

One small class of ``01_leaves`` is built from the release notebook with known answers: full,
planted wrong answers whose misconception is unambiguous (simple True/False predict items),
half solved, blank, a submission that cannot be graded, and a learner on the gradebook's list
who never submitted; a previous assignment is added to the gradebook for the drop check. It is
graded once with ``autograder grade``. Every expected number below is computed from the
planted answers (which cells they fail, which misconception they name), never read from the
report. Then one learner changes an answer and is graded again: the report shows the change
and counts nothing twice. The PostgreSQL gradebook is covered by ``tests/test_postgres.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import nbformat
import pytest
from helpers import make_course, planted, read, submit
from known_answers import (
    ASSIGNMENT,
    FLOUR_RECIPE,
    HALF,
    MEAT_RECIPE,
    PARCEL_WARNS,
    SALT,
    STATION_SILENT,
    WATER,
    Plant,
    built,
    by,
    check_myths,
    check_rows,
    expected_myths,
    percent,
    submit_class,
)

from autograder import analytics
from autograder.grading.sandbox import sandbox_problem
from autograder.misconceptions import MISCONCEPTIONS
from autograder.pipeline import nbgrader_env

pytestmark = [pytest.mark.grading, pytest.mark.slow]

COURSE_ID = "leaf-tensors"
SANDBOX_ARGS = [] if sandbox_problem() is None else ["--no-sandbox"]

#: learner -> (answer cells solved, None for all; planted wrong answers)
CLASS: dict[str, tuple[set[str] | None, list[Plant]]] = {
    "ada01": (None, []),
    "bo02": (None, [WATER]),
    "cy03": (None, [WATER, PARCEL_WARNS]),  # one misconception, revealed by two questions
    "di04": (None, [STATION_SILENT, FLOUR_RECIPE]),
    "ed05": (HALF, [SALT]),
    "flo06": (set(), []),  # handed in untouched
}
NOT_SUBMITTED = "gus07"  # on the gradebook's list, never submitted
BROKEN = "hal08"  # a notebook that is not JSON: the grader cannot grade it
#: the previous assignment's percentages (put in the gradebook by the fixture)
WARMUP = {"ada01": 100.0, "bo02": 100.0, "ed05": 50.0, "flo06": 90.0}
REGRADE = ("bo02", [MEAT_RECIPE])  # bo02 fixes Q1 and gets Q2 wrong instead


# ---------------------------------------------------------------------------- the class
def run(course: Path, *args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    env = nbgrader_env()
    env.pop("NBGRADER_DB_URL", None)
    proc = subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course, env=env,
                          capture_output=True, text=True, timeout=900)
    if check is not None:
        assert proc.returncode == check, proc.stdout + proc.stderr
    return proc


def add_previous_assignment(course: Path) -> None:
    from nbgrader.api import Gradebook
    from sqlalchemy.exc import SAWarning

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission warns
        gb.add_assignment("00_warmup")
        gb.add_notebook("00_warmup", "00_warmup")
        gb.add_grade_cell("w1", "00_warmup", "00_warmup", max_score=10.0, cell_type="code")
        for student, pct in WARMUP.items():
            gb.update_or_create_student(student)
            gb.add_submission("00_warmup", student)
            grade = gb.find_grade("w1", "00_warmup", "00_warmup", student)
            grade.auto_score = pct / 10
        gb.update_or_create_student(NOT_SUBMITTED)
        gb.db.commit()


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The class graded once; its report (built by the command) read back; a copy of the
    graded course kept for the broken-notebook test."""
    course = make_course(tmp_path_factory.mktemp("report"))
    submit_class(course, CLASS)
    bad = submit(course, BROKEN, ASSIGNMENT, planted(ASSIGNMENT))
    bad.write_text('{"cells": [')  # not JSON: the grader reports it failed
    proc = run(course, "grade", ASSIGNMENT, "--workers", "2", "--no-calibrate", "--quiet",
               *SANDBOX_ARGS, check=1)
    assert "failed" in proc.stdout
    add_previous_assignment(course)
    broken = tmp_path_factory.mktemp("broken") / "course"
    shutil.copytree(course, broken)
    report = run(course, "report", ASSIGNMENT, "--out", str(course / "out1"))
    return course, broken, built(course / "out1"), report.stdout


# --------------------------------------------------------------------------------- tests
def test_misconceptions_are_counted_exactly(graded):
    _, _, rep, stdout = graded
    check_myths(rep["misconceptions"], CLASS, len(CLASS))
    # the two answers of cy03 that reveal one belief count one learner
    lmt = by(rep["misconceptions"], "key")["leaf_means_trainable"]
    assert (lmt["learners"], lmt["questions"]) == ("2", "Q1(tricky):2 Q4:1")
    assert "thinks leaf means trainable" in stdout and "misconceptions to re-teach" in stdout
    html = rep["html"]
    for key in expected_myths(CLASS):
        assert analytics.html.escape(MISCONCEPTIONS[key].name) in html


def test_per_question_statistics_are_exact(graded):
    _, _, rep, _ = graded
    check_rows(by(rep["questions"], "label"), CLASS)
    learners = by(rep["learners"], "learner")
    for student, (solve, plants) in CLASS.items():
        assert learners[student]["status"] == "graded"
        assert float(learners[student]["percent"]) == pytest.approx(percent(solve, plants),
                                                                    abs=0.01)
        assert set(learners[student]["misconceptions"].split()) == {p.myth for p in plants}


def test_who_needs_attention(graded):
    _, _, rep, stdout = graded
    att = [(a["learner"], a["why"]) for a in rep["attention"]]
    drops = [s for s, pct in WARMUP.items() if pct - percent(*CLASS[s]) >= analytics.DEFAULT_DROP]
    assert drops == ["flo06"]  # the class is built so: one drop, and bo02/ed05 below the bar
    assert att == [(BROKEN, "failed to grade"), (NOT_SUBMITTED, "not submitted"),
                   *[(s, "large drop") for s in drops]]
    detail = by(rep["attention"], "learner")
    assert "not valid JSON" in detail[BROKEN]["detail"]  # the grader's own reason
    assert "00_warmup" in detail["flo06"]["detail"]
    assert f"{BROKEN} (failed to grade)" in stdout
    learners = by(rep["learners"], "learner")
    assert learners[BROKEN]["status"] == "failed"
    assert learners[NOT_SUBMITTED]["status"] == "not submitted"


def test_a_broken_or_missing_graded_notebook_is_reported_and_the_rest_builds(graded, tmp_path):
    _, course, _, _ = graded
    nb = f"{ASSIGNMENT}.ipynb"
    graded_nb = course / "autograded"
    (graded_nb / "di04" / ASSIGNMENT / nb).write_text("{ not json")
    (graded_nb / "cy03" / ASSIGNMENT / nb).unlink()
    stripped = read(graded_nb / "ed05" / ASSIGNMENT / nb)
    for cell in stripped.cells:  # graded by a version of the course that kept no verdicts
        for out in cell.get("outputs", []):
            out.get("data", {}).pop(analytics.MIME_TYPE, None)
        cell.metadata.pop("autograder", None)  # nor a verified record
    nbformat.write(stripped, str(graded_nb / "ed05" / ASSIGNMENT / nb))
    reports, page = analytics.build(course, [ASSIGNMENT], out=tmp_path)
    rep = built(tmp_path)
    reasons = {a["learner"]: a["detail"] for a in rep["attention"] if a["why"] == "failed to grade"}
    assert set(reasons) == {BROKEN, "cy03", "di04", "ed05"}
    assert "unreadable" in reasons["di04"] and "no autograded notebook" in reasons["cy03"]
    assert "no verdict" in reasons["ed05"]
    rest = {s: CLASS[s] for s in ("ada01", "bo02", "flo06")}
    check_rows(by(rep["questions"], "label"), rest)
    check_myths(rep["misconceptions"], rest, len(rest))
    assert page.exists() and "<img" in rep["html"]


def test_a_regraded_learner_replaces_the_old_answers(graded, tmp_path):
    course, _, first, _ = graded
    student, plants = REGRADE
    submit_class(course, {student: (None, plants)})
    proc = run(course, "grade", ASSIGNMENT, "--workers", "1", "--no-calibrate", *SANDBOX_ARGS,
               check=1)  # hal08 still fails
    assert re.search(rf"^{student}\s+graded", proc.stdout, re.M), proc.stdout
    assert re.search(r"^ada01\s+skipped", proc.stdout, re.M), proc.stdout  # only bo02 again
    after = dict(CLASS, **{student: (None, plants)})
    run(course, "report", ASSIGNMENT, "--out", str(tmp_path))
    rep = built(tmp_path)
    check_myths(rep["misconceptions"], after, len(after))
    check_rows(by(rep["questions"], "label"), after)
    mis = by(rep["misconceptions"], "key")
    assert set(mis["leaf_means_trainable"]["learner_ids"].split()) == {"cy03"}
    assert set(mis["grad_fn_on_leaf"]["learner_ids"].split()) == {"di04", student}
    learners = by(rep["learners"], "learner")
    assert len(rep["learners"]) == len(first["learners"])
    assert learners[student]["misconceptions"] == "grad_fn_on_leaf"


def test_anonymous_report_hides_every_id_consistently(graded, tmp_path):
    course, _, _, _ = graded
    proc = run(course, "report", ASSIGNMENT, "--anonymous", "--out", str(tmp_path / "anon"))
    analytics.build(course, [ASSIGNMENT], out=tmp_path / "plain")  # the same state, with ids
    rep, plain = built(tmp_path / "anon"), built(tmp_path / "plain")
    ids = [*CLASS, NOT_SUBMITTED, BROKEN]
    texts = [re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", rep["html"]), proc.stdout]
    for name in ("questions", "misconceptions", "learners", "attention"):
        texts.append((tmp_path / "anon" / ASSIGNMENT / f"{name}.csv").read_text())
    for text in texts:
        for student in ids:
            assert student not in text
    # the same learner has the same alias in every file: compare with the plain report
    real = {r["learner"]: r for r in plain["learners"]}
    alias = {r["learner"]: r for r in rep["learners"]}
    assert sorted(alias) == [f"learner {i:02d}" for i in range(1, len(ids) + 1)]
    mapping = dict(zip(sorted(real), sorted(alias), strict=True))  # aliases follow id order
    for student, a in mapping.items():
        assert {k: v for k, v in alias[a].items() if k not in ("learner", "reasons")} == \
            {k: v for k, v in real[student].items() if k not in ("learner", "reasons")}
    for r, p in zip(rep["misconceptions"], plain["misconceptions"], strict=True):
        assert set(re.findall(r"learner \d+", r["learner_ids"])) == \
            {mapping[s] for s in p["learner_ids"].split()}
    assert [(mapping[p["learner"]], p["why"]) for p in plain["attention"]] == \
        [(a["learner"], a["why"]) for a in rep["attention"]]


@pytest.mark.browser
def test_report_opens_offline_in_chromium_with_its_figures(graded, playwright_chromium):
    from browser.conftest import ARTIFACTS, CHROMIUM_FLAGS

    course, _, _, _ = graded
    page_path = course / "out1" / ASSIGNMENT / "index.html"
    p, chromium = playwright_chromium  # the session's one Playwright (tests/conftest.py)
    requests, errors = [], []
    browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
    context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    context.route("**/*", lambda route: (requests.append(route.request.url),
                                         route.continue_() if route.request.url.startswith(
                                             ("file://", "data:")) else route.abort()))
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_path.as_uri(), wait_until="load")
    images = page.eval_on_selector_all(
        "img", "els => els.map(e => [e.complete, e.naturalWidth, e.alt])")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "class-report.png"), full_page=True)
    title = page.title()
    browser.close()
    assert title == f"{ASSIGNMENT}: class report"
    assert [u for u in requests if not u.startswith(("file://", "data:"))] == []
    assert len(images) == 3 and all(done and width > 300 for done, width, _ in images), images
    assert errors == []
