"""A grading worker: imports the heavy modules once, then forks one fresh kernel per submission.

Runs inside the worker's sandbox (see :mod:`autograder.grading.sandbox`), normally as
PID 1 of its own PID namespace, as an unprivileged user. It talks to the driver over
its stdin/stdout, one JSON object per line:

    driver -> worker   {"op": "start", "conn": {...}, "extra": [...], "job": DIR}
                       {"op": "signal", "sig": 2}
                       {"op": "cell", "begin": TAG, "limit": S}   # a cell starts, its limit
                       {"op": "cell", "end": TAG}                 # ...and ended
                       {"op": "kill"}          # end the current kernel and all it started
    worker -> driver   {"ready": ...}, {"started": PID}, {"exited": PID, "status": N},
                       {"cell_records": TAG, "records": [...]} (or "error": why),
                       {"killed": true}

Each kernel is forked from this process *before* any learner code exists, so it starts
with torch, IPython and the course's packages already imported, and with a state no
other submission touched: a submission only ever runs in its own child, and everything
the child started is killed and its files wiped before the next one is forked.

**The grader's checker.** Before the kernel, this process forks the submission's oracle
(:class:`autograder.oracle.Service`), the same way, and hands the kernel only the two ends
of its request channel. The checker's other channel, to this process, says when each cell
begins and ends and brings back every verdict it gave during that cell: the driver scores
a graded cell from that record, never from what the kernel printed or whether it raised.
The kernel runs as the same unprivileged user, so this process and the checker are made
non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``): a process of the same user can then neither
ptrace them nor open their descriptors or memory through ``/proc``; the kernel re-enables
it for itself, so it behaves like any kernel. What the kernel can still do to them is stop
or kill them, which only loses it the checks it would have passed.

This module imports only the standard library at the top: it must not start threads
or open sockets before forking.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import shutil
import signal
import sys
import time

# Modules imported once by the worker; a kernel forked from it finds them in sys.modules.
CORE_PRELOAD = [
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",  # what a kernel imports at start (debugpy, ~0.2 s)
    "IPython",
    "numpy",
    "torch",
    "torch.nn",
    "torch.testing",
    "torch.distributed.tensor",  # what torch.testing.assert_close imports on first use (~2 s)
    "torch._dynamo",  # what the first optimizer imports (~1.5 s); the oracle imports it too
    "autograder",
    "autograder.client",
    "autograder.oracle",
    "autograder.questions",
    "autograder.torchfacts",
]
# ...and, when grading one of this course's lessons, what its notebooks import.
COURSE_PRELOAD = [
    "course",
    "course.facts",
    "course.themes",
    "course.graph",
    "course.draw",
    "networkx",
    # matplotlib and its font list (slow to build), but not pyplot or the inline backend:
    # those hook into the IPython shell when first imported, which must happen in the kernel
    "matplotlib",
    "matplotlib.font_manager",
    "matplotlib.figure",
    "matplotlib.lines",
    "matplotlib.patches",
]


def _log(msg: str) -> None:
    try:
        os.write(2, f"[worker {os.getpid()}] {msg}\n".encode())
    except OSError:
        pass


def _wipe(path: str) -> None:
    """Empty a directory without following symbolic links."""
    try:
        entries = os.listdir(path)
    except OSError:
        return
    for name in entries:
        full = os.path.join(path, name)
        try:
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                os.unlink(full)
        except OSError:
            pass


def _high(fd: int) -> int:
    """A copy of ``fd`` numbered 100 or more, out of the way of the numbers about to be set."""
    import fcntl

    return fcntl.fcntl(fd, fcntl.F_DUPFD, 100)


def _set_dumpable(on: bool) -> None:
    """``prctl(PR_SET_DUMPABLE, on)`` (Linux): whether processes of the same user may ptrace
    this one or open its ``/proc/PID/fd``, ``mem``, ``environ``."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 1 if on else 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class Checker:
    """The grader's checker of one submission: a forked :class:`autograder.oracle.Service`,
    the kernel's two descriptors to it, and this process's two (control, records)."""

    def __init__(self, lessons: list[str]) -> None:
        k2s_r, k2s_w = os.pipe()  # kernel -> checker: requests
        s2k_r, s2k_w = os.pipe()  # checker -> kernel: verdicts
        ctl_r, ctl_w = os.pipe()  # this process -> checker: cells begin and end
        log_r, log_w = os.pipe()  # checker -> this process: the records of a cell
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                high = [_high(fd) for fd in (k2s_r, s2k_w, ctl_r, log_w)]
                for src, dst in zip(high, (10, 11, 12, 13), strict=True):
                    os.dup2(src, dst)
                os.dup2(10, 0)
                os.dup2(11, 1)
                os.closerange(3, 12)
                os.closerange(14, 1 << 16)
                os.chdir("/")
                from autograder import oracle

                oracle.serve(control=12, log=13)
            finally:
                os._exit(0)
        for fd in (k2s_r, s2k_w, ctl_r, log_w):
            os.close(fd)
        self.pid = pid
        self.kernel_fds = (s2k_r, k2s_w)  # what the kernel reads, what it writes
        self.control = ctl_w
        self.log = log_r
        self.buf = b""
        self.lessons = lessons

    def close_kernel_side(self) -> None:
        for fd in self.kernel_fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def cell(self, req: dict, timeout: float = 15.0) -> dict:
        """Forward a cell's begin or end; what the checker answers: ``{"began": TAG}``, or the
        cell's records (``{"cell": TAG, "records": [...]}``), or ``{"error": why}``."""
        message = {k: req[k] for k in ("begin", "end", "limit") if k in req}
        try:
            os.write(self.control, (json.dumps(message) + "\n").encode())
        except OSError as exc:
            return {"error": f"the grader's checker is gone ({exc.strerror})"}
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.log], [], [], left)[0]:
                return {"error": "the grader's checker did not answer"}
            chunk = os.read(self.log, 1 << 16)
            if not chunk:
                return {"error": "the grader's checker is gone (it exited or was killed)"}
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            return json.loads(line)
        except ValueError:
            return {"error": "the grader's checker sent something unreadable"}

    def close(self) -> None:
        for fd in (self.control, self.log):
            try:
                os.close(fd)
            except OSError:
                pass
        self.close_kernel_side()
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass


def _attach_checker(lessons: list[str]) -> None:
    """Make descriptors 3 and 4 the kernel's oracle: the grader's checker."""
    try:
        from autograder import client

        client.oracle().attach(3, 4, preload=lessons)
    except Exception as exc:  # the kernel will start an oracle of its own when it needs one
        _log(f"could not attach the checker: {exc!r}")


def _kernel_main(cfg: dict, req: dict, checker: tuple[int, int] | None = None) -> None:
    """In the forked child: become the submission's kernel (never returns). ``checker``: the
    descriptors of the grader's checker (read, write), kept as 3 and 4."""
    code = 1
    try:
        os.setsid()
        _set_dumpable(True)  # an ordinary process again (the worker and the checker are not)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big file is an OSError, not death
        if checker is not None:
            checker = (_high(checker[0]), _high(checker[1]))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        if checker is not None:
            os.dup2(checker[0], 3)
            os.dup2(checker[1], 4)
            os.closerange(5, 1 << 16)
        else:
            os.closerange(3, 1 << 16)
        root = cfg["scratch"]
        _wipe(root)
        work, home, tmp, runtime = (os.path.join(root, d) for d in ("work", "home", "tmp", "run"))
        job = req.get("job")
        if job and os.path.isdir(job):
            shutil.copytree(job, work, symlinks=True)
        else:
            os.makedirs(work)
        for d in (home, tmp, runtime):
            os.makedirs(d, exist_ok=True)
        os.environ.update({
            "HOME": home, "TMPDIR": tmp, "IPYTHONDIR": os.path.join(home, ".ipython"),
            "MPLCONFIGDIR": os.path.join(home, ".mpl"), "JUPYTER_RUNTIME_DIR": runtime,
            "NBGRADER_EXECUTION": "autograde",
        })
        os.environ.update(req.get("env") or {})
        os.chdir(work)
        conn_file = os.path.join(runtime, "kernel.json")
        with open(conn_file, "w") as f:
            json.dump(req["conn"], f)
        if checker is not None:
            _attach_checker(cfg.get("lessons", []))
        from ipykernel import kernelapp

        sys.argv = ["ipykernel_launcher", "-f", conn_file, *req.get("extra", [])]
        kernelapp.launch_new_instance(argv=sys.argv[1:])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    except BaseException:
        code = 1
    finally:
        os._exit(code)


class Zygote:
    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.kernel: int | None = None
        self.checker: Checker | None = None
        _set_dumpable(False)  # see the module docstring: the kernel cannot reach into us
        self.out = os.fdopen(os.dup(1), "w", buffering=1)
        self.inp = os.fdopen(os.dup(0), "r")
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        self.pid1 = os.getpid() == 1

    def send(self, **msg) -> None:
        self.out.write(json.dumps(msg) + "\n")

    def preload(self) -> float:
        t0 = time.monotonic()
        os.environ.setdefault("MPLCONFIGDIR", os.path.join(self.cfg["scratch"], ".mpl-worker"))
        # what ipykernel sets before any learner code; matplotlib reads it when imported
        os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        extra = COURSE_PRELOAD if self.cfg.get("lessons") else []
        for name in self.cfg.get("preload", CORE_PRELOAD + extra):
            try:
                importlib.import_module(name)
            except Exception as exc:  # a missing optional module only costs speed
                _log(f"preload {name}: {exc!r}")
        for lesson in self.cfg.get("lessons", []):
            try:
                importlib.import_module(f"autograder.lessons.l{lesson}")
            except Exception as exc:
                _log(f"preload lesson {lesson}: {exc!r}")
        # the kernel must find the course's packages, not whatever folder we started in
        if sys.path and sys.path[0] in ("", os.getcwd()):
            del sys.path[0]
        try:
            from autograder.grading import speedups

            _log(f"speed-ups: {', '.join(speedups.install()) or 'none'}")
        except Exception as exc:  # only speed is lost
            _log(f"speed-ups: {exc!r}")
        # Move everything imported so far out of the garbage collector's sight: a forked
        # kernel would otherwise scan (and so copy, page by page) the whole torch/IPython
        # heap at its first full collection, about 0.3 s each time.
        gc.collect()
        gc.freeze()
        return time.monotonic() - t0

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.kernel:
                self.kernel = None
                self.send(exited=pid, status=os.waitstatus_to_exitcode(status))

    def kill_all(self) -> None:
        """End the current kernel and every process it started, then wipe its files."""
        if self.kernel is not None:
            try:
                os.killpg(self.kernel, signal.SIGKILL)
            except OSError:
                pass
        if self.pid1:  # PID 1 of a private namespace: -1 means "everything but me"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    time.sleep(0.005)
        elif self.kernel is not None:
            try:
                os.waitpid(self.kernel, 0)
            except ChildProcessError:
                pass
        if self.checker is not None:
            self.checker.close()
            self.checker = None
        self.kernel = None
        _wipe(self.cfg["scratch"])
        for name in os.listdir(self.cfg["sockets"]):
            try:
                os.unlink(os.path.join(self.cfg["sockets"], name))
            except OSError:
                pass

    def handle(self, req: dict) -> None:
        op = req.get("op")
        if op == "start":
            if self.kernel is not None or self.checker is not None:
                self.kill_all()
            checker = None
            if self.cfg.get("checker", True):
                try:
                    checker = self.checker = Checker(self.cfg.get("lessons", []))
                except OSError as exc:
                    _log(f"could not start the checker: {exc!r}")
            pid = os.fork()
            if pid == 0:
                self.out.close()
                self.inp.close()
                if checker is not None:
                    os.close(checker.control)
                    os.close(checker.log)
                _kernel_main(self.cfg, req, checker.kernel_fds if checker is not None else None)
            if checker is not None:
                checker.close_kernel_side()
            self.kernel = pid
            self.send(started=pid)
        elif op == "cell":
            tag = req.get("end", req.get("begin"))
            key = "cell_records" if "end" in req else "cell_began"
            if self.checker is None:
                self.send(**{key: tag, "error": "no grader's checker was started"})
                return
            got = self.checker.cell(req)
            self.send(**{key: tag}, **{k: v for k, v in got.items()
                                        if k not in ("cell", "began")})
        elif op == "signal":
            if self.kernel is not None:
                try:
                    os.kill(self.kernel, int(req["sig"]))
                except OSError:
                    pass
        elif op == "kill":
            self.kill_all()
            self.send(killed=True)

    def serve(self) -> None:
        took = self.preload()
        self.send(ready=True, pid=os.getpid(), uid=os.getuid(), preload_s=round(took, 3))
        fd = self.inp.fileno()
        buf = b""
        while True:
            ready, _, _ = select.select([fd], [], [], 0.05)
            self.reap()
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # the driver went away: leave nothing behind
                self.kill_all()
                os._exit(0)  # skip tearing down torch
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    self.handle(json.loads(line))


def main() -> None:
    cfg = json.loads(sys.argv[1])
    Zygote(cfg).serve()


if __name__ == "__main__":
    main()
