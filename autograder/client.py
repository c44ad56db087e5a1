"""The kernel side of the checks: talk to the oracle process.

One oracle process per kernel is started on first use (``warm_up`` starts it in
the background from the notebook's setup cell, so ``import torch`` in it overlaps
the learner's reading). Nothing here imports torch.
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
        self._proc = (spawn or subprocess.Popen)(
            _oracle_command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a graded cell scores 0 on any stderr output
            cwd=self._workdir,
            text=True,
            bufsize=1,
        )
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
