"""The tensor tables and small helpers of course.facts, against torch."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

import course


def test_table_rows_follow_torch():
    w = torch.randn(3, requires_grad=True)
    parcel = torch.randn(3)
    station = parcel * w
    station.sum().backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading the non-leaf's .grad for the table is silent
        table = course.tensor_table("logistics", w=w, parcel=parcel, station=station)
    rows = {r.name: r for r in table.rows}
    assert (rows["w"].is_leaf, rows["w"].requires_grad, rows["w"].role) == (
        True, True, "sorting centre")
    assert rows["parcel"].role == "ordinary parcel" and rows["parcel"].grad == "None"
    assert rows["station"].grad_fn == type(station.grad_fn).__name__
    assert rows["station"].grad == "None (not kept)"
    assert rows["w"].grad.startswith("[")
    text, html = repr(table), table._repr_html_()
    assert "transit station" in text and "<table" in html


def test_retained_non_leaf_shows_its_grad():
    x = torch.ones(2, requires_grad=True)
    y = x * 3
    y.retain_grad()
    y.sum().backward()
    (row,) = course.tensor_table("kitchen", y=y).rows
    assert row.grad == "[1, 1]" and row.role == "semi-finished dish"


def test_unknown_theme_is_a_clear_error():
    with pytest.raises(ValueError, match="theme"):
        course.tensor_table("space", t=torch.ones(1))


def test_caught_warnings_returns_the_warning_instead_of_printing_it(capsys):
    y = torch.ones(2, requires_grad=True) * 2
    lines = course.caught_warnings(lambda: y.grad)
    assert len(lines) == 1 and lines[0].startswith("UserWarning:") and "not a leaf" in lines[0]
    assert capsys.readouterr().err == ""


def test_finite_difference_agrees_with_autograd():
    x = torch.tensor([0.3, -1.2, 2.0], requires_grad=True)
    f = lambda v: (v.sin() * v).sum()  # noqa: E731
    f(x).backward()
    torch.testing.assert_close(course.finite_difference(f, x), x.grad.double(),
                               rtol=1e-6, atol=1e-6)


def test_importing_course_is_cheap():
    code = ("import sys, course; heavy = {'torch', 'matplotlib', 'ipywidgets', 'networkx'};"
            "print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
