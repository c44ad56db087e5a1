"""The checker a notebook's kernel starts: a fork of the kernel, clean, and gone with it.

Real Jupyter kernels (jupyter_client), in the lesson's folder, as JupyterLab starts them. The
setup cell forks the checker before any learner code runs, so it shares torch's pages with the
kernel instead of importing torch again (benchmarks/bench_memory.py measures the memory). What
that must not cost: a kernel that patches torch or the course afterwards still gets torch's true
verdicts; two kernels checking at once each get their own; a checker killed in the middle of a
check is replaced (by a new Python, never by a fork of a kernel that has run learner code) and
the check answered; nothing is left running once the kernels are shut down.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers import LiveKernel

ROOT = Path(__file__).resolve().parent.parent
SETUP = ('import torch\nimport course\nfrom autograder import checker, client\n'
         'course.seed_everything(0)\ncheck = checker("01_leaves")')

pytestmark = pytest.mark.slow


class Kernel(LiveKernel):
    """A kernel in lesson 01's release folder, with a home of its own and the checker's
    default (fork) mode."""

    def __init__(self, tmp: Path) -> None:
        env = dict(os.environ, HOME=str(tmp), IPYTHONDIR=str(tmp / "ipython"),
                   MPLCONFIGDIR=str(tmp / "mpl"))
        env.pop("NBGRADER_EXECUTION", None)
        env.pop("AUTOGRADER_CHECKER", None)
        super().__init__(ROOT / "release" / "01_leaves", env)


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(c) for c in f.read().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    ks = [Kernel(tmp_path_factory.mktemp(f"kernel{i}")) for i in range(2)]
    try:
        for k in ks:
            k.run(SETUP)
        yield ks
    finally:
        for k in ks:
            k.shutdown()


def test_the_setup_cell_forks_the_checker_from_the_kernel(kernels):
    a, _ = kernels
    kind, checker = a.value("(type(client.oracle()._proc).__name__, client.oracle()._proc.pid)")
    assert kind == "_Forked" and checker in _descendants(a.pid)
    with open(f"/proc/{checker}/stat") as f:
        assert int(f.read().split()[3]) == a.pid  # its parent is the kernel


def test_a_kernel_that_patches_torch_and_the_course_still_gets_true_verdicts(kernels):
    a, _ = kernels
    a.run("torch.Tensor.is_leaf = property(lambda self: True)\n"
          "torch.Tensor.grad = property(lambda self: torch.ones(2))\n"
          "import autograder.questions as q\nq.values_equal = lambda *a, **k: True")
    assert a.value('check("q6", [0.5, 0.5]).passed') is False
    assert a.value('check("q6", [1.0, 1.0]).passed') is True


def test_two_kernels_checking_at_once_get_their_own_verdicts(kernels):
    a, b = kernels
    answers = {a: "[1.0, 1.0]", b: "[0.25, 0.25]"}
    ids = {k: k.send(f'print(check("q6", {v}).passed)') for k, v in answers.items()}
    got = {k: k.collect(i).strip() for k, i in ids.items()}
    assert got == {a: "True", b: "False"}


def test_a_checker_killed_mid_check_is_replaced_and_the_check_answered(kernels):
    _, b = kernels
    old = b.value("client.oracle()._proc.pid")
    slow = ("def weigh_parcels():\n    n = 0\n    for i in range(10 ** 7):\n        n += 1\n"
            "    w = torch.zeros(3, requires_grad=True)\n"
            "    (w * torch.tensor([1.0, 2.0, 3.0])).sum().backward()\n    return w\n")
    code = (f"import os, threading\n{slow}"
            f"threading.Timer(0.5, os.kill, args=({old}, 9)).start()\n"
            "print(check('q11', weigh_parcels).passed)")
    assert b.run(code, timeout=180).strip() == "True"
    kind, new = b.value("(type(client.oracle()._proc).__name__, client.oracle()._proc.pid)")
    assert new != old and not _alive(old)
    assert kind == "Popen"  # a new Python: this kernel has run learner code since


def test_nothing_is_left_running_after_the_kernels_shut_down(tmp_path):
    k = Kernel(tmp_path)
    k.run(SETUP)
    k.run('check("q6", [1.0, 1.0])')
    started = [k.pid, *_descendants(k.pid)]
    assert len(started) >= 2  # the kernel and its checker
    k.shutdown()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in started if _alive(p)]


def test_a_kernel_that_ran_code_before_the_setup_cell_does_not_fork(tmp_path):
    """A checker forked from a kernel would carry whatever ran there first: a kernel that ran
    another cell before the setup cell starts a new Python instead."""
    k = Kernel(tmp_path)
    try:
        k.run("x = 1")
        k.run(SETUP)
        assert k.value("type(client.oracle()._proc).__name__") == "Popen"
    finally:
        k.shutdown()



def test_an_unanswered_question_says_run_all_stopped_there_and_still_ends_in_its_error(kernels):
    """autograder.runall: the answer template's own ``raise NotImplementedError()`` shows the
    sign (and a script that scrolls to it), then the error as always, so Run All stops there;
    a NotImplementedError from inside a function the cell called shows no sign."""
    a, _ = kernels
    got = a.messages(a.send("q = ...\nraise NotImplementedError()"))
    kinds = [k for k, _ in got]
    assert kinds[-1] == "error" and got[-1][1]["ename"] == "NotImplementedError"
    shown = [c["data"] for k, c in got if k == "display_data"]
    assert "autograder-run-all-stopped" in shown[0]["text/html"]
    assert shown[0]["text/plain"].startswith("Run All stopped here")
    assert "scrollIntoView" in shown[1]["application/javascript"]
    inner = a.messages(a.send("def todo():\n    raise NotImplementedError()\ntodo()"))
    assert [k for k, _ in inner if k in ("display_data", "error")] == ["error"]
