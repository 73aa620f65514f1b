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

import math

from .common import BASELINE, _interval, _num, _rnd_pair
from .intervals import family_ci, log_half_width
from .launch_noise import launch_terms
from .schedule import _on_at
from .sequential import open_look_alpha
from .verdict import FAMILY_ALPHA, Z975, family_z

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
    share: sequential.planned_look_alpha); ``ratio_ci95`` stays the level's own 95% interval. A ratio widened by
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

    ``looks``: in order, each ``{"look": k, "server", "floor", "levels": [{"concurrency", "ratio",
    "ratio_ci_family", "served_ci95", "best_static_ci95", ...}]}`` (serve_proof.look_record). After look j the
    looks 1..j are pooled (``pooled_looks``: one log ratio per served launch, the launches' mean, its interval
    from the windows and the floor's launch part, which shrinks as launches accumulate) and held at look j's share
    of the error rate (its stored ``alpha``: sequential.planned_look_alpha, the shares sum to FAMILY_ALPHA however many
    looks there are; a look stored without one: sequential.open_look_alpha),
    simultaneous over the levels. With probability at least 1 - FAMILY_ALPHA every one of those intervals holds
    the truth at once (Bonferroni over the looks, whatever their correlation), so their intersection does too: the
    combined interval at a level is the intersection of the pooled intervals after each look, and its verdict is
    read from that (``read_interval``). Evidence accumulates (a 10% slower configuration relaunched three times is
    caught where one launch is not), a level once clearly slower stays so (a re-run cannot manufacture a pass), and
    more looks of a tie can only move it towards "matches". Looks on one server share its launch effect and looks
    held to one reference measurement share that one's: pooling them narrows nothing of the launch part. A level of
    a look stored without its raw figures adds its own simultaneous interval (``ratio_ci_family``) instead. An empty
    intersection (two intervals apart) says the truth moved between them (the node changed, not the evidence):
    the level reads unclear with ``disagree`` set.

    Returns ``{concurrency: {"ratio_ci_combined", "ratio_ci_pooled", "verdict", "looks", "launches", "disagree",
    "verdicts"}}``, ``looks`` the number of looks with an interval there, ``launches`` the served launches pooled,
    ``ratio_ci_pooled`` the pooled interval after the last look, ``verdicts`` each look's own verdict in order."""
    out: dict[int, dict] = {}
    for j, look in enumerate(looks, start=1):
        pooled = pooled_looks(looks[:j], margin, float(look.get("alpha") or open_look_alpha(j)))
        for row in look.get("levels") or []:
            conc = row["concurrency"]
            cell = out.setdefault(conc, {"ratio_ci_combined": None, "ratio_ci_pooled": None, "verdict": UNCLEAR,
                                         "looks": 0, "launches": 0, "disagree": False, "verdicts": []})
            cell["verdicts"].append(row.get("verdict"))
            own = row.get("ratio_ci_family")
            if not own or cell["disagree"]:
                continue
            cell["looks"] += 1
            mine = pooled.get(conc)
            ci = mine["ratio_ci_family"] if mine and mine.get("ratio_ci_family") else own
            if mine and mine.get("ratio_ci_family"):
                cell["ratio_ci_pooled"], cell["launches"] = mine["ratio_ci_family"], mine["launches"]
            now = cell["ratio_ci_combined"]
            lo, hi = (ci[0], ci[1]) if now is None else (max(now[0], ci[0]), min(now[1], ci[1]))
            if lo > hi:
                cell["disagree"], cell["ratio_ci_combined"] = True, None
            else:
                cell["ratio_ci_combined"] = [lo, hi]
    for cell in out.values():
        cell["verdict"] = UNCLEAR if cell["disagree"] else read_interval(cell["ratio_ci_combined"], margin)
    return out


def _log_se(value, ci) -> float | None:
    """The log standard error of a 95% interval around ``value`` (None without one)."""
    value, ci = _num(value), _interval(ci)
    if value is None or value <= 0 or ci is None or ci[0] <= 0:
        return None
    return log_half_width(value, ci) / Z975


def pooled_looks(looks: list[dict], margin: float, alpha: float) -> dict[int, dict]:
    """The looks' pooled ratio at each level, held simultaneously over the levels at ``alpha``.

    Per level, every look with a simultaneous interval there (a level ``check_unmoved`` set aside has none) and its
    raw figures (the ratio, the served and the reference windows) counts. The looks taken on one server (its pid
    and start time) are one launch: their mean log ratio is the launch's, and its window variance the mean of
    theirs (looks in place may drift apart; averaging them claims nothing narrower). The pooled log ratio is the
    launches' mean (equal weights, a launch's effect is the same size whichever look measured it). Its interval:
    the windows (each launch's served variance, each reference measurement's variance once, weighted by the share
    of launches held to it) and the floor's launch part with the factor ``1/m + sum over reference measurements of
    (share^2 / reference launches)`` - m served launches average their launch effects out, a reference measured
    once and held to every launch does not (launch_noise.launch_terms; the last look's floor; without one the
    windows alone, as a single proof). Returns ``{concurrency: {"ratio", "ratio_ci95", "ratio_ci_family",
    "verdict", "launches"}}``."""
    by_level: dict[int, list[tuple]] = {}
    for n, look in enumerate(looks):
        server = look.get("server") or {}
        launch = (server.get("pid"), server.get("starttime")) if server.get("pid") is not None else ("look", n)
        for row in look.get("levels") or []:
            ratio = _num(row.get("ratio"))
            served = _log_se(row.get("served_tok_per_s"), row.get("served_ci95"))
            ref = _log_se(row.get("best_static_tok_per_s"), row.get("best_static_ci95"))
            if not row.get("ratio_ci_family") or ratio is None or ratio <= 0 or served is None or ref is None:
                continue
            reference = (row.get("best_static_mode"), row.get("best_static_tok_per_s"),
                         tuple(row.get("best_static_ci95") or ()))
            by_level.setdefault(row["concurrency"], []).append(
                (launch, reference, math.log(ratio), served, ref, max(1, int(row.get("reference_launches") or 1))))
    pooled = {conc: _pool_level(entries) for conc, entries in sorted(by_level.items())}
    floor = with_looks_spread(next((lo.get("floor") for lo in reversed(looks) if lo.get("floor")), None),
                              list(pooled.values()))
    rows = []
    for conc, cell in pooled.items():
        window = Z975 * math.sqrt(cell["window_var"])
        row = {"concurrency": conc, "ratio": math.exp(cell["estimate"]), "launches": cell["m"]}
        terms = launch_terms(floor, cell["factor"], data_bound=True) if floor and floor.get("launch_sd") else None
        width = math.hypot(window, max(t[0] for t in terms)) if terms else window
        row["ratio_ci95"] = [math.exp(cell["estimate"] - width), math.exp(cell["estimate"] + width)]
        if terms:
            row["ci_parts"] = [[[window, None]], terms]
        rows.append(row)
    family_proof_verdicts(rows, margin, alpha)
    return {row["concurrency"]: row for row in rows}


def _pool_level(entries: list[tuple]) -> dict:
    """One level's looks pooled (``pooled_looks``): the launches' mean log ratio, its window variance, the launch
    part's factor, and each launch's mean and window variance with whether every launch had references of its own
    (``with_looks_spread`` reads their spread only then)."""
    launches: dict = {}
    for entry in entries:
        launches.setdefault(entry[0], []).append(entry)
    m = len(launches)
    means, own_vars, shares = [], [], {}
    for group in launches.values():
        means.append(math.fsum(e[2] for e in group) / len(group))
        own_vars.append(math.fsum(e[3] ** 2 + e[4] ** 2 for e in group) / len(group))
        for e in group:
            share = shares.setdefault(e[1], [0.0, e[4], e[5], set()])
            share[0] += 1.0 / (m * len(group))
            share[3].add(e[0])
    served_var = math.fsum(math.fsum(e[3] ** 2 for e in group) / len(group) for group in launches.values()) / m ** 2
    return {"m": m, "estimate": math.fsum(means) / m, "means": means, "own_vars": own_vars,
            "window_var": served_var + math.fsum(a * a * se * se for a, se, unused, unused2 in shares.values()),
            "factor": 1.0 / m + math.fsum(a * a / k for a, unused, k, unused2 in shares.values()),
            "own_references": all(len(launched) == 1 for unused, unused2, unused3, launched in shares.values()),
            "ref_factor": 1.0 + math.fsum(1.0 / k for unused, unused2, k, unused3 in shares.values()) / len(shares)}


def with_looks_spread(floor: dict | None, cells: list[dict]) -> dict | None:
    """The floor with the proof's own launches added as evidence about the launch sd: where every served launch was
    held to references measured for it alone (serve_measure_references), each launch's log ratio is one draw of
    two launch effects (``1 + 1/k_ref`` of the launch variance) and its windows; their spread about the launches'
    mean, less the windows' variance, estimates the launch variance on ``m - 1`` degrees of freedom (the levels
    pooled, counted once: a launch moves all its levels alike, launch_noise.estimate). It is pooled with the floor's
    sd and the floor's own data's, weighted by degrees of freedom, as a compare run's part is (launch_noise.floor_from);
    without a floor the launches' own estimate stands alone. Anything else (fewer than two launches, a reference held
    to two launches, a node that changed between them: its drift counts as launch variation, the conservative way):
    the floor as it was."""
    usable = [c for c in cells if c["m"] >= 2 and c["own_references"]]
    if not usable:
        return floor
    df_looks = min(c["m"] for c in usable) - 1
    variance = math.fsum(
        max(0.0, (math.fsum((x - c["estimate"]) ** 2 for x in c["means"]) / (c["m"] - 1)
                  - math.fsum(c["own_vars"]) / c["m"]) / c["ref_factor"]) for c in usable) / len(usable)
    if not floor:
        return {"launch_sd": math.sqrt(variance), "df": df_looks, "df_levels": df_looks, "looks_df": df_looks}
    out = dict(floor)
    df, data_df = int(floor["df"]), int(floor.get("df_data") or 0)
    out["launch_sd"] = math.sqrt((df * float(floor["launch_sd"]) ** 2 + df_looks * variance) / (df + df_looks))
    out["launch_sd_data"] = math.sqrt((data_df * float(floor.get("launch_sd_data") or 0.0) ** 2
                                       + df_looks * variance) / (data_df + df_looks))
    out["df"], out["df_data"] = df + df_looks, data_df + df_looks
    out["df_levels"] = int(floor.get("df_levels") or df) + df_looks
    out["looks_df"] = df_looks
    return out
