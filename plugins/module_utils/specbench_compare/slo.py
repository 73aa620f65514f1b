# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Latency SLOs: per mode the highest measured concurrency that meets every target, and how sure that is.

Targets are percentiles of a request latency, ``compare_slo: {tpot_p99_ms: 50, ttft_p99_ms: 2000}``
(``<ttft|tpot|e2e>_<p50|p90|p99>_ms``). Each level of each mode gives each percentile with its
distribution-free 95% interval from the window's requests (specbench_client.stats.quantile_ci95). All the
checks of a comparison (every target at every level of both modes) are one family held at FAMILY_ALPHA at
once: each interval's log half-width scaled from 1.96 to the family's Bonferroni z (intervals.family_ci).
A level ``meets`` the SLO when every target's family-wise interval lies at or under it, ``misses`` when any
lies over it, else it is ``unclear`` (as is a level with too few requests for a percentile's interval).
Saturated and failed levels stay so.

A mode's capacity under the SLO: ``estimate``, the last level of the unbroken run from the lowest whose
percentiles (the point figures) meet every target; ``capacity``, the last level of the unbroken run whose
family-wise intervals meet them (surely served); ``upper``, the first level after it that surely misses (the
capacity lies below it; None when none does). The line reads ``eagle3 serves up to C=40 [32, 48]``: estimate
40, surely 32, surely not 48 (``none sure`` / ``none missed`` where no level says). The recommendation is a
claim held family-wise with every check: ``speculate`` where a speculative mode surely meets the SLO at a level
where the baseline surely misses it (and the baseline nowhere the other way round), ``serve the baseline`` the
other way, else no mode surely serves more.

Goodput per level per mode (GOODPUT_METHOD): the output tokens per second of the requests that meet every
target, each target applied to the request's own latency (its TTFT, TPOT or end-to-end time; a percentile
target's limit bounds every request, as SGLang's bench_serving counts goodput). It is the level's
throughput times the share of its measured requests' output tokens that met them (the requests' rows in
``request_latencies``, kept by the client). The share's 95% interval is cluster-robust by request (a
request's tokens share its latency: specbench_client.categories.ratio_of_sums_ci95), widened at an
all-or-none share to the rule of three (3/n requests); it is added to the throughput's interval (which holds
the launches' spread where launches were pooled) in quadrature on the log scale; a share whose interval
reaches 0 gives [0, upper throughput x upper share].
"""

from __future__ import annotations

import math
import re

from ..specbench_client.categories import ratio_of_sums_ci95
from .common import _interval, _num, _rnd, _rnd_pair
from .intervals import family_ci, log_half_width
from .recommend import adaptive_table_for, sglang_adaptive_config, speculate_ranges
from .verdict import FAILED, FAMILY_ALPHA, PAYS, SATURATED, family_z, level_failure, level_saturation, paying_runs

TARGET = re.compile(r"^(ttft|tpot|e2e)_(p50|p90|p99)_ms$")
MEETS, MISSES, UNCLEAR = "meets", "misses", "unclear"
SLO_METHOD = (
    "each target a percentile of the window's requests with its distribution-free 95% interval, widened to hold "
    "every target at every level of both modes at once (Bonferroni, {m} checks, z = {z:.2f}); a level meets the "
    "SLO when every widened interval lies at or under its target, misses when one lies over, else unclear"
)
GOODPUT_METHOD = (
    "goodput = the level's output tokens/s times the share of its measured requests' output tokens whose own "
    "latency met every target (a percentile's limit applied to each request, as SGLang's bench_serving counts "
    "goodput); 95% interval: the share's cluster-robust by request (rule of three at an all-or-none share) and "
    "the throughput's (launches pooled by their spread) added in quadrature on the log scale"
)


SLO_OFF = "misses the SLO"
SLO_SERVE_RULE = (
    "under compare_slo speculation is on at a level where the speculative mode surely meets every target and the "
    "baseline surely misses one (whatever the throughput verdict: only speculation serves that load within the SLO), "
    "off where the speculative mode surely misses one and the baseline does not surely miss (speculating there breaks "
    "the SLO, whatever it gains), elsewhere as the throughput verdict says (on where it clearly pays); then the one "
    "speculation rule: on from such a level to the last such level after it, no other level between"
)


class SloError(ValueError):
    """compare_slo is not usable; the message names the problem and the fix."""


def parse_slo(value) -> dict:
    """{target name: milliseconds}; {} for none. SloError naming the problem otherwise."""
    if value in (None, "", {}, []):
        return {}
    if not isinstance(value, dict):
        raise SloError(f"compare_slo must be a mapping such as {{tpot_p99_ms: 50, ttft_p99_ms: 2000}}, not {value!r}")
    out = {}
    for name, ms in value.items():
        if not TARGET.match(str(name)):
            raise SloError(f"compare_slo names {name!r}: give <ttft|tpot|e2e>_<p50|p90|p99>_ms, e.g. tpot_p99_ms")
        number = _num(ms)
        if number is None or number <= 0 or isinstance(ms, bool):
            raise SloError(f"compare_slo {name} is {ms!r}: give a positive number of milliseconds, e.g. 50")
        out[str(name)] = float(number)
    return out


def _levels(result: dict | None) -> list[dict]:
    return sorted((lv for lv in (result or {}).get("levels") or []
                   if isinstance(lv, dict) and isinstance(lv.get("concurrency"), int) and not lv.get("category")),
                  key=lambda lv: lv["concurrency"])


def slo_summary(results: dict[str, dict], modes: list[str], targets: dict, alpha: float = FAMILY_ALPHA) -> dict | None:
    """Per mode the levels' SLO status and the capacity; None without targets."""
    if not targets:
        return None
    m = max(1, sum(len(_levels(results.get(mode))) for mode in modes) * len(targets))
    z = family_z(m, alpha)
    out: dict = {"targets": targets, "modes": {}, "method": SLO_METHOD.format(m=m, z=z)}
    for mode in modes:
        rows = []
        for level in _levels(results.get(mode)):
            rows.append(_level_row(level, targets, z, alpha / m))
        out["modes"][mode] = {"levels": rows, **capacity(rows)}
    out["goodput_method"] = GOODPUT_METHOD
    return out


def goodput(level: dict, targets: dict) -> dict:
    """The level's goodput under ``targets`` with its 95% interval and the share of tokens meeting them
    (GOODPUT_METHOD); Nones without the requests' rows or a throughput."""
    out = {"goodput_tok_per_s": None, "goodput_tok_per_s_ci95": None, "goodput_share": None, "goodput_requests": None}
    records = level.get("request_latencies") if isinstance(level.get("request_latencies"), dict) else {}
    thr, thr_ci = _num(level.get("output_tok_per_s")), _interval(level.get("output_tok_per_s_ci95"))
    columns, rows = records.get("columns") or [], records.get("rows") or []
    if thr is None or not rows:
        return out
    limits: dict[int, float] = {}
    for name, limit in targets.items():
        col = columns.index(f"{TARGET.match(name).group(1)}_ms") if f"{TARGET.match(name).group(1)}_ms" in columns else None
        if col is not None:
            limits[col] = min(limit, limits.get(col, math.inf))
    tokens = columns.index("output_tokens")
    tpot = columns.index("tpot_ms") if "tpot_ms" in columns else None

    def meets(row) -> bool:
        # a one-token answer has no TPOT: only its other latencies bound it
        return all((row[col] is None and col == tpot) or (row[col] is not None and row[col] <= lim)
                   for col, lim in limits.items())

    pairs = [(row[tokens] if meets(row) else 0, row[tokens]) for row in rows if row[tokens]]
    share, share_ci = ratio_of_sums_ci95(pairs)
    if share is None:
        return out
    n, met = len(pairs), sum(1 for a, unused in pairs if a)
    if share_ci is not None and met == n:
        share_ci = [min(share_ci[0], max(0.0, 1.0 - 3.0 / n)), 1.0]
    elif share_ci is not None and met == 0:
        share_ci = [0.0, max(share_ci[1], min(1.0, 3.0 / n))]
    value = thr * share
    ci = None
    if thr_ci and share_ci:
        if share_ci[0] > 0 and value > 0:
            width = math.hypot(log_half_width(thr, thr_ci), log_half_width(share, share_ci))
            ci = [value * math.exp(-width), value * math.exp(width)]
        else:
            ci = [0.0, thr_ci[1] * share_ci[1]]
    out.update(goodput_tok_per_s=_rnd(value, 3), goodput_tok_per_s_ci95=_rnd_pair(ci, 3),
               goodput_share=_rnd(share, 4), goodput_requests=[met, n])
    return out


def _level_row(level: dict, targets: dict, z: float, alpha_family: float | None = None) -> dict:
    row: dict = {"concurrency": level["concurrency"], "checks": {}}
    if level_failure(level):
        row["status"] = FAILED
        return row
    if level_saturation(level):
        row["status"] = SATURATED
        return row
    row.update(goodput(level, targets))
    statuses = []
    for name, limit in targets.items():
        metric, pct = TARGET.match(name).groups()
        stats = level.get(f"{metric}_ms") if isinstance(level.get(f"{metric}_ms"), dict) else {}
        value = _num(stats.get(pct))
        # a level pooled from launches: its launches' spread on k - 1 degrees of freedom is scaled by t's
        # quantile, its windows' own by the normal's (pooling.pool_level, intervals.family_ci)
        terms = stats.get(f"{pct}_ci_terms")
        ci = family_ci(value, _interval(stats.get(f"{pct}_ci95")), z, parts=[terms] if terms else None,
                       alpha_family=alpha_family) if value else None
        status = UNCLEAR if ci is None else MEETS if ci[1] <= limit else MISSES if ci[0] > limit else UNCLEAR
        row["checks"][name] = {"value": value, "ci_family": _rnd_pair(ci, 3), "status": status}
        statuses.append(status)
    row["status"] = MISSES if MISSES in statuses else MEETS if all(s == MEETS for s in statuses) else UNCLEAR
    row["point_meets"] = all(c["value"] is not None and c["value"] <= targets[name] for name, c in row["checks"].items())
    return row


def capacity(rows: list[dict]) -> dict:
    """``capacity``: the last level of the unbroken run of surely meeting levels from the lowest, ``bracket`` to
    the next level and its status; ``estimate``: the same run by the point figures; ``upper``: the first level
    after ``capacity`` that surely misses (None when none does)."""
    out: dict = {"capacity": None, "bracket": [None, None], "next_status": None, "estimate": None, "upper": None}
    for row in rows:
        if row["status"] != MEETS:
            out.update(bracket=[out["capacity"], row["concurrency"]], next_status=row["status"])
            break
        out["capacity"] = row["concurrency"]
    else:
        out["bracket"] = [out["capacity"], None]
    for row in rows:
        if not row.get("point_meets") or row["status"] in (FAILED, SATURATED):
            break
        out["estimate"] = row["concurrency"]
    out["upper"] = next((row["concurrency"] for row in rows if row["status"] == MISSES
                         and (out["capacity"] is None or row["concurrency"] > out["capacity"])), None)
    return out


def _served(mode: str, info: dict) -> str:
    est, sure, upper = info.get("estimate"), info["capacity"], info.get("upper")
    bracket = f"[{'none sure' if sure is None else sure}, {'none missed' if upper is None else upper}]"
    if est is None and sure is None:
        return f"{mode} meets it at no measured level {bracket}"
    return f"{mode} serves up to C={est if est is not None else sure} {bracket}"


def slo_text(slo: dict | None, baseline: str) -> str | None:
    """One line: each mode's capacity under the SLO (estimate [surely, surely not]), and which to serve, as in
    ``with p99 TPOT <= 50 ms: eagle3 serves up to C=40 [32, 48], baseline up to C=16 [16, 24]: speculate``."""
    if not slo:
        return None
    targets = ", ".join(f"{TARGET.match(k).group(2)} {TARGET.match(k).group(1).upper()} <= {v:g} ms"
                        for k, v in slo["targets"].items())
    modes = slo["modes"]
    order = [m for m in modes if m != baseline] + ([baseline] if baseline in modes else [])
    parts = [_served(m, modes[m]) for m in order]
    if len(parts) > 1:
        parts[1:] = [p.replace(" serves up to", " up to", 1) for p in parts[1:]]
    verdict = slo_verdict(slo, baseline)
    return f"with {targets}: " + ", ".join(parts) + f": {verdict['text']}"


def slo_verdict(slo: dict, baseline: str) -> dict:
    """Which mode to serve under the SLO, a claim held with every check of the family: per speculative mode
    the levels where it surely meets the SLO and the baseline surely misses it (``wins``) and the other way
    round (``losses``). ``speculate`` names the modes with wins and no losses."""
    status = {m: {r["concurrency"]: r["status"] for r in info["levels"]} for m, info in slo["modes"].items()}
    base = status.get(baseline, {})
    per = {}
    for mode, levels in status.items():
        if mode == baseline:
            continue
        wins = [c for c, st in levels.items() if st == MEETS and base.get(c) == MISSES]
        losses = [c for c, st in levels.items() if st == MISSES and base.get(c) == MEETS]
        per[mode] = {"wins": wins, "losses": losses}
    best = [m for m, w in per.items() if w["wins"] and not w["losses"]]
    worse = [m for m, w in per.items() if w["losses"] and not w["wins"]]
    if best:
        first = per[best[0]]["wins"]
        text = (f"speculate ({', '.join(best)}: meets it at C={', '.join(map(str, first))} where the baseline "
                "misses it)")
    elif worse:
        text = f"serve the baseline ({baseline} meets it where {', '.join(worse)} misses it)"
    elif not per:
        text = "no speculative mode measured"
    else:
        text = "no mode surely serves more under it at the measured levels"
    return {"speculate": best, "baseline_better": worse, "levels": per, "text": text}


def serve_levels(slo: dict, baseline: str, spec_mode: str, rows: list[dict]) -> list[dict]:
    """Per level of a comparison (``rows``: concurrency, throughput ``verdict``) the serve verdict under the SLO
    (SLO_SERVE_RULE): ``verdict`` PAYS where speculation is on, SLO_OFF where the SLO turns it off, else the
    throughput verdict; ``why`` says which rule decided."""
    status = {m: {r["concurrency"]: r["status"] for r in (slo["modes"].get(m) or {}).get("levels") or []}
              for m in (baseline, spec_mode)}
    out = []
    for row in rows:
        conc, spec, base = row["concurrency"], status[spec_mode].get(row["concurrency"]), status[baseline].get(
            row["concurrency"])
        if spec == MEETS and base == MISSES:
            out.append({"concurrency": conc, "verdict": PAYS, "why": f"only {spec_mode} meets the SLO"})
        elif spec == MISSES and base != MISSES:
            out.append({"concurrency": conc, "verdict": SLO_OFF,
                        "why": f"{spec_mode} misses the SLO, {baseline} {base or 'not measured'}"})
        else:
            out.append({"concurrency": conc, "verdict": row.get("verdict"), "why": "the throughput verdict"})
    return out


def slo_serve(slo: dict, comp: dict, baseline: str, spec_mode: str, max_steps: int | None) -> dict:
    """What to serve under the SLO from one comparison: its serve levels (serve_levels), speculate_ranges, the
    SGLang adaptive table and config built from them (the one rule, verdict.paying_runs) and a sentence."""
    levels = serve_levels(slo, baseline, spec_mode, comp.get("levels") or [])
    ranges = speculate_ranges({"paying_runs": paying_runs([(r["concurrency"], r["verdict"]) for r in levels])})
    measured = [r["concurrency"] for r in comp.get("levels") or [] if r.get("speedup") is not None]
    table = (adaptive_table_for(ranges, max(measured) if measured else None, max_steps=max_steps) if ranges
             else adaptive_table_for([]))
    on = [r["concurrency"] for r in levels if r["verdict"] == PAYS]
    by_slo = [r["concurrency"] for r in levels if r["why"] != "the throughput verdict"]
    text = (f"Under the SLO, {spec_mode} speculates at C={', '.join(map(str, on))}" if on
            else f"Under the SLO, {spec_mode} speculates at no level measured")
    if by_slo:
        text += " (the SLO decided C=" + ", ".join(
            f"{r['concurrency']}: {'on' if r['verdict'] == PAYS else 'off'}" for r in levels
            if r["why"] != "the throughput verdict") + "; the throughput verdict elsewhere)"
    else:
        text += " (the SLO decides no level: as the throughput verdicts)"
    return {"levels": levels, "speculate_ranges": ranges, "adaptive_table": table,
            "adaptive_config": sglang_adaptive_config(table), "text": text, "rule": SLO_SERVE_RULE}
