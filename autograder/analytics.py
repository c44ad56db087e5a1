"""Class analytics: what a class got wrong, and which misconceptions it holds.

``autograder report ASSIGNMENT`` (``--all`` for every assignment of the course) reads what
grading left behind and writes a self-contained HTML report (figures embedded as data URIs,
no script, no external resource) with CSV files beside it, and prints a short summary.

Where the numbers come from:

* **scores**: the gradebook (nbgrader's, SQLite or PostgreSQL), the official score of every
  grade cell, exactly what ``nbgrader export`` and the Formgrader show;
* **findings and misconceptions**: the verdict each graded cell displays with the MIME type
  :data:`autograder.verdict.MIME_TYPE`, read back from ``autograded/STUDENT/ASSIGNMENT/*.ipynb``
  (stock ``nbgrader autograde`` and ``autograder grade`` both keep it there). A graded cell's
  verdict also says which question and part it grades. Re-grading a submission replaces its
  notebook and its scores, so nothing is ever counted twice;
* **who needs attention**: the gradebook's students without a submission, submissions that
  did not grade (the grader's ledger, its last run report, a missing or unreadable
  ``autograded/`` notebook, a notebook without verdicts), and large drops from the previous
  assignment (the one before it in name order).

A learner is in the statistics when the gradebook has a score for every grade cell and the
verdicts of the graded notebook could be read; everyone else is listed under "needs
attention" with the reason, and the rest of the report is built without them.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
import os
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from autograder.verdict import MIME_TYPE, TODO, Verdict

#: where reports go, under the course root, unless ``--out`` says otherwise
DEFAULT_OUT = Path("grade-reports") / "report"
#: a learner whose score fell by at least this many percentage points is flagged
DEFAULT_DROP = 25.0

# colours shared by the figures and the page (red / yellow / blue: readable with the common
# colour-vision deficiencies, unlike red / green)
ZERO, PARTIAL, FULL, MISSING = "#d73027", "#fdb863", "#4575b4", "#c8c8c8"

_SEEN = re.compile(r"This looks like a common belief: (?P<name>.+?)"
                   r"(?: \(see (?P<where>.+)\))?\.\s*$")


class ReportError(RuntimeError):
    """The report cannot be built at all (no gradebook, unknown assignment); says why."""


# ------------------------------------------------------------------------------ the course
@dataclass
class Course:
    root: Path
    db_url: str
    course_id: str
    coursedir: object  # nbgrader.coursedir.CourseDirectory

    def path(self, step: str, student: str, assignment: str) -> Path:
        return Path(self.coursedir.format_path(step, student, assignment))

    def students_in(self, step: str, assignment: str) -> set[str]:
        """Students with a folder of ``assignment`` under ``step`` (e.g. ``submitted``)."""
        import glob

        cd = self.coursedir
        pattern = re.compile(cd.format_path(step, "(?P<student>[^/]+)", re.escape(assignment),
                                            escape=True) + "$")
        found = set()
        for folder in glob.glob(cd.format_path(step, "*", assignment)):
            m = pattern.match(os.path.normpath(folder))
            if m and os.path.isdir(folder):
                found.add(m.group("student"))
        return found


def load_course(root: Path) -> Course:
    """The course's nbgrader settings, read as nbgrader reads them: the Jupyter config
    folders' ``nbgrader_config.py``, then the course root's (which honours
    ``NBGRADER_DB_URL``)."""
    from jupyter_core.paths import jupyter_config_path
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    root = Path(root).resolve()
    if not (root / "nbgrader_config.py").is_file():
        raise ReportError(f"no nbgrader_config.py in {root}: run from the course root or pass "
                          "--course")
    cfg = Config()
    for folder in [*reversed(jupyter_config_path()), str(root)]:
        if (Path(folder) / "nbgrader_config.py").is_file():
            cfg.merge(PyFileConfigLoader("nbgrader_config.py", path=folder).load_config())
    if "root" not in cfg.CourseDirectory:
        cfg.CourseDirectory.root = str(root)
    cd = CourseDirectory(config=cfg)
    db_url = cd.db_url
    if db_url.startswith("sqlite:///") and not Path(db_url[len("sqlite:///"):]).exists():
        raise ReportError(f"no gradebook at {db_url[len('sqlite:///'):]}: grade the class first "
                          "(autograder grade ASSIGNMENT)")
    return Course(Path(cd.root), db_url, cd.course_id, cd)


# ------------------------------------------------------------------------ what was graded
@dataclass
class GradeCell:
    grade_id: str
    notebook: str
    max_score: float
    question: str | None = None  # from the verdicts the cell displays
    part: str | None = None
    title: str = ""

    @property
    def label(self) -> str:
        return question_label(self.question or self.grade_id, self.part)


@dataclass
class Mention:
    """A misconception as one learner met it in one graded cell."""

    key: str
    name: str  # as the learner's feedback named it
    where: str  # the section the feedback pointed at
    row: str  # "Q1 (tricky)"
    question: str
    item: str | None
    text: str  # the finding the learner read


@dataclass
class CellResult:
    score: float | None  # the gradebook's (None: not scored)
    verdict: Verdict | None  # every verdict the cell displayed, merged (None: no verdict)
    mentions: list[Mention] = field(default_factory=list)


@dataclass
class Learner:
    student: str
    status: str = "graded"  # graded | failed | not submitted
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # graded, but worth a look
    score: float | None = None
    max_score: float | None = None
    cells: dict[str, CellResult] = field(default_factory=dict)
    previous: tuple[str, float] | None = None  # (assignment, percent) of the previous one
    late_seconds: float = 0.0  # past the due date and the learner's extension
    penalty: float = 0.0  # what the late policy took

    @property
    def percent(self) -> float | None:
        if self.score is None or not self.max_score:
            return None
        return 100.0 * self.score / self.max_score

    @property
    def misconceptions(self) -> set[str]:
        return {m.key for c in self.cells.values() for m in c.mentions}


@dataclass
class ClassData:
    assignment: str
    course_id: str
    cells: list[GradeCell]
    learners: dict[str, Learner]
    previous_assignment: str | None = None
    drop: float = DEFAULT_DROP

    @property
    def graded(self) -> list[Learner]:
        return [lr for lr in self.learners.values() if lr.status == "graded"]

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.cells)


def question_label(question: str, part: str | None = None) -> str:
    """``Q1`` / ``Q1 (tricky)``, as the notebook and its feedback number them."""
    name = f"Q{question[1:]}" if question[:1] == "q" and question[1:].isdigit() else question
    return name if part is None else f"{name} ({part})"


def _plain(s: str) -> str:
    from course.markup import plain

    return plain(s)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


def read_verdicts(path: Path) -> tuple[dict[str, list[tuple[dict, str]]], list[str]]:
    """Each graded cell's verdicts (data and the text shown with it), in notebook order, from
    an ``autograded/`` notebook. Where ``autograder grade`` verified the cell (its record in
    the cell's metadata, written by the driver), the verdicts of the grader's own checker,
    with no text; else those the cell displayed (a notebook graded by stock nbgrader). Raises
    ``ValueError`` if the notebook cannot be read."""
    found: dict[str, list[tuple[dict, str]]] = {}
    order: list[str] = []
    for gid, cell in _graded_cells(path):
        order.append(gid)
        verified = _verified(cell)
        if verified is not None:
            verdicts = verified.get("verdicts")
            if isinstance(verdicts, list):
                found[gid] = [(v, "") for v in verdicts if isinstance(v, dict)]
            continue
        for out in cell.get("outputs") or []:
            data = out.get("data") if isinstance(out, dict) else None
            if isinstance(data, dict) and isinstance(data.get(MIME_TYPE), dict):
                found.setdefault(gid, []).append(
                    (data[MIME_TYPE], _text(data.get("text/plain"))))
    return found, order


def read_unverified(path: Path) -> dict[str, str]:
    """Graded cells that showed a pass ``autograder grade`` could not verify, and so scored 0
    (grade id -> why). Raises ``ValueError`` if the notebook cannot be read."""
    out = {}
    for gid, cell in _graded_cells(path):
        verified = _verified(cell)
        if verified is not None and verified.get("overruled"):
            out[gid] = str(verified.get("reason") or "")
    return out


def _verified(cell: dict) -> dict | None:
    from autograder.grading.verify import METADATA_KEY

    meta = (cell.get("metadata") or {}).get(METADATA_KEY)
    return meta if isinstance(meta, dict) and "verified" in meta else None


def _graded_cells(path: Path) -> list[tuple[str, dict]]:
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        cells = nb["cells"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{type(exc).__name__}: {exc}"[:200]) from None
    out = []
    try:
        for cell in cells if isinstance(cells, list) else []:
            if not isinstance(cell, dict):
                continue
            meta = (cell.get("metadata") or {}).get("nbgrader") or {}
            gid = meta.get("grade_id")
            if meta.get("grade") and not meta.get("solution") and isinstance(gid, str):
                out.append((gid, cell))
    except (AttributeError, TypeError) as exc:
        raise ValueError(f"not a notebook as nbgrader writes it ({exc})"[:200]) from None
    return out


def _sane(v: Verdict) -> bool:
    """Only verdicts whose fields have the types the checks write (the data comes from a file)."""
    def text_or_none(x) -> bool:
        return x is None or isinstance(x, str)

    return isinstance(v.question, str) and text_or_none(v.part) and isinstance(v.title, str) \
        and all(isinstance(f.text, str) and text_or_none(f.item) and text_or_none(f.part)
                and text_or_none(f.misconception) for f in v.findings)


def _cell_result(gid: str, shown: list[tuple[dict, str]], score: float | None,
                 cell: GradeCell) -> CellResult:
    from autograder.misconceptions import MISCONCEPTIONS

    verdicts, mentions = [], []
    for data, plain in shown:
        try:
            v = Verdict.from_json(data)
        except (TypeError, ValueError, AttributeError):
            continue
        if not _sane(v):
            continue
        verdicts.append(v)
        if cell.question is None:
            cell.question, cell.part, cell.title = v.question, v.part, v.title
        # the names the feedback text gave, in the order of the distinct named findings
        seen = [m for m in (_SEEN.search(line) for line in plain.splitlines()) if m]
        distinct = list(dict.fromkeys((f.text, f.misconception) for f in v.findings
                                      if f.misconception))
        shown_as = dict(zip(distinct, seen, strict=True)) if len(seen) == len(distinct) else {}
        for f in v.findings:
            if not f.misconception:
                continue
            cat = MISCONCEPTIONS.get(f.misconception)
            name = cat.name if cat else f.misconception
            m = shown_as.get((f.text, f.misconception))
            if m is not None and m.group("name") != _plain(name):
                name = m.group("name")  # renamed since: say what the learner read
            mentions.append(Mention(
                f.misconception, name, (m.group("where") or "") if m else "",
                question_label(v.question, v.part), v.question, f.item, f.text))
    if not verdicts:
        return CellResult(score, None)
    merged = Verdict.merge(verdicts[0].question, verdicts)
    merged.part, merged.title = verdicts[0].part, verdicts[0].title
    return CellResult(score, merged, mentions)


def _cell_order(path: Path) -> list[str]:
    try:
        return read_verdicts(path)[1]
    except ValueError:
        return []


def _ledger(db_url: str, assignment: str) -> dict[str, str]:
    """student -> the grader's ledger state (``grading`` / ``graded``), if it keeps one."""
    import sqlalchemy as sa

    from autograder.grading.state import graded_table as t

    engine = sa.create_engine(db_url)
    try:
        if not sa.inspect(engine).has_table(t.name):
            return {}
        with engine.connect() as conn:
            rows = conn.execute(sa.select(t.c.student, t.c.state).where(
                t.c.assignment == assignment)).all()
        return {r[0]: r[1] for r in rows}
    finally:
        engine.dispose()


def _last_run(course: Course, assignment: str) -> dict[str, dict]:
    """student -> ``{status, reason}`` from the last ``autograder grade`` run's report."""
    path = course.root / "grade-reports" / f"{assignment}.json"
    try:
        rows = json.loads(path.read_text())["submissions"]
        return {r["student"]: {"status": r.get("status"),
                               "reason": "; ".join(str(x) for x in r.get("reasons") or [])}
                for r in rows if isinstance(r, dict) and "student" in r}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def collect(course: Course, assignment: str, drop: float = DEFAULT_DROP) -> ClassData:
    """Everything the report needs about one assignment, read from the course."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(course.db_url, course.course_id) as gb:
        try:
            found = gb.find_assignment(assignment)
        except MissingEntry:
            known = ", ".join(sorted(a.name for a in gb.assignments)) or "none"
            raise ReportError(f"the gradebook has no assignment {assignment!r} "
                              f"(it has: {known})") from None
        notebooks = [(nb.name, [(g.name, float(g.max_score or 0)) for g in nb.grade_cells])
                     for nb in found.notebooks]
        roster = [s.id for s in gb.students]
        scores: dict[str, dict[str, float | None]] = {}
        late: dict[str, tuple[float, float]] = {}  # student -> (seconds late, penalty)
        for sub in gb.assignment_submissions(assignment):
            grades: dict[str, float | None] = {}
            for nb in sub.notebooks:
                for g in nb.grades:
                    # no score at all: not graded (or waiting for a manual grade)
                    unscored = g.auto_score is None and g.manual_score is None
                    grades[g.name] = None if unscored else float(g.score or 0)
            scores[sub.student_id] = grades
            late[sub.student_id] = (float(sub.total_seconds_late or 0.0),
                                    float(sub.late_submission_penalty or 0.0))
        names = sorted(a.name for a in gb.assignments)
        earlier = [n for n in names if n < assignment]
        previous = earlier[-1] if earlier else None
        before: dict[str, float] = {}
        if previous:
            for sub in gb.assignment_submissions(previous):
                if sub.max_score:
                    before[sub.student_id] = 100.0 * float(sub.score) / float(sub.max_score)

    # the grade cells, in the order the instructor's notebook has them
    cells: list[GradeCell] = []
    for nb_name, grade_cells in notebooks:
        order = _cell_order(course.path(course.coursedir.source_directory, ".", assignment)
                            / f"{nb_name}.ipynb")
        rank = {gid: i for i, gid in enumerate(order)}
        for gid, points in sorted(grade_cells, key=lambda g: (rank.get(g[0], len(rank)), g[0])):
            cells.append(GradeCell(gid, nb_name, points))
    by_id = {c.grade_id: c for c in cells}

    ledger = _ledger(course.db_url, assignment)
    last_run = _last_run(course, assignment)
    submitted = course.students_in(course.coursedir.submitted_directory, assignment)
    learners: dict[str, Learner] = {}
    for student in sorted(set(roster) | set(scores) | submitted):
        lr = Learner(student)
        learners[student] = lr
        run = last_run.get(student) or {}
        if student not in scores and student not in submitted:
            lr.status = "not submitted"
            lr.reasons.append("no submission")
            continue
        if student not in scores:
            lr.status = "failed"
            lr.reasons.append(run.get("reason") or (
                "submitted, but the gradebook has no score for it" + (
                    f" (last grading run: {run['status']})" if run.get("status") else "")))
            continue
        if ledger.get(student) == "grading":
            lr.status = "failed"
            lr.reasons.append("a grading run started on it and never finished: run "
                              "`autograder grade` again")
        grades = scores[student]
        unscored = [gid for gid in by_id if grades.get(gid) is None]
        if unscored:
            lr.status = "failed"
            lr.reasons.append(f"no score for {len(unscored)} of {len(by_id)} graded cells "
                              f"({', '.join(unscored[:4])}{', ...' if len(unscored) > 4 else ''})")
        if run.get("status") == "problems" and run.get("reason"):
            lr.notes.append(f"graded with problems: {run['reason']}")
        # the verdicts of its graded notebooks
        shown: dict[str, list[tuple[dict, str]]] = {}
        for nb_name, _ in notebooks:
            path = course.path(course.coursedir.autograded_directory, student, assignment) \
                / f"{nb_name}.ipynb"
            rel = os.path.relpath(path, course.root)
            if not path.exists():
                lr.status = "failed"
                lr.reasons.append(f"no autograded notebook ({rel})")
                continue
            try:
                got, _ = read_verdicts(path)
            except ValueError as exc:
                lr.status = "failed"
                lr.reasons.append(f"autograded notebook unreadable ({rel}: {exc})")
                continue
            if not got:
                lr.status = "failed"
                lr.reasons.append(f"no verdict in the autograded notebook ({rel}): graded "
                                  "before the checks recorded them? grade it again with "
                                  "`autograder grade --force`")
            for gid, why in read_unverified(path).items():
                lr.notes.append(f"{gid} scored 0: its check could not be verified ({why})")
            shown.update(got)
        if lr.status == "failed" and run.get("status") == "failed" and run.get("reason"):
            lr.reasons = [f"the grader could not grade it: {run['reason']}"]  # the cause
        lr.score = sum(v or 0.0 for gid, v in grades.items() if gid in by_id)
        lr.max_score = sum(c.max_score for c in cells)
        for gid, cell in by_id.items():
            lr.cells[gid] = _cell_result(gid, shown.get(gid, []), grades.get(gid), cell)
        if student in before:
            lr.previous = (previous, before[student])
        lr.late_seconds, lr.penalty = late.get(student, (0.0, 0.0))
    return ClassData(assignment, course.course_id, cells, learners, previous, drop)


# ------------------------------------------------------------------------------ statistics
def correlation(xs: list[float], ys: list[float]) -> float | None:
    """Pearson's r, or None when it is undefined (fewer than 3 learners, a constant)."""
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    if sxx <= 1e-12 or syy <= 1e-12:
        return None
    return sxy / math.sqrt(sxx * syy)


@dataclass
class Row:
    """One question, or one graded part of a question, over the learners in the statistics."""

    label: str
    question: str
    part: str | None
    title: str
    level: str  # "question" | "part"
    grade_ids: list[str]
    max_score: float
    scores: dict[str, float]  # student -> points
    n: int = 0
    mean: float | None = None
    median: float | None = None
    zero: int = 0
    partial: int = 0
    full: int = 0
    discrimination: float | None = None
    not_answered: int = 0
    no_verdict: int = 0
    items_right: float | None = None  # mean share of checked items right
    misconceptions: Counter = field(default_factory=Counter)  # key -> learners

    def share(self, count: int) -> float | None:
        return count / self.n if self.n else None


def _row(data: ClassData, label: str, question: str, part: str | None, title: str, level: str,
         cells: list[GradeCell]) -> Row:
    gids = [c.grade_id for c in cells]
    top = sum(c.max_score for c in cells)
    learners = data.graded
    scores = {lr.student: sum(lr.cells[g].score or 0.0 for g in gids) for lr in learners}
    row = Row(label, question, part, title, level, gids, top, scores, n=len(learners))
    if not learners:
        return row
    values = list(scores.values())
    row.mean = sum(values) / len(values)
    row.median = statistics.median(values)
    eps = 1e-9
    row.zero = sum(1 for v in values if v <= eps)
    row.full = sum(1 for v in values if top > 0 and v >= top - eps)
    row.partial = row.n - row.zero - row.full
    rest = [(lr.score or 0.0) - scores[lr.student] for lr in learners]
    row.discrimination = correlation(values, rest)
    shares = []
    for lr in learners:
        results = [lr.cells[g] for g in gids]
        if any(r.verdict is None for r in results):
            row.no_verdict += 1
            continue
        findings, keys = [], set()
        for r in results:
            for f in r.verdict.findings:
                k = (f.item, f.part, f.text, f.status)
                if k not in keys:
                    keys.add(k)
                    findings.append(f)
        if findings and all(f.status == TODO for f in findings):
            row.not_answered += 1
        if findings:
            shares.append(sum(f.status == "right" for f in findings) / len(findings))
        for key in {m.key for r in results for m in r.mentions}:
            row.misconceptions[key] += 1
    row.items_right = sum(shares) / len(shares) if shares else None
    return row


def question_rows(data: ClassData) -> list[Row]:
    """Per question, then per graded part of it (when it has several), in notebook order."""
    groups: dict[str, list[GradeCell]] = {}
    for c in data.cells:
        groups.setdefault(c.question or c.grade_id, []).append(c)
    rows = []
    for q, cells in groups.items():
        title = next((c.title for c in cells if c.title), "")
        rows.append(_row(data, question_label(q), q, None, title, "question", cells))
        if len(cells) > 1:
            for c in cells:
                rows.append(_row(data, c.label if c.question else c.grade_id, q, c.part, title,
                                 "part", [c]))
    return rows


@dataclass
class MisconceptionStat:
    key: str
    name: str  # as the learners' feedback named it
    truth: str
    lesson: str
    section: str
    learners: set[str] = field(default_factory=set)
    by_row: dict[str, set[str]] = field(default_factory=dict)  # "Q1 (tricky)" -> learners
    texts: dict[tuple[str, str | None], str] = field(default_factory=dict)  # (row, item) -> text
    names_seen: Counter = field(default_factory=Counter)
    assignments: set[str] = field(default_factory=set)


def misconception_ranking(datas: list[ClassData]) -> list[MisconceptionStat]:
    """Misconceptions by how many learners (distinct ids) hold them, over ``datas``."""
    from autograder.misconceptions import MISCONCEPTIONS

    stats: dict[str, MisconceptionStat] = {}
    for data in datas:
        for lr in data.graded:
            for gid in (c.grade_id for c in data.cells):
                for m in lr.cells[gid].mentions:
                    cat = MISCONCEPTIONS.get(m.key)
                    st = stats.get(m.key)
                    if st is None:
                        st = stats[m.key] = MisconceptionStat(
                            m.key, m.name, cat.truth if cat else "", cat.lesson if cat else "",
                            (cat.section if cat else "") or "")
                    st.learners.add(lr.student)
                    row = m.row if len(datas) == 1 else f"{data.assignment} {m.row}"
                    st.by_row.setdefault(row, set()).add(lr.student)
                    st.texts.setdefault((row, m.item), m.text)
                    st.names_seen[m.name] += 1
                    st.assignments.add(data.assignment)
                    if not st.section and m.where:
                        st.section = m.where
    for st in stats.values():
        st.name = st.names_seen.most_common(1)[0][0]
    return sorted(stats.values(), key=lambda s: (-len(s.learners), s.name))


@dataclass
class Attention:
    student: str
    why: str  # "not submitted" | "failed to grade" | "large drop" | "graded with problems" | "late"
    detail: str


def attention(data: ClassData) -> list[Attention]:
    out = []
    order = {"failed": 0, "not submitted": 1}
    for lr in sorted(data.learners.values(), key=lambda x: (order.get(x.status, 2), x.student)):
        if lr.status == "failed":
            out.append(Attention(lr.student, "failed to grade", "; ".join(lr.reasons)))
        elif lr.status == "not submitted":
            out.append(Attention(lr.student, "not submitted",
                                 "on the gradebook's student list, no submission"))
    for lr in sorted(data.graded, key=lambda x: x.student):
        if lr.previous is not None and lr.percent is not None \
                and lr.previous[1] - lr.percent >= data.drop:
            out.append(Attention(lr.student, "large drop", (
                f"{lr.percent:.0f}% here, {lr.previous[1]:.0f}% in {lr.previous[0]} "
                f"({lr.previous[1] - lr.percent:.0f} points lower)")))
    for lr in sorted(data.graded, key=lambda x: x.student):
        for note in lr.notes:
            out.append(Attention(lr.student, "graded with problems", note))
    for lr in sorted(data.learners.values(), key=lambda x: x.student):
        if lr.late_seconds > 0:
            from autograder.deadlines import format_duration

            taken = (f"the late policy took {lr.penalty:g} point(s)" if lr.penalty
                     else "no penalty (grace period or no policy)")
            out.append(Attention(lr.student, "late", f"handed in {format_duration(lr.late_seconds)}"
                                 f" after the due date and any extension: {taken}"))
    return out


# ---------------------------------------------------------------------------- identities
class Names:
    """Learner ids as the report shows them: the nbgrader ids, or with ``anonymous`` the
    same alias ("learner 03") for the same id everywhere in one run, text included."""

    def __init__(self, ids, anonymous: bool = False) -> None:
        ids = sorted(set(ids))
        self.anonymous = anonymous
        width = max(2, len(str(len(ids))))
        self.alias = {s: (f"learner {i:0{width}d}" if anonymous else s)
                      for i, s in enumerate(ids, 1)}
        self._pattern = re.compile("|".join(
            rf"(?<![\w.-]){re.escape(s)}(?![\w-])" for s in sorted(ids, key=len, reverse=True)
        )) if anonymous and ids else None

    def __call__(self, student: str) -> str:
        return self.alias.get(student, student)

    def scrub(self, text: str) -> str:
        """``text`` with every learner id in it replaced by its alias."""
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: self.alias[m.group(0)], text)


# --------------------------------------------------------------------------------- figures
def _png(fig) -> str:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", facecolor="white")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    fig.set_facecolor("white")
    return fig


def histogram_png(data: ClassData) -> str:
    learners = data.graded
    pct = [lr.percent or 0.0 for lr in learners]
    fig = _figure(9.5, 3.8)
    ax = fig.add_subplot()
    bins = [i * 10 for i in range(11)]
    counts, _, patches = ax.hist(pct, bins=bins, color=FULL, edgecolor="white", linewidth=1.5)
    for c, p in zip(counts, patches, strict=True):
        if c:
            ax.annotate(f"{int(c)}", (p.get_x() + p.get_width() / 2, c), ha="center",
                        va="bottom", fontsize=11, xytext=(0, 2), textcoords="offset points")
    if pct:
        mean, median = sum(pct) / len(pct), statistics.median(pct)
        ax.axvline(mean, color="#222", linestyle="--", linewidth=1.5,
                   label=f"mean {mean:.0f}%")
        ax.axvline(median, color=ZERO, linestyle=":", linewidth=2,
                   label=f"median {median:.0f}%")
        ax.legend(frameon=False, fontsize=11, ncol=2, loc="lower center",
                  bbox_to_anchor=(0.5, 1.0))
    ax.set_xlim(0, 100)
    ax.set_xticks(bins)
    ax.set_xticklabels([f"{b}%" for b in bins])
    ax.set_xlabel(f"assignment score (% of {data.max_score:g} points)", fontsize=12)
    ax.set_ylabel("learners", fontsize=12)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(0, max(list(counts) + [1]) * 1.18)
    ax.tick_params(labelsize=11)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _png(fig)


def shares_png(rows: list[Row]) -> str:
    """A stacked bar per question: the share of learners with zero, partial, full points."""
    qrows = [r for r in rows if r.level == "question"]
    fig = _figure(9.5, 0.42 * len(qrows) + 1.4)
    ax = fig.add_subplot()
    labels = [r.label + (f"  {r.title}" if r.title else "") for r in qrows]
    ys = list(range(len(qrows)))
    left = [0.0] * len(qrows)
    for attr, colour, name in (("zero", ZERO, "zero"), ("partial", PARTIAL, "partial"),
                               ("full", FULL, "full marks")):
        widths = [100.0 * getattr(r, attr) / r.n if r.n else 0.0 for r in qrows]
        ax.barh(ys, widths, left=left, color=colour, label=name, height=0.7,
                edgecolor="white", linewidth=0.8)
        for y, x0, w in zip(ys, left, widths, strict=True):
            if w >= 8:
                ax.text(x0 + w / 2, y, f"{w:.0f}%", ha="center", va="center", fontsize=10,
                        color="white" if colour != PARTIAL else "#222")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=11)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of learners (%)", fontsize=12)
    ax.tick_params(axis="x", labelsize=11)
    ax.legend(ncol=3, frameon=False, fontsize=11, loc="lower center",
              bbox_to_anchor=(0.5, 1.0))
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _png(fig)


def heatmap_png(data: ClassData, rows: list[Row], names: Names) -> str:
    """Learners (best first) x questions: the share of each question's points, grey where
    nothing was answered, a dot where the answer revealed a misconception."""
    import numpy as np
    from matplotlib.colors import LinearSegmentedColormap

    qrows = [r for r in rows if r.level == "question"]
    learners = sorted(data.graded, key=lambda lr: (-(lr.percent or 0.0), names(lr.student)))
    n = len(learners)
    grid = np.full((max(n, 1), max(len(qrows), 1)), np.nan)
    for i, lr in enumerate(learners):
        for j, r in enumerate(qrows):
            results = [lr.cells[g] for g in r.grade_ids]
            blank = all(x.verdict is not None and not x.verdict.answered for x in results)
            if not blank:
                grid[i, j] = r.scores[lr.student] / r.max_score if r.max_score else 0.0
    height = max(2.6, 0.3 * n + 1.8) if n <= 80 else 14.0  # a big class: one thin band each
    fig = _figure(9.5, height)
    ax = fig.add_subplot()
    cmap = LinearSegmentedColormap.from_list("score", [ZERO, "#fee090", FULL]).with_extremes(
        bad=MISSING)
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=0, vmax=1, aspect="auto",
                   interpolation="nearest")
    ax.set_xticks(range(len(qrows)))
    ax.set_xticklabels([r.label for r in qrows], fontsize=11)
    ax.xaxis.tick_top()
    if n <= 80:
        ax.set_yticks(range(n))
        ax.set_yticklabels([f"{names(lr.student)}  {lr.percent or 0:.0f}%" for lr in learners],
                           fontsize=10 if n <= 40 else 7)
    else:
        ax.set_yticks([])
        ax.set_ylabel(f"{n} learners, best first", fontsize=12)
    if n <= 80:
        for i, lr in enumerate(learners):
            for j, r in enumerate(qrows):
                if any(lr.cells[g].mentions for g in r.grade_ids):
                    ax.plot(j, i, marker="o", markersize=5, color="#111")
    ax.set_xticks([x - 0.5 for x in range(1, len(qrows))], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, n)] if n <= 80 else [], minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    bar = fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02, shrink=min(1.0, 3.2 / height),
                       anchor=(0.0, 1.0), panchor=(1.0, 1.0))  # beside the first rows
    bar.set_label("share of the question's points", fontsize=11)
    bar.ax.tick_params(labelsize=10)
    bar.set_ticks([0, 0.5, 1])
    bar.set_ticklabels(["0", "half", "full"])
    return _png(fig)


# ------------------------------------------------------------------------------------ HTML
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 color:#1d1d1f;margin:0;background:#f6f7f9;font-size:16px;line-height:1.45}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px;background:#fff;
 box-shadow:0 0 0 1px #e3e5e8}
h1{font-size:1.8em;margin:.2em 0 .1em} h2{font-size:1.35em;margin:1.8em 0 .5em;
 padding-bottom:.2em;border-bottom:2px solid #e3e5e8} h3{font-size:1.1em;margin:1.2em 0 .3em}
.sub{color:#555;margin:0 0 1em}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:16px 0}
.card{flex:1 1 150px;border:1px solid #e3e5e8;border-radius:8px;padding:10px 14px;
 background:#fafbfc}
.card b{display:block;font-size:1.6em} .card span{color:#555;font-size:.92em}
.card.warn{border-color:#f0b37e;background:#fff7ef}
table{border-collapse:collapse;width:100%;margin:8px 0 4px;font-size:.95em}
th,td{padding:6px 8px;border-bottom:1px solid #e7e9ec;vertical-align:top;text-align:left}
th{background:#f1f3f5;font-weight:600;position:sticky;top:0}
td.num,th.num{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
tr.part td{color:#444;font-size:.93em} tr.part td:first-child{padding-left:24px}
tr.hard td:first-child{border-left:4px solid #d73027}
.bar{display:flex;height:14px;width:160px;border-radius:3px;overflow:hidden;background:#eee;
 margin-top:3px}
.bar i{display:block;height:100%}
.meter{display:inline-block;height:12px;background:#4575b4;border-radius:2px;
 vertical-align:middle;margin-right:6px}
.why{color:#333;font-size:.93em} .muted{color:#666;font-size:.92em}
.tag{display:inline-block;padding:0 6px;border-radius:10px;font-size:.85em;background:#eef;
 margin:1px 2px;white-space:nowrap}
.tag.bad{background:#fde2df} .tag.low{background:#fff1c9}
code{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.9em;background:#f3f3f5;
 padding:0 3px;border-radius:3px}
figure{margin:10px 0 18px} figure img{max-width:100%;height:auto;display:block;
 border:1px solid #eee} figcaption{color:#555;font-size:.92em;margin-top:4px}
details{margin:6px 0} summary{cursor:pointer;color:#1f4fa0}
ol.seen{margin:4px 0 0 1.1em;padding:0} ol.seen li{margin:2px 0}
footer{margin-top:40px;color:#666;font-size:.9em}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin:0 4px 0 10px;
 vertical-align:-1px}
"""


def _e(s) -> str:
    return html.escape(str(s), quote=True)


def _rich(s: str) -> str:
    """Feedback text as the notebook shows it: `code` as code, *stress* in italics."""
    from course.markup import rich

    return re.sub(r"(?<![\w*])\*(\w[^*<>]*?)\*(?![\w*])", r"<em>\1</em>", rich(s))


def _num(x: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if x is None else fmt.format(x)


def _points(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}".rstrip("0").rstrip(".")


def _share_bar(r: Row) -> str:
    if not r.n:
        return ""
    parts = [(r.zero, ZERO, "zero"), (r.partial, PARTIAL, "partial"), (r.full, FULL, "full")]
    spans = "".join(f'<i style="width:{100 * k / r.n:.1f}%;background:{c}" title="{t}: {k}">'
                    "</i>" for k, c, t in parts if k)
    return f'<div class="bar">{spans}</div>'


def _discrimination(r: Row) -> str:
    d = r.discrimination
    if d is None:
        return '<span class="muted" title="undefined: everyone scored the same">–</span>'
    cls = "bad" if d < 0 else ("low" if d < 0.2 else "")
    tip = ("negative: weaker learners did better on it than stronger ones; check the question"
           if d < 0 else "low: does not separate stronger from weaker learners" if d < 0.2
           else "separates stronger from weaker learners")
    return f'<span class="tag {cls}" title="{tip}">{d:+.2f}</span>'


def _section(st: MisconceptionStat) -> str:
    lesson = f"lesson {st.lesson[:2]}" if st.lesson[:2].isdigit() else st.lesson
    if st.section and st.lesson:
        return f"{_e(lesson)}, \u201c{_e(st.section)}\u201d"
    return _e(st.section or lesson or "–")


def _misconception_table(ranking: list[MisconceptionStat], n: int, names: Names,
                         limit_texts: int = 4) -> str:
    if not ranking:
        return ('<p>No graded answer revealed a named misconception. Wrong answers without '
                "one are in the question table.</p>")
    head = ('<table><thead><tr><th class="num">#</th><th>Misconception (as the feedback named '
            'it)</th><th>Learners</th><th>Revealed by</th><th>Correction</th>'
            "<th>Taught in</th></tr></thead><tbody>")
    rows = []
    for i, st in enumerate(ranking, 1):
        k = len(st.learners)
        width = 120 * k / n if n else 0
        revealed = " ".join(f'<span class="tag">{_e(row)} \u00d7{len(who)}</span>'
                            for row, who in st.by_row.items())
        # the finding already names its item ("`water`: you said False; ...")
        seen = "".join(f"<li><b>{_e(row)}</b>: {_rich(names.scrub(text))}</li>"
                       for (row, _item), text in list(st.texts.items())[:limit_texts])
        who = ", ".join(_e(names(s)) for s in sorted(st.learners, key=names))
        rows.append(
            f'<tr><td class="num">{i}</td><td><b>{_rich(st.name)}</b>'
            f'<div class="muted"><code>{_e(st.key)}</code></div></td>'
            f'<td class="num"><span class="meter" style="width:{width:.0f}px"></span>'
            f"<b>{k}</b> of {n}<div class=\"muted\">{100 * k / n if n else 0:.0f}%</div></td>"
            f"<td>{revealed}</td>"
            f'<td class="why">{_rich(st.truth) or "–"}<details><summary>what the feedback '
            f'told them</summary><ol class="seen">{seen}</ol><div class="muted">{who}</div>'
            "</details></td>"
            f"<td>{_section(st)}</td></tr>")
    return head + "".join(rows) + "</tbody></table>"


def _question_table(rows: list[Row], hardest: set[str]) -> str:
    from autograder.misconceptions import MISCONCEPTIONS

    head = ('<table><thead><tr><th>Question</th><th class="num">Points</th>'
            '<th class="num">Mean</th><th class="num">Median</th>'
            '<th>Zero / partial / full</th><th class="num" title="correlation of the score '
            'with the rest of the assignment">Discrim.</th><th class="num">Not answered</th>'
            '<th class="num" title="mean share of the checked items that were right">'
            "Items right</th><th>Misconceptions seen</th></tr></thead><tbody>")
    out = []
    for r in rows:
        cls = "part" if r.level == "part" else ("hard" if r.label in hardest else "")
        title = f' <span class="muted">{_e(r.title)}</span>' if r.level == "question" \
            and r.title else ""
        pct = f' <span class="muted">({100 * r.mean / r.max_score:.0f}%)</span>' \
            if r.mean is not None and r.max_score else ""
        myths = " ".join(
            f'<span class="tag" title="{_e(k)}">'
            f"{_rich(MISCONCEPTIONS[k].name if k in MISCONCEPTIONS else k)} \u00d7{c}</span>"
            for k, c in r.misconceptions.most_common(3))
        na = f"{r.not_answered}" + (f' <span class="muted" title="no verdict: the check never '
                                    f'ran">+{r.no_verdict} ?</span>' if r.no_verdict else "")
        counts = (f'<div class="muted">{r.zero} / {r.partial} / {r.full}</div>' if r.n else "")
        out.append(
            f'<tr class="{cls}"><td><b>{_e(r.label)}</b>{title}</td>'
            f'<td class="num">{_points(r.max_score)}</td>'
            f'<td class="num">{_points(r.mean)}{pct}</td>'
            f'<td class="num">{_points(r.median)}</td>'
            f"<td>{_share_bar(r)}{counts}</td>"
            f'<td class="num">{_discrimination(r)}</td><td class="num">{na}</td>'
            f'<td class="num">{_num(r.items_right, "{:.0%}")}</td><td>{myths}</td></tr>')
    return head + "".join(out) + "</tbody></table>"


def _attention_table(items: list[Attention], names: Names) -> str:
    if not items:
        return "<p>Nobody: every learner submitted and was graded, and nobody dropped sharply.</p>"
    rows = "".join(f"<tr><td><b>{_e(names(a.student))}</b></td><td>{_e(a.why)}</td>"
                   f'<td class="why">{_e(names.scrub(a.detail))}</td></tr>' for a in items)
    return ("<table><thead><tr><th>Learner</th><th>Why</th><th>Details</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def _learner_table(data: ClassData, rows: list[Row], names: Names) -> str:
    qrows = [r for r in rows if r.level == "question"]
    head = ("<table><thead><tr><th>Learner</th><th class=\"num\">Score</th>"
            + "".join(f'<th class="num">{_e(r.label)}</th>' for r in qrows)
            + "<th>Misconceptions</th></tr></thead><tbody>")
    body = []
    for lr in sorted(data.graded, key=lambda x: (-(x.percent or 0), names(x.student))):
        cells = "".join(f'<td class="num">{_points(r.scores.get(lr.student))}</td>'
                        for r in qrows)
        myths = " ".join(f'<span class="tag">{_e(k)}</span>' for k in sorted(lr.misconceptions))
        body.append(f"<tr><td>{_e(names(lr.student))}</td><td class=\"num\">"
                    f"{_points(lr.score)} ({lr.percent or 0:.0f}%)</td>{cells}"
                    f"<td>{myths}</td></tr>")
    return head + "".join(body) + "</tbody></table>"


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            # nothing on this page may be fetched from anywhere (it is opened offline)
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>"
            f"{body}</main></body></html>\n")


@dataclass
class Report:
    data: ClassData
    rows: list[Row]
    ranking: list[MisconceptionStat]
    attention: list[Attention]
    names: Names
    seconds: float = 0.0
    files: list[Path] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.data.graded)


def analyse(data: ClassData, names: Names) -> Report:
    return Report(data, question_rows(data), misconception_ranking([data]), attention(data),
                  names)


def render_html(rep: Report) -> str:
    data, rows, names = rep.data, rep.rows, rep.names
    n = rep.n
    pct = [lr.percent or 0.0 for lr in data.graded]
    counts = Counter(lr.status for lr in data.learners.values())
    qrows = [r for r in rows if r.level == "question" and r.mean is not None and r.max_score]
    hardest = sorted(qrows, key=lambda r: r.mean / r.max_score)[:3]
    hard_labels = {r.label for r in hardest if r.mean / r.max_score < 0.999}
    cards = [
        (f"{n}", f"graded (of {len(data.learners)})", False),
        (f"{sum(pct) / n:.0f}%" if n else "–", "mean score", False),
        (f"{statistics.median(pct):.0f}%" if n else "–", "median score", False),
        (f"{len(rep.ranking)}", "misconceptions seen", False),
        (f"{counts['not submitted']}", "not submitted", counts["not submitted"] > 0),
        (f"{counts['failed']}", "failed to grade", counts["failed"] > 0),
    ]
    card_html = "".join(f'<div class="card{" warn" if warn else ""}"><b>{_e(v)}</b>'
                        f"<span>{_e(t)}</span></div>" for v, t, warn in cards)
    top = rep.ranking[:3]
    if top:
        monday = "; ".join(f"<b>{_rich(st.name)}</b> ({len(st.learners)} of {n})" for st in top)
        lead = f"<p>To re-teach first: {monday}.</p>"
    else:
        lead = ""
    if hard_labels:
        lead += ("<p>Hardest questions: " + ", ".join(
            f"<b>{_e(r.label)}</b> ({100 * r.mean / r.max_score:.0f}% of its points on average)"
            for r in hardest if r.label in hard_labels) + ".</p>")
    anon = " Learner ids are replaced by aliases." if names.anonymous else ""
    body = [
        f"<h1>{_e(data.assignment)}: class report</h1>",
        f'<p class="sub">Course <b>{_e(data.course_id)}</b> \u00b7 {len(data.cells)} graded '
        f"cells, {data.max_score:g} points \u00b7 built "
        f"{_e(time.strftime('%Y-%m-%d %H:%M'))} from the gradebook and the graded "
        f"notebooks.{anon}</p>",
        f'<div class="cards">{card_html}</div>', lead,
        "<h2>What to re-teach: misconceptions by how many learners hold them</h2>",
        f'<p class="muted">A learner counts once per misconception, however many answers '
        f"revealed it; {n} learners are in the statistics.</p>",
        _misconception_table(rep.ranking, n, names),
        "<h2>Questions</h2>",
        '<p class="muted">Points are the gradebook\u2019s. A question with several graded parts '
        "has a row per part under it. <i>Discrim.</i> is the correlation of the question\u2019s "
        "score with the rest of the assignment (below 0.2: it does not tell stronger from "
        "weaker learners). <i>Not answered</i>: every item of it left as given. <i>Items "
        "right</i>: the mean share of checked items answered right, partial knowledge that "
        "all-or-nothing cells hide.</p>",
        _question_table(rows, hard_labels),
    ]
    if n:
        body += [
            '<figure><img alt="Share of learners with zero, partial and full points, per '
            f'question" src="{shares_png(rows)}"><figcaption>Per question: the share of learners '
            "with zero, partial and full points.</figcaption></figure>",
            "<h2>Scores</h2>",
            f'<figure><img alt="Histogram of assignment scores" src="{histogram_png(data)}">'
            "<figcaption>Distribution of the assignment scores.</figcaption></figure>",
            '<figure><img alt="Heat map: learners by questions" '
            f'src="{heatmap_png(data, rows, names)}"><figcaption>Each learner\u2019s share of '
            "each question\u2019s points, best learners first. "
            f'<span class="legend"><i style="background:{MISSING}"></i>not answered (0 points)'
            "</span> \u00b7 \u25cf the answer revealed a misconception.</figcaption></figure>",
        ]
    body += [
        "<h2>Learners who need attention</h2>",
        _attention_table(rep.attention, names),
        f"<details><summary>All {n} graded learners, question by question</summary>"
        f"{_learner_table(data, rows, names)}</details>",
        "<footer>CSV files beside this page: <code>questions.csv</code>, "
        "<code>misconceptions.csv</code>, <code>learners.csv</code>, <code>attention.csv</code>."
        " Written by <code>autograder report</code>; nothing here is fetched from the network."
        "</footer>",
    ]
    return _page(f"{data.assignment}: class report", "\n".join(body))


# ------------------------------------------------------------------------------------- CSV
def _write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    os.replace(tmp, path)
    return path


def _f(x: float | None, digits: int = 4) -> str:
    return "" if x is None else f"{round(x, digits):g}"


def write_csvs(rep: Report, out: Path) -> list[Path]:
    names, data = rep.names, rep.data
    files = [_write_csv(out / "questions.csv", [
        "question", "part", "level", "label", "title", "grade_ids", "max_points", "learners",
        "mean", "median", "mean_share", "zero", "partial", "full", "share_zero",
        "share_partial", "share_full", "discrimination", "not_answered", "no_verdict",
        "items_right", "misconceptions"], [[
            r.question, r.part or "", r.level, r.label, r.title, " ".join(r.grade_ids),
            _f(r.max_score), r.n, _f(r.mean), _f(r.median),
            _f(r.mean / r.max_score if r.mean is not None and r.max_score else None),
            r.zero, r.partial, r.full, _f(r.share(r.zero)), _f(r.share(r.partial)),
            _f(r.share(r.full)), _f(r.discrimination), r.not_answered, r.no_verdict,
            _f(r.items_right), " ".join(f"{k}:{c}" for k, c in r.misconceptions.most_common())]
            for r in rep.rows])]
    files.append(_write_csv(out / "misconceptions.csv", [
        "rank", "key", "name", "learners", "share", "questions", "truth", "lesson", "section",
        "learner_ids"], [[
            i, st.key, st.name, len(st.learners), _f(len(st.learners) / rep.n if rep.n else None),
            " ".join(f"{row.replace(' ', '')}:{len(w)}" for row, w in st.by_row.items()),
            st.truth, st.lesson, st.section,
            " ".join(sorted(names(s) for s in st.learners))]
            for i, st in enumerate(rep.ranking, 1)]))
    qrows = [r for r in rep.rows if r.level == "question"]
    files.append(_write_csv(out / "learners.csv", [
        "learner", "status", "score", "max_score", "percent", "previous_percent",
        *[r.label for r in qrows], "misconceptions", "reasons"], [[
            names(lr.student), lr.status, _f(lr.score), _f(lr.max_score), _f(lr.percent, 2),
            _f(lr.previous[1], 2) if lr.previous else "",
            *[_f(r.scores.get(lr.student)) if lr.status == "graded" else "" for r in qrows],
            " ".join(sorted(lr.misconceptions)) if lr.status == "graded" else "",
            names.scrub("; ".join(lr.reasons + lr.notes))]
            for lr in sorted(data.learners.values(), key=lambda x: names(x.student))]))
    files.append(_write_csv(out / "attention.csv", ["learner", "why", "detail"], [
        [names(a.student), a.why, names.scrub(a.detail)] for a in rep.attention]))
    return files


# --------------------------------------------------------------------------------- summary
def summary(rep: Report, out_html: Path | None = None, width: int = 3) -> str:
    data, names, n = rep.data, rep.names, rep.n
    counts = Counter(lr.status for lr in data.learners.values())
    pct = [lr.percent or 0.0 for lr in data.graded]
    lines = [f"{data.assignment}: {n} of {len(data.learners)} learners graded"
             + (f" ({counts['not submitted']} not submitted, {counts['failed']} failed to grade)"
                if counts["not submitted"] or counts["failed"] else "")
             + (f"; mean {sum(pct) / n:.0f}%, median {statistics.median(pct):.0f}% of "
                f"{data.max_score:g} points" if n else "")]
    qrows = [r for r in rep.rows if r.level == "question" and r.mean is not None and r.max_score]
    hard = [r for r in sorted(qrows, key=lambda r: r.mean / r.max_score)[:width]
            if r.mean < r.max_score]
    if hard:
        lines.append("hardest questions: " + ", ".join(
            f"{r.label} {100 * r.mean / r.max_score:.0f}%" for r in hard))
    if rep.ranking:
        lines.append("misconceptions to re-teach (learners):")
        for st in rep.ranking[:5]:
            rows = ", ".join(st.by_row)
            lines.append(f"  {len(st.learners):>3}  {_plain(st.name)}  [{rows}]")
    else:
        lines.append("no misconception revealed")
    if rep.attention:
        shown = [f"{names(a.student)} ({a.why})" for a in rep.attention[:8]]
        more = len(rep.attention) - len(shown)
        lines.append("needs attention: " + ", ".join(shown) + (f", +{more} more" if more else ""))
    if out_html is not None:
        lines.append(f"report: {out_html} (CSV files beside it)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- course
def render_course_index(reports: list[Report], names: Names) -> str:
    ranking = misconception_ranking([r.data for r in reports])
    learners = {s for r in reports for s in r.data.learners}
    graded = {lr.student for r in reports for lr in r.data.graded}
    rows = []
    for r in reports:
        pct = [lr.percent or 0.0 for lr in r.data.graded]
        counts = Counter(lr.status for lr in r.data.learners.values())
        top = r.ranking[0] if r.ranking else None
        rows.append(
            f'<tr><td><a href="{_e(r.data.assignment)}/index.html"><b>{_e(r.data.assignment)}'
            f'</b></a></td><td class="num">{r.n}</td>'
            f'<td class="num">{f"{sum(pct) / len(pct):.0f}%" if pct else "–"}</td>'
            f'<td class="num">{f"{statistics.median(pct):.0f}%" if pct else "–"}</td>'
            f'<td class="num">{counts["not submitted"]}</td><td class="num">'
            f'{counts["failed"]}</td><td>'
            + (f"{_rich(top.name)} ({len(top.learners)})" if top else "–") + "</td></tr>")
    table = ('<table><thead><tr><th>Assignment</th><th class="num">Graded</th>'
             '<th class="num">Mean</th><th class="num">Median</th><th class="num">Not submitted'
             '</th><th class="num">Failed</th><th>Most held misconception</th></tr></thead>'
             f"<tbody>{''.join(rows)}</tbody></table>")
    attention_rows = [a for r in reports for a in r.attention]
    att = "".join(
        f"<tr><td>{_e(names(a.student))}</td><td>{_e(r.data.assignment)}</td><td>{_e(a.why)}</td>"
        f'<td class="why">{_e(names.scrub(a.detail))}</td></tr>'
        for r in reports for a in r.attention)
    body = [
        "<h1>Course report</h1>",
        f'<p class="sub">{len(reports)} assignments, {len(learners)} learners \u00b7 built '
        f"{_e(time.strftime('%Y-%m-%d %H:%M'))}.</p>",
        "<h2>Assignments</h2>", table,
        "<h2>Misconceptions across the course</h2>",
        f'<p class="muted">A learner counts once per misconception over all assignments; '
        f"{len(graded)} learners were graded in at least one.</p>",
        _misconception_table(ranking, len(graded), names, limit_texts=3),
        "<h2>Learners who need attention</h2>",
        ("<table><thead><tr><th>Learner</th><th>Assignment</th><th>Why</th><th>Details</th>"
         f"</tr></thead><tbody>{att}</tbody></table>" if attention_rows else "<p>Nobody.</p>"),
    ]
    return _page("Course report", "\n".join(body))


# ------------------------------------------------------------------------------ the command
def build(course_root: Path, assignments: list[str] | None = None, *, out: Path | None = None,
          anonymous: bool = False, drop: float = DEFAULT_DROP) -> tuple[list[Report], Path]:
    """Write the report of each assignment (default: every one in the gradebook) into
    ``out/ASSIGNMENT/``, and a course index when there are several; returns the reports and
    the page to open."""
    course = load_course(course_root)
    if not assignments:
        from nbgrader.api import Gradebook

        with Gradebook(course.db_url, course.course_id) as gb:
            assignments = sorted(a.name for a in gb.assignments)
        if not assignments:
            raise ReportError("the gradebook has no assignment yet")
    out = Path(out) if out is not None else course.root / DEFAULT_OUT
    datas = [collect(course, a, drop) for a in assignments]
    ids = {s for d in datas for s in d.learners}
    names = Names(ids, anonymous)
    reports = []
    for data in datas:
        t1 = time.monotonic()
        folder = out / data.assignment
        folder.mkdir(parents=True, exist_ok=True)
        rep = analyse(data, names)
        page = folder / "index.html"
        tmp = page.with_name(".index.html.tmp")
        tmp.write_text(render_html(rep), encoding="utf-8")
        os.replace(tmp, page)
        rep.files = [page, *write_csvs(rep, folder)]
        rep.seconds = time.monotonic() - t1
        reports.append(rep)
    target = reports[0].files[0]
    if len(reports) > 1:
        target = out / "index.html"
        target.write_text(render_course_index(reports, names), encoding="utf-8")
    return reports, target


def add_parser(sub):
    p = sub.add_parser(
        "report", help="class report: per-question statistics, misconceptions, who needs "
        "attention (HTML + CSV)", description=(
            "Write a self-contained HTML report (and CSV files) of a graded assignment: "
            "per-question statistics, the misconceptions the class holds ranked by learners, "
            "the score distribution and heat map, and the learners who need attention."))
    p.add_argument("assignment", nargs="?", help="assignment id, e.g. 01_leaves")
    p.add_argument("--all", action="store_true",
                   help="every assignment in the gradebook, plus a course index page")
    p.add_argument("--anonymous", action="store_true",
                   help="replace learner ids by aliases (learner 01, ...), consistently")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help=f"output folder (default: COURSE/{DEFAULT_OUT})")
    p.add_argument("--course", default=".", help="course root (default: current folder)")
    p.add_argument("--drop", type=float, default=DEFAULT_DROP, metavar="POINTS",
                   help="flag a learner whose score fell by this many percentage points since "
                        f"the previous assignment (default: {DEFAULT_DROP:g})")
    p.set_defaults(func=main)
    return p


def main(args) -> int:
    import sys

    if bool(args.assignment) == bool(args.all):
        print("autograder report: name one assignment, or pass --all", file=sys.stderr)
        return 2
    try:
        reports, target = build(Path(args.course), None if args.all else [args.assignment],
                                out=args.out, anonymous=args.anonymous, drop=args.drop)
    except ReportError as exc:
        print(f"autograder report: {exc}", file=sys.stderr)
        return 2
    for rep in reports:
        print(summary(rep, rep.files[0]))
        print()
    if len(reports) > 1:
        print(f"course index: {target}")
    return 0
