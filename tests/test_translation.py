"""The Simplified Chinese edition is built from the English source and cannot drift from it.

The English notebooks are the only ones anyone edits; the Chinese prose lives in PO catalogs
(``translations/zh_CN/``) keyed by cell id. These tests fail, naming the cell, on a missing,
stale or fuzzy translation, on an edition notebook that is not what the build makes now, on a
code cell or nbgrader metadata that differs from the English, and on a stale ``zh-CN/release/``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from helpers import ROOT, assignments, english_sentences, notebook_path, read

from autograder import translate
from autograder.release import check_release

ED = translate.edition("zh-CN")
ZH = ED.root(ROOT)
ASSIGNMENTS = assignments()
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_every_markdown_cell_is_translated_and_current():
    problems = translate.problems(ED)
    assert problems == [], "\n".join(problems)


def test_the_edition_source_is_what_the_translation_builds_now():
    stale = translate.stale_sources(ED)
    assert stale == [], "\n".join(stale)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_code_cells_ids_and_grading_metadata_are_the_english_ones(assignment):
    en = read(notebook_path(assignment)).cells
    zh = read(notebook_path(assignment, ZH / "source")).cells
    assert [c.get("id") for c in zh] == [c.get("id") for c in en]
    for a, b in zip(en, zh, strict=True):
        assert a.cell_type == b.cell_type and a.metadata == b.metadata, a.get("id")
        if a.cell_type == "code":
            assert _skeleton(b.source) == _skeleton(a.source), a.get("id")
            if not translate.code_texts(a.source) and meta_id(a) != "setup":
                assert a.source == b.source, a.get("id")


def meta_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _skeleton(source: str) -> str:
    """A code cell's syntax tree (no comments) with the strings its figure shows and its
    docstrings blanked, and the edition's ``course.set_language(...)`` line left out: what no
    translation may change."""
    import ast

    shown = {(start, end) for start, end, *_rest in translate.code_texts(source)}
    tree = ast.parse(source)
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line.encode()))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and hasattr(node, "lineno"):
            span = (len(source.encode()[:starts[node.lineno - 1] + node.col_offset].decode()),
                    len(source.encode()[:starts[node.end_lineno - 1]
                                        + node.end_col_offset].decode()))
            if any(a <= lo and hi <= b for lo, hi in shown for a, b in [span]):  # or pieces
                node.__class__, node.__dict__ = ast.Constant, {**node.__dict__, "value": "…"}
    tree.body = [s for s in tree.body if not (
        isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
        and ast.unparse(s.value.func) == "course.set_language")]
    return ast.dump(tree)


def test_the_chinese_setup_cells_set_the_language_and_nothing_else():
    for assignment in ASSIGNMENTS:
        en = next(c for c in read(notebook_path(assignment)).cells if meta_id(c) == "setup")
        zh = next(c for c in read(notebook_path(assignment, ZH / "source")).cells
                  if meta_id(c) == "setup")
        def code(source):  # the lines' code, comments left out (they are translated)
            return [line.split("  #")[0].rstrip() for line in source.splitlines()]

        added = [line for line in code(zh.source) if line not in code(en.source)]
        assert added == ['course.set_language("zh-CN")'], assignment


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_comments_and_docstrings_of_the_chinese_code_read_chinese(assignment):
    """The prose inside code (comments, graded cells' docstrings) is translated too; a comment
    that is only code (an output, an expression) may stay as it is, an English sentence not."""
    left = []
    for cell in read(notebook_path(assignment, ZH / "source")).cells:
        if cell.cell_type == "code":
            for *_rest, body in translate.comments_and_docstrings(cell.source):
                if english_sentences(body):
                    left.append(f"{cell.id}: {body}")
    assert left == [], "\n".join(left)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_code_blocks_of_the_chinese_prose_keep_the_code_and_translate_its_comments(
        assignment):
    """A code block inside a Markdown cell is the English code, its comments in Chinese."""
    entries = [e for e in translate.read_catalog(ED, assignment)
               if e.msgctxt and not e.msgctxt.endswith(translate.CODE_CONTEXT)]

    def blocks(text):  # the code inside each fence
        return [m.group(0).split("\n", 1)[1].rsplit("\n", 1)[0]
                for m in translate.FENCE.finditer(text)]

    def code(block):  # Python: its syntax tree, comments and docstrings blanked
        try:
            return _skeleton(block)
        except SyntaxError:  # a traceback, a shell line: its lines without comments
            return [line.split("#")[0].rstrip() for line in block.splitlines()]

    left = []
    for e in entries:
        assert [code(b) for b in blocks(e.msgstr)] == [code(b) for b in blocks(e.msgid)], \
            e.msgctxt
        for b in blocks(e.msgstr):
            texts = [body for *_rest, body in translate.comments_and_docstrings(b)]
            left += [f"{e.msgctxt}: {t}" for t in texts or re.findall(r"#[^\n]*", b)
                     if english_sentences(t)]
    assert left == [], "\n".join(left)


def test_the_figures_strings_are_translated_in_the_chinese_code():
    """Lessons 04 and 07 draw figures in their own cells: their titles, axes and legends are
    Chinese in the Chinese edition, the rest of the code is the English code."""
    shown = 0
    for assignment in ASSIGNMENTS:
        for cell in read(notebook_path(assignment, ZH / "source")).cells:
            if cell.cell_type == "code":
                for *_rest, body in translate.display_strings(cell.source):
                    shown += 1
                    assert CJK.search(body), (assignment, cell.id, body)
    assert shown >= 8


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_markdown_cell_of_the_chinese_release_reads_chinese(assignment):
    cells = read(notebook_path(assignment, ZH / "release")).cells
    english = [c.get("id") for c in cells if c.cell_type == "markdown"
               and not CJK.search(c.source)]
    assert not english, f"Markdown cells without Chinese text: {english}"


def _rendered_text(markdown: str) -> str:
    """What a reader sees of a Markdown cell, code and math left out (JupyterLab renders
    CommonMark plus tables)."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(markdown)
    html = re.sub(r"<(code|pre)>.*?</\1>", "", html, flags=re.S)
    return re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$", "", html, flags=re.S)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_emphasis_is_left_unrendered_in_the_chinese_prose(assignment):
    """CommonMark does not close ``**`` after a full-width mark when a CJK character follows
    (``**提示：**从``): the reader would see the asterisks."""
    broken = [c.get("id") for c in read(notebook_path(assignment, ZH / "source")).cells
              if c.cell_type == "markdown" and re.search(r"\*\*|(?<![\w*])\*(?!\s)",
                                                         _rendered_text(c.source))]
    assert not broken, f"cells showing literal asterisks: {broken}"


_FULL = "\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
# a line break between two Chinese characters: browsers show it as a space inside a word
_CJK_BREAK = re.compile(rf"[{_FULL}]\n[ \t]*[{_FULL}]")


def _prose(markdown: str) -> str:
    return re.sub(r"^```.*?^```[ \t]*$", "", markdown, flags=re.M | re.S)


def test_no_line_break_splits_chinese_text():
    found = [f"{a} {c.get('id')}" for a in ASSIGNMENTS
             for c in read(notebook_path(a, ZH / "source")).cells
             if c.cell_type == "markdown" and _CJK_BREAK.search(_prose(c.source))]
    for path in (ROOT / "README.zh-CN.md", ROOT / "translations" / "zh_CN" / "README.md"):
        for m in _CJK_BREAK.finditer(_prose(path.read_text(encoding="utf-8"))):
            found.append(f"{path.relative_to(ROOT)}: {m.group(0)!r}")
    assert not found, found


def test_the_render_check_sees_a_broken_emphasis():
    assert "**" in _rendered_text("**提示：**从这里开始")
    assert "**" not in _rendered_text("**提示**：从这里开始，`a ** 2` 不算")


@pytest.mark.grading
def test_the_chinese_release_is_what_nbgrader_generates_now():
    problems = check_release(ZH)
    assert problems == [], "\n".join(problems) + "\nrun `autograder release --course zh-CN`"


def _course_copy(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    for name in ("source", "translations"):
        shutil.copytree(ROOT / name, course / name,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return course


def test_a_changed_english_cell_fails_the_check_by_name_until_revised(tmp_path):
    """Edit an English cell: the check names it stale; --update marks it fuzzy (the old
    translation kept for revision); a revised translation makes the edition whole again."""
    import nbformat

    course = _course_copy(tmp_path)
    assignment = ASSIGNMENTS[0]
    path = course / "source" / assignment / f"{assignment}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells[2:] if c.cell_type == "markdown")
    cell.source += "\n\nOne more English sentence."
    nbformat.write(nb, str(path))

    stale = translate.problems(ED, [assignment], course)
    assert len(stale) == 1 and repr(cell.id) in stale[0] and "stale" in stale[0]
    with pytest.raises(ValueError, match="not complete"):
        translate.build(ED, [assignment], course)

    counts = translate.update(ED, assignment, course)
    assert counts == {"added": 0, "fuzzy": 1, "dropped": 0}
    fuzzy = translate.problems(ED, [assignment], course)
    assert len(fuzzy) == 1 and "fuzzy" in fuzzy[0]
    entry = translate._by_context(translate.read_catalog(ED, assignment, course))[cell.id]
    assert entry.previous_msgid and entry.msgstr       # what the translator revises from

    translate.set_translations(ED, assignment, {cell.id: entry.msgstr + "\n\n再多一句。"},
                               course)
    assert translate.problems(ED, [assignment], course) == []
    (built,) = translate.build(ED, [assignment], course)
    assert "再多一句。" in built.read_text(encoding="utf-8")


def test_the_check_names_a_new_cell_a_lost_code_span_and_a_lost_heading(tmp_path):
    import nbformat

    course = _course_copy(tmp_path)
    assignment = ASSIGNMENTS[0]
    path = course / "source" / assignment / f"{assignment}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells.insert(3, nbformat.v4.new_markdown_cell("A new paragraph about `x.grad`.",
                                                     id="brand-new"))
    nbformat.write(nb, str(path))
    assert any("'brand-new'" in p and "not translated" in p
               for p in translate.problems(ED, [assignment], course))
    translate.set_translations(ED, assignment, {"brand-new": "关于梯度的一段新文字。"}, course)
    assert any("'brand-new'" in p and "x.grad" in p
               for p in translate.problems(ED, [assignment], course))
    heading = next(c for c in nb.cells if c.cell_type == "markdown"
                   and c.source.startswith("## ") and not translate.code_spans(c.source))
    translate.set_translations(ED, assignment, {"brand-new": "关于 `x.grad` 的一段新文字。",
                                                heading.id: "没有标题了"}, course)
    problems = translate.problems(ED, [assignment], course)
    assert len(problems) == 1, problems
    assert repr(heading.id) in problems[0] and "heading" in problems[0]


def test_translate_check_command_exits_1_and_names_the_cell(tmp_path):
    import nbformat

    course = _course_copy(tmp_path)
    assignment = ASSIGNMENTS[-1]
    path = course / "source" / assignment / f"{assignment}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in reversed(nb.cells) if c.cell_type == "markdown")
    cell.source = cell.source.replace(" ", "  ", 1)
    nbformat.write(nb, str(path))
    proc = subprocess.run([sys.executable, "-m", "autograder", "translate", "zh-CN", "--check",
                           "--course", str(course)], capture_output=True, text=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert repr(cell.id) in proc.stdout and "stale" in proc.stdout


def _chinese_texts():
    """Every Chinese text a learner reads that is not generated from another one here: the
    lessons' and the code's catalogs, the READMEs, the analogy tables, the site's own words."""
    import glob

    import polib

    from autograder import site
    from course import themes

    texts = {}
    for path in sorted(glob.glob(str(ROOT / "translations/zh_CN/*.po"))
                       + glob.glob(str(ROOT / "course/locale/zh_CN/*.po"))):
        for entry in polib.pofile(path):
            texts[f"{path[len(str(ROOT)) + 1:]}:{entry.linenum}"] = entry.msgstr
    for name in ("README.zh-CN.md", "translations/zh_CN/README.md"):
        texts[name] = (ROOT / name).read_text()
    for table in (themes.GLOSSARY_ZH, themes.MESSAGES_ZH):
        for theme, entries in table.items():
            texts.update({f"themes {theme} {key}": v for key, v in entries.items()})
    texts["the site's front page"] = site.course_map_zh(ROOT)
    texts["the site's configuration"] = repr(site.ZH_CONFIG)
    return texts


def test_one_chinese_term_for_each_idea():
    """course.terminology.TERMS_ZH: no Chinese text uses a variant it replaced (第1题, never
    问题1; 探索器, never 交互图示; 运行所有单元格, the menu's words for Run All)."""
    from course.terminology import variants_in

    found = {where: variants_in(text) for where, text in _chinese_texts().items()}
    found = {where: v for where, v in found.items() if v}
    assert not found, "\n".join(f"{where}: {', '.join(f'{a} (use {b})' for a, b in v)}"
                                for where, v in found.items())


def test_the_terminology_check_finds_a_variant_but_not_a_quoted_one():
    from course.terminology import search_words, variants_in

    assert variants_in("### 问题3（2分）：交互图示") == [("问题3", "第N题"), ("交互图示", "探索器")]
    assert variants_in("文章说“默认非叶张量梯度释放”") == []
    words = search_words()
    assert {"叶子张量", "钩子", "梯度", "探索器", "分拣中心"} <= set(words)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_validate_names_each_graded_cell_in_the_notebooks_language(assignment):
    """Validate's summary names a graded cell as its docstring does, points left out: the
    Chinese edition's names are Chinese (第5题，无副作用), never a part's id (hygiene)."""
    from autograder.validate import _graded, _question_name

    for root, pattern in (("", r"^Q\d+\b"), (ED.root(ROOT).name, r"^第\d+题")):
        base = ROOT / root if root else ROOT
        nb = read(base / "release" / assignment / f"{assignment}.ipynb")
        names = [_question_name(c) for c in nb.cells if _graded(c)]
        assert names, assignment
        for name in names:
            assert re.match(pattern, name) and not re.search(r"points?\b|分[）)]", name), name


def test_a_cell_s_printed_words_are_found_and_nothing_its_code_reads():
    """What the Chinese edition translates in a code cell: the words ``print`` prints (each
    piece of a literal glued from pieces), and labels the cell only prints (a dict read only
    with ``.items()``, a loop's literal rows whose variable only ``print`` reads); never a key
    the code looks up, a name-like label, or a string the code compares."""
    source = '''PROBES = {"no probe": None, "probe keeping clones": None, "relu": None}
for name, install in PROBES.items():
    print(f"{name:21} saved")
ANSWER = {"monday": 1, "two reports": 2}
check("q1", ANSWER)
for name, model in [("activation-heavy", 1), ("parameter-heavy", 2)]:
    print(f"{name}:")
shares = {}
for name, model in [("kept as a key", 1)]:
    shares[name] = model
print(f"x = {1}, "
      f"the step moved the centre by {2}")
if shares.get("looked up here") == "compared here":
    pass
'''
    found = [body for *_rest, body in translate.display_strings(source)]
    assert found == ["no probe", "probe keeping clones", "{name:21} saved", "activation-heavy",
                     "parameter-heavy", "the step moved the centre by {2}"]
