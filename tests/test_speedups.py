"""The grading kernels' speed-ups (:mod:`autograder.grading.speedups`) change no output.

Run in a fresh interpreter: the patches are process-wide. The same cells are run by an
IPython shell before and after :func:`install`, and every traceback must be identical;
``inspect.getmodule`` must give the standard answers, including after a new import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(r'''
    import inspect, json, sys, types
    from IPython.core.interactiveshell import InteractiveShell

    applied = []
    if sys.argv[1] == "patched":
        from autograder.grading import speedups
        applied = speedups.install()
        assert speedups.install() == applied  # a second install changes nothing
        import stack_data.core
        assert not hasattr(stack_data.core._pygmented_with_ranges.__wrapped__,
                           "_autograder_once")  # not wrapped twice
    shell = InteractiveShell.instance()
    CELLS = [
        "undefined_name",
        "raise NotImplementedError",
        "def f(x):\n    assert x > 1, 'x is too small'\nf(0)",
        "import torch\ntorch.zeros(2, require_grad=True)",
        "def g():\n    raise ValueError('inner')\ntry:\n    g()\nexcept ValueError as e:\n"
        "    raise KeyError('outer') from e",
    ]
    shown, stored = [], []
    for cell in CELLS:
        result = shell.run_cell(cell, store_history=True)
        exc = result.error_in_exec
        shown.append(shell.InteractiveTB.structured_traceback(type(exc), exc,
                                                              exc.__traceback__))
        stored.append(shell.history_manager.exceptions[shell.execution_count - 1])
    frame = sys._getframe()
    answers = [inspect.getmodule(frame), inspect.getmodule(frame.f_code),
               inspect.getmodule(frame), inspect.getmodule(json.dumps)]
    mod = types.ModuleType("late_module")  # a module for that file appears later
    mod.__file__ = frame.f_code.co_filename
    sys.modules["late_module"] = mod
    answers.append(inspect.getmodule(frame))
    print(json.dumps({"applied": applied, "shown": shown, "stored": stored,
                      "getmodule": [getattr(m, "__name__", None) for m in answers]}))
''')


def run(mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_speedups_change_no_traceback_and_no_getmodule_answer():
    plain, patched = run("plain"), run("patched")
    assert patched["applied"] == ["traceback formatted once",
                                  "inspect.getmodule misses remembered",
                                  "one lexer class for highlighted frames"]
    assert len(plain["shown"]) == 5 and all(plain["shown"])
    assert all(any("\x1b[" in line for line in tb) for tb in plain["shown"])  # highlighted
    assert patched["shown"] == plain["shown"]
    assert patched["stored"] == plain["stored"]
    assert plain["getmodule"] == [None, None, None, "json", "late_module"]
    assert patched["getmodule"] == plain["getmodule"]


def test_driver_metadata_validation_gives_jsonschemas_answers():
    """The driver's schema-checked-once validation raises what ``jsonschema.validate`` does."""
    import jsonschema
    from nbgrader.nbgraderformat import MetadataValidator

    from autograder.grading.engine import _SchemaCheckedOnce

    schema = MetadataValidator().schema
    once = _SchemaCheckedOnce(jsonschema)
    good = {"grade": True, "solution": False, "locked": True, "schema_version": 3,
            "grade_id": "q1", "points": 2}
    cases = [good, {**good, "grade": "yes"}, {**good, "points": "two"},
             {k: v for k, v in good.items() if k != "schema_version"}]
    for meta in cases:
        errors = []
        for validate in (jsonschema.validate, once.validate):
            try:
                validate(meta, schema)
                errors.append(None)
            except jsonschema.ValidationError as exc:
                errors.append(str(exc))
        assert errors[0] == errors[1], meta
    with pytest.raises(jsonschema.ValidationError, match="boolean"):
        once.validate(cases[1], schema)


def test_driver_gradebooks_share_one_engine_and_see_each_others_writes(tmp_path, monkeypatch):
    """The driver's one-engine-per-database ``create_engine``: a gradebook opened after
    another was closed uses the same engine, and reads what the first one wrote."""
    from nbgrader import api
    from sqlalchemy import create_engine

    from autograder.grading.engine import _OneEnginePerDatabase
    from autograder.pipeline import nbgrader_env

    monkeypatch.setenv("PATH", nbgrader_env()["PATH"])  # a new gradebook runs `alembic`

    make = _OneEnginePerDatabase(create_engine)
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    assert make(url, echo=False) is make(url, echo=False)
    assert make(url, echo=True) is not make(url, echo=False)
    real = api.create_engine
    api.create_engine = make
    try:
        with api.Gradebook(url) as gb:
            gb.add_student("alice", first_name="Alice")
            first = gb.engine
        with api.Gradebook(url) as gb:
            assert gb.engine is first
            assert gb.find_student("alice").first_name == "Alice"
            gb.update_or_create_student("alice", first_name="Alicia")
        with api.Gradebook(url) as gb:
            assert gb.find_student("alice").first_name == "Alicia"
    finally:
        api.create_engine = real
    with api.Gradebook(url) as gb:  # and a stock gradebook reads the same database
        assert gb.find_student("alice").first_name == "Alicia"
