"""Time to a crossover of hi/lo <= 1.3: refinement against a fixed sweep dense enough (EMULATOR figures).

Runs the emulator (files/sglang_emulator, profile llama-3.1-8b-1x-h100, crossover near C=50)
and the benchmark client (plugins/module_utils/specbench_client) directly, one fresh server per
mode and measurement pass, as compare.yml does, without Ansible's overhead (the same for both
strategies). Two strategies, each to a crossover whose 95% interval has hi/lo <= --ratio:

* refinement: two levels far apart (--start), then rounds of specbench_compare.refine_plan
  (geometric midpoints of the bracket, unclear levels again), both modes per round, pooled;
* fixed sweep: geometric grids between the same two ends, 3, 5, 9, 17 ... levels, each grid a
  fresh pass, until one reaches the same width. Its time counts only the grid that got there
  (a user who knew the density in advance); the time of every grid tried is printed too.

Prints wall seconds, levels measured per mode and the interval each strategy reached. These
are emulator figures: the emulator's time scale and a loaded machine set them, not a GPU.

Run: .venv/bin/python benchmarks/refine_time_to_crossover.py [--start 20,80] [--ratio 1.3]
     [--time-scale 3] [--warmup-s 1] [--window-s 4]
Only processes this script started are signalled (the emulator's own process group and the
holders of its scratch device folder).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "files"))

from specbench_testkit import Emulator  # noqa: E402

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp  # noqa: E402

PROFILE = "llama-3.1-8b-1x-h100"
MODES = {"baseline": [], "eagle3": ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "test/draft"]}

# The benchmark client from its package folder (the node runs the same cli.main() from its zipapp).
CLIENT = [sys.executable, "-c", "import sys; from specbench_client.cli import main; sys.exit(main())"]


def measure(tmp: Path, mode: str, levels: list[int], args) -> dict:
    """One fresh server in ``mode``, the client over ``levels``; the results dict."""
    emu = Emulator(tmp, ["--emulator-profile", PROFILE, "--tp-size", "1", "--enable-metrics",
                         "--max-running-requests", "256", "--mem-fraction-static", "0.88", *MODES[mode]],
                   args.time_scale, False)
    out = tmp / f"{mode}-{time.monotonic_ns()}.json"
    try:  # started without waiting, so that an interrupt while it starts still stops it
        emu.wait_ready()
        env = dict(os.environ, PYTHONPATH=str(ROOT / "plugins" / "module_utils"))
        cmd = [*CLIENT, "--base-url", emu.base_url, "--api", "native",
               "--concurrency", ",".join(map(str, levels)), "--input-len", str(args.length),
               "--output-len", str(args.length), "--warmup-s", str(args.warmup_s), "--window-s", str(args.window_s),
               "--output", str(out)]
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=900)
    finally:
        emu.stop()
    data = json.loads(out.read_text())
    data.setdefault("mode", mode)
    return data


def summarize(runs: dict[str, list]) -> dict:
    results = {mode: cmp.pool_runs(found) for mode, found in runs.items()}
    return cmp.summarize_host(results, "bench", "bench", modes=["baseline", "eagle3"])


def width(summary: dict) -> float:
    lo, hi = summary.get("crossover_ci95") or (None, None)
    return hi / lo if lo and hi else math.inf


def refinement(tmp: Path, args) -> dict:
    t0 = time.monotonic()
    runs: dict[str, list] = {m: [] for m in MODES}
    levels = list(args.start)
    measured: set[int] = set()
    for round_no in range(args.max_rounds + 1):
        for mode in MODES:
            runs[mode].append((None if round_no == 0 else f"refine{round_no}", measure(tmp, mode, levels, args)))
        measured |= set(levels)
        summary = summarize(runs)
        comp = summary["comparisons"]["eagle3"]
        plan = cmp.refine_plan(comp, ratio=args.ratio, max_new=args.max_rounds, level_cost_s=args.warmup_s + args.window_s)
        print(f"  refinement round {round_no}: C={levels} -> crossover {summary['crossover_concurrency']} "
              f"{summary['crossover_ci95']} (hi/lo {width(summary):.2f}); {plan['text'][:120]}")
        if plan["done"]:
            break
        levels = plan["levels"]
    return {"seconds": time.monotonic() - t0, "levels": sorted(measured), "summary": summary}


def fixed(tmp: Path, args) -> dict:
    lo, hi = args.start
    tried = []
    t_all = time.monotonic()
    for n in (3, 5, 9, 17, 33):
        grid = sorted({int(round(lo * (hi / lo) ** (i / (n - 1)))) for i in range(n)})
        t0 = time.monotonic()
        runs = {mode: [(None, measure(tmp, mode, grid, args))] for mode in MODES}
        summary = summarize(runs)
        secs = time.monotonic() - t0
        tried.append((len(grid), secs, width(summary)))
        print(f"  fixed grid of {len(grid)} levels: {secs:.0f} s, crossover {summary['crossover_concurrency']} "
              f"{summary['crossover_ci95']} (hi/lo {width(summary):.2f})")
        if width(summary) <= args.ratio:
            return {"seconds": secs, "levels": grid, "summary": summary, "tried": tried,
                    "all_seconds": time.monotonic() - t_all}
    return {"seconds": math.inf, "levels": [], "summary": None, "tried": tried, "all_seconds": time.monotonic() - t_all}


def _stop_on_sigterm(signum, frame) -> None:
    """SIGTERM unwinds like Ctrl-C: the finally blocks stop the emulator this script started."""
    del frame
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--start", default="20,80", help="the two starting levels (default %(default)s)")
    p.add_argument("--ratio", type=float, default=1.3, help="target hi/lo of the crossover interval")
    p.add_argument("--time-scale", type=float, default=3.0, help="emulator time scale (default %(default)s)")
    p.add_argument("--length", type=int, default=32, help="input and output tokens (default %(default)s)")
    p.add_argument("--warmup-s", type=float, default=1.0)
    p.add_argument("--window-s", type=float, default=4.0)
    p.add_argument("--max-rounds", type=int, default=4)
    args = p.parse_args()
    args.start = [int(x) for x in args.start.split(",")]
    with tempfile.TemporaryDirectory(prefix="specbench-refine-") as scratch:
        tmp = Path(scratch)
        print(f"EMULATOR figures ({PROFILE}, time scale {args.time_scale}, {args.length}/{args.length} tokens, "
              f"warmup {args.warmup_s} s + window {args.window_s} s per level), target hi/lo <= {args.ratio}")
        ref = fix = None
        stopped = None
        try:
            ref = refinement(tmp, args)
            fix = fixed(tmp, args)
        except KeyboardInterrupt as stop:
            stopped = str(stop) or "Ctrl-C"
            print(f"interrupted ({stopped}): the emulator this script started was stopped; the figures reached so far")
    if ref is None:
        print("refinement: interrupted before it finished, no figure")
    else:
        rs = ref["summary"]
        print(f"refinement: {ref['seconds']:.0f} s wall, {len(ref['levels'])} levels per mode {ref['levels']}, "
              f"crossover {rs['crossover_concurrency']} {rs['crossover_ci95']} (hi/lo {width(rs):.2f})")
    if fix is None:
        print("fixed sweep: interrupted before a grid reached the ratio, no figure (the grids tried are above)")
    elif fix["summary"]:
        fs = fix["summary"]
        print(f"fixed sweep: {fix['seconds']:.0f} s wall for the grid that reached it ({len(fix['levels'])} levels per "
              f"mode), {fix['all_seconds']:.0f} s for every grid tried; crossover {fs['crossover_concurrency']} "
              f"{fs['crossover_ci95']} (hi/lo {width(fs):.2f})")
    else:
        print(f"fixed sweep: no grid tried reached hi/lo <= {args.ratio} ({fix['all_seconds']:.0f} s spent)")
    if stopped:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
