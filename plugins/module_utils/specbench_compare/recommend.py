# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The advice from the regions, and SGLang's adaptive table that carries it out."""

from __future__ import annotations

import math

from .common import fmt_conc
from .crossover import _unclear_words
from .verdict import PAYS, STARTS, STOPS, UNCLEAR

# SGLang 0.5.23's default --speculative-adaptive-config rows (srt/speculative/adaptive_spec_params.py):
# from batch size N, the candidate draft-step counts; 0 is plain decode.
SGLANG_DEFAULT_ADAPTIVE = {"1": [1, 3, 5, 7], "8": [0, 1, 3], "32": [0, 1], "64": [0]}



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
