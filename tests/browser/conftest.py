"""A real JupyterLab and a headless Chromium for the browser tests (recipe: BROWSER.md).

The server runs with the interpreter running pytest (``sys.executable -m jupyter lab``),
with the repository on ``PYTHONPATH`` so its kernels import ``course`` and
``autograder``; everything it writes goes to a temp dir. Missing Chromium or
Playwright skips these tests locally and fails them in CI (``CI`` set).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
TOKEN = "course-browser-test"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"browser tests must run in CI: {reason}")
    pytest.skip(reason)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(base: str, path: str, method: str = "GET"):
    req = urllib.request.Request(f"{base}{path}", method=method,
                                 headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read()
    return json.loads(body) if body else None


class Lab:
    """A running JupyterLab: ``base`` URL, served ``root`` dir, the server process."""

    def __init__(self, base: str, root: Path, proc: subprocess.Popen):
        self.base, self.root, self.proc = base, root, proc

    def api(self, path: str, method: str = "GET"):
        return api(self.base, path, method)

    def artifact(self, name: str) -> Path:
        """Where a screenshot goes (test-artifacts/, gitignored)."""
        ARTIFACTS.mkdir(exist_ok=True)
        return ARTIFACTS / name

    def copy_in(self, relative: str) -> str:
        """Copy a notebook of the repository into the served dir; return its name there."""
        src = ROOT / relative
        shutil.copy(src, self.root / src.name)
        return src.name

    def url(self, notebook: str) -> str:
        return f"{self.base}/lab/tree/{notebook}?reset&token={TOKEN}"

    def wait_kernel_idle(self, notebook: str, timeout: float = 90) -> None:
        """First the server's view (kernel connected and idle), as BROWSER.md says."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for s in api(self.base, "/api/sessions"):
                k = s.get("kernel") or {}
                if s.get("path", "").endswith(notebook) and k.get("connections", 0) >= 1 \
                        and k.get("execution_state") == "idle":
                    return
            time.sleep(0.3)
        raise TimeoutError(f"kernel of {notebook} never became idle")


# ``playwright_chromium`` (the session's one Playwright and the Chromium path) is in
# tests/conftest.py: Playwright's sync API runs once per process, and tests outside this
# folder (the class report's page) drive Chromium too.


@pytest.fixture(scope="session")
def lab(tmp_path_factory, playwright_chromium):
    yield from _serve_lab(tmp_path_factory)


@pytest.fixture(scope="session")
def lab_zh(tmp_path_factory, playwright_chromium):
    """A JupyterLab whose menus and dialogs are in Simplified Chinese, as the Chinese quick
    start serves it (the language setting of zh-CN/lab-settings)."""
    yield from _serve_lab(tmp_path_factory, ROOT / "zh-CN" / "lab-settings")


def _serve_lab(tmp_path_factory, settings_from: Path | None = None):
    home = tmp_path_factory.mktemp("lab-home")
    root = tmp_path_factory.mktemp("lab-root")
    env = dict(os.environ)
    env.update({
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
        "MPLCONFIGDIR": str(home / "mpl"),
        "JUPYTERLAB_SETTINGS_DIR": str(home / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "lab-workspaces"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
    })
    env.pop("NBGRADER_EXECUTION", None)
    # Render every cell (Lab 4 otherwise virtualizes cells scrolled out of view, so their
    # outputs are not in the page to be checked), and do not ask about Jupyter news.
    if settings_from is not None:
        shutil.copytree(settings_from, home / "lab-settings")
    settings = home / "lab-settings" / "@jupyterlab"
    for ext, plugin, value in (("notebook-extension", "tracker", {"windowingMode": "none"}),
                               ("apputils-extension", "notification", {"fetchNews": "false"})):
        (settings / ext).mkdir(parents=True, exist_ok=True)
        (settings / ext / f"{plugin}.jupyterlab-settings").write_text(json.dumps(value))
    port = _free_port()
    log = open(home / "lab.log", "w")  # noqa: SIM115 -- closed at teardown
    proc = subprocess.Popen([
        sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
        f"--port={port}", "--port-retries=0", f"--IdentityProvider.token={TOKEN}",
        "--allow-root", f"--ServerApp.root_dir={root}", "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ], env=env, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            api(base, "/api/status")
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                log.close()
                pytest.fail("JupyterLab did not start:\n" + (home / "lab.log").read_text()[-3000:])
            time.sleep(0.3)
    yield Lab(base, root, proc)
    # Stop: shut down through the API (kernels first), then make sure the whole
    # process group we started (server and its kernels) is gone.
    try:
        for k in api(base, "/api/kernels"):
            api(base, f"/api/kernels/{k['id']}", method="DELETE")
        api(base, "/api/shutdown", method="POST")
        proc.wait(timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of the server we started, by its id
    except ProcessLookupError:
        pass
    log.close()


@pytest.fixture
def page(playwright_chromium, tmp_path, request):
    p, chromium = playwright_chromium
    context = p.chromium.launch_persistent_context(
        str(tmp_path / "chromium-profile"), executable_path=chromium, headless=True,
        args=CHROMIUM_FLAGS, viewport={"width": 1400, "height": 1000})
    pg = context.pages[0] if context.pages else context.new_page()
    pg.set_default_timeout(60_000)
    yield pg
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}-final.png"), full_page=True)
    finally:
        context.close()
