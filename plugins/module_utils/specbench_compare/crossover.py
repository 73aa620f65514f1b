# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The whole-series verdict: status, regions, crossings and the crossover."""

from __future__ import annotations

import math
import random

from .common import _interval, _num, _rnd, fmt_conc
from .intervals import log_half_width
from .verdict import (
    BOOTSTRAP_DRAWS,
    BOOTSTRAP_SEED,
    LOSES,
    PAYS,
    STARTS,
    STOPS,
    UNCLEAR,
    Z975,
    level_verdict,
    regions,
    settle_verdicts,
)

CROSSOVER_METHOD = (
    "each level pays (speedup interval above 1), loses (below 1) or is unclear; unclear levels take the verdict of "
    "their neighbours unless they lie between a paying and a losing level; contiguous levels with one verdict form "
    "a region; each change of region is a crossing, interpolated linearly in speedup against log(concurrency); its "
    "95% interval is a seeded parametric bootstrap (2000 draws of every level's log speedup from its interval) "
    "through the same interpolation; crossover_concurrency is where the lowest-concurrency paying region ends"
)


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
