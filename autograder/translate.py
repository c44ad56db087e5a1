"""Other editions of the course from the one English source: translation catalogs per lesson.

The English notebooks in ``source/`` stay the only notebooks anyone edits. An edition's prose
lives in gettext PO files, one per lesson (``translations/zh_CN/01_leaves.po``), read and written
with polib, so that translators' tools (Poedit, Weblate, Lokalize, ``msgfmt --check``) open them:

* one entry per Markdown cell; ``msgctxt`` is the cell's id (nbformat 4.5 cell ids are stable
  across edits), ``msgid`` the English text it translates, ``msgstr`` the translation;
* ``autograder translate zh-CN --update`` adds an entry for a new cell, marks an entry whose
  English changed as *fuzzy* (keeping the old English as ``#| msgid`` and the old translation
  for the translator to revise) and drops the entries of deleted cells;
* ``autograder translate zh-CN`` builds the edition's source notebooks, ``zh-CN/source/``:
  the English notebook with each Markdown cell's text replaced; code cells, nbgrader metadata,
  grade ids and points are the English ones, copied by the build and never by hand.
  ``autograder release --course zh-CN`` then generates ``zh-CN/release/`` with nbgrader, as for
  the English edition;
* :func:`problems` names every cell that is untranslated, stale (its English changed since it
  was translated), fuzzy, or whose translation lost a code span or its heading level; the test
  suite fails on any, and on an edition's ``source/`` that is not what the build makes now.
"""

from __future__ import annotations

import copy
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import polib

from autograder.pipeline import assignments

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Edition:
    """A translated edition: its language tag, gettext locale and course root."""

    tag: str          # BCP 47, as in folder names and JupyterLab's language packs: "zh-CN"
    locale: str       # gettext: "zh_CN"
    name: str         # what the edition is called in its own language
    language_note: str = ""  # the comment on the setup cell's set_language line

    def root(self, course: Path = ROOT) -> Path:
        """The edition's nbgrader course root (its own ``source/``, ``release/``, gradebook)."""
        return course / self.tag

    def catalogs(self, course: Path = ROOT) -> Path:
        return course / "translations" / self.locale


EDITIONS = {"zh-CN": Edition("zh-CN", "zh_CN", "简体中文", "反馈、交互图示和图表都用中文")}
HEADING = re.compile(r"^(#{1,6}) ")
# A code span may wrap onto the next line (Markdown reads the line break as a space), never
# across a blank line; fenced code blocks are left out (their comments may be translated).
CODE_SPAN = re.compile(r"`((?:[^`\n]|\n(?![ \t]*\n))+)`")
FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)


def edition(tag: str) -> Edition:
    """The edition called ``tag``, or a readable ``ValueError``."""
    if tag not in EDITIONS:
        raise ValueError(f"no edition {tag!r}; the editions are {sorted(EDITIONS)}")
    return EDITIONS[tag]


def _english(course: Path, assignment: str):
    import nbformat  # lazily: `autograder --help` should not pay for it

    path = course / "source" / assignment / f"{assignment}.ipynb"
    return nbformat.read(str(path), as_version=4)


def _markdown_cells(nb) -> list[tuple[str, str]]:
    """(cell id, English text) of every Markdown cell, in notebook order."""
    out = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            if not cell.get("id"):
                raise ValueError(f"Markdown cell {i} has no id: save the notebook with "
                                 "nbformat 4.5 or later, so that its translation can find it")
            out.append((cell["id"], cell.source))
    return out


def catalog_path(ed: Edition, assignment: str, course: Path = ROOT) -> Path:
    return ed.catalogs(course) / f"{assignment}.po"


def read_catalog(ed: Edition, assignment: str, course: Path = ROOT) -> polib.POFile:
    path = catalog_path(ed, assignment, course)
    if not path.exists():
        return polib.POFile(wrapwidth=100)
    return polib.pofile(str(path), wrapwidth=100)


def _by_context(catalog: polib.POFile) -> dict[str, polib.POEntry]:
    """The Markdown cells' entries by cell id."""
    return {e.msgctxt: e for e in catalog
            if e.msgctxt and not e.obsolete and not e.msgctxt.endswith(CODE_CONTEXT)}


def _code_entries(catalog: polib.POFile) -> dict[tuple[str, str], polib.POEntry]:
    """The code cells' display strings' entries by (cell id, English string)."""
    return {(e.msgctxt[: -len(CODE_CONTEXT)], e.msgid): e for e in catalog
            if e.msgctxt and not e.obsolete and e.msgctxt.endswith(CODE_CONTEXT)}


# ----------------------------------------------------------------------------- code cells
#
# Code cells are the English ones, with two exceptions the build makes (and only the build):
# the setup cell also sets the course's language (so feedback, explorers and figures speak the
# edition's language), and the prose inside code is translated: the strings a figure shows
# (titles, axis labels, legend labels), the words it prints (a ``print`` call's labels, not its
# code), the comments and the docstrings (a graded cell's
# """Q1 (2 points): ..."""), each an entry of the lesson's catalog whose context is
# "<cell id>:code". The code itself, every name and value, is the English code.

CODE_CONTEXT = ":code"
#: matplotlib calls whose first argument is text the figure shows
TEXT_CALLS = {"set_title", "set_xlabel", "set_ylabel", "suptitle", "supxlabel", "supylabel",
              "set_text", "text"}
#: matplotlib calls whose ``label=`` / ``title=`` keywords are text the figure shows
LABEL_CALLS = {"plot", "scatter", "bar", "barh", "hist", "step", "fill_between", "axhline",
               "axvline", "errorbar", "legend", "stairs"}
LITERAL = re.compile(r"^(?P<prefix>[rRbBuUfF]{0,2})(?P<quote>\"\"\"|'''|\"|')(?P<body>.*)(?P=quote)$",
                     re.S)


def _literal(source: str, node) -> tuple[int, int, str, str, str] | None:
    """``(start, end, prefix, quote, body)`` of a string literal node: ``start:end`` its place
    in ``source`` (ast counts columns in UTF-8 bytes) and ``body`` its text between the quotes,
    exactly as written (escapes and an f-string's ``{placeholders}`` included)."""
    lines = source.splitlines(keepends=True)

    def offset(lineno: int, col: int) -> int:
        return sum(map(len, lines[:lineno - 1])) + len(lines[lineno - 1].encode()[:col].decode())

    start, end = offset(node.lineno, node.col_offset), offset(node.end_lineno, node.end_col_offset)
    m = LITERAL.match(source[start:end])
    if m and m.group("body").strip():
        return start, end, m.group("prefix"), m.group("quote"), m.group("body")
    return None


_CODE_TOKEN = re.compile(r"\{[^{}]*\}|\S*(?:[._=\[\]<>*/+\d]|\w\()\S*")


def _has_words(body: str, names: set[str] = frozenset()) -> bool:
    """Whether a printed string holds words a reader reads (``"the probe saw:"``), not only
    code (``"route.is_leaf ="``, ``"| x.grad ="``), an f-string's ``{placeholders}`` and
    ``names`` of the code (``"torch"``, ``"RuntimeError:"``)."""
    # (any script's words: the edition's translation of a label is a label too; Chinese, which
    # puts no space between words and code, is set apart from the code first)
    body = re.sub(r"\{[^{}]*\}", " ", body)  # placeholders first: they hold spaces too
    spaced = re.sub(r"([\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]+)", r" \1 ", body)
    words = re.findall(r"[^\W\d_]{2,}|[\u4e00-\u9fff]", _CODE_TOKEN.sub(" ", spaced))
    return any(w not in names for w in words)


def display_strings(source: str) -> list[tuple[int, int, str, str, str]]:
    """The strings a figure shows in a code cell, and the words a cell prints: the string
    arguments of a ``print`` call that are more than code (each piece of a literal glued from
    pieces, ``f"..." f"..."``, on its own), and the labels a cell only prints: the string keys
    of a dict literal the cell reads with ``.items()`` / ``.keys()`` alone, and the strings at
    one place of a ``for`` loop's literal list of tuples whose variable only a ``print``
    reads. Renaming those changes what is printed and nothing else. Each as :func:`_literal`
    gives it."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []

    def add(node):
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                               and isinstance(node.value, str)):
            literal = _literal(source, node)
            if literal:
                found.append(literal)

    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}

    def printed(node, label=False):
        """A string literal printed as it is: itself, or each piece it was glued from. A
        label that is one name (``"relu"``, ``"argmax"``) is code, and stays."""
        literal = _literal(source, node)
        pieces = [literal] if literal and literal[3] not in literal[4] else \
            _pieces(source, node)
        found.extend(lit for lit in pieces if _has_words(lit[4], names)
                     and not (label and re.fullmatch(r"[A-Za-z_][\w.]*(?:\(\))?", lit[4])))

    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    in_print = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "print":
            for arg in node.args:
                in_print.update(map(id, ast.walk(arg)))
                if isinstance(arg, ast.JoinedStr) or (isinstance(arg, ast.Constant)
                                                      and isinstance(arg.value, str)):
                    printed(arg)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in TEXT_CALLS and node.args:
                add(node.args[0])
            if node.func.attr in LABEL_CALLS or node.func.attr in TEXT_CALLS:
                for kw in node.keywords:
                    if kw.arg in ("label", "title"):
                        add(kw.value)

    def loads(name: str, within=(tree,)) -> list:
        return [n for top in within for n in ast.walk(top) if isinstance(n, ast.Name)
                and n.id == name and isinstance(n.ctx, ast.Load)]

    for node in ast.walk(tree):
        # a dict of labels: NAME = {"label": ...}, read only as NAME.items() / NAME.keys()
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) \
                and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            uses = loads(node.targets[0].id)
            if uses and all(isinstance(parents.get(u), ast.Attribute)
                            and parents[u].attr in ("items", "keys")
                            and isinstance(parents.get(parents[u]), ast.Call)
                            for u in uses):
                for key in node.value.keys:
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        printed(key, label=True)
        # for name, ... in [("label", ...), ...]: where only print reads ``name``
        if isinstance(node, ast.For) and isinstance(node.target, ast.Tuple) \
                and isinstance(node.iter, ast.List | ast.Tuple) and node.iter.elts \
                and all(isinstance(e, ast.Tuple) and len(e.elts) == len(node.target.elts)
                        for e in node.iter.elts):
            for i, var in enumerate(node.target.elts):
                if not isinstance(var, ast.Name):
                    continue
                uses = loads(var.id, node.body)
                if uses and all(id(u) in in_print for u in uses):
                    for row in node.iter.elts:
                        if isinstance(row.elts[i], ast.Constant) \
                                and isinstance(row.elts[i].value, str):
                            printed(row.elts[i], label=True)
    return sorted(set(found))


def _pieces(source: str, node) -> list[tuple[int, int, str, str, str]]:
    """The string literals a literal glued from pieces (``"a " "b"``) was written as, each
    as :func:`_literal` gives it."""
    import io
    import tokenize

    lines = source.splitlines(keepends=True)

    def offset(lineno: int, col: int) -> int:
        return sum(map(len, lines[:lineno - 1])) + len(lines[lineno - 1].encode()[:col].decode())

    start = offset(node.lineno, node.col_offset)
    span = source[start:offset(node.end_lineno, node.end_col_offset)]
    span_lines = span.splitlines(keepends=True)
    out = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(span).readline))
    except (tokenize.TokenError, SyntaxError):
        return []
    for tok in tokens:
        if tok.type != tokenize.STRING:
            continue
        (r0, c0), (r1, c1) = tok.start, tok.end
        a = sum(map(len, span_lines[:r0 - 1])) + c0
        b = sum(map(len, span_lines[:r1 - 1])) + c1
        m = LITERAL.match(span[a:b])
        if m and m.group("body").strip() and m.group("quote") not in m.group("body"):
            out.append((start + a, start + b, m.group("prefix"), m.group("quote"),
                        m.group("body")))
    return out


#: comments that are instructions to tools, not to readers
TOOL_COMMENT = re.compile(r"^#+\s*(?:(?:BEGIN|END) (?:SOLUTION|HIDDEN TESTS)|noqa|type:|pragma)")


def comments_and_docstrings(source: str) -> list[tuple[int, int, str, str, str]]:
    """The prose inside a code cell: its comments (``lead`` is the ``#`` and the space after
    it) and the docstrings of its statements (a graded cell's ``\"\"\"Q1 (2 points): ...\"\"\"``),
    as ``(start, end, lead or prefix, quote, body)`` like :func:`display_strings`. Comments
    that are instructions to tools (nbgrader's markers, ``noqa``) are left out."""
    import ast
    import io
    import tokenize

    try:
        tree = ast.parse(source)
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (SyntaxError, tokenize.TokenError):
        return []
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    found = []
    for tok in tokens:
        if tok.type == tokenize.COMMENT and not TOOL_COMMENT.match(tok.string):
            m = re.match(r"#+\s*", tok.string)
            body = tok.string[m.end():]
            if re.search(r"[A-Za-z]{2,}", body):
                start = starts[tok.start[0] - 1] + tok.start[1]
                found.append((start, start + len(tok.string), m.group(0), "", body))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            literal = _literal(source, node.value)
            if literal:
                found.append(literal)
    return sorted(found)


def code_texts(source: str) -> list[tuple[int, int, str, str, str]]:
    """Everything of a code cell its edition translates: the strings its figure shows, its
    comments and docstrings; ``(start, end, prefix, quote, body)`` in order."""
    return sorted(set(display_strings(source)) | set(comments_and_docstrings(source)))


def _setup_with_language(source: str, ed: Edition) -> str:
    """The setup cell's code with the edition's language set right after the seeding."""
    lines = source.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("course.seed_everything")),
              None)
    if at is None:
        at = next((i for i, line in enumerate(lines) if line.strip() == "import course"), None)
    if at is None:
        raise ValueError("the setup cell neither imports course nor calls seed_everything: the build cannot "
                         "set the edition's language")
    lines.insert(at + 1, f'course.set_language("{ed.tag}")  # {ed.language_note}')
    return "\n".join(lines)


def edition_code(ed: Edition, cell, catalog: polib.POFile) -> str:
    """The edition's version of one English code cell (see above)."""
    source = cell.source
    strings = code_texts(source)
    if strings:
        have = _code_entries(catalog)
        out, last = [], 0
        for start, end, prefix, quote, body in strings:
            entry = have[(cell["id"], body)]
            out += [source[last:start], prefix, quote, entry.msgstr, quote]
            last = end
        source = "".join(out) + source[last:]
    if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup":
        source = _setup_with_language(source, ed)
    return source


def _save(catalog: polib.POFile, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    catalog.save(str(path))


def update(ed: Edition, assignment: str, course: Path = ROOT) -> dict[str, int]:
    """Bring ``assignment``'s catalog in step with the English notebook (like ``msgmerge``).

    Returns how many entries were added, marked fuzzy and dropped.
    """
    old = _by_context(read_catalog(ed, assignment, course))
    new = polib.POFile(wrapwidth=100)
    new.header = (f"{ed.name} ({ed.tag}) translation of lesson {assignment}: the Markdown cells of\n"
                  f"source/{assignment}/{assignment}.ipynb, one entry per cell, keyed by the "
                  "cell's id.\n"
                  f"Translate msgstr only. `autograder translate {ed.tag} --update` keeps this "
                  "file in\n"
                  f"step with the English; `autograder translate {ed.tag} --check` lists what is "
                  "left to do.")
    new.metadata = {
        "Project-Id-Version": f"leaf-tensors-course {assignment}",
        "Language": ed.locale,
        "Language-Team": f"{ed.name} <{ed.tag}>",
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Content-Transfer-Encoding": "8bit",
        "Plural-Forms": "nplurals=1; plural=0;",
    }
    counts = {"added": 0, "fuzzy": 0, "dropped": 0}
    cells = _markdown_cells(_english(course, assignment))
    for cid, text in cells:
        first = text.strip().splitlines()[0][:70] if text.strip() else ""
        entry = polib.POEntry(msgctxt=cid, msgid=text, comment=first)
        was = old.get(cid)
        if was is None:
            counts["added"] += 1
        elif was.msgid == text:
            entry.msgstr, entry.flags = was.msgstr, list(was.flags)
            entry.previous_msgid = was.previous_msgid
        else:   # the English changed: keep the old translation and English for the revision
            entry.msgstr, entry.flags = was.msgstr, ["fuzzy"]
            entry.previous_msgid = was.previous_msgid or was.msgid
            counts["fuzzy"] += 1
        new.append(entry)
    counts["dropped"] = len(set(old) - {cid for cid, _ in cells})
    old_code = _code_entries(read_catalog(ed, assignment, course))
    kept = set()
    for cell in _english(course, assignment).cells:
        if cell.cell_type != "code":
            continue
        for *_unused, body in code_texts(cell.source):
            key = (cell["id"], body)
            if key in kept:
                continue
            kept.add(key)
            entry = polib.POEntry(msgctxt=cell["id"] + CODE_CONTEXT, msgid=body,
                                  comment="a comment or docstring of this code cell, or a "
                                          "string its figure shows or it prints")
            was = old_code.get(key)
            if was is None:
                counts["added"] += 1
            else:
                entry.msgstr, entry.flags = was.msgstr, list(was.flags)
            new.append(entry)
    counts["dropped"] += len(set(old_code) - kept)
    _save(new, catalog_path(ed, assignment, course))
    return counts


def set_translations(ed: Edition, assignment: str, texts: dict[str, str],
                     course: Path = ROOT) -> None:
    """Write translations (cell id -> text) into ``assignment``'s catalog, clearing their fuzzy
    flags: what a translator's tool does when a translation is saved as reviewed."""
    update(ed, assignment, course)
    catalog = read_catalog(ed, assignment, course)
    by_id = _by_context(catalog)
    unknown = sorted(set(texts) - set(by_id))
    if unknown:
        raise KeyError(f"{assignment} has no Markdown cells with the ids {unknown}")
    for cid, text in texts.items():
        entry = by_id[cid]
        entry.msgstr = text
        if "fuzzy" in entry.flags:
            entry.flags.remove("fuzzy")
        entry.previous_msgid = None
    _save(catalog, catalog_path(ed, assignment, course))


def code_spans(markdown: str) -> set[str]:
    """The inline code spans of ``markdown``, as Markdown renders them (a wrapped span's line
    break read as a space), outside fenced code blocks."""
    prose = FENCE.sub("", markdown)
    return {"`" + " ".join(m.group(1).split()) + "`" for m in CODE_SPAN.finditer(prose)}


def _lost_spans(english: str, translated: str) -> list[str]:
    return sorted(code_spans(english) - code_spans(translated))


def problems(ed: Edition, names: list[str] | None = None, course: Path = ROOT) -> list[str]:
    """Every cell whose translation is missing, stale, fuzzy or damaged; empty: complete."""
    found = []
    for assignment in names or assignments(course):
        have = _by_context(read_catalog(ed, assignment, course))
        where = f"translations/{ed.locale}/{assignment}.po"
        cells = _markdown_cells(_english(course, assignment))
        for cid, text in cells:
            title = text.strip().splitlines()[0][:60] if text.strip() else "(empty)"
            name = f"{where}: cell {cid!r} ({title})"
            entry = have.get(cid)
            if entry is None or not entry.msgstr:
                found.append(f"{name} is not translated")
            elif entry.msgid != text:
                found.append(f"{name} is stale: its English changed since it was translated "
                             f"(run `autograder translate {ed.tag} --update`, then revise it)")
            elif "fuzzy" in entry.flags:
                found.append(f"{name} is fuzzy: review the translation, then remove the flag")
            else:
                lost = _lost_spans(text, entry.msgstr)
                if lost:
                    found.append(f"{name} lost code spans {lost}: code stays as it is")
                level = HEADING.match(text)
                if level and not entry.msgstr.startswith(level.group(0)):
                    found.append(f"{name} must stay a {level.group(1)} heading")
        catalog = read_catalog(ed, assignment, course)
        code = _code_entries(catalog)
        for cell in _english(course, assignment).cells:
            if cell.cell_type != "code":
                continue
            for *_unused, prefix, quote, body in code_texts(cell.source):
                name = f"{where}: code cell {cell['id']!r}, the text {body[:60]!r}"
                entry = code.get((cell["id"], body))
                if entry is None or not entry.msgstr:
                    found.append(f"{name} is not translated")
                elif "fuzzy" in entry.flags:
                    found.append(f"{name} is fuzzy: review the translation, then remove the flag")
                elif not quote and "\n" in entry.msgstr:
                    found.append(f"{name}: a comment's translation stays on one line")
                elif "f" in prefix.lower() and _fields(body) != _fields(entry.msgstr):
                    found.append(f"{name}: the translation's placeholders "
                                 f"{sorted(_fields(entry.msgstr))} are not the English ones")
        for cid in sorted(set(have) - {cid for cid, _ in cells}):
            found.append(f"{where}: cell {cid!r} no longer exists in the English notebook "
                         f"(run `autograder translate {ed.tag} --update`)")
    return found


def _fields(text: str) -> set[str]:
    return set(re.findall(r"(?<!\{)\{([^{}]*)\}(?!\})", text))


def translated_notebook(ed: Edition, assignment: str, course: Path = ROOT):
    """The edition's source notebook: the English one, its Markdown translated."""
    issues = problems(ed, [assignment], course)
    if issues:
        raise ValueError("the translation is not complete:\n" + "\n".join(issues))
    english = _english(course, assignment)
    catalog = read_catalog(ed, assignment, course)
    have = _by_context(catalog)
    nb = copy.deepcopy(english)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = have[cell["id"]].msgstr
        elif cell.cell_type == "code":
            cell.source = edition_code(ed, cell, catalog)
            try:
                compile(cell.source, cell["id"], "exec")
            except SyntaxError as exc:
                raise ValueError(f"translations/{ed.locale}/{assignment}.po: the translated "
                                 f"strings of code cell {cell['id']!r} break its code: "
                                 f"{exc}") from None
    nb.metadata["leaf_course"] = {"edition": ed.tag, "translated_from": "source/"}
    return nb


def build(ed: Edition, names: list[str] | None = None, course: Path = ROOT) -> list[Path]:
    """Write ``<edition>/source/<assignment>/`` for each assignment; return the notebooks."""
    out = []
    for assignment in names or assignments(course):
        nb = translated_notebook(ed, assignment, course)
        folder = ed.root(course) / "source" / assignment
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(course / "source" / assignment, folder,
                        ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints",
                                                      "__pycache__"))
        path = folder / f"{assignment}.ipynb"
        import nbformat

        nbformat.write(nb, str(path))
        out.append(path)
    return out


def stale_sources(ed: Edition, names: list[str] | None = None, course: Path = ROOT) -> list[str]:
    """Edition source notebooks that differ from what :func:`build` writes now."""
    found = []
    for assignment in names or assignments(course):
        path = ed.root(course) / "source" / assignment / f"{assignment}.ipynb"
        if not path.exists():
            found.append(f"{path.relative_to(course)} is missing")
            continue
        fresh = translated_notebook(ed, assignment, course)
        import nbformat

        if nbformat.read(str(path), as_version=4) != fresh:
            found.append(f"{path.relative_to(course)} is not what the translation builds now "
                         f"(run `autograder translate {ed.tag}`)")
    return found


# ----------------------------------------------------------------------------- command line

def add_parser(sub) -> None:
    p = sub.add_parser("translate", help="build or check a translated edition (zh-CN)")
    p.add_argument("edition", choices=sorted(EDITIONS), help="the edition's language tag")
    p.add_argument("assignments", nargs="*", help="assignment ids (default: all)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--update", action="store_true",
                      help="bring the PO catalogs in step with the English notebooks")
    what.add_argument("--check", action="store_true",
                      help="exit 1 on any missing, stale or fuzzy translation")
    p.add_argument("--course", default=".", help="course root (default: current folder)")
    p.set_defaults(func=_cmd)


def _cmd(args) -> int:
    course = Path(args.course).resolve()
    ed = edition(args.edition)
    names = args.assignments or None
    from autograder import messages

    if args.update:
        for name in names or assignments(course):
            c = update(ed, name, course)
            print(f"translations/{ed.locale}/{name}.po: {c['added']} new, {c['fuzzy']} to "
                  f"revise (fuzzy), {c['dropped']} dropped")
        if not names:
            for module, c in messages.update(ed.tag).items():
                if any(c.values()):
                    print(f"course/locale/{ed.locale}/{module}.po: {c['added']} new, "
                          f"{c['fuzzy']} to revise (fuzzy), {c['dropped']} dropped")
        return 0
    found = problems(ed, names, course)
    if args.check and not names:  # the messages of the Python code too
        found += messages.problems(ed.tag)
    if args.check or found:
        for line in found:
            print(line)
        if found:
            print(f"{len(found)} cell(s) to translate or revise.")
            return 1
        print(f"the {ed.tag} translation is complete.")
        return 0
    for path in build(ed, names, course):
        print(f"built {path.relative_to(course)}")
    print(f"now run `autograder release --course {ed.tag}` to generate {ed.tag}/release/")
    return 0
