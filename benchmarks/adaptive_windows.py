"""Time to an answer with fixed vs adaptive windows, on the seeds' levels (EMULATOR figures, or
REAL ENGINE ON CPU with --engine vllm).

Runs the emulator (files/sglang_emulator, its default profile: the seeds' Kimi-K2.5 node, tp 8)
and the benchmark client (plugins/module_utils/specbench_client) directly, one fresh server per
mode and strategy, over the seeds' levels 1, 2, 5, 10, 30, 70, 100, 250, baseline and EAGLE-3.
With --engine vllm the server is vLLM's CPU build (.venv-vllm, tests/vllm/make_venv.sh) with the
tiny local model of tests/vllm/make_models.py, baseline and n-gram (k = 4), on loopback:

* fixed: every level measures --window-s after its warmup;
* adaptive: every level measures until its interval's half-width is within --target of its
  figure and it has lasted --min-requests request durations, or until --max-s
  (settings target_rel_ci, window_min_requests, window_max_s).

Prints per strategy the wall seconds, and per level and mode the window used, the throughput
interval's hi/lo reached, whether the target was reached, the speedup with its interval's hi/lo
and whether the machine kept up (``saturated``). These are emulator figures: the emulator's time
scale and this machine's load set them, not a GPU. The throughput figures are at the emulated
node's speed (the client converts them; wall-clock ones in ``wall_clock_*``).

Run: .venv/bin/python benchmarks/adaptive_windows.py [--levels 1,2,5,10,30,70,100,250]
     [--time-scale 0.1] [--warmup-s 3] [--window-s 6] [--target 0.03] [--max-s 24]
     [--engine emulator|vllm]
Only processes this script started are signalled (the emulator's own process group and the
holders of its scratch device folder; vLLM's own session).
"""

from __future__ import annotations

import argparse
import json
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

from specbench_testkit import Emulator  # noqa: E402

from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import ratio_ci  # noqa: E402

MODES = {"baseline": [], "eagle3": ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "test/draft"]}
VLLM_MODES = {"baseline": [], "eagle3": ["--speculative-config",  # n-gram stands in for the speculative mode
                                         '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}']}
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
VLLM_MODEL = ROOT / "tests" / ".tmp" / "vllm-models" / "tiny"

# The benchmark client from its package folder (the node runs the same cli.main() from its zipapp).
CLIENT = [sys.executable, "-c", "import sys; from specbench_client.cli import main; sys.exit(main())"]


class VllmServer:
    """vLLM's CPU build with the tiny local model in its own session on a free loopback port
    (settings of tests/vllm/cpu.yml); stop() kills that session and nothing else."""

    def __init__(self, tmp: Path, flags: list[str]):
        from specbench_testkit import free_port
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"vllm-{self.port}.log", "wb")  # noqa: SIM115 - closed in stop()
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   VLLM_NO_USAGE_STATS="1")
        self.proc = subprocess.Popen(
            [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(VLLM_MODEL),
             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", "1024",
             "--max-num-seqs", "32", "--max-num-batched-tokens", "2048", "--enforce-eager",
             "--distributed-executor-backend", "uni", *flags],
            stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def wait_ready(self, timeout: float = 600.0) -> None:
        import urllib.request
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode}; its log: {self.log.name}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1.0)
        raise RuntimeError(f"vLLM not ready after {timeout:.0f} s; its log: {self.log.name}")

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the API server, EngineCore, Worker
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


def measure(tmp: Path, mode: str, args, adaptive: bool) -> tuple[dict, float]:
    """One fresh server in ``mode``, the client over the levels; (results, wall seconds of the sweep)."""
    if args.engine == "vllm":
        server = VllmServer(tmp, VLLM_MODES[mode])
        lengths = ["--input-len", "128", "--output-len", "64", "--api", "completions"]
    else:
        server = Emulator(tmp, ["--tp-size", "8", "--enable-metrics", *MODES[mode]], args.time_scale, False)
        lengths = ["--input-len", "256", "--output-len", "256"]
    out = tmp / f"{mode}-{time.monotonic_ns()}.json"
    try:  # started without waiting, so that an interrupt while it starts still stops it
        server.wait_ready()
        env = dict(os.environ, PYTHONPATH=str(ROOT / "plugins" / "module_utils"))
        cmd = [*CLIENT, "--base-url", server.base_url,
               "--concurrency", ",".join(map(str, args.levels)), *lengths,
               "--warmup-s", str(args.warmup_s), "--window-s", str(args.window_s), "--output", str(out)]
        if adaptive:
            cmd += ["--target-rel-ci", str(args.target), "--window-max-s", str(args.max_s),
                    "--window-min-requests", str(args.min_requests)]
        t0 = time.monotonic()
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=3600)
        seconds = time.monotonic() - t0
    finally:
        server.stop()
    return json.loads(out.read_text()), seconds


def hi_lo(ci) -> float | None:
    return ci[1] / ci[0] if ci and ci[0] else None


def report(name: str, runs: dict, seconds: float) -> None:
    print(f"\n{name}: {seconds:.0f} s wall for both modes")
    print("    C | mode     | window used s | tok/s (node) [95%]        | hi/lo | target | speedup [95%] hi/lo | kept up")
    base = {lv["concurrency"]: lv for lv in runs["baseline"]["levels"]}
    for lv_e in runs["eagle3"]["levels"]:
        conc = lv_e["concurrency"]
        for mode, lv in (("baseline", base.get(conc)), ("eagle3", lv_e)):
            if lv is None:
                continue
            ci = lv.get("output_tok_per_s_ci95")
            window = lv.get("window") or {}
            target = ("-" if not window.get("adaptive") else "yes" if window.get("target_reached") else "NO")
            speed = ""
            if mode == "eagle3" and base.get(conc) and lv.get("output_tok_per_s") and base[conc].get("output_tok_per_s"):
                ratio, rci = ratio_ci(lv["output_tok_per_s"], ci, base[conc]["output_tok_per_s"],
                                      base[conc].get("output_tok_per_s_ci95"))
                speed = f"{ratio:.3f} " + (f"[{rci[0]:.3f}, {rci[1]:.3f}] {hi_lo(rci):.3f}" if rci and rci[0] else "[-]")
            interval = f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "[-]"
            ratio_text = f"{hi_lo(ci):.3f}" if hi_lo(ci) else "-"
            tok = lv.get("output_tok_per_s")
            print(f"  {conc:>3} | {mode:<8} | {lv.get('window_s') or 0:>13.2f} | "
                  f"{(tok or 0):>8.1f} {interval:<17} | {ratio_text:>5} | {target:>6} | {speed:<19} | "
                  + ("yes" if not lv.get("saturated") else "NO: " + "; ".join(lv["saturated"])))


def _stop_on_sigterm(signum, frame) -> None:
    """SIGTERM unwinds like Ctrl-C: the finally blocks stop the emulator this script started."""
    del frame
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--levels", default="1,2,5,10,30,70,100,250", help="levels (default: the seeds')")
    p.add_argument("--time-scale", type=float, default=0.1, help="emulator time scale (default %(default)s)")
    p.add_argument("--warmup-s", type=float, default=3.0)
    p.add_argument("--window-s", type=float, default=6.0, help="the fixed window, and the adaptive one planned")
    p.add_argument("--target", type=float, default=0.03, help="adaptive: the interval's half-width to reach")
    p.add_argument("--max-s", type=float, default=24.0, help="adaptive: the longest window")
    p.add_argument("--min-requests", type=int, default=5, help="adaptive: request durations at least")
    p.add_argument("--engine", choices=("emulator", "vllm"), default="emulator",
                   help="vllm: vLLM's CPU build with the tiny local model, baseline against n-gram")
    args = p.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]
    if args.engine == "vllm":
        print(f"REAL ENGINE ON CPU figures (vLLM CPU build, tiny random model, baseline vs n-gram k=4 in the "
              f"'eagle3' column, 128/64 tokens, completions API, levels {args.levels}, warmup {args.warmup_s} s; "
              f"fixed window {args.window_s} s; adaptive +-{100 * args.target:g}% after {args.min_requests} request "
              f"durations, at most {args.max_s} s), {os.cpu_count()} CPUs")
    else:
        print(f"EMULATOR figures (default profile, time scale {args.time_scale}, 256/256 tokens, levels {args.levels}, "
              f"warmup {args.warmup_s} s; fixed window {args.window_s} s; adaptive +-{100 * args.target:g}% after "
              f"{args.min_requests} request durations, at most {args.max_s} s), {os.cpu_count()} CPUs")
    if args.engine == "vllm" and not (VLLM_PYTHON.exists() and VLLM_MODEL.is_dir()):
        print("needs .venv-vllm (tests/vllm/make_venv.sh) and the tiny model (.venv-vllm/bin/python "
              "tests/vllm/make_models.py tests/.tmp/vllm-models)")
        return 2
    with tempfile.TemporaryDirectory(prefix="specbench-windows-") as scratch:
        tmp = Path(scratch)
        for name, adaptive in (("fixed windows", False), ("adaptive windows", True)):
            runs, total = {}, 0.0
            for mode in MODES:
                runs[mode], seconds = measure(tmp, mode, args, adaptive)
                total += seconds
            report(name, runs, total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
