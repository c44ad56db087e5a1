"""Benchmark: the local grader against the Dask grader, same class, same machine, one run.

    python benchmarks/bench_dask.py [--students 24] [--assignment 01_leaves] [--repeats 3]
                                    [--no-sandbox]

Starts a Dask scheduler and worker processes on 127.0.0.1, builds a class (full, partial,
blank), and grades it ``--repeats`` times each way, alternating: the local grader with 1 and 2
workers, and the Dask grader with 1 and 2 worker processes (one thread each). Each Dask
configuration is warmed up once first (its workers start their sandboxed worker, importing
torch, on their first task, as a local run does at its start; a cluster serves many runs).
Prints throughput (submissions per minute, medians), the Dask/local ratio at the same number
of workers, the per-submission overhead the cluster adds, and whether every per-cell score
is identical. Not a test: it takes minutes. Run from the repository root.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import answer_ids, make_course, submission, submit  # noqa: E402
from servers import DaskCluster  # noqa: E402

from autograder.grading.sandbox import sandbox_problem  # noqa: E402
from autograder.pipeline import nbgrader, nbgrader_env, read_scores  # noqa: E402


def grade(course: Path, assignment: str, extra: list[str], sandbox: bool) -> float:
    cmd = [sys.executable, "-m", "autograder", "grade", assignment, "--force", "--quiet",
           *extra] + ([] if sandbox else ["--no-sandbox"])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=course, env=nbgrader_env(), capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"grading failed:\n{proc.stdout}\n{proc.stderr}")
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--assignment", default="01_leaves")
    ap.add_argument("--students", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-sandbox", action="store_true")
    args = ap.parse_args()
    sandbox = not args.no_sandbox and sandbox_problem() is None
    a = args.assignment
    tmp = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    try:
        course = make_course(tmp)
        nbgrader("generate_assignment", a, "--force", course=course)
        ids = answer_ids(a)
        for i in range(args.students):
            solve = [None, set(), set(ids[: 1 + i % len(ids)])][i % 3]
            submit(course, f"s{i:03d}", a, submission(a, solve=solve))
        n = args.students
        times: dict[str, list[float]] = {}
        scores: dict[str, dict] = {}
        clusters = {k: DaskCluster(tmp / f"dask{k}", workers=k) for k in (1, 2)}
        for c in clusters.values():
            c.start(env=nbgrader_env())
        try:
            for c in clusters.values():  # warm up: each worker starts its sandbox once
                grade(course, a, ["--scheduler", c.address, "--student", "s000"], sandbox)
            for _ in range(args.repeats):
                for k in (1, 2):
                    name = f"local, {k} worker(s)"
                    times.setdefault(name, []).append(
                        grade(course, a, ["--workers", str(k)], sandbox))
                    scores[name] = {s: v.per_cell for s, v in read_scores(course, a).items()}
                    name = f"Dask, {k} worker(s)"
                    times.setdefault(name, []).append(
                        grade(course, a, ["--scheduler", clusters[k].address], sandbox))
                    scores[name] = {s: v.per_cell for s, v in read_scores(course, a).items()}
                    print("  " + ", ".join(f"{m}: {t[-1]:.1f} s" for m, t in times.items()),
                          flush=True)
        finally:
            for c in clusters.values():
                c.stop()
        print(f"\n{n} submissions of {a}, sandbox: {sandbox}, repeats: {args.repeats} "
              "(medians)")
        med = {m: statistics.median(t) for m, t in times.items()}
        for m, t in med.items():
            print(f"  {m:22} {t:7.1f} s   {60 * n / t:6.1f} submissions/min")
        for k in (1, 2):
            loc, dk = med[f"local, {k} worker(s)"], med[f"Dask, {k} worker(s)"]
            print(f"  {k} worker(s): Dask throughput = {loc / dk:.2f} x local "
                  f"({100 * (1 - loc / dk):+.1f} % lost); overhead per submission "
                  f"{(dk - loc) * k / n:+.2f} s")
        same = all(v == scores["local, 1 worker(s)"] for v in scores.values())
        print(f"  per-cell scores identical across all four: {same}")
        return 0 if same else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
