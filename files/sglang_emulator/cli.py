"""Command line: SGLang's launch_server flags plus the emulator's own, and the startup.

Flags are SGLang 0.5.23's names and spellings (argparse with prefix matching, as SGLang
uses, so ``--tp`` works and the removed ``--cuda-graph-max-bs`` is rejected as ambiguous);
an unknown flag exits 2 naming it. Settings the emulator has no use for are accepted and
reported back in /server_info like SGLang's resolved arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import random
import signal
import sys
import time

from sglang_emulator.model import Costs, SpecConfig
from sglang_emulator.profiles import CATEGORY_ACCEPT_Q, DEFAULT_ADAPTIVE_TABLE, DEFAULT_PROFILE, PROFILES

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
FAULTS = ("ignore-sigterm", "worker-leaves-group", "fail-start")
LOG = logging.getLogger("sglang")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang_emulator", description=__doc__)
    a = p.add_argument
    # Model
    a("--model-path", "--model", dest="model_path", required=True)
    a("--tokenizer-path")
    a("--trust-remote-code", action="store_true")
    a("--context-length", type=int)
    a("--dtype", default="auto")
    a("--quantization")
    a("--kv-cache-dtype", default="auto")
    a("--revision")
    a("--served-model-name")
    # Parallelism
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    # Attention data parallelism (srt/arg_groups/fields/parallel.py: attn_dp_size; one scheduler,
    # and one entry of /server_info's internal_states, per DP rank).
    a("--attn-dp-size", type=int, default=1)
    a("--enable-two-batch-overlap", action="store_true")
    # Serving
    a("--host", default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--api-key")
    a("--admin-api-key")
    a("--skip-server-warmup", action="store_true")
    a("--stream-response-default-include-usage", action="store_true")
    a("--enable-cache-report", action="store_true")
    a("--random-seed", type=int)
    a("--watchdog-timeout", type=float, default=300)
    # Scheduling and memory
    a("--mem-fraction-static", type=float)
    a("--max-running-requests", type=int)
    a("--max-queued-requests", type=int)
    a("--max-total-tokens", type=int)
    a("--chunked-prefill-size", type=int)
    a("--disable-overlap-schedule", action="store_true")
    a("--disable-radix-cache", action="store_true")
    a("--attention-backend")
    # CUDA graphs (0.5.20+ names: --cuda-graph-max-bs is gone and now ambiguous)
    a("--cuda-graph-max-bs-decode", type=int)
    a("--cuda-graph-max-bs-prefill", type=int)
    a("--cuda-graph-bs-decode", type=int, nargs="+")
    a("--disable-decode-cuda-graph", action="store_true")
    a("--enable-torch-compile", action="store_true")
    # Observability
    a("--enable-metrics", action="store_true")
    a("--log-level", default="info", type=str.lower)
    a("--log-requests", action="store_true")
    a("--decode-log-interval", type=int, default=40)
    # Speculative decoding
    a("--speculative-algorithm", type=str.upper, choices=SPEC_ALGORITHMS)
    a("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path")
    a("--speculative-num-steps", type=int)
    a("--speculative-eagle-topk", type=int)
    a("--speculative-num-draft-tokens", type=int)
    a("--speculative-ngram-max-bfs-breadth", type=int, default=10)
    a("--speculative-adaptive", action="store_true")
    a("--speculative-adaptive-config")
    a("--enable-multi-layer-eagle", action="store_true")
    # The emulator's own
    e = p.add_argument_group("emulator")
    e.add_argument(
        "--emulator-profile",
        default=DEFAULT_PROFILE,
        choices=sorted(PROFILES),
        help="node and model to emulate (default: %(default)s, the seeds')",
    )
    e.add_argument("--emulator-seed", type=int, default=0, help="seed for acceptance draws and text")
    e.add_argument(
        "--emulator-time-scale", type=float, default=1.0, help="multiply every modelled duration (0.1 runs ten times faster)"
    )
    e.add_argument(
        "--emulator-launch-sd",
        type=float,
        default=0.0,
        help="launch-to-launch speed variation: each launch draws one factor exp(N(0, sd)) that stretches every "
        "modelled duration (clocks, thermals, NUMA placement, graph capture: a real node's is 0.01 to 0.05); "
        "0 (the default): every launch runs at the profile's speed",
    )
    e.add_argument(
        "--emulator-launch-seed",
        type=int,
        help="seed of the launch's speed draw (default: a fresh draw each launch, from the clock and the pid)",
    )
    e.add_argument("--emulator-gpus", type=int, help="emulated GPUs (default: tp-size)")
    e.add_argument("--emulator-device-dir", help="folder for emulated device nodes; none: no GPUs")
    e.add_argument(
        "--emulator-load-seconds", type=float, help="model-load time before ready (default: the profile's); large = slow start"
    )
    e.add_argument(
        "--emulator-fault",
        action="append",
        default=[],
        choices=FAULTS,
        help="ignore-sigterm: workers ignore SIGTERM; worker-leaves-group: the last "
        "worker calls setsid(); fail-start: exit with an out-of-memory error",
    )
    e.add_argument("--emulator-crash-after", type=int, help="die abruptly once this many generation requests have arrived")
    e.add_argument(
        "--emulator-output-mismatch",
        type=float,
        default=0.0,
        help="share of requests (0 to 1) whose greedy output a speculative mode changes from some position on, as "
        "a broken verification would; 0 (the default): the baseline's exact tokens, as greedy verification gives",
    )
    return p


class StartupError(Exception):
    """A launch the real server would refuse: logged, exit code 1."""


def launch_factor(sd: float, seed: int | None) -> float:
    """This launch's speed factor on every modelled duration: exp(N(0, sd)), from ``seed`` (None: the clock
    and the pid, a fresh draw each launch); 1.0 when ``sd`` is 0."""
    if not sd:
        return 1.0
    rng = random.Random(seed if seed is not None else f"{time.time_ns()}-{os.getpid()}")
    return math.exp(rng.gauss(0.0, sd))


def resolve(args: argparse.Namespace) -> dict:
    """Apply SGLang's defaulting rules and the profile; return the resolved server config."""
    prof = PROFILES[args.emulator_profile]
    if args.emulator_time_scale <= 0:
        raise StartupError("--emulator-time-scale must be positive")
    if not 0 <= args.emulator_output_mismatch <= 1:
        raise StartupError(f"--emulator-output-mismatch must be a share from 0 to 1 (got {args.emulator_output_mismatch})")
    if not 0 <= getattr(args, "emulator_launch_sd", 0.0) <= 0.5:
        raise StartupError(f"--emulator-launch-sd must be a relative sd from 0 to 0.5 (got {args.emulator_launch_sd})")
    args.emulator_launch_factor = launch_factor(getattr(args, "emulator_launch_sd", 0.0),
                                                getattr(args, "emulator_launch_seed", None))
    if args.tp_size < 1:
        raise StartupError("--tp-size must be at least 1")
    if args.attn_dp_size < 1:
        raise StartupError(f"--attn-dp-size must be positive (got {args.attn_dp_size}).")
    if args.tp_size % args.attn_dp_size:
        # srt/arg_groups/parallel_hook.py asserts it.
        raise StartupError("AssertionError: tp_size must be divisible by attn_dp_size * attn_cp_size")
    warnings = []
    spec = None
    algo = args.speculative_algorithm
    trio = (args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens)
    if algo:
        algo = "EAGLE" if algo == "NEXTN" else algo
        if args.speculative_algorithm == "NEXTN" and not args.speculative_draft_model_path:
            # MTP layers live in the target checkpoint (DeepSeek-V3 family): SGLang uses the model path.
            args.speculative_draft_model_path = args.model_path
        if algo in ("EAGLE", "EAGLE3", "STANDALONE") and not args.speculative_draft_model_path:
            raise StartupError(f"--speculative-draft-model-path is required for --speculative-algorithm {algo}")
        table = parse_adaptive_table(args.speculative_adaptive_config) if args.speculative_adaptive else None
        if algo == "NGRAM":
            # NGRAM drafts from the prompt: only the draft-token count matters (SGLang's default 12).
            draft = args.speculative_num_draft_tokens or 12
            steps, topk = draft - 1, 1
        else:
            if any(v is not None for v in trio) and any(v is None for v in trio):
                raise StartupError(
                    "AssertionError: set all of --speculative-num-steps, --speculative-eagle-topk and "
                    "--speculative-num-draft-tokens, or none of them"
                )
            if trio[0] is not None:
                steps, topk, draft = trio
            elif table is not None:
                # Adaptive picks the middle of every row's candidate steps, top-k 1
                # (_init_adaptive_speculative_params in sglang/srt/arg_groups/speculative_hook.py).
                union = sorted({s for _bs, row in table for s in row})
                steps, topk, draft = union[len(union) // 2], 1, 0
            else:
                steps, topk, draft = prof["draft_defaults"]
        if topk == 1 and draft != steps + 1:
            if draft:
                warnings.append(
                    f"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 = {steps + 1} when topk is 1"
                )
            draft = steps + 1
        reason = adaptive_unsupported_reason(args, algo, topk) if args.speculative_adaptive else None
        if reason is not None:
            # SGLang turns adaptive off with a log warning only, and /server_info then reports
            # speculative_adaptive=False (srt/arg_groups/speculative_hook.py, _maybe_disable_adaptive).
            warnings.append(f"speculative_adaptive disabled: {reason}. Falling back to static speculative params.")
            args.speculative_adaptive = False
            table = None
        if table is not None and all(steps not in row for _dummy, row in table):
            raise StartupError(f"--speculative-num-steps {steps} is not a candidate step of --speculative-adaptive-config")
        constants = prof["spec"][algo]
        by_category = tuple((cat, row[algo]) for cat, row in CATEGORY_ACCEPT_Q.get(args.emulator_profile, {}).items()
                            if algo in row)
        spec = SpecConfig(algo, steps, topk, draft, constants["accept_q"], constants["e0"], constants["e1"], table,
                          by_category)
        # /server_info reports resolved values, as SGLang's does.
        args.speculative_algorithm = algo
        given_steps = args.speculative_num_steps
        args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens = steps, topk, draft
        if algo == "NGRAM":
            # SGLang resolves NGRAM's top-k to the BFS breadth and its steps to draft tokens // top-k
            # (sglang/srt/arg_groups/speculative_hook.py, _handle_ngram; 0.5.18 and 0.5.23 alike), and
            # reports those; the emulator's acceptance model keeps its chain of draft - 1 steps.
            breadth = max(1, args.speculative_ngram_max_bfs_breadth)
            args.speculative_eagle_topk = breadth
            args.speculative_num_steps = given_steps if given_steps is not None else draft // breadth
        if args.max_running_requests is None:
            args.max_running_requests = 48
            warnings.append("Max running requests is reset to 48 for speculative decoding.")
    elif args.speculative_adaptive:
        raise StartupError("--speculative-adaptive needs --speculative-algorithm EAGLE or EAGLE3")
    if args.served_model_name is None:
        args.served_model_name = args.model_path

    total = prof["gpu_memory_total_mib"]
    chunk = args.chunked_prefill_size or (8192 if total > 60000 else 4096)
    args.chunked_prefill_size = chunk
    if args.mem_fraction_static is None:
        # SGLang's automatic fraction (simplified): reserve for activations, CUDA graphs and
        # the draft's extra; never below 10 GB on GPUs above 60 GB.
        graph_bs = args.cuda_graph_max_bs_decode or (256 if spec is None else 128)
        reserve = 512 + 1.5 * max(chunk, 2048) + args.tp_size / 8 * 1024 + 4096 + graph_bs * 16
        if total > 60 * 1024:
            reserve = max(reserve, 10 * 1024)
        args.mem_fraction_static = round(1 - reserve / total, 3)
    if not 0 < args.mem_fraction_static < 1:
        raise StartupError(f"--mem-fraction-static must be in (0, 1), got {args.mem_fraction_static}")
    weights = prof["weights_mib_per_gpu"] * prof["default_tp_size"] / args.tp_size
    draft_weights = prof["draft_weights_mib_per_gpu"] * prof["default_tp_size"] / args.tp_size if spec and algo != "NGRAM" else 0
    static = args.mem_fraction_static * total
    kv_mib = static - weights - draft_weights
    if kv_mib <= 0:
        raise StartupError("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
    kv_per_token_kib = prof["kv_kib_per_token_per_gpu"] * prof["default_tp_size"] / args.tp_size
    kv_tokens = int(kv_mib * 1024 / kv_per_token_kib)
    if args.max_total_tokens:
        kv_tokens = min(kv_tokens, args.max_total_tokens)
    if args.max_running_requests is None:
        args.max_running_requests = min(4096, max(1, kv_tokens // 512))
    context = args.context_length or prof["context_length"]
    gpus = args.emulator_gpus if args.emulator_gpus is not None else args.tp_size
    if args.emulator_device_dir and gpus < args.tp_size:
        raise StartupError(f"--tp-size {args.tp_size} needs {args.tp_size} GPUs; {gpus} emulated")
    graph_mib = 1200 + 4 * (args.cuda_graph_max_bs_decode or 160)
    return {
        "profile_name": args.emulator_profile,
        "profile": prof,
        "costs": Costs(**prof["costs"]),
        "spec": spec,
        "served_model_name": args.served_model_name or args.model_path,
        "context_length": context,
        "kv_capacity_tokens": kv_tokens,
        "max_running_requests": args.max_running_requests,
        "worker_memory_mib": int(min(total - 256, static + graph_mib)),
        "memory_usage": {
            "weight": round(weights / 1024, 2),
            "kvcache": round(kv_mib / 1024, 2),
            "token_capacity": kv_tokens,
            "graph": round(graph_mib / 1024, 2),
        },
        "gpus": gpus,
        "warnings": warnings,
        "load_seconds": (args.emulator_load_seconds if args.emulator_load_seconds is not None else prof["load_seconds"]),
    }


def adaptive_unsupported_reason(args: argparse.Namespace, algo: str, topk: int) -> str | None:
    """Why --speculative-adaptive cannot run, or None; SGLang's checks in its order
    (srt/speculative/adaptive_spec_params.py, adaptive_unsupported_reason)."""
    if algo not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algo} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if args.attn_dp_size > 1:
        return "attention DP is not supported (adaptive tier decisions are not synchronized across DP ranks)"
    if args.enable_multi_layer_eagle:
        return "enable_multi_layer_eagle=True is not supported (MultiLayerEagleWorkerV2 does not implement adaptive)"
    if args.enable_two_batch_overlap:
        return ("enable_two_batch_overlap=True is not supported (adaptive state swap would discard the "
                "TboAttnBackend wrapper)")
    return None


def parse_adaptive_table(path: str | None) -> tuple:
    """--speculative-adaptive-config: a JSON file, as SGLang reads it.

    ``{"<batch size>": {"candidate_steps": [...], <tuning knobs>}, <shared knobs>}``; keys
    that are not batch sizes are shared knobs (the emulator has no use for them). A batch
    uses the row with the largest key not above it, the smallest row below every key.
    No file: SGLang's default table.
    """
    raw = DEFAULT_ADAPTIVE_TABLE
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                raw = json.load(fh)
        except OSError as exc:
            raise StartupError(f"--speculative-adaptive-config {path}: {exc.strerror} (it takes a JSON file's path)") from exc
        except ValueError as exc:
            raise StartupError(f"--speculative-adaptive-config {path} is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise StartupError('--speculative-adaptive-config must be a JSON object: {"1": {"candidate_steps": [1, 3]}, ...}')
    rows = []
    for key, row in raw.items():
        if not str(key).isdigit():
            continue  # a shared knob (ema_alpha, update_interval, ...)
        steps = row.get("candidate_steps") if isinstance(row, dict) else row
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise StartupError(
                f"--speculative-adaptive-config row {key}: candidate_steps must be a non-empty list of non-negative integers"
            )
        rows.append((int(key), tuple(steps)))
    if not rows:
        raise StartupError("--speculative-adaptive-config needs at least one batch-size row")
    rows.sort()
    return tuple(rows)


def setup_logging(level: str) -> None:
    """SGLang's line format: ``[time] message``, ``[time TP0] message`` for scheduler lines."""

    class TpTag(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if not hasattr(record, "tp"):
                record.tp = ""
            return True

    handler = logging.StreamHandler(sys.stdout)
    handler.addFilter(TpTag())
    handler.setFormatter(logging.Formatter("[%(asctime)s%(tp)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))


def server_args_dict(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if not k.startswith("emulator_")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)  # unknown flags: argparse exits 2 naming them
    setup_logging(args.log_level)
    try:
        cfg = resolve(args)
    except StartupError as exc:
        LOG.error("%s", exc)
        return 1
    for line in cfg["warnings"]:
        LOG.warning("%s", line)
    LOG.info("server_args=ServerArgs(%s)", ", ".join(f"{k}={v!r}" for k, v in server_args_dict(args).items()))
    from sglang_emulator.server import run_server

    cfg["args"] = args
    cfg["server_args"] = server_args_dict(args)
    cfg["launch_command"] = " ".join(["python3", "-m", "sglang.launch_server", *argv])
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(run_server(cfg))
    except KeyboardInterrupt:
        return 130
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        loop.close()
