"""``autograder site``: the course as a static site that reads offline (docs/site.md).

A Jupyter Book 1 (Sphinx + MyST-NB) built from what learners get and what the course
documents:

* the front page: the README's course map, its links pointing at the lessons' pages;
* the eight lessons from ``release/`` (prompts and answer templates, never solutions or
  hidden tests), executed at build time through jupyter-cache, so a notebook whose code
  did not change is not executed again;
* the analogy glossary, generated from ``course.themes.GLOSSARY``;
* the doctor's documentation and the instructors' guide (``docs/``).

Where the Simplified Chinese edition exists (``zh-CN/release/``), the site carries both: the
Chinese edition is a second book of the same shape (its front page from README.zh-CN.md, its
lessons from ``zh-CN/release/``, its glossary from ``course.themes.GLOSSARY_ZH``), built into
``OUT/html/zh-CN/`` with ``language: zh_CN``; its links to the doctor and the instructors'
guide point at the English pages (the docs exist only in English). Every page links to the
other edition's page (:data:`EDITIONS`). The Chinese notebooks' code cells are the English
ones but for the setup cell's ``course.set_language("zh-CN")`` and the strings the figures
show, so each edition's lessons are executed (jupyter-cache, one cache for both): the Chinese
pages show what the code prints in Chinese, explorers and figures included. Its search splits
Chinese text into words with jieba (Sphinx's Chinese search), given the course's terms as a user
dictionary (:data:`SEARCH_WORDS`), so 叶子张量 is found as one word and as 叶子 and 张量.

The build has three steps. :func:`stage` writes the book's sources into ``OUT/book``
(configuration and static files from the repository's ``site/`` folder, MathJax from the
``django-static-mathjax`` package, copied into the built site after Sphinx), rewriting only files whose content changed, so Sphinx
re-reads only what changed. :func:`build` then runs Jupyter Book's Sphinx build into
``OUT/html`` and fails when a page refers to an external ``http(s)://`` resource
(:func:`external_resources`), and writes ``OUT/build-record.json``: which notebooks were
executed by this build, read from jupyter-cache's records.

Layout of ``OUT`` (default ``build/site``): ``html/`` the site (open ``html/index.html``,
host that folder; the Chinese edition in ``html/zh-CN/``), ``book/`` the staged sources,
``jupyter_cache/`` the executed notebooks (both editions'), ``doctrees/`` and
``jupyter_execute/`` Sphinx's and MyST-NB's incremental state; ``zh-CN/`` the Chinese
edition's ``book/``, ``doctrees/``, ``jupyter_execute/`` and its Sphinx output ``html/``,
copied into ``html/zh-CN/`` (MyST-NB keeps its state beside Sphinx's output folder, which
must therefore not be inside the site).
"""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import os
import posixpath
import re
import sys
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

DEFAULT_OUT = "build/site"
# The docs pages the site carries: the doctor's documentation, then the instructors' guide.
DOCTOR_DOC = "docs/doctor.md"
INSTRUCTOR_DOCS = ("docs/grading.md", "docs/exchange.md", "docs/report.md", "docs/feedback.md")
# MathJax 3's CommonHTML build and what it loads lazily (TeX extensions, fonts, the a11y
# and ui components): the rest of the package (SVG output, speech rules, sources) is unused.
MATHJAX_PARTS = ("tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "a11y",
                 "ui", "adaptors")
SETUP_CELL = ("# The course site: explorers show precomputed states (course/static_states.py)\n"
              "import course.static_states\n"
              "course.static_states.enable()")
EXERCISE_TAGS = ["skip-execution", "site-exercise"]
#: the Chinese edition's search dictionary, beside its _config.yml: Sphinx splits Chinese text
#: into words with jieba, which keeps these whole (course.terminology.search_words)
SEARCH_WORDS = "_search_words.txt"


class SiteError(RuntimeError):
    """The site could not be built, or a built page breaks a rule of docs/site.md."""


@dataclass
class BuildResult:
    html: Path
    seconds: float
    executed: list[str] = field(default_factory=list)   # notebooks this build executed
    pages: list[str] = field(default_factory=list)      # every .html page of the site
    editions: dict = field(default_factory=dict)        # per edition: executed, pages


# ---------------------------------------------------------------------------------------
# Staging: the book's sources, written only where they changed
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Edition:
    """One edition of the course on the site."""

    name: str       # "en", "zh-CN"
    root: str       # the edition's folder in the repository ("" for English), its release/
    readme: str     # the README its front page is made from
    language: str   # Sphinx's language
    label: str      # its name in a link to it ("English", "简体中文")
    lang: str       # the HTML lang / hreflang
    prefix: str     # where it is in OUT/html and its work folder in OUT ("" or "zh-CN/")


EN = Edition("en", "", "README.md", "en", "English", "en", "")
ZH = Edition("zh-CN", "zh-CN", "README.zh-CN.md", "zh_CN", "简体中文", "zh-CN", "zh-CN/")
EDITIONS = (EN, ZH)


def editions(course: Path) -> list[Edition]:
    """The editions the course has: English, and Chinese where ``zh-CN/release/`` holds its
    lessons."""
    return [e for e in EDITIONS if e is EN or lessons(course, e)]


def lessons(course: Path, edition: Edition = EN) -> list[Path]:
    """An edition's release notebooks, in course order: ``release/NN_topic/NN_topic.ipynb``
    (``zh-CN/release/...`` for the Chinese edition)."""
    return sorted(p for p in (course / edition.root / "release").glob("*/*.ipynb")
                  if p.stem == p.parent.name)


def _write(path: Path, data: str | bytes, written: set) -> None:
    """Write ``data`` unless the file already holds it (its mtime then stays, and Sphinx does
    not re-read it)."""
    written.add(path.resolve())
    raw = data.encode() if isinstance(data, str) else data
    if path.exists() and path.read_bytes() == raw:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)


def _site_path(repo_path: str, course: Path, edition: Edition = EN) -> str | None:
    """Where a repository file is in an edition's book (``None``: it does not carry it)."""
    release = posixpath.join(edition.root, "release")
    lesson = re.fullmatch(re.escape(release) + r"/([^/]+)/\1\.ipynb", repo_path)
    if lesson:
        return f"lessons/{lesson.group(1)}.ipynb"
    if repo_path == edition.readme:
        return "index.md"
    if edition is not EN:
        return None
    if repo_path in (DOCTOR_DOC, *INSTRUCTOR_DOCS):
        return repo_path
    if repo_path.startswith("docs/img/") and (course / repo_path).is_file():
        return repo_path
    return None


_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")


def edition_href(edition: Edition, site_path: str, target: Edition, target_path: str) -> str:
    """The relative URL, from the page of ``site_path`` in ``edition``, of the page of
    ``target_path`` in ``target`` (book paths: ``lessons/01_leaves.ipynb``, ``index.md``)."""
    here = posixpath.dirname(edition.prefix + site_path)
    page = posixpath.splitext(target.prefix + target_path)[0] + ".html"
    return posixpath.relpath(page, here or ".")


def rewrite_links(text: str, repo_path: str, site_path: str, course: Path,
                  edition: Edition = EN) -> str:
    """Markdown links of the file ``repo_path`` (shown at ``site_path`` in ``edition``'s
    book): a link to a file the edition carries points at its page; a link to a page only the
    English edition carries (the docs) points at that page, marked as English; a link to
    anything else of the repository (source code, tests) becomes its text, so the site has no
    broken link."""
    here = posixpath.dirname(repo_path)
    there = posixpath.dirname(site_path)

    def fix(m: re.Match) -> str:
        bang, label, target = m.groups()
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(here, path))
        mapped = _site_path(resolved, course, edition)
        if mapped is None and not bang and edition is not EN and \
                _site_path(resolved, course, EN) is not None:
            # another build's page: raw HTML, which Sphinx does not try to resolve
            href = edition_href(edition, site_path, EN, _site_path(resolved, course, EN))
            href += f"#{anchor}" if anchor else ""
            return f'<a href="{html.escape(href)}" hreflang="en">{label}</a>（英文文档）'
        if mapped is None:
            return label if not bang else f"*{label}*"
        new = posixpath.relpath(mapped, there or ".") + (f"#{anchor}" if anchor else "")
        return f"{bang}[{label}]({new})"

    return _LINK.sub(fix, text)


def stage_notebook(source: Path, repo_path: str, site_path: str, course: Path,
                   edition: Edition = EN) -> str:
    """A release notebook as the site shows it (JSON text).

    * A hidden first cell calls ``course.static_states.enable()``: explorers then show
      precomputed states instead of widgets.
    * Exercise cells are shown, not executed: the answer cells (nbgrader ``solution``), the
      visible checks (``check(...)``) and the graded cells. In a release notebook an answer
      is a template that raises ``NotImplementedError`` (or a find-the-bug starter), so
      running them would put a traceback or a "not answered yet" verdict on the page, and
      each check would start the oracle for nothing. Tagged ``skip-execution`` (nbclient
      skips them) and ``site-exercise`` (site.css marks them as exercises).
    * Markdown links point at the site's pages (:func:`rewrite_links`).

    The editions' notebooks differ in their Markdown, their setup cell (which sets the
    language) and their figures' strings; each is staged and executed as it is.
    """
    import nbformat

    nb = nbformat.read(str(source), as_version=4)
    answers: set[str] = set()  # names only an answer (or a cell run with one) defines
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = rewrite_links(cell.source, repo_path, site_path, course, edition)
            continue
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        defined, used = _names(cell.source)
        exercise = bool(meta.get("solution") or meta.get("grade")
                        or is_visible_check(cell.source))
        if exercise or used & answers:
            # a cell that uses an answer (a demo "answer Question 7 first") runs only with it
            answers |= defined
            tags = cell.metadata.setdefault("tags", [])
            tags.extend(t for t in EXERCISE_TAGS if t not in tags)
        else:
            answers -= defined  # redefined by the lesson itself: available again
        cell.outputs, cell.execution_count = [], None
    setup = nbformat.v4.new_code_cell(SETUP_CELL, metadata={"tags": ["remove-cell"]})
    setup["id"] = "course-site-setup"  # a fixed id: an unchanged lesson stages unchanged
    nb.cells.insert(0, setup)
    return nbformat.writes(nb) + "\n"


def _names(source: str) -> tuple[set[str], set[str]]:
    """``(defined, used)``: the names a cell binds at its top level and every name it reads
    (IPython magics and shell lines are dropped before parsing)."""
    import ast

    code = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln
                     for ln in source.splitlines())
    try:
        tree = ast.parse(code)
    except SyntaxError:
        words = set(re.findall(r"[A-Za-z_]\w*", code))
        return set(), words
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        else:
            defined |= {n.id for n in ast.walk(node)
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and
            isinstance(n.ctx, ast.Load)}
    return defined, used


def is_visible_check(source: str) -> bool:
    """A lesson's visible check cell: ``check("qN", answer)`` (lines that call ``check``)."""
    lines = [ln for ln in source.strip().splitlines() if ln.strip() and
             not ln.lstrip().startswith("#")]
    return bool(lines) and all(re.match(r"\s*check\(", ln) for ln in lines)


def _other_editions_line(edition: Edition, course: Path, site_path: str) -> str:
    """``English · 简体中文``: this edition's name, the others linked (raw HTML: the other
    edition is another Sphinx build)."""
    parts = []
    for e in editions(course):
        if e is edition:
            parts.append(e.label)
        else:
            href = edition_href(edition, site_path, e, "index.md")
            parts.append(f'<a class="site-edition-link" href="{href}" hreflang="{e.lang}" '
                         f'lang="{e.lang}">{e.label}</a>')
    return " · ".join(parts) if len(parts) > 1 else ""


def _readme_parts(course: Path, edition: Edition, heading: str) -> tuple[str, str, str]:
    """A README's title, its opening paragraph (after the language line) and the body of its
    course map section."""
    readme = (course / edition.readme).read_text()
    title = re.search(r"^# (.+)$", readme, re.M).group(1)
    paragraphs = [p.strip() for p in readme.split("\n\n")[1:]]
    intro = next(p for p in paragraphs if p and not p.startswith("["))  # not the language line
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## )", readme, re.M | re.S)
    if m is None:
        raise SiteError(f"{edition.readme} has no '## {heading}' section")
    return title, intro, m.group(1).strip()


def course_map(course: Path, edition: Edition = EN) -> str:
    """The front page: the README's title and opening, then its course map, with links to
    the lessons' pages (README.zh-CN.md's for the Chinese edition)."""
    if edition is not EN:
        return course_map_zh(course, edition)
    title, intro, body = _readme_parts(course, edition, "Course map")
    intro, body = (rewrite_links(t, edition.readme, "index.md", course, edition)
                   for t in (intro, body))
    switch = _other_editions_line(edition, course, "index.md")
    text = (f"# {title}\n\n" + (f"{switch}\n\n" if switch else "") + f"{intro}\n\n"
            "This is the course as a site: every lesson as a learner gets it, executed with "
            "torch when the site was built, so every figure and number on these pages is "
            "what torch computed. The explorers show a few precomputed states to step "
            "through; in JupyterLab every control is live. Exercises are shown with their "
            "answer templates: answer them in the notebooks (the README's quick start), "
            "where the checks run. The [glossary](glossary.md) lists the words of the "
            "analogies.\n\n"
            f"## Course map\n\n{body}\n")
    return text


def course_map_zh(course: Path, edition: Edition = ZH) -> str:
    """The Chinese front page: README.zh-CN.md's title, opening and course map (课程地图),
    its links pointing at the Chinese lessons' pages, and the English docs named as such."""
    title, intro, body = _readme_parts(course, edition, "课程地图")
    intro, body = (rewrite_links(t, edition.readme, "index.md", course, edition)
                   for t in (intro, body))
    switch = _other_editions_line(edition, course, "index.md")
    doc = edition_href(edition, "index.md", EN, DOCTOR_DOC)
    guide = "、".join(
        f'<a href="{edition_href(edition, "index.md", EN, d)}" hreflang="en">{name}</a>'
        for d, name in zip(INSTRUCTOR_DOCS, ("评分", "交换目录与JupyterHub", "班级报告",
                                            "反馈"), strict=True))
    text = (f"# {title}\n\n{switch}\n\n{intro}\n\n"
            "这是课程的网站版：每一课都是学习者拿到的样子，在构建网站时用torch执行过，所以页面上"
            "的每一张图、每一个数字都是torch算出来的。探索器提供几个预先计算好的状态，可以逐个"
            "查看；在JupyterLab里，每个控件都能现场运行。练习只显示答案模板：请在笔记本里作答"
            "（见README的快速开始），检查会在那里运行。[术语表](glossary.md)列出两个比喻和技术"
            "术语的中文用词。\n\n"
            "各课的正文、探索器、检查的反馈和图表都是中文；代码本身、torch的API名称以及torch"
            "自己的报错和警告文本保持原样。站内搜索能找到中文词语（叶子张量、钩子、梯度……）。\n\n"
            f'梯度流医生的完整文档：<a href="{doc}" hreflang="en">梯度流医生</a>（英文文档）。'
            f"教师指南：{guide}（英文文档）。\n\n"
            f"## 课程地图\n\n{body}\n")
    return text


def glossary_page(edition: Edition = EN) -> str:
    """The analogy glossary: every key of ``course.themes.GLOSSARY`` in all three themes
    (``GLOSSARY_ZH`` for the Chinese edition)."""
    from course import themes

    zh = edition is not EN
    table = themes.GLOSSARY_ZH if zh else themes.GLOSSARY
    if zh:
        groups = [("节点的种类", "图中画出的节点是什么。", themes.KINDS),
                  ("图上的标记", "探索器和步进器给节点或边加上的标记。", themes.MARKS)]
    else:
        groups = [
            ("Kinds of tensor and node", "What a drawn node is.", themes.KINDS),
            ("Marks on a drawing", "What the explorers and the stepper add to a node or an "
             "edge.", themes.MARKS),
        ]
    listed = set(themes.KINDS) | set(themes.MARKS) | set(themes.CONCEPTS)
    rest = tuple(k for k in table["technical"] if k not in listed)
    if rest:
        groups.append(("计算图的两端", "输出，以及从它出发的反向传播。", rest) if zh else
                      ("The graph's ends", "The output and the walk back from it.", rest))
    groups.append(("正文中的用词", "自动微分的其余部分，在每个比喻中的说法。", themes.CONCEPTS)
                  if zh else ("The words of the lessons' prose", "Everything else autograd "
                              "does, in each analogy.", themes.CONCEPTS))
    if zh:
        parts = ["# 比喻术语表\n",
                 "每一课都借助两个比喻讲解自动微分：**快递网络**（物流）和**厨房**；探索器和图示"
                 "可以用主题菜单在这两个比喻和技术术语之间切换。下表就是课程代码中文版使用的那张"
                 "表（`course.themes.GLOSSARY_ZH`），在构建网站时由它生成。\n"]
        names = {"technical": "技术术语", "logistics": "快递网络", "kitchen": "厨房"}
        key = "键"
    else:
        parts = ["# Glossary of the analogies\n",
                 "Every lesson tells autograd through two analogies, the **parcel network** "
                 "(logistics) and the **kitchen**; the explorers and drawings switch between "
                 "them and the plain technical words with their theme menu. This table is the "
                 "one the course's code uses (`course.themes.GLOSSARY`), generated from it "
                 "when the site was built.\n"]
        names = {t: t for t in themes.THEMES}
        key = "key"
    for heading, blurb, keys in groups:
        rows = "".join(
            "<tr>" + f"<td><code>{html.escape(k)}</code></td>" + "".join(
                f"<td>{html.escape(table[t][k])}</td>" for t in themes.THEMES)
            + "</tr>\n" for k in keys)
        head = "".join(f"<th>{html.escape(names[t])}</th>" for t in themes.THEMES)
        parts.append(f"## {heading}\n\n{blurb}\n\n"
                     f'<table class="table glossary">\n<thead><tr><th>{key}</th>{head}</tr>'
                     f"</thead>\n<tbody>\n{rows}</tbody>\n</table>\n")
    return "\n".join(parts)


def toc(course: Path, edition: Edition = EN) -> str:
    chapters = "\n".join(f"      - file: lessons/{p.stem}" for p in lessons(course, edition))
    head = ("# generated by `autograder site` (autograder/site.py)\n"
            "format: jb-book\nroot: index\nparts:\n")
    if edition is not EN:
        return (head + f"  - caption: 课程\n    chapters:\n{chapters}\n"
                "  - caption: 参考\n    chapters:\n      - file: glossary\n")
    guide = "\n".join(f"      - file: {d[:-3]}" for d in INSTRUCTOR_DOCS)
    return (head +
            f"  - caption: Lessons\n    chapters:\n{chapters}\n"
            f"  - caption: Reference\n    chapters:\n      - file: glossary\n"
            f"      - file: {DOCTOR_DOC[:-3]}\n"
            f"  - caption: Instructors' guide\n    chapters:\n{guide}\n")


def pages_of(course: Path, edition: Edition) -> list[str]:
    """The Sphinx page names of an edition (``index``, ``lessons/01_leaves``, ...)."""
    names = ["index", "glossary", "search", "genindex"]
    names += [f"lessons/{p.stem}" for p in lessons(course, edition)]
    if edition is EN:
        names += [d[:-3] for d in (DOCTOR_DOC, *INSTRUCTOR_DOCS)]
    return names


# What differs in the Chinese edition's configuration (site/_config.yml is the English one).
ZH_CONFIG = {
    "title": "叶子张量：一门交互式的PyTorch自动微分课程",
    "author": "课程作者",
    "html": {"extra_footer": "由课程的中文发放版笔记本构建，在构建网站时用torch执行。"},
    "sphinx": {"config": {"language": "zh_CN",
                          "html_theme_options": {"search_bar_text": "搜索课程……"}}},
}


def _merge(base: dict, over: dict) -> dict:
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v
    return base


def book_config(course: Path, edition: Edition, cache: Path) -> dict:
    """site/_config.yml for an edition: the shared cache, the links to the other edition
    (``site/_templates/edition-switch.html`` in every page's header), and for the Chinese
    edition its language, title and MathJax (the English site's copy)."""
    import yaml

    config = yaml.safe_load((course / "site" / "_config.yml").read_text())
    config["execute"]["cache"] = str(cache.resolve())
    sphinx = config["sphinx"]["config"]
    others = []
    for e in editions(course):
        if e is not edition:
            pages = pages_of(course, e)
            others.append({"label": e.label, "lang": e.lang, "pages": pages,
                           "prefix": posixpath.relpath(e.prefix or ".",
                                                       edition.prefix or ".") + "/"})
    sphinx.setdefault("html_context", {})["site_other_editions"] = others
    sphinx["templates_path"] = ["_templates"]
    sphinx.setdefault("html_theme_options", {})["article_header_end"] = [
        "edition-switch.html", "article-header-buttons.html"]
    if edition is not EN:
        _merge(config, ZH_CONFIG)
        # MathJax: the English site's copy (``_static/`` of the site's root), relative to
        # this edition's _static
        depth = edition.prefix.count("/")
        sphinx["mathjax_path"] = "../" * (depth + 1) + "_static/" + sphinx["mathjax_path"]
    return config


def mathjax_root() -> Path:
    """MathJax 3's ``es5`` folder, from the django-static-mathjax package."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise SiteError("MathJax is missing: pip install -r requirements.txt "
                        "(django-static-mathjax)")
    root = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax" / "es5"
    if not (root / "tex-chtml.js").is_file():
        raise SiteError(f"no tex-chtml.js in {root}")
    return root


def stage(course: Path, book: Path, cache: Path, edition: Edition = EN) -> list[Path]:
    """Write an edition's book sources into ``book``; return the files written or kept. Files
    of an earlier staging that this one does not produce are removed."""
    import yaml

    course, written = course.resolve(), set()
    config = book_config(course, edition, cache)
    if edition is not EN:
        config["sphinx"]["config"]["html_search_options"] = {
            "dict": str((book / SEARCH_WORDS).resolve())}
    _write(book / "_config.yml", "# generated from site/_config.yml by `autograder site`\n"
           + yaml.safe_dump(config, sort_keys=False, allow_unicode=True), written)
    _write(book / "_toc.yml", toc(course, edition), written)
    if edition is not EN:  # the search's dictionary (referred to by _config.yml, above)
        from course.terminology import search_words

        _write(book / SEARCH_WORDS, "".join(f"{w}\n" for w in search_words()), written)
    for folder in ("_static", "_templates"):
        for f in sorted((course / "site" / folder).rglob("*")):
            if f.is_file():
                _write(book / folder / f.relative_to(course / "site" / folder),
                       f.read_bytes(), written)
    if edition is EN:  # one copy of MathJax, in the English site's _static
        mj = mathjax_root()
        for part in MATHJAX_PARTS:
            src = mj / part
            for f in ([src] if src.is_file() else sorted(p for p in src.rglob("*")
                                                         if p.is_file())):
                _write(book / "_mathjax" / f.relative_to(mj), f.read_bytes(), written)
    _write(book / "index.md", course_map(course, edition), written)
    _write(book / "glossary.md", glossary_page(edition), written)
    if edition is EN:
        for doc in (DOCTOR_DOC, *INSTRUCTOR_DOCS):
            _write(book / doc, rewrite_links((course / doc).read_text(), doc, doc, course),
                   written)
        for img in sorted((course / "docs" / "img").glob("*")):
            _write(book / "docs" / "img" / img.name, img.read_bytes(), written)
    for nb in lessons(course, edition):
        repo_path = nb.relative_to(course).as_posix()
        site_path = _site_path(repo_path, course, edition)
        _write(book / site_path, stage_notebook(nb, repo_path, site_path, course, edition),
               written)
    for f in list(book.rglob("*")):
        if f.is_file() and f.resolve() not in written:
            f.unlink()
    return sorted(written)


# ---------------------------------------------------------------------------------------
# The build and its checks
# ---------------------------------------------------------------------------------------

def cache_records(cache: Path) -> dict[str, tuple[int, str]]:
    """jupyter-cache's record of each executed notebook: ``uri -> (pk, created)``."""
    if not cache.exists():
        return {}
    from jupyter_cache import get_cache

    records = {}
    for r in get_cache(str(cache)).list_cache_records():
        records[r.uri] = (r.pk, r.created.isoformat())
    return records


def cache_matches(cache: Path, notebooks: list[Path]) -> dict[str, str | None]:
    """For each notebook, the ``uri`` of the jupyter-cache record its code cells match
    (``None``: no execution of that code is cached). A Chinese lesson matches the English
    lesson's record: the execution both editions' pages show."""
    from jupyter_cache import get_cache

    jc = get_cache(str(cache))
    found: dict[str, str | None] = {}
    for nb in notebooks:
        record = jc.get_cached_project_nb(str(nb))
        found[str(nb)] = record.uri if record else None
    return found


def _sphinx(book: str, html_dir: str, doctrees: str, quiet: bool) -> str | None:
    """One edition's Sphinx build (Jupyter Book's); the error as text, ``None`` if it built.
    Runs in a process of its own for the second edition (Sphinx is single-threaded)."""
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type] (see __main__)
    from jupyter_book.sphinx import build_sphinx

    result = build_sphinx(book, html_dir, path_config=str(Path(book) / "_config.yml"),
                          doctreedir=doctrees, quiet=quiet, noconfig=True,
                          confoverrides={"latex_individualpages": False}, keep_going=False)
    return repr(result) if result else None


def build(course: Path | str = ".", out: Path | str = DEFAULT_OUT, quiet: bool = True,
          jobs: int | None = None) -> BuildResult:
    """Stage and build the site (every edition) into ``out/html``; raise :class:`SiteError`
    on failure."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    course, out = Path(course).resolve(), Path(out).resolve()
    cache, html_dir = out / "jupyter_cache", out / "html"
    eds = editions(course)
    work = {e.name: out / e.prefix for e in eds}  # OUT, OUT/zh-CN
    t0 = time.perf_counter()
    staged = {e.name: [p for p in stage(course, work[e.name] / "book", cache, e)
                       if p.suffix == ".ipynb"] for e in eds}
    records = [cache_records(cache)]
    executed: dict[str, list[str]] = {}
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: os.environ.get(k, v) for k, v in env.items()})
    parallel = jobs != 1 and (os.cpu_count() or 1) > 1
    try:
        # edition by edition (their setup cells differ: each speaks its own language)
        for e in eds:
            execute(staged[e.name], cache, parallel=parallel)
            records.append(cache_records(cache))
            executed[e.name] = sorted(
                Path(u).relative_to(out).as_posix() for u, r in records[-1].items()
                if records[-2].get(u) != r)
        builds = [(str(work[e.name] / "book"), str(work[e.name] / "html"),
                   str(work[e.name] / "doctrees"), quiet) for e in eds]
        if parallel and len(builds) > 1:  # one Sphinx per edition, side by side
            with ProcessPoolExecutor(len(builds) - 1,
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
                others = [pool.submit(_sphinx, *b) for b in builds[1:]]
                failures = [_sphinx(*builds[0])] + [f.result() for f in others]
        else:
            failures = [_sphinx(*b) for b in builds]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for e, failure in zip(eds, failures, strict=True):
        if failure:
            raise SiteError(f"the Sphinx build of the {e.name} edition failed ({failure}); run "
                            "`autograder site` without --quiet to see why")
    # The book's own static files (site.css, site-states.js), copied here too: Sphinx copies
    # them only when some page is out of date, so an edit of site/_static alone would not
    # reach the site
    for e in eds:
        static = work[e.name] / "book" / "_static"
        for f in sorted(p for p in static.rglob("*") if p.is_file()):
            _write(work[e.name] / "html" / "_static" / f.relative_to(static), f.read_bytes(),
                   set())
    # MathJax goes into the built site's _static by hand: in the book's _static, Jupyter
    # Book would add a <script> for each of its files to every page
    mathjax = out / "book" / "_mathjax"
    for f in sorted(p for p in mathjax.rglob("*") if p.is_file()):
        _write(html_dir / "_static" / "mathjax" / f.relative_to(mathjax), f.read_bytes(), set())
    for e in eds:
        if e is not EN:
            _sync(work[e.name] / "html", html_dir / e.prefix)
    after = records[-1]
    pages = sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html"))
    problems = external_resources(html_dir)
    if problems:
        raise SiteError("pages refer to external resources (the site must read offline):\n"
                        + "\n".join(problems[:20]))
    seconds = time.perf_counter() - t0
    record = {"seconds": round(seconds, 2),
              "executed": [nb for e in eds for nb in executed[e.name]],
              "editions": {e.name: {"executed": executed[e.name],
                                    "notebooks": [p.relative_to(out).as_posix()
                                                  for p in staged[e.name]],
                                    "pages": [p for p in pages if
                                              (p.startswith(e.prefix) if e.prefix else
                                               not any(p.startswith(o.prefix) for o in eds
                                                       if o.prefix))]}
                           for e in eds},
              "pages": pages,
              "cache": {Path(u).relative_to(out).as_posix(): list(r) for u, r in after.items()}}
    (out / "build-record.json").write_text(json.dumps(record, indent=1, ensure_ascii=False)
                                           + "\n")
    return BuildResult(html_dir, seconds, record["executed"], pages, record["editions"])


def _sync(src: Path, dst: Path) -> None:
    """Make ``dst`` a copy of ``src``, rewriting only changed files."""
    written: set = set()
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        _write(dst / f.relative_to(src), f.read_bytes(), written)
    for f in list(dst.rglob("*")):
        if f.is_file() and f.resolve() not in written:
            f.unlink()


def execute(notebooks: list[Path], cache: Path, parallel: bool = True) -> list[str]:
    """Execute the notebooks jupyter-cache has no record of for their current code, one
    process per core (MyST-NB alone executes them one after the other, when Sphinx reads
    them), and cache them: Sphinx then finds every notebook executed. Returns their paths."""
    import logging

    from jupyter_cache import get_cache
    from jupyter_cache.executors import load_executor

    jc = get_cache(str(cache))
    for nb in notebooks:
        jc.add_nb_to_project(str(nb))
    logger = logging.getLogger("autograder.site")
    kind = "local-parallel" if parallel and (os.cpu_count() or 1) > 1 else "local-serial"
    result = load_executor(kind, jc, logger=logger).run_and_cache(
        filter_uris=[str(nb) for nb in notebooks], timeout=300, allow_errors=False)
    succeeded, excepted, errored = (list(result.succeeded), list(result.excepted),
                                    list(result.errored))
    if kind == "local-parallel" and errored:
        # "errored" is a run that failed outside the lesson's cells (a failing cell is
        # "excepted"): mostly a kernel that did not start. Kernels started side by side pick
        # their TCP ports independently (jupyter_client binds port 0, closes it, and the
        # kernel binds it again later), so two of them, or any other process, can take the
        # same port in between. Run those lessons again, one at a time.
        logger.warning("autograder site: %s did not run; running again, alone",
                       ", ".join(Path(u).name for u in errored))
        again = load_executor("local-serial", jc, logger=logger).run_and_cache(
            filter_uris=errored, timeout=300, allow_errors=False)
        succeeded += list(again.succeeded)
        excepted += list(again.excepted)
        errored = list(again.errored)
    failed = excepted + errored
    if failed:
        details = []
        for uri in failed:
            record = jc.get_project_record(uri)
            why = record.traceback or "(no cell failed: the kernel or jupyter-cache did; its " \
                "error is logged above)"
            details.append(f"{uri}:\n{why[-3000:]}")
        raise SiteError("a lesson failed to run:\n" + "\n".join(details))
    return succeeded


# Attributes that make a browser fetch something (a plain <a href> is a link to follow,
# not a resource the page loads).
_RESOURCE_ATTRS = {
    "script": ("src",), "img": ("src", "srcset"), "iframe": ("src",), "embed": ("src",),
    "source": ("src", "srcset"), "video": ("src", "poster"), "audio": ("src",),
    "track": ("src",), "object": ("data",), "input": ("src",), "image": ("href",),
    "use": ("href",), "link": ("href",),
}
_EXTERNAL = re.compile(r"^\s*(https?:)?//", re.I)
_CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:https?:)?//[^'")\s]+)""", re.I)


class _Resources(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.links: list[str] = []
        self.ids: set[str] = set()
        self._style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        for name in _RESOURCE_ATTRS.get(tag, ()):
            value = a.get(name) or ""
            if tag == "link" and "stylesheet" not in (a.get("rel") or "") and \
                    not any(r in (a.get("rel") or "") for r in ("icon", "preload", "modulepreload",
                                                                "manifest", "prefetch")):
                continue  # rel="canonical" and the like are not loaded
            for part in value.split(","):
                if _EXTERNAL.match(part):
                    self.found.append(f"<{tag} {name}={part.strip()}>")
        for m in _CSS_URL.finditer(a.get("style") or ""):
            self.found.append(f"style url {m.group(1)}")
        self._style = tag == "style"

    def handle_endtag(self, tag):
        if tag == "style":
            self._style = False

    def handle_data(self, data):
        if self._style:
            self.found += [f"<style> url {m.group(1)}" for m in _CSS_URL.finditer(data)]


def parse_page(path: Path) -> _Resources:
    p = _Resources()
    p.feed(path.read_text(errors="replace"))
    return p


def external_resources(html_dir: Path) -> list[str]:
    """Every reference of the site to an external ``http(s)://`` (or ``//host``) resource:
    what a page's tags load, and ``url()`` / ``@import`` in its style sheets."""
    problems = []
    for page in sorted(html_dir.rglob("*.html")):
        for what in parse_page(page).found:
            problems.append(f"{page.relative_to(html_dir)}: {what}")
    for css in sorted(html_dir.rglob("*.css")):
        for m in _CSS_URL.finditer(css.read_text(errors="replace")):
            problems.append(f"{css.relative_to(html_dir)}: url {m.group(1)}")
    return problems


# ---------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------

def _cmd_site(args: argparse.Namespace) -> int:
    try:
        result = build(args.course, args.out, quiet=args.quiet, jobs=args.jobs)
    except SiteError as exc:
        print(f"autograder site: {exc}", file=sys.stderr)
        return 1
    print(f"built {len(result.pages)} pages in {result.seconds:.1f} s")
    for name, ed in result.editions.items():
        ran = ", ".join(Path(p).name for p in ed["executed"])
        if not ran:
            ran = "none (every notebook's code is unchanged)"
        print(f"  {name}: {len(ed['pages'])} pages; executed: {ran}")
    print(f"open {result.html / 'index.html'} (or host the folder {result.html}; "
          f"the Chinese edition: {result.html / ZH.prefix / 'index.html'})"
          if ZH.name in result.editions else
          f"open {result.html / 'index.html'} (or host the folder {result.html})")
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("site", help="build the course as an offline static site (docs/site.md)")
    p.add_argument("--out", default=DEFAULT_OUT,
                   help=f"output folder (default: {DEFAULT_OUT}; the site is OUT/html)")
    p.add_argument("--course", default=".", help="course root (default: current folder)")
    p.add_argument("--jobs", type=int, default=None,
                   help="1: execute the notebooks one at a time (default: one per core)")
    p.add_argument("--quiet", action="store_true", help="print only the summary")
    p.set_defaults(func=_cmd_site)

