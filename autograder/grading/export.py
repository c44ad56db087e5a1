"""``nbgrader export`` that tells "not graded" from 0 (the course's ``ExportApp.plugin_class``).

nbgrader's own CSV export writes 0.0 for a submission that could not be graded (a missing or
renamed notebook, invalid JSON, a run stopped before it), exactly as for a blank hand-in, and
an instructor who uploads it tells a learner they scored 0 for work nobody looked at. This
plugin writes nbgrader's columns, in nbgrader's order, then two more:

* ``status``: ``graded``, ``graded with problems``, ``not graded`` or ``not submitted``;
* ``reason``: why, in one line (from ``autograder grade``'s record of the class,
  ``grade-reports/ASSIGNMENT.json``, and the grader's ledger in the gradebook).

A submission that was not graded has empty score columns, never 0; a learner who submitted
nothing keeps nbgrader's 0 and says so. A submission folder that holds no notebook at all
(nbgrader records nothing for it) still gets a row, from the grade-run record. Fields are
written with Python's ``csv`` module, so a comma in a name stays in its column. The file goes
to ``grade-reports/grades.csv`` in the course root unless ``--to`` says otherwise
(``grade-reports/`` is ignored by git: learners' grades are never committed).
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import CsvExportPlugin

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


class StatusCsvExportPlugin(CsvExportPlugin):
    """nbgrader's CSV, plus ``status`` and ``reason``; not-graded submissions left blank."""

    def export(self, gradebook: Gradebook) -> None:
        root = Path(getattr(self.parent, "coursedir", None).root) \
            if getattr(self.parent, "coursedir", None) is not None else Path.cwd()
        dest = Path(self.to) if self.to else root / "grade-reports" / "grades.csv"
        dest.parent.mkdir(parents=True, exist_ok=True)
        only_students = {str(s) for s in self.student}
        only_assignments = {str(a) for a in self.assignment}
        self.log.info("Exporting grades (with each submission's status) to %s", dest)
        ledger = _ledger(gradebook.engine)
        rows = []
        for assignment in gradebook.assignments:
            if only_assignments and assignment.name not in only_assignments:
                continue
            record = _record(root, assignment.name)
            students = {s.id: s for s in gradebook.students}
            for sid in sorted(set(students) | set(record)):
                if only_students and sid not in only_students:
                    continue
                rows.append(self._row(gradebook, assignment, sid, students.get(sid),
                                      record.get(sid), ledger.get((assignment.name, sid))))
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, dest)

    @staticmethod
    def _row(gradebook: Gradebook, assignment, sid: str, student, run: dict | None,
             ledger_state: str | None) -> dict:
        row = {"assignment": assignment.name, "duedate": assignment.duedate or "",
               "student_id": sid, "max_score": assignment.max_score,
               "last_name": getattr(student, "last_name", None) or "",
               "first_name": getattr(student, "first_name", None) or "",
               "email": getattr(student, "email", None) or "", "timestamp": "",
               "raw_score": "", "late_submission_penalty": "", "score": ""}
        try:
            submission = gradebook.find_submission(assignment.name, sid)
        except MissingEntry:
            if run is not None and run.get("status") in ("failed", "not graded"):
                row.update(status="not graded", reason=_reasons(run))
            else:  # nothing submitted: nbgrader's 0, said plainly
                row.update(raw_score=0.0, late_submission_penalty=0.0, score=0.0,
                           status="not submitted", reason="no submission")
            return row
        row["timestamp"] = submission.timestamp or ""
        unscored = [g.name for nb in submission.notebooks for g in nb.grades
                    if g.auto_score is None and g.manual_score is None]
        status = (run or {}).get("status")
        if status in ("failed", "not graded") or ledger_state == "grading" or (
                unscored and status not in ("graded", "problems", "skipped")):
            why = _reasons(run) or (
                "a grading run started on it and did not finish" if ledger_state == "grading"
                else f"no score for {len(unscored)} graded cell(s)")
            row.update(status="not graded", reason=why)
            return row
        penalty = submission.late_submission_penalty or 0.0
        row.update(raw_score=submission.score, late_submission_penalty=penalty,
                   score=max(0.0, submission.score - penalty))
        if status == "problems":
            row.update(status="graded with problems", reason=_reasons(run))
        else:
            row.update(status="graded", reason="")
        return row
