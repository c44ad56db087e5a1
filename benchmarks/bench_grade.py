"""Benchmark: stock ``nbgrader autograde`` against ``autograder grade`` on a synthetic class.

    python benchmarks/bench_grade.py [--students 40] [--assignment 01_leaves] [--repeats 1]
                                     [--workers N] [--timeout S] [--no-sandbox]

Builds a class of ``--students`` submissions of a real assignment of this course (full,
partial, blank, wrong answers and one that hangs in a cell), grades the same submissions
with stock nbgrader and with ``autograder grade`` in the same run (``--repeats`` times,
alternating), checks that the per-cell scores in the gradebook are identical, and prints
wall times, per-submission figures and the ratio (medians over the repeats).
Not a test: it takes minutes. Run from the repository root.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import (  # noqa: E402
    answer_ids,
    is_answer,
    make_course,
    submission,
    submit,
)

from autograder.grading.sandbox import sandbox_problem  # noqa: E402
from autograder.pipeline import nbgrader, nbgrader_env, read_scores  # noqa: E402

HANG = "import time\ntime.sleep(10**9)  # a learner's cell that never returns"


def wrong(assignment: str):
    """The release notebook with the stub's ``raise`` removed: the template's placeholders
    are the answers."""
    nb = submission(assignment, solve=set())
    for cell in nb.cells:
        if is_answer(cell):
            cell.source = "\n".join(line for line in cell.source.splitlines()
                                    if "raise NotImplementedError" not in line)
    return nb


def build_class(course: Path, assignment: str, n: int, seed: int = 0) -> dict[str, str]:
    rng = random.Random(seed)
    ids = answer_ids(assignment)
    kinds: dict[str, str] = {}
    plan = ["hanging"] + ["full"] * (n // 4) + ["blank"] * (n // 7) + ["wrong"] * (n // 5)
    plan += ["partial"] * (n - len(plan))
    for i, kind in enumerate(plan):
        student = f"s{i:03d}_{kind}"
        if kind == "full":
            nb = submission(assignment)
        elif kind == "blank":
            nb = submission(assignment, solve=set())
        elif kind == "wrong":
            nb = wrong(assignment)
        elif kind == "partial":
            nb = submission(assignment, solve=set(rng.sample(ids, rng.randint(1, len(ids) - 1))))
        else:  # hanging: full answers, and a cell that sleeps forever after the first answer
            nb = copy.deepcopy(submission(assignment))
            idx = next(i for i, c in enumerate(nb.cells) if is_answer(c))
            nb.cells.insert(idx + 1, nbformat.v4.new_code_cell(HANG))
        submit(course, student, assignment, nb)
        kinds[student] = kind
    return kinds


def per_cell(course: Path, assignment: str) -> dict:
    return {s: (v.score, v.per_cell) for s, v in read_scores(course, assignment).items()}


def run_stock(course: Path, assignment: str, timeout: int) -> float:
    t0 = time.perf_counter()
    extra = [f"--Execute.timeout={timeout}", f"--ExecutePreprocessor.timeout={timeout}"] \
        if timeout else []
    nbgrader("autograde", assignment, "--force", *extra, course=course, timeout=7200)
    return time.perf_counter() - t0


def run_ours(course: Path, assignment: str, timeout: int, workers: int | None,
             sandbox: bool) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "autograder", "grade", assignment, "--force", "--quiet"]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    if workers:
        cmd += ["--workers", str(workers)]
    if not sandbox:
        cmd.append("--no-sandbox")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=course, env=nbgrader_env(), capture_output=True, text=True,
                          timeout=7200)
    took = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"autograder grade failed:\n{proc.stdout}\n{proc.stderr}")
    rep = json.loads((course / "grade-reports" / f"{assignment}.json").read_text())
    return took, rep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--assignment", default="01_leaves")
    ap.add_argument("--students", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--timeout", type=int, default=0,
                    help="per-cell timeout, both graders (default 0: the course's own "
                         "configuration, 120 s)")
    ap.add_argument("--no-sandbox", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the scratch courses")
    args = ap.parse_args()
    sandbox = not args.no_sandbox
    if sandbox and sandbox_problem():
        raise SystemExit(f"no sandbox here ({sandbox_problem()}); pass --no-sandbox")

    tmp = Path(tempfile.mkdtemp(prefix="bench-grade-"))
    (tmp / "stock").mkdir()
    stock_course = make_course(tmp / "stock")  # tmp/stock/course
    nbgrader("generate_assignment", args.assignment, "--force", course=stock_course)
    kinds = build_class(stock_course, args.assignment, args.students)
    ours_course = tmp / "ours" / "course"
    shutil.copytree(stock_course, ours_course)
    print(f"class: {len(kinds)} submissions of {args.assignment}: "
          + ", ".join(f"{k} {sum(v == k for v in kinds.values())}"
                      for k in ("full", "partial", "blank", "wrong", "hanging")))
    print(f"cores: {os.cpu_count()}, workers: {args.workers or os.cpu_count()}, "
          f"sandbox: {sandbox}, per-cell timeout: "
          f"{f'{args.timeout} s' if args.timeout else 'the course configuration'}")

    stock_t, ours_t, reports = [], [], []
    for r in range(args.repeats):
        stock_t.append(run_stock(stock_course, args.assignment, args.timeout))
        took, rep = run_ours(ours_course, args.assignment, args.timeout, args.workers, sandbox)
        ours_t.append(took)
        reports.append(rep)
        print(f"repeat {r + 1}: stock {stock_t[-1]:.1f} s, autograder grade {took:.1f} s "
              f"(x{stock_t[-1] / took:.2f})")

    stock_scores = per_cell(stock_course, args.assignment)
    our_scores = per_cell(ours_course, args.assignment)
    same = stock_scores == our_scores
    n = len(kinds)
    s_med, o_med = statistics.median(stock_t), statistics.median(ours_t)
    subs = reports[-1]["submissions"]
    per_sub = statistics.median(s["seconds"] for s in subs)
    print()
    print(f"{'':28} {'stock nbgrader':>15} {'autograder grade':>17}")
    print(f"{'wall time (median)':28} {s_med:14.1f}s {o_med:16.1f}s")
    print(f"{'per submission (wall / n)':28} {s_med / n:14.2f}s {o_med / n:16.2f}s")
    print(f"{'one submission on one worker (median)':38} {per_sub:12.2f}s")
    print(f"ratio (stock / ours, medians): x{s_med / o_med:.2f}")
    print(f"scores identical (per cell, all {n}): {same}")
    if not same:
        for s in sorted(stock_scores):
            if stock_scores[s] != our_scores.get(s):
                print(f"  {s}: stock {stock_scores[s]} ours {our_scores.get(s)}")
    statuses = {}
    for s in subs:
        statuses[s["status"]] = statuses.get(s["status"], 0) + 1
    print(f"statuses: {statuses}")
    for s in subs:
        if s["status"] != "graded":
            print(f"  {s['student']}: {s['status']}: {'; '.join(s['reasons'])[:160]}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"kept: {tmp}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
