# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Weighed by real traffic: the expected throughput gain of a speedup series on a traffic mix.

Users do not run at one concurrency. ``compare_traffic`` gives the share of time spent at each
concurrency (a list of ``{concurrency, share}``, or the running-requests history read from
Prometheus by ``traffic_prometheus.py``). For a speedup series (each level's speedup over the
baseline with its 95% interval and verdict, and the baseline's throughput there
``baseline_tok_per_s``: a mode's comparison, or any other series such as a served schedule's
``ratio``/``ratio_ci95``), ``traffic_gain`` gives the **gain by tokens**:

- **Figure**: G = (tokens speculation serves over the mix) / (tokens the baseline serves over it)
  = ``sum_c s_c B(c) r(c) / sum_c s_c B(c)``: each concurrency weighed by its time share ``s_c``
  times the baseline's throughput ``B(c)`` there (the tokens it serves), not by time alone. Half
  the time at C=1 (1.3x) and half at C=30 (0.8x) serves far more tokens at C=30: G is near 0.83,
  it loses, where a time-weighted mean (1.05) would read "pays".
- **Interpolation**: between two neighbouring measured levels lo < c < hi the speedup is linear
  in log C, ``r(c) = (1 - t) r_lo + t r_hi`` with ``t = ln(c / lo) / ln(hi / lo)``, and the
  baseline's throughput log-linear; at a level, that level's figures.
- **Every level counts**: an unclear level counts with its estimate and its uncertainty (it is
  never dropped); traffic next to a level that failed, was saturated or was not measured in both
  modes is *unknown* (there is no estimate), never counted as a gain or a loss.
- **Outside**: traffic below the lowest or above the highest level measured is *outside* the
  measured range, never extrapolated.
- **Interval**: G is a linear combination ``sum_j a_j r_j`` (the weights ``a_j`` taken as known:
  the baseline's throughput enters both the numerator and the denominator). Levels are
  independent measurements; level j's standard error is ``r_j w_j / 1.96`` from its 95%
  interval's log half-width ``w_j`` (``intervals.py``), so ``se(G) = sqrt(sum_j a_j^2 se_j^2)``
  and the 95% interval is ``G exp(+-1.96 se(G) / G)``. It covers the interpolated truth; how far
  the real curve bends between levels is not in it (add levels where the traffic sits:
  ``compare_refine``). A series without the baseline's throughput is weighed by time (``weighed``
  says which).
"""

from __future__ import annotations

import math

from .common import _interval, _num
from .verdict import BASELINE_SERVED, CLEAR, LOSES, PAYS, UNCLEAR, Z975

USABLE = (*CLEAR, UNCLEAR, BASELINE_SERVED)

TRAFFIC_METHOD = (
    "gain by tokens: tokens served with speculation / tokens the baseline serves over the mix, each concurrency "
    "weighed by its time share x the baseline's throughput there; speedup interpolated linear in log C between "
    "neighbouring measured levels (the baseline's throughput log-linear); every level counts, an unclear one with "
    "its uncertainty; traffic next to a failed, saturated or unmeasured level is unknown, traffic outside the "
    "measured levels is outside (never extrapolated); 95% interval: the levels' standard errors (r*w/1.96 from each "
    "interval's log half-width w) combined as independent, delta method on the log scale"
)


class TrafficError(ValueError):
    """A compare_traffic value that cannot be used; the message names the field and the fix."""


def parse_traffic(value, label: str = "compare_traffic") -> list[dict]:
    """A list of ``{concurrency, share}`` checked and normalised to shares summing to 1 (same
    concurrency given twice: added), sorted by concurrency."""
    if not isinstance(value, list) or not value:
        raise TrafficError(f"{label} must be a non-empty list of {{concurrency, share}}, e.g. "
                           "[{concurrency: 1, share: 0.6}, {concurrency: 8, share: 0.4}], or "
                           "{prometheus: http://HOST:9090, start: ..., end: ..., step: 60} (got {value!r})")
    shares: dict[float, float] = {}
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise TrafficError(f"{label}[{i}] must be a mapping {{concurrency, share}} (got {item!r})")
        extra = sorted(set(item) - {"concurrency", "share"})
        if extra:
            raise TrafficError(f"{label}[{i}] has unknown key(s) {', '.join(extra)}: give only concurrency and share")
        conc, share = _num(item.get("concurrency")), _num(item.get("share"))
        if conc is None or conc <= 0:
            raise TrafficError(f"{label}[{i}].concurrency must be a number above 0, the requests running at once "
                               f"(got {item.get('concurrency')!r})")
        if share is None or share < 0:
            raise TrafficError(f"{label}[{i}].share must be a number of 0 or more, the share of time at that "
                               f"concurrency (got {item.get('share')!r})")
        shares[conc] = shares.get(conc, 0.0) + share
    total = sum(shares.values())
    if total <= 0:
        raise TrafficError(f"{label}: every share is 0; give the share of time at each concurrency (they are "
                           "normalised to sum to 1)")
    return [{"concurrency": c, "share": s / total} for c, s in sorted(shares.items())]


def _series_points(series: list[dict]) -> list[dict]:
    """Each level as {c, r, ci, clear}; ``ratio``/``ratio_ci95`` are read where there is no speedup."""
    points = []
    for row in series or []:
        if not isinstance(row, dict):
            continue
        conc = _num(row.get("concurrency"))
        if conc is None or conc <= 0:
            continue
        r = _num(row["speedup"] if "speedup" in row else row.get("ratio"))
        ci = _interval(row["speedup_ci95"] if "speedup_ci95" in row else row.get("ratio_ci95"))
        clear = (row.get("verdict") in USABLE and r is not None and r > 0 and ci is not None
                 and ci[0] > 0 and not row.get("saturated"))
        base = _num(row.get("baseline_tok_per_s"))
        points.append({"c": conc, "r": r, "ci": ci, "clear": clear, "verdict": row.get("verdict"),
                       "b": base if base is not None and base > 0 else None})
    points.sort(key=lambda p: p["c"])
    return points


def _fill_baseline(points: list[dict]) -> bool:
    """Fill a missing baseline throughput log-linearly from the nearest levels that have one; False
    when no level has one (the series is then weighed by time)."""
    known = [(math.log(p["c"]), math.log(p["b"])) for p in points if p["b"]]
    if not known:
        for p in points:
            p["b"] = 1.0
        return False
    for p in points:
        if p["b"]:
            continue
        x = math.log(p["c"])
        lo = max((k for k in known if k[0] <= x), default=None)
        hi = min((k for k in known if k[0] >= x), default=None)
        if lo is None or hi is None or lo[0] == hi[0]:
            p["b"] = math.exp((lo or hi)[1])
        else:
            t = (x - lo[0]) / (hi[0] - lo[0])
            p["b"] = math.exp(lo[1] + t * (hi[1] - lo[1]))
    return True


def _weights(points: list[dict], conc: float):
    """([(index, coefficient)] that make r(conc) from the levels, the baseline's throughput there),
    'outside' or 'unknown'."""
    if not points or conc < points[0]["c"] or conc > points[-1]["c"]:
        return "outside"
    for i, p in enumerate(points):
        if p["c"] == conc:
            return ([(i, 1.0)], p["b"]) if p["clear"] else "unknown"
        if p["c"] > conc:
            lo, hi = points[i - 1], p
            if not (lo["clear"] and hi["clear"]):
                return "unknown"
            t = math.log(conc / lo["c"]) / math.log(hi["c"] / lo["c"])
            return [(i - 1, 1.0 - t), (i, t)], math.exp((1 - t) * math.log(lo["b"]) + t * math.log(hi["b"]))
    return "unknown"  # pragma: no cover - conc <= points[-1]["c"] always stops the loop


def traffic_gain(series: list[dict], traffic: list[dict], name: str | None = None) -> dict:
    """The expected throughput gain of ``series`` over the baseline on ``traffic`` (see the module
    docstring); ``traffic`` as ``parse_traffic`` returns it."""
    points = _series_points(series)
    by_tokens = _fill_baseline(points)
    coef = [0.0] * len(points)
    known = unknown = below = above = 0.0
    tokens = 0.0
    unknown_at: list[float] = []
    for item in traffic:
        conc, share = item["concurrency"], item["share"]
        how = _weights(points, conc)
        if how == "outside":
            if points and conc < points[0]["c"]:
                below += share
            else:
                above += share
        elif how == "unknown":
            unknown += share
            if share > 0:
                unknown_at.append(conc)
        else:
            how, base = how
            known += share
            tokens += share * base
            for j, a in how:
                coef[j] += share * base * a
    out = {
        "name": name,
        "gain": None,
        "gain_ci95": None,
        "verdict": "unknown",
        "known_share": round(known, 4),
        "unknown_share": round(unknown, 4),
        "outside_share": round(below + above, 4),
        "below_share": round(below, 4),
        "above_share": round(above, 4),
        "measured_range": [points[0]["c"], points[-1]["c"]] if points else None,
        "unknown_concurrency": unknown_at,
        "weighed": "tokens" if by_tokens else "time",
        "weights": {f"{points[j]['c']:g}": round(coef[j] / tokens, 4) for j in range(len(points))
                    if tokens > 0 and coef[j] > 0},
    }
    if known <= 0:
        out["text"] = _text(out)
        return out
    gain = sum(a * points[j]["r"] for j, a in enumerate(coef) if a) / tokens
    var = 0.0
    for j, a in enumerate(coef):
        if a:
            lo, hi = points[j]["ci"]
            w = (math.log(hi) - math.log(lo)) / 2.0
            var += (a / tokens * points[j]["r"] * w / Z975) ** 2
    half = Z975 * math.sqrt(var) / gain
    ci = [gain * math.exp(-half), gain * math.exp(half)]
    out["gain"] = round(gain, 4)
    out["gain_ci95"] = [round(ci[0], 4), round(ci[1], 4)]
    out["verdict"] = PAYS if ci[0] > 1 else LOSES if ci[1] < 1 else UNCLEAR
    out["text"] = _text(out)
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _text(out: dict) -> str:
    parts = []
    if out["gain"] is not None:
        lo, hi = out["gain_ci95"]
        what = "tokens served" if out.get("weighed") == "tokens" else "time-weighted speedup"
        parts.append(f"{out['gain']:.2f}x [{lo:.2f}, {hi:.2f}] ({out['verdict']}, {what}: 95% interval) on the "
                     f"{_pct(out['known_share'])} of traffic the levels give an estimate for")
    else:
        parts.append("no expected gain: no traffic falls where the levels give an estimate")
    if out["unknown_share"] > 0:
        parts.append(f"{_pct(out['unknown_share'])} unknown (next to failed, saturated or unmeasured levels, at C="
                     + ", ".join(f"{c:g}" for c in out["unknown_concurrency"][:6])
                     + ("..." if len(out["unknown_concurrency"]) > 6 else "") + ")")
    if out["outside_share"] > 0:
        rng = out["measured_range"]
        where = f"C={rng[0]:g} to {rng[1]:g}" if rng else "no level"
        parts.append(f"{_pct(out['outside_share'])} outside the measured range ({where}; "
                     f"{_pct(out['below_share'])} below, {_pct(out['above_share'])} above), never extrapolated")
    return "; ".join(parts)


def traffic_gains(comparisons: dict, traffic: list[dict]) -> dict:
    """mode -> ``traffic_gain`` of each comparison's levels."""
    return {mode: traffic_gain(comp.get("levels") or [], traffic, mode) for mode, comp in comparisons.items()}
