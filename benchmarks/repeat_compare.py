"""The same compare twice in a row on one node: do the intervals overlap, and do the verdicts agree?

Issue 36's test of its own outcome: "the same compare.yml on vLLM's CPU build, run twice in a row, read
C=1 1.51 [1.43, 1.61] then 1.73 [1.62, 1.86], and C=16 1.58 [1.50, 1.67] then 1.25 [1.22, 1.29]: 95%
intervals that do not overlap". Runs playbooks/compare.yml twice on one node with the defaults
(``compare_launches: auto``: the first run launches each mode twice, A B B A, and stores the node's noise
floor; the second reads it and launches once) through ansible-runner, as AWX runs it, and prints per
level both runs' speedups with their per-level 95% and family-wise intervals, whether the 95% intervals
overlap, and whether the verdicts contradict (one run ``pays`` where the other ``loses``).

* ``--engine vllm`` (the default): REAL ENGINE ON CPU, vLLM's CPU build (.venv-vllm,
  tests/vllm/make_venv.sh) with the tiny local model (tests/vllm/make_models.py), baseline against
  n-gram, C = 1, 4, 16 on loopback; its figures vary 30-70% from run to run on 2 cores, which is the
  point: both runs are taken in one window, one after the other.
* ``--engine emulator``: EMULATOR figures, the seeds' Kimi-K2.5 node at time scale 0.1, baseline
  against EAGLE-3, with the emulator's default launch variation (2%).

The default design includes sequential launches (``compare_max_launches``): a level left unclear is measured
again in added rounds, and the run says how many launches each level got.

Run: .venv/bin/python benchmarks/repeat_compare.py [--engine vllm|emulator] [--levels 1,4,16]
     [--window-s 5] [--runs 2] [--prompts synthesized|repetitive]
Only processes this script started are signalled (each node's own recorded servers and fake device
folder; tests/specbench_testkit.kill_node_servers, tests/vllm/vllmkit.kill_recorded).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("tests", "tests/compare", "tests/vllm", "files"):
    sys.path.insert(0, str(ROOT / sub))

import specbench_testkit as kit  # noqa: E402


def run_twice(args, tmp: Path) -> tuple[list[dict], str]:
    levels = [int(c) for c in args.levels.split(",")]
    defaults = {"compare_launches": kit.role_default("compare", "compare_launches"), "compare_plots": False,
                "compare_max_launches": kit.role_default("compare", "compare_max_launches"),
                "results_dir": str(tmp / "results"), "bench_concurrency": levels, "bench_warmup_s": args.warmup_s,
                "bench_window_s": args.window_s}
    if args.engine == "vllm":
        import vllmkit  # noqa: PLC0415 - only this engine needs it

        if vllmkit.venv_missing():
            sys.exit(f"repeat_compare: {vllmkit.venv_missing()}")
        vllmkit.make_models()
        inv = vllmkit.node_vars(tmp, kit.free_port())
        extra = {**vllmkit.bench_vars(tmp), **defaults, "compare_modes": ["baseline", "ngram"], "bench_api": "chat"}
        if args.prompts == "repetitive":
            extra["bench_prompts_file"] = str(repetitive_prompts(tmp / "repetitive.jsonl"))
        spec, node, source = "ngram", tmp / "node", "REAL ENGINE ON CPU (vLLM's CPU build, tiny model)"

        def stop():
            vllmkit.kill_recorded(node)
    else:
        from compare_kit import node_vars  # noqa: PLC0415

        node = tmp / "node"
        inv = kit.inventory({"localhost": node_vars(node, kit.free_port(), bench_input_len=64, bench_output_len=64)})
        extra = {**defaults, "sglang_server_emulator_launch_sd":
                 kit.role_default("sglang_server", "sglang_server_emulator_launch_sd")}
        spec, source = "eagle3", "EMULATOR (the seeds' Kimi-K2.5 node, time scale 0.1)"

        def stop():
            kit.kill_node_servers(node)
    found = []
    try:
        for n in range(1, args.runs + 1):
            run = kit.run_playbook(tmp, "playbooks/compare.yml", inv, {**extra, "run_id": f"run{n}"}, timeout=3600)
            decided = run.task("Decide the launches per mode", "localhost")
            summary_path = tmp / "results" / f"run{n}" / "localhost" / "summary.json"
            summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
            found.append({"rc": run.rc, "launches": decided.get("launches"), "why": decided.get("msg"),
                          "levels": {lv["concurrency"]: lv for lv in summary.get("levels") or []},
                          "held": (summary.get("launch_variation") or {}).get("held"),
                          "stop": summary.get("sequential_stop"),
                          "tail": run.stdout[-2000:] if run.rc else ""})
    finally:
        stop()
    return found, f"{source}, baseline against {spec}"


def repetitive_prompts(path: Path, count: int = 32) -> Path:
    """Prompts that repeat one short phrase many times: what n-gram speculation (prompt lookup) is made for,
    so that its effect is large and the compare should decide it."""
    import random  # noqa: PLC0415

    rng = random.Random(49)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo",
             "lima", "mike", "november", "oscar", "papa"]
    with path.open("w", encoding="utf-8") as fh:
        for _ in range(count):
            phrase = " ".join(rng.choice(words) for _w in range(8))
            fh.write(json.dumps({"prompt": "Repeat this line again and again: " + " ".join([phrase] * 12)}) + "\n")
    return path


def fmt(lv: dict | None, key: str) -> str:
    ci = (lv or {}).get(key)
    return f"{lv['speedup']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if lv and lv.get("speedup") and ci else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=("vllm", "emulator"), default="vllm")
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--prompts", choices=("synthesized", "repetitive"), default="synthesized",
                    help="vllm: the benchmark's own synthesized prompts, or prompts repeating one phrase (n-gram's case)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="specbench-repeat-") as tmp:
        runs, source = run_twice(args, Path(tmp))
    print(f"repeat_compare: {source}; compare.yml {len(runs)} times in a row on one node, default design, "
          f"{args.prompts} prompts")
    for n, run in enumerate(runs, 1):
        print(f"  run {n}: rc {run['rc']}, {run['launches']} launch(es) per mode planned, launch variation held "
              f"{run['held']}: {run['why']}; sequential: {run['stop']}")
        if run["tail"]:
            print("    " + run["tail"].replace("\n", "\n    "))
    print("  level | run: speedup [per-level 95%] / [family-wise] verdict ... | 95% overlap | verdicts contradict")
    bad = 0
    for conc in sorted({c for run in runs for c in run["levels"]}):
        lvs = [run["levels"].get(conc) for run in runs]
        cells = [f"{fmt(lv, 'speedup_ci95')} / {fmt(lv, 'speedup_ci_family').split(' ', 1)[-1]} "
                 f"{(lv or {}).get('verdict', 'missing')} ({(lv or {}).get('launches', 0)} launches)" for lv in lvs]
        cis = [lv.get("speedup_ci95") for lv in lvs if lv and lv.get("speedup_ci95")]
        overlap = len(cis) == len(lvs) and max(c[0] for c in cis) <= min(c[1] for c in cis)
        verdicts = {(lv or {}).get("verdict") for lv in lvs}
        contradict = {"pays", "loses"} <= verdicts
        bad += (not overlap) + contradict
        print(f"  C={conc:<4} | " + " | ".join(cells) + f" | {'yes' if overlap else 'NO'} | "
              f"{'YES' if contradict else 'no'}")
    print(f"== {'every level overlaps and no verdict contradicts' if not bad else f'{bad} problem(s) above'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
