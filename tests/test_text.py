"""The text a learner or an instructor reads: no course jargon, the sources cited once, one glossary.

Scanned: every cell of the source and release notebooks, the README, the docs, and the course's
Python modules (their docstrings, feedback strings, misconception texts, explorer scenarios and
messages, the doctor's findings), since all of them reach a reader.
"""

from __future__ import annotations

import re

import pytest
from helpers import RELEASE, ROOT, SOURCE, assignments, notebook_path, read

from course.themes import CONCEPTS, GLOSSARY, KINDS, MARKS

ASSIGNMENTS = assignments()
LEARNER_MODULES = sorted([*ROOT.glob("course/*.py"), *ROOT.glob("autograder/*.py"),
                          *ROOT.glob("autograder/lessons/*.py"),
                          *ROOT.glob("autograder/grading/*.py")])
DOCS = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("source/*.md")])


def _notebook_cells(where=(SOURCE, RELEASE)):
    for folder in where:
        for a in ASSIGNMENTS:
            for i, cell in enumerate(read(notebook_path(a, folder)).cells):
                yield f"{folder.name}/{a} cell {i}", cell


def _texts():
    """(where, text) of everything a reader reads."""
    for where, cell in _notebook_cells():
        yield where, cell.source
    for path in [*DOCS, *LEARNER_MODULES]:
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def _lines_matching(pattern: re.Pattern, allowed=None):
    found = []
    for where, text in _texts():
        for n, line in enumerate(text.splitlines(), 1):
            for m in pattern.finditer(line):
                if allowed is None or not allowed(line, m):
                    found.append(f"{where} line {n}: {line.strip()[:120]}")
    return found


# ------------------------------------------------------------------ "seed": the internal word

SEED = re.compile(r"\bseeds?\b", re.IGNORECASE)


def _random_seed_sense(line: str, m: re.Match) -> bool:
    """``seed`` as code (a parameter or a call: ``seed=0``, ``(seed, width)``, ``seed + 5``) or
    prose about a random seed ("random seed", "fixed seed"); anything else is the internal word
    for the source articles ("seed 003", "the seed's alarm", "seed bugs")."""
    before, after = line[:m.start()].lower(), line[m.end():]
    return (before.endswith(("random ", "fixed ", "fixed-", "random-"))
            or re.match(r"\s*([=,():\[\]{}]|\+ )|\s+in\b| \{| [1-9]?\d\b(?!\d)", after) is not None)


def test_the_internal_word_seed_reaches_no_reader():
    found = _lines_matching(SEED, _random_seed_sense)
    assert not found, ("name an article by its short name (the parcel-sorting article, the "
                       "kitchen article, ...), never 'seed':\n" + "\n".join(found))


def test_the_seed_check_catches_the_article_sense():
    """The check above is not vacuous: the phrases it replaced would fail it."""
    for bad in ("Seed 003's example", "Myth (seed 001): ...", "the seed's alarm",
                "seeds 000/001", "two seed bugs"):
        m = SEED.search(bad)
        assert m and not _random_seed_sense(bad, m), bad
    for ok in ("course.seed_everything(0)", "def make(seed=0):", "x = data(seed)",
               "Fix the random seeds", "for (seed, width) in cases", "the fixed-seed data",
               "with seed 5 some do", "for seed in (0, 5):", 'print(f"seed {seed}")'):
        m = SEED.search(ok)
        assert m is None or _random_seed_sense(ok, m), ok


# ------------------------------------------------------------------ notes to the authors

AUTHOR_NOTE = re.compile(r"(?i:\bextraction\b|\bextracted\b|\(sic\)|note to (the )?authors?)"
                         r"|\bTODO\b|\bFIXME\b|\bXXX\b")


def test_no_notes_to_the_authors_in_what_readers_read():
    found = []
    for where, cell in _notebook_cells():
        if AUTHOR_NOTE.search(cell.source):
            found.append(where)
    for path in DOCS:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if AUTHOR_NOTE.search(line):
                found.append(f"{path.relative_to(ROOT)} line {n}")
    for path in LEARNER_MODULES:  # the status constant TODO is code, not a note
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\bextract(ion|ed)\b|\(sic\)|note to (the )?authors?", line, re.I):
                found.append(f"{path.relative_to(ROOT)} line {n}")
    assert not found, "\n".join(found)


# ------------------------------------------------------------------ sources cited once

ARTICLES = {
    "the parcel-sorting article": "《用生活案例理解PyTorch叶子节点：从神经网络到快递分拣的奇妙比喻》",
    "the kitchen article": "《用厨房料理理解PyTorch计算图：叶子张量为什么是反向传播的\"食材原产地\"？》",
    "the computation-graph article": "《PyTorch计算图中的叶子节点》",
    "the five-scenarios article": "《PyTorch叶子张量实战：为什么你的梯度消失了？5个常见场景解析》",
}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_articles_quoted_are_cited_once_in_a_sources_note(assignment):
    cells = read(notebook_path(assignment, RELEASE)).cells
    notes = [i for i, c in enumerate(cells) if c.cell_type == "markdown"
             and "**Sources.**" in c.source]
    prose = "\n".join(c.source for i, c in enumerate(cells) if i not in notes).lower()
    quoted = {name for name in ARTICLES if name in prose}
    if not quoted:
        assert not notes
        return
    assert notes == [1], "one Sources note, right after the introduction"
    note = cells[1].source
    for name, title in ARTICLES.items():
        assert (title in note) == (name in quoted), (name, "quoted" if name in quoted else
                                                     "cited but never quoted")
        assert title not in prose, "a title is cited in the Sources note only"
        if name in quoted:   # the short name beside the title, and an English gloss
            line = next(ln for ln in note.splitlines() if title in ln)
            assert name in line and re.search(r'\("[A-Z][^"]+"\)', line), line


# ------------------------------------------------------------------ one glossary

def _glossary_text(themes=("logistics", "kitchen")) -> str:
    return " ".join(v for t in themes for v in GLOSSARY[t].values()).lower()


#: The nouns an analogy could use for a role: those the lessons use must be in the glossary;
#: the synonyms it does not have (a hub, a chef) must not creep into a lesson.
ROLE_NOUNS = (
    "station", "centre", "parcel", "waybill", "report", "desk", "monitor", "probe", "route",
    "audit", "seal", "delivery", "label", "photograph",
    "ingredient", "dish", "sauce", "spoon", "recipe", "notebook", "taster", "sample", "jar",
    "broth", "market", "warehouse", "batch number", "origin",
    "hub", "depot", "courier", "truck", "inspector", "shipment", "conveyor",
    "chef", "pantry", "fridge", "larder", "menu",
)

#: Words the glossary replaced: each must not come back, so that one role has one word.
DRIFT = {
    "tasting notes": "origin record",
    "recipe notes": "recipe",
    "efficiency record": "efficiency report",
    "transfer station": "transit station",
    "distribution centre": "sorting centre",
    "origin report": "origin record",
}


def _markdown(assignment: str, where=SOURCE) -> str:
    return "\n".join(c.source for c in read(notebook_path(assignment, where)).cells
                     if c.cell_type == "markdown")


def test_the_glossary_has_every_key_in_every_theme():
    keys = {*KINDS, *MARKS, *CONCEPTS, "backward", "output"}
    for theme, words in GLOSSARY.items():
        assert set(words) == keys, theme
        assert all(w.strip() for w in words.values()), theme


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_analogy_word_a_lesson_uses_is_in_the_glossary(assignment):
    text, glossary = _markdown(assignment).lower(), _glossary_text()
    used = [w for w in ROLE_NOUNS if re.search(rf"\b{w}(s|es)?\b", text)]
    missing = [w for w in used if w not in glossary]
    assert not missing, f"role words the glossary (course/themes.py) lacks: {missing}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_lessons_use_the_glossarys_word_not_a_drifted_synonym(assignment):
    text = _markdown(assignment).lower()
    drifted = {w: right for w, right in DRIFT.items() if w in text}
    assert not drifted, f"use the glossary's word: {drifted}"


def test_the_readme_uses_the_glossarys_words():
    text = (ROOT / "README.md").read_text(encoding="utf-8").lower()
    assert not [w for w in DRIFT if w in text]


def test_the_drift_check_would_catch_a_synonym():
    assert "tasting notes" in DRIFT and "tasting notes" not in _glossary_text()
    assert "hub" in ROLE_NOUNS and "hub" not in _glossary_text()


# ------------------------------------------------------------------ the kitchen, carried through

LOGISTICS = ("station", "centre", "hub", "parcel", "waybill", "report", "desk", "monitor",
             "probe", "route", "audit", "seal", "delivery")
KITCHEN = ("ingredient", "dish", "sauce", "spoon", "recipe", "notebook", "taster", "jar",
           "broth", "market", "kitchen", "label", "warehouse", "cook", "tasting")


def _count(words, text: str) -> int:
    return sum(len(re.findall(rf"\b{w}(s|es)?\b", text)) for w in words)


def _body(assignment: str) -> str:
    """The lesson's sections: the markdown after the setup cell, up to the summary."""
    cells = read(notebook_path(assignment)).cells
    start = next(i for i, c in enumerate(cells)
                 if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup")
    out = []
    for c in cells[start + 1:]:
        if c.cell_type == "markdown":
            head, summary, _ = c.source.partition("## Summary")
            out.append(head)
            if summary:
                break
    return "\n".join(out).lower()


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_kitchen_is_carried_through_the_lesson_body(assignment):
    """Every introduction announces both analogies; the body must speak both, not only the
    parcel network (the kitchen at least 0.6 times as often)."""
    intro = read(notebook_path(assignment)).cells[0].source.lower()
    assert _count(KITCHEN, intro) and _count(LOGISTICS, intro), "the intro announces both"
    body = _body(assignment)
    kitchen, logistics = _count(KITCHEN, body), _count(LOGISTICS, body)
    assert kitchen >= 0.6 * logistics, f"kitchen {kitchen} vs logistics {logistics}"


# ------------------------------------------------------------------ the first minutes

def test_readme_and_file_browser_say_source_is_the_instructors_folder():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"`source/`[\s\S]{0,60}instructors' folder", readme)
    note = (SOURCE / "README.md").read_text(encoding="utf-8")
    assert "instructors" in note.lower() and "release/" in note
