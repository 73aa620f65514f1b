"""The serve proof under another load: held to the compare run's figures, or to its references measured
again just before the served launch (serve_measure_references)?

Issue 36's case: "On real vLLM (CPU build), the served Dynamic-SD schedule read 0.75x of the static n-gram
run at C=1 and C=4, measured at another time under another load." REAL ENGINE ON CPU: vLLM's CPU build
(.venv-vllm, tests/vllm/make_venv.sh) with the tiny local model (tests/vllm/make_models.py), on loopback,
through ansible-runner as AWX runs the playbooks:

1. compare.yml, baseline against n-gram at C = 1, 4, 16, with the defaults (two launches per mode on this
   new node: it stores the node's noise floor);
2. a busy loop of this script's own (``--hog`` processes spinning on the CPU: another job on the node)
   starts, and stays for both serve runs;
3. serve.yml with ``serve_measure_references: false``: the served configuration against the run's figures,
   measured before the load;
4. serve.yml with ``serve_measure_references: true`` (the default): against its references launched and
   measured again just before the served launch, under the same load;
5. the load stops; serve.yml -e serve_state=absent.

Printed per level for both proofs: the reference (mode, measured when), ratio [per-level 95%], verdict.
``serve_on_regression: keep`` in both (a rollback would launch another vLLM server). Figures vary 30-70%
between runs on 2 cores: what counts is the two proofs side by side, taken minutes apart under one load.

Run: .venv/bin/python benchmarks/serve_references.py [--levels 1,4,16] [--window-s 5] [--hog 1]
Only processes this script started are signalled (its busy loops; the node's own recorded servers through
tests/vllm/vllmkit.kill_recorded).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for sub in ("tests", "tests/vllm", "files"):
    sys.path.insert(0, str(ROOT / sub))

import specbench_testkit as kit  # noqa: E402


def spin() -> None:
    """Another job on the node: one core kept busy until terminated. SIGTERM's default action is put back first:
    the parent's Python handlers (ansible-runner installs some) would otherwise be inherited and keep it spinning."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    x = 0
    while True:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def proof_lines(doc: dict) -> list[str]:
    out = []
    for row in doc.get("levels") or []:
        ci = row.get("ratio_ci95")
        ratio = f"{row['ratio']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if row.get("ratio") and ci else "-"
        when = "measured just before" if row.get("reference_now") else "the compare run's"
        out.append(f"    C={row['concurrency']:<4} served {row.get('served_tok_per_s')} tok/s {row.get('served_ci95')} "
                   f"against {row.get('best_static_mode')} ({when}) {row.get('best_static_tok_per_s')}: {ratio} "
                   f"(windows alone {row.get('ratio_ci95_window')}) {row.get('verdict')}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", default="1,4,16")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--hog", type=int, default=1, help="busy-loop processes during both serve runs (0: none)")
    ap.add_argument("--keep", help="a folder to copy both serve.json documents to")
    args = ap.parse_args()
    import vllmkit  # noqa: PLC0415 - after the path set-up above

    if vllmkit.venv_missing():
        sys.exit(f"serve_references: {vllmkit.venv_missing()}")
    vllmkit.make_models()
    levels = [int(c) for c in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="specbench-serve-refs-") as tmp_name:
        tmp = Path(tmp_name)
        inv = vllmkit.node_vars(tmp, kit.free_port())
        extra = {**vllmkit.bench_vars(tmp), "results_dir": str(tmp / "results"), "run_id": "run1",
                 "compare_launches": kit.role_default("compare", "compare_launches"), "compare_plots": False,
                 "compare_modes": ["baseline", "ngram"], "bench_api": "chat", "bench_concurrency": levels,
                 "bench_warmup_s": args.warmup_s, "bench_window_s": args.window_s, "serve_on_regression": "keep"}
        hogs: list[multiprocessing.Process] = []
        docs, rcs = {}, {}
        try:
            run = kit.run_playbook(tmp / "compare", "playbooks/compare.yml", inv, extra, timeout=3600)
            rcs["compare"] = run.rc
            if run.rc:
                print(run.stdout[-3000:])
                return 1
            for _ in range(args.hog):
                hog = multiprocessing.Process(target=spin, daemon=True)
                hog.start()
                hogs.append(hog)
            for name, again in (("run's figures", False), ("references measured again", True)):
                served = kit.run_playbook(tmp / f"serve-{again}", "playbooks/serve.yml", inv,
                                          {**extra, "serve_measure_references": again}, timeout=3600)
                rcs[name] = served.rc
                path = tmp / "results" / "run1" / "localhost" / "serve.json"
                docs[name] = json.loads(path.read_text()) if path.is_file() else {}
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    (Path(args.keep) / f"serve-{again}.json").write_text(json.dumps(docs[name], indent=1))
                # Retired between the two: a configuration that runs already is proved where it runs (nothing
                # relaunched, no references measured), so the second proof starts from a node serving nothing.
                kit.run_playbook(tmp / f"absent-{again}", "playbooks/serve.yml", inv,
                                 {**extra, "serve_state": "absent"}, timeout=600)
        finally:
            for hog in hogs:
                hog.terminate()
                hog.join(5)
                if hog.is_alive():
                    hog.kill()
                    hog.join(5)
            vllmkit.kill_recorded(tmp / "node")
    print(f"serve_references: REAL ENGINE ON CPU (vLLM's CPU build, tiny model), baseline against n-gram at C={args.levels}"
          f"; {args.hog} busy loop(s) on the node during both serve runs, none during compare; rc {rcs}")
    for name, doc in docs.items():
        print(f"  proof held to the {name}: served {doc.get('mode')}, verified {doc.get('verified')}, "
              f"{doc.get('reference_measured')}; launch variation: {(doc.get('launch_variation') or {}).get('text')}")
        print("\n".join(proof_lines(doc)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
