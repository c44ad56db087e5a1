"""Test-session settings shared by every test.

The course's tensors are tiny: on a shared 2-core machine, torch's default thread
pool makes them slower, not faster. Kernels started by nbval and nbgrader inherit
this environment.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def playwright_chromium():
    """``(playwright, chromium_path)``: one sync Playwright for the whole session (a second
    ``sync_playwright()`` in the same process fails inside the first one's event loop)."""
    from browser.conftest import _unavailable, chromium_path

    path = chromium_path()
    if path is None:
        _unavailable("Chromium not found (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed")
    with sync_playwright() as p:
        yield p, path
