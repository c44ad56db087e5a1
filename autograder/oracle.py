"""The oracle: a clean process that computes expected answers with live torch.

The notebook's kernel never decides what torch does: it sends the learner's
answer (as data, see :mod:`autograder.encoding`) to this process, which runs the
question's scenario with a torch the learner's kernel cannot have touched, and
returns a verdict. Started by :mod:`autograder.client` as::

    python -I -m autograder.oracle          # serve JSON lines on stdin/stdout
    python -I -m autograder.oracle --once   # answer one request, then exit

``-I`` keeps the kernel's working directory, ``PYTHONPATH`` and user site out of
it. In serve mode torch is imported once; every request is evaluated in a forked
child, so learner code run for a write-code question cannot change the state
seen by the next check, and a hanging one costs only its timeout. That child holds
no descriptor but its own result pipe, and the learner's function runs in it under
:mod:`autograder.restricted`. A request can be cancelled while it runs (the kernel
does so when interrupted), so it never delays the next one.

When grading, the worker forks this loop as the submission's checker, with a control
channel: see :class:`Service` and :mod:`autograder.grading.verify`.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import json
import os
import select
import signal
import sys
import time
import traceback

from course.i18n import LANGUAGES, _, using

DEFAULT_TIMEOUT = 20.0


def lesson_module_name(assignment: str) -> str:
    """``'01_leaves'`` -> ``'autograder.lessons.l01_leaves'``."""
    if not assignment.replace("_", "").isalnum():
        raise ValueError(f"not an assignment id: {assignment!r}")
    return f"autograder.lessons.l{assignment}"


def load_lesson(assignment: str):
    return importlib.import_module(lesson_module_name(assignment)).lesson


#: what every check needs: imported once by the checker, before it forks any check
CHECKER_MODULES = ("autograder.questions", "autograder.restricted", "autograder.torchfacts")


def prepare(lessons=()) -> None:
    """Import, in this process, what checks of ``lessons`` need: the checks' own modules
    (``torchfacts`` captures torch's descriptors here, before any learner code), each lesson's
    module and the slow modules it declares (:attr:`autograder.questions.Lesson.preload`).
    A lesson that cannot be loaded is reported when one of its questions is checked."""
    for name in CHECKER_MODULES:
        importlib.import_module(name)
    for assignment in lessons:
        try:
            lesson = load_lesson(assignment)
            for name in lesson.preload:
                importlib.import_module(name)
        except Exception:
            pass


def evaluate(request: dict) -> dict:
    """Grade one request in this process and return the verdict as JSON data, written in the
    request's ``language`` (English by default).

    The whole question is graded (``part`` only selects the view returned), so a verdict
    carries every part and the kernel can answer each part's graded cell from it.
    """
    language = request.get("language")
    with using(language if language in LANGUAGES else None):
        return _evaluate(request)


def _evaluate(request: dict) -> dict:
    from autograder.encoding import decode
    from autograder.verdict import Verdict

    qid = request.get("question", "?")
    try:
        question = load_lesson(request["lesson"])[qid]
    except (KeyError, ImportError, ValueError) as exc:
        return Verdict.problem(qid, _("Unknown question: {error}", error=exc)).to_json()
    part = request.get("part")
    if part is not None and part not in question.parts():
        return Verdict.problem(qid, _("Question {qid} has no part {part!r}.", qid=qid,
                                      part=part)).to_json()
    answer = decode(request.get("answer"))
    variant = request.get("variant", "visible")
    try:
        verdict = question.grade(answer, None, variant)
    except Exception as exc:  # a bug in the question itself: say so plainly
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        verdict = Verdict.problem(qid, _("The checker itself failed ({error}).", error=detail))
    verdict.question, verdict.parts, verdict.variant = qid, question.parts(), variant
    verdict.title = _(question.title)
    return verdict.for_part(part).to_json()


def _devnull_std_fds() -> None:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _only_fd(keep: int) -> None:
    """Close every descriptor above 2 but ``keep``: learner code run in this process never
    holds the oracle's channels (to the kernel, to the grading driver)."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd > 2 and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass


class _Check:
    """One request being evaluated in a forked child."""

    def __init__(self, request: dict, timeout: float) -> None:
        self.request = request
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.chunks: list[bytes] = []
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                os.close(read_fd)
                os.setsid()  # its own process group: a timeout kills everything it started
                _only_fd(write_fd)
                _devnull_std_fds()
                data = json.dumps(evaluate(request)).encode()
                view = memoryview(data)
                while view:
                    view = view[os.write(write_fd, view):]
            except SystemExit as exc:  # `raise SystemExit(3)` in learner code
                code = exc.code if isinstance(exc.code, int) else 1
            finally:
                os._exit(code)
        os.close(write_fd)
        self.pid, self.fd = pid, read_fd

    def read(self) -> bool:
        """Read what the child wrote; whether it is done (end of output)."""
        chunk = os.read(self.fd, 1 << 16)
        if chunk:
            self.chunks.append(chunk)
            return False
        return True

    def finish(self, why: str | None = None) -> tuple[dict, bool]:
        """The verdict and whether it is settled. ``why``: ``'timeout'`` or ``'stopped'``
        when the child is ended before it answered."""
        os.close(self.fd)
        if why is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        status = os.waitpid(self.pid, 0)[1]
        if why is None and self.chunks:
            try:
                return json.loads(b"".join(self.chunks)), True
            except ValueError:
                pass
        language = self.request.get("language")
        with using(language if language in LANGUAGES else None):
            qid = self.request.get("question", "?")
            if why == "stopped":
                from autograder.verdict import Verdict

                return Verdict.problem(qid, _(
                    "The check was stopped before torch's answer came back (the cell ran out "
                    "of time, or the kernel was interrupted).")).to_json(), False
            return _failed(qid, self.timeout, why == "timeout", status), False


def _evaluate_forked(request: dict, timeout: float) -> tuple[dict, bool]:
    """The verdict, and whether the child gave it (rather than timing out or crashing)."""
    check = _Check(request, timeout)
    while True:
        left = check.deadline - time.monotonic()
        if left <= 0:
            return check.finish("timeout")
        if select.select([check.fd], [], [], left)[0] and check.read():
            return check.finish()


def evaluate_in_child(request: dict, timeout: float) -> dict:
    """Fork, evaluate in the child, and return its verdict; survive whatever the child does."""
    return _evaluate_forked(request, timeout)[0]


def _failed(qid: str, timeout: float, timed_out: bool, status: int) -> dict:
    """The verdict of a child that gave none: it timed out or died."""
    from autograder.verdict import Verdict

    if timed_out:
        text = _("Checking took longer than {seconds} s and was stopped: does your code loop "
                 "forever?", seconds=format(round(timeout, 1), "g"))
    elif os.WIFSIGNALED(status):
        text = _("The checker process running your code was killed by signal {signal} before "
                 "giving a result (does your code call `exit()` or crash the interpreter?).",
                 signal=os.WTERMSIG(status))
    else:
        text = _("The checker process running your code exited with code {code} before giving "
                 "a result (does your code call `exit()` or crash the interpreter?).",
                 code=os.WEXITSTATUS(status))
    return Verdict.problem(qid, text, answered=True).to_json()


def request_key(request: dict) -> str:
    """What makes two requests the same question asked with the same answer."""
    return json.dumps({k: request.get(k) for k in
                       ("lesson", "question", "part", "variant", "language", "answer")},
                      sort_keys=True)


def answer_digest(request: dict) -> str:
    return hashlib.sha256(json.dumps(request.get("answer"), sort_keys=True).encode()
                          ).hexdigest()[:16]


#: Seconds a check leaves its cell, when the cell has a time limit: the verdict of a check
#: cut short by the cell's limit still reaches the kernel before the cell is interrupted.
CELL_MARGIN = 1.5
#: The shortest time a check is given, however little its cell has left.
MIN_CHECK = 0.5
#: Settled verdicts the grading service remembers.
MEMO_SIZE = 512


class Service:
    """The oracle's loop: JSON-line requests from the kernel on ``inp``, replies on ``out``.

    One check at a time, each in a fresh fork (:class:`_Check`); requests that arrive
    meanwhile wait in order. ``{"op": "cancel", "target": ID}`` stops request ``ID``, running
    or waiting (the kernel sends it when the learner interrupts a check, or the cell's time
    limit does), so a runaway answer costs only its own check.

    With a ``control`` channel (the grading worker's, :mod:`autograder.grading.zygote`), this
    process is the grader's checker for one submission: the driver says when each cell of the
    notebook begins (with its time limit) and ends, and gets back a record of every check
    answered during that cell, from this process, which the learner's kernel cannot reach
    (the worker makes it non-dumpable, and learner code in a check runs in a child that holds
    none of its channels). A check never outlives its cell, and its time is the cell's time
    left (less :data:`CELL_MARGIN`) when that is shorter than its own. Settled verdicts are
    remembered here (never in the kernel), so the graded cell's check is answered, and
    recorded, within that cell.
    """

    def __init__(self, inp: int, out, control: int | None = None, log=None) -> None:
        import collections

        self.inp, self.out = inp, out
        self.control, self.log = control, log
        self.grading = control is not None
        self.buffers: dict[int, bytes] = {inp: b""}
        if control is not None:
            self.buffers[control] = b""
        self.pending: collections.deque = collections.deque()
        self.current: _Check | None = None
        self.cell: dict | None = None  # {"tag", "deadline"}
        self.records: list[dict] = []
        self.memo: collections.OrderedDict = collections.OrderedDict()
        self.can_fork = hasattr(os, "fork")
        self.prepared: set[str] = set()

    # -- replies and records
    def reply(self, message: dict) -> None:
        try:
            self.out.write(json.dumps(message) + "\n")
            self.out.flush()
        except (OSError, ValueError):
            pass  # the kernel is gone; the records still go to the driver

    def record(self, request: dict, verdict: dict, status: str) -> None:
        if not self.grading:
            return
        self.records.append({
            "lesson": request.get("lesson"), "question": request.get("question"),
            "part": request.get("part"), "variant": request.get("variant", "visible"),
            "language": request.get("language"), "answer": answer_digest(request),
            "status": status, "verdict": verdict})

    def answer(self, request: dict, verdict: dict, settled: bool, status: str) -> None:
        if settled and self.grading:
            self.memo[request_key(request)] = verdict
            while len(self.memo) > MEMO_SIZE:
                self.memo.popitem(last=False)
        self.record(request, verdict, status)
        self.reply({"id": request.get("id"), "verdict": verdict, "settled": settled})

    # -- the kernel's requests
    def timeout_of(self, request: dict) -> float:
        timeout = float(request.get("timeout", DEFAULT_TIMEOUT))
        deadline = (self.cell or {}).get("deadline")
        if deadline is not None:
            timeout = min(timeout, max(MIN_CHECK, deadline - time.monotonic() - CELL_MARGIN))
        return timeout

    def on_request(self, request: dict) -> None:
        op = request.get("op")
        if op == "ping":
            self.prepare(request.get("preload", []))
            import torch

            self.reply({"id": request.get("id"), "pong": True, "torch": torch.__version__})
        elif op == "cancel":
            self.cancel(request.get("target"))
        elif op == "evaluate":
            self.prepare([request.get("lesson")])
            known = self.memo.get(request_key(request)) if self.grading else None
            if known is not None:
                self.answer(request, known, True, "remembered")
            else:
                self.pending.append(request)

    def prepare(self, lessons) -> None:
        """Load lessons here, once, so no check of theirs loads them again in its fork."""
        new = [a for a in lessons if isinstance(a, str) and a not in self.prepared]
        if new:
            prepare(new)
            self.prepared.update(new)
            gc.freeze()  # a forked check never scans (and so never copies) what is loaded

    def cancel(self, target) -> None:
        if self.current is not None and self.current.request.get("id") == target:
            self.stop_current("stopped")
        for request in list(self.pending):
            if request.get("id") == target:
                self.pending.remove(request)
                self.stopped(request)

    def stopped(self, request: dict) -> None:
        language = request.get("language")
        with using(language if language in LANGUAGES else None):
            from autograder.verdict import Verdict

            verdict = Verdict.problem(request.get("question", "?"), _(
                "The check was stopped before torch's answer came back (the cell ran out "
                "of time, or the kernel was interrupted).")).to_json()
        self.answer(request, verdict, False, "stopped")

    def stop_current(self, why: str) -> None:
        check, self.current = self.current, None
        if check is not None:
            verdict, settled = check.finish(why)
            self.answer(check.request, verdict, settled, why)

    def start_next(self) -> None:
        while self.current is None and self.pending:
            request = self.pending.popleft()
            if not self.can_fork:
                self.answer(request, evaluate(request), True, "answered")
                continue
            self.current = _Check(request, self.timeout_of(request))

    # -- the grading driver's control channel
    def on_control(self, message: dict) -> None:
        if "begin" in message:
            limit = message.get("limit")
            self.cell = {"tag": message["begin"],
                         "deadline": None if limit is None else time.monotonic() + limit}
            self.records = []
            # acknowledged: the driver runs the cell only once this cell's window is open
            self.log.write(json.dumps({"began": message["begin"]}) + "\n")
            self.log.flush()
        elif "end" in message:
            self.stop_current("stopped")  # a check never outlives its cell
            while self.pending:
                self.stopped(self.pending.popleft())
            out = {"cell": message["end"], "records": self.records}
            self.cell, self.records = None, []
            self.log.write(json.dumps(out) + "\n")
            self.log.flush()

    # -- the loop
    def _lines(self, fd: int) -> list[dict] | None:
        """The complete lines now readable on ``fd`` (None at its end)."""
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return None
        buf = self.buffers[fd] + chunk
        *lines, self.buffers[fd] = buf.split(b"\n")
        out = []
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                out.append(message)
        return out

    def run(self) -> None:
        inputs = [self.inp] + ([self.control] if self.control is not None else [])
        while inputs or self.current is not None:
            self.start_next()
            watch = list(inputs) + ([self.current.fd] if self.current is not None else [])
            wait = None if self.current is None else max(
                0.0, self.current.deadline - time.monotonic())
            ready = select.select(watch, [], [], wait)[0]
            if self.current is not None and self.current.fd in ready and self.current.read():
                check, self.current = self.current, None
                verdict, settled = check.finish()
                self.answer(check.request, verdict, settled,
                            "answered" if settled else "crashed")
            elif self.current is not None and time.monotonic() >= self.current.deadline:
                self.stop_current("timeout")
            for fd in sorted(ready, key=lambda fd: fd != self.control):  # the driver's first
                if fd not in inputs:
                    continue
                lines = self._lines(fd)
                if lines is None:  # the kernel (or the driver) is gone
                    inputs.remove(fd)
                    if fd == self.inp:
                        self.stop_current("stopped")
                        self.pending.clear()
                        if self.control is None:
                            return
                    else:
                        return
                    continue
                for message in lines:
                    (self.on_request if fd == self.inp else self.on_control)(message)


def serve(control: int | None = None, log: int | None = None) -> None:
    """Answer JSON-line requests on stdin until it closes (see :class:`Service`); with
    ``control`` and ``log`` descriptors, as the grader's checker of one submission."""
    # Keep the protocol channel private: stray prints go nowhere.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    inp = os.dup(0)
    _devnull_std_fds()
    import torch

    torch.set_num_threads(1)  # tiny tensors; and forking after a thread pool spins up is fragile
    prepare()  # the checks' modules; each lesson's (and its slow imports) when first asked

    log_file = os.fdopen(log, "w", buffering=1) if log is not None else None
    Service(inp, proto, control, log_file).run()


def once() -> None:
    request = json.loads(sys.stdin.readline())
    proto = os.fdopen(os.dup(1), "w")
    _devnull_std_fds()
    import autograder.torchfacts  # noqa: F401

    proto.write(json.dumps({"id": request.get("id"), "verdict": evaluate(request)}) + "\n")
    proto.flush()


if __name__ == "__main__":
    once() if "--once" in sys.argv[1:] else serve()
