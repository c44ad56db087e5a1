"""How long a GraphExplorer takes to react to a control change, for 10/30/60-node graphs.

Run: ``PYTHONPATH=. python benchmarks/bench_explorer.py [--repeats 15]``

The graph is a chain of sorting centres: ``h1 = tanh(x * w1)``, ``h2 = tanh(h1 * w2)``,
... ``out = h_k.sum()`` (5 nodes per layer). Each timed change toggles
``w1.requires_grad`` and runs ``backward()``, which is what a click does: re-run
the recipe with torch and build the graph (*build*), lay out and rasterise the
figure (*draw*), encode the PNG (*png*). The target is a median under 100 ms at
30 nodes for a state not drawn before. Three kinds of click are timed:

* *new state*: the PNG cache is emptied before each click, so the figure is drawn;
  the pictures of its texts, boxes and arrows and the layout were seen before (what
  most clicks are: a toggle changes a few marks and gradients, not every label);
* *nothing cached*: every cache of ``course.draw`` is emptied too (the first
  picture of a graph, or a state whose every label is new): the worst case;
* *first theme switch*: the theme dropdown changed to a theme not shown before
  (logistics -> kitchen with empty caches): role words, colours and legend are new,
  node names, operation names and gradients are not;
* *seen before*: a state already drawn, from the PNG cache.

The lesson explorers of ``course.explorers`` (02-07) are timed too (``--only lessons``):
each is built with every ``course.draw`` cache emptied (its *first picture*), then
clicked through a fixed round of control changes, each a state not drawn before; the
median is over the first picture and the clicks together.

*First picture* (``--only first``, the target: under 100 ms at 30 nodes): building an
explorer (what running its notebook cell costs once imports are done: the torch run, the
picture's fixed size over the states a click can reach, the drawing, the PNG) with every
cache of ``course.draw`` emptied, for the chain explorers and the lesson graph explorers.
Each is printed beside a *baseline* measured on the same machine in the same run, in turns
with it: the same picture (same graph, size and dpi) drawn the ordinary matplotlib way,
with ``Text`` and patch artists on a new ``Figure`` and ``savefig`` to PNG (how the static
figures show in Jupyter). The ratio first picture / baseline does not depend on the
machine's speed or load the way the milliseconds do.

*New kernel* (``--only kernel``): the first picture in a fresh Python process, as the
first explorer of a notebook: imports (torch, matplotlib, the course) timed apart, then
the first picture (static mode, so no widget machinery), beside the first plain
matplotlib figure of a fresh process (the baseline). Three processes per row.

Prints Markdown tables (docs/benchmarks.md keeps the figures). CPU time
(``time.process_time``) is the honest figure when other work shares the machine
(wall time then inflates); both are medians.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import matplotlib

matplotlib.use("Agg")

from course import draw  # noqa: E402
from course import explorers as X  # noqa: E402
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


def empty_caches(pictures_too: bool) -> None:
    """Empty the PNG cache; with ``pictures_too`` every cache of ``course.draw`` (stamps,
    layouts, geometries, text widths, rasterised lines)."""
    draw.clear_caches(pictures_too)


def plain_png(graph, theme: str, title: str | None, size, dpi: int) -> bytes:
    """The baseline: the same picture drawn the ordinary matplotlib way (``Text`` and patch
    artists on a new ``Figure``, ``savefig`` to PNG at ``dpi``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(dpi=draw.DISPLAY_DPI)
    FigureCanvasAgg(fig)
    draw._draw(graph, fig, None, theme, title, True, size=size)
    buf = io.BytesIO()
    with matplotlib.rc_context(draw.FAST_TEXT):
        fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    return buf.getvalue()


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    value = fn()
    return value, time.perf_counter() - t, time.process_time() - c


# What a first picture builds, per case: (name, build the explorer, its graph, title, size)
def _chain_case(layers: int):
    scenario = chain(layers)
    return (f"GraphExplorer, chain of {layers}",
            lambda: GraphExplorer(scenario, theme="logistics"),
            lambda ex: (ex.run.graph, scenario.title, ex.sizes["logistics"]))


def _lesson_case(cls):
    return (cls.__name__, lambda: cls(theme="logistics"),
            lambda ex: (ex.graph, ex.picture_title(), ex._size["logistics"]))


def first_pictures(repeats: int) -> list[dict]:
    """The first picture of each explorer and, in turns with it, the baseline (module
    docstring): medians of CPU and wall time over ``repeats``."""
    cases = [_chain_case(k) for k in (2, 5, 11)]
    cases += [_lesson_case(cls) for cls in (X.RetainExplorer, X.HookExplorer, X.NoGradExplorer,
                                            X.InplaceExplorer)]
    rows = []
    for name, build, picture in cases:
        ex = build()  # warm-up: imports and torch's first calls, not timed
        graph, title, size = picture(ex)
        dpi = draw.auto_dpi(size)
        plain_png(graph, "logistics", title, size, dpi)
        first, base, full = [], [], []
        for _ in range(repeats):
            empty_caches(True)
            os.environ["NBGRADER_EXECUTION"] = "1"  # static mode: the picture alone
            try:
                ex, wall, cpu = _timed(build)
            finally:
                del os.environ["NBGRADER_EXECUTION"]
            first.append((wall, cpu))
            graph, title, size = picture(ex)
            empty_caches(True)
            _, wall, cpu = _timed(lambda g=graph, t=title, z=size, d=dpi: plain_png(
                g, "logistics", t, z, d))
            base.append((wall, cpu))
            empty_caches(True)
            full.append(_timed(build)[1:])  # the same with its widgets, as in a notebook
        med = {k: statistics.median(v[i] for v in series) for k, series, i in (
            ("first_wall", first, 0), ("first_cpu", first, 1), ("base_wall", base, 0),
            ("base_cpu", base, 1), ("full_wall", full, 0), ("full_cpu", full, 1))}
        png = ex.png
        rows.append({"name": name, "nodes": len(graph), **med,
                     "pixels": (int.from_bytes(png[16:20]), int.from_bytes(png[20:24])),
                     "dpi": dpi, "css": draw.display_width(png)})
    return rows


KERNEL_CASES = ("RetainExplorer", "GraphExplorer, chain of 5")  # first_picture_child.py


def new_kernel(processes: int) -> list[dict]:
    rows = []
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "first_picture_child.py")
    for case in KERNEL_CASES:
        runs = {False: [], True: []}
        for _ in range(processes):
            for baseline in (False, True):
                out = subprocess.run(
                    [sys.executable, child, case] + (["--baseline"] if baseline else []),
                    capture_output=True, text=True, check=True,
                    env={**os.environ, "PYTHONPATH": os.pathsep.join(
                        p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)})
                runs[baseline].append(json.loads(out.stdout.strip().splitlines()[-1]))
        row = {"name": case}
        for key in runs[False][0]:
            for i, unit in ((0, "wall"), (1, "cpu")):
                row[f"{key}: {unit}"] = statistics.median(r[key][i] for r in runs[False])
        for i, unit in ((0, "wall"), (1, "cpu")):
            row[f"baseline: {unit}"] = statistics.median(r["picture"][i] for r in runs[True])
        rows.append(row)
    return rows


# A round of clicks per lesson explorer: (control, value), each a new state.
LESSON_CLICKS = {
    X.RetainExplorer: [("monitor", "after"), ("audits", 3), ("monitor", "none"),
                       ("audits", 0), ("monitor", "before"), ("audits", 2)],
    X.SkipPathExplorer: [("detach", True), ("blocks", 20), ("detach", False), ("blocks", 5),
                         ("detach", True), ("blocks", 15)],
    X.HookExplorer: [("action", "scale"), ("passes", 3), ("remove", True), ("action", "look"),
                     ("hook", False), ("passes", 1)],
    X.NoGradExplorer: [("cover", (1, 2)), ("cover", (1, 1)), ("cover", (3, 5)),
                       ("use", False), ("use", True), ("cover", (2, 4))],
    X.InplaceExplorer: [("edit", "before"), ("edit", "none"), ("inplace", False),
                        ("edit", "after"), ("edit", "before"), ("inplace", True)],
    X.DoctorExplorer: [("bug", "none"), ("bug", "sigmoid"), ("layers", 20),
                       ("bug", "no_grad"), ("bug", "dead_relu"), ("layers", 12)],
}


def bench_lessons(repeats: int) -> list[dict]:
    """Per lesson explorer: the first picture (caches empty) and a round of clicks.

    Each explorer is built once untimed first (imports, torch's first calls); then
    ``repeats`` times: empty every cache, build it (the first picture), click the round.
    Wall and CPU medians over the first pictures and the clicks together.
    """
    rows = []
    for cls, round_ in LESSON_CLICKS.items():
        cls(theme="logistics")  # warm-up: imports and torch's first calls, not timed
        first, first_cpu, every, cpu, nodes = [], [], [], [], 0
        for _ in range(repeats):
            empty_caches(True)
            steps = [(None, None), *round_]
            for i, (key, value) in enumerate(steps):
                t, c = time.perf_counter(), time.process_time()
                if i == 0:
                    ex = cls(theme="logistics")
                else:
                    ex.set(**{key: value})
                every.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
                if i == 0:
                    first.append(every[-1])
                    first_cpu.append(cpu[-1])
                nodes = max(nodes, len(ex.graph) if ex.graph is not None else 0)
        rows.append({"name": cls.__name__, "nodes": nodes or "chart (SVG)",
                     "median": statistics.median(every), "cpu": statistics.median(cpu),
                     "first": statistics.median(first), "worst": max(every),
                     "first_cpu": statistics.median(first_cpu)})
    return rows


def phases(scenario: Scenario, controls: Controls, dpi: int,
           size=None) -> tuple[float, float, float]:
    """Seconds for build, draw and PNG encoding of one change (the steps of render_png)."""
    t0 = time.perf_counter()
    run = run_scenario(scenario, controls)
    t1 = time.perf_counter()
    pixels = draw._render_rgba(run.graph, "logistics", scenario.title, True, dpi, size)
    t2 = time.perf_counter()
    draw._encode_png(pixels, dpi)
    t3 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2


def clicks(explorer: GraphExplorer, repeats: int, empty=None) -> tuple[float, float]:
    """Median wall and CPU seconds of ``repeats`` clicks, calling ``empty()`` before each."""
    wall, cpu = [], []
    for i in range(repeats):
        if empty is not None:
            empty()
        t, c = time.perf_counter(), time.process_time()
        explorer.set(requires_grad={"w1": i % 2 == 0})
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu)


def bench(layers: int, repeats: int, dpi: int) -> dict:
    scenario = chain(layers)
    explorer = GraphExplorer(scenario, theme="logistics", dpi=dpi)
    explorer.set(backward=True)
    new = clicks(explorer, repeats, lambda: empty_caches(False))
    bare = clicks(explorer, repeats, lambda: empty_caches(True))
    seen = clicks(explorer, repeats)
    wall, cpu = [], []
    for _ in range(repeats):
        empty_caches(True)
        explorer.set(theme="logistics")
        t, c = time.perf_counter(), time.process_time()
        explorer.set(theme="kitchen")
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    explorer.set(theme="logistics")
    theme = statistics.median(wall), statistics.median(cpu)
    size = explorer.sizes[explorer.theme]
    used = dpi or draw.auto_dpi(size)
    parts = [phases(scenario, Controls(requires_grad={"w1": i % 2 == 0}, backward=True), used,
                    size) for i in range(repeats)]
    build, drawn, png = (statistics.median(p[k] for p in parts) for k in range(3))
    pixels = int.from_bytes(explorer.png[16:20]), int.from_bytes(explorer.png[20:24])
    return {"nodes": len(explorer.run.graph), "new": new, "bare": bare, "theme": theme,
            "seen": seen, "build": build, "draw": drawn, "png": png, "dpi": used,
            "pixels": pixels, "css": draw.display_width(explorer.png)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--dpi", type=int, default=None,
                        help="render dpi (default: the explorer's own, course.draw.auto_dpi)")
    parser.add_argument("--only", choices=("first", "chain", "lessons", "kernel"), default=None,
                        help="time only one part")
    parser.add_argument("--processes", type=int, default=3,
                        help="fresh processes per row of the new-kernel table")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    run = {k: args.only in (None, k) for k in ("first", "chain", "lessons", "kernel")}
    firsts = first_pictures(args.repeats) if run["first"] else []
    rows = [bench(layers, args.repeats, args.dpi) for layers in (2, 5, 11)] if run["chain"] \
        else []
    lessons = bench_lessons(args.repeats) if run["lessons"] else []
    kernel = new_kernel(args.processes) if run["kernel"] else []
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}, "
          f"matplotlib {matplotlib.__version__}, dpi {args.dpi or 'auto'}, {args.repeats} repeats\n")
    if firsts:
        print("First picture (every course.draw cache empty) and the baseline, medians:\n")
        print("| explorer | graph nodes | first picture: CPU | first picture: wall | baseline: CPU "
              "| baseline: wall | ratio (CPU) | ratio (wall) | with its widgets: CPU | "
              "PNG pixels (dpi) |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in firsts:
            print(f"| {r['name']} | {r['nodes']} | {r['first_cpu'] * 1e3:.0f} ms | "
                  f"{r['first_wall'] * 1e3:.0f} ms | {r['base_cpu'] * 1e3:.0f} ms | "
                  f"{r['base_wall'] * 1e3:.0f} ms | {r['first_cpu'] / r['base_cpu']:.2f} | "
                  f"{r['first_wall'] / r['base_wall']:.2f} | {r['full_cpu'] * 1e3:.0f} ms | "
                  f"{r['pixels'][0]}x{r['pixels'][1]} ({r['dpi']}) |")
        print()
    if lessons:
        print("| lesson explorer | graph nodes | median, first picture + clicks: CPU | same: wall "
              "| first picture: CPU | first picture: wall | worst (wall) |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in lessons:
            print(f"| {r['name']} | {r['nodes']} | {r['cpu'] * 1e3:.0f} ms | "
                  f"{r['median'] * 1e3:.0f} ms | {r['first_cpu'] * 1e3:.0f} ms | "
                  f"{r['first'] * 1e3:.0f} ms | {r['worst'] * 1e3:.0f} ms |")
        print()
    if rows:
        print("| nodes | new state: CPU | new state: wall | nothing cached: CPU | nothing cached: "
              "wall | first theme switch: CPU | first theme switch: wall | seen before (wall) "
              "| build | draw | PNG encode | PNG pixels (dpi) | shown at (CSS px) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['nodes']} | {r['new'][1] * 1e3:.0f} ms | {r['new'][0] * 1e3:.0f} ms | "
                  f"{r['bare'][1] * 1e3:.0f} ms | {r['bare'][0] * 1e3:.0f} ms | "
                  f"{r['theme'][1] * 1e3:.0f} ms | {r['theme'][0] * 1e3:.0f} ms | "
                  f"{r['seen'][0] * 1e3:.1f} ms | {r['build'] * 1e3:.1f} ms | "
                  f"{r['draw'] * 1e3:.1f} ms | {r['png'] * 1e3:.1f} ms | "
                  f"{r['pixels'][0]}x{r['pixels'][1]} ({r['dpi']}) | {r['css']} |")
        print()
    if kernel:
        print(f"New kernel (a fresh process each, medians of {args.processes}; CPU / wall):\n")
        keys = [k.split(":")[0] for k in kernel[0] if k.endswith(": cpu")]
        print("| explorer | " + " | ".join(keys) + " | ratio (CPU) |")
        print("|---|" + "---:|" * (len(keys) + 1))
        for r in kernel:
            cells = [f"{r[k + ': cpu'] * 1e3:.0f} / {r[k + ': wall'] * 1e3:.0f} ms" for k in keys]
            print(f"| {r['name']} | " + " | ".join(cells)
                  + f" | {r['picture: cpu'] / r['baseline: cpu']:.2f} |")


if __name__ == "__main__":
    main()
