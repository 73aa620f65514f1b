# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""specbench comparison maths: speedups with intervals, the crossover, the recommendation.

The one place where a speculative mode is held against the baseline. Standard library
only, so it runs on the controller (the action plugin compare_results), in tests, or by
hand. It reads the results files the bench_sweep role writes
(``<results_dir>/<run_id>/<host>/<mode>.json``, see issue 3 and docs/CONTRACTS.md) as
plain dicts and returns plain dicts (summary.json).

Method
------
Speedup at a level = speculative / baseline output throughput (steady state). Each side
carries a 95 % interval ``[lo, hi]`` from the benchmark client (repeats or batch means).
The two estimates are independent (different servers, different windows), so the interval
of their ratio is the **delta method on the log scale**: each side's log half-width is
``w = (ln hi - ln lo) / 2`` (its relative half-width ``(hi - lo) / 2x`` when ``lo <= 0``),
the ratio's is ``W = sqrt(w_spec^2 + w_base^2)``, and the interval is
``ratio * exp(+-W)``. It equals the textbook delta method with a standard error of
``w / t`` per side when both sides share the critical value ``t``, needs no degrees of
freedom, and is asymmetric the way a ratio is (Fieller's interval agrees to first order
while both relative half-widths are small, as they are for a steady-state window; Fieller
is not used because it is unbounded when the baseline's interval nears zero).

Per-stream decode speed (what one user feels) and TPOT use the same rule. Their intervals
come from the level's own ``ci95`` when the client gives one; otherwise the level's
throughput interval's relative width is borrowed (in a closed loop at steady state, the
per-stream speed is throughput / running requests, so its window-to-window noise is the
throughput's). ``tpot_speedup`` is baseline TPOT / speculative TPOT, so above 1 always
means speculation is better.

The crossover (where speculation stops paying) is the first level at which the speedup
drops below 1, interpolated linearly in the speedup against log(concurrency) between that
level and the one before it (as the emulator's ``model.crossover`` does). Its interval is
where the lower and the upper ends of the speedup intervals cross 1, by the same rule:
the lower curve crosses first (the interval's low end), the upper curve last (its high
end); an end that does not cross within the measured levels is open (``None``) and said
so in words. Speedup >= 1 at every level is "pays at every level"; below 1 from the first
level is "never pays"; neither is given a number.
"""

from __future__ import annotations

import math

SCHEMA = "specbench.compare/1"
BASELINE = "baseline"

# The options of compare_results: its action plugin validates them, and its module file (the
# documentation, which ansible-test checks against this) declares them.
ARGUMENT_SPEC = {
    "results_dir": {"type": "path", "required": True},
    "run_id": {"type": "str", "required": True},
    "hosts": {"type": "list", "elements": "str"},
    "baseline": {"type": "str", "default": BASELINE},
    "modes": {"type": "list", "elements": "str"},
    "host_modes": {"type": "dict"},
    "outcomes": {"type": "dict"},
    "plots": {"type": "bool", "default": True},
    "dpi": {"type": "int", "default": 100},
    "index": {"type": "bool", "default": True},
}

CI_METHOD = (
    "ratio of two independent estimates, delta method on the log scale: each side's 95% interval gives a log "
    "half-width w = (ln hi - ln lo)/2; the ratio's interval is ratio * exp(+-sqrt(w_spec^2 + w_base^2))"
)
CROSSOVER_METHOD = (
    "first level where the speedup drops below 1, interpolated linearly in speedup against log(concurrency) "
    "from the level before; the 95% interval is where the speedup interval's lower and upper ends cross 1, "
    "by the same rule (it covers measurement noise; the two levels around the crossover bound what the "
    "interpolation can know)"
)
BORROWED_NOTE = "interval borrowed from the throughput interval's relative width (the client gave none)"

# SGLang 0.5.23's default --speculative-adaptive-config rows (srt/speculative/adaptive_spec_params.py):
# from batch size N, the candidate draft-step counts; 0 is plain decode.
SGLANG_DEFAULT_ADAPTIVE = {"1": [1, 3, 5, 7], "8": [0, 1, 3], "32": [0, 1], "64": [0]}

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
)
# A level whose throughput interval is wider than this (relative half-width) is flagged as noisy.
NOISY_HALF_WIDTH = 0.10
# Benchmark settings that must match for two sweeps to be comparable.
BENCH_KEYS = ("api", "input_len", "output_len", "warmup_s", "window_s", "requests", "repeats", "batches", "seed", "prompts")


class CompareError(ValueError):
    """Inputs the comparison cannot use; the message names the problem and the fix."""


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------
def _num(value) -> float | None:
    """A finite float, or None (bools, strings, NaN and infinities are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _interval(value) -> tuple[float, float] | None:
    """``[lo, hi]`` as a tuple of finite numbers with lo <= hi, or None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    lo, hi = _num(value[0]), _num(value[1])
    if lo is None or hi is None or lo > hi:
        return None
    return lo, hi


def _rnd(value, digits: int = 4):
    return None if value is None else round(value, digits)


def _rnd_pair(pair, digits: int = 4):
    return None if pair is None else [_rnd(pair[0], digits), _rnd(pair[1], digits)]


def fmt_conc(value) -> str:
    """Concurrency for people: 1.29, 51.5, 120."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def log_half_width(estimate: float, ci: tuple[float, float]) -> float:
    """Half-width of an interval on the log scale (relative half-width when lo <= 0)."""
    lo, hi = ci
    if lo > 0 and estimate > 0:
        return (math.log(hi) - math.log(lo)) / 2.0
    return (hi - lo) / (2.0 * estimate)


def ratio_ci(num: float | None, num_ci, den: float | None, den_ci) -> tuple[float | None, list[float] | None]:
    """num / den and its 95 % interval (see the module docstring); (None, None) if undefined.

    ``num_ci`` and ``den_ci`` are ``[lo, hi]`` or None; without both there is no interval.
    """
    num, den = _num(num), _num(den)
    if num is None or den is None or num < 0 or den <= 0:
        return None, None
    ratio = num / den
    a, b = _interval(num_ci), _interval(den_ci)
    if a is None or b is None or num <= 0:
        return ratio, None
    width = math.hypot(log_half_width(num, a), log_half_width(den, b))
    return ratio, [ratio * math.exp(-width), ratio * math.exp(width)]


def borrow_ci(estimate: float | None, template_estimate: float | None, template_ci) -> list[float] | None:
    """An interval for ``estimate`` with the relative (log) width of ``template``'s."""
    estimate, template_estimate = _num(estimate), _num(template_estimate)
    ci = _interval(template_ci)
    if estimate is None or estimate <= 0 or template_estimate is None or template_estimate <= 0 or ci is None:
        return None
    width = log_half_width(template_estimate, ci)
    return [estimate * math.exp(-width), estimate * math.exp(width)]


# ---------------------------------------------------------------------------------------------
# What one level of one mode says
# ---------------------------------------------------------------------------------------------
def _stat(level: dict, key: str, field: str = "mean") -> float | None:
    obj = level.get(key)
    return _num(obj.get(field)) if isinstance(obj, dict) else None


def _stat_ci(level: dict, key: str):
    obj = level.get(key)
    if not isinstance(obj, dict):
        return None
    return _interval(obj.get("ci95") or obj.get("mean_ci95"))


def level_figures(level: dict) -> dict:
    """The figures the comparison uses from one results level, each with its interval.

    Throughput from ``output_tok_per_s`` / ``output_tok_per_s_ci95``; per-stream decode speed
    from ``decode_tok_per_s_per_stream.mean`` (else 1000 / ``tpot_ms.mean``); TPOT from
    ``tpot_ms.mean``. A figure is None when the level does not have it.
    """
    thr = _num(level.get("output_tok_per_s"))
    if thr is not None and thr <= 0:
        thr = None
    thr_ci = _interval(level.get("output_tok_per_s_ci95")) if thr is not None else None
    tpot = _stat(level, "tpot_ms")
    tpot = tpot if tpot and tpot > 0 else None
    stream = _stat(level, "decode_tok_per_s_per_stream")
    stream_source = "decode_tok_per_s_per_stream.mean"
    if not stream or stream <= 0:
        stream = 1000.0 / tpot if tpot else None
        stream_source = "1000 / tpot_ms.mean" if stream else None
    stream_ci = _stat_ci(level, "decode_tok_per_s_per_stream") if stream_source == "decode_tok_per_s_per_stream.mean" else None
    tpot_ci = _stat_ci(level, "tpot_ms")
    borrowed = []
    if stream is not None and stream_ci is None:
        stream_ci = borrow_ci(stream, thr, thr_ci)
        if stream_ci:
            borrowed.append("per_stream")
    if tpot is not None and tpot_ci is None:
        tpot_ci = borrow_ci(tpot, thr, thr_ci)
        if tpot_ci:
            borrowed.append("tpot")
    return {
        "throughput": thr,
        "throughput_ci95": list(thr_ci) if thr_ci else None,
        "per_stream": stream,
        "per_stream_ci95": list(stream_ci) if stream_ci else None,
        "per_stream_source": stream_source,
        "tpot_ms": tpot,
        "tpot_ms_ci95": list(tpot_ci) if tpot_ci else None,
        "borrowed": borrowed,
    }


def _mode_level_row(level: dict) -> dict:
    """A level of one mode as it appears in summary.json (rounded, the key figures only)."""
    fig = level_figures(level)
    client = level.get("client") if isinstance(level.get("client"), dict) else {}
    return {
        "output_tok_per_s": _rnd(fig["throughput"], 3),
        "output_tok_per_s_ci95": _rnd_pair(fig["throughput_ci95"], 3),
        "per_stream_tok_per_s": _rnd(fig["per_stream"], 3),
        "per_stream_tok_per_s_ci95": _rnd_pair(fig["per_stream_ci95"], 3),
        "tpot_ms": _rnd(fig["tpot_ms"], 3),
        "ttft_ms_p50": _stat(level, "ttft_ms", "p50"),
        "e2e_ms_p50": _stat(level, "e2e_ms", "p50"),
        "accept_length": _num(level.get("accept_length")),
        "request_per_s": _num(level.get("request_per_s")),
        "requests_ok": level.get("requests_ok"),
        "requests_failed": level.get("requests_failed"),
        "server_running_max": _stat(level, "server_running", "max"),
        "server_queued_max": _stat(level, "server_queued", "max"),
        "client_bottleneck": bool(client.get("bottleneck")),
        "error": level.get("error"),
    }


# ---------------------------------------------------------------------------------------------
# The crossover
# ---------------------------------------------------------------------------------------------
def _first_crossing(points: list[tuple[float, float]]) -> tuple[str, float | None, int | None]:
    """Where a series of (concurrency, speedup) first drops below 1.

    Returns (kind, concurrency, index): kind "crosses" with the log-interpolated
    concurrency and the index of the first level below 1; "below" when the first level is
    already below 1; "above" when no level is.
    """
    for i, (conc, value) in enumerate(points):
        if value < 1.0:
            if i == 0:
                return "below", None, 0
            c0, v0 = points[i - 1]
            frac = (v0 - 1.0) / (v0 - value)
            return "crosses", math.exp(math.log(c0) + frac * (math.log(conc) - math.log(c0))), i
    return "above", None, None


def crossover(levels: list[dict]) -> dict:
    """The crossover from per-level speedups: ``levels`` hold concurrency, speedup, speedup_ci95.

    Returns status ("crosses", "never_pays", "pays_everywhere", "unknown"), concurrency,
    ci95 ([lo, hi], either end None when open), bracket (the two levels around it), text,
    and notes (a speedup that comes back above 1 later, levels without an interval).
    """
    usable = sorted(
        (lv for lv in levels if _num(lv.get("speedup")) is not None and _num(lv.get("concurrency"))),
        key=lambda lv: lv["concurrency"],
    )
    notes: list[str] = []
    if not usable:
        return {
            "status": "unknown",
            "concurrency": None,
            "ci95": None,
            "bracket": None,
            "text": "no level has both modes measured: no crossover can be given",
            "notes": notes,
        }
    pts = [(float(lv["concurrency"]), float(lv["speedup"])) for lv in usable]
    lows, highs = [], []
    for lv, (conc, value) in zip(usable, pts, strict=True):
        ci = _interval(lv.get("speedup_ci95"))
        if ci is None:
            notes.append(f"C={conc:g} has no interval on its speedup: the crossover interval treats it as exact")
            ci = (value, value)
        lows.append((conc, min(ci[0], value)))
        highs.append((conc, max(ci[1], value)))
    kind, point, idx = _first_crossing(pts)
    lo_kind, lo = _first_crossing(lows)[:2]
    hi_kind, hi = _first_crossing(highs)[:2]
    c_min, c_max = pts[0][0], pts[-1][0]
    if lo_kind == "below":
        lo = None
    if hi_kind == "below":  # even the upper end is below 1 at the first level
        hi = c_min
    point, lo, hi = _rnd(point, 3), _rnd(lo, 3), _rnd(hi, 3)
    if kind == "crosses":
        again = [c for c, v in pts[idx:] if v >= 1.0]
        if again:
            notes.append(
                f"the speedup comes back to 1 or more at C={', '.join(f'{c:g}' for c in again)} after dropping below 1 "
                f"at C={pts[idx][0]:g}: look at the confounders before trusting the crossover"
            )
    ci_text = _ci_text(lo, hi, c_min, c_max)
    if kind == "crosses":
        status = "crosses"
        bracket = [pts[idx - 1][0], pts[idx][0]]
        text = (
            f"speculation stops paying at concurrency {fmt_conc(point)} (95% interval {ci_text}), between the "
            f"levels C={bracket[0]:g} (speedup {pts[idx - 1][1]:.3f}) and C={bracket[1]:g} ({pts[idx][1]:.3f})"
        )
    elif kind == "below":
        status, point, bracket = "never_pays", None, [None, c_min]
        text = f"speculation never pays: it is slower from the lowest level measured, C={c_min:g}"
        if hi is not None and hi > c_min:
            text += f" (though within the interval it might pay up to C={fmt_conc(hi)})"
    else:
        status, point, bracket = "pays_everywhere", None, [c_max, None]
        text = f"speculation pays at every level measured, up to C={c_max:g}"
        if lo is not None:
            text += f" (though within the interval it might stop paying from C={fmt_conc(lo)})"
    return {
        "status": status,
        "concurrency": point,
        "ci95": [lo, hi] if (lo is not None or hi is not None) else None,
        "ci95_text": ci_text,
        "bracket": bracket,
        "text": text,
        "notes": notes,
    }


def _ci_text(lo, hi, c_min, c_max) -> str:
    low = fmt_conc(lo) if lo is not None else f"below C={c_min:g}"
    high = fmt_conc(hi) if hi is not None else f"above C={c_max:g}"
    return f"{low} to {high}"


# ---------------------------------------------------------------------------------------------
# Recommendation and SGLang's adaptive table
# ---------------------------------------------------------------------------------------------
def adaptive_table(off_from: int | None, measured_max: float | None = None, base: dict | None = None) -> dict:
    """A --speculative-adaptive-config table (batch size -> candidate steps) off from ``off_from``.

    Rows of SGLang's default below ``off_from`` that can speculate are kept (its adaptive
    logic still picks the step count from the acceptance it sees); rows that only turn it
    off, and every row at or above ``off_from``, give way to one row ``[0]`` (plain decode)
    at ``off_from``. With ``off_from`` None (speculation paid at every level up to
    ``measured_max``), the default's speculation-off rows at or below ``measured_max`` are
    dropped.
    """
    base = dict(base or SGLANG_DEFAULT_ADAPTIVE)
    rows = sorted((int(k), [int(s) for s in v]) for k, v in base.items())
    if off_from is not None:
        off_from = max(1, int(off_from))
        kept = [(bs, steps) for bs, steps in rows if bs < off_from and any(s > 0 for s in steps)]
        table = {str(bs): steps for bs, steps in kept}
        table[str(off_from)] = [0]
    else:
        table = {
            str(bs): steps
            for bs, steps in rows
            if not (measured_max is not None and bs <= measured_max and not any(s > 0 for s in steps))
        }
    if "1" not in table:
        first = rows[0][1] if rows and any(s > 0 for s in rows[0][1]) else [1, 3, 5, 7]
        table["1"] = first
    return dict(sorted(table.items(), key=lambda kv: int(kv[0])))


def sglang_adaptive_config(table: dict) -> dict:
    """The table in SGLang 0.5.23's file format: {"<bs>": {"candidate_steps": [...]}}.

    SGLang reads --speculative-adaptive-config as the path of a JSON file whose integer
    keys each hold an object with candidate_steps (and optional hysteresis knobs).
    """
    return {bs: {"candidate_steps": list(steps)} for bs, steps in table.items()}


def recommendation(cross: dict, spec_mode: str, levels_measured: list[float]) -> dict:
    """The advice: speculate below concurrency N, and the adaptive table that does it."""
    status = cross["status"]
    c_max = max(levels_measured) if levels_measured else None
    c_min = min(levels_measured) if levels_measured else None
    if status == "crosses":
        below = max(1, math.ceil(cross["concurrency"] - 1e-9))
        table = adaptive_table(below)
        text = (
            f"Speculate ({spec_mode}) below concurrency {below}; from {below} concurrent requests run without "
            f"speculation. Crossover {fmt_conc(cross['concurrency'])} (95% interval {cross['ci95_text']})."
        )
        gap = cross.get("bracket") or [None, None]
        if gap[0] and gap[1] and gap[1] / gap[0] > 1.5 and gap[1] - gap[0] > 1:
            text += (
                f" The interval covers measurement noise, not the interpolation between C={gap[0]:g} and "
                f"C={gap[1]:g}: add levels in between to pin it down."
            )
    elif status == "never_pays":
        below = int(c_min) if c_min and c_min > 1 else 1
        table = adaptive_table(below)
        if below <= 1:
            text = (
                f"Do not speculate: {spec_mode} is slower than the baseline at every level measured, "
                f"from C={c_min:g}. Serve the baseline mode."
            )
        else:
            text = (
                f"Do not speculate at C={c_min:g} or more: {spec_mode} is slower at every level measured. "
                f"Below C={c_min:g} nothing was measured: add lower levels to find out."
            )
    elif status == "pays_everywhere":
        below = None
        table = adaptive_table(None, c_max)
        text = (
            f"Speculate ({spec_mode}) at every concurrency measured, up to C={c_max:g}: the crossover lies above. "
            "Add higher levels to find where it stops paying."
        )
    else:
        below, table = None, None
        text = "No recommendation: no level has both modes measured."
    return {
        "text": text,
        "speculate_below": below,
        "adaptive_table": table,
        "adaptive_config": sglang_adaptive_config(table) if table else None,
    }


# ---------------------------------------------------------------------------------------------
# Confounders
# ---------------------------------------------------------------------------------------------
def _server(result: dict) -> dict:
    server = result.get("server")
    return server if isinstance(server, dict) else {}


def _server_info(result: dict) -> dict:
    info = _server(result).get("server_info")
    return info if isinstance(info, dict) else {}


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


def confounders(results: dict[str, dict], baseline: str, outcomes: dict | None = None) -> list[dict]:
    """Everything that makes the comparison less than fair, most serious first.

    ``results`` maps mode -> results file dict; ``outcomes`` maps mode -> what the run
    recorded (status, error, gpu_before, gpu_after) when the compare playbook ran it.
    """
    outcomes = outcomes or {}
    found: list[dict] = []

    def add(kind: str, text: str, mode: str | None = None, concurrency=None, severity: str = "warning"):
        found.append({"kind": kind, "severity": severity, "mode": mode, "concurrency": concurrency, "text": text})

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
        capped, queued, saturated, errors, no_accept, noisy = [], [], [], [], [], []
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
            warn = " ".join(w for w in level.get("warnings") or [] if isinstance(w, str))
            if client.get("bottleneck") or "client bottleneck" in warn:
                saturated.append(conc)
            if level.get("error") or (level.get("requests_failed") or 0) > 0:
                errors.append((conc, level.get("error") or f"{level.get('requests_failed')} requests failed"))
            if spec and level.get("accept_length") is None and level.get("output_tok_per_s"):
                no_accept.append(conc)
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
        for conc, text in errors:
            add("level_error", f"{mode} C={conc}: {text}", mode, conc, severity="error")
        if no_accept:
            add("accept_length_missing", f"{mode}: no accept length at C={', '.join(map(str, no_accept))}", mode, no_accept)
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


# ---------------------------------------------------------------------------------------------
# One comparison (a speculative mode against the baseline) and the host summary
# ---------------------------------------------------------------------------------------------
def _levels_by_conc(result: dict | None) -> dict:
    out = {}
    for level in (result or {}).get("levels") or []:
        if isinstance(level, dict) and isinstance(level.get("concurrency"), int):
            out[level["concurrency"]] = level
    return out


def compare_pair(base: dict | None, spec: dict | None, base_mode: str, spec_mode: str) -> dict:
    """Per-level speedups of ``spec`` over ``base``, the crossover and the recommendation."""
    b_levels, s_levels = _levels_by_conc(base), _levels_by_conc(spec)
    rows = []
    borrowed = set()
    for conc in sorted(set(b_levels) | set(s_levels)):
        bl, sl = b_levels.get(conc), s_levels.get(conc)
        row: dict = {"concurrency": conc}
        bf = level_figures(bl) if bl else None
        sf = level_figures(sl) if sl else None
        thr = stream = tpot = (None, None)
        if bf and sf:
            thr = ratio_ci(sf["throughput"], sf["throughput_ci95"], bf["throughput"], bf["throughput_ci95"])
            stream = ratio_ci(sf["per_stream"], sf["per_stream_ci95"], bf["per_stream"], bf["per_stream_ci95"])
            tpot = ratio_ci(bf["tpot_ms"], bf["tpot_ms_ci95"], sf["tpot_ms"], sf["tpot_ms_ci95"])
        for fig in (bf, sf):
            if fig:
                borrowed.update(fig["borrowed"])
        row["speedup"] = _rnd(thr[0])
        row["speedup_ci95"] = _rnd_pair(thr[1])
        row["per_stream_speedup"] = _rnd(stream[0])
        row["per_stream_speedup_ci95"] = _rnd_pair(stream[1])
        row["tpot_speedup"] = _rnd(tpot[0])
        row["tpot_speedup_ci95"] = _rnd_pair(tpot[1])
        row["verdict"] = verdict(row["speedup"], row["speedup_ci95"], bl, sl)
        row[base_mode] = _mode_level_row(bl) if bl else None
        row[spec_mode] = _mode_level_row(sl) if sl else None
        rows.append(row)
    cross = crossover(rows)
    measured = [float(r["concurrency"]) for r in rows if r["speedup"] is not None]
    rec = recommendation(cross, spec_mode, measured)
    notes = list(cross["notes"])
    if borrowed:
        notes.append(f"per-stream and TPOT intervals: {BORROWED_NOTE}")
    return {
        "baseline_mode": base_mode,
        "spec_mode": spec_mode,
        "crossover_status": cross["status"],
        "crossover_concurrency": cross["concurrency"],
        "crossover_ci95": cross["ci95"],
        "crossover_ci95_text": cross.get("ci95_text"),
        "crossover_bracket": cross["bracket"],
        "crossover_text": cross["text"],
        "recommendation": rec["text"],
        "speculate_below": rec["speculate_below"],
        "adaptive_table": rec["adaptive_table"],
        "adaptive_config": rec["adaptive_config"],
        "notes": notes,
        "levels": rows,
    }


def verdict(speedup, ci, base_level, spec_level) -> str:
    """pays / loses (the interval clear of 1), unclear (it straddles 1), or missing."""
    if speedup is None:
        missing = [name for name, lv in (("baseline", base_level), ("speculative", spec_level)) if not lv]
        if missing:
            return f"not measured in {' and '.join(missing)}"
        return "failed"
    if ci is None:
        return "pays" if speedup >= 1 else "loses"
    if ci[0] > 1:
        return "pays"
    if ci[1] < 1:
        return "loses"
    return "unclear"


def tracking(results: dict, baseline: str, fixed: str, adaptive: str) -> dict | None:
    """How close an adaptive mode comes to the better of baseline and a fixed speculative mode.

    Per level: adaptive throughput / max(baseline, fixed), with its interval; the verdict
    "tracks" when the interval reaches 0.95 or more at every level.
    """
    a, b, f = (_levels_by_conc(results.get(m)) for m in (adaptive, baseline, fixed))
    rows = []
    for conc in sorted(set(a) & set(b) & set(f)):
        figs = {m: level_figures(lv[conc]) for m, lv in ((adaptive, a), (baseline, b), (fixed, f))}
        if any(fig["throughput"] is None for fig in figs.values()):
            continue
        best = max((baseline, fixed), key=lambda m: figs[m]["throughput"])
        mine, theirs = figs[adaptive], figs[best]
        ratio, ci = ratio_ci(mine["throughput"], mine["throughput_ci95"], theirs["throughput"], theirs["throughput_ci95"])
        rows.append(
            {"concurrency": conc, "better_mode": best, "ratio_to_better": _rnd(ratio), "ratio_to_better_ci95": _rnd_pair(ci)}
        )
    if not rows:
        return None
    worst = min(rows, key=lambda r: r["ratio_to_better"])
    ok = all((r["ratio_to_better_ci95"] or [r["ratio_to_better"]] * 2)[1] >= 0.95 for r in rows)
    text = (
        f"{adaptive} tracks the better of {baseline} and {fixed} at every level (within 5%)"
        if ok
        else f"{adaptive} falls behind the better mode: {worst['ratio_to_better']:.2f}x of {worst['better_mode']} at "
        f"C={worst['concurrency']}"
    )
    return {"adaptive_mode": adaptive, "fixed_mode": fixed, "tracks": ok, "text": text, "levels": rows}


def summarize_host(
    results: dict[str, dict],
    host: str,
    run_id: str,
    baseline: str = BASELINE,
    modes: list[str] | None = None,
    outcomes: dict | None = None,
) -> dict:
    """summary.json for one host: every speculative mode against the baseline.

    ``results`` maps mode -> results file dict (modes whose file is missing are absent);
    ``modes`` is the list asked for (default: the baseline, then the others found);
    ``outcomes`` maps mode -> {status, error, gpu_before, gpu_after} as recorded by the run.
    The first speculative mode in ``modes`` gives the top-level crossover and recommendation.
    """
    outcomes = dict(outcomes or {})
    if modes is None:
        modes = [baseline] + sorted(m for m in results if m != baseline)
    if baseline not in modes:
        raise CompareError(f"the baseline mode {baseline!r} is not among the modes compared ({', '.join(modes)}): add it")
    spec_modes = [m for m in modes if m != baseline]
    incomplete: list[str] = []
    for mode in modes:
        outcome = outcomes.get(mode) or {}
        if mode not in results:
            reason = outcome_error(outcome) if outcome else "no results file"
            incomplete.append(f"{mode}: {outcome.get('status') or 'missing'}: {reason}")
            outcomes.setdefault(mode, {"status": "missing", "error": "no results file"})
        elif outcome.get("status") and outcome["status"] != "ok":
            incomplete.append(f"{mode}: {outcome['status']}: {outcome_error(outcome)}")
        elif results[mode].get("error"):
            incomplete.append(f"{mode}: {results[mode]['error']}")
        elif results[mode].get("status") in ("running", "failed", "stopped"):
            state = "interrupted mid-sweep" if results[mode]["status"] == "running" else results[mode]["status"]
            incomplete.append(f"{mode}: the sweep {state}")
        else:
            wanted = (results[mode].get("settings") or {}).get("concurrency")
            got = {lv.get("concurrency") for lv in results[mode].get("levels") or [] if isinstance(lv, dict)}
            if isinstance(wanted, list):
                lost = [c for c in wanted if c not in got]
                if lost:
                    incomplete.append(f"{mode}: levels not measured: C={', '.join(map(str, lost))}")
    comparisons = {m: compare_pair(results.get(baseline), results.get(m), baseline, m) for m in spec_modes}
    conf = confounders(results, baseline, {m: outcomes[m] for m in modes if m in outcomes})
    primary = comparisons[spec_modes[0]] if spec_modes else None
    summary: dict = {
        "schema": SCHEMA,
        "run_id": run_id,
        "host": host,
        # From the inputs, not the clock: rendering the same results twice gives the same files.
        "results_finished_at": max((str(r.get("finished_at")) for r in results.values() if r.get("finished_at")),
                                   default=None),
        "baseline_mode": baseline,
        "spec_mode": spec_modes[0] if spec_modes else None,
        "modes": modes,
        "modes_measured": [m for m in modes if m in results],
        "complete": not incomplete,
        "status": "complete" if not incomplete else ("failed" if not results else "incomplete"),
        "incomplete_reasons": incomplete,
        "confounders": conf,
        "method": {"speedup_ci95": CI_METHOD, "crossover": CROSSOVER_METHOD},
    }
    keys = (
        "crossover_status",
        "crossover_concurrency",
        "crossover_ci95",
        "crossover_ci95_text",
        "crossover_bracket",
        "crossover_text",
        "recommendation",
        "speculate_below",
        "adaptive_table",
        "adaptive_config",
        "notes",
        "levels",
    )
    for key in keys:
        summary[key] = primary[key] if primary else None
    if primary is None:
        summary["recommendation"] = "No recommendation: no speculative mode was compared (add one to compare_modes)."
        summary["levels"] = []
    summary["comparisons"] = comparisons
    adaptive = [m for m in spec_modes if "adaptive" in m]
    fixed = [m for m in spec_modes if "adaptive" not in m]
    summary["tracking"] = None
    if adaptive and fixed and baseline in results:
        summary["tracking"] = tracking(results, baseline, fixed[0], adaptive[0])
    summary["series"] = {m: mode_series(results[m]) for m in modes if m in results}
    summary["sources"] = {m: results[m].get("_path") for m in modes if m in results and results[m].get("_path")}
    summary["servers"] = {
        m: {
            "engine": results[m].get("engine"),
            "version": _server(results[m]).get("version"),
            "command": _server(results[m]).get("command"),
            "capacity": capacity_settings(results[m]),
            "running_cap": running_cap(results[m]),
        }
        for m in modes
        if m in results
    }
    summary["bench_settings"] = {m: results[m].get("settings") for m in modes if m in results}
    return summary


def mode_series(result: dict) -> list[dict]:
    """Every level of one mode with its figures and intervals (what the plots draw)."""
    out = []
    for conc, level in sorted(_levels_by_conc(result).items()):
        fig = level_figures(level)
        out.append(
            {
                "concurrency": conc,
                "output_tok_per_s": _rnd(fig["throughput"], 3),
                "output_tok_per_s_ci95": _rnd_pair(fig["throughput_ci95"], 3),
                "per_stream_tok_per_s": _rnd(fig["per_stream"], 3),
                "per_stream_tok_per_s_ci95": _rnd_pair(fig["per_stream_ci95"], 3),
                "error": level.get("error"),
            }
        )
    return out


def compact(summary: dict) -> dict:
    """The part of a host summary that travels in set_stats and the fleet index."""
    return {
        "host": summary.get("host"),
        "status": summary.get("status"),
        "complete": summary.get("complete"),
        "spec_mode": summary.get("spec_mode"),
        "crossover_status": summary.get("crossover_status"),
        "crossover_concurrency": summary.get("crossover_concurrency"),
        "crossover_ci95": summary.get("crossover_ci95"),
        "recommendation": summary.get("recommendation"),
        "speculate_below": summary.get("speculate_below"),
        "adaptive_config": summary.get("adaptive_config"),
        "confounders": len(summary.get("confounders") or []),
        "incomplete_reasons": summary.get("incomplete_reasons") or [],
        "levels": [
            {"concurrency": lv["concurrency"], "speedup": lv["speedup"], "speedup_ci95": lv["speedup_ci95"]}
            for lv in summary.get("levels") or []
        ],
    }
