"""Benchmark: what an open lesson costs in memory, against a plain PyTorch notebook.

    python benchmarks/bench_memory.py [--lessons 01_leaves ...] [--modes fork spawn]
                                      [--checks 5]

For each checker mode (``fork``: the kernel forks its checker in the setup cell, before any
learner code; ``spawn``: a new Python that imports torch again, as before), in one run:

* a **plain notebook** (``import torch``, a small model, backward, one matplotlib plot) in a
  fresh kernel: the proportional set size (PSS, what a process really adds: each shared page
  counted once in all) of the kernel and everything it started;
* **each lesson**, its release notebook with every answer filled, run top to bottom (Run All)
  in a fresh kernel: PSS of the kernel and all its descendants (the checker and its forks), as a ratio to the
  plain notebook and to the plain notebook that also trains one optimizer step (an optimizer
  imports ``torch._dynamo``, as the lessons' own cells do), and the checker alone: the pages
  only the checker holds (its unique set size), what it adds to the kernel;
* **all lessons open at once** against as many plain notebooks open at once;
* the **visible-check latency**: in a lesson's kernel, the first check after the setup cell and
  then ``--checks`` more (each a new answer, so none is answered from memory).

Prints each figure as a ratio to the plain kernel(s) of the same mode and run. Not a test: it
takes minutes. Run from the repository root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from helpers import LiveKernel as Kernel  # noqa: E402
from helpers import assignments, submission  # noqa: E402

PLAIN = [
    "import torch\nfrom torch import nn",
    "model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))\n"
    "loss = model(torch.randn(32, 4)).pow(2).mean()\nloss.backward()",
    "import matplotlib.pyplot as plt\nplt.plot([p.grad.norm().item() for p in model.parameters()])"
    "\nplt.show()",
]
#: the plain notebook, training one step with an optimizer: building a ``torch.optim``
#: optimizer imports ``torch._dynamo`` (about 70 MB), as lessons 02-08 do in their own cells
PLAIN_TRAINING = PLAIN + [
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nopt.step()",
]


def pss(pid: int) -> float:
    """Proportional set size of one process, MB (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) for line in f if line.startswith("Pss:")) / 1024
    except OSError:
        return 0.0


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def tree_pss(pid: int) -> float:
    return sum(pss(p) for p in tree(pid))


def uss(pid: int) -> float:
    """Unique set size, MB: the pages only this process holds (what ending it would free)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) for line in f
                       if line.startswith(("Private_Clean:", "Private_Dirty:"))) / 1024
    except OSError:
        return 0.0


def checker_uss(pid: int) -> float:
    """What the course's checker adds to kernel ``pid``: the unique pages of its descendants."""
    return sum(uss(p) for p in tree(pid) if p != pid)


def environment(tmp: Path, mode: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HOME": str(tmp / "home"), "MPLCONFIGDIR": str(tmp / "mpl"),
                "IPYTHONDIR": str(tmp / "ipython"), "AUTOGRADER_CHECKER": mode,
                "MPLBACKEND": "module://matplotlib_inline.backend_inline"})
    env.pop("NBGRADER_EXECUTION", None)
    return env


def run_notebook(kernel: Kernel, cells: list[str]) -> None:
    for code in cells:
        kernel.run(code, timeout=300, allowed=("NotImplementedError",))


def lesson_cells(assignment: str) -> list[str]:
    nb = submission(assignment)  # the release, every answer filled
    return [c.source for c in nb.cells if c.cell_type == "code"]


def open_lesson(tmp: Path, assignment: str, mode: str) -> Kernel:
    folder = ROOT / "release" / assignment
    kernel = Kernel(folder, environment(tmp, mode))
    run_notebook(kernel, lesson_cells(assignment))
    time.sleep(1)  # let a background check finish
    return kernel


def open_plain(tmp: Path, mode: str, cells: list[str] = PLAIN) -> Kernel:
    kernel = Kernel(tmp, environment(tmp, mode))
    run_notebook(kernel, cells)
    time.sleep(1)
    return kernel


def check_latency(tmp: Path, assignment: str, mode: str, n: int) -> tuple[float, float]:
    """(seconds for the first check after the setup cell, median of the next ``n``), for
    lesson 01's Q6."""
    kernel = Kernel(ROOT / "release" / assignment, environment(tmp, mode))
    try:
        setup = lesson_cells(assignment)[0]
        kernel.run(setup)
        times = []
        for i in range(n + 1):
            answer = [1.0 + i, 1.0]  # a new answer each time: asked, never remembered
            t0 = time.perf_counter()
            kernel.run(f'_v = check("q6", {answer!r})')
            times.append(time.perf_counter() - t0)
        return times[0], statistics.median(times[1:])
    finally:
        kernel.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lessons", nargs="*", default=None)
    ap.add_argument("--modes", nargs="*", default=["fork", "spawn"])
    ap.add_argument("--checks", type=int, default=5)
    args = ap.parse_args()
    lessons = args.lessons or assignments()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp_name:
        tmp = Path(tmp_name)
        for mode in args.modes:
            r: dict = {"lessons": {}}
            plain = open_plain(tmp, mode)
            r["plain"] = tree_pss(plain.pid)
            plain.shutdown()
            plain = open_plain(tmp, mode, PLAIN_TRAINING)
            r["plain_training"] = tree_pss(plain.pid)
            plain.shutdown()
            for a in lessons:
                k = open_lesson(tmp, a, mode)
                r["lessons"][a] = (tree_pss(k.pid), checker_uss(k.pid))
                k.shutdown()
            kernels = [open_lesson(tmp, a, mode) for a in lessons]
            r["all"] = sum(tree_pss(k.pid) for k in kernels)
            for k in kernels:
                k.shutdown()
            plains = [open_plain(tmp, mode) for _ in lessons]
            r["plains"] = sum(tree_pss(k.pid) for k in plains)
            for k in plains:
                k.shutdown()
            r["latency"] = check_latency(tmp, "01_leaves", mode, args.checks)
            results[mode] = r
    for mode, r in results.items():
        print(f"\n== checker: {mode} ==")
        print(f"plain notebook kernel: {r['plain']:.0f} MB; the same, training one optimizer "
              f"step: {r['plain_training']:.0f} MB")
        print(f"{'lesson':20s} {'total':>7s}  {'x plain':>7s}  {'x training':>10s}  checker alone")
        for a, (mb, own) in r["lessons"].items():
            print(f"{a:20s} {mb:4.0f} MB  x{mb / r['plain']:6.2f}  x{mb / r['plain_training']:9.2f}"
                  f"  {own:5.0f} MB")
        n = len(lessons)
        print(f"all {n} lessons open: {r['all']:.0f} MB against {n} plain notebooks "
              f"{r['plains']:.0f} MB: x{r['all'] / r['plains']:.2f}")
        first, later = r["latency"]
        print(f"visible check (01_leaves q6): first {first * 1000:.0f} ms, then median "
              f"{later * 1000:.0f} ms")
    if len(results) == 2:
        a, b = list(results)
        print(f"\n{a} against {b}: one lesson (median of the lessons) x"
              f"{statistics.median(results[a]['lessons'][x][0] for x in lessons) / statistics.median(results[b]['lessons'][x][0] for x in lessons):.2f}"
              f", all open x{results[a]['all'] / results[b]['all']:.2f}")


if __name__ == "__main__":
    main()
