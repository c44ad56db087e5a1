"""Deadlines, extensions and late penalties, and grades an LMS imports (issue: late policy).

The rule itself is tested on plain values (autograder/deadlines.py). Then a class of the
hand-made ``ps1`` (every submission fully right: 7 points) handed in at controlled times is
graded by real ``autograder grade`` and by stock ``nbgrader autograde``: on time, within the
grace period, one hour, a day and two hours, and eight days late, one late hand-in covered by an
extension, and one re-submitted on time; both graders must write the same penalties into the
gradebook. An extension granted (and revoked) after grading is re-applied without a run, and a
re-submission that is no longer late loses its penalty (nbgrader #723). The exports are read
back as Canvas and Moodle read them.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hostile.course import SOLVED, answered, copy_course, make_course, submit

from autograder.deadlines import Policy, describe, format_duration, parse_duration
from autograder.grading.sandbox import sandbox_problem
from autograder.pipeline import nbgrader, nbgrader_env

SANDBOX_ARGS = [] if sandbox_problem() is None else ["--no-sandbox"]
ROOT = Path(__file__).resolve().parent.parent

DUE = "2027-03-01 12:00"  # in the course's zone, Europe/Berlin (UTC+1 then)
POLICY = f'''
c.LatePolicy.timezone = "Europe/Berlin"
c.LatePolicy.due = {{"ps1": "{DUE}"}}
c.LatePolicy.grace = "15m"
c.LatePolicy.per = "day"
c.LatePolicy.penalty = 0.10
c.LatePolicy.cap = 0.50
c.LatePolicy.zero_after = "7d"
c.LatePolicy.extensions_file = "extensions.csv"
c.Autograde.autograde_preprocessors = [
    "nbgrader.preprocessors.Execute", "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor", "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades", "autograder.grading.late.ApplyLatePolicy",
    "nbgrader.preprocessors.CheckCellMetadata"]
c.ExportApp.plugin_class = "autograder.grading.export.StatusCsvExportPlugin"
'''

#: student -> (minutes after the due date handed in, expected penalty on 7 points)
CLASS = {
    "on_time": (-30, None),
    "in_grace": (10, None),
    "hour_late": (60, 0.7),  # one started day: 10 %
    "day_late": (26 * 60, 1.4),  # two started days: 20 %
    "week_late": (8 * 24 * 60, 7.0),  # past zero_after: everything
    "extended": (26 * 60, None),  # a day late, but has two days' extension
    "resubmits": (60, None),  # first an hour late, then again on time (below)
}


# ------------------------------------------------------------------------------ the rule
def test_durations_read_and_write_as_people_write_them():
    assert parse_duration("15m") == 900 and parse_duration("1d12h") == 129600
    assert parse_duration("") == 0 and parse_duration(90) == 90
    with pytest.raises(ValueError):
        parse_duration("two days")
    assert format_duration(3 * 3600 + 600) == "3 h 10 min"
    assert format_duration(2 * 86400 + 4 * 3600 + 7) == "2 d 4 h"


def test_the_policy_takes_a_share_per_started_day_after_grace_up_to_the_cap():
    p = Policy(due={"a": DUE}, timezone="Europe/Berlin", grace=900, per="day", penalty=0.1,
               cap=0.5, zero_after=7 * 86400)
    minutes = {-5: (0.0, False), 10: (0.0, True), 16: (0.1, False), 60 * 24 + 1: (0.2, False),
               60 * 24 * 6: (0.5, False), 60 * 24 * 8: (1.0, False)}
    for m, (share, grace) in minutes.items():
        got = p.share(m * 60)
        assert (round(got[0], 6), got[1]) == (share, grace), m
    hourly = Policy(due={"a": DUE}, per="hour", penalty=0.05, cap=1.0)
    assert round(hourly.share(2.5 * 3600)[0], 6) == 0.15


def test_a_learner_is_told_when_it_is_due_and_what_now_would_cost():
    p = Policy(due={"a": DUE}, timezone="Europe/Berlin", grace=900, penalty=0.1, cap=0.5,
               zero_after=7 * 86400)
    due = p.due_date("a")
    assert describe(p, "a", "x", due - dt.timedelta(hours=50)) == \
        "Due 2027-03-01 12:00 CET: 2 d 2 h left."
    assert "would be 3 h late and lose 10% of its score" in describe(
        p, "a", "x", due + dt.timedelta(hours=3), hand_in=True)
    assert "within the grace period: no penalty" in describe(
        p, "a", "x", due + dt.timedelta(minutes=5), hand_in=True)
    assert "it would score 0" in describe(p, "a", "x", due + dt.timedelta(days=9))
    assert describe(p, "b", "x", due) == ""  # no due date: nothing to say


# ------------------------------------------------------------------------- the graders
def _stamp(minutes: int) -> str:
    due = Policy(due={"ps1": DUE}, timezone="Europe/Berlin").due_date("ps1")
    when = (due + dt.timedelta(minutes=minutes)).astimezone(dt.timezone.utc)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _hand_in(course: Path, student: str, minutes: int) -> None:
    folder = submit(course, student, answered(course, SOLVED))
    (folder / "timestamp.txt").write_text(_stamp(minutes))


def _penalties(course: Path) -> dict[str, float | None]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.student_id: (s.late_submission_penalty or None)
                for s in gb.assignment_submissions("ps1")}


def _run(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=course,
                          env=nbgrader_env(), capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def late_class(tmp_path_factory):
    course = make_course(tmp_path_factory.mktemp("late"))
    cfg = course / "nbgrader_config.py"
    cfg.write_text(cfg.read_text() + POLICY)
    (course / "extensions.csv").write_text(
        "assignment,student,extension,reason,granted\nps1,extended,2d,illness,\n")
    for student, (minutes, _) in CLASS.items():
        _hand_in(course, student, minutes)
    stock = copy_course(course, tmp_path_factory.mktemp("late-stock") / "course")
    nbgrader("autograde", "ps1", course=stock)
    ours = _run(course, "grade", "ps1", "--workers", "2", "--no-calibrate", *SANDBOX_ARGS)
    assert ours.returncode == 0, ours.stdout + ours.stderr
    return course, stock, ours


def test_both_graders_apply_the_policy_alike(late_class):
    course, stock, _ = late_class
    want = {s: p for s, (_, p) in CLASS.items()}
    want["resubmits"] = 0.7  # an hour late, until it hands in again
    assert _penalties(course) == want
    assert _penalties(stock) == want


def test_the_grade_run_shows_each_late_hand_in(late_class):
    course, _, ours = late_class
    assert "1 d 2 h late, -1.4" in ours.stdout and "8 d" in ours.stdout, ours.stdout
    rows = {r["student"]: r for r in json.loads(
        (course / "grade-reports" / "ps1.json").read_text())["submissions"]}
    assert rows["day_late"]["score"] == pytest.approx(5.6)
    assert rows["day_late"]["penalty"] == pytest.approx(1.4)
    assert rows["on_time"]["late_seconds"] == 0 and rows["in_grace"]["penalty"] == 0


def test_an_extension_granted_after_grading_applies_at_once_and_can_be_revoked(late_class):
    course, _, _ = late_class
    granted = _run(course, "extend", "ps1", "day_late", "2d", "--reason", "flood")
    assert granted.returncode == 0, granted.stderr
    assert "due 2027-03-03 12:00 CET" in granted.stdout and "on time" in granted.stdout
    assert _penalties(course)["day_late"] is None  # re-applied, no run needed
    listed = _run(course, "extend", "--list")
    assert "ps1  day_late  2d  flood" in listed.stdout
    revoked = _run(course, "extend", "ps1", "day_late", "--revoke")
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert _penalties(course)["day_late"] == pytest.approx(1.4)


def test_a_resubmission_that_is_no_longer_late_loses_its_penalty(late_class):
    course, _, _ = late_class
    _hand_in(course, "resubmits", -5)
    again = _run(course, "grade", "ps1", "--student", "resubmits", "--no-calibrate",
                 *SANDBOX_ARGS)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _penalties(course)["resubmits"] is None


# ----------------------------------------------------------------------------- exports
def _set_manual_grade(course: Path, student: str, cell: str, score: float) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade = gb.find_grade(cell, "ps1", "ps1", student)
        grade.manual_score = score
        gb.db.commit()


@pytest.fixture(scope="module")
def exported(late_class, tmp_path_factory):
    course, _, _ = late_class
    # a grader lowers one learner's Q2 by hand in the Formgrader; one learner's notebook broke
    _set_manual_grade(course, "hour_late", "q2_test", 1.0)
    submit(course, "broken", raw='{"cells": [')
    run = _run(course, "grade", "ps1", "--student", "broken", "--no-calibrate", *SANDBOX_ARGS)
    assert run.returncode == 1  # could not be graded
    (course / "roster.csv").write_text(
        "student_id,name,canvas_id,sis_user_id,sis_login_id,section,email\n"
        + "".join(f"{s},\"Doe, {s}\",{100 + i},S{i},{s}@uni.example,A,{s}@uni.example\n"
                  for i, s in enumerate([*CLASS, "broken"])))
    canvas = _run(course, "export", "--lms", "canvas")
    moodle = _run(course, "export", "--lms", "moodle")
    return course, canvas, moodle


def _read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_canvas_reads_its_columns_ids_and_scores(exported):
    course, canvas, _ = exported
    assert canvas.returncode == 0, canvas.stdout + canvas.stderr
    rows = _read(course / "grade-reports" / "canvas.csv")
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "ps1"]
    assert rows[1][0] == "Points Possible" and float(rows[1][5]) == 7
    by_id = {r[1]: r for r in rows[2:]}
    assert by_id["100"][0] == "Doe, on_time" and float(by_id["100"][5]) == 7  # on time
    assert float(by_id["103"][5]) == pytest.approx(5.6)  # a day late: -20 %
    assert float(by_id["104"][5]) == 0  # a week late
    # the grader's manual 1 point on Q2 kept, then a started day late: (2 + 1 + 2) x 0.9
    assert float(by_id["102"][5]) == pytest.approx(4.5)
    assert by_id["107"][5] == ""  # broken: not graded, never 0
    notes = {(r[0], r[2]): r for r in _read(course / "grade-reports" / "canvas-notes.csv")[1:]}
    assert notes[("broken", "ps1")][3] == "not graded" and "not valid JSON" in \
        notes[("broken", "ps1")][6]
    assert "late by 1 d 2 h: -1.4 (20%)" in notes[("day_late", "ps1")][5]
    assert "not graded (left blank): broken ps1" in canvas.stdout


def test_moodle_reads_its_identifier_grade_and_feedback_columns(exported):
    course, _, moodle = exported
    assert moodle.returncode == 0, moodle.stdout + moodle.stderr
    rows = _read(course / "grade-reports" / "moodle.csv")
    assert rows[0] == ["Email address", "ps1", "ps1 feedback"]
    by_mail = {r[0]: r for r in rows[1:]}
    assert float(by_mail["day_late@uni.example"][1]) == pytest.approx(5.6)
    assert "late by 1 d 2 h" in by_mail["day_late@uni.example"][2]
    assert by_mail["broken@uni.example"][1] == ""
    assert by_mail["broken@uni.example"][2].startswith("not graded: ")


def test_nbgraders_own_export_shows_lateness_and_status(exported):
    course, _, _ = exported
    nbgrader("export", course=course)
    with open(course / "grade-reports" / "grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f)}
    assert rows["day_late"]["status"] == "graded" and "late by 1 d 2 h" in rows["day_late"][
        "reason"]
    assert float(rows["day_late"]["score"]) == pytest.approx(5.6)
    assert rows["broken"]["status"] == "not graded" and rows["broken"]["score"] == ""


def test_a_learner_missing_from_the_roster_is_named_not_dropped(exported, tmp_path):
    course, _, _ = exported
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,email\non_time,on_time@uni.example\n")
    run = _run(course, "export", "--lms", "moodle", "--roster", str(roster), "--out",
               str(tmp_path / "m.csv"))
    assert run.returncode == 1 and "day_late" in run.stderr and "left out" in run.stderr


def test_the_report_lists_late_hand_ins(exported, tmp_path):
    from autograder import analytics

    course, _, _ = exported
    reports, _page = analytics.build(course, ["ps1"], out=tmp_path)
    late = {a.student: a.detail for a in reports[0].attention if a.why == "late"}
    assert set(late) >= {"hour_late", "day_late", "week_late", "in_grace"}
    assert "1 d 2 h" in late["day_late"] and "took 1.4 point(s)" in late["day_late"]
    assert "no penalty" in late["in_grace"]


# --------------------------------------------------------------------- what learners see
def test_the_notebook_says_when_it_is_due_with_the_learners_extension(late_class, tmp_path):
    course, _, _ = late_class
    folder = course / "release" / "ps1"
    code = "import autograder; autograder._say_when_due('ps1')"
    for user, words in (("extended", "with your extension of 2 d"), ("someone", "Due 2027")):
        out = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True,
                             text=True, env=dict(nbgrader_env(), JUPYTERHUB_USER=user),
                             timeout=60)
        assert words in out.stdout, (user, out.stdout, out.stderr)


def test_the_course_runs_nbgraders_autograde_steps_with_the_late_step_swapped():
    """The course's list of autograde steps is nbgrader's own, in order, with its late-penalty
    step replaced by the course's policy and nothing else changed."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import AssignLatePenalties
    from traitlets.config.loader import PyFileConfigLoader
    from traitlets.utils.importstring import import_item

    from autograder.grading.late import ApplyLatePolicy

    config = PyFileConfigLoader("nbgrader_config.py", str(ROOT)).load_config()
    ours = [import_item(s) for s in config.Autograde.autograde_preprocessors]
    stock = Autograde.class_traits()["autograde_preprocessors"].default()
    assert ours == [ApplyLatePolicy if c is AssignLatePenalties else c for c in stock]
