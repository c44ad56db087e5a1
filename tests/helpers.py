"""Shared helpers of the test suite: reading course notebooks and building submissions."""

from __future__ import annotations

import copy
import html as html_lib
import os
import re
import shutil
import threading
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "source"
RELEASE = ROOT / "release"

MARKER = re.compile(r"^\s*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)\s*$")


def assignments() -> list[str]:
    return sorted(p.name for p in SOURCE.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))


def notebook_path(assignment: str, where: Path = SOURCE) -> Path:
    (path,) = sorted((where / assignment).glob("*.ipynb"))
    return path


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_answer(cell) -> bool:
    return bool(meta(cell).get("solution")) and cell.cell_type == "code"


def is_graded_test(cell) -> bool:
    m = meta(cell)
    return bool(m.get("grade")) and not m.get("solution") and cell.cell_type == "code"


def strip_markers(source: str) -> str:
    """A source answer cell as a learner who solved it would leave it."""
    return "\n".join(line for line in source.splitlines() if not MARKER.match(line))


def solved_sources(assignment: str) -> dict[str, str]:
    """grade_id -> the solved text of each answer cell, from the source notebook."""
    nb = read(notebook_path(assignment))
    return {meta(c)["grade_id"]: strip_markers(c.source) for c in nb.cells if is_answer(c)}


def submission(assignment: str, solve: set[str] | None = None,
               release: Path = RELEASE) -> nbformat.NotebookNode:
    """The release notebook with the answer cells in ``solve`` (default: all) solved
    (``release``: another edition's release folder, e.g. ``ROOT / "zh-CN" / "release"``)."""
    nb = read(notebook_path(assignment, release))
    solved = solved_sources(assignment)
    out = copy.deepcopy(nb)
    for cell in out.cells:
        gid = meta(cell).get("grade_id")
        if is_answer(cell) and (solve is None or gid in solve):
            cell.source = solved[gid]
    return out


def planted(assignment: str, solve: set[str] | None = None,
            extra: dict[str, list[str]] | None = None,
            release: Path = RELEASE) -> nbformat.NotebookNode:
    """:func:`submission`, with lines appended to answer cells (``grade_id -> lines``): a
    learner's planted wrong answer, e.g. ``{"q1_answer": ['q1_is_leaf["water"] = False']}``."""
    nb = submission(assignment, solve, release)
    for cell in nb.cells:
        lines = (extra or {}).get(meta(cell).get("grade_id"))
        if is_answer(cell) and lines:
            cell.source = cell.source.rstrip("\n") + "\n" + "\n".join(lines)
    return nb


def answer_ids(assignment: str) -> list[str]:
    nb = read(notebook_path(assignment, RELEASE))
    return [meta(c)["grade_id"] for c in nb.cells if is_answer(c)]


def make_course(tmp: Path, source: Path = SOURCE) -> Path:
    """A scratch nbgrader course: this course's config and source/ (``source``: another
    edition's, e.g. ``ROOT / "zh-CN" / "source"``), nothing else."""
    course = tmp / "course"
    course.mkdir()
    shutil.copy2(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(source, course / "source",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.md"))
    return course


def submit(course: Path, student: str, assignment: str, nb: nbformat.NotebookNode) -> Path:
    name = notebook_path(assignment).name
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    nbformat.write(nb, str(path))
    return path


#: every request a test grades is graded in Chinese too (set LEAF_CHINESE_TWIN=0 to skip)
CHINESE_TWIN = os.environ.get("LEAF_CHINESE_TWIN", "1") != "0"


def isolated_evaluate(request: dict, timeout: float = 60) -> dict:
    """Grade a request through the oracle process, as a notebook's check does.

    Learner code in a request runs in a forked child of the oracle, never in the
    test process: wrong answers under test may patch torch or switch grad mode off.

    The same request is also graded in Chinese, and :func:`assert_chinese_twin` holds: the
    lessons' tests, with their hundreds of typical wrong answers, prove that the Chinese
    edition grades every answer alike and explains it in Chinese.
    """
    from autograder import client

    if not CHINESE_TWIN or "language" in request:
        return client.oracle().ask(dict(request, op="evaluate"), timeout=timeout)
    twin: dict = {}

    def in_chinese():  # on a second oracle, beside the English request (the second core)
        try:
            twin["verdict"] = _twin_oracle().ask(
                dict(request, op="evaluate", language="zh-CN"), timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 -- raised in the test's thread below
            twin["error"] = exc

    thread = threading.Thread(target=in_chinese)
    thread.start()
    try:
        verdict = client.oracle().ask(dict(request, op="evaluate"), timeout=timeout)
    finally:
        thread.join()
    if "error" in twin:
        raise twin["error"]
    assert_chinese_twin(verdict, twin["verdict"])
    return verdict


_TWIN: list = []


def _twin_oracle():
    """The oracle that grades the Chinese twins of the tests' requests."""
    if not _TWIN:
        import atexit

        from autograder import client

        _TWIN.append(client.Oracle())
        atexit.register(_TWIN[0].stop)
    return _TWIN[0]


_CODE_SPAN = re.compile(r"`[^`]*`")
_HTML_CODE = re.compile(r"<code>.*?</code>", re.S)
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
# torch's and Python's own texts stay English: an exception or warning and its message
_RAISED = re.compile(r"\b\w*(?:Error|Warning|Exception|Interrupt)\b:?"
                     r"[^\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]*")
_WORDS = re.compile(r"[A-Za-z][a-z]+(?:[ ,;:'-]+[A-Za-z][a-z]*){2,}")


def english_sentences(text: str) -> list[str]:
    """The English left in a Chinese text outside code, quoted values and torch's own error
    and warning texts: runs of three or more English words."""
    for pattern in (_CODE_SPAN, _RAISED, _QUOTED):
        text = pattern.sub(" ", text)
    return _WORDS.findall(text)


def assert_chinese_twin(english: dict, chinese: dict) -> None:
    """The Chinese verdict of a request grades exactly as the English one (same score, same
    statuses, items, parts and misconceptions), and reads Chinese: its findings and its
    rendering, misconception names included, have no English sentence outside code."""
    from autograder import feedback
    from autograder.verdict import Verdict
    from course.i18n import using

    def grading(v):
        return (v["score"], v["passed"], v.get("answered"), v.get("parts"),
                [(f["status"], f.get("item"), f.get("part"), f.get("misconception"))
                 for f in v["findings"]])

    assert grading(chinese) == grading(english), "the Chinese edition grades this differently"
    with using("zh-CN"):
        page = feedback.html(Verdict.from_json(chinese))
    shown = html_lib.unescape(re.sub(r"<[^>]+>", " ", _HTML_CODE.sub(" `code` ", page)))
    left = english_sentences(shown)
    assert not left, f"English left in the Chinese feedback: {left}\n{shown}"


_KERNEL_FILE = re.compile(r"(?:/[\w.-]+)+/ipykernel_\d+/")  # a cell's file: TMPDIR/ipykernel_PID/
_ADDRESS = re.compile(r"0x[0-9a-f]{6,}")


def executed_outputs(path: Path) -> list[tuple]:
    """What a graded notebook shows, cell by cell: execution counts and outputs, with what
    differs between any two kernels (their temporary folder and PID, object addresses,
    the timing metadata, how a stream was cut into messages) taken out."""
    out = []
    for index, cell in enumerate(read(path).cells):
        if cell.cell_type != "code":
            continue
        outputs: list[dict] = []
        for o in cell.get("outputs", []):
            last = outputs[-1] if outputs else {}
            if o["output_type"] == "stream" and last.get("output_type") == "stream" \
                    and last["name"] == o["name"]:
                last["text"] += o["text"]  # as a front end shows them: one text
            else:
                outputs.append(dict(o))
        for o in outputs:
            for key in ("text", "traceback", "evalue"):  # (not images: base64 has "/" too)
                if key in o:
                    o[key] = _ADDRESS.sub("0x…", _KERNEL_FILE.sub("…/ipykernel/", repr(o[key])))
        out.append((index, cell.get("execution_count"), repr(outputs)))
    return out


class LiveKernel:
    """A real Jupyter kernel, started as JupyterLab starts one (jupyter_client) in ``cwd``:
    what the checker tests and benchmarks/bench_memory.py run lessons in."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        from jupyter_client.manager import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=str(cwd), env=env)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def send(self, code: str) -> str:
        return self.kc.execute(code, allow_stdin=False)

    def messages(self, msg_id: str, timeout: float = 120) -> list[tuple[str, dict]]:
        """The iopub messages (type, content) of request ``msg_id`` until the kernel is idle."""
        out = []
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                return out
            out.append((msg["msg_type"], msg["content"]))

    def collect(self, msg_id: str, timeout: float = 120, allowed: tuple[str, ...] = ()) -> str:
        """The stdout of request ``msg_id``; an error other than the ``allowed`` ones raises."""
        out = []
        for kind, content in self.messages(msg_id, timeout):
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error" and content["ename"] not in allowed:
                raise AssertionError(f"{content['ename']}: {content['evalue']}")
        return "".join(out)

    def run(self, code: str, timeout: float = 120, allowed: tuple[str, ...] = ()) -> str:
        return self.collect(self.send(code), timeout, allowed)

    def value(self, expr: str):
        return eval(self.run(f"print(repr({expr}))").strip())  # noqa: S307 -- our own output

    def shutdown(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)
