"""The course site's incremental build: a first build (every lesson executed) against a
second one with nothing changed (nothing executed), in a fresh temp folder.

    .venv/bin/python benchmarks/bench_site.py

Prints both wall times, the ratio, and what each build executed (from the build's record,
which reads jupyter-cache's records).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(out: Path) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autograder", "site", "--out", str(out), "--quiet"],
                   cwd=ROOT, check=True, capture_output=True)
    seconds = time.perf_counter() - t0
    return seconds, json.loads((out / "build-record.json").read_text())["executed"]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "site"
        first, ran_first = build(out)
        second, ran_second = build(out)
    print(f"first build:  {first:7.1f} s  executed {len(ran_first)} notebooks")
    print(f"second build: {second:7.1f} s  executed {len(ran_second)} notebooks")
    print(f"ratio first / second: {first / second:.1f}x")


if __name__ == "__main__":
    main()
