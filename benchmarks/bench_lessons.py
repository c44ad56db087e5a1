"""Benchmark: each lesson's Run All and Validate, as ratios of a bare notebook's Run All.

    python benchmarks/bench_lessons.py [ASSIGNMENT ...] [--repeats 3] [--no-validate]

For each lesson (default: all), in one run on this machine:

* **Run All**: the release notebook with every answer cell solved (the learner's notebook at the
  end of the lesson; hidden tests are not in it), executed top to bottom in a fresh kernel with
  nbclient, as JupyterLab's Run All does;
* **Validate**: nbgrader's own ``Validator`` on that notebook (what the Validate button runs;
  it executes the notebook in a fresh kernel and reads the graded cells);
* **bare**: a notebook holding only lesson 01's setup cell and one visible check: the fixed cost
  of a kernel, ``import torch`` and the checker's start, measured in between the lessons.

Prints medians over ``--repeats`` and each time as a multiple of the bare median (the course's
target: at most about 2x bare for Run All, and under 15 s for either). Not a test: it takes
minutes. Run from the repository root.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import assignments, notebook_path, read, submission  # noqa: E402

BARE_CHECK = ('check("q1", {"flour": True, "dough": False, "bread": False, "meat": True, '
              '"water": True, "salt": True})')


def bare_notebook() -> nbformat.NotebookNode:
    release = read(notebook_path("01_leaves", ROOT / "release"))
    setup = next(c for c in release.cells if c.cell_type == "code" and "checker(" in c.source)
    nb = nbformat.v4.new_notebook(metadata=release.metadata)
    nb.cells = [nbformat.v4.new_code_cell(setup.source), nbformat.v4.new_code_cell(BARE_CHECK)]
    return nb


def run_all(nb: nbformat.NotebookNode, cwd: Path) -> float:
    from nbclient import NotebookClient

    nb = nbformat.from_dict(nb)
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    elapsed = time.perf_counter() - start
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    if errors:
        print(f"    warning: {len(errors)} cell(s) raised, first: {errors[0].get('ename')}: "
              f"{errors[0].get('evalue', '')[:120]}")
    return elapsed


def validate(nb: nbformat.NotebookNode, folder: Path, name: str) -> float:
    from nbgrader.validator import Validator

    path = folder / name
    nbformat.write(nb, str(path))
    start = time.perf_counter()
    results = Validator().validate(str(path))
    elapsed = time.perf_counter() - start
    failed = results.get("failed", []) if isinstance(results, dict) else []
    if failed:
        print(f"    warning: Validate reports {len(failed)} failing cell(s)")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-validate", action="store_true")
    args = parser.parse_args()
    names = args.assignments or assignments()
    bare = bare_notebook()
    bare_times: list[float] = []
    rows: dict[str, dict[str, list[float]]] = {n: {"run": [], "validate": []} for n in names}
    with tempfile.TemporaryDirectory(prefix="bench-lessons-") as tmp:
        folder = Path(tmp)
        for r in range(args.repeats):
            bare_times.append(run_all(bare, ROOT / "release" / "01_leaves"))
            print(f"[{r + 1}/{args.repeats}] bare {bare_times[-1]:.1f} s", flush=True)
            for name in names:
                nb = submission(name)
                cwd = ROOT / "release" / name
                rows[name]["run"].append(run_all(nb, cwd))
                line = f"[{r + 1}/{args.repeats}] {name}: Run All {rows[name]['run'][-1]:.1f} s"
                if not args.no_validate:
                    rows[name]["validate"].append(
                        validate(nb, folder, notebook_path(name).name))
                    line += f", Validate {rows[name]['validate'][-1]:.1f} s"
                print(line, flush=True)
            bare_times.append(run_all(bare, ROOT / "release" / "01_leaves"))
    base = statistics.median(bare_times)
    print(f"\nbare notebook (setup cell + one check): median {base:.1f} s "
          f"over {len(bare_times)} runs\n")
    print(f"{'lesson':22} {'Run All':>9} {'x bare':>7} {'Validate':>9} {'x bare':>7}")
    for name in names:
        run = statistics.median(rows[name]["run"])
        line = f"{name:22} {run:8.1f}s {run / base:6.2f}x"
        if rows[name]["validate"]:
            val = statistics.median(rows[name]["validate"])
            line += f" {val:8.1f}s {val / base:6.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
