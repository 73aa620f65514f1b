# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The advice from the regions, and SGLang's adaptive table that carries it out."""

from __future__ import annotations

import math

from .crossover import ADD_LEVELS_RATIO
from .verdict import FAILED, LOSES, PAYS, UNCLEAR

# SGLang 0.5.23's default --speculative-adaptive-config rows (srt/speculative/adaptive_spec_params.py):
# from batch size N, the candidate draft-step counts; 0 is plain decode.
SGLANG_DEFAULT_ADAPTIVE = {"1": [1, 3, 5, 7], "8": [0, 1, 3], "32": [0, 1], "64": [0]}


def speculate_ranges(cross: dict, c_min: float | None = None) -> list[list]:
    """Concurrency ranges to speculate in, ``[from, below)``: the one speculation rule (verdict.paying_runs).

    From a level that clearly pays (family-wise) to the last level that clearly pays after it with
    no other level between: never across a level that is missing, unclear, failed or saturated,
    never below the lowest or above the highest level measured. ``below`` is the last paying
    level + 1 (never open). A hand-made ``cross`` without ``paying_runs`` reads its regions.
    """
    del c_min
    runs = cross.get("paying_runs")
    if runs is None:
        runs = [[r["from_concurrency"], r["to_concurrency"]] for r in cross.get("regions") or []
                if r.get("verdict") == PAYS]
    return [[max(1, int(math.ceil(first))), int(math.floor(last)) + 1] for first, last in runs]


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
    of the speculative mode measured) every row inside a measured range offers that many and no
    more: the measurement says speculating with that many pays, not with more, and a row of fewer
    only would serve a configuration the run never measured.
    """

    def capped(steps: list[int]) -> list[int]:
        if max_steps is None:
            return steps
        # No more steps than were measured, and always the count measured: a row offering only fewer
        # (SGLang's default [0, 1] at batch size 32) would serve a configuration the run never measured.
        return sorted({s for s in steps if s <= max_steps} | {max_steps})

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
    """[[1, 3], [30, 71]] -> "from C=1 to C=2 and again from C=30 to C=70" (each end a level that clearly pays)."""
    words = []
    for start, below in ranges:
        last = None if below is None else below - 1
        if last is None:
            words.append(f"from C={start}")
        else:
            words.append(f"at C={start}" if last <= start else f"from C={start} to C={last}")
    return " and again ".join(words)


def _regions_words(regs: list[dict], verdicts: tuple) -> str:
    parts = []
    for reg in regs:
        if reg["verdict"] in verdicts:
            lo, hi = reg["from_concurrency"], reg["to_concurrency"]
            parts.append(f"C={lo:g}" if lo == hi else f"C={lo:g} to {hi:g}")
    return " and ".join(parts)


def _unmeasured_words(cross: dict, c_min: float | None, c_max: float | None) -> str:
    """What the advice cannot speak for: above the highest level, below the lowest, levels left out."""
    if c_max is None:
        return ""
    text = f" Nothing was measured above C={c_max:g}"
    text += f" or below C={c_min:g}" if c_min is not None and c_min > 1 else ""
    text += ": the advice does not reach there."
    excluded = cross.get("excluded") or []
    if excluded:
        where = ", ".join(f"{e['concurrency']:g}" for e in excluded)
        text += (f" C={where} measured the machine, not the node "
                 f"(saturated: {'; '.join(', '.join(e['reasons']) for e in excluded)}): no evidence; measure again "
                 "where client and server keep up.")
    return text


def recommendation(cross: dict, spec_mode: str, levels_measured: list[float], max_steps: int | None = None,
                   refusal: str | None = None, engine: str | None = None) -> dict:
    """The advice from the regions, and the adaptive table that carries it out, built only from clear
    verdicts (``max_steps``: the draft steps of the mode measured, see ``adaptive_table_for``). Every
    text says what was not measured, at both ends, and which levels were no evidence. ``refusal``
    (``serve_guard.adaptive_refusal``): why no adaptive table can serve the mode as it was measured;
    then no table is given, the text says why, and serve_plan serves a static mode."""
    status = cross["status"]
    measured = cross.get("measured") or ([min(levels_measured), max(levels_measured)] if levels_measured else None)
    c_min, c_max = (measured or [None, None])
    ranges = speculate_ranges(cross)
    below = ranges[0][1] if len(ranges) == 1 and ranges[0][0] <= 1 and ranges[0][1] else None
    regs = cross.get("regions") or []
    holes = cross.get("gaps") or []
    table = None
    if ranges:
        table = adaptive_table_for(ranges, c_max, max_steps=max_steps)
    elif status not in ("unclear", "unknown"):
        table = adaptive_table_for([])
    where = _ranges_words(ranges) if ranges else "nowhere"
    # What the adaptive table does at a level with no clear verdict; with no table (``refusal``) nothing to say.
    # What serves the per-level choice: SGLang's adaptive table, or vLLM's schedule (specbench_compare.schedule)
    served_by = "the schedule" if engine == "vllm" else "the table"
    off = "" if refusal else f"; {served_by} runs without speculation there"
    if status == "crosses":
        text = (f"Speculate ({spec_mode}) up to concurrency {below - 1}, the last level that clearly pays; from {below} "
                "concurrent requests run without speculation." if below else
                f"Speculate ({spec_mode}) {where}; elsewhere run without speculation.")
        # Where it stops paying (the bracket, the interpolated point) is the crossover's text: said once, there.
        gap = cross.get("bracket") or [None, None]
        # Levels measured between the two that bracket the crossing, with no clear verdict: named, so that
        # "only these two levels bracket it" never hides a level that was measured and could not tell.
        inside = [r for r in regs if r["verdict"] in (UNCLEAR, FAILED) and gap[0] and gap[1]
                  and gap[0] < r["from_concurrency"] and r["to_concurrency"] < gap[1]]
        if inside:
            text += (f" Between C={gap[0]:g} and C={gap[1]:g}, where it stops paying, at "
                     f"{_regions_words(inside, (UNCLEAR, FAILED))} the data cannot tell: measure more "
                     "there (compare_launches: 2 or more, longer windows)" + off + ".")
        elif gap[0] and gap[1] and gap[1] / gap[0] > ADD_LEVELS_RATIO:
            text += (f" Only the levels C={gap[0]:g} and C={gap[1]:g} bracket where it stops paying: add levels in between "
                     "(compare_refine: true) to pin it down.")
    elif status in ("multiple", "loses_then_pays"):
        n = len(cross.get("crossings") or [])
        # Where it changes (each crossing's bracket and interpolated point) is the crossover's text: said once, there.
        text = (f"Speculate ({spec_mode}) {where}; elsewhere run without speculation: the verdict "
                + ("changes once, from losing to paying" if status == "loses_then_pays" else f"changes {n} times")
                + ("." if refusal else ". vLLM's schedule below turns speculation on and off by batch size."
                   if engine == "vllm" else ". SGLang's adaptive config below turns speculation on and off by batch size."))
    elif status == "never_pays":
        text = (f"Do not speculate at C={c_min:g} to {c_max:g}: {spec_mode} is slower than the baseline at every "
                "level measured there.")
    elif status == "pays_everywhere":
        text = (f"Speculate ({spec_mode}) at every concurrency measured, up to C={c_max:g}: it pays clearly at every "
                "level. Add higher levels to find where it stops paying."
                + ("" if refusal else f" The schedule runs without speculation above C={c_max:g}." if engine == "vllm"
                   else f" The table runs without speculation above C={c_max:g} (SGLang's default rows there become "
                   "steps [0])."))
    elif status.startswith("pays_") or status.startswith("unclear_then_pays"):
        text = (f"Speculate ({spec_mode}) {where}: it pays clearly at {_regions_words(regs, (PAYS,))}. "
                f"At {_regions_words(holes, (UNCLEAR, FAILED))} the data cannot tell: measure more there "
                "(compare_launches: 2 or more, longer windows, compare_refine: true)" + (off and "; until then" + off[1:]) + ".")
    elif status.startswith("loses_") or status.startswith("unclear_then_loses"):
        text = (f"Do not speculate at {_regions_words(regs, (LOSES,))}: {spec_mode} is slower there. At "
                f"{_regions_words(holes, (UNCLEAR, FAILED))} the data cannot tell: measure more there "
                "(compare_launches: 2 or more, longer windows, compare_refine: true).")
    elif status == "unclear":
        text = ("No recommendation yet: at no level is the difference clear (the speedup's interval straddles 1, or "
                "a mode failed). Measure again with compare_launches: 2 or more, or longer windows.")
    else:
        text = "No recommendation: no level has both modes measured with evidence."
    if holes and status in ("crosses", "multiple", "loses_then_pays"):
        text += (f" At {_regions_words(holes, (UNCLEAR, FAILED))} the data cannot tell: measure more there" + off + ".")
    failed = cross.get("failed") or []
    if failed:
        text += (f" C={', '.join(f'{c:g}' for c in failed)} failed in a mode: no verdict there or across it; "
                 "refinement measures it again.")
    if status != "unknown":
        text += _unmeasured_words(cross, c_min, c_max)
    if refusal and table is not None:
        table = None
        if ranges:
            text += (f" No adaptive table: {refusal}. To speculate only where it pays, measure {spec_mode} at top-k 1 "
                     "(sglang_server_speculative_eagle_topk: 1 with sglang_server_speculative_num_steps and "
                     "sglang_server_speculative_num_draft_tokens, one more than the steps) with compare.yml; until then "
                     "a static mode is served, as measured.")
    return {
        "text": text,
        "speculate_below": below,
        "speculate_ranges": ranges,
        "adaptive_table": table,
        "adaptive_config": sglang_adaptive_config(table) if table else None,
        "adaptive_refused": refusal if refusal and ranges else None,
    }
