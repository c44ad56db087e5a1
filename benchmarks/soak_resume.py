"""Soak: a big class, a grading run killed mid-way, then the README's plain re-run.

    python benchmarks/soak_resume.py [--students 1000] [--assignment ps1|01_leaves]
                                     [--kill-after 0.5] [--signal KILL|INT|TERM]
                                     [--workers N] [--no-sandbox]

Builds a class of ``--students`` submissions (a handful of answer patterns, repeated), grades
one submission of each pattern alone in a separate course (the true scores), then grades the
class with ``autograder grade`` and sends ``--signal`` to the run's process group once
``--kill-after`` of the class is reported done; then runs ``autograder grade`` again and
checks: every learner has exactly their pattern's true per-cell scores (nothing lost), the
gradebook holds one submission per learner, ``autograded/`` one folder each and the driver's
ledger one ``graded`` row each (no duplicate), nothing was skipped that the killed run had
not finished. Prints the figures, including the time the re-run took to resume.

``ps1`` is the hand-made assignment of the tests (three questions, one importing torch): a
thousand of them grade in minutes. Not a test. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import helpers  # noqa: E402
from hostile import course as handmade  # noqa: E402

from autograder.grading.sandbox import sandbox_problem  # noqa: E402
from autograder.pipeline import nbgrader, nbgrader_env, read_scores  # noqa: E402

PROGRESS = re.compile(r"^\[[#-]+\] (\d+)/(\d+) done")


def make(root: Path, assignment: str):
    """A course and a function pattern -> notebook, for the chosen assignment."""
    if assignment == "ps1":
        course = handmade.make_course(root)
        patterns = {
            "full": handmade.SOLVED, "blank": {}, "wrong": handmade.WRONG,
            "q2only": {"q2_answer": handmade.SOLVED["q2_answer"]},
            "visible": {**handmade.SOLVED, **handmade.VISIBLE_ONLY},
        }
        return course, {k: (lambda v=v: handmade.answered(course, v)) for k, v in
                        patterns.items()}, (lambda c, s, nb: handmade.submit(c, s, nb))
    course = helpers.make_course(root)
    nbgrader("generate_assignment", assignment, "--force", course=course)
    ids = helpers.answer_ids(assignment)
    half = len(ids) // 2
    sets = {"full": set(ids), "blank": set(), "first": set(ids[:half]),
            "second": set(ids[half:]), "odd": set(ids[1::2])}
    return course, {k: (lambda v=v: helpers.submission(assignment, solve=v))
                    for k, v in sets.items()}, \
        (lambda c, s, nb: helpers.submit(c, s, assignment, nb))


def grade_cmd(assignment: str, args) -> list[str]:
    cmd = [sys.executable, "-m", "autograder", "grade", assignment]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    if args.no_sandbox or sandbox_problem() is not None:
        cmd.append("--no-sandbox")
    return cmd


def per_cell(course: Path, assignment: str) -> dict[str, dict]:
    return {s: v.per_cell for s, v in read_scores(course, assignment).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=1000)
    ap.add_argument("--assignment", default="ps1")
    ap.add_argument("--kill-after", type=float, default=0.5,
                    help="share of the class done when the signal is sent")
    ap.add_argument("--signal", default="KILL", choices=["KILL", "INT", "TERM"])
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--no-sandbox", action="store_true")
    args = ap.parse_args()
    a = args.assignment
    env = nbgrader_env()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        tmp = Path(tmp)
        # the true scores: one submission of each pattern, graded alone
        truth_course, patterns, submit = make(tmp / "truth", a)
        for name, nb in patterns.items():
            submit(truth_course, name, nb())
        subprocess.run(grade_cmd(a, args), cwd=truth_course, env=env, check=True,
                       capture_output=True)
        truth = per_cell(truth_course, a)

        course, patterns, submit = make(tmp / "class", a)
        names = list(patterns)
        made = {name: patterns[name]() for name in names}
        pattern_of = {}
        for i in range(args.students):
            student = f"learner{i:05d}"
            pattern_of[student] = names[i % len(names)]
            submit(course, student, made[pattern_of[student]])
        sig = getattr(signal, "SIG" + args.signal)
        want = int(args.students * args.kill_after)
        t0 = time.monotonic()
        proc = subprocess.Popen(grade_cmd(a, args), cwd=course, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        killed_at = None
        for line in proc.stderr:
            m = PROGRESS.match(line)
            if m and int(m.group(1)) >= want:
                os.killpg(proc.pid, sig)
                killed_at = time.monotonic() - t0
                break
        proc.communicate()
        first = time.monotonic() - t0
        with sqlite3.connect(course / "gradebook.db") as db:
            before = dict(db.execute("select student, state from autograder_graded "
                                     "where assignment = ?", (a,)).fetchall())
        done_before = sum(v == "graded" for v in before.values())
        t1 = time.monotonic()
        rerun = subprocess.run(grade_cmd(a, args), cwd=course, env=env, text=True,
                               capture_output=True)
        resume = time.monotonic() - t1
        rows = json.loads((course / "grade-reports" / f"{a}.json").read_text())["submissions"]
        status = {r["student"]: r["status"] for r in rows}
        got = per_cell(course, a)
        lost = [s for s, p in pattern_of.items() if got.get(s) != truth[p]]
        skipped = {s for s, v in status.items() if v == "skipped"}
        wrongly_skipped = sorted(skipped - {s for s, v in before.items() if v == "graded"})
        with sqlite3.connect(course / "gradebook.db") as db:
            subs = db.execute("select count(*), count(distinct student_id) from "
                              "submitted_assignment").fetchone()
            ledger = db.execute("select count(*), sum(state = 'graded') from autograder_graded "
                                "where assignment = ?", (a,)).fetchone()
        folders = len([p for p in (course / "autograded").iterdir() if p.is_dir()])
        print(f"assignment {a}, {args.students} submissions, {len(names)} patterns, "
              f"SIG{args.signal} sent at {killed_at:.1f} s after {want} reported done "
              f"(exit {proc.returncode}, {first:.1f} s)")
        print(f"  recorded graded when it died: {done_before}; being graded: "
              f"{sum(v == 'grading' for v in before.values())}")
        print(f"  re-run: exit {rerun.returncode} in {resume:.1f} s; skipped {len(skipped)}, "
              f"graded {sum(v in ('graded', 'problems') for v in status.values())}, other "
              f"{sum(v not in ('graded', 'problems', 'skipped') for v in status.values())}")
        print(f"  lost (score differs from the pattern's true score): {len(lost)}")
        print(f"  skipped without having been graded: {len(wrongly_skipped)}")
        print(f"  gradebook submissions: {subs[0]} ({subs[1]} learners); autograded/ folders: "
              f"{folders}; ledger rows: {ledger[0]} ({ledger[1]} graded)")
        ok = (not lost and not wrongly_skipped and rerun.returncode == 0
              and subs[0] == subs[1] == folders == ledger[0] == ledger[1] == args.students)
        print("OK: nothing lost, no duplicate" if ok else "FAILED")
        shutil.rmtree(tmp, ignore_errors=True)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
