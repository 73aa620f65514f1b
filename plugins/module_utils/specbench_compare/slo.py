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
Saturated and failed levels stay so. A mode ``serves up to C=x`` where x is the last level of the unbroken
run of meeting levels from the lowest; the bracket runs to the next level, which missed or was unclear.
"""

from __future__ import annotations

import re

from .common import _interval, _num, _rnd_pair
from .intervals import family_ci
from .verdict import FAILED, FAMILY_ALPHA, SATURATED, family_z, level_failure, level_saturation

TARGET = re.compile(r"^(ttft|tpot|e2e)_(p50|p90|p99)_ms$")
MEETS, MISSES, UNCLEAR = "meets", "misses", "unclear"
SLO_METHOD = (
    "each target a percentile of the window's requests with its distribution-free 95% interval, widened to hold "
    "every target at every level of both modes at once (Bonferroni, {m} checks, z = {z:.2f}); a level meets the "
    "SLO when every widened interval lies at or under its target, misses when one lies over, else unclear"
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
            rows.append(_level_row(level, targets, z))
        out["modes"][mode] = {"levels": rows, **capacity(rows)}
    return out


def _level_row(level: dict, targets: dict, z: float) -> dict:
    row: dict = {"concurrency": level["concurrency"], "checks": {}}
    if level_failure(level):
        row["status"] = FAILED
        return row
    if level_saturation(level):
        row["status"] = SATURATED
        return row
    statuses = []
    for name, limit in targets.items():
        metric, pct = TARGET.match(name).groups()
        stats = level.get(f"{metric}_ms") if isinstance(level.get(f"{metric}_ms"), dict) else {}
        value = _num(stats.get(pct))
        ci = family_ci(value, _interval(stats.get(f"{pct}_ci95")), z) if value else None
        status = UNCLEAR if ci is None else MEETS if ci[1] <= limit else MISSES if ci[0] > limit else UNCLEAR
        row["checks"][name] = {"value": value, "ci_family": _rnd_pair(ci, 3), "status": status}
        statuses.append(status)
    row["status"] = MISSES if MISSES in statuses else MEETS if all(s == MEETS for s in statuses) else UNCLEAR
    return row


def capacity(rows: list[dict]) -> dict:
    """The last level of the unbroken run of meeting levels from the lowest, and the bracket to the next."""
    last = None
    for row in rows:
        if row["status"] != MEETS:
            return {"capacity": last, "bracket": [last, row["concurrency"]], "next_status": row["status"]}
        last = row["concurrency"]
    return {"capacity": last, "bracket": [last, None], "next_status": None}


def slo_text(slo: dict | None, baseline: str) -> str | None:
    """One line: each mode's capacity under the SLO, and which to serve."""
    if not slo:
        return None
    targets = ", ".join(f"{k.replace('_ms', '').replace('_', ' ').upper()} <= {v:g} ms" for k, v in slo["targets"].items())
    parts, caps = [], {}
    for mode, info in slo["modes"].items():
        cap, (lo, hi) = info["capacity"], info["bracket"]
        caps[mode] = cap
        if cap is None:
            parts.append(f"{mode} meets it at no measured level" + (f" (C={hi}: {info['next_status']})" if hi else ""))
        else:
            upto = f" [{lo}, {hi}) ({info['next_status']} at C={hi})" if hi else " (every measured level)"
            parts.append(f"{mode} serves up to C={cap}" + upto)
    best = [m for m in caps if m != baseline and caps[m] is not None
            and (caps.get(baseline) is None or caps[m] > caps[baseline])]
    worse = [m for m in caps if m != baseline and caps.get(baseline) is not None
             and (caps[m] is None or caps[m] < caps[baseline])]
    verdict = (f"speculate ({', '.join(best)})" if best else f"serve the baseline ({baseline})" if worse
               else "no difference in capacity between the modes at the measured levels")
    return f"with {targets}: " + "; ".join(parts) + f": {verdict}"
