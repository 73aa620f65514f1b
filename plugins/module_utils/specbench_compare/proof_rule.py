# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The serve proof's rule: which reference each level is held against, and its family-wise verdicts.

serve.yml proves the served configuration against its static counterpart (issue 36, item 2): at a
level where the plan speculates, the speculative mode it serves, run static (``eagle3`` for
``eagle3-adaptive``; for vLLM the scheduled mode with its fixed k); at a level where the plan
deliberately does not speculate (k = 0, the adaptive table off, the baseline served), the
baseline, never "the fastest mode" (which is a different configuration there). The proof makes a
claim at every level at once, so its verdicts read simultaneous intervals over those levels, the
rule every verdict of the comparison follows (verdict.FAMILY_METHOD); each level keeps its own
95% interval beside it. The served configuration runs in a launch of its own, its references were
measured by the compare run: the node's noise floor holds that launch-to-launch variation in each
ratio (launch_noise.widen_proof). This module only says what to hold against what, and how.
"""

from __future__ import annotations

from .common import BASELINE, _rnd_pair
from .intervals import family_ci
from .schedule import _on_at
from .verdict import FAMILY_ALPHA, family_z

WORSE, BETTER, MATCHES, UNCLEAR = "worse", "better", "matches", "unclear"


def static_counterpart(plan: dict, summary: dict) -> str:
    """The static mode the served configuration speculates with (``eagle3-adaptive`` -> ``eagle3``)."""
    mode = plan["mode"]
    comps = summary.get("comparisons") or {}
    if mode.endswith("-adaptive") and mode not in comps:
        return mode[: -len("-adaptive")]
    return mode


def proof_references(summary: dict, plan: dict, levels: list[int]) -> dict[int, str]:
    """``{concurrency: reference mode}``: the static counterpart where the plan speculates, else the baseline."""
    base = summary.get("baseline_mode") or BASELINE
    spec = static_counterpart(plan, summary)
    return {conc: (spec if plan["mode"] != base and _on_at(plan, summary, conc) else base) for conc in levels}


def family_proof_verdicts(rows: list[dict], margin: float) -> list[dict]:
    """Each row's verdict (worse / better / matches / unclear) from the simultaneous interval over every
    row with a ratio and an interval; ``ratio_ci95`` stays the level's own 95% interval."""
    if not 0 < margin < 0.5:
        raise ValueError(f"serve_match_margin must lie in (0, 0.5), got {margin!r}")
    family = [r for r in rows if r.get("ratio") and r.get("ratio_ci95")]
    z = family_z(len(family))
    alpha = FAMILY_ALPHA / max(1, len(family))
    for row in rows:
        # A ratio widened by the node's floor scales each part by its own quantile (intervals.family_ci).
        ci = (family_ci(row.get("ratio"), row.get("ratio_ci95"), z, parts=row.get("ci_parts"), alpha_family=alpha)
              if row in family else None)
        row["ratio_ci_family"] = _rnd_pair(ci)
        if ci is None:
            row["verdict"] = UNCLEAR
        elif ci[1] < 1.0:
            row["verdict"] = WORSE
        elif ci[0] > 1.0:
            row["verdict"] = BETTER
        elif ci[0] >= 1.0 - margin and ci[1] <= 1.0 / (1.0 - margin):
            row["verdict"] = MATCHES
        else:
            row["verdict"] = UNCLEAR
    return rows
