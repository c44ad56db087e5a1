"""Executing one sanitized notebook in a worker: nbgrader's own ``Execute``, made robust.

:class:`WorkerExecute` *is* nbgrader's ``Execute`` preprocessor (same timeouts, interrupt on
timeout, error-on-timeout output, ``on_cell_executed`` repair of hidden tracebacks), with
three additions that only change what happens where stock nbgrader would crash or hang:

* the kernel is forked by a worker (:class:`~autograder.grading.sandbox.WorkerKernelManager`);
* when the kernel dies (``os._exit``, a segfault, a memory limit, the whole-notebook
  deadline), the cells already run keep their outputs and every cell not run gets an
  error output saying why, so its tests score 0 and the rest of the notebook is still
  graded, where stock nbgrader abandons the whole submission;
* outputs beyond a byte budget are dropped, keeping what grading looks at (errors,
  the fact that something went to stderr, the first ``execute_result``);
* the submission's checker (:class:`autograder.grading.zygote.Checker`) is told when each
  code cell begins, with the cell's time limit, and when it ends, and the record of the checks
  it answered during each graded cell is kept (:attr:`WorkerExecute.checks`) for
  :mod:`autograder.grading.verify`: a check never outlives its cell and is given no more
  than the cell's time left, so a runaway answer costs its own cell only.
"""

from __future__ import annotations

import threading
import time

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute
from traitlets.config import Config

from autograder.grading.calibrate import CellLimits
from autograder.grading.sandbox import Limits, Worker, WorkerKernelManager

TRUNCATED = "[output truncated by the grader: this notebook printed more than {:,} bytes]\n"


def _error(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=[f"{ename}: {evalue}"])


def _size(msg: dict) -> int:
    content = msg.get("content", {})
    n = len(content.get("text", "") or "")
    for value in (content.get("data") or {}).values():
        n += len(value) if isinstance(value, str) else len(str(value))
    n += sum(len(line) for line in content.get("traceback", []) or [])
    return n


class WorkerExecute(Execute):
    """nbgrader's ``Execute`` running the kernel in a worker, under a whole-notebook deadline."""

    def __init__(self, worker: Worker, limits: Limits, cell_limits: CellLimits | None = None,
                 **kwargs) -> None:
        kwargs["kernel_manager_class"] = WorkerKernelManager.for_worker(worker)
        super().__init__(**kwargs)
        # through the config: nbconvert's preprocess() re-runs NotebookClient.__init__,
        # which resets traits from the config
        c = Config()
        if limits.cell_timeout is not None:
            c.Execute.timeout = int(limits.cell_timeout)
        c.Execute.shutdown_kernel = "immediate"
        c.Execute.startup_timeout = int(limits.startup_timeout)
        self.update_config(c)
        self.worker = worker
        self.limits = limits
        self.cell_limits = cell_limits
        self.limit_of: dict[int, tuple[float | None, str]] = {}  # cell index -> limit, why
        self.stopped: str | None = None  # why execution stopped early, if it did
        self.cells_run = 0
        self.output_dropped = 0
        self.checks: dict[str, dict] = {}  # graded cell's grade id -> the checker's record

    # -- per-cell limits measured on this machine (autograder.grading.calibrate)
    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        if self.cell_limits is None or cell is None:
            return timeout
        limit, why = self.cell_limits.limit(cell)
        if timeout is not None and (limit is None or limit >= timeout):
            return timeout
        self.limit_of[self._index] = (limit, why)
        return limit

    # -- whole-notebook deadline and dead kernels
    def preprocess(self, nb, resources=None, km=None):
        self.limit_of = {}
        self._index = -1
        self.stopped = None
        self.timed_out: list[int] = []
        self.cells_run = 0
        self._out_bytes = 0
        self.output_dropped = 0
        self._truncated_cells: set[int] = set()
        self.checks = {}
        deadline = self.limits.notebook_timeout
        timer = threading.Timer(deadline, self.worker.kill_kernel,
                                kwargs={"reason": f"the whole notebook took longer than "
                                                  f"{deadline:g} s and was stopped"})
        timer.daemon = True
        self._t0 = time.monotonic()
        timer.start()
        try:
            return super().preprocess(nb, resources, km=km)
        finally:
            timer.cancel()

    def _why_dead(self) -> str:
        kernel = self.worker.kernel
        if kernel is not None and kernel.killed_by_driver:
            return kernel.killed_by_driver
        code = kernel.returncode if kernel is not None else None
        if code is not None and code < 0:
            return f"the kernel died (killed by signal {-code})"
        if code is not None:
            return f"the kernel exited with status {code}"
        return "the kernel died"

    def preprocess_cell(self, cell, resources, index):
        if self.stopped or cell.cell_type != "code":
            return self._run_cell(cell, resources, index)
        tag = str(index)
        self._index = index
        try:
            self.worker.cell_begin(tag, self._get_timeout(cell))
        except Exception:  # the worker is gone: the cell fails below anyway
            return self._run_cell(cell, resources, index)
        try:
            return self._run_cell(cell, resources, index)
        finally:
            record = self.worker.cell_end(tag)
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution") and meta.get("grade_id"):
                self.checks[meta["grade_id"]] = record

    def _describe(self, index: int) -> str:
        from autograder.grading.core import describe_cell

        nb = getattr(self, "nb", None)
        return describe_cell(nb, index) if nb is not None else f"cell {index}"

    def _run_cell(self, cell, resources, index):
        if self.stopped:
            if cell.cell_type == "code":
                cell.outputs = [_error("NotExecuted", f"not run: {self.stopped}")]
                cell.execution_count = None
            return cell, resources
        self._index = index
        try:
            cell, resources = super().preprocess_cell(cell, resources, index)
        except DeadKernelError:
            self.stopped = f"{self._why_dead()} (in {self._describe(index)})"
            cell.outputs = list(cell.get("outputs", [])) + [_error("KernelDied", self.stopped)]
            return cell, resources
        except CellTimeoutError:
            # the cell timed out and the kernel did not even go idle after the interrupt:
            # stock nbgrader gives up on the whole submission here; stop the kernel instead
            self.stopped = (f"the kernel did not respond after {self._describe(index)} timed out "
                            "(does the code ignore interrupts?)")
            self.worker.kill_kernel(reason=self.stopped)
            cell.outputs = list(cell.get("outputs", [])) + [_error("CellTimeoutError",
                                                                   self.stopped)]
            return cell, resources
        if cell.cell_type == "code":
            self.cells_run += 1
            if any(o.get("ename") == "CellTimeoutError" for o in cell.get("outputs", [])):
                self.timed_out.append(index)
        return cell, resources

    # -- output budget
    def output(self, outs, msg, display_id, cell_index):
        size = _size(msg)
        self._out_bytes += size
        if self._out_bytes <= self.limits.output:
            return super().output(outs, msg, display_id, cell_index)
        self.output_dropped += size
        msg_type = msg["msg_type"]
        content = msg.get("content", {})
        if msg_type == "stream":
            name = content.get("name", "stdout")
            # keep one marker per stream and cell: stderr output must still cost the cell
            if any(o.get("output_type") == "stream" and o.get("name") == name
                   and o.get("text", "").startswith("[output truncated") for o in outs):
                return None
            outs.append(NotebookNode(output_type="stream", name=name,
                                     text=TRUNCATED.format(self.limits.output)))
            return None
        if msg_type == "error":
            outs.append(NotebookNode(output_type="error", ename=content.get("ename", "Error"),
                                     evalue=str(content.get("evalue", ""))[:2000],
                                     traceback=list(content.get("traceback", []))[-20:]))
            return None
        if msg_type == "execute_result":
            text = str((content.get("data") or {}).get("text/plain", ""))[:2000]
            outs.append(NotebookNode(output_type="execute_result", metadata={},
                                     execution_count=content.get("execution_count"),
                                     data={"text/plain": text}))
        return None
