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
seen by the next check, and a hanging one costs only its timeout.
"""

from __future__ import annotations

import gc
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


def evaluate_in_child(request: dict, timeout: float) -> dict:
    """Fork, evaluate in the child, and return its verdict; survive whatever the child does."""
    return _evaluate_forked(request, timeout)[0]


def _evaluate_forked(request: dict, timeout: float) -> tuple[dict, bool]:
    """The verdict, and whether the child gave it (rather than timing out or crashing)."""

    qid = request.get("question", "?")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(read_fd)
            os.setsid()  # its own process group: a timeout kills everything it started
            _devnull_std_fds()
            data = json.dumps(evaluate(request)).encode()
            with os.fdopen(write_fd, "wb") as out:
                out.write(data)
        finally:
            os._exit(0)
    os.close(write_fd)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready = select.select([read_fd], [], [], left)[0]
            if not ready:
                continue
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_fd)
    if timed_out:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    status = os.waitpid(pid, 0)[1]
    if chunks and not timed_out:
        try:
            return json.loads(b"".join(chunks)), True
        except ValueError:
            pass
    language = request.get("language")
    with using(language if language in LANGUAGES else None):
        return _failed(qid, timeout, timed_out, status), False


def _failed(qid: str, timeout: float, timed_out: bool, status: int) -> dict:
    """The verdict of a child that gave none: it timed out or died."""
    from autograder.verdict import Verdict

    if timed_out:
        text = _("Checking took longer than {seconds} s and was stopped: does your code loop "
                 "forever?", seconds=format(timeout, "g"))
    elif os.WIFSIGNALED(status):
        text = _("The checker process running your code was killed by signal {signal} before "
                 "giving a result (does your code call `exit()` or crash the interpreter?).",
                 signal=os.WTERMSIG(status))
    else:
        text = _("The checker process running your code exited with code {code} before giving "
                 "a result (does your code call `exit()` or crash the interpreter?).",
                 code=os.WEXITSTATUS(status))
    return Verdict.problem(qid, text, answered=True).to_json()


def serve() -> None:
    """Answer JSON-line requests on stdin until it closes."""
    # Keep the protocol channel private: stray prints go nowhere.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    inp = os.fdopen(os.dup(0), "r")
    _devnull_std_fds()
    import torch

    torch.set_num_threads(1)  # tiny tensors; and forking after a thread pool spins up is fragile
    # What the first optimizer a check creates imports (1.5-3 s): once here, not in every fork.
    # Free when grading: the worker's zygote preloaded it.
    import torch._dynamo  # noqa: F401

    import autograder.questions  # noqa: F401  -- warm the fork template
    import autograder.torchfacts  # noqa: F401  -- capture torch's descriptors before any learner code

    can_fork = hasattr(os, "fork")
    for line in inp:
        line = line.strip()
        if not line:
            continue
        try:
            request = json.loads(line)
        except ValueError:
            continue
        rid = request.get("id")
        if request.get("op") == "ping":
            for name in request.get("preload", []):
                try:
                    load_lesson(name)
                except Exception:  # reported when a question of it is checked
                    pass
            reply = {"id": rid, "pong": True, "torch": torch.__version__}
            gc.freeze()  # a forked check never scans (and so never copies) what is loaded
        else:
            timeout = float(request.get("timeout", DEFAULT_TIMEOUT))
            verdict, settled = (_evaluate_forked(request, timeout) if can_fork
                                else (evaluate(request), True))
            reply = {"id": rid, "verdict": verdict, "settled": settled}
        proto.write(json.dumps(reply) + "\n")


def once() -> None:
    request = json.loads(sys.stdin.readline())
    proto = os.fdopen(os.dup(1), "w")
    _devnull_std_fds()
    import autograder.torchfacts  # noqa: F401

    proto.write(json.dumps({"id": request.get("id"), "verdict": evaluate(request)}) + "\n")
    proto.flush()


if __name__ == "__main__":
    once() if "--once" in sys.argv[1:] else serve()
