"""Per-cell time limits measured on this machine: a runaway cell costs seconds, not minutes.

nbgrader gives every cell the same limit (``Execute.timeout``: 120 s in this course), sized
for the slowest cell on the slowest machine. One learner's infinite loop then holds a worker
for the full 120 s, while the whole rest of a class may take about as long on the others.

At the start of a run the driver executes the assignment's own source notebook (solutions
and hidden tests) once on a worker, exactly as a submission is executed, and records how
long each cell took (nbclient's timing metadata). Each cell of a submission then gets

    limit = min(configured timeout, max(floor, factor x the solution's time for that cell))

A cell is matched by its nbgrader ``grade_id``, else by its source text; a cell the solution
does not have (one a learner added or rewrote) gets the factor times the slowest cell of the
solution (at least the floor). With the defaults (x10, floor 10 s) no cell that the solution
runs in a second is stopped before 10 s, on a slow machine as on a fast one, because the
measure is taken on the machine that grades. A submission that does not run away therefore
scores exactly as under the fixed limit (``tests/test_grade_cli.py`` compares with stock
nbgrader); one that does is stopped early and reported with its limit and why.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime

from nbformat import NotebookNode


def cell_key(cell: NotebookNode) -> str:
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    if gid:
        return f"id:{gid}"
    return "src:" + hashlib.sha1(cell.get("source", "").strip().encode()).hexdigest()


def _seconds(cell: NotebookNode) -> float | None:
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not start or not end:
        return None
    try:
        t0 = datetime.fromisoformat(start.replace("Z", "+00:00"))
        t1 = datetime.fromisoformat(end.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (t1 - t0).total_seconds())


def measure(executed: NotebookNode) -> dict[str, float]:
    """Seconds per cell key of an executed notebook (code cells that ran)."""
    out: dict[str, float] = {}
    for cell in executed.cells:
        if cell.cell_type != "code":
            continue
        t = _seconds(cell)
        if t is not None:
            key = cell_key(cell)
            out[key] = max(out.get(key, 0.0), t)
    return out


@dataclass
class CellLimits:
    measured: dict[str, float] = field(default_factory=dict)
    factor: float = 10.0
    floor: float = 10.0
    ceiling: float | None = 120.0  # the configured per-cell timeout

    def limit(self, cell: NotebookNode) -> tuple[float | None, str]:
        """The cell's limit in seconds and how it was set (for the report)."""
        t = self.measured.get(cell_key(cell))
        if t is not None:
            basis = f"{self.factor:g} x the solution's {t:.2f} s"
        else:
            t = max(self.measured.values(), default=0.0)
            basis = (f"{self.factor:g} x the solution's slowest cell ({t:.2f} s), as the "
                     "solution has no such cell")
        limit = max(self.floor, self.factor * t)
        if limit == self.floor:
            basis += f", at least {self.floor:g} s"
        if self.ceiling is not None and limit >= self.ceiling:
            return self.ceiling, f"the configured timeout of {self.ceiling:g} s"
        return limit, basis
