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


def read_interval(ci, margin: float) -> str:
    """A proof's verdict from a ratio's (simultaneous) interval: worse below 1, better above, matches when it
    straddles 1 inside [1 - margin, 1 / (1 - margin)], else unclear (no interval included)."""
    if ci is None:
        return UNCLEAR
    if ci[1] < 1.0:
        return WORSE
    if ci[0] > 1.0:
        return BETTER
    if ci[0] >= 1.0 - margin and ci[1] <= 1.0 / (1.0 - margin):
        return MATCHES
    return UNCLEAR


def family_proof_verdicts(rows: list[dict], margin: float, alpha: float = FAMILY_ALPHA) -> list[dict]:
    """Each row's verdict (worse / better / matches / unclear) from the simultaneous interval over every
    row with a ratio and an interval, holding them all at once at ``alpha`` (a look of a sequence spends its
    share: sequential.open_look_alpha); ``ratio_ci95`` stays the level's own 95% interval. A ratio widened by
    the node's floor scales each part by its own quantile, the floor's launch part on the whole family's
    (intervals.family_ci, as the comparison's own verdicts do: one launch effect moves every level at once)."""
    if not 0 < margin < 0.5:
        raise ValueError(f"serve_match_margin must lie in (0, 0.5), got {margin!r}")
    family = [r for r in rows if r.get("ratio") and r.get("ratio_ci95")]
    z = family_z(len(family), alpha)
    each = alpha / max(1, len(family))
    for row in rows:
        ci = (family_ci(row.get("ratio"), row.get("ratio_ci95"), z, parts=row.get("ci_parts"), alpha_family=each,
                        alpha_total=alpha)
              if row in family else None)
        row["ratio_ci_family"] = _rnd_pair(ci)
        row["verdict"] = read_interval(ci, margin)
    return rows


def combine_looks(looks: list[dict], margin: float) -> dict[int, dict]:
    """The combined verdict of every look of one configuration on one node, level by level.

    ``looks``: in order, each ``{"look": k, "levels": [{"concurrency", "ratio_ci_family", ...}]}`` whose
    simultaneous intervals were taken at look k's share of the error rate (sequential.open_look_alpha: the shares
    sum to FAMILY_ALPHA however many looks there are). With probability at least 1 - FAMILY_ALPHA every interval
    of every look holds the truth at once (Bonferroni, whatever the looks' correlation: a re-proof in place shares
    the served launch, every look shares the run's reference), so their intersection does too: the combined
    interval at a level is the intersection of its looks' intervals, and its verdict is read from that
    (``read_interval``). A look can only narrow it: a level once clearly slower stays so (a re-run cannot
    manufacture a pass), and more looks of a tie can only move it towards "matches". An empty intersection
    (two looks' intervals apart) says the truth moved between them (the node changed, not the evidence): the level
    reads unclear with ``disagree`` set.

    Returns ``{concurrency: {"ratio_ci_combined", "verdict", "looks", "disagree", "verdicts"}}``, ``looks`` the
    number of looks with an interval there, ``verdicts`` each look's own verdict in order."""
    out: dict[int, dict] = {}
    for look in looks:
        for row in look.get("levels") or []:
            conc = row["concurrency"]
            cell = out.setdefault(conc, {"ratio_ci_combined": None, "verdict": UNCLEAR, "looks": 0,
                                         "disagree": False, "verdicts": []})
            cell["verdicts"].append(row.get("verdict"))
            ci = row.get("ratio_ci_family")
            if not ci or cell["disagree"]:
                continue
            cell["looks"] += 1
            now = cell["ratio_ci_combined"]
            lo, hi = (ci[0], ci[1]) if now is None else (max(now[0], ci[0]), min(now[1], ci[1]))
            if lo > hi:
                cell["disagree"], cell["ratio_ci_combined"] = True, None
            else:
                cell["ratio_ci_combined"] = [lo, hi]
    for cell in out.values():
        cell["verdict"] = UNCLEAR if cell["disagree"] else read_interval(cell["ratio_ci_combined"], margin)
    return out
