"""Benchmark and demo: ``autograder report`` on a graded synthetic class.

    python benchmarks/bench_report.py [--students 30] [--repeats 3] [--keep DIR]
                                      [--screenshot PNG] [--no-sandbox]

Builds a class of ``--students`` submissions of ``01_leaves`` from the release notebook with
answers drawn at random (a fixed random sequence) from the planted wrong answers of
``tests/known_answers.py`` (each names one misconception), plus half-solved and untouched
ones, grades it once with ``autograder grade``, then times ``autograder report`` (the whole
command, ``--repeats`` times; the median is printed) and prints its terminal summary.
``--screenshot`` saves a full-page picture of the report taken with headless Chromium (how
the README's example was made). Not a test: grading takes a minute or two. Run from the
repository root.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import make_course  # noqa: E402
from known_answers import (  # noqa: E402
    FLOUR_RECIPE,
    HALF,
    MEAT_RECIPE,
    PARCEL_WARNS,
    SALT,
    STATION_SILENT,
    WATER,
    submit_class,
)

from autograder.grading.sandbox import sandbox_problem  # noqa: E402
from autograder.pipeline import nbgrader_env  # noqa: E402

# how often each planted answer is drawn: leaf means trainable is the common one
PLANTS = [(WATER, 0.45), (PARCEL_WARNS, 0.3), (STATION_SILENT, 0.25), (SALT, 0.2),
          (FLOUR_RECIPE, 0.15), (MEAT_RECIPE, 0.1)]


def build_class(n: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    klass = {}
    for i in range(n):
        kind = rng.random()
        solve = set() if kind < 0.07 else HALF if kind < 0.2 else None
        plants = [] if solve == set() else [p for p, share in PLANTS if rng.random() < share]
        if solve is HALF:
            plants = [p for p in plants if p.answer in HALF]
        seen: set[str] = set()
        unique = []
        for p in plants:  # one plant per answer cell
            if p.answer not in seen:
                seen.add(p.answer)
                unique.append(p)
        klass[f"student{i + 1:03d}"] = (solve, unique)
    return klass


def screenshot(page: Path, png: Path) -> None:
    from browser.conftest import CHROMIUM_FLAGS, chromium_path
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.goto(page.as_uri())
        tab.eval_on_selector_all("details", "els => els.forEach(e => e.open = false)")
        tab.screenshot(path=str(png), full_page=True)
        browser.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="build the course here and keep it")
    ap.add_argument("--screenshot", type=Path, default=None, metavar="PNG")
    ap.add_argument("--no-sandbox", action="store_true")
    args = ap.parse_args()
    sandbox = ["--no-sandbox"] if args.no_sandbox or sandbox_problem() else []
    tmp = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        where = args.keep or tmp
        where.mkdir(parents=True, exist_ok=True)
        course = make_course(where)
        submit_class(course, build_class(args.students))
        env = nbgrader_env()
        env.pop("NBGRADER_DB_URL", None)
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-m", "autograder", "grade", "01_leaves", "--quiet",
                        "--no-calibrate", *sandbox], cwd=course, env=env, check=True,
                       capture_output=True, text=True)
        print(f"graded {args.students} submissions in {time.monotonic() - t0:.1f} s")
        times, out = [], ""
        for _ in range(args.repeats):
            t1 = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "autograder", "report", "01_leaves"],
                                  cwd=course, env=env, check=True, capture_output=True,
                                  text=True)
            times.append(time.monotonic() - t1)
            out = proc.stdout
        print(out.rstrip())
        print(f"autograder report: median {statistics.median(times):.2f} s over "
              f"{len(times)} runs ({', '.join(f'{t:.2f}' for t in times)} s)")
        page = course / "grade-reports" / "report" / "01_leaves" / "index.html"
        print(f"page: {page.stat().st_size / 1024:.0f} KiB")
        if args.screenshot:
            screenshot(page, args.screenshot)
            print(f"screenshot: {args.screenshot}")
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
