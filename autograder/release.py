"""Generate ``release/`` from ``source/`` with stock nbgrader, and check it is fresh.

Both run ``nbgrader generate_assignment`` in scratch copies of the course (the config file
and ``source/``; one per core, the assignments shared out between them), so the repository's
own gradebook is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from autograder.pipeline import assignments, generate_release

SOLUTION_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
HIDDEN_MARKERS = ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")


def _scratch_course(course: Path, tmp: Path) -> Path:
    root = tmp / "course"
    root.mkdir()
    shutil.copy2(course / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copytree(course / "source", root / "source",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    return root


def generate_all(course: Path, names: list[str] | None, tmp: Path) -> dict[str, Path]:
    """Generate the release of ``names`` (default: all) in scratch copies of the course, one
    per core, each with its own gradebook; return each assignment's generated folder."""
    from concurrent.futures import ThreadPoolExecutor

    names = names or assignments(course)
    jobs = max(1, min(len(names), os.cpu_count() or 1))
    groups = [names[i::jobs] for i in range(jobs)]

    def generate(i: int) -> dict[str, Path]:
        (tmp / str(i)).mkdir()
        root = _scratch_course(course, tmp / str(i))
        return {name: generate_release(name, root) for name in groups[i]}

    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(generate, range(jobs)))
    return {name: folder for folders in done for name, folder in folders.items()}


def regenerate(course: Path, names: list[str] | None = None) -> list[str]:
    """Replace ``release/NAME`` for each assignment with freshly generated files."""
    names = names or assignments(course)
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate_all(course, names, Path(tmp))
        for name in names:
            target = course / "release" / name
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(generated[name], target)
    return names


def _files(folder: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(folder)): p
        for p in folder.rglob("*")
        if p.is_file() and ".ipynb_checkpoints" not in p.parts and "__pycache__" not in p.parts
    }


def leaks(notebook: dict) -> list[str]:
    """Solution or hidden-test markers left in a (release) notebook."""
    found = []
    for i, cell in enumerate(notebook.get("cells", [])):
        src = "".join(cell.get("source", ""))
        for marker in SOLUTION_MARKERS + HIDDEN_MARKERS:
            if marker in src:
                found.append(f"cell {i} contains {marker!r}")
    return found


def check_release(course: Path, names: list[str] | None = None) -> list[str]:
    """Differences between ``release/`` and what nbgrader generates now (empty: fresh)."""
    names = names or assignments(course)
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate_all(course, names, Path(tmp))
        for name in names:
            fresh = _files(generated[name])
            have = _files(course / "release" / name)
            for rel in sorted(set(fresh) - set(have)):
                problems.append(f"release/{name}/{rel} is missing")
            for rel in sorted(set(have) - set(fresh)):
                problems.append(f"release/{name}/{rel} is not generated from source/")
            for rel in sorted(set(fresh) & set(have)):
                a, b = fresh[rel], have[rel]
                if rel.endswith(".ipynb"):
                    nb = json.loads(b.read_text(encoding="utf-8"))
                    if json.loads(a.read_text(encoding="utf-8")) != nb:
                        problems.append(f"release/{name}/{rel} differs from the generated version")
                    problems += [f"release/{name}/{rel}: {leak}" for leak in leaks(nb)]
                elif a.read_bytes() != b.read_bytes():
                    problems.append(f"release/{name}/{rel} differs from the generated version")
    return problems
