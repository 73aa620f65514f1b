# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Refinement around the crossing: the next round of levels to measure."""

from __future__ import annotations

import math

from .verdict import FAILED, SATURATED, UNCLEAR

REFINE_MIN_STEP = 1.08  # a bracket narrower than this (hi/lo) has no level worth adding inside


def refine_plan(comparison: dict, ratio: float = 1.3, budget_s: float | None = None, spent_s: float = 0.0,
                level_cost_s: float = 0.0, launch_cost_s: float = 0.0, max_new: int = 4, modes: int = 2) -> dict:
    """The next refinement round for one comparison (a compare_pair / summary dict).

    For every crossing whose 95% interval (the model-free bracket between the last level that
    clearly pays and the first that clearly loses) is wider than ``ratio`` (hi/lo), the geometric
    midpoint of its bracket (rounded, not yet measured); every ``unclear``, ``failed`` or ``saturated``
    level is measured again (its runs pooled: a saturated launch is left out of the pool once another
    launch at its level kept up, pooling.pool_level), at most ``max_new`` more times. Both modes at
    each level, one launch per mode.
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
        elif lv.get("verdict") == FAILED and conc not in repeat and (lv.get("launches") or 1) < 1 + max_new:
            repeat.append(int(conc))
            why.append(f"C={conc}: failed ({lv.get('failed')}), measured again")
        elif lv.get("verdict") == SATURATED and conc not in repeat and (lv.get("launches") or 1) < 1 + max_new:
            # No evidence about the node (the machine did not keep up through the sweep's own retries):
            # beside a loaded suite a baseline at C=80 lost up to 25% of its schedule in four tries, and
            # with no launch of it kept, the run read "pays at every level measured, up to C=20".
            repeat.append(int(conc))
            why.append(f"C={conc}: saturated (the machine did not keep up), measured again")
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
    failed_left = [c for c in repeat if any(lv.get("concurrency") == c and lv.get("verdict") == FAILED for lv in levels)]
    if crossings and all(w is not None and w < ratio for w in widths) and not failed_left:
        done, reason = True, f"every crossing's interval (its bracket) is within hi/lo {ratio:g}"
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
