"""``autograder site``: the course as a static site that reads offline (docs/site.md).

A Jupyter Book 1 (Sphinx + MyST-NB) built from what learners get and what the course
documents:

* the front page: the README's course map, its links pointing at the lessons' pages;
* the eight lessons from ``release/`` (prompts and answer templates, never solutions or
  hidden tests), executed at build time through jupyter-cache, so a notebook whose code
  did not change is not executed again;
* the analogy glossary, generated from ``course.themes.GLOSSARY``;
* the doctor's documentation and the instructors' guide (``docs/``).

The build has three steps. :func:`stage` writes the book's sources into ``OUT/book``
(configuration and static files from the repository's ``site/`` folder, MathJax from the
``django-static-mathjax`` package, copied into the built site after Sphinx), rewriting only files whose content changed, so Sphinx
re-reads only what changed. :func:`build` then runs Jupyter Book's Sphinx build into
``OUT/html`` and fails when a page refers to an external ``http(s)://`` resource
(:func:`external_resources`), and writes ``OUT/build-record.json``: which notebooks were
executed by this build, read from jupyter-cache's records.

Layout of ``OUT`` (default ``build/site``): ``html/`` the site (open ``html/index.html``,
host that folder), ``book/`` the staged sources, ``jupyter_cache/`` the executed notebooks,
``doctrees/`` and ``jupyter_execute/`` Sphinx's and MyST-NB's incremental state.
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


class SiteError(RuntimeError):
    """The site could not be built, or a built page breaks a rule of docs/site.md."""


@dataclass
class BuildResult:
    html: Path
    seconds: float
    executed: list[str] = field(default_factory=list)   # notebooks this build executed
    pages: list[str] = field(default_factory=list)      # every .html page of the site


# ---------------------------------------------------------------------------------------
# Staging: the book's sources, written only where they changed
# ---------------------------------------------------------------------------------------

def lessons(course: Path) -> list[Path]:
    """The release notebooks, in course order: ``release/NN_topic/NN_topic.ipynb``."""
    return sorted(p for p in (course / "release").glob("*/*.ipynb")
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


def _site_path(repo_path: str, course: Path) -> str | None:
    """Where a repository file is in the book (``None``: the site does not carry it)."""
    lesson = re.fullmatch(r"release/([^/]+)/\1\.ipynb", repo_path)
    if lesson:
        return f"lessons/{lesson.group(1)}.ipynb"
    if repo_path in (DOCTOR_DOC, *INSTRUCTOR_DOCS):
        return repo_path
    if repo_path == "README.md":
        return "index.md"
    if repo_path.startswith("docs/img/") and (course / repo_path).is_file():
        return repo_path
    return None


_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")


def rewrite_links(text: str, repo_path: str, site_path: str, course: Path) -> str:
    """Markdown links of the file ``repo_path`` (shown at ``site_path`` in the book): a link
    to a file the site carries points at its page; a link to anything else of the repository
    (source code, tests) becomes its text, so the site has no broken link."""
    here = posixpath.dirname(repo_path)
    there = posixpath.dirname(site_path)

    def fix(m: re.Match) -> str:
        bang, label, target = m.groups()
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = posixpath.normpath(posixpath.join(here, path))
        mapped = _site_path(resolved, course)
        if mapped is None:
            return label if not bang else f"*{label}*"
        new = posixpath.relpath(mapped, there or ".") + (f"#{anchor}" if anchor else "")
        return f"{bang}[{label}]({new})"

    return _LINK.sub(fix, text)


def stage_notebook(source: Path, repo_path: str, site_path: str, course: Path) -> str:
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
    """
    import nbformat

    nb = nbformat.read(str(source), as_version=4)
    answers: set[str] = set()  # names only an answer (or a cell run with one) defines
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = rewrite_links(cell.source, repo_path, site_path, course)
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


def course_map(course: Path) -> str:
    """The front page: the README's title and opening, then its course map, with links to
    the lessons' pages."""
    readme = (course / "README.md").read_text()
    title = re.search(r"^# (.+)$", readme, re.M).group(1)
    intro = readme.split("\n\n")[1].strip()
    m = re.search(r"^## Course map\n(.*?)(?=^## )", readme, re.M | re.S)
    if m is None:
        raise SiteError("README.md has no '## Course map' section")
    body = m.group(1).strip()
    text = (f"# {title}\n\n{intro}\n\n"
            "This is the course as a site: every lesson as a learner gets it, executed with "
            "torch when the site was built, so every figure and number on these pages is "
            "what torch computed. The explorers show a few precomputed states to step "
            "through; in JupyterLab every control is live. Exercises are shown with their "
            "answer templates: answer them in the notebooks (the README's quick start), "
            "where the checks run. The [glossary](glossary.md) lists the words of the "
            "analogies.\n\n"
            f"## Course map\n\n{body}\n")
    return rewrite_links(text, "README.md", "index.md", course)


def glossary_page() -> str:
    """The analogy glossary: every key of ``course.themes.GLOSSARY`` in all three themes."""
    from course import themes

    groups = [
        ("Kinds of tensor and node", "What a drawn node is.", themes.KINDS),
        ("Marks on a drawing", "What the explorers and the stepper add to a node or an edge.",
         themes.MARKS),
    ]
    listed = set(themes.KINDS) | set(themes.MARKS) | set(themes.CONCEPTS)
    rest = tuple(k for k in themes.GLOSSARY["technical"] if k not in listed)
    if rest:
        groups.append(("The graph's ends", "The output and the walk back from it.", rest))
    groups.append(("The words of the lessons' prose", "Everything else autograd does, "
                   "in each analogy.", themes.CONCEPTS))
    parts = ["# Glossary of the analogies\n",
             "Every lesson tells autograd through two analogies, the **parcel network** "
             "(logistics) and the **kitchen**; the explorers and drawings switch between "
             "them and the plain technical words with their theme menu. This table is the "
             "one the course's code uses (`course.themes.GLOSSARY`), generated from it when "
             "the site was built.\n"]
    for heading, blurb, keys in groups:
        rows = "".join(
            "<tr>" + f"<td><code>{html.escape(k)}</code></td>" + "".join(
                f"<td>{html.escape(themes.GLOSSARY[t][k])}</td>" for t in themes.THEMES)
            + "</tr>\n" for k in keys)
        head = "".join(f"<th>{html.escape(t)}</th>" for t in themes.THEMES)
        parts.append(f"## {heading}\n\n{blurb}\n\n"
                     f'<table class="table glossary">\n<thead><tr><th>key</th>{head}</tr>'
                     f"</thead>\n<tbody>\n{rows}</tbody>\n</table>\n")
    return "\n".join(parts)


def toc(course: Path) -> str:
    chapters = "\n".join(f"      - file: lessons/{p.stem}" for p in lessons(course))
    guide = "\n".join(f"      - file: {d[:-3]}" for d in INSTRUCTOR_DOCS)
    return ("# generated by `autograder site` (autograder/site.py)\n"
            "format: jb-book\nroot: index\nparts:\n"
            f"  - caption: Lessons\n    chapters:\n{chapters}\n"
            f"  - caption: Reference\n    chapters:\n      - file: glossary\n"
            f"      - file: {DOCTOR_DOC[:-3]}\n"
            f"  - caption: Instructors' guide\n    chapters:\n{guide}\n")


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


def stage(course: Path, book: Path, cache: Path) -> list[Path]:
    """Write the book's sources into ``book``; return the files written or kept. Files of an
    earlier staging that this one does not produce are removed."""
    import yaml

    course, written = course.resolve(), set()
    config = yaml.safe_load((course / "site" / "_config.yml").read_text())
    config["execute"]["cache"] = str(cache.resolve())
    _write(book / "_config.yml", "# generated from site/_config.yml by `autograder site`\n"
           + yaml.safe_dump(config, sort_keys=False, allow_unicode=True), written)
    _write(book / "_toc.yml", toc(course), written)
    for f in sorted((course / "site" / "_static").rglob("*")):
        if f.is_file():
            _write(book / "_static" / f.relative_to(course / "site" / "_static"),
                   f.read_bytes(), written)
    mj = mathjax_root()
    for part in MATHJAX_PARTS:
        src = mj / part
        for f in ([src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())):
            _write(book / "_mathjax" / f.relative_to(mj), f.read_bytes(), written)
    _write(book / "index.md", course_map(course), written)
    _write(book / "glossary.md", glossary_page(), written)
    for doc in (DOCTOR_DOC, *INSTRUCTOR_DOCS):
        _write(book / doc, rewrite_links((course / doc).read_text(), doc, doc, course), written)
    for img in sorted((course / "docs" / "img").glob("*")):
        _write(book / "docs" / "img" / img.name, img.read_bytes(), written)
    for nb in lessons(course):
        repo_path = nb.relative_to(course).as_posix()
        site_path = _site_path(repo_path, course)
        _write(book / site_path, stage_notebook(nb, repo_path, site_path, course), written)
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


def build(course: Path | str = ".", out: Path | str = DEFAULT_OUT, quiet: bool = True,
          jobs: int | None = None) -> BuildResult:
    """Stage and build the site into ``out/html``; raise :class:`SiteError` on failure."""
    from jupyter_book.sphinx import build_sphinx

    course, out = Path(course).resolve(), Path(out).resolve()
    book, cache, html_dir = out / "book", out / "jupyter_cache", out / "html"
    t0 = time.perf_counter()
    staged = stage(course, book, cache)
    before = cache_records(cache)
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update({k: os.environ.get(k, v) for k, v in env.items()})
    try:
        execute([p for p in staged if p.suffix == ".ipynb"], cache, parallel=jobs != 1)
        result = build_sphinx(str(book), str(html_dir), path_config=str(book / "_config.yml"),
                              doctreedir=str(out / "doctrees"), quiet=quiet,
                              noconfig=True, confoverrides={"latex_individualpages": False},
                              keep_going=False)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if result:
        raise SiteError(f"the Sphinx build failed ({result!r}); run `autograder site` "
                        "without --quiet to see why")
    # MathJax goes into the built site's _static by hand: in the book's _static, Jupyter
    # Book would add a <script> for each of its files to every page
    mathjax = book / "_mathjax"
    for f in sorted(p for p in mathjax.rglob("*") if p.is_file()):
        _write(html_dir / "_static" / "mathjax" / f.relative_to(mathjax), f.read_bytes(), set())
    after = cache_records(cache)
    executed = sorted(Path(uri).name for uri, rec in after.items() if before.get(uri) != rec)
    pages = sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html"))
    problems = external_resources(html_dir)
    if problems:
        raise SiteError("pages refer to external resources (the site must read offline):\n"
                        + "\n".join(problems[:20]))
    seconds = time.perf_counter() - t0
    record = {"seconds": round(seconds, 2), "executed": executed, "pages": pages,
              "cache": {Path(u).name: list(r) for u, r in after.items()}}
    (out / "build-record.json").write_text(json.dumps(record, indent=1) + "\n")
    return BuildResult(html_dir, seconds, executed, pages)


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
    failed = list(result.excepted) + list(result.errored)
    if failed:
        details = []
        for uri in failed:
            record = jc.get_project_record(uri)
            details.append(f"{uri}:\n{(record.traceback or '')[-3000:]}")
        raise SiteError("a lesson failed to run:\n" + "\n".join(details))
    return list(result.succeeded)


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
    executed = ", ".join(result.executed) or "none (every notebook's code is unchanged)"
    print(f"built {len(result.pages)} pages in {result.seconds:.1f} s; executed: {executed}")
    print(f"open {result.html / 'index.html'} (or host the folder {result.html})")
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

