"""Time to a decision: the default compare design against the old fixed one, on the seeds' levels
(EMULATOR figures: real ansible-playbook runs of playbooks/compare.yml against the emulator on this
machine, real processes on loopback; the emulator's time scale and this machine's load set the
seconds, not a GPU).

One emulated node (its own folder, port and device folder under a scratch folder), baseline and EAGLE-3 over
the seeds' levels 1, 2, 5, 10, 30, 70, 100, 250, compare runs in one window, each printed with its wall
seconds, its ratio to the old fixed grid, its launches per mode and its verdicts:

* ``old``: the fixed grid: one launch per mode (``compare_launches: 1``), no added launches
  (``compare_max_launches: 0``), the emulator's launches all alike; launch-to-launch variation is not in its
  intervals;
* ``first-planned``: the default's planned launches on a node without a noise floor (``compare_launches: auto``:
  two launches per mode, A B B A, the second at 2 of the levels, ``compare_noise_floor_levels``; the emulator's
  default launch variation, 2%), no added launches;
* ``first``: the default on another fresh node: the same, then sequential rounds at the levels left unclear
  (``compare_max_launches``, 6);
* ``first-every``: ``first-planned`` with the second launches at every level (``compare_noise_floor_levels: 0``);
* ``first-adaptive``: ``first-planned`` with adaptive windows (``bench_target_rel_ci`` ``--target``, at most the
  fixed window): a level stops once its interval is narrow enough;
* ``later``: the default again on ``first``'s node, which now has a floor: one launch per mode, then rounds.

Beside the times, the coverage and power each design gets are quoted from benchmarks/decision_coverage.py
(the cells ``launch``, ``floor2``, ``floor``, ``sequential``, ``power``; COMPUTED, seed 36): the time ratios
are measured here, the coverage and power there. ``--first-repeats N`` adds N more first runs of the default
on fresh nodes and counts how many read ``loses`` at every level from C=5 (the embedded default's question).
Amortised, a node pays ``first`` once per
``compare_noise_floor_max_age_days`` (30) and ``later`` for every other run.

Run: .venv/bin/python benchmarks/time_to_decision.py [--levels 1,2,5,10,30,70,100,250]
     [--time-scale 0.1] [--warmup-s 2] [--window-s 4] [--target 0.05] [--only old,first,...] [--first-repeats N]
Only processes this script started are signalled: the playbooks' teardown is scoped to each node's
own folder (gpu_kill_patterns) and its fake device folder, never the real /dev/nvidia*; after each run
tests/specbench_testkit.kill_node_servers stops what that node's folder recorded. The node's settings
are the compare tests' (tests/compare/compare_kit.node_vars).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("tests", "tests/compare", "files"):
    sys.path.insert(0, str(ROOT / sub))

import specbench_testkit as kit  # noqa: E402 - after the path set-up above
from compare_kit import node_vars  # noqa: E402

SEED_LEVELS = "1,2,5,10,30,70,100,250"

# From benchmarks/decision_coverage.py (seed 36, 1000 runs per cell), launch sd 0-5% per launch: the
# per-level 95% interval's coverage of the launch-population speedup and how often a tie at 8 levels
# reads pays or loses (COMPUTED). Quoted, not recomputed: run that script for the figures.
COVERAGE = {
    "old": "29.5-95.2% (95.2% only without launch variation; 46.5% at 3%), tie claims 3.9-79.1%",
    "first-planned": ("covers 95.6-100% at launch sd 0-5%, a tie claims in 0-2.4% (floor2, 500 runs per cell); a true "
                      "1.10x reads pays at C=1 in 19.3% at 3% launch sd (power, design fixed, 400 runs)"),
    "first": ("a tie claims in 0-4.2% at launch sd 0-5% (sequential, 400 runs per cell); a true 1.10x reads pays at "
              "C=1 in 86.3% at 3% launch sd, a true 1.04x in 71.8% at 1% (power, design default, 400 runs)"),
    "first-every": "95.0-99.6%, tie claims 0.1-1.2% (floor2, second launches at every level, 4000 runs per cell)",
    "first-adaptive": "as first-planned (the interval's method is the same; the windows end sooner)",
    "later": ("a tie claims in 0-5.0% at launch sd 0-5% (sequential, later runs, 400 runs per cell); each level's "
              "95% interval covers 94.9-100% (floor, 500 runs per cell)"),
}


def compare(scratch: Path, node: Path, run_id: str, extra: dict, args) -> dict:
    """One compare.yml run through ansible-runner: wall seconds, rc, launches per mode and the verdicts."""
    hostvars = node_vars(node, kit.free_port(), time_scale=args.time_scale, bench_input_len=args.length,
                         bench_output_len=args.length, bench_warmup_s=args.warmup_s, bench_window_s=args.window_s,
                         bench_concurrency=[int(c) for c in args.levels.split(",")])
    extravars = {"results_dir": str(scratch / "results"), "run_id": run_id, "compare_plots": False, **extra}
    started = time.monotonic()
    try:
        # The host is named after its node: the noise floor is kept per host name (results/noise-floor/<host>.json).
        run = kit.run_playbook(scratch, "playbooks/compare.yml", kit.inventory({node.name: hostvars}), extravars,
                               timeout=args.timeout_s, home=scratch / "home")
    finally:
        kit.kill_node_servers(node)
    wall = time.monotonic() - started
    out = {"run": run_id, "wall_s": wall, "rc": run.rc}
    summary_path = scratch / "results" / run_id / node.name / "summary.json"
    if summary_path.is_file():
        found = json.loads(summary_path.read_text())
        levels = found.get("levels") or []
        out["launches"] = max((lv.get("launches") or 1 for lv in levels), default=None)
        out["twice"] = [lv["concurrency"] for lv in levels if (lv.get("launches") or 1) > 1]
        out["verdicts"] = " ".join(f"{lv['concurrency']}:{lv['verdict']}" for lv in levels)
        out["held"] = (found.get("launch_variation") or {}).get("held")
        out["decided"] = all(lv["verdict"] == "loses" for lv in levels if lv["concurrency"] >= 5)
    if run.rc:
        out["tail"] = run.stdout[-1500:]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default=SEED_LEVELS)
    ap.add_argument("--time-scale", type=float, default=0.1)
    ap.add_argument("--length", type=int, default=64, help="input and output tokens per request")
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--window-s", type=float, default=4.0)
    ap.add_argument("--target", type=float, default=0.05, help="first-adaptive: bench_target_rel_ci")
    ap.add_argument("--only", default="old,first-planned,first,later",
                    help="of old,first-planned,first,first-every,first-adaptive,later")
    ap.add_argument("--timeout-s", type=int, default=3600)
    ap.add_argument("--first-repeats", type=int, default=0,
                    help="more first runs of the default on fresh nodes: how many read loses at every level from C=5")
    args = ap.parse_args()
    wanted = args.only.split(",")
    print(f"time_to_decision: EMULATOR figures (compare.yml, levels {args.levels}, warmup {args.warmup_s:g} s, window "
          f"{args.window_s:g} s, time scale {args.time_scale:g}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}); coverage quoted from decision_coverage.py (COMPUTED)")
    sd = kit.role_default("sglang_server", "sglang_server_emulator_launch_sd")  # the default, as on a real node
    rounds = kit.role_default("compare", "compare_max_launches")
    designs = {
        "old": ("node-old", {"compare_launches": 1, "compare_max_launches": 0, "sglang_server_emulator_launch_sd": 0}),
        "first-planned": ("node-planned", {"compare_launches": "auto", "compare_max_launches": 0,
                                           "sglang_server_emulator_launch_sd": sd}),
        "first": ("node-default", {"compare_launches": "auto", "compare_max_launches": rounds,
                                   "sglang_server_emulator_launch_sd": sd}),
        "first-every": ("node-every", {"compare_launches": "auto", "compare_max_launches": 0,
                                       "sglang_server_emulator_launch_sd": sd, "compare_noise_floor_levels": 0}),
        "first-adaptive": ("node-adaptive", {"compare_launches": "auto", "compare_max_launches": 0,
                                             "sglang_server_emulator_launch_sd": sd,
                                             "bench_target_rel_ci": args.target, "bench_window_max_s": args.window_s}),
        "later": ("node-default", {"compare_launches": "auto", "compare_max_launches": rounds,
                                   "sglang_server_emulator_launch_sd": sd}),
    }
    with tempfile.TemporaryDirectory(prefix="specbench-ttd-") as tmp:
        scratch = Path(tmp)
        rows = []
        for name in ("old", "first-planned", "first", "first-every", "first-adaptive", "later"):
            if name not in wanted:
                continue
            node_name, extra = designs[name]
            row = compare(scratch, scratch / node_name, name, extra, args)
            rows.append(row)
            twice = ",".join(map(str, row.get("twice") or [])) or "none"
            print(f"  {name:15s} {row['wall_s']:7.1f} s  rc {row['rc']}  launches per mode up to {row.get('launches')} "
                  f"(pooled over more than one at C={twice})  launch variation held {row.get('held')}  loses at every "
                  f"level from C=5: {row.get('decided')}  {row.get('verdicts', '')}", flush=True)
            if row.get("tail"):
                print("    " + row["tail"].replace("\n", "\n    "))
        decided = [r for r in rows if r["run"] == "first"]
        for n in range(args.first_repeats):
            node_name, extra = designs["first"]
            row = compare(scratch, scratch / f"{node_name}-{n + 2}", f"first-{n + 2}", extra, args)
            decided.append(row)
            print(f"  first-{n + 2:<9d} {row['wall_s']:7.1f} s  rc {row['rc']}  launches per mode up to "
                  f"{row.get('launches')}  loses at every level from C=5: {row.get('decided')}  {row.get('verdicts', '')}",
                  flush=True)
        if decided:
            print(f"== first runs of the default on fresh nodes that read loses at every level from C=5: "
                  f"{sum(bool(r.get('decided')) for r in decided)} of {len(decided)}")
        base = next((r["wall_s"] for r in rows if r["run"] == "old"), None)
        print("== ratios to the old design (same window, same machine), and the coverage each design gets")
        for row in rows:
            ratio = f"{row['wall_s'] / base:.2f}x" if base else "n/a"
            print(f"  {row['run']:15s} {ratio:>6s}  {COVERAGE[row['run']]}")
        by = {r["run"]: r["wall_s"] for r in rows}
        if base and "first" in by and "later" in by:
            for n in (1, 4, 10):
                mean = (by["first"] + n * by["later"]) / (n + 1)
                print(f"  amortised, the floor run and {n} later run(s) per 30 days: {mean / base:.2f}x per run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
