"""The course site (``autograder site``, docs/site.md): built once per session, twice.

The site carries both editions: English at the root, Simplified Chinese in ``zh-CN/``. The
first build executes every lesson of both editions (jupyter-cache; the Chinese lessons set
their language in their setup cell, so what their code prints is Chinese too); the second, with nothing changed, executes none, which is read from jupyter-cache's
records and the build's own record, not from timing. Then every page of both editions is
checked as files (links, resources, what it must and must not contain) and opened in headless
Chromium with every non-file request aborted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest

from autograder import site

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"

pytestmark = pytest.mark.slow


def _run_site(out: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "autograder", "site", "--out", str(out),
                           "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads((out / "build-record.json").read_text())


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """``(html_dir, first_record, second_record, cache_before, cache_after, out)``."""
    out = tmp_path_factory.mktemp("site")
    first = _run_site(out)
    cache_before = site.cache_records(out / "jupyter_cache")
    second = _run_site(out)
    cache_after = site.cache_records(out / "jupyter_cache")
    return out / "html", first, second, cache_before, cache_after, out


@pytest.fixture(scope="session")
def texts(built):
    """Every page's text, read once."""
    return {p: page_text(p) for p in _pages(built[0])}


def _pages(html_dir: Path) -> list[Path]:
    return sorted(p for p in html_dir.rglob("*.html") if "_static" not in p.parts)


class _Text(HTMLParser):
    """The text of a page, scripts and styles left out."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style") and self._skip > 0

    def handle_data(self, data):
        if not self._skip:
            self.parts.append(data)


def page_text(path: Path) -> str:
    p = _Text()
    p.feed(path.read_text())
    return re.sub(r"\s+", " ", "".join(p.parts))


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


LESSON_NAMES = [p.stem for p in site.lessons(ROOT)]
ZH_NAMES = [p.stem for p in site.lessons(ROOT, site.ZH)]
# (edition folder of the site, lesson): every lesson page of both editions
EDITION_LESSONS = [("", n) for n in LESSON_NAMES] + [("zh-CN", n) for n in ZH_NAMES]


def test_the_chinese_edition_has_every_lesson():
    assert ZH_NAMES == LESSON_NAMES
    assert site.editions(ROOT) == [site.EN, site.ZH]


# -- the build ------------------------------------------------------------------------------

def test_first_build_executes_every_lesson_the_second_none(built):
    html_dir, first, second, cache_before, cache_after, out = built
    english = sorted(f"book/lessons/{n}.ipynb" for n in LESSON_NAMES)
    chinese = sorted(f"zh-CN/book/lessons/{n}.ipynb" for n in ZH_NAMES)
    assert first["editions"]["en"]["executed"] == english
    assert first["editions"]["zh-CN"]["executed"] == chinese
    assert sorted(first["executed"]) == sorted(english + chinese)
    assert second["executed"] == []
    assert second["editions"]["en"]["executed"] == second["editions"]["zh-CN"]["executed"] == []
    # jupyter-cache's own records: the same notebooks, same primary keys, same creation times
    assert cache_after == cache_before
    assert len(cache_after) == len(LESSON_NAMES) + len(ZH_NAMES)
    assert first["pages"] == second["pages"]


def test_the_chinese_lessons_run_in_chinese(built):
    """The Chinese lessons set their language in the setup cell, so the site executes them too
    and their pages show what the code prints in Chinese: the tensor tables, the explorers'
    states and the figures, beside the Chinese prose."""
    html_dir, first, second, cache_before, cache_after, out = built
    chinese = [out / "zh-CN" / "book" / "lessons" / f"{n}.ipynb" for n in ZH_NAMES]
    matches = site.cache_matches(out / "jupyter_cache", chinese)
    assert matches == {str(nb): str(nb) for nb in chinese}   # each its own execution
    for name in ZH_NAMES:
        zh = (html_dir / "zh-CN" / "lessons" / f"{name}.html").read_text()
        assert zh.count('class="site-states ') == (
            html_dir / "lessons" / f"{name}.html").read_text().count('class="site-states ')
        outputs = " ".join(re.findall(r'<div class="cell_output.*?</div>\s*</div>', zh, re.S))
        assert re.search(r"[\u4e00-\u9fff]", re.sub(r"<[^>]+>", " ", outputs)), name


def test_pages_of_the_site(built):
    html_dir = built[0]
    names = {p.relative_to(html_dir).as_posix() for p in _pages(html_dir)}
    expected = {"index.html", "glossary.html", "docs/doctor.html",
                *(f"lessons/{n}.html" for n in LESSON_NAMES),
                *(f"{d[:-3]}.html" for d in site.INSTRUCTOR_DOCS),
                "zh-CN/index.html", "zh-CN/glossary.html",
                *(f"zh-CN/lessons/{n}.html" for n in ZH_NAMES)}
    assert expected <= names
    # the docs exist only in English: the Chinese edition has no copy of them
    assert not (html_dir / "zh-CN" / "docs").exists()
    assert '<html lang="zh-CN"' in (html_dir / "zh-CN" / "index.html").read_text()
    assert '<html lang="en"' in (html_dir / "index.html").read_text()
    # site/_static as it is now, in both editions (Sphinx alone copies it only when a page is
    # out of date)
    for f in (ROOT / "site" / "_static").iterdir():
        for where in (html_dir, html_dir / "zh-CN"):
            assert (where / "_static" / f.name).read_bytes() == f.read_bytes(), (where, f)


def test_no_external_resource(built):
    html_dir = built[0]
    assert site.external_resources(html_dir) == []
    # and nothing else names a CDN the theme or MyST-NB would load from
    for page in _pages(html_dir):
        text = page.read_text()
        for host in ("cdn.jsdelivr", "cdnjs", "unpkg.com", "fonts.googleapis", "mathjax.org"):
            assert host not in text, (page, host)
        assert not re.search(r"""(src|href)=["']?(https?:)?//[^"'>]+\.(js|css)""", text), page


def test_mathjax_served_from_the_site(built):
    html_dir = built[0]
    page = (html_dir / "lessons" / "06_inplace.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in page
    assert (html_dir / "_static" / "mathjax" / "tex-chtml.js").is_file()
    # the Chinese edition uses the same copy
    zh = html_dir / "zh-CN" / "lessons" / "06_inplace.html"
    src = re.search(r'src="([^"]*mathjax/tex-chtml\.js)"', zh.read_text()).group(1)
    assert (zh.parent / src).resolve() == (html_dir / "_static" / "mathjax" /
                                           "tex-chtml.js").resolve()


def test_internal_links_resolve(built):
    html_dir = built[0]
    ids: dict[Path, set] = {}
    broken = []
    for page in _pages(html_dir):
        parsed = site.parse_page(page)
        ids[page.resolve()] = parsed.ids
    for page in _pages(html_dir):
        for href in site.parse_page(page).links:
            parts = urlsplit(href)
            if parts.scheme or href.startswith("//"):
                continue  # an external hyperlink (mailto:, https:) is not a page of the site
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else \
                page.resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(html_dir)} -> {href}")
                continue
            if parts.fragment and target.suffix == ".html":
                known = ids.get(target)
                if known is None:
                    known = ids[target] = site.parse_page(target).ids
                if unquote(parts.fragment) not in known:
                    broken.append(f"{page.relative_to(html_dir)} -> {href} (no such anchor)")
    assert broken == []


def test_front_page_is_the_course_map(built):
    page = (built[0] / "index.html")
    links = site.parse_page(page).links
    for name in LESSON_NAMES:
        assert f"lessons/{name}.html" in links, name
    assert "Course map" in page_text(page)
    assert _body_link(page, "glossary.html", "glossary")  # in the text, not only the sidebar


def _body_link(page: Path, href: str, text: str) -> bool:
    """Whether the page's text (the sidebar names its pages differently) links ``text``."""
    return bool(re.search(rf'href="{re.escape(href)}"[^>]*>(?:<[^>]+>)*{re.escape(text)}<',
                          page.read_text()))


def test_chinese_front_page_is_the_chinese_course_map(built):
    page = built[0] / "zh-CN" / "index.html"
    links = site.parse_page(page).links
    text = page_text(page)
    for name in ZH_NAMES:
        assert f"lessons/{name}.html" in links, name
    assert "课程地图" in text
    readme = (ROOT / "README.zh-CN.md").read_text()
    assert re.search(r"^# (.+)$", readme, re.M).group(1) in text
    # the doctor's and the instructors' docs: the English pages, said to be English
    for doc in (site.DOCTOR_DOC, *site.INSTRUCTOR_DOCS):
        assert f"../{doc[:-3]}.html" in links, doc
    assert text.count("英文文档") >= 2
    assert _body_link(page, "glossary.html", "术语表")
    # README.zh-CN.md breaks no line inside Chinese text (test_translation.py): the page's
    # opening reads as the README's, with no space between two characters
    opening = readme.split("\n## ")[0].split("\n\n")[2]  # after the title and language line
    assert re.sub(r"\[([^]]+)\]\([^)]+\)|[`*]", r"\1", opening)[:40] in text


def _edition_link(page: Path, label: str) -> list[Path]:
    """Where the page's links named ``label`` (English, 简体中文) lead, as files."""
    found = re.findall(r'<a [^>]*href="([^"]+)"[^>]*>\s*' + re.escape(label) + r"\s*</a>",
                       page.read_text())
    return [(page.parent / unquote(urlsplit(h).path)).resolve() for h in found]


def test_every_page_links_to_the_other_edition(built):
    html_dir = built[0]
    for page in _pages(html_dir):
        rel = page.relative_to(html_dir)
        if rel.parts[0] == "zh-CN":
            other, label = html_dir / Path(*rel.parts[1:]), "English"
        else:
            other, label = html_dir / "zh-CN" / rel, "简体中文"
        if not other.exists():  # the English-only docs: the Chinese front page
            other = html_dir / ("zh-CN" if label == "简体中文" else "") / "index.html"
        targets = _edition_link(page, label)
        assert targets, (rel, label)
        assert set(targets) == {other.resolve()}, (rel, targets, other)
    # the front pages say it in their text too (English · 简体中文)
    assert "English · 简体中文" in page_text(html_dir / "index.html")
    assert "English · 简体中文" in page_text(html_dir / "zh-CN" / "index.html")


def test_glossary_lists_every_entry(built):
    from course import themes

    text = page_text(built[0] / "glossary.html")
    keys = set()
    for theme in themes.THEMES:
        for key, word in themes.GLOSSARY[theme].items():
            assert _squash(word) in text, (theme, key, word)
            keys.add(key)
    assert set(themes.CONCEPTS) <= keys
    for key in keys:
        assert key in text


def test_chinese_glossary_lists_every_entry(built):
    from course import themes

    text = page_text(built[0] / "zh-CN" / "glossary.html")
    assert set(themes.GLOSSARY_ZH) == set(themes.THEMES)
    for theme in themes.THEMES:
        assert set(themes.GLOSSARY_ZH[theme]) == set(themes.GLOSSARY[theme])
        for key, word in themes.GLOSSARY_ZH[theme].items():
            assert _squash(word) in text, (theme, key, word)
            assert key in text, key
    for heading in ("技术术语", "快递网络", "厨房"):
        assert heading in text


def _site_inputs(book: Path) -> str:
    """All the text the site is built from (the staged notebooks and pages), squashed."""
    texts = []
    for f in sorted(book.rglob("*")):
        if f.suffix == ".ipynb":
            nb = nbformat.read(str(f), as_version=4)
            texts += [c.source for c in nb.cells]
        elif f.suffix == ".md":
            texts.append(f.read_text())
    return "\n".join(_squash(t) for t in texts)


def _solution_lines(name: str, inputs: str, root: str = "") -> tuple[list[str], list[str]]:
    """Whole solution and hidden-test blocks of source/ (``zh-CN/source/``), and their lines
    that appear nowhere in what the site is built from (``h.retain_grad()`` is also lesson
    text, so such a line proves nothing; a line the site's inputs lack must not reach a page
    either)."""
    src = nbformat.read(str(ROOT / root / "source" / name / f"{name}.ipynb"), as_version=4)
    solutions, hidden = [], []
    for cell in src.cells:
        for begin, end, into in (("### BEGIN SOLUTION", "### END SOLUTION", solutions),
                                 ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS", hidden)):
            for block in re.findall(re.escape(begin) + r"(.*?)" + re.escape(end), cell.source,
                                    re.S):
                whole = _squash(block)
                if len(whole) >= 20 and whole not in inputs:
                    into.append(whole)
                into += [_squash(ln) for ln in block.splitlines()
                         if len(_squash(ln)) >= 8 and _squash(ln) not in inputs
                         and not _squash(ln).startswith("#")]
    return solutions, hidden


@pytest.fixture(scope="session")
def site_inputs(built):
    out = built[5]
    return _site_inputs(out / "book") + "\n" + _site_inputs(out / "zh-CN" / "book")


@pytest.mark.parametrize("root,name", EDITION_LESSONS)
def test_no_solution_or_hidden_test_in_the_site(texts, site_inputs, root, name):
    """source/'s and zh-CN/source/'s solutions and hidden tests, in no page of either
    edition."""
    solutions, hidden = _solution_lines(name, site_inputs, root)
    assert solutions, f"no solution found in {root or '.'}/source/: the test checks nothing"
    for line in solutions + hidden:
        for page, text in texts.items():
            assert line not in text, (name, line, page)


@pytest.mark.parametrize("root,name", EDITION_LESSONS)
def test_lesson_page_has_no_traceback_and_shows_its_exercises(built, root, name):
    page = built[0] / root / "lessons" / f"{name}.html"
    raw = page.read_text()
    text = page_text(page)
    assert "Traceback (most recent call last)" not in text  # (anomaly mode's report is content)
    assert "output traceback" not in raw and "output error" not in raw
    assert "tag_site-exercise" in raw  # the exercises are there, marked, not run
    assert "raise NotImplementedError()" in text  # ... with their answer templates
    assert "course.static_states" not in text  # the hidden set-up cell stays hidden


class _Outputs(HTMLParser):
    """What a lesson page's code cells printed and drew (``cell_output``), block by block:
    table cells apart, pictures by their alt text; code (``<code>``, an explorer's code
    panel) and the outputs of a cell that prints Python source are left out."""

    BLOCKS = {"p", "div", "li", "tr", "pre", "br", "table", "td", "th"}
    VOID = {"br", "img", "meta", "link", "input", "hr", "source", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.outputs: list[str] = []
        self._depth = self._code = 0
        self._input: list[str] = []
        self._in_input = 0
        self._parts: list[str] = []
        self._source_cell = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class") or ""
        if "cell_input" in cls:
            self._in_input, self._input = 1, []
        elif self._in_input and tag not in self.VOID:
            self._in_input += 1
        if not self._depth:
            if "cell_output" in cls:
                self._depth, self._parts = 1, []
                self._source_cell = "getsource" in "".join(self._input)
            return
        if tag == "img" and a.get("alt"):
            self._parts.append(f"\n{a['alt']}\n")
        if tag in self.BLOCKS:
            self._parts.append(" | " if tag in ("td", "th") else "\n")
        if tag not in self.VOID:
            self._depth += 1
            self._code += self._code > 0 or "xp-code" in cls or tag == "code"

    def handle_endtag(self, tag):
        if self._in_input and tag not in self.VOID:
            self._in_input -= 1
        if not self._depth or tag in self.VOID:
            return
        self._depth -= 1
        self._code -= self._code > 0
        if not self._depth and not self._source_cell:
            self.outputs.append("".join(self._parts))

    def handle_data(self, data):
        if self._in_input:
            self._input.append(data)
        if self._depth and not self._code:
            self._parts.append(data)


@pytest.mark.parametrize("name", ZH_NAMES)
def test_what_the_chinese_lessons_print_and_draw_reads_chinese(built, name):
    """Everything the Chinese lesson's code shows (printed labels, tables, explorers' lines,
    the doctor's findings, pictures' alt text) is Chinese, outside code, quoted values and
    torch's own error and warning messages."""
    from helpers import english_sentences

    parser = _Outputs()
    parser.feed((built[0] / "zh-CN" / "lessons" / f"{name}.html").read_text())
    assert parser.outputs, name
    left = [(line.strip()[:120], found) for output in parser.outputs
            for line in output.split("\n") if (found := english_sentences(line))]
    assert not left, left


def _explorer_cells(name: str) -> int:
    nb = nbformat.read(str(ROOT / "release" / name / f"{name}.ipynb"), as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code"
               and re.search(r"(Explorer|BackwardStepper)\(", c.source)
               and "class " not in c.source)


@pytest.mark.parametrize("root,name", EDITION_LESSONS)
def test_every_explorer_shows_its_states(built, root, name):
    raw = (built[0] / root / "lessons" / f"{name}.html").read_text()
    count = raw.count('class="site-states ')
    assert count >= 1 and count >= _explorer_cells(name), (name, count)
    assert "jupyter-widgets" not in raw and "widget-state" not in raw


# -- in a browser, offline ----------------------------------------------------------------------

@pytest.fixture
def offline_page(playwright_chromium, tmp_path):
    """A Chromium page where every request that is not file:// is aborted (and counted)."""
    from browser.conftest import CHROMIUM_FLAGS

    p, chromium = playwright_chromium
    context = p.chromium.launch_persistent_context(
        str(tmp_path / "profile"), executable_path=chromium, headless=True,
        args=CHROMIUM_FLAGS, viewport={"width": 1280, "height": 900})
    aborted: list[str] = []

    def route(r):
        if r.request.url.startswith(("file:", "data:")):
            r.continue_()
        else:
            aborted.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.pages[0] if context.pages else context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"failed: {r.url}"))
    try:
        yield page, aborted, errors
    finally:
        context.close()


@pytest.mark.browser
def test_every_page_opens_offline(built, offline_page):
    page, aborted, errors = offline_page
    html_dir = built[0]
    for path in _pages(html_dir):
        if path.name in ("search.html", "genindex.html"):
            continue  # Sphinx's own pages, checked as files above
        errors.clear()
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        images = page.evaluate(
            "() => Array.from(document.images).map(i => [i.currentSrc.slice(0, 80),"
            " i.complete && i.naturalWidth > 0])")
        assert all(ok for _, ok in images), (path, [s for s, ok in images if not ok])
        if "lessons" in path.parts:
            assert len(images) >= 2, path  # the explorers' pictures and the lesson's figures
            if "$" in path.read_text() or "\\(" in path.read_text():
                page.wait_for_function(
                    "() => document.querySelectorAll('mjx-container').length > 0"
                    " || !document.querySelector('.math')", timeout=20_000)
        assert errors == [], (path, errors)
    assert aborted == []


@pytest.mark.browser
def test_explorer_states_step_without_a_kernel(built, offline_page):
    page, aborted, errors = offline_page
    ARTIFACTS.mkdir(exist_ok=True)
    lesson = built[0] / "lessons" / "01_leaves.html"
    page.goto(lesson.as_uri())
    stepper = page.locator('.site-states[data-explorer="BackwardStepper"]').first
    stepper.scroll_into_view_if_needed()
    visible = stepper.locator(".site-state:visible")
    assert visible.count() == 1
    first_label = stepper.locator(".site-label").inner_text()
    stepper.locator(".site-next").click()
    stepper.locator(".site-next").click()
    assert stepper.get_attribute("data-current") == "2"
    assert stepper.locator(".site-state:visible").count() == 1
    assert stepper.locator(".site-state:visible").get_attribute("data-k") == "2"
    assert stepper.locator(".site-label").inner_text() != first_label
    assert "step 1/" in stepper.locator(".site-label").inner_text()
    stepper.screenshot(path=str(ARTIFACTS / "site-01_leaves-stepper.png"))
    page.screenshot(path=str(ARTIFACTS / "site-01_leaves-page.png"))

    explorer = page.locator('.site-states[data-explorer="GraphExplorer"]').first
    explorer.scroll_into_view_if_needed()
    before = explorer.locator(".site-state:visible img").get_attribute("src")
    explorer.locator(".site-pick").nth(1).click()
    assert explorer.locator(".site-pick").nth(1).get_attribute("aria-pressed") == "true"
    after = explorer.locator(".site-state:visible img").get_attribute("src")
    assert after != before
    assert "backward()" in explorer.locator(".site-pick").nth(1).inner_text()

    page.goto((built[0] / "lessons" / "04_hooks.html").as_uri())
    hook = page.locator('.site-states[data-explorer="HookExplorer"]').first
    hook.scroll_into_view_if_needed()
    numbers = hook.locator(".site-state:visible .xp-lines").inner_text()
    hook.locator(".site-pick", has_text="no hook").click()
    assert hook.locator(".site-state:visible .xp-lines").inner_text() != numbers
    hook.screenshot(path=str(ARTIFACTS / "site-04_hooks-explorer.png"))
    assert errors == [] and aborted == []


# Draws two different CJK characters in the page's own font: with no CJK font they are the
# same missing-glyph box, pixel for pixel.
_CJK_GLYPHS = """() => {
  const font = getComputedStyle(document.querySelector('article') || document.body).fontFamily;
  const draw = (ch) => {
    const c = document.createElement('canvas'); c.width = 64; c.height = 64;
    const g = c.getContext('2d'); g.fillStyle = '#000'; g.font = '48px ' + font;
    g.fillText(ch, 4, 52); return c.toDataURL();
  };
  return {font: font, differ: draw('叶') !== draw('梯'), ink: draw('叶') !== draw(' ')};
}"""


@pytest.mark.browser
def test_chinese_pages_render_cjk_glyphs(built, offline_page):
    page, aborted, errors = offline_page
    ARTIFACTS.mkdir(exist_ok=True)
    html_dir = built[0]
    page.goto((html_dir / "zh-CN" / "index.html").as_uri())
    glyphs = page.evaluate(_CJK_GLYPHS)
    assert glyphs["differ"] and glyphs["ink"], glyphs
    page.screenshot(path=str(ARTIFACTS / "site-zh-CN-index.png"))
    page.goto((html_dir / "zh-CN" / "lessons" / "01_leaves.html").as_uri())
    assert page.evaluate(_CJK_GLYPHS)["differ"]
    page.screenshot(path=str(ARTIFACTS / "site-zh-CN-01_leaves-page.png"))
    # the header's link goes to the English page, and back
    page.locator("a.site-edition-switch").first.click()
    page.wait_for_load_state("load")
    assert page.url == (html_dir / "lessons" / "01_leaves.html").as_uri()
    page.locator("a.site-edition-switch").first.click()
    page.wait_for_load_state("load")
    assert page.url == (html_dir / "zh-CN" / "lessons" / "01_leaves.html").as_uri()
    assert errors == [] and aborted == []


@pytest.mark.browser
@pytest.mark.parametrize("word", ["叶子", "叶子张量", "钩子", "梯度", "分拣中心"])
def test_the_chinese_site_search_finds_chinese_words(built, offline_page, word):
    """Sphinx indexes the Chinese pages word by word with jieba and the course's terms
    (course.terminology.search_words): a compound such as 叶子张量 is found whole, as its parts
    are; the results are the Chinese lessons."""
    from urllib.parse import quote

    page, _aborted, _errors = offline_page
    search = built[0] / "zh-CN" / "search.html"
    page.goto(search.as_uri() + "?q=" + quote(word))
    # the summary line is written when the search has finished, found or not
    page.wait_for_selector("#search-results p.search-summary", state="attached")
    hits = page.locator("ul.search li a").evaluate_all("as => as.map(a => a.href)")
    assert any("/zh-CN/lessons/" in h for h in hits), (word, hits[:5],
                                                       page.locator("#search-results").inner_text())
    # (Sphinx then fetches each hit for a snippet, which a file:// page may not: those
    # errors are the offline site's, and the hits are what the reader needs)




def test_every_figure_a_lesson_shows_fits_a_1280_px_window(built):
    """Every picture a lesson's code displays (graphs, explorer states, charts, the doctor's
    plots, its own matplotlib figures), in both editions' executions, is at most 840 CSS px
    wide: JupyterLab's output area in a 1280 px window with the file browser open is 848."""
    import base64

    from jupyter_cache import get_cache

    from course.draw import display_width

    cache = get_cache(str(built[5] / "jupyter_cache"))
    widths = {}
    for record in cache.list_cache_records():
        nb = cache.get_cache_bundle(record.pk).nb
        for cell in nb.cells:
            for i, out in enumerate(cell.get("outputs", [])):
                png = out.get("data", {}).get("image/png")
                if png:
                    meta = out.get("metadata", {}).get("image/png", {})
                    shown = meta.get("width") or display_width(base64.b64decode(png))
                    widths[f"{'/'.join(Path(record.uri).parts[-4:])}:{cell.get('id')}:{i}"] = shown
    assert len(widths) >= 16, widths  # the lessons' graphs, charts and figures
    too_wide = {k: w for k, w in widths.items() if w > 840}
    assert not too_wide, too_wide
