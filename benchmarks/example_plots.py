"""Regenerate the docs' example plots and their captions from a real compare run on the emulator.

Runs playbooks/compare.yml (baseline, then eagle3; one launch per mode, no added rounds) through
ansible-runner against one emulated node on localhost, the emulator's Llama-3.1-8B/H100 profile by
default, then copies that run's own plots to docs/compare-example-throughput.png and
docs/compare-example-speedup.png and writes docs/compare-example.md: the captions, written from the
run's summary (its verdict per level with the family-wise interval that decides it, the bracket, the
recommendation), with the command, the date and where the figures come from (*emulated*).

The plots are the report's own (plugins/module_utils/report/render.py): the speedup plot draws each
level's family-wise interval wide and pale (it decides the verdict) beside the level's own 95%
interval, and both plots shade the bracket of the crossing (the last level that clearly pays to the
first that clearly loses).

Run: .venv/bin/python benchmarks/example_plots.py [--levels 1,4,16,32,64] [--time-scale 4] [--dry-run]
The emulated node lives in a scratch folder (its teardown's kill patterns too): the cleanup signals
only the servers that folder recorded. A level the machine did not keep up with writes nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "compare"), str(ROOT / "tests"), str(ROOT / "collections")]  # the test kit

from compare_kit import node_vars, run_playbook  # noqa: E402
from specbench_testkit import free_port, inventory, kill_node_servers  # noqa: E402

DOCS = ROOT / "docs"
PLOTS = {"throughput.png": "compare-example-throughput.png", "speedup.png": "compare-example-speedup.png"}


def _interval(lv: dict, key: str) -> str:
    ci = lv.get(key)
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "(none)"


def captions(summary: dict, command: str, profile: str, date: str) -> str:
    """docs/compare-example.md from the run's summary.json: every sentence is the run's own."""
    spec, base = summary.get("spec_mode"), summary.get("baseline_mode")
    lines = [
        "# The example plots",
        "",
        f"*Emulated*: the emulator's {profile} profile on one node on localhost, compare.yml with {base} and "
        f"{spec}, one launch per mode, on {date}. Written by `{command}`, with the plots, from that run's "
        "`summary.json`; run it again to regenerate all three files.",
        "",
        "![Throughput of the baseline and EAGLE-3 against concurrency](compare-example-throughput.png)",
        "",
        "**Throughput**: output tokens per second of each mode at each level, with each level's 95% interval; "
        "the shaded band is the crossing's bracket.",
        "",
        "![Speedup of EAGLE-3 over the baseline against concurrency](compare-example-speedup.png)",
        "",
        "**Speedup**: the wide pale bar at each level is the family-wise interval (all levels at once), the one "
        "the verdict reads; the thin bar with caps is the level's own 95% interval, which decides nothing; the "
        "shaded band is the crossing's bracket.",
        "",
        "| C | speedup | family-wise interval (decides) | this level's 95% | verdict |",
        "|---:|---:|---|---|---|",
    ]
    for lv in summary.get("levels") or []:
        speedup = "-" if lv.get("speedup") is None else f"{lv['speedup']:.3f}"
        lines.append(f"| {lv['concurrency']:g} | {speedup} | {_interval(lv, 'speedup_ci_family')} | "
                     f"{_interval(lv, 'speedup_ci95')} | {lv.get('verdict')} |")
    lines += [
        "",
        f"**Crossover ({(summary.get('crossover_status') or 'unknown').replace('_', ' ')})**: "
        f"{summary.get('crossover_text')}.",
        "",
        f"**Recommendation**: {summary.get('recommendation')}",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--profile", default="llama-3.1-8b-1x-h100", help="emulator profile (default %(default)s)")
    p.add_argument("--levels", default="1,4,16,32,64", help="concurrency levels (default %(default)s)")
    p.add_argument("--tokens", type=int, default=64, help="input and output tokens per request (default %(default)s)")
    p.add_argument("--warmup-s", type=float, default=1.5, help="warmup per level (default %(default)s)")
    p.add_argument("--window-s", type=float, default=4.0, help="measurement window per level (default %(default)s)")
    p.add_argument("--time-scale", type=float, default=4.0,
                   help="emulator time scale: above 1 slows it so that a loaded machine keeps up (default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="run and print the captions, write nothing under docs/")
    args = p.parse_args()
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    command = ".venv/bin/python benchmarks/example_plots.py" + "".join(
        f" --{k.replace('_', '-')} {v}" for k, v in (("profile", args.profile), ("levels", args.levels),
                                                    ("time_scale", args.time_scale)))

    scratch = Path(tempfile.mkdtemp(prefix="specbench-example-plots-"))
    node = scratch / "node"
    host = node_vars(node, free_port(), args.profile, args.time_scale, sglang_server_tp_size=1,
                     bench_concurrency=levels, bench_input_len=args.tokens, bench_output_len=args.tokens,
                     bench_warmup_s=args.warmup_s, bench_window_s=args.window_s)
    try:
        run = run_playbook(scratch, "playbooks/compare.yml", inventory({"node": host}),
                           extravars={"results_dir": str(scratch / "results"), "run_id": "example",
                                      "compare_plots": True}, timeout=1800)
    finally:
        kill_node_servers(node)
    host_dir = scratch / "results" / "example" / "node"
    if run.rc != 0 or not (host_dir / "summary.json").is_file():
        print(run.stdout[-4000:])
        print(f"compare.yml failed (rc {run.rc}): nothing written; scratch kept in {scratch}", file=sys.stderr)
        return 1
    summary = json.loads((host_dir / "summary.json").read_text())
    saturated = [lv["concurrency"] for lv in summary.get("levels") or [] if lv.get("saturated")]
    if saturated:
        print(f"the machine did not keep up at C={saturated}: raise --time-scale; nothing written (scratch {scratch})",
              file=sys.stderr)
        return 1
    text = captions(summary, command, args.profile, datetime.date.today().isoformat())
    print(text)
    if not args.dry_run:
        for name, dest in PLOTS.items():
            shutil.copyfile(host_dir / name, DOCS / dest)
        (DOCS / "compare-example.md").write_text(text, encoding="utf-8")
        print("written: " + ", ".join(f"docs/{d}" for d in (*PLOTS.values(), "compare-example.md")))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
