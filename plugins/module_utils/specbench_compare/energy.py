# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""GPU energy per output token per mode and level, and the energy ratio speculation / baseline.

Each level of a results file carries ``energy_j_per_output_token`` (the window's joules on the
server's GPUs over the output tokens that arrived in it; specbench_client.telemetry) with
``energy_j_per_output_token_bounds``, what the energy counter's samples either side of each
window edge allow. A mode's interval at a level (ENERGY_METHOD) holds:

* the window's own noise: the joules per token of a window vary as its throughput does (the
  power of a saturated step varies little; the tokens a window holds vary), so the throughput
  interval's relative width is borrowed (as per-stream figures borrow it, intervals.borrow_ci);
* the counter's sampling: the bounds' log half-width, added in quadrature;
* launch-to-launch variation: pooled launches by their own spread (t on k - 1 degrees of freedom,
  as pooling.pool_level pools throughput); a level measured in one launch per mode takes the node's
  throughput floor (launch_noise), as its speedup does.

The energy ratio spec / baseline < 1 means speculation spends fewer joules per token. Its family-wise
interval over the levels with a ratio holds FAMILY_ALPHA over all of them at once (intervals.family_ci);
the verdict reads ``saves`` (interval below 1), ``costs more`` (above 1) or ``unclear``. Saturated and
failed levels keep their verdict. A level where either mode's window saw clock throttling (power or
thermal) or SM clock changes while busy is ``confounded`` when only one mode saw it: its ratio then
measures the throttling as much as the mode, so it is not decided.
"""

from __future__ import annotations

import math

from ..specbench_client.stats import t975
from .common import _interval, _num, _rnd, _rnd_pair
from .crossover import interpolated_crossing
from .intervals import hold_family, log_half_width, ratio_ci
from .launch_noise import _add_launch_part, floor_dfs
from .verdict import FAILED, FAMILY_ALPHA, SATURATED, STOPS, Z975

SAVES, COSTS, UNCLEAR_E, CONFOUNDED, NO_TELEMETRY = "saves", "costs more", "unclear", "confounded", "no telemetry"
ENERGY_METHOD = (
    "energy per output token = the window's joules on the server's GPUs (the NVML energy counter, or power "
    "integrated where the GPU has no counter; each level says which) / the output tokens that arrived in it; its "
    "95% interval borrows the throughput interval's relative width (a window's joules per token vary as its tokens "
    "do) and adds the counter's sampling bounds in quadrature; launches pooled by their spread (t on k - 1 degrees "
    "of freedom), a level measured once per mode widened by the node's launch floor. The energy ratio spec / "
    "baseline is held family-wise over the levels like the speedup (Bonferroni, each term scaled by its own "
    "quantile); a level throttled or with SM clock changes in one mode only is confounded and not decided."
)


def side(level: dict | None) -> dict | None:
    """One mode's energy per token at a level with its 95% interval and interval parts, or None."""
    if not level:
        return None
    value = _num(level.get("energy_j_per_output_token"))
    if value is None or value <= 0:
        return None
    if _interval(level.get("energy_j_per_output_token_ci95")) and level.get("energy_ci_terms"):
        # pooled over launches (pool_energy)
        return {"value": value, "ci95": list(level["energy_j_per_output_token_ci95"]),
                "parts": level["energy_ci_terms"], "launches": level.get("energy_launches") or 1,
                "confounders": list(level.get("energy_confounders") or [])}
    terms = window_terms(level, value)
    if terms is None:
        return {"value": value, "ci95": None, "parts": None, "launches": 1,
                "confounders": list(level.get("energy_confounders") or [])}
    width = math.sqrt(math.fsum(w * w for w in terms))
    return {"value": value, "ci95": [value * math.exp(-width), value * math.exp(width)],
            "parts": [[round(width, 6), None]], "launches": 1,
            "confounders": list(level.get("energy_confounders") or [])}


def window_terms(level: dict, value: float) -> list[float] | None:
    """The log half-widths of one launch's energy per token: its throughput's (borrowed), its counter bounds'."""
    thr, thr_ci = _num(level.get("output_tok_per_s")), _interval(level.get("output_tok_per_s_ci95"))
    if thr is None or thr <= 0 or thr_ci is None:
        return None
    terms = [log_half_width(thr, thr_ci)]
    bounds = _interval(level.get("energy_j_per_output_token_bounds"))
    if bounds and bounds[0] > 0:
        terms.append(max(math.log(bounds[1] / value), math.log(value / bounds[0]), 0.0))
    return terms


def pool_energy(out: dict, levels: list[dict]) -> None:
    """Energy per token of one concurrency over several launches into the pooled level ``out``: the mean of
    the launch figures, +- the wider of t(k - 1) sqrt(s_between^2 / k) and the launches' own root-mean-square
    half-width (as pooling.pool_level pools throughput), with the two terms kept for the family-wise interval."""
    figures = []
    for level in levels:
        value = _num(level.get("energy_j_per_output_token"))
        terms = window_terms(level, value) if value and value > 0 else None
        if value and value > 0:
            figures.append((value, math.sqrt(math.fsum(w * w for w in terms)) if terms else None))
    confounders = sorted({c for lv in levels for c in lv.get("energy_confounders") or []})
    out["energy_confounders"] = confounders
    if len(figures) < 2:
        return
    k = len(figures)
    xs = [x for x, unused in figures]
    mean = math.fsum(xs) / k
    between = math.fsum((x - mean) ** 2 for x in xs) / (k - 1)
    within = [w for unused, w in figures if w is not None]
    within_rms = math.sqrt(math.fsum(w * w for w in within) / len(within)) if within else 0.0
    spread = t975(k - 1) * math.sqrt(between / k) / mean
    half = max(spread, within_rms)
    out["energy_j_per_output_token"] = round(mean, 6)
    out["energy_launch_j_per_output_token"] = [round(x, 6) for x in xs]
    out["energy_launches"] = k
    out["energy_j_per_output_token_ci95"] = [round(mean * math.exp(-half), 6), round(mean * math.exp(half), 6)]
    out["energy_ci_terms"] = [[round(spread, 6), k - 1], [round(within_rms, 6), None]]
    out.pop("energy_j_per_output_token_bounds", None)  # each launch's bounds are in its within term


def mode_fields(level: dict | None) -> dict:
    """A mode's energy per token at a level for summary.json (rounded), interval and confounders."""
    found = side(level)
    return {"energy_j_per_output_token": _rnd(found["value"], 6) if found else None,
            "energy_j_per_output_token_ci95": _rnd_pair(found["ci95"], 6) if found else None,
            "energy_confounders": found["confounders"] if found else []}


def energy_rows(rows: list[dict], levels: dict, base_mode: str, spec_mode: str, floor: dict | None,
                alpha: float = FAMILY_ALPHA) -> dict:
    """Per row: the energy ratio spec / baseline with its 95% and family-wise intervals and its verdict;
    returns the energy summary (family, crossover, method). ``levels``: concurrency -> (base level, spec level)."""
    family = []
    for row in rows:
        base, spec = levels.get(row["concurrency"], (None, None))
        b, s = side(base), side(spec)
        row["energy_ratio"] = row["energy_ratio_ci95"] = row["energy_ratio_ci_family"] = None
        one_side = sorted({c for found in (b, s) if found for c in found["confounders"]})
        row["energy_confounders"] = one_side
        if row.get("verdict") in (FAILED, SATURATED):
            row["energy_verdict"] = row["verdict"]
            continue
        if b is None or s is None:
            row["energy_verdict"] = NO_TELEMETRY
            continue
        ratio, ci = ratio_ci(s["value"], s["ci95"], b["value"], b["ci95"])
        row["energy_ratio"], row["energy_ratio_ci95"] = _rnd(ratio), _rnd_pair(ci)
        parts = None
        if ci and b["launches"] > 1 and s["launches"] > 1:
            parts = [b["parts"], s["parts"]]
            from_floor = floor_ci(ratio, b, s, floor)
            if from_floor:
                row["energy_ratio_ci95_launches"] = row["energy_ratio_ci95"]
                row["energy_ratio_ci95"], parts = _rnd_pair(from_floor[0]), from_floor[1]
        elif ci:
            scratch = {"energy_ratio": ratio, "energy_ratio_ci95": ci}
            if _add_launch_part(scratch, "energy_ratio", floor, 2.0):
                row["energy_ratio_ci95"] = _rnd_pair(scratch["energy_ratio_ci95"])
                parts = scratch["ci_parts"]
            else:
                parts = [[[round(log_half_width(ratio, ci), 6), None]]]
        if bool(b["confounders"]) != bool(s["confounders"]):
            row["energy_verdict"] = CONFOUNDED
            continue
        family.append((row, parts))
    z = hold_family(family, "energy_ratio", alpha, SAVES, COSTS, UNCLEAR_E)
    family = [row for row, unused in family]
    for row in family:
        row["energy_verdict"] = row.pop("energy_ratio_verdict")
    single = [r["concurrency"] for r in family if not floor and (r.get("launches") or 1) == 1]
    notes = ([f"launch-to-launch variation is NOT in the energy intervals of C={', '.join(map(str, single))}: "
              "measured in one launch per mode on a node without a noise floor"] if single else [])
    return {"family": {"levels": len(family), "alpha": alpha, "z": _rnd(z, 3)},
            "crossover": energy_crossover(rows), "notes": notes, "method": ENERGY_METHOD}


def floor_ci(ratio: float, base: dict, spec: dict, floor: dict | None) -> tuple[list[float], list] | None:
    """Pooled launches on both sides and a node floor with more degrees of freedom than they have: the launch
    part from the floor (t on its degrees of freedom, sd sqrt(1/k_base + 1/k_spec)), the windows' part from the
    launches' own root-mean-square widths, as launch_noise.pooled_ci holds a pooled speedup. None otherwise."""
    if not floor or not floor.get("launch_sd") or int(floor["df"]) <= min(base["launches"], spec["launches"]) - 1:
        return None
    launch = (t975(int(floor["df"])) * float(floor["launch_sd"])
              * math.sqrt(1.0 / base["launches"] + 1.0 / spec["launches"]))
    windows = math.hypot(base["parts"][1][0], spec["parts"][1][0])
    width = math.hypot(launch, windows)
    return ([ratio * math.exp(-width), ratio * math.exp(width)],
            [[[round(launch, 6), floor_dfs(floor)]], [[round(windows, 6), None]]])


def energy_crossover(rows: list[dict]) -> dict:
    """Where speculation starts costing more joules per token than it saves: between the last level that
    clearly saves and the first that clearly costs more after it (log-linear on the ratio's point figures),
    beside the throughput crossover. None with the reason when the verdicts show no such turn."""
    decided = [(r["concurrency"], r["energy_ratio"], r["energy_verdict"]) for r in rows
               if r.get("energy_verdict") in (SAVES, COSTS)]
    if not decided:
        return {"concurrency": None, "text": "no level decided on energy (no telemetry, unclear or confounded)"}
    if all(v == SAVES for unused, unused_r, v in decided):
        return {"concurrency": None, "text": f"speculation saves energy per token at every decided level "
                                             f"(C={', '.join(str(c) for c, unused, unused_v in decided)})"}
    if decided[0][2] == COSTS:
        return {"concurrency": None, "text": "speculation costs more energy per token from the first decided level on"}
    first_cost = next(i for i, d in enumerate(decided) if d[2] == COSTS)
    c0, r0 = decided[first_cost - 1][:2]
    c1, r1 = decided[first_cost][:2]
    # energy ratio > 1 is the losing side: the same crossing as a speedup below 1, mirrored
    at = interpolated_crossing([c0, c1], [1.0 / r0, 1.0 / r1], STOPS)
    return {"concurrency": _rnd(at, 3), "bracket": [c0, c1],
            "text": f"speculation saves energy per token up to C={c0} and costs more from C={c1} "
                    f"(ratio 1 near C={at:.3g}, log-linear between them)" if at else
                    f"speculation saves energy per token up to C={c0} and costs more from C={c1}"}


__all__ = ["ENERGY_METHOD", "Z975", "energy_rows", "mode_fields", "pool_energy", "side"]
