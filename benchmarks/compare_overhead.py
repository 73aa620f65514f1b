"""How much of a compare run's wall time is orchestration.

Runs playbooks/compare.yml (baseline, then eagle3) through ansible-runner, as AWX does,
against one emulated node on localhost, then splits the wall time into:

* measurement: every level's warmup + window + drain, as the benchmark client timed it
  (``duration_s`` of each level in the results files);
* server start-up: from the launch of each mode's server to its first ready probe (the
  job events of ``Start the server`` and ``Wait for readiness``);
* orchestration: everything else (preflight, teardowns, script checks, flag checks, the
  comparison and the report, Ansible itself).

It prints the figures of the run, and the orchestration share the same orchestration time
would be at the seeds' settings (30 s warmup + 60 s window, 8 levels, 2 modes), which is
what a user runs. Target: orchestration under 10% of the wall time.

Run: .venv/bin/python benchmarks/compare_overhead.py [--levels 1,2,5,10] [--warmup-s 2] [--window-s 8]
Only processes this script started are signalled: the node folder is a scratch folder, the
teardown's kill patterns are that folder, and the cleanup kills only what the folder recorded.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "compare"))
sys.path.insert(0, str(ROOT / "tests"))  # specbench_testkit, which compare_kit builds on
sys.path.insert(0, str(ROOT / "collections"))

from compare_kit import node_vars, run_playbook  # noqa: E402
from specbench_testkit import free_port, inventory, kill_node_servers  # noqa: E402

SEEDS = {"levels": 8, "warmup_s": 30.0, "window_s": 60.0, "modes": 2}


def event_times(run) -> dict:
    """Seconds of server start-up per (host, launch), from the job events."""
    def ts(ev):
        return datetime.datetime.fromisoformat(ev["created"]).timestamp()

    starts, readies = [], []
    for ev in run.events:
        task = ev.get("event_data", {}).get("task", "")
        if ev.get("event") == "runner_on_start" and task.endswith("Start the server"):
            starts.append(ts(ev))
        if ev.get("event") == "runner_on_ok" and task.endswith("Wait for readiness"):
            readies.append(ts(ev))
    return {"startups": [r - s for s, r in zip(sorted(starts), sorted(readies), strict=False)]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--levels", default="1,2,5,10", help="concurrency levels (default %(default)s)")
    p.add_argument("--warmup-s", type=float, default=2.0, help="warmup per level (default %(default)s)")
    p.add_argument("--window-s", type=float, default=8.0, help="measurement window per level (default %(default)s)")
    p.add_argument("--time-scale", type=float, default=0.25, help="emulator time scale (default %(default)s)")
    p.add_argument("--load-s", type=float, default=4.0, help="emulated model-load seconds (default %(default)s)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (results, runner artifacts)")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]

    scratch = Path(tempfile.mkdtemp(prefix="specbench-compare-overhead-"))
    node = scratch / "node"
    host = node_vars(node, free_port(), time_scale=args.time_scale, sglang_server_emulator_load_seconds=args.load_s,
                     bench_concurrency=levels, bench_warmup_s=args.warmup_s, bench_window_s=args.window_s)
    t0 = time.monotonic()
    try:
        run = run_playbook(scratch, "playbooks/compare.yml", inventory({"node": host}),
                           extravars={"results_dir": str(scratch / "results"), "run_id": "overhead"}, timeout=1800)
    finally:
        kill_node_servers(node)
    wall = time.monotonic() - t0
    if run.rc != 0:
        print(run.stdout[-3000:])
        print(f"compare.yml failed (rc {run.rc}); scratch folder kept: {scratch}")
        return 1
    run_dir = scratch / "results" / "overhead" / "node"
    measured, windows = 0.0, 0.0
    for mode in ("baseline", "eagle3"):
        for level in json.loads((run_dir / f"{mode}.json").read_text())["levels"]:
            measured += float(level.get("duration_s") or 0.0)
            windows += float(level.get("window_s") or 0.0) + float(level.get("warmup_s") or 0.0)
    startup = sum(event_times(run)["startups"])
    orchestration = wall - measured - startup
    share = orchestration / wall
    seeds_measure = SEEDS["modes"] * SEEDS["levels"] * (SEEDS["warmup_s"] + SEEDS["window_s"])
    seeds_share = orchestration / (orchestration + seeds_measure + startup)
    summary = json.loads((run_dir / "summary.json").read_text())
    print(f"compare.yml, 2 modes x levels {levels}, warmup {args.warmup_s:g} s + window {args.window_s:g} s per level, "
          f"emulator time scale {args.time_scale:g}, load {args.load_s:g} s")
    print(f"  wall time                    {wall:8.1f} s")
    print(f"  measurement (client-timed)   {measured:8.1f} s   (warmups + windows asked: {windows:.1f} s)")
    print(f"  server start-up (2 launches) {startup:8.1f} s")
    print(f"  orchestration                {orchestration:8.1f} s   = {100 * share:.1f}% of the wall time")
    print(f"  at the seeds' settings (8 levels x (30 s + 60 s) x 2 modes = {seeds_measure:.0f} s of measurement), the "
          f"same orchestration is {100 * seeds_share:.1f}% of the wall time (target: under 10%)")
    print(f"  crossover found: {summary['crossover_text']}")
    if args.keep:
        print(f"  scratch folder: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
