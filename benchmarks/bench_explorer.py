"""How long a GraphExplorer takes to react to a control change, for 10/30/60-node graphs.

Run: ``PYTHONPATH=. python benchmarks/bench_explorer.py [--repeats 15]``

The graph is a chain of sorting centres: ``h1 = tanh(x * w1)``, ``h2 = tanh(h1 * w2)``,
... ``out = h_k.sum()`` (5 nodes per layer). Each timed change toggles
``w1.requires_grad`` and runs ``backward()``, which is what a click does: re-run
the recipe with torch and build the graph (*build*), lay out and rasterise the
figure (*draw*), encode the PNG (*png*). The target is a median under 100 ms at
30 nodes. Prints a Markdown table (docs/benchmarks.md keeps the figures); the CPU-time
column is the honest figure when other work shares the machine (wall time then inflates).
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import time

import matplotlib
import numpy as np

matplotlib.use("Agg")

from course import draw  # noqa: E402
from course.widgets import Controls, GraphExplorer, Scenario, Step, run_scenario  # noqa: E402


def chain(layers: int) -> Scenario:
    """A chain scenario with ``5 * layers + 3`` graph nodes."""
    steps = [Step("x", "torch.randn(8)", "input", False)]
    prev = "x"
    for i in range(1, layers + 1):
        steps.append(Step(f"w{i}", "torch.randn(8)", "input", True))
        steps.append(Step(f"h{i}", f"({prev} * w{i}).tanh()"))
        prev = f"h{i}"
    steps.append(Step("out", f"{prev}.sum()"))
    return Scenario(f"chain{layers}", f"chain of {layers} sorting centres", tuple(steps), "out")


def phases(scenario: Scenario, controls: Controls, dpi: int) -> tuple[float, float, float]:
    """Seconds for build, draw and PNG encoding of one change (same work as render_png)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from PIL import Image

    t0 = time.perf_counter()
    run = run_scenario(scenario, controls)
    t1 = time.perf_counter()
    fig = Figure(dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    draw._draw(run.graph, fig, None, "logistics", scenario.title, True)
    with matplotlib.rc_context(draw.FAST_TEXT):
        canvas.draw()
    t2 = time.perf_counter()
    Image.fromarray(np.asarray(canvas.buffer_rgba())).save(io.BytesIO(), format="png", compress_level=1)
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


def bench(layers: int, repeats: int, dpi: int) -> dict:
    scenario = chain(layers)
    explorer = GraphExplorer(scenario, theme="logistics", dpi=dpi)
    explorer.set(backward=True)
    cold, cold_cpu, warm = [], [], []
    for i in range(repeats):  # what a click costs, end to end (widget path)
        draw._PNG_CACHE.clear()  # a state never drawn before
        t, c = time.perf_counter(), time.process_time()
        explorer.set(requires_grad={"w1": i % 2 == 0})
        cold.append(time.perf_counter() - t)
        cold_cpu.append(time.process_time() - c)
    for i in range(repeats):  # toggling back to a state already seen
        t = time.perf_counter()
        explorer.set(requires_grad={"w1": i % 2 == 0})
        warm.append(time.perf_counter() - t)
    parts = [phases(scenario, Controls(requires_grad={"w1": i % 2 == 0}, backward=True), dpi)
             for i in range(repeats)]
    build, drawn, png = (statistics.median(p[k] for p in parts) for k in range(3))
    return {"nodes": len(explorer.run.graph), "total": statistics.median(cold),
            "cpu": statistics.median(cold_cpu), "warm": statistics.median(warm),
            "build": build, "draw": drawn, "png": png}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--dpi", type=int, default=72)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}, matplotlib {matplotlib.__version__}, "
          f"dpi {args.dpi}, {args.repeats} repeats\n")
    print("| nodes | median change -> new PNG (wall) | same, CPU time | state seen before "
          "(cached) | build (torch + graph) | draw | PNG encode |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for layers in (2, 5, 11):
        r = bench(layers, args.repeats, args.dpi)
        print(f"| {r['nodes']} | {r['total'] * 1e3:.0f} ms | {r['cpu'] * 1e3:.0f} ms | "
              f"{r['warm'] * 1e3:.1f} ms | "
              f"{r['build'] * 1e3:.1f} ms | "
              f"{r['draw'] * 1e3:.0f} ms | {r['png'] * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
