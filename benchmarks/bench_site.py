"""The course site's incremental build (both editions, English and zh-CN): a first build
(every lesson of both editions executed) against a second one
with nothing changed (nothing executed), in a fresh temp folder.

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


def build(out: Path) -> tuple[float, dict[str, list[str]]]:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autograder", "site", "--out", str(out), "--quiet"],
                   cwd=ROOT, check=True, capture_output=True)
    seconds = time.perf_counter() - t0
    editions = json.loads((out / "build-record.json").read_text())["editions"]
    return seconds, {name: ed["executed"] for name, ed in editions.items()}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "site"
        first, ran_first = build(out)
        second, ran_second = build(out)
    for label, seconds, ran in (("first", first, ran_first), ("second", second, ran_second)):
        counts = ", ".join(f"{name} {len(nbs)}" for name, nbs in ran.items())
        print(f"{label + ' build:':14s}{seconds:7.1f} s  notebooks executed: {counts}")
    print(f"ratio first / second: {first / second:.1f}x")


if __name__ == "__main__":
    main()
