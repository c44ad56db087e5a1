"""A grading worker: imports the heavy modules once, then forks one fresh kernel per submission.

Runs inside the worker's sandbox (see :mod:`autograder.grading.sandbox`), normally as
PID 1 of its own PID namespace, as an unprivileged user. It talks to the driver over
its stdin/stdout, one JSON object per line:

    driver -> worker   {"op": "start", "conn": {...}, "extra": [...], "job": DIR}
                       {"op": "signal", "sig": 2}
                       {"op": "kill"}          # end the current kernel and all it started
    worker -> driver   {"ready": ...}, {"started": PID}, {"exited": PID, "status": N},
                       {"killed": true}

Each kernel is forked from this process *before* any learner code exists, so it starts
with torch, IPython and the course's packages already imported, and with a state no
other submission touched: a submission only ever runs in its own child, and everything
the child started is killed and its files wiped before the next one is forked.
The kernel's oracle (:mod:`autograder.oracle`) is forked from the kernel the same way,
before the kernel runs anything, instead of starting a new Python that imports torch.

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


class _ForkedProcess:
    """The pre-forked oracle, seen through the few ``subprocess.Popen`` members the client uses."""

    def __init__(self, pid: int, stdin, stdout) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = None
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                import subprocess

                raise subprocess.TimeoutExpired("oracle", timeout)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    terminate = kill


def _fork_oracle(cmd, **kwargs):
    """``Popen`` for the kernel's oracle, as a fork of this still-clean kernel process."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the oracle: serve() reads fd 0 and answers on fd 1
        try:
            os.dup2(to_child_r, 0)
            os.dup2(from_child_w, 1)
            os.closerange(3, 1 << 16)
            os.chdir(kwargs.get("cwd") or "/")
            from autograder import oracle

            oracle.serve()
        finally:
            os._exit(0)
    os.close(to_child_r)
    os.close(from_child_w)
    return _ForkedProcess(pid, os.fdopen(to_child_w, "w", buffering=1),
                          os.fdopen(from_child_r, "r"))


def _prefork_oracle(lessons: list[str]) -> None:
    """Start the kernel's oracle now, as a fork of this still-clean kernel process."""
    try:
        from autograder import client
    except ImportError:
        return
    try:
        client.oracle().start(preload=lessons, spawn=_fork_oracle)
    except Exception as exc:  # the kernel will start a normal oracle when it needs one
        _log(f"could not pre-fork the oracle: {exc!r}")


def _kernel_main(cfg: dict, req: dict) -> None:
    """In the forked child: become the submission's kernel (never returns)."""
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-big file is an OSError, not death
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
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
        if cfg.get("prefork_oracle", True):
            _prefork_oracle(cfg.get("lessons", []))
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
            if self.kernel is not None:
                self.kill_all()
            pid = os.fork()
            if pid == 0:
                self.out.close()
                self.inp.close()
                _kernel_main(self.cfg, req)
            self.kernel = pid
            self.send(started=pid)
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
