"""The kernel side of the checks: talk to the oracle process.

One oracle process per kernel. The notebook's setup cell starts it (``warm_up``): in a kernel
that has run nothing but that cell, as a fork of the kernel itself, so the checker shares
torch's pages with the kernel and costs tens of megabytes rather than a second copy of torch
(about 210 MB; docs/benchmarks.md); elsewhere (a kernel that already ran other code, a script, ``AUTOGRADER_CHECKER
=spawn``, a platform without ``fork``), as a new Python that imports torch again. Either way
the checker is a separate process that learner code run later in the kernel cannot reach into,
and a checker that dies is replaced by a new Python, never by a fork of a kernel that has run
learner code. Nothing here imports torch, but for :func:`fork_checker`, which imports the
checker's modules into the kernel on purpose, just before the fork, so that both share them.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading

from autograder.encoding import encode

# Leave room for the oracle's own start (importing torch takes a few seconds on a
# cold laptop) on top of the per-check timeout.
START_ALLOWANCE = 60.0
CHECK_TIMEOUT = 20.0
# Verdicts remembered per kernel (see Oracle.ask).
SETTLED_SIZE = 256


class OracleUnavailable(RuntimeError):
    """The oracle process could not be started or stopped answering."""


class CheckStopped(KeyboardInterrupt):
    """A check was interrupted (the learner pressed stop, or a grader's cell limit hit) while
    its answer was being computed: the oracle is told to stop it too, and IPython shows one
    line, never a traceback through the course's code."""

    def __init__(self, question: str | None):
        from course.i18n import _

        self.question = question or "?"
        super().__init__(_("the check of {question} was stopped before torch's answer came "
                           "back", question=self.question))

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[0;31mCheckStopped\x1b[0m: {self}"]


class _Forked:
    """A checker forked from this kernel, seen through the few ``subprocess.Popen`` members
    the client uses (see :func:`fork_checker`)."""

    def __init__(self, pid: int, stdin, stdout) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("checker", timeout)
            time.sleep(0.01)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        import signal

        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def fork_allowed() -> bool:
    """Whether the checker may be forked from this process: a Jupyter kernel that has run
    nothing before the current cell (the setup cell of a notebook run from the top), so
    that nothing a learner wrote is in the checker; ``AUTOGRADER_CHECKER=spawn`` says no."""
    if os.environ.get("AUTOGRADER_CHECKER", "fork") != "fork" or not hasattr(os, "fork"):
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    entered = shell.user_ns.get("In")  # '' and then every cell run so far, this one included
    return isinstance(entered, list) and len(entered) <= 2


def return_freed_buffers() -> None:
    """Make this process give the memory of large buffers it frees (a tensor of a megabyte or
    more) back to the system at once. glibc's default raises its ``mmap`` threshold each time
    such a buffer is freed, so later large tensors come from a heap that seldom shrinks: a
    lesson that once ran a big batch kept tens of megabytes it no longer used. A fixed
    threshold (``mallopt(M_MMAP_THRESHOLD)``) keeps them out of that heap. Not glibc: nothing."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD: 1 MiB, and no longer adjusted
    except (OSError, AttributeError):
        pass


def fork_checker(preload: list[str]) -> _Forked:
    """Fork this kernel as its checker: import what its checks need here first (so the pages
    are shared), then the child becomes :func:`autograder.oracle.serve` on two pipes, in a
    session of its own (the kernel's interrupts are not its own), and dies with the kernel."""
    import gc
    import signal

    from autograder import oracle

    oracle.prepare(preload)
    # Everything imported so far is shared with the checker, page for page, until one side
    # writes to a page. CPython's cyclic garbage collector writes to every object it tracks
    # on each full collection, so the kernel's first one would copy torch's pages into it
    # again: freeze them (never collected, never traversed), as preforking servers do.
    gc.collect()
    gc.freeze()
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the checker
        try:
            os.setsid()
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                import ctypes

                ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass  # not Linux: the end of its stdin tells it the kernel is gone
            os.dup2(to_r, 0)
            os.dup2(from_w, 1)
            os.closerange(3, 1 << 16)
            oracle.serve()
        finally:
            os._exit(0)
    os.close(to_r)
    os.close(from_w)
    return _Forked(pid, os.fdopen(to_w, "w", buffering=1), os.fdopen(from_r, "r"))


class _Pipes:
    """A channel to an oracle that someone else started (the grading worker's checker),
    seen through the few ``subprocess.Popen`` members the client uses."""

    pid = None

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.stdin = os.fdopen(write_fd, "w", buffering=1)
        self.stdout = os.fdopen(read_fd, "r")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self.returncode = 0 if self.returncode is None else self.returncode
        return self.returncode

    def kill(self) -> None:
        self.returncode = -9
        try:
            self.stdin.close()
        except OSError:
            pass


def _oracle_command(once: bool = False) -> list[str]:
    cmd = [sys.executable, "-I", "-m", "autograder.oracle"]
    return cmd + ["--once"] if once else cmd


class Oracle:
    """A persistent oracle subprocess speaking JSON lines."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._replies: queue.Queue = queue.Queue()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._workdir = tempfile.mkdtemp(prefix="autograder-oracle-")
        self._started = False
        self._settled: dict[str, str] = {}  # request (JSON) -> its verdict (JSON)
        self._memo = True  # False when the oracle remembers verdicts itself (when grading)
        self._ever_started = False  # a replacement is never a fork: the kernel may have run code

    # -- process management
    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, preload: list[str] | None = None, spawn=None) -> None:
        """Start the process if it is not running; returns at once.

        ``spawn`` starts it: a callable with ``subprocess.Popen``'s signature that returns an
        object with the members of ``Popen`` used here (``stdin``, ``stdout``, ``poll``,
        ``wait``, ``kill``); default ``subprocess.Popen``. The grading workers pass one that
        forks the oracle from the still-clean kernel (``autograder.grading.zygote``).
        """
        if self._alive():
            return
        self._replies = queue.Queue()
        self._memo = True
        if spawn is None and not self._ever_started and fork_allowed():
            self._proc = fork_checker(preload or [])  # type: ignore[assignment]
        else:
            self._proc = (spawn or subprocess.Popen)(
                _oracle_command(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # a graded cell scores 0 on any stderr output
                cwd=self._workdir,
                text=True,
                bufsize=1,
            )
        self._ever_started = True
        self._started = False
        # The reader gets this process's own queue: a dead process's reader may wake up
        # only after the next process started, and its end-of-file must not look like
        # the new process dying.
        threading.Thread(target=self._read, args=(self._proc, self._replies), daemon=True).start()
        self._send({"op": "ping", "id": 0, "preload": preload or []})

    def attach(self, read_fd: int, write_fd: int, preload: list[str] | None = None) -> None:
        """Use an oracle started by someone else, reached through two descriptors: the
        grading worker's checker, which records every verdict for the driver and remembers
        settled ones itself (so this kernel asks it again rather than answering from its own
        memory). If it goes away, the next check starts an oracle of its own."""
        self._replies = queue.Queue()
        self._proc = _Pipes(read_fd, write_fd)  # type: ignore[assignment]
        self._started = False
        self._memo = False
        self._ever_started = True
        threading.Thread(target=self._read, args=(self._proc, self._replies), daemon=True).start()
        self._send({"op": "ping", "id": 0, "preload": preload or []})

    @staticmethod
    def _read(proc: subprocess.Popen, replies: queue.Queue) -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                try:
                    replies.put(json.loads(line))
                except ValueError:
                    continue
        except (OSError, ValueError):
            pass
        if isinstance(proc, _Pipes) and proc.returncode is None:
            proc.returncode = -1
        replies.put(None)  # the process ended

    def _send(self, message: dict) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(message) + "\n")
        self._proc.stdin.flush()

    def stop(self) -> None:
        if self._proc is not None:
            try:
                if self._proc.stdin:
                    self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
            self._proc = None

    def forget(self) -> None:
        """Drop the remembered verdicts: the next requests go to the oracle again."""
        with self._lock:
            self._settled.clear()

    # -- requests
    def ask(self, request: dict, timeout: float = CHECK_TIMEOUT) -> dict:
        """Send one request and wait for its verdict (JSON data).

        A verdict depends on the request alone: the oracle evaluates each one in a fresh
        fork of itself, seeded. So a request asked again (a notebook's visible check and
        its graded test cell ask the same thing) is answered from memory, as long as the
        first answer was a settled one: not a timeout, not a crashed check.
        """
        if not hasattr(os, "fork"):
            return self._ask_once(request, timeout)
        try:
            key = json.dumps(request) if self._memo else None
        except (TypeError, ValueError):
            key = None
        with self._lock:
            if key is not None and key in self._settled:
                return json.loads(self._settled[key])
            for attempt in (1, 2):
                if not self._alive():
                    self.start()
                rid = next(self._ids)
                try:
                    self._send(dict(request, id=rid, timeout=timeout))
                except (BrokenPipeError, OSError):
                    self._proc = None
                    continue
                wait = timeout + 5.0 + (START_ALLOWANCE if not self._started else 0.0)
                try:
                    reply = self._wait_for(rid, wait)
                except KeyboardInterrupt:
                    self._cancel(rid)
                    raise CheckStopped(request.get("question")) from None
                if reply is not None:
                    self._started = True
                    verdict = reply["verdict"]
                    if key is not None and reply.get("settled"):
                        if len(self._settled) >= SETTLED_SIZE:
                            self._settled.pop(next(iter(self._settled)))  # oldest first
                        self._settled[key] = json.dumps(verdict)
                    return verdict
                self.stop()
                if attempt == 2:
                    break
        raise OracleUnavailable(
            "the checker process did not answer; restart the kernel and run the notebook again"
        )

    def _cancel(self, rid: int) -> None:
        """Tell the oracle to stop request ``rid`` (its late reply is then ignored)."""
        try:
            self._send({"op": "cancel", "id": next(self._ids), "target": rid})
        except (OSError, ValueError, AssertionError):
            pass

    def _wait_for(self, rid: int, wait: float) -> dict | None:
        while True:
            try:
                reply = self._replies.get(timeout=wait)
            except queue.Empty:
                return None
            if reply is None:  # the process died
                return None
            if reply.get("id") == 0:
                self._started = True
            if reply.get("id") == rid:
                return reply

    def _ask_once(self, request: dict, timeout: float) -> dict:
        """Platforms without fork: one fresh process per check."""
        try:
            out = subprocess.run(
                _oracle_command(once=True),
                input=json.dumps(request) + "\n",
                capture_output=True,
                text=True,
                timeout=timeout + START_ALLOWANCE,
                cwd=self._workdir,
            )
        except subprocess.TimeoutExpired as exc:
            raise OracleUnavailable(f"checking took longer than {timeout:g} s") from exc
        return json.loads(out.stdout.strip().splitlines()[-1])["verdict"]


_ORACLE: Oracle | None = None


def oracle() -> Oracle:
    """The kernel's shared oracle (started lazily)."""
    global _ORACLE
    if _ORACLE is None:
        _ORACLE = Oracle()
        atexit.register(_ORACLE.stop)
    return _ORACLE


def ask(lesson: str, question: str, answer, part: str | None = None,
        variant: str = "visible", timeout: float = CHECK_TIMEOUT) -> dict:
    """Encode ``answer`` and ask the oracle for a verdict (JSON data)."""
    request = {
        "op": "evaluate",
        "lesson": lesson,
        "question": question,
        "part": part,
        "variant": variant,
        "answer": encode(answer),
    }
    from course.i18n import SOURCE_LANGUAGE, language

    if language() != SOURCE_LANGUAGE:  # the verdict is written in the learner's language
        request["language"] = language()
    return oracle().ask(request, timeout)
