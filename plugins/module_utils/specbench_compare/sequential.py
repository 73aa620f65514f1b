# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Sequential launches: levels left unclear by the planned launches are measured in added launches, within a budget.

A compare run's planned launches (compare_launches: A B B A on a node without a noise floor, one per mode on one
with) are **look 1**. Where a level is unclear and more launches could still decide it, playbooks/compare.yml adds
**rounds**: each round launches every mode that has such a level once more (order alternating A B, B A, so a drift
over the run falls on every mode alike), measuring only those levels, filed ``<mode>@round<r>.json``. After round
r comes look r + 1, on every launch so far (pooled, the node's floor read again with this run's launches).

**Error over the looks** (Bonferroni spending, valid whatever the looks' correlation and whenever the run stops):
the family-wise rate FAMILY_ALPHA is split before the run between look 1 (FIRST_LOOK_SHARE of it) and the added
rounds (the rest, equally: ``look_alphas``); each look's verdicts are family-wise over the comparison's levels at
its own share. A level keeps the first clear verdict a look gave it while it was measured again in every look
since (``merge_looks``); a level not measured again keeps its last look's verdict and is never re-read, so a claim
is always one of the pre-planned tests and a true tie makes a claim in at most FAMILY_ALPHA of runs however many
looks are taken (decision_coverage.py's ``sequential`` scenario).

**Which levels** (``plan_round``): unclear levels measured in every look so far whose point estimate lies
outside the family-wise half-width they would have at the budget's last launch (the speedup's log sd now, from
its 95% interval and t on the floor's degrees of freedom, shrunk by sqrt(launches now / launches at the budget),
times the last look's family-wise normal quantile), less one sd now: the estimate itself is that uncertain. A
tie inside that reach is left as it is: no launch within the budget can decide it; the plan says how many
launches per mode would.

**Budget**: ``compare_max_launches`` (launches per mode, the planned ones included) and ``compare_time_budget_s``
(seconds of added rounds, estimated before each from the run's own launches: a launch's fixed cost and a level's
warm-up and window). The run stops when every level is decided, no level could still be, or the budget is spent.
"""

from __future__ import annotations

import math
import re
from statistics import NormalDist

from ..specbench_client.stats import t975
from .verdict import CLEAR, FAMILY_ALPHA, UNCLEAR, Z975

# The share of FAMILY_ALPHA look 1 spends; the added rounds share the rest equally. Look 1 decides the clear
# effects (a speedup of 0.5 or 2) at once; the added rounds, whose levels are the close ones, keep enough to decide
# a 10% gain (decision_coverage.py's ``power`` scenario chose it).
FIRST_LOOK_SHARE = 0.3
ROUND_TAG = re.compile(r"^round(\d+)$")
SEQUENTIAL_METHOD = (
    "sequential launches: levels the planned launches left unclear, and that more launches could still decide, are "
    "measured again in added rounds (one launch per mode each, order alternating) up to compare_max_launches per mode "
    "and compare_time_budget_s; the family-wise error rate is split before the run between the looks (Bonferroni "
    "spending: look 1 {first:.1%}, each added round {each:.2%}), each look's verdicts family-wise over the levels at "
    "its share; a level keeps the first clear verdict of a look while it was measured again in every look since"
)


def look_alphas(rounds: int, alpha: float = FAMILY_ALPHA) -> list[float]:
    """The family-wise error rate each look spends: look 1 (the planned launches) and ``rounds`` added rounds.
    All of ``alpha`` to look 1 when no round may be added."""
    rounds = max(0, int(rounds))
    if rounds == 0:
        return [alpha]
    first = alpha * FIRST_LOOK_SHARE
    return [first] + [(alpha - first) / rounds] * rounds


def open_look_alpha(look: int, alpha: float = FAMILY_ALPHA) -> float:
    """The error rate look ``look`` (1, 2, ...) of an open-ended sequence spends: ``alpha * 6 / (pi^2 look^2)``.

    The shares sum to ``alpha`` over every look there could ever be (sum of 1/k^2 = pi^2/6), so however many looks
    are taken, and whenever the sequence stops, the chance that any look's intervals miss is at most ``alpha``
    (Bonferroni: valid whatever the looks' correlation). Look 1 gets 60.8% of it, look 2 15.2%, look 3 6.8%. A serve
    proof's sequence spends it beyond its plan (``planned_look_alpha``), and a sequence stored without a plan to its
    end."""
    k = int(look)
    if k < 1:
        raise ValueError(f"look must be 1 or more, got {look!r}")
    return alpha * 6.0 / (math.pi ** 2 * k * k)


# A serve proof's sequence planned for ``planned`` looks (serve_planned_looks): look 1 spends PLANNED_FIRST_SHARE of
# FAMILY_ALPHA (a clear regression is decided by the first proof), looks 2..planned share the rest but
# PLANNED_TAIL_SHARE equally, and every look beyond the plan spends PLANNED_TAIL_SHARE x 6/(pi^2 j^2) (j = look -
# planned), so the shares sum to FAMILY_ALPHA however many looks are taken. decision_coverage.py's ``serve`` scenario
# chose them (its "serve spending" lines): against the open rule (look 3: 0.34%) a 10% slower configuration relaunched
# on a floor of one compare run is caught by look 3 in about 9 sequences in 10 instead of 7, at a cost to look 1 (2.25%
# instead of 3.04%: a 20% slower one is caught by the first proof in about 8 in 10 instead of 9 on that floor).
PLANNED_FIRST_SHARE = 0.45
PLANNED_TAIL_SHARE = 0.10


def planned_look_alpha(look: int, planned: int | None, alpha: float = FAMILY_ALPHA) -> float:
    """The error rate look ``look`` (1, 2, ...) of a serve proof's sequence spends, the sequence planned at its first
    look for ``planned`` looks (the first proof and its re-proofs). ``planned`` None or 0: a sequence started before
    plans were kept, the open rule (``open_look_alpha``) to its end.

    Planned looks: look 1 ``alpha * PLANNED_FIRST_SHARE`` (with ``planned`` 1: all but the tail), looks 2..planned
    ``alpha * (1 - PLANNED_FIRST_SHARE - PLANNED_TAIL_SHARE) / (planned - 1)`` each; beyond the plan, look
    ``planned + j`` spends ``alpha * PLANNED_TAIL_SHARE * 6 / (pi^2 j^2)``. Over every look there could ever be the
    shares sum to ``alpha`` (Bonferroni, valid whatever the looks' correlation and whenever the sequence stops). With
    3 planned: 2.25%, 1.125%, 1.125%, then 0.30%, 0.076%, ... An open-ended rule gives look 3 only 0.34% and so needs
    a fourth relaunch where the plan's third decides: the plan is the evidence spent where the user means to look."""
    k = int(look)
    if k < 1:
        raise ValueError(f"look must be 1 or more, got {look!r}")
    if not planned:
        return open_look_alpha(k, alpha)
    n = int(planned)
    if n < 1:
        raise ValueError(f"serve_planned_looks must be 1 or more, got {planned!r}")
    if k > n:
        return alpha * PLANNED_TAIL_SHARE * open_look_alpha(k - n, 1.0)
    if n == 1:
        return alpha * (1.0 - PLANNED_TAIL_SHARE)
    if k == 1:
        return alpha * PLANNED_FIRST_SHARE
    return alpha * (1.0 - PLANNED_FIRST_SHARE - PLANNED_TAIL_SHARE) / (n - 1)


def method_text(rounds: int, alpha: float = FAMILY_ALPHA) -> str:
    alphas = look_alphas(rounds, alpha)
    return SEQUENTIAL_METHOD.format(first=alphas[0], each=alphas[1] if len(alphas) > 1 else 0.0)


def round_number(tag: str | None) -> int | None:
    """'round3' -> 3; any other tag (None, launch2, refine1) -> None."""
    found = ROUND_TAG.match(tag or "")
    return int(found.group(1)) if found else None


def rounds_done(runs: dict[str, list]) -> int:
    """The added rounds a host's runs hold ({mode: [(tag, results), ...]}, pooling.load_host_runs)."""
    return max((round_number(tag) or 0 for found in runs.values() for tag, unused in found), default=0)


def runs_at_look(runs: dict[str, list], look: int) -> dict[str, list]:
    """The runs as they stood at ``look`` (1: the planned launches; r + 1: after round r)."""
    return {mode: [(tag, data) for tag, data in found if (round_number(tag) or 0) < look]
            for mode, found in runs.items()}


def merge_looks(looks: list[list[dict]]) -> tuple[list[dict], dict]:
    """The final rows from every look's rows (in order, the last the run as it stands) and the sequence record.

    A level's look count is the number of consecutive looks from the first in which it was measured again
    (its launches grew); its row is that of the first of those looks that gave a clear verdict, else that of its
    last look. Rows carry ``look`` (the look whose verdict they hold) and ``looks`` (how many looks measured it)."""
    last = looks[-1]
    by_look = [{row["concurrency"]: row for row in rows} for rows in looks]
    out, levels = [], {}
    for row in last:
        conc = row["concurrency"]
        seen = 1
        for j in range(1, len(looks)):
            before, now = by_look[j - 1].get(conc), by_look[j].get(conc)
            if before is None or now is None or (now.get("launches") or 1) <= (before.get("launches") or 1):
                break
            seen = j + 1
        chosen = next((j for j in range(seen) if by_look[j].get(conc, {}).get("verdict") in CLEAR), None)
        pick = chosen if chosen is not None else seen - 1
        picked = dict(by_look[pick].get(conc) or row)
        picked["look"], picked["looks"] = pick + 1, seen
        if chosen is not None:
            why = f"decided at look {chosen + 1}"
        elif picked.get("verdict") != UNCLEAR:
            why = f"{picked.get('verdict')}: not measured again"
        elif seen < len(looks):
            why = f"unclear: left after look {seen} (no launch within the budget could decide it)"
        else:
            why = f"unclear after {seen} look(s) (the Method section says why the run added no further round)"
        picked["sequential_stop"] = why
        levels[conc] = {"launches": picked.get("launches") or 1, "looks": seen, "decided_at": chosen + 1
                        if chosen is not None else None, "why": why}
        out.append(picked)
    return out, {"looks": len(looks), "levels": levels}


def plan_round(comparisons: dict[str, dict], look: int, rounds: int, max_launches: int, spent_s: float,
               budget_s: float | None, level_cost_s: float, launch_cost_s: float, baseline: str) -> dict:
    """The next added round for one host, from its comparisons at ``look`` (summarize's, every look merged).

    Returns ``{done, levels: {mode: [concurrency]}, order, text, candidates: {mode: [...]}, estimate_s}``;
    ``done`` when nothing is left to decide, no level could be, or the budget (rounds, launches, seconds) is spent."""
    alphas = look_alphas(rounds)
    if look > rounds:
        return _done("every added round of the budget ran (compare_max_launches)", {})
    candidates: dict[str, list[int]] = {}
    ties: dict[str, list[str]] = {}
    for mode, comp in comparisons.items():
        rows = comp.get("levels") or []
        family = max(1, int((comp.get("family") or {}).get("levels") or len(rows) or 1))
        last_q = NormalDist().inv_cdf(1.0 - alphas[-1] / (2.0 * family))
        floor = (comp.get("launch_variation") or {}).get("floor") or {}
        t_now = t975(int(floor["df"])) if floor.get("df") else Z975
        for row in rows:
            if row.get("verdict") != UNCLEAR or (row.get("looks") or 1) < look or not row.get("speedup_ci95"):
                continue
            k = int(row.get("launches") or 1)
            if k >= max_launches:
                continue
            lo, hi = row["speedup_ci95"]
            r = float(row["speedup"])
            if lo <= 0 or r <= 0:
                continue
            # The speedup's log sd now (its 95% interval over t on the floor's degrees of freedom), shrunk to the
            # budget's last launch and held at the last look's family-wise quantile.
            sd_now = math.log(hi / lo) / 2.0 / t_now
            reach = sd_now * math.sqrt(k / max_launches) * last_q
            # Within one sd of reach: the estimate itself is that uncertain.
            if abs(math.log(r)) + sd_now >= reach:
                candidates.setdefault(mode, []).append(int(row["concurrency"]))
            else:
                need = max_launches * (reach / max(abs(math.log(r)), 1e-9)) ** 2
                ties.setdefault(mode, []).append(f"C={row['concurrency']} {r:.3f} (about {math.ceil(need)} launches per "
                                                 "mode would decide it, if the estimate held)")
    tie_text = "; ".join(f"{mode}: {', '.join(t)}" for mode, t in ties.items())
    if not candidates:
        why = "no unclear level that more launches within the budget could decide"
        return _done(why + (f" (left unclear: {tie_text})" if tie_text else ""), {})
    union = sorted({c for levels in candidates.values() for c in levels})
    levels = {baseline: union}
    levels.update({mode: sorted(found) for mode, found in candidates.items()})
    estimate = sum(launch_cost_s + level_cost_s * len(found) for found in levels.values())
    if budget_s is not None and budget_s > 0 and spent_s + estimate > budget_s:
        return _done(f"the next round (about {estimate:.0f} s) would overrun compare_time_budget_s ({budget_s:.0f} s, "
                     f"{spent_s:.0f} s spent)", candidates)
    modes = [baseline] + [m for m in comparisons if m in candidates]
    order = modes if (look % 2 == 1) else list(reversed(modes))
    text = (f"round {look} of at most {rounds}: {', '.join(f'{m} at C={sorted(levels[m])}' for m in order)} "
            f"(about {estimate:.0f} s); look {look + 1} spends {alphas[look]:.2%} of the family-wise error rate"
            + (f"; left unclear: {tie_text}" if tie_text else ""))
    return {"done": False, "levels": levels, "order": order, "text": text, "candidates": candidates,
            "estimate_s": round(estimate, 1)}


def _done(why: str, candidates: dict) -> dict:
    return {"done": True, "levels": {}, "order": [], "text": f"no further round: {why}", "candidates": candidates,
            "estimate_s": 0.0}
