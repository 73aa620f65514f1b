# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Speedups with 95% intervals: a ratio of two independent estimates, and one level's figures.

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
throughput's).
"""

from __future__ import annotations

import math

from ..specbench_client.stats import t_two_sided
from .common import _interval, _num
from .verdict import family_z


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


def family_ci(estimate: float | None, ci95, z_family: float, z_level: float = 1.959964,
              parts: list | None = None, alpha_family: float | None = None,
              alpha_total: float | None = None) -> list[float] | None:
    """The simultaneous interval: ``ci95``'s log half-width scaled from ``z_level`` to ``z_family``.

    ``parts`` with ``alpha_family`` (the error rate each interval of the family holds, FAMILY_ALPHA / m):
    the log half-width is made of independent parts added in quadrature, each part the larger of its
    terms ``[log half-width at 95%, degrees of freedom or None]`` (a pooled level's is the larger of its
    launches' spread, on launches - 1 degrees of freedom, and their windows' own, pooling.pool_level).
    Each term is scaled by its own distribution's quantile ratio, t_df(alpha_family) / t_df(0.05) (a term
    without degrees of freedom, a window's: z_family / z_level). A term on few degrees of freedom, a node
    floor's launch sd or two launches' spread, has heavier tails than the normal: scaling it by the normal's
    ratio under-covers (2 degrees of freedom, 8 levels: 5.99 where t gives 12.59; a true tie then read
    "pays" or "loses" in 10% of simulated runs)."""
    estimate, ci = _num(estimate), _interval(ci95)
    if estimate is None or estimate <= 0 or ci is None:
        return None
    if parts and alpha_family:
        total = alpha_total if alpha_total else alpha_family
        width = math.sqrt(math.fsum(max(_family_term(w, df, z_family / z_level, alpha_family, total)
                                        for w, df in part) ** 2 for part in parts))
    else:
        width = log_half_width(estimate, ci) * z_family / z_level
    return [estimate * math.exp(-width), estimate * math.exp(width)]


def _family_term(w: float, df, normal_ratio: float, alpha_family: float, alpha_total: float) -> float:
    if df is None:
        return float(w) * normal_ratio
    if isinstance(df, (list, tuple)):
        common, levels = int(df[0]), int(df[1])
        scale = max(t_two_sided(alpha_total, common), t_two_sided(alpha_family, levels))
        return float(w) * scale / t_two_sided(0.05, common)
    return float(w) * t_two_sided(alpha_family, int(df)) / t_two_sided(0.05, int(df))


def hold_family(family: list[tuple[dict, list | None]], prefix: str, alpha: float, below: str, above: str,
                unclear: str = "unclear") -> float:
    """Hold the ratios ``row[prefix]`` of ``family`` ([(row, interval parts), ...]) at ``alpha`` over all of them
    at once (family_ci, Bonferroni over the family's size, each part scaled by its own quantile): each row gets
    ``<prefix>_ci_family`` and ``<prefix>_verdict``, ``below`` where the interval lies under 1, ``above`` over 1,
    else ``unclear``. Returns the family's critical value. (Energy and latency ratios; the speedup's own family
    is summarize._family_wise, whose verdicts feed the crossover and the recommendation.)"""
    z = family_z(len(family), alpha)
    per = alpha / max(1, len(family))
    for row, parts in family:
        ci = family_ci(row[prefix], row.get(f"{prefix}_ci95"), z, parts=parts, alpha_family=per, alpha_total=alpha)
        row[f"{prefix}_ci_family"] = [round(ci[0], 4), round(ci[1], 4)] if ci else None
        row[f"{prefix}_verdict"] = unclear if ci is None else below if ci[1] < 1.0 else above if ci[0] > 1.0 else unclear
    return z
