"""Synthetic results files for the comparison tests, in the shape bench_sweep writes.

``level(...)`` builds one level; ``result(...)`` one ``<mode>.json``; ``analytic_results``
builds baseline and eagle3 files from the emulator's own performance model, so the
crossover the comparison finds can be held against ``model.crossover``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from sglang_emulator import model, profiles


def stats(mean: float, spread: float = 0.1) -> dict:
    return {"mean": mean, "p50": mean, "p90": mean * (1 + spread), "p99": mean * (1 + 2 * spread)}


def level(
    concurrency: int,
    tok_s: float | None,
    rel_half: float | None = 0.02,
    running: float | None = None,
    tpot_ms: float | None = None,
    accept: float | None = None,
    error: str | None = None,
    bottleneck: bool = False,
    queued: float = 0.0,
    failed: int = 0,
    per_stream: bool = True,
) -> dict:
    """One results level; per-stream speed and TPOT follow throughput / running streams."""
    running = running or concurrency
    lv: dict = {"concurrency": concurrency, "api": "chat", "error": error, "warnings": []}
    if tok_s is None:
        lv.update(output_tok_per_s=None, output_tok_per_s_ci95=None, requests_ok=0, requests_failed=failed or 10,
                  ttft_ms=None, itl_ms=None, tpot_ms=None, e2e_ms=None, accept_length=None)
        return lv
    stream = tok_s / running
    tpot = tpot_ms if tpot_ms is not None else 1000.0 / stream
    lv.update(
        output_tok_per_s=tok_s,
        output_tok_per_s_ci95=None if rel_half is None else [tok_s * (1 - rel_half), tok_s * (1 + rel_half)],
        ci_method="batch means, 10 batches of 1 s",
        output_tok_per_s_whole_run=tok_s * 0.97,
        request_per_s=tok_s / 256,
        requests_ok=100,
        requests_failed=failed,
        ttft_ms=stats(50.0),
        itl_ms=stats(tpot),
        tpot_ms=stats(tpot),
        e2e_ms=stats(50.0 + 255 * tpot),
        accept_length=accept,
        server_running={"mean": float(running), "max": running},
        server_queued={"mean": queued, "max": queued},
        client={"workers": 1, "cpu_percent": 20.0, "cpu_percent_max_worker": 20.0,
                "loop_busy_percent_max_worker": 10.0, "bottleneck": bottleneck},
    )
    if per_stream:
        lv["decode_tok_per_s_per_stream"] = stats(1000.0 / tpot)
    if bottleneck:
        lv["warnings"].append("client bottleneck: a client worker was 97% busy (of one core) during the window")
    return lv


def result(mode: str, levels: list[dict], settings: dict | None = None, server: dict | None = None,
           gpu: dict | None = None, concurrency: list[int] | None = None) -> dict:
    spec = mode != "baseline"
    bench = {"api": "chat", "input_len": 256, "output_len": 256, "warmup_s": 1.0, "window_s": 2.0, "repeats": 1,
             "batches": 10, "seed": 42, "requests": 0,
             "concurrency": concurrency if concurrency is not None else [lv["concurrency"] for lv in levels]}
    bench.update(settings or {})
    srv = {
        "version": "0.5.23",
        "speculative_algorithm": "EAGLE3" if spec else None,
        "max_running_requests": 256,
        "server_info": {"mem_fraction_static": 0.85, "max_running_requests": 256, "tp_size": 8,
                        "speculative_algorithm": "EAGLE3" if spec else None},
        "settings": {"mem_fraction_static": 0.85, "max_running_requests": 256, "tp_size": 8},
        "confounders": [],
        "command": ["python3", "-m", "sglang.launch_server", "--mode-" + mode],
    }
    srv.update(server or {})
    return {"mode": mode, "engine": "emulator", "settings": bench, "server": srv, "levels": levels,
            "gpu": gpu or {"before": {"clean": True}, "after": {"clean": True}}, "error": None}


def analytic_results(profile: str, levels: list[int], rel_half: float = 0.01, input_len: int = 256,
                     output_len: int = 256, max_running: int = 256) -> tuple[dict, dict, float]:
    """(baseline, eagle3, true crossover) from the emulator's model at these levels."""
    prof = profiles.PROFILES[profile]
    costs = model.Costs(**prof["costs"])
    steps, topk, draft = prof["draft_defaults"]
    if topk == 1:
        draft = steps + 1
    c = prof["spec"]["EAGLE3"]
    spec = model.SpecConfig("EAGLE3", steps, topk, draft, c["accept_q"], c["e0"], c["e1"])
    kv = 10**8
    base_levels, spec_levels = [], []
    for conc in levels:
        b = model.steady_state(costs, None, conc, input_len, output_len, max_running, kv)
        s = model.steady_state(costs, spec, conc, input_len, output_len, max_running, kv)
        base_levels.append(level(conc, b["output_tok_per_s"], rel_half, running=b["running"]))
        spec_levels.append(level(conc, s["output_tok_per_s"], rel_half, running=s["running"], accept=s["accept_length"]))
    truth = model.crossover(costs, spec, input_len, output_len, max_running, kv)
    return result("baseline", base_levels), result("eagle3", spec_levels), truth


def write_run(root: Path, run_id: str, host: str, results: dict[str, dict]) -> Path:
    folder = root / run_id / host
    folder.mkdir(parents=True, exist_ok=True)
    for mode, data in results.items():
        (folder / f"{mode}.json").write_text(json.dumps(data, indent=2))
    return folder


def log_interp(c0: float, v0: float, c1: float, v1: float) -> float:
    frac = (v0 - 1) / (v0 - v1)
    return math.exp(math.log(c0) + frac * (math.log(c1) - math.log(c0)))


def truth_crossover(profile: str, input_len: int = 256, output_len: int = 256, max_running: int = 256) -> float:
    """The emulator model's crossover for eagle3 with SGLang's automatic draft settings."""
    return analytic_results(profile, [1], input_len=input_len, output_len=output_len, max_running=max_running)[2]
