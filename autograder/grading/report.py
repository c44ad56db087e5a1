"""What happened to each submission: outcomes, the progress line, the summary and the report files."""

from __future__ import annotations

import csv
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# graded:   executed and scored with nothing to report
# problems: scored in the gradebook, but something needs the instructor's attention
#           (a repaired or restored cell, a kernel that died, a timeout, dropped files...)
# failed:   could not be graded; the gradebook holds no autograde score for it
# skipped:  already graded and unchanged since (use --force to grade it again)
# not graded: the run was stopped (Ctrl-C, SIGTERM) before this submission was graded; it
#           has nothing in autograded/ and the next run grades it
STATUSES = ("graded", "problems", "failed", "skipped", "not graded")


@dataclass
class Outcome:
    student: str
    status: str = "graded"
    score: float | None = None
    max_score: float | None = None
    seconds: float = 0.0  # preparing + executing + scoring it (not time spent queued)
    reasons: list[str] = field(default_factory=list)
    notebooks: list[str] = field(default_factory=list)
    run: str = ""  # when the run that gave this outcome started (ISO 8601, UTC)
    late_seconds: float = 0.0  # past the due date and the learner's extension
    penalty: float = 0.0  # points the late policy took (score is after it)

    @property
    def late(self) -> str:
        """``1 d 2 h late, -2.6`` (empty when on time)."""
        if not self.late_seconds:
            return ""
        from autograder.deadlines import format_duration

        taken = f", -{self.penalty:g}" if self.penalty else ", no penalty"
        return f"{format_duration(self.late_seconds)} late{taken}"

    def note(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)
        if self.status == "graded":
            self.status = "problems"

    def fail(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)
        self.status = "failed"

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)

    def row(self) -> dict:
        d = asdict(self)
        d["reasons"] = list(self.reasons)
        return d


class Progress:
    """One status line on a terminal (rewritten in place), else one line per submission."""

    def __init__(self, total: int, stream=None) -> None:
        self.total = total
        self.done = 0
        self.failed = 0
        self.problems = 0
        self.t0 = time.monotonic()
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, outcome: Outcome) -> None:
        self.done += 1
        self.failed += outcome.status == "failed"
        self.problems += outcome.status == "problems"
        elapsed = time.monotonic() - self.t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        bar = "#" * filled + "-" * (width - filled)
        line = (f"[{bar}] {self.done}/{self.total} done, {self.failed} failed, "
                f"{self.problems} with problems, {rate * 60:.1f}/min, ~{left:.0f} s left")
        if self.tty:
            self.stream.write("\r" + line[:150].ljust(150))
            if self.done == self.total:
                self.stream.write("\n")
        else:
            score = "" if outcome.score is None else f" {outcome.score:g}/{outcome.max_score:g}"
            self.stream.write(f"{line} | {outcome.student}: {outcome.status}{score}\n")
        self.stream.flush()


def summary(outcomes: list[Outcome], elapsed: float, max_rows: int = 60) -> str:
    counts = {s: sum(o.status == s for o in outcomes) for s in STATUSES}
    lines = [f"{len(outcomes)} submissions in {elapsed:.1f} s: "
             + ", ".join(f"{n} {s}" for s, n in counts.items())]
    order = {"failed": 0, "not graded": 1, "problems": 2, "graded": 3, "skipped": 4}
    rows = sorted(outcomes, key=lambda o: (order.get(o.status, 9), o.student))
    if len(rows) > max_rows:  # a big class: list what needs attention first
        rows = [o for o in rows if o.status in ("failed", "not graded", "problems")][:max_rows]
        lines.append(f"(showing the {len(rows)} submissions that need attention; "
                     "the report lists all)")
    if rows:
        w = max(7, *(len(o.student) for o in rows))
        lw = max(4, *(len(o.late) for o in rows))
        lines.append(f"{'student':<{w}}  {'status':<10}  {'score':>11}  {'time':>6}  "
                     f"{'late':<{lw}}  reason")
        for o in rows:
            score = "-" if o.score is None else f"{o.score:g}/{o.max_score:g}"
            lines.append(f"{o.student:<{w}}  {o.status:<10}  {score:>11}  {o.seconds:5.1f}s  "
                         f"{o.late or '-':<{lw}}  {o.reason}".rstrip())
    return "\n".join(lines)


def _replace(path: Path, write) -> None:
    """Write through a temporary file and rename it: a killed run never leaves half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", newline="") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def earlier_rows(path: Path) -> list[dict]:
    """The rows of the course's grade-run record as an earlier run left them (none if there is
    no readable record)."""
    try:
        rows = json.loads(path.read_text())["submissions"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [r for r in rows if isinstance(r, dict) and isinstance(r.get("student"), str)]


def merged_rows(outcomes: list[Outcome], earlier: list[dict]) -> list[dict]:
    """The record only grows: this run's rows replace a learner's earlier row, the learners
    this run did not grade keep theirs, and a submission this run skipped (graded before,
    unchanged) keeps the row of the run that graded it."""
    rows = {r["student"]: dict(r) for r in earlier}
    for o in outcomes:
        if o.status == "skipped" and o.student in rows:
            if o.score is not None:  # the gradebook's score now (a killed run left none)
                rows[o.student].update(score=o.score, max_score=o.max_score,
                                       late_seconds=o.late_seconds, penalty=o.penalty)
            continue
        rows[o.student] = o.row()
    return [rows[k] for k in sorted(rows)]


def write_reports(outcomes: list[Outcome], path: Path, meta: dict,
                  earlier: list[dict] | None = None) -> tuple[Path, Path]:
    """``path`` as JSON (with ``meta``, which describes this run, and ``this_run``: each of its
    submissions' status in it) and the same rows as CSV beside it, each atomically;
    ``earlier``: the record's rows before this run (see :func:`merged_rows`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = merged_rows(outcomes, earlier or [])
    this_run = {o.student: o.status for o in sorted(outcomes, key=lambda o: o.student)}
    _replace(path, lambda f: f.write(json.dumps(
        {**meta, "this_run": this_run, "submissions": rows}, indent=2) + "\n"))
    csv_path = path.with_suffix(".csv")

    def write_csv(f) -> None:
        writer = csv.writer(f)
        writer.writerow(["student", "status", "score", "max_score", "late_seconds",
                         "late_penalty", "seconds", "graded_in_run", "reason"])
        for r in rows:
            writer.writerow([r["student"], r.get("status", ""),
                             "" if r.get("score") is None else r["score"],
                             "" if r.get("max_score") is None else r["max_score"],
                             f"{float(r.get('late_seconds') or 0):.0f}",
                             f"{float(r.get('penalty') or 0):g}",
                             f"{float(r.get('seconds') or 0):.2f}", r.get("run", ""),
                             "; ".join(str(x) for x in r.get("reasons") or [])])

    _replace(csv_path, write_csv)
    return path, csv_path
