# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The whole-series verdict: status, regions, crossings and the crossover.

A crossing's interval is model-free: the bracket between the last level that clearly pays and
the first that clearly loses (or the reverse). Between two levels the speedup curve is not
measured, and the emulator's own profiles are curved enough in log(concurrency) that an
interpolation-based interval (a bootstrap through the log-linear line) excluded the true
crossing (kimi-k2.5-moe: true 17.43, such an interval 14.03 to 15.93; the bracket is 10 to 30).
Each end of the bracket is a level whose simultaneous (family-wise 95%, verdict.FAMILY_METHOD)
interval lies on its side of 1, so the bracket
holds the crossing unless one of those two clear verdicts is wrong (at most 2.5% each when the
speedup changes sign once between them). Only more levels narrow it (compare_refine). The
log-linear interpolation between the levels is reported inside it, labelled as an estimate.
"""

from __future__ import annotations

import math

from .common import _interval, _num, _rnd, fmt_conc
from .verdict import (
    CLEAR,
    FAILED,
    PAYS,
    SATURATED,
    STARTS,
    STOPS,
    UNCLEAR,
    gaps,
    level_verdict,
    paying_runs,
    regions,
    series_status,
)

CROSSOVER_METHOD = (
    "each level pays (its simultaneous interval, verdicts.family, above 1), loses (below 1), is unclear (across 1, "
    "or not measured in a mode) or failed (a mode measured nothing); "
    "a level where the client or the engine was saturated is no evidence and is left out; contiguous "
    "levels with one verdict form a region, and no unclear or failed level is read as its neighbours' verdict; each "
    "change between a paying and a losing region is a crossing, and its interval is the model-free bracket "
    "between the last level that clearly pays and the first that clearly loses (or the reverse); the point inside it "
    "is a log-linear interpolation of the speedup between the levels, an estimate, since the curve between levels is "
    "not measured; crossover_concurrency is where the lowest-concurrency paying region ends"
)
# A bracket wider than this (hi/lo) gets the advice to add levels inside it.
ADD_LEVELS_RATIO = 1.3


def _interp_at_one(c0: float, v0: float, c1: float, v1: float) -> float:
    """Where the speedup line between two levels (linear in log concurrency) meets 1."""
    if v0 == v1:
        return math.sqrt(c0 * c1)
    frac = min(1.0, max(0.0, (v0 - 1.0) / (v0 - v1)))
    return math.exp(math.log(c0) + frac * (math.log(c1) - math.log(c0)))


def interpolated_crossing(concs: list[float], values: list[float], direction: str) -> float | None:
    """Where ``values`` first leave the first level's side of 1 (log-linear between levels), or None."""
    def near(v):
        return v >= 1.0 if direction == STOPS else v < 1.0

    for k in range(1, len(values)):
        if near(values[k - 1]) and not near(values[k]):
            return _interp_at_one(concs[k - 1], values[k - 1], concs[k], values[k])
    return None


def _region_words(reg: dict) -> str:
    if reg["from_concurrency"] == reg["to_concurrency"]:
        return f"C={reg['from_concurrency']:g}"
    return f"C={reg['from_concurrency']:g} to {reg['to_concurrency']:g}"


def _conc_list(concs) -> str:
    concs = [f"{c:g}" for c in concs]
    return concs[0] if len(concs) == 1 else ", ".join(concs[:-1]) + " and " + concs[-1]


def crossover(levels: list[dict]) -> dict:
    """The whole-series verdict from per-level speedups.

    ``levels``: concurrency, speedup, speedup_ci95, and optionally ``failed`` (why a mode measured
    nothing there) and ``saturated`` (why the level is no evidence). Returns status (see
    ``verdict.series_status``), regions, crossings (direction, concurrency: the interpolated
    estimate, ci95 = bracket: the model-free interval), the first stops_paying crossing after the
    lowest-concurrency paying region as concurrency / ci95 / bracket, ``gaps`` (unclear or failed
    regions that are no crossing), ``failed``, ``excluded`` (saturated levels), ``measured``
    ([lowest, highest] level with evidence), notes and the text.
    """
    notes: list[str] = []
    excluded, missing, points, values = [], [], [], []
    every: list[tuple[float, str]] = []  # every level, saturated ones included: the speculation rule's input
    for lv in sorted((lv for lv in levels if _num(lv.get("concurrency"))), key=lambda lv: lv["concurrency"]):
        conc = float(lv["concurrency"])
        speedup = _num(lv.get("speedup"))
        # The simultaneous interval decides (verdict.FAMILY_METHOD); a hand-made series without one: its 95%.
        ci = lv.get("speedup_ci_family") if "speedup_ci_family" in lv else lv.get("speedup_ci95")
        if lv.get("failed"):  # failed first: a crashed server's level may carry keep-up reasons too
            points.append((conc, FAILED))
            values.append(None)
        elif lv.get("saturated"):
            excluded.append({"concurrency": conc, "reasons": list(lv["saturated"])})
        elif speedup is None or speedup <= 0:
            # Not measured in a mode: unclear, a region of its own, never its neighbours' verdict.
            missing.append(conc)
            points.append((conc, UNCLEAR))
            values.append(None)
        else:
            if _interval(ci) is None:
                notes.append(f"C={conc:g} has no interval on its speedup: unclear, no claim is made there")
            points.append((conc, level_verdict(speedup, ci)))
            values.append(speedup)
        every.append((conc, SATURATED if lv.get("saturated") and not lv.get("failed")
                      else points[-1][1] if points and points[-1][0] == conc else UNCLEAR))
    if missing:
        notes.append(f"C={_conc_list(missing)} has no speedup (a mode not measured there): unclear, never its "
                     "neighbours' verdict; no speculation across it")
    if excluded:
        notes.append(f"C={_conc_list([e['concurrency'] for e in excluded])}: no evidence about the node (saturated: "
                     + "; ".join(f"C={e['concurrency']:g}: {', '.join(e['reasons'])}" for e in excluded)
                     + "): left out of the verdict, the regions and the crossover; no speculation across it")
    failed = [c for c, v in points if v == FAILED]
    if failed:
        notes.append(f"C={_conc_list(failed)} failed in a mode: a region of its own, no verdict across it; "
                     "refinement measures it again")
    out = {"concurrency": None, "ci95": None, "ci95_text": None, "bracket": None, "regions": [], "crossings": [],
           "gaps": [], "failed": failed, "excluded": excluded, "notes": notes,
           "measured": [points[0][0], points[-1][0]] if points else None,
           "paying_runs": paying_runs(every)}
    if not failed and all(v is None for v in values):
        return dict(out, status="unknown", text="no level has both modes measured with evidence: no verdict can be given")
    regs = regions(points)
    status = series_status(regs)
    concs = [c for c, unused in points]
    definite = [r for r in regs if r["verdict"] in CLEAR]
    crossings = []
    for a, b in zip(definite, definite[1:], strict=False):
        if a["verdict"] == b["verdict"]:
            continue
        direction = STOPS if a["verdict"] == PAYS else STARTS
        span = [(concs[i], values[i]) for i in range(a["last"], b["first"] + 1) if values[i] is not None]
        point = interpolated_crossing([c for c, unused in span], [v for unused, v in span], direction)
        lo, hi = concs[a["last"]], concs[b["first"]]
        point = math.sqrt(lo * hi) if point is None else min(hi, max(lo, point))
        crossings.append({"direction": direction, "concurrency": _rnd(point, 3), "estimate": "interpolated",
                          "ci95": [lo, hi], "ci95_text": f"{lo:g} to {hi:g}", "bracket": [lo, hi]})
    first_pays = next((n for n, r in enumerate(definite) if r["verdict"] == PAYS), None)
    main = next((c for c in crossings if c["direction"] == STOPS and first_pays is not None
                 and c["bracket"][0] >= concs[definite[first_pays]["last"]]), None)
    public = [{k: r[k] for k in ("from_concurrency", "to_concurrency", "verdict", "levels")} for r in regs]
    out.update(status=status, regions=public, crossings=crossings,
               gaps=[{k: r[k] for k in ("from_concurrency", "to_concurrency", "verdict")} for r in gaps(regs)])
    if main:
        out.update(concurrency=main["concurrency"], ci95=main["ci95"], ci95_text=main["ci95_text"],
                   bracket=main["bracket"])
    out["text"] = _verdict_text(status, public, crossings, main, dict(zip(concs, values, strict=True)))
    return out


def _verdict_text(status, regs, crossings, main, value_at) -> str:
    c_min, c_max = regs[0]["from_concurrency"], regs[-1]["to_concurrency"]
    if status == UNCLEAR:
        return (f"unclear: at no level measured (C={c_min:g} to {c_max:g}) is the difference clear: the speedup's "
                "family-wise interval straddles 1 (or a mode failed); repeat the levels (compare_launches) or lengthen "
                "the window")
    if status == "pays_everywhere":
        return f"speculation pays clearly at every level measured, up to C={c_max:g}"
    if status == "never_pays":
        return f"speculation is slower at every level measured, from C={c_min:g} to C={c_max:g}"
    parts = []
    for reg in regs:
        word = {UNCLEAR: "unclear (the data cannot tell)", FAILED: "failed (no verdict)"}.get(reg["verdict"],
                                                                                              reg["verdict"])
        parts.append(f"{word} at {_region_words(reg)}")
    text = "regions: " + "; ".join(parts)
    for cross in crossings:
        lo, hi = cross["bracket"]
        verb = "stops paying" if cross["direction"] == STOPS else "starts paying"
        near, far = ("pays", "loses") if cross["direction"] == STOPS else ("loses", "pays")
        lead = (f"speculation {verb} between C={lo:g} (speedup {value_at[lo]:.3f}, {near} clearly) and C={hi:g} "
                f"({value_at[hi]:.3f}, {far} clearly), the 95% interval; interpolated estimate "
                f"{fmt_conc(cross['concurrency'])}")
        text = (lead + "; " + text) if cross is main else (text + "; " + lead)
    return text
