"""Grades out of the gradebook: ``nbgrader export`` that tells "not graded" from 0, and
``autograder export --lms`` for Canvas or Moodle.

nbgrader's own CSV export writes 0.0 for a submission that could not be graded (a missing or
renamed notebook, invalid JSON, a run stopped before it), exactly as for a blank hand-in, and
an instructor who uploads it tells a learner they scored 0 for work nobody looked at. Here every
(assignment, learner) gets a :class:`Standing`: a status (``graded``, ``graded with
problems``, ``not graded``, ``not submitted``), the reason, and for graded work the raw score
(manual grades from the Formgrader included), the late penalty and the final score. The late
penalty is the course's policy (:mod:`autograder.deadlines`) applied to the current raw score
and the submission's lateness, so a grade changed by hand after autograding is penalised as the
policy says, not as the autograde run computed it.

* :class:`StatusCsvExportPlugin` is the course's ``ExportApp.plugin_class``: ``nbgrader
  export`` writes nbgrader's columns in nbgrader's order, then ``status`` and ``reason``; a
  submission that was not graded has empty score columns, never 0; a learner who submitted
  nothing keeps nbgrader's 0 and says so. The file goes to ``grade-reports/grades.csv`` unless
  ``--to`` says otherwise (``grade-reports/`` is ignored by git).
* :func:`lms_export` writes what Canvas's and Moodle's gradebook import read (see
  ``docs/deadlines.md``), learners named by the LMS's ids from a roster the instructor provides.

A submission folder that holds no notebook at all (nbgrader records nothing for it) still gets a
row, from ``autograder grade``'s record of the class. Fields are written with Python's ``csv``
module, so a comma in a name stays in its column.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import CsvExportPlugin

from autograder.deadlines import Policy, format_duration

COLUMNS = ["assignment", "duedate", "timestamp", "student_id", "last_name", "first_name",
           "email", "raw_score", "late_submission_penalty", "score", "max_score", "status",
           "reason"]


def _record(root: Path, assignment: str) -> dict[str, dict]:
    """student -> their row in ``autograder grade``'s record of the class (if any)."""
    try:
        rows = json.loads((root / "grade-reports" / f"{assignment}.json").read_text())
        rows = rows["submissions"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {r["student"]: r for r in rows if isinstance(r, dict) and "student" in r}


def _ledger(engine) -> dict[tuple[str, str], str]:
    """(assignment, student) -> the grader's ledger state (``grading`` / ``graded``)."""
    import sqlalchemy as sa

    from autograder.grading.state import graded_table as t

    if not sa.inspect(engine).has_table(t.name):
        return {}
    with engine.connect() as conn:
        rows = conn.execute(sa.select(t.c.assignment, t.c.student, t.c.state)).all()
    return {(r[0], r[1]): r[2] for r in rows}


def _reasons(row: dict | None) -> str:
    return "; ".join(str(x) for x in (row or {}).get("reasons") or [])


@dataclass
class Standing:
    """Where one learner stands on one assignment."""

    assignment: str
    student: str
    max_score: float
    status: str  # graded | graded with problems | not graded | not submitted
    reason: str = ""
    raw: float | None = None  # the gradebook's score, manual grades included
    penalty: float | None = None  # the late policy's share of it
    score: float | None = None  # what the learner gets: raw - penalty
    late_seconds: float = 0.0
    timestamp: object = None
    duedate: object = None
    first_name: str = ""
    last_name: str = ""
    email: str = ""

    @property
    def graded(self) -> bool:
        return self.score is not None

    def late_text(self) -> str:
        """``late by 1 d 2 h: -2.6 (10%)`` (empty when on time)."""
        if not self.late_seconds:
            return ""
        text = f"late by {format_duration(self.late_seconds)}"
        if self.penalty:
            text += f": -{round(self.penalty, 4):g}" + (
                f" ({self.penalty / self.raw:.0%})" if self.raw else "")
        elif self.score is not None:
            text += ", no penalty"
        return text


def standings(gradebook: Gradebook, root: Path, policy: Policy | None,
              assignments: set[str] | None = None,
              students: set[str] | None = None) -> list[Standing]:
    """Every (assignment, learner) the gradebook or the grade-run record knows, in order."""
    ledger = _ledger(gradebook.engine)
    known = {s.id: s for s in gradebook.students}
    out = []
    for assignment in gradebook.assignments:
        if assignments and assignment.name not in assignments:
            continue
        record = _record(root, assignment.name)
        for sid in sorted(set(known) | set(record)):
            if students and sid not in students:
                continue
            out.append(_standing(gradebook, assignment, sid, known.get(sid), record.get(sid),
                                 ledger.get((assignment.name, sid)), policy))
    return out


def _standing(gradebook: Gradebook, assignment, sid: str, student, run: dict | None,
              ledger_state: str | None, policy: Policy | None) -> Standing:
    st = Standing(assignment.name, sid, float(assignment.max_score or 0.0), "",
                  duedate=assignment.duedate,
                  first_name=getattr(student, "first_name", None) or "",
                  last_name=getattr(student, "last_name", None) or "",
                  email=getattr(student, "email", None) or "")
    try:
        submission = gradebook.find_submission(assignment.name, sid)
    except MissingEntry:
        if run is not None and run.get("status") in ("failed", "not graded"):
            st.status, st.reason = "not graded", _reasons(run)
        else:  # nothing submitted: nbgrader's 0, said plainly
            st.status, st.reason = "not submitted", "no submission"
            st.raw, st.penalty, st.score = 0.0, 0.0, 0.0
        return st
    st.timestamp = submission.timestamp
    unscored = [g.name for nb in submission.notebooks for g in nb.grades
                if g.auto_score is None and g.manual_score is None]
    status = (run or {}).get("status")
    if status in ("failed", "not graded") or ledger_state == "grading" or (
            unscored and status not in ("graded", "problems", "skipped")):
        st.status = "not graded"
        st.reason = _reasons(run) or (
            "a grading run started on it and did not finish" if ledger_state == "grading"
            else f"no score for {len(unscored)} graded cell(s)")
        return st
    st.raw = float(submission.score)
    st.late_seconds = float(submission.total_seconds_late or 0.0)
    if policy is not None:
        share, _grace = policy.share(st.late_seconds)
        st.penalty = round(min(st.raw, st.raw * round(share, 6)), 6)
    else:
        st.penalty = float(submission.late_submission_penalty or 0.0)
    st.score = max(0.0, st.raw - st.penalty)
    if status == "problems":
        st.status, st.reason = "graded with problems", _reasons(run)
    else:
        st.status = "graded"
    return st


def _write_csv(dest: Path, header: list[str], rows: list[list | dict]) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        if rows and isinstance(rows[0], dict):
            writer = csv.DictWriter(f, header)
            writer.writeheader()
            writer.writerows(rows)
        else:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)
    os.replace(tmp, dest)


def _blank(value) -> str | float:
    return "" if value is None else value


class StatusCsvExportPlugin(CsvExportPlugin):
    """nbgrader's CSV, plus ``status`` and ``reason``; not-graded submissions left blank."""

    def export(self, gradebook: Gradebook) -> None:
        coursedir = getattr(self.parent, "coursedir", None)
        root = Path(coursedir.root) if coursedir is not None else Path.cwd()
        dest = Path(self.to) if self.to else root / "grade-reports" / "grades.csv"
        self.log.info("Exporting grades (with each submission's status) to %s", dest)
        try:
            policy = Policy.from_config(self.config, root)
        except (ValueError, TypeError):
            policy = None
        rows = [{"assignment": s.assignment, "duedate": _blank(s.duedate),
                 "timestamp": _blank(s.timestamp), "student_id": s.student,
                 "last_name": s.last_name, "first_name": s.first_name, "email": s.email,
                 "raw_score": _blank(s.raw), "late_submission_penalty": _blank(s.penalty),
                 "score": _blank(s.score), "max_score": s.max_score, "status": s.status,
                 "reason": "; ".join(x for x in (s.reason, s.late_text()) if x)}
                for s in standings(gradebook, root, policy, {str(a) for a in self.assignment},
                                   {str(s) for s in self.student})]
        _write_csv(dest, COLUMNS, rows)


# ------------------------------------------------------------------------------- LMS
#: the roster's columns for each LMS, and the header each LMS expects for them
CANVAS_COLUMNS = [("name", "Student"), ("canvas_id", "ID"), ("sis_user_id", "SIS User ID"),
                  ("sis_login_id", "SIS Login ID"), ("section", "Section")]
MOODLE_IDS = [("email", "Email address"), ("username", "Username"), ("idnumber", "ID number")]


class RosterError(ValueError):
    """The roster file is missing, unreadable or lacks what the LMS needs."""


def read_roster(path: Path, lms: str) -> dict[str, dict[str, str]]:
    """nbgrader student id -> the LMS's columns for them (see ``docs/deadlines.md``)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except FileNotFoundError:
        raise RosterError(f"no roster at {path}: write one with a student_id column and the "
                          f"{lms} columns (docs/deadlines.md), or pass --roster") from None
    if not rows or "student_id" not in rows[0]:
        raise RosterError(f"{path} has no student_id column (the nbgrader ids)")
    need = [c for c, _ in (CANVAS_COLUMNS if lms == "canvas" else MOODLE_IDS)]
    if lms == "canvas" and not ({"canvas_id", "sis_user_id", "sis_login_id"} & set(rows[0])):
        raise RosterError(f"{path} names nobody for Canvas: give canvas_id, sis_user_id or "
                          "sis_login_id")
    if lms == "moodle" and not (set(need) & set(rows[0])):
        raise RosterError(f"{path} names nobody for Moodle: give email, username or idnumber")
    return {r["student_id"].strip(): r for r in rows if r.get("student_id", "").strip()}


@dataclass
class LmsExport:
    path: Path
    notes: Path | None
    rows: int
    unmapped: list[str]  # learners the gradebook knows and the roster does not
    not_graded: list[Standing]


def lms_export(gradebook: Gradebook, root: Path, policy: Policy | None, lms: str,
               roster: dict[str, dict[str, str]], out: Path,
               assignments: list[str] | None = None) -> LmsExport:
    """Write ``out`` for ``lms`` (``canvas`` or ``moodle``)."""
    all_standings = standings(gradebook, root, policy, set(assignments or []) or None)
    names = [a.name for a in gradebook.assignments
             if not assignments or a.name in assignments]
    by_student: dict[str, dict[str, Standing]] = {}
    maxima: dict[str, float] = {}
    for s in all_standings:
        by_student.setdefault(s.student, {})[s.assignment] = s
        maxima[s.assignment] = s.max_score
    unmapped = sorted(s for s in by_student if s not in roster)
    not_graded = [s for s in all_standings if s.status == "not graded"]
    learners = list(roster)
    if lms == "canvas":
        header = [h for _, h in CANVAS_COLUMNS] + names
        rows: list[list] = [["Points Possible", "", "", "", ""] + [maxima.get(a, "")
                                                                     for a in names]]
        for sid in learners:
            r = roster[sid]
            marks = by_student.get(sid, {})
            rows.append([r.get(c, "") for c, _ in CANVAS_COLUMNS]
                        + [_blank(marks[a].score) if a in marks else "" for a in names])
        _write_csv(out, header, rows)
        notes = out.with_name(out.stem + "-notes.csv")
        _write_csv(notes, ["student_id", "canvas_id", "assignment", "status", "score",
                           "late", "reason"],
                   [[s.student, roster.get(s.student, {}).get("canvas_id", ""), s.assignment,
                     s.status, _blank(s.score), s.late_text(), s.reason]
                    for s in all_standings if s.status != "graded" or s.late_seconds])
        return LmsExport(out, notes, len(rows) - 1, unmapped, not_graded)
    key, label = next((c, h) for c, h in MOODLE_IDS if any(r.get(c) for r in roster.values()))
    header = [label]
    for a in names:
        header += [a, f"{a} feedback"]
    rows = []
    for sid in learners:
        marks = by_student.get(sid, {})
        row = [roster[sid].get(key, "")]
        for a in names:
            s = marks.get(a)
            if s is None:
                row += ["", ""]
                continue
            feedback = "; ".join(x for x in (
                "" if s.status in ("graded", "not submitted") else f"{s.status}: {s.reason}",
                "no submission" if s.status == "not submitted" else "", s.late_text()) if x)
            row += [_blank(s.score), feedback]
        rows.append(row)
    _write_csv(out, header, rows)
    return LmsExport(out, None, len(rows), unmapped, not_graded)
