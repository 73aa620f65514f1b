# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Everything that makes a comparison less than fair, most serious first."""

from __future__ import annotations

from .common import _interval, _num
from .intervals import _stat

# Settings that change a server's capacity: a difference between modes is a confounder.
CAPACITY_KEYS = (
    "mem_fraction_static",
    "max_running_requests",
    "max_total_tokens",
    "tp_size",
    "dp_size",
    "context_length",
    "chunked_prefill_size",
    "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs",
    "cuda_graph_bs_decode",
    "disable_decode_cuda_graph",
    "disable_cuda_graph",
    "disable_overlap_schedule",
    "disable_radix_cache",
    "kv_cache_dtype",
    "quantization",
    "dtype",
    "attention_backend",
    "max_queued_requests",
    "enable_torch_compile",
    # vLLM's (role vllm_server's capacity settings, the same in every mode by construction)
    "tensor_parallel_size",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
)
# A level whose throughput interval is wider than this (relative half-width) is flagged as noisy.
NOISY_HALF_WIDTH = 0.10
# Benchmark settings that must match for two sweeps to be comparable.
BENCH_KEYS = ("api", "input_len", "output_len", "warmup_s", "window_s", "requests", "repeats", "batches", "seed", "prompts")


def _server(result: dict) -> dict:
    server = result.get("server")
    return server if isinstance(server, dict) else {}


def _server_info(result: dict) -> dict:
    info = _server(result).get("server_info")
    return info if isinstance(info, dict) else {}


def gpu_facts(result: dict) -> dict | None:
    """The node's GPUs as a mode's results file recorded them (``gpu.before``, the teardown's read
    before the launch, else ``gpu.after`` where that listed none: an emulated node's device folder
    is made by its first launch): ``{backend, driver_version, gpus: [name per GPU]}``, or None when
    the file has no GPU record. ``backend`` says how they were read: ``nvml`` or ``nvidia-smi``
    (real GPUs), ``emulated`` (the emulator's device folder)."""
    gpu = result.get("gpu") if isinstance(result.get("gpu"), dict) else {}
    reads = [gpu.get(k) for k in ("before", "after") if isinstance(gpu.get(k), dict) and gpu[k].get("backend")]
    if not reads:
        return None
    read = next((r for r in reads if r.get("gpus")), reads[0])
    gpus = [g.get("name") or "unnamed GPU" for g in read.get("gpus") or [] if isinstance(g, dict)]
    return {"backend": read.get("backend"), "driver_version": read.get("driver_version"), "gpus": gpus}


def capacity_settings(result: dict) -> dict:
    """Capacity settings of a mode's server: what the launch role rendered (``server.settings``),
    overridden by what the server itself reports (``server.server_info``, SGLang's resolved
    arguments: the 48 cap it imposes on speculative modes shows there)."""
    out: dict = {}
    settings = _server(result).get("settings")
    if isinstance(settings, dict):
        for key, value in settings.items():
            norm = str(key).lstrip("-").replace("-", "_")
            if norm in CAPACITY_KEYS and value is not None:
                out[norm] = value
    info = _server_info(result)
    for key in CAPACITY_KEYS:
        if key in info and info[key] is not None:
            out[key] = info[key]
    return out


def running_cap(result: dict) -> int | None:
    """The server's max running requests, as launched or as reported."""
    caps = capacity_settings(result)
    for value in (caps.get("max_running_requests"), _server(result).get("max_running_requests")):
        try:
            num = int(value) if value is not None and not isinstance(value, bool) else None
        except (TypeError, ValueError):
            num = None
        if num:
            return num
    states = _server_info(result).get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        num = _num(states[0].get("effective_max_running_requests_per_dp"))
        if num:
            return int(num)
    return None


def _gpu_clean(state) -> bool | None:
    """Whether a recorded GPU state reads clean (None when it says nothing)."""
    if not isinstance(state, dict):
        return None
    if isinstance(state.get("clean"), bool):
        return state["clean"]
    after = state.get("after")
    if isinstance(after, dict) and isinstance(after.get("clean"), bool):
        return after["clean"]
    return None


def gpu_checks(result: dict, outcome: dict | None) -> list[tuple[str, bool | None, str]]:
    """(when, clean, detail) for the GPU state before the launch and after the teardown."""
    checks = []
    gpu = result.get("gpu") if isinstance(result.get("gpu"), dict) else {}
    outcome = outcome or {}
    for when in ("before", "after"):
        clean = _gpu_clean(outcome.get(f"gpu_{when}"))
        if clean is None:
            clean = _gpu_clean(gpu.get(when))
        state = outcome.get(f"gpu_{when}") or gpu.get(when) or {}
        detail = ""
        if isinstance(state, dict):
            inner = state.get("after") if isinstance(state.get("after"), dict) else state
            dirty = inner.get("dirty_gpus")
            if dirty:
                detail = f" (GPUs {', '.join(str(d) for d in dirty)} not clean)"
        checks.append((when, clean, detail))
    return checks


def outcome_error(outcome: dict | None) -> str:
    """What went wrong with a mode, as the run recorded it (the mode's error, then its teardown's)."""
    outcome = outcome or {}
    parts = [str(outcome[k]) for k in ("error", "teardown_error") if outcome.get(k)]
    return "; ".join(parts) or "no detail recorded"


def confounders(results: dict[str, dict], baseline: str, outcomes: dict | None = None,
                output_match: dict | None = None) -> list[dict]:
    """Everything that makes the comparison less than fair, most serious first.

    ``results`` maps mode -> results file dict; ``outcomes`` maps mode -> what the run
    recorded (status, error, gpu_before, gpu_after) when the compare playbook ran it;
    ``output_match`` maps mode -> its outputs held against the baseline's (output_match.py): a
    mode whose outputs changed is named first, since its speed is not the same model's.
    """
    outcomes = outcomes or {}
    found: list[dict] = []

    def add(kind: str, text: str, mode: str | None = None, concurrency=None, severity: str = "warning"):
        found.append({"kind": kind, "severity": severity, "mode": mode, "concurrency": concurrency, "text": text})

    for mode, match in (output_match or {}).items():
        if match.get("status") == "below_min":
            add("output_mismatch", f"{mode}: the outputs changed under speculation: {match['text']}, below the "
                f"{match['min']:g} required (compare_output_match_min); greedy verification must give the baseline's "
                "exact tokens, so this mode is not serving the same model: check its draft, its verification and "
                "the engine version before trusting its speed", mode, severity="error")
    for mode, match in (output_match or {}).items():
        if match.get("status") in ("not_measured", "no_baseline", "not_comparable"):
            add("output_match_unknown", f"{mode}: outputs not checked against the baseline: {match['text']}", mode)

    modes = list(results)
    # Modes that failed or are missing.
    for mode, outcome in outcomes.items():
        status = (outcome or {}).get("status")
        if status and status != "ok":
            add("mode_failed", f"{mode}: {status}: {outcome_error(outcome)}", mode, severity="error")
    # GPUs not clean before the launch or after the teardown.
    for mode in modes:
        for when, clean, detail in gpu_checks(results[mode], outcomes.get(mode)):
            if clean is False:
                what = "before the launch" if when == "before" else "after the teardown"
                add("gpu_not_clean", f"{mode}: the GPUs were not clean {what}{detail}", mode, severity="error")
    # Capacity settings that differ between modes.
    caps = {mode: capacity_settings(results[mode]) for mode in modes}
    base_caps = caps.get(baseline, {})
    for mode in modes:
        if mode == baseline:
            continue
        for key in sorted(set(base_caps) | set(caps[mode])):
            a, b = base_caps.get(key), caps[mode].get(key)
            if a is not None and b is not None and str(a) != str(b):
                add(
                    "capacity_differs",
                    f"{key} differs: {baseline} {a}, {mode} {b} (capacity settings must be identical in every mode)",
                    mode,
                    severity="error",
                )
    # Confounders the launch role recorded (per-mode overrides and the like).
    for mode in modes:
        for item in _server(results[mode]).get("confounders") or []:
            add("launch", f"{mode}: {item}", mode)
    # Benchmark settings that differ between modes.
    bench = {mode: results[mode].get("settings") or {} for mode in modes}
    for mode in modes:
        if mode == baseline or baseline not in bench:
            continue
        for key in BENCH_KEYS:
            a, b = bench[baseline].get(key), bench[mode].get(key)
            if a is not None and b is not None and a != b:
                text = f"benchmark setting {key} differs: {baseline} {a}, {mode} {b}"
                add("bench_settings_differ", text, mode, severity="error")
    for key in ("engine",):
        values = {mode: results[mode].get(key) for mode in modes if results[mode].get(key)}
        if len(set(values.values())) > 1:
            add("engine_differs", f"{key} differs between modes: {values}", severity="error")
    versions = {mode: _server(results[mode]).get("version") for mode in modes if _server(results[mode]).get("version")}
    if len(set(versions.values())) > 1:
        add("version_differs", f"server version differs between modes: {versions}", severity="error")
    # Per level: caps reached, client saturated, errors, missing accept length.
    for mode in modes:
        cap = running_cap(results[mode])
        capped, queued, saturated, errors, no_accept, no_step, noisy, again = [], [], [], [], [], [], [], []
        spec = mode != baseline and bool(
            _server(results[mode]).get("speculative_algorithm") or _server_info(results[mode]).get("speculative_algorithm")
        )
        for level in results[mode].get("levels") or []:
            if not isinstance(level, dict):
                continue
            conc = level.get("concurrency")
            if cap and isinstance(conc, int) and conc > cap:
                capped.append(conc)
            elif (_stat(level, "server_queued", "max") or 0) > 0:
                queued.append(conc)
            client = level.get("client") if isinstance(level.get("client"), dict) else {}
            # The client's own bottleneck warning starts with the words (specbench_client/summary.py); a
            # server-count warning that merely names it as one possible cause is not one.
            bottleneck = any(isinstance(w, str) and w.startswith("client bottleneck") for w in level.get("warnings") or [])
            if client.get("bottleneck") or bottleneck:
                saturated.append(conc)
            earlier = [e for e in level.get("remeasured_after") or [] if isinstance(e, dict)]
            if earlier:
                why = "; ".join(str(r) for r in (earlier[-1].get("saturated") or [])) or "no reason recorded"
                again.append(f"{conc} ({len(earlier)} earlier attempt{'s' if len(earlier) > 1 else ''}: {why})")
            if level.get("error") or (level.get("requests_failed") or 0) > 0:
                errors.append((conc, level.get("error") or f"{level.get('requests_failed')} requests failed"))
            if spec and level.get("accept_length") is None and level.get("output_tok_per_s"):
                # No speculative step over the window (the client's accept_length_note): an adaptive mode
                # turned off at this batch size, as it should; a static one that drafted nothing, named so.
                (no_step if level.get("accept_length_note") else no_accept).append(conc)
            thr, ci = _num(level.get("output_tok_per_s")), _interval(level.get("output_tok_per_s_ci95"))
            if thr and ci and (ci[1] - ci[0]) / (2 * thr) > NOISY_HALF_WIDTH:
                noisy.append(f"{conc} (+-{100 * (ci[1] - ci[0]) / (2 * thr):.0f}%)")
        if capped:
            note = " (SGLang's default for speculative modes when --max-running-requests is unset)" if cap == 48 else ""
            add(
                "cap_reached",
                f"{mode}: the server runs at most {cap} requests{note}; at C={', '.join(map(str, capped))} the rest queue, "
                "so those levels measure the cap, not the mode",
                mode,
                capped,
            )
        if queued:
            add("queued", f"{mode}: the server queued requests at C={', '.join(map(str, queued))} (a KV or running cap reached)",
                mode, queued)
        if saturated:
            add(
                "client_saturated",
                f"{mode}: the benchmark client was the bottleneck at C={', '.join(map(str, saturated))}: "
                "those figures under-read the server",
                mode,
                saturated,
            )
        if again:
            add(
                "remeasured",
                f"{mode}: the machine did not keep up at first, so these levels were measured again and the "
                f"figures are the last attempt's: C={', '.join(again)}; a run that needs retries is close to "
                "what the machine can drive",
                mode,
            )
        for conc, text in errors:
            add("level_error", f"{mode} C={conc}: {text}", mode, conc, severity="error")
        if no_accept:
            add("accept_length_missing", f"{mode}: no accept length at C={', '.join(map(str, no_accept))}", mode, no_accept)
        if no_step and not mode.endswith("-adaptive"):
            add("no_speculative_step", f"{mode}: the server counted no draft and no verify step over the window at "
                f"C={', '.join(map(str, no_step))}: this mode speculated nowhere there", mode, no_step)
        if noisy:
            add(
                "noisy",
                f"{mode}: the throughput interval is wide at C={', '.join(noisy)}: the server or the machine was not "
                "steady (other load, a window too short for the request length); repeat the level or lengthen the window",
                mode,
            )
    order = {"error": 0, "warning": 1}
    found.sort(key=lambda c: order.get(c["severity"], 2))
    return found
