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

The verdict reads the whole series. Each level pays (speedup interval above 1), loses (below
1) or is unclear (across 1). An unclear run of levels takes the verdict of its neighbours
when they agree or when it sits at either end (one noisy level never flips a verdict on its
own); between a paying and a losing run it stays unclear (the change lies in it). Runs of one
verdict are the ``regions``; status is crosses (pays, then loses), multiple (the verdict
changes more than once, or starts out losing), never_pays, pays_everywhere, unclear or
unknown. Each change is a crossing, interpolated linearly in the speedup against
log(concurrency); its 95% interval is a seeded parametric bootstrap: every level's log
speedup drawn from a normal with its interval's standard error, the crossing found again by
the same rule in each draw, the 2.5th and 97.5th percentiles kept (an end is open, None, when
more than 2.5% of the draws find no crossing on that side). ``crossover_concurrency`` is where
the lowest-concurrency paying region ends. The advice and SGLang's adaptive table follow the
regions: speculation on in every paying range, off (``[0]``) elsewhere.

Several runs of one mode (``<mode>@<tag>.json``: compare_launches, refinement rounds) are
pooled per level (``pool_runs``); ``refine_plan`` picks the next refinement round.
"""

from __future__ import annotations

import datetime
import math
import random

from .specbench_client.stats import t975

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
    "refine": {
        "type": "dict",
        "options": {
            "ratio": {"type": "float", "default": 1.3},
            "budget_s": {"type": "float"},
            "max_levels": {"type": "int", "default": 4},
        },
    },
}

CI_METHOD = (
    "ratio of two independent estimates, delta method on the log scale: each side's 95% interval gives a log "
    "half-width w = (ln hi - ln lo)/2; the ratio's interval is ratio * exp(+-sqrt(w_spec^2 + w_base^2))"
)
CROSSOVER_METHOD = (
    "each level pays (speedup interval above 1), loses (below 1) or is unclear; unclear levels take the verdict of "
    "their neighbours unless they lie between a paying and a losing level; contiguous levels with one verdict form "
    "a region; each change of region is a crossing, interpolated linearly in speedup against log(concurrency); its "
    "95% interval is a seeded parametric bootstrap (2000 draws of every level's log speedup from its interval) "
    "through the same interpolation; crossover_concurrency is where the lowest-concurrency paying region ends"
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
# The verdict over the whole series: per-level verdicts, regions, crossings
# ---------------------------------------------------------------------------------------------
PAYS, LOSES, UNCLEAR = "pays", "loses", "unclear"
STOPS, STARTS = "stops_paying", "starts_paying"
BOOTSTRAP_DRAWS = 2000
BOOTSTRAP_SEED = 20260101  # fixed: rendering the same results twice gives the same files
Z975 = 1.959964


def level_verdict(speedup, ci) -> str | None:
    """pays (the 95% interval above 1), loses (below 1), unclear (it straddles 1); None without a speedup.

    A level without an interval is taken at its word (>= 1 pays), as an exact figure.
    """
    speedup, ci = _num(speedup), _interval(ci)
    if speedup is None:
        return None
    if ci is None:
        return PAYS if speedup >= 1.0 else LOSES
    if ci[0] > 1.0:
        return PAYS
    if ci[1] < 1.0:
        return LOSES
    return UNCLEAR


def _runs(verdicts: list[str]) -> list[list]:
    """[verdict, first index, last index] for each run of equal verdicts."""
    runs: list[list] = []
    for i, v in enumerate(verdicts):
        if runs and runs[-1][0] == v:
            runs[-1][2] = i
        else:
            runs.append([v, i, i])
    return runs


def settle_verdicts(verdicts: list[str]) -> list[str]:
    """Each level's verdict once unclear levels have been read in context.

    An unclear run between two runs of the same verdict, or at either end of the series next to
    one, takes that verdict: an unclear level never flips a verdict on its own. An unclear run
    between a paying and a losing run stays unclear (the verdict changes somewhere in it); a
    series that is unclear throughout stays unclear.
    """
    runs = _runs(verdicts)
    settled = list(verdicts)
    for n, (v, first, last) in enumerate(runs):
        if v != UNCLEAR:
            continue
        before = runs[n - 1][0] if n > 0 else None
        after = runs[n + 1][0] if n + 1 < len(runs) else None
        take = None
        if before and after and before == after:
            take = before
        elif before and not after:
            take = before
        elif after and not before:
            take = after
        if take:
            for i in range(first, last + 1):
                settled[i] = take
    return settled


def regions(points: list[tuple[float, str]]) -> list[dict]:
    """Contiguous levels with the same settled verdict: from/to concurrency, verdict, levels."""
    out = []
    for v, first, last in _runs([v for unused, v in points]):
        out.append({"from_concurrency": points[first][0], "to_concurrency": points[last][0], "verdict": v,
                    "levels": last - first + 1, "first": first, "last": last})
    return out


def _interp_at_one(c0: float, v0: float, c1: float, v1: float) -> float:
    """Where the speedup line between two levels (linear in log concurrency) meets 1."""
    if v0 == v1:
        return math.sqrt(c0 * c1)
    frac = min(1.0, max(0.0, (v0 - 1.0) / (v0 - v1)))
    return math.exp(math.log(c0) + frac * (math.log(c1) - math.log(c0)))


def _crossing_in(concs: list[float], values: list[float], anchor: int, end: int, direction: str) -> float:
    """Where ``values`` leave the anchor's side of 1, searched from ``anchor`` up to ``end``.

    ``direction`` stops_paying: the anchor should be >= 1 and the crossing is the first drop
    below 1 after it; starts_paying mirrors it. When the anchor itself is on the far side, the
    search goes back for the last level on the near side. -inf / +inf: no crossing below the
    first level / up to ``end``.
    """
    def near(v):
        return v >= 1.0 if direction == STOPS else v < 1.0

    if near(values[anchor]):
        for k in range(anchor + 1, end + 1):
            if not near(values[k]):
                return _interp_at_one(concs[k - 1], values[k - 1], concs[k], values[k])
        return math.inf
    for k in range(anchor - 1, -1, -1):
        if near(values[k]):
            return _interp_at_one(concs[k], values[k], concs[k + 1], values[k + 1])
    return -math.inf


def _log_sd(value: float, ci) -> float:
    """Standard deviation of ln(speedup) from its 95% interval (0 without one)."""
    ci = _interval(ci)
    if ci is None or value <= 0:
        return 0.0
    return log_half_width(value, ci) / Z975


def crossing_interval(concs, values, sds, anchor, end, direction, draws=BOOTSTRAP_DRAWS, seed=BOOTSTRAP_SEED):
    """95% interval of one crossing: a parametric bootstrap through the interpolation.

    Each level's log speedup is drawn from a normal with its interval's standard error (levels
    are independent: separate windows), the crossing found again in each draw by the same
    rule, and the 2.5th and 97.5th percentiles taken. An end is open (None) when more than
    2.5% of the draws find no crossing on that side of the measured levels.
    """
    rng = random.Random(seed)
    logs = [math.log(v) for v in values]
    found = []
    for _dummy in range(draws):
        drawn = [math.exp(lv + rng.gauss(0.0, sd)) if sd else math.exp(lv) for lv, sd in zip(logs, sds, strict=True)]
        found.append(_crossing_in(concs, drawn, anchor, end, direction))
    found.sort()
    lo, hi = found[int(0.025 * (draws - 1))], found[int(math.ceil(0.975 * (draws - 1)))]
    return (None if math.isinf(lo) else lo), (None if math.isinf(hi) else hi)


def _ci_text(lo, hi, c_min, c_max) -> str:
    low = fmt_conc(lo) if lo is not None else f"below C={c_min:g}"
    high = fmt_conc(hi) if hi is not None else f"above C={c_max:g}"
    return f"{low} to {high}"


def crossover(levels: list[dict], draws: int = BOOTSTRAP_DRAWS) -> dict:
    """The whole-series verdict from per-level speedups (``levels``: concurrency, speedup, speedup_ci95).

    Returns status (crosses, multiple, never_pays, pays_everywhere, unclear, unknown), regions,
    crossings (each with direction, concurrency, ci95, bracket), and the first stops_paying
    crossing after the lowest-concurrency paying region as concurrency, ci95, bracket and text.
    """
    usable = sorted(
        (lv for lv in levels if _num(lv.get("speedup")) is not None and _num(lv.get("speedup")) > 0
         and _num(lv.get("concurrency"))),
        key=lambda lv: lv["concurrency"],
    )
    notes: list[str] = []
    missing = [lv.get("concurrency") for lv in levels if _num(lv.get("speedup")) is None]
    empty = {"concurrency": None, "ci95": None, "ci95_text": None, "bracket": None, "regions": [], "crossings": []}
    if not usable:
        return dict(empty, status="unknown", notes=notes,
                    text="no level has both modes measured: no crossover can be given")
    if missing:
        inner = [c for c in missing if usable[0]["concurrency"] < c < usable[-1]["concurrency"]]
        notes.append(f"C={', '.join(str(c) for c in missing)} has no speedup (a mode not measured there): the regions "
                     "join the levels on either side" + (" across it" if inner else ""))
    concs = [float(lv["concurrency"]) for lv in usable]
    values = [float(lv["speedup"]) for lv in usable]
    sds = []
    for lv, conc, value in zip(usable, concs, values, strict=True):
        if _interval(lv.get("speedup_ci95")) is None:
            notes.append(f"C={conc:g} has no interval on its speedup: the verdict and the crossover take it as exact")
        sds.append(_log_sd(value, lv.get("speedup_ci95")))
    raw = [level_verdict(lv["speedup"], lv.get("speedup_ci95")) for lv in usable]
    settled = settle_verdicts(raw)
    for lv, r, s in zip(usable, raw, settled, strict=True):
        if r == UNCLEAR and s != UNCLEAR:
            notes.append(f"C={lv['concurrency']:g}: speedup {lv['speedup']:.3f} with an interval across 1 (unclear) "
                         f"is read with its neighbours as {s}")
    regs = regions(list(zip(concs, settled, strict=True)))
    definite = [r for r in regs if r["verdict"] != UNCLEAR]
    c_min, c_max = concs[0], concs[-1]
    crossings = []
    for a, b in zip(definite, definite[1:], strict=False):
        direction = STOPS if a["verdict"] == PAYS else STARTS
        anchor = a["last"]
        point = _crossing_in(concs, values, anchor, b["last"], direction)
        if math.isinf(point):  # the point estimates do not cross between the two regions' ends
            point = math.sqrt(concs[a["last"]] * concs[b["first"]])
        lo, hi = crossing_interval(concs, values, sds, anchor, b["last"], direction, draws)
        crossings.append({
            "direction": direction,
            "concurrency": _rnd(point, 3),
            "ci95": [_rnd(lo, 3), _rnd(hi, 3)],
            "ci95_text": _ci_text(lo, hi, c_min, c_max),
            "bracket": [concs[a["last"]], concs[b["first"]]],
        })
    kinds = [r["verdict"] for r in definite]
    if not kinds:
        status = "unclear"
    elif kinds == [PAYS]:
        status = "pays_everywhere"
    elif kinds == [LOSES]:
        status = "never_pays"
    elif kinds == [PAYS, LOSES]:
        status = "crosses"
    else:
        status = "multiple"
    first_pays = next((n for n, r in enumerate(definite) if r["verdict"] == PAYS), None)
    main = crossings[first_pays] if first_pays is not None and first_pays < len(crossings) else None
    public_regions = [{k: r[k] for k in ("from_concurrency", "to_concurrency", "verdict", "levels")} for r in regs]
    out = dict(empty, status=status, regions=public_regions, crossings=crossings, notes=notes)
    # Levels whose interval straddles 1 but that were read with their neighbours: the texts name
    # them, so that "slower at every level" is never said of a level that was not clearly slower.
    out["unclear_read_as"] = [c for c, r, s in zip(concs, raw, settled, strict=True) if r == UNCLEAR and s != UNCLEAR]
    if main:
        out.update(concurrency=main["concurrency"], ci95=main["ci95"], ci95_text=main["ci95_text"],
                   bracket=main["bracket"])
    text = _verdict_text(status, regs, crossings, main, values, concs)
    if out["unclear_read_as"]:
        text = text.replace("at every level measured", "at every level where the difference is clear")
    out["text"] = text + _unclear_words(out["unclear_read_as"])
    return out


def _unclear_words(concs: list[float]) -> str:
    """The clause that names unclear levels read with their neighbours ('' when none)."""
    if not concs:
        return ""
    where = ", ".join(f"C={c:g}" for c in concs)
    return f" ({where}: the speedup's interval straddles 1, unclear on its own, read with its neighbours)"


def _region_words(reg: dict) -> str:
    if reg["from_concurrency"] == reg["to_concurrency"]:
        return f"C={reg['from_concurrency']:g}"
    return f"C={reg['from_concurrency']:g} to {reg['to_concurrency']:g}"


def _verdict_text(status, regs, crossings, main, values, concs) -> str:
    c_min, c_max = concs[0], concs[-1]
    if status == "unclear":
        return (f"unclear: the speedup's 95% interval straddles 1 at every level measured (C={c_min:g} to {c_max:g}); "
                "repeat the levels (compare_launches) or lengthen the window")
    if status == "pays_everywhere":
        return f"speculation pays at every level measured, up to C={c_max:g}"
    if status == "never_pays":
        return f"speculation never pays: it is slower at every level measured, from C={c_min:g} to C={c_max:g}"
    parts = []
    for reg in regs:
        parts.append(f"{reg['verdict']} at {_region_words(reg)}")
    text = "regions: " + "; ".join(parts)
    if main:
        a_idx = concs.index(main["bracket"][0])
        b_idx = concs.index(main["bracket"][1])
        text = (f"speculation stops paying at concurrency {fmt_conc(main['concurrency'])} (95% interval "
                f"{main['ci95_text']}), between the levels C={main['bracket'][0]:g} (speedup {values[a_idx]:.3f}) and "
                f"C={main['bracket'][1]:g} ({values[b_idx]:.3f}); " + text)
    for cross in crossings:
        if cross is main:
            continue
        verb = "stops paying" if cross["direction"] == STOPS else "starts paying again" if main and \
            cross["concurrency"] > main["concurrency"] else "starts paying"
        text += f"; it {verb} at C={fmt_conc(cross['concurrency'])} (95% interval {cross['ci95_text']})"
    return text


# ---------------------------------------------------------------------------------------------
# Recommendation and SGLang's adaptive table
# ---------------------------------------------------------------------------------------------
def speculate_ranges(cross: dict, c_min: float | None) -> list[list]:
    """Concurrency ranges to speculate in, [from, below) with below None for open: from the regions.

    A stops_paying crossing at x ends a range at ceil(x); a starts_paying crossing at y starts
    one at ceil(y). A series that starts paying starts its range at 1.
    """
    status = cross.get("status")
    if status == "pays_everywhere":
        return [[1, None]]
    if status == "crosses" and not cross.get("crossings") and cross.get("concurrency"):
        return [[1, max(1, math.ceil(cross["concurrency"] - 1e-9))]]
    if status in ("never_pays", "unclear", "unknown") or not cross.get("regions"):
        return []
    definite = [r for r in cross["regions"] if r["verdict"] != UNCLEAR]
    ranges: list[list] = []
    if definite and definite[0]["verdict"] == PAYS:
        ranges.append([1, None])
    for c in cross.get("crossings") or []:
        edge = max(1, math.ceil(c["concurrency"] - 1e-9))
        if c["direction"] == STOPS and ranges and ranges[-1][1] is None:
            ranges[-1][1] = max(edge, ranges[-1][0] + 1)
        elif c["direction"] == STARTS:
            ranges.append([edge, None])
    del c_min
    return ranges


def _default_row(rows: list, bs: int) -> list[int]:
    row = rows[0][1]
    for key, steps in rows:
        if bs >= key:
            row = steps
    return row


def adaptive_table_for(ranges: list[list], measured_max: float | None = None, base: dict | None = None,
                       max_steps: int | None = None) -> dict:
    """A --speculative-adaptive-config table (batch size -> candidate steps) that speculates in ``ranges``.

    Inside a range SGLang's default rows that can speculate are kept (its adaptive logic still
    picks the step count from the acceptance it sees) and the range's first batch size gets the
    default's row there (with 0 taken out, so speculation is on); outside every range one row
    ``[0]`` (plain decode) turns it off. Beyond the measured levels an open range keeps the
    default's rows as they are (nothing was measured there). With ``max_steps`` (the draft steps
    of the speculative mode measured) no row inside a measured range offers more steps than that:
    the measurement says speculating with that many pays, not with more.
    """

    def capped(steps: list[int]) -> list[int]:
        if max_steps is None:
            return steps
        kept = [s for s in steps if s <= max_steps]
        return kept if any(s > 0 for s in kept) else sorted({s for s in kept if s == 0} | {max_steps})

    base = dict(base or SGLANG_DEFAULT_ADAPTIVE)
    rows = sorted((int(k), [int(s) for s in v]) for k, v in base.items())
    table: dict[int, list[int]] = {}
    if not ranges:
        return {"1": [0]}
    if ranges[0][0] > 1:
        table[1] = [0]
    for start, below in ranges:
        first = [s for s in capped(_default_row(rows, start)) if s > 0] or [1]
        table[start] = first
        for bs, steps in rows:
            if bs <= start or (below is not None and bs >= below):
                continue
            beyond = below is None and measured_max is not None and bs > measured_max
            if beyond:
                table[bs] = steps
            elif any(s > 0 for s in steps):
                table[bs] = capped(steps)
        if below is not None:
            table[below] = [0]
    return {str(bs): steps for bs, steps in sorted(table.items())}


def adaptive_table(off_from: int | None, measured_max: float | None = None, base: dict | None = None) -> dict:
    """The table for one range: speculate below ``off_from`` (None: at every level measured)."""
    return adaptive_table_for([[1, None if off_from is None else max(1, int(off_from))]], measured_max, base)


def sglang_adaptive_config(table: dict) -> dict:
    """The table in SGLang 0.5.23's file format: {"<bs>": {"candidate_steps": [...]}}.

    SGLang reads --speculative-adaptive-config as the path of a JSON file whose integer
    keys each hold an object with candidate_steps (and optional hysteresis knobs).
    """
    return {bs: {"candidate_steps": list(steps)} for bs, steps in table.items()}


def _ranges_words(ranges: list[list]) -> str:
    """[[1, 3], [30, None]] -> "below 3 and again from 30"."""
    words = []
    for start, below in ranges:
        if start <= 1:
            words.append("at every concurrency" if below is None else f"below {below}")
        else:
            words.append(f"from {start}" if below is None else f"from {start} to below {below}")
    return " and again ".join(words)


def recommendation(cross: dict, spec_mode: str, levels_measured: list[float], max_steps: int | None = None) -> dict:
    """The advice from the regions: where to speculate, and the adaptive table that does it
    (``max_steps``: the draft steps of the mode measured, see ``adaptive_table_for``)."""
    status = cross["status"]
    c_max = max(levels_measured) if levels_measured else None
    c_min = min(levels_measured) if levels_measured else None
    ranges = speculate_ranges(cross, c_min)
    below = ranges[0][1] if status == "crosses" and ranges else None
    table = None
    if status == "crosses":
        table = adaptive_table_for(ranges, c_max, max_steps=max_steps)
        text = (
            f"Speculate ({spec_mode}) below concurrency {below}; from {below} concurrent requests run without "
            f"speculation. Crossover {fmt_conc(cross['concurrency'])} (95% interval {cross['ci95_text']})."
        )
        gap = cross.get("bracket") or [None, None]
        lo, hi = (cross.get("ci95") or [None, None])
        if gap[0] and gap[1] and gap[1] / gap[0] > 1.5 and (lo is None or hi is None or hi / lo > 1.3):
            text += (
                f" Only the levels C={gap[0]:g} and C={gap[1]:g} bracket it: add levels in between "
                "(compare_refine: true) to pin it down."
            )
    elif status == "multiple":
        table = adaptive_table_for(ranges, c_max, max_steps=max_steps)
        where = _ranges_words(ranges) if ranges else "nowhere"
        text = (f"Speculate ({spec_mode}) at concurrency {where}; elsewhere run without speculation: the verdict "
                f"changes more than once ({len(cross.get('crossings') or [])} crossings). SGLang's adaptive config "
                "below turns speculation off and on again by batch size.")
    elif status == "never_pays":
        table = adaptive_table_for([])
        if c_min is not None and c_min <= 1:
            text = (
                f"Do not speculate: {spec_mode} is slower than the baseline at every level "
                f"{'where the difference is clear' if cross.get('unclear_read_as') else 'measured'}, "
                f"from C={c_min:g}{_unclear_words(cross.get('unclear_read_as') or [])}. Serve the baseline mode."
            )
        else:
            text = (
                f"Do not speculate at C={c_min:g} or more: {spec_mode} is slower at every level measured. "
                f"Below C={c_min:g} nothing was measured: add lower levels to find out."
            )
    elif status == "pays_everywhere":
        table = adaptive_table_for(ranges, c_max, max_steps=max_steps)
        text = (
            f"Speculate ({spec_mode}) at every concurrency measured, up to C={c_max:g}: the crossover lies above. "
            "Add higher levels to find where it stops paying."
        )
    elif status == "unclear":
        text = ("No recommendation yet: at every level the speedup's interval straddles 1. Measure again with "
                "compare_launches: 2 or more, or longer windows.")
    else:
        text = "No recommendation: no level has both modes measured."
    return {
        "text": text,
        "speculate_below": below,
        "speculate_ranges": ranges,
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
        row["refined"] = bool((bl or {}).get("refined") or (sl or {}).get("refined"))
        row["launches"] = min((lv or {}).get("launches") or 1 for lv in (bl, sl))
        row[base_mode] = _mode_level_row(bl) if bl else None
        row[spec_mode] = _mode_level_row(sl) if sl else None
        rows.append(row)
    cross = crossover(rows)
    measured = [float(r["concurrency"]) for r in rows if r["speedup"] is not None]
    rec = recommendation(cross, spec_mode, measured, draft_steps(spec))
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
        "regions": cross["regions"],
        "crossings": cross["crossings"],
        "recommendation": rec["text"],
        "speculate_below": rec["speculate_below"],
        "speculate_ranges": rec["speculate_ranges"],
        "adaptive_table": rec["adaptive_table"],
        "adaptive_config": rec["adaptive_config"],
        "notes": notes,
        "levels": rows,
    }


def draft_steps(result: dict | None) -> int | None:
    """The draft steps a speculative mode ran with (its server's resolved arguments), or None."""
    if not result:
        return None
    for source in (_server_info(result), _server(result).get("settings") or {}):
        value = source.get("speculative_num_steps") if isinstance(source, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def verdict(speedup, ci, base_level, spec_level) -> str:
    """pays / loses (the interval clear of 1), unclear (it straddles 1), or missing."""
    if speedup is None:
        missing = [name for name, lv in (("baseline", base_level), ("speculative", spec_level)) if not lv]
        if missing:
            return f"not measured in {' and '.join(missing)}"
        return "failed"
    return level_verdict(speedup, ci)


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
        "regions",
        "crossings",
        "recommendation",
        "speculate_below",
        "speculate_ranges",
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
        "regions": summary.get("regions"),
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


# ---------------------------------------------------------------------------------------------
# Several runs of one mode (compare_launches, refinement rounds): pooled levels
# ---------------------------------------------------------------------------------------------
POOLED_METHOD = (
    "pooled over {k} launches: the mean of the launch means; standard error sqrt((s_between^2 + mean within-launch "
    "se^2) / k), so launch-to-launch variation and drift are in it; 95% = +-t se, t on the Welch-Satterthwaite "
    "degrees of freedom (k - 1 when the launches disagree more than each launch's own noise says: few launches, "
    "wide interval), here t = {t:.3g}"
)
RUN_TAG = "@"  # <mode>@<tag>.json: another launch (launch2, ...) or a refinement round (refine1, ...) of <mode>


def split_run_name(stem: str) -> tuple[str, str | None]:
    """'eagle3@refine2' -> ('eagle3', 'refine2'); 'eagle3' -> ('eagle3', None)."""
    mode, sep, tag = stem.partition(RUN_TAG)
    return (mode, tag) if sep and tag else (stem, None)


def pool_runs(runs: list[tuple[str | None, dict]]) -> dict:
    """One results dict for a mode measured in several runs: ``runs`` is [(tag, results), ...].

    The first run gives the settings and server; levels measured in more than one run are pooled
    (``POOLED_METHOD``), each level notes its ``launches`` and whether it was ``refined`` (first
    measured in a refinement round), and ``runs`` lists the runs (tag, path, levels, seconds).
    """
    if len(runs) == 1 and runs[0][0] is None:
        return runs[0][1]
    ordered = sorted(runs, key=lambda tr: (tr[0] is not None, tr[0] or ""))
    base = dict(ordered[0][1])
    by_conc: dict[int, list] = {}
    listing = []
    for tag, result in ordered:
        listing.append({"tag": tag, "path": result.get("_path"), "status": result.get("status"),
                        "levels": [lv.get("concurrency") for lv in result.get("levels") or [] if isinstance(lv, dict)],
                        "seconds": run_seconds(result)})
        for level in result.get("levels") or []:
            if isinstance(level, dict) and isinstance(level.get("concurrency"), int):
                by_conc.setdefault(level["concurrency"], []).append((tag, level))
    levels = []
    for conc in sorted(by_conc):
        entries = by_conc[conc]
        pooled = pool_level([lv for unused, lv in entries])
        pooled["launches"] = len(entries)
        pooled["refined"] = all((tag or "").startswith("refine") for tag, unused in entries)
        levels.append(pooled)
    base["levels"] = levels
    base["runs"] = listing
    statuses = [r.get("status") for unused, r in ordered]
    base["status"] = next((s for s in statuses if s in ("running", "failed", "stopped")), base.get("status"))
    base["error"] = next((r.get("error") for unused, r in ordered if r.get("error")), None)
    return base


def pool_level(levels: list[dict]) -> dict:
    """Levels of one concurrency from several launches, as one level (see ``POOLED_METHOD``)."""
    if len(levels) == 1:
        return dict(levels[0])
    usable = [(lv, _num(lv.get("output_tok_per_s")), _interval(lv.get("output_tok_per_s_ci95"))) for lv in levels]
    usable = [(lv, x, ci) for lv, x, ci in usable if x is not None and x > 0]
    out = dict(levels[-1])
    if not usable:
        return out
    k = len(usable)
    xs = [x for unused, x, unused_ci in usable]
    mean = math.fsum(xs) / k
    between = math.fsum((x - mean) ** 2 for x in xs) / (k - 1) if k > 1 else 0.0
    within = [((ci[1] - ci[0]) / (2 * Z975)) ** 2 for unused, unused_x, ci in usable if ci]
    within_mean = math.fsum(within) / len(within) if within else 0.0
    se = math.sqrt((between + within_mean) / k)
    # The between-launch variance rests on k - 1 degrees of freedom; the within-launch part on
    # many (each launch's own window). Welch-Satterthwaite: few launches that disagree get t(k-1).
    df = (between + within_mean) ** 2 * (k - 1) / between ** 2 if between > 0 else math.inf
    quantile = t975(max(1, math.floor(df))) if math.isfinite(df) else Z975
    out["output_tok_per_s"] = round(mean, 3)
    out["output_tok_per_s_ci95"] = ([round(max(0.0, mean - quantile * se), 3), round(mean + quantile * se, 3)]
                                    if se > 0 else None)
    out["ci_method"] = POOLED_METHOD.format(k=k, t=quantile)
    out["launch_tok_per_s"] = [round(x, 3) for x in xs]
    # Latency and per-stream figures: the launches' means averaged; their intervals dropped (the
    # comparison borrows the throughput's relative width for them).
    for key in ("tpot_ms", "decode_tok_per_s_per_stream", "ttft_ms", "e2e_ms"):
        stats = [lv.get(key) for lv, unused_x, unused_ci in usable if isinstance(lv.get(key), dict)]
        if stats:
            merged = {f: round(math.fsum(s[f] for s in stats if _num(s.get(f)) is not None) / len(stats), 3)
                      for f in ("mean", "p50", "p90", "p99") if all(_num(s.get(f)) is not None for s in stats)}
            out[key] = merged
    accepts = [_num(lv.get("accept_length")) for lv, unused_x, unused_ci in usable]
    accepts = [a for a in accepts if a is not None]
    out["accept_length"] = round(math.fsum(accepts) / len(accepts), 4) if accepts else None
    out["requests_ok"] = sum(lv.get("requests_ok") or 0 for lv, unused_x, unused_ci in usable)
    out["requests_failed"] = sum(lv.get("requests_failed") or 0 for lv in levels)
    return out


def run_seconds(result: dict) -> float | None:
    """Wall seconds a run's sweep took (from its started_at / finished_at), or None."""
    try:
        start = datetime.datetime.fromisoformat(str(result.get("started_at")).replace("Z", "+00:00"))
        end = datetime.datetime.fromisoformat(str(result.get("finished_at")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (end - start).total_seconds())


# ---------------------------------------------------------------------------------------------
# Refinement around the crossing
# ---------------------------------------------------------------------------------------------
REFINE_MIN_STEP = 1.08  # a bracket narrower than this (hi/lo) has no level worth adding inside


def refine_plan(comparison: dict, ratio: float = 1.3, budget_s: float | None = None, spent_s: float = 0.0,
                level_cost_s: float = 0.0, launch_cost_s: float = 0.0, max_new: int = 4, modes: int = 2) -> dict:
    """The next refinement round for one comparison (a compare_pair / summary dict).

    For every crossing whose 95% interval is open or wider than ``ratio`` (hi/lo), the geometric
    midpoint of its bracket (rounded, not yet measured); every ``unclear`` level is measured again
    (its runs pooled), at most ``max_new`` more times. Both modes at each level, one launch per mode.
    Done when nothing is left to refine, when the levels added so far reach ``max_new``, or when
    the round's estimated cost (``modes`` x (``launch_cost_s`` + levels x ``level_cost_s``)) would
    overrun ``budget_s`` after ``spent_s``.
    """
    crossings = comparison.get("crossings") or []
    levels = comparison.get("levels") or []
    measured = sorted({int(lv["concurrency"]) for lv in levels if lv.get("speedup") is not None})
    refined = sum(1 for lv in levels if lv.get("refined"))
    new, repeat, why = [], [], []
    for cross in crossings:
        lo, hi = (cross.get("ci95") or [None, None])
        width = (hi / lo) if lo and hi else math.inf
        if width < ratio:
            continue
        a, b = cross["bracket"]
        # Unclear levels between the regions: the two measured levels around the point estimate.
        point = cross.get("concurrency")
        inside = [c for c in measured if a <= c <= b]
        if point and len(inside) > 2:
            a = max((c for c in inside if c <= point), default=a)
            b = min((c for c in inside if c >= point), default=b)
        if b / a < REFINE_MIN_STEP * REFINE_MIN_STEP:
            why.append(f"the bracket C={a:g} to {b:g} has no whole level inside")
            continue
        mid = int(round(math.sqrt(a * b)))
        if a < mid < b and mid not in measured and mid not in new:
            new.append(mid)
            why.append(f"C={mid}: geometric midpoint of C={a:g} and {b:g} ({cross['direction']}, "
                       f"interval {cross.get('ci95_text')}, hi/lo {'open' if math.isinf(width) else f'{width:.2f}'})")
    for lv in levels:
        conc = lv.get("concurrency")
        if lv.get("verdict") == UNCLEAR and conc not in repeat and (lv.get("launches") or 1) < 1 + max_new:
            repeat.append(int(conc))
            why.append(f"C={conc}: unclear (speedup {lv.get('speedup')} {lv.get('speedup_ci95')}), measured again")
    widths = []
    for cross in crossings:
        lo, hi = (cross.get("ci95") or [None, None])
        widths.append(None if not (lo and hi) else round(hi / lo, 3))
    todo = sorted(set(new) | set(repeat))
    room = max(0, max_new - refined)
    if len(new) > room:
        new = new[:room]
        todo = sorted(set(new) | set(repeat))
    cost = modes * (launch_cost_s + len(todo) * level_cost_s) if todo else 0.0
    done, reason = False, ""
    if crossings and all(w is not None and w < ratio for w in widths):
        done, reason = True, f"every crossing's interval is within hi/lo {ratio:g}"
    elif not crossings and not todo:
        done, reason = True, f"no crossing to refine and no unclear level ({comparison.get('crossover_status')})"
    elif not todo:
        done = True
        if all(w is not None and w < ratio for w in widths):
            reason = f"every crossing's interval is within hi/lo {ratio:g}"
        else:
            reason = "nothing left to measure inside the brackets" + (f" (at most {max_new} added levels)" if room == 0 else "")
    elif budget_s is not None and spent_s + cost > budget_s:
        done, reason = True, (f"the next round (~{cost:.0f} s) would overrun compare_refine_budget_s={budget_s:g} "
                              f"({spent_s:.0f} s spent)")
    return {
        "done": done,
        "reason": reason,
        "levels": [] if done else todo,
        "new": [] if done else sorted(new),
        "repeat": [] if done else sorted(repeat),
        "why": why,
        "widths": widths,
        "ratio": ratio,
        "cost_s": 0.0 if done else round(cost, 1),
        "launches": 0 if done else modes,
        "spent_s": round(spent_s, 1),
        "text": (f"refinement done: {reason}" if done else
                 f"refine: measure C={', '.join(map(str, todo))} in {modes} modes ({modes} launches, about {cost:.0f} s: "
                 f"{len(todo)} level(s) x {level_cost_s:.0f} s warmup + window, + {launch_cost_s:.0f} s per launch); "
                 + "; ".join(why)),
    }
