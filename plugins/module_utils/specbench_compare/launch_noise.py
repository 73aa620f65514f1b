# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Launch-to-launch variation: measured by relaunching, stored per node, held in every later interval.

One launch's level mean differs from the launch-population mean by more than its window says:
clocks, thermals, NUMA placement, CUDA graph capture, the machine's other load move a whole
launch (seen on vLLM's CPU build: the same compare read C=16 1.58 [1.50, 1.67], then 1.25 [1.22,
1.29]). A window's interval cannot hold that; only relaunching measures it.

**Measured**: a run with ``compare_launches`` >= 2 (any mode launched more than once, refinement
rounds included) gives, at every level measured in two or more launches of a mode (not
saturated, not failed), the launches' log means ``y_i``. Their deviations from the level's mean,
squared and summed over levels and modes, over ``sum(k - 1)`` (level by level) estimate the
variance of one launch's log level mean, window noise included; less the launches' own mean
window variance (``se^2`` from their intervals) it is the launch part ``sigma_L^2`` (never below 0).
A launch effect can move every level of a launch at once, so the levels of one mode are not
independent evidence about it: the degrees of freedom claimed are ``sum over modes of (k - 1)``
(as if every level moved together), the conservative count.

**Stored**: ``<results_dir>/noise-floor/<host>.json`` holds each run's sum of squares and
degrees of freedom by run id (rendering a run again replaces its own part, never counts it
twice); the floor pools every run younger than ``max_age_days``.

**Held**: a run whose levels were each measured in one launch per mode (``compare_launches: 1``)
reads the floor and widens each level's speedup interval: the log half-width becomes
``sqrt(w^2 + (t * sigma_L * sqrt(1/k_spec + 1/k_base))^2)`` with t on the floor's degrees of
freedom (the family-wise verdicts then scale it like any interval). A level pooled from k >= 2
launches per mode carries the variation in its own between-launch spread, with t on k - 1 degrees
of freedom (12.7 at two launches); where the floor has more degrees of freedom than that (this run's
own part counts: two modes of two launches give 2, t = 4.3), its interval is made from the floor
instead: ``sqrt(sum over both modes of (t sigma_L)^2 / k + w_within^2)``, ``w_within`` each mode's
root-mean-square launch window half-width (never narrower than one launch's own: the launches replay
the same requests). Which interval is used is decided by degrees of freedom, never by width.
Without a floor, nothing is widened and the summary says the intervals hold one launch only.
"""

from __future__ import annotations

import datetime
import json
import math
import os

from ..specbench_client.stats import chi2_lower, t975
from .common import _interval, _num
from .verdict import Z975, level_failure, level_saturation

LAUNCH_METHOD = (
    "launch-to-launch variation: sigma_L^2 = the pooled variance of one launch's log level mean about its level's "
    "mean over launches (levels measured in 2 or more launches of a mode), less the launches' mean window variance; "
    "degrees of freedom sum over modes of (launches - 1), as if a launch moved all its levels together; stored per "
    "node by run id, pooled over runs younger than the floor's age limit; a level measured in one launch per mode "
    "gets t * sigma_L * sqrt(1/k_spec + 1/k_base) added in quadrature to its log half-width; the family-wise interval "
    "scales that part by t's own quantile on the floor's degrees of freedom, the window part by the normal's"
)
MAX_AGE_DAYS = 30.0
# The stated prior on the launch sd: PRIOR_SD, as strong as PRIOR_DF degrees of freedom (one A B B A run
# of two modes gives 2). Two launches cannot tell a launch sd of 0 from one of 5% (their estimate is exactly
# 0 in a third of runs): the prior keeps the floor from reading "no launch variation" from so little, and
# the node's own runs outweigh it as they accumulate.
PRIOR_SD = 0.03
PRIOR_DF = 2
PRIOR_METHOD = (
    "the launch sd is read with a stated prior: {sd:.1%} sd as strong as {df} degrees of freedom, combined with "
    "the node's own estimate weighted by its degrees of freedom (the node's data outweigh it after a few runs); the "
    "floor's one-sided 95% upper bound is reported beside it"
)


def estimate(results: dict[str, dict]) -> dict | None:
    """The launch variation one run measured: ``{ss, df, df_levels, within, levels}`` or None.

    ``results``: mode -> pooled results (pooling.pool_runs: each pooled level carries
    ``launch_tok_per_s`` and ``launch_ci95``)."""
    ss = within = 0.0
    df_levels = n_within = 0
    df_modes = 0
    levels = 0
    for result in results.values():
        most = 0
        for level in (result or {}).get("levels") or []:
            if not isinstance(level, dict) or level_failure(level) or level_saturation(level):
                continue
            xs = [_num(x) for x in level.get("launch_tok_per_s") or []]
            xs = [x for x in xs if x is not None and x > 0]
            if len(xs) < 2:
                continue
            ys = [math.log(x) for x in xs]
            mean = math.fsum(ys) / len(ys)
            ss += math.fsum((y - mean) ** 2 for y in ys)
            df_levels += len(ys) - 1
            levels += 1
            most = max(most, len(ys))
            for given in level.get("launch_ci95") or []:
                ci = _interval(given)
                if ci and ci[0] > 0:
                    within += ((math.log(ci[1]) - math.log(ci[0])) / (2 * Z975)) ** 2
                    n_within += 1
        df_modes += max(0, most - 1)
    if df_levels == 0:
        return None
    return {"ss": ss, "df_levels": df_levels, "df": df_modes, "within": within / n_within if n_within else 0.0,
            "levels": levels}


def floor_from(parts: dict, now: datetime.datetime | None = None, max_age_days: float = MAX_AGE_DAYS,
               key: dict | None = None, prior_sd: float = PRIOR_SD, prior_df: int = PRIOR_DF) -> dict | None:
    """The node's floor from its stored runs ({run_id: {ss, df_levels, df, within, measured_at, key}}), fresh ones
    only, and only those measured on ``key`` (engine, its version, model, GPUs: ``floor_key``) where given.

    The launch variance is read with the stated prior (module docstring, PRIOR_METHOD): ``prior_df`` degrees of
    freedom at ``prior_sd``, combined with the data's own estimate (never below 0) weighted by its per-mode degrees
    of freedom; ``df`` (the t's, per-level intervals) is the prior's plus the data's per-mode count, ``df_levels``
    the prior's plus the level count (the family-wise scaling reads both: intervals.family_ci).
    ``launch_sd_data`` is the data's own estimate, ``launch_sd_upper`` a one-sided 95% upper bound."""
    now = now or datetime.datetime.now(datetime.UTC)
    ss = within = 0.0
    df_levels = df = 0
    used, oldest = [], None
    for run_id, part in sorted((parts or {}).items()):
        try:
            when = datetime.datetime.fromisoformat(str(part["measured_at"]).replace("Z", "+00:00"))
        except (KeyError, ValueError):
            continue
        if (now - when).total_seconds() > max_age_days * 86400:
            continue
        if key is not None and not same_kind(part.get("key"), key):
            continue
        ss += float(part["ss"])
        within += float(part["within"]) * int(part["df_levels"])
        df_levels += int(part["df_levels"])
        df += int(part["df"])
        used.append(run_id)
        oldest = when if oldest is None or when < oldest else oldest
    if df_levels == 0 or df == 0:
        return None
    total = ss / df_levels
    data_var = max(0.0, total - within / df_levels)
    prior_df = max(0, int(prior_df or 0))
    prior_var = float(prior_sd or 0.0) ** 2 if prior_df else 0.0
    # The data weigh as their per-mode degrees of freedom, the conservative count (a launch may move all its
    # levels alike: then the levels' count overstates what the data know, and the prior would be outweighed).
    launch_var = (prior_df * prior_var + df * data_var) / (prior_df + df)
    df_t = prior_df + df
    upper = math.sqrt(df_t * launch_var / chi2_lower(df_t)) if launch_var > 0 else 0.0
    return {"launch_sd": round(math.sqrt(launch_var), 5), "launch_sd_data": round(math.sqrt(data_var), 5),
            "launch_sd_upper": round(upper, 5), "total_sd": round(math.sqrt(total), 5), "df": df_t,
            "df_levels": prior_df + df_levels, "df_data": df,
            "prior": {"sd": float(prior_sd or 0.0), "df": prior_df}, "key": key,
            "runs": used, "oldest": oldest.isoformat() if oldest else None, "max_age_days": max_age_days}


def floor_text(floor: dict) -> str:
    """The floor in words: its sd, upper bound, degrees of freedom and where they come from."""
    prior = floor.get("prior") or {}
    made = f"{floor['df']} degrees of freedom"
    if prior.get("df"):
        made += (f", {prior['df']} of them the stated prior's ({100 * float(prior['sd']):.1f}%; the node's own runs "
                 f"read {100 * float(floor.get('launch_sd_data') or 0):.1f}%)")
    upper = floor.get("launch_sd_upper")
    bound = f", at most {100 * float(upper):.1f}% at 95%" if upper else ""
    return f"sd {100 * float(floor['launch_sd']):.1f}% per launch{bound}, {made}, from {len(floor.get('runs') or [])} run(s)"


def floor_key(results: dict[str, dict]) -> dict:
    """What a floor is measured on: the engine, its version, the model and the GPUs (name, count, driver) that a
    host's results files name (the baseline's first). A floor measured with one model or engine version is
    never read for another, and two nodes of one inventory name with other GPUs keep theirs apart."""
    key = {"engine": None, "engine_version": None, "model": None, "gpu": None, "gpus": None, "gpu_uuids": None,
           "driver": None}
    for result in results.values():
        if not isinstance(result, dict):
            continue
        server = result.get("server") if isinstance(result.get("server"), dict) else {}
        state = ((result.get("gpu") or {}).get("before") or {}) if isinstance(result.get("gpu"), dict) else {}
        gpus = [g for g in state.get("gpus") or [] if isinstance(g, dict)]
        found = {
            "engine": result.get("engine") or server.get("engine"),
            "engine_version": server.get("version"),
            "model": server.get("model") or (result.get("settings") or {}).get("model"),
            "gpu": gpus[0].get("name") if gpus else None,
            "gpus": len(gpus) or None,
            # The GPUs' own ids: two nodes that one inventory name has meant at different times never share a floor.
            "gpu_uuids": ",".join(sorted(str(g.get("uuid")) for g in gpus if g.get("uuid"))) or None,
            "driver": state.get("driver_version"),
        }
        for name, value in found.items():
            if key[name] is None and value not in (None, ""):
                key[name] = value
    return key


def same_kind(stored: dict | None, key: dict) -> bool:
    """Whether a stored run's key matches ``key``: every field both name agrees (a run stored without a key,
    by an older specbench, matches nothing: its engine and model are unknown)."""
    if not isinstance(stored, dict):
        return False
    return all(stored.get(name) == value for name, value in key.items()
               if value is not None and stored.get(name) is not None)


def relaunch_levels(levels: list[int], count: int) -> list[int]:
    """The levels a run that measures the floor re-measures in its second launch of each mode: ``count`` of the
    sweep's ``levels``, spread over them by index from the lowest (1, 2, 5, 10, 30, 70, 100, 250 and 2 -> 1 and
    30: the top level, the likeliest to saturate and so to give no evidence, is the last picked). Every level
    (the list itself) when ``count`` is 0 or reaches their number.

    The floor needs launch-to-launch variation, not every level twice: a launch effect moves all of a launch's
    levels (the degrees of freedom claimed are per mode, ``estimate``), so a few levels measure it; the levels
    measured once per mode hold it as a later run's do (``widen``). The first run on a node then costs two
    launches more than a later one, not twice its time (benchmarks/time_to_decision.py)."""
    ordered = sorted({int(c) for c in levels})
    n = len(ordered)
    if count <= 0 or count >= n:
        return ordered
    return sorted({ordered[(j * n) // count] for j in range(count)})


def floor_file(results_dir: str, host: str) -> str:
    """The host's noise floor file: ``<results_dir>/noise-floor/<host>.json``."""
    return os.path.join(results_dir, "noise-floor", f"{host}.json")


def read_parts(path: str, host: str, warnings: list[str]) -> dict:
    """The runs stored in a host's noise floor file ({run_id: part}), empty when there is none; an
    unreadable file is a warning (the floor starts again), never an error."""
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            parts = (json.load(fh) or {}).get("runs") or {}
        return parts if isinstance(parts, dict) else {}
    except (OSError, ValueError, AttributeError) as exc:
        warnings.append(f"{path}: not readable ({exc}); {host}'s launch noise floor starts again")
        return {}


def node_floor(results_dir: str, host: str, max_age_days: float, warnings: list[str], key: dict | None = None,
               prior_sd: float = PRIOR_SD, prior_df: int = PRIOR_DF) -> dict | None:
    """The host's floor as stored (floor_from over its file, runs of ``key``'s kind only), None when floors are
    off (``max_age_days`` 0)."""
    if not max_age_days or max_age_days <= 0:
        return None
    return floor_from(read_parts(floor_file(results_dir, host), host, warnings), max_age_days=max_age_days,
                      key=key, prior_sd=prior_sd, prior_df=prior_df)


def widen_proof(rows: list[dict], floor: dict | None, reference_launches: dict[int, int]) -> list[int]:
    """The serve proof's rows (serve_proof.proof_rows): the served sweep is one launch, its reference a level of
    the compare run pooled from ``reference_launches[concurrency]`` launches, each measured at another time: the
    floor's launch part ``t * sigma_L * sqrt(1 + 1/k_ref)`` is added to each ratio's interval, as ``widen`` adds
    it to a one-launch comparison (``ratio_ci95_window`` keeps the window-only interval). Returns the
    concurrencies widened."""
    return [row["concurrency"] for row in rows
            if _add_launch_part(row, "ratio", floor,
                                1.0 + 1.0 / max(1, int(reference_launches.get(row["concurrency"]) or 1)),
                                data_bound=True)]


def _launch_windows(level: dict) -> tuple[int, float] | None:
    """A pooled level's launches: (k, the root-mean-square log half-width of their windows), or None when it
    was measured in fewer than two launches or its launches carry no interval."""
    cis = [c for c in (_interval(c) for c in level.get("launch_ci95") or []) if c and c[0] > 0]
    k = len([x for x in level.get("launch_tok_per_s") or [] if _num(x)])
    if k < 2 or not cis:
        return None
    return k, math.sqrt(math.fsum(((math.log(c[1]) - math.log(c[0])) / 2) ** 2 for c in cis) / len(cis))


def within_interval(level: dict | None, floor: dict | None) -> list[float] | None:
    """A level pooled from k >= 2 launches, as the serve proof holds it against a launch of its own: its mean
    with the launches' root-mean-square window half-width alone, where the node's floor has more degrees of
    freedom than its k - 1 (as ``pooled_ci`` decides) - the floor's launch part is then added once, by
    ``widen_proof``, instead of beside the launches' own t(k - 1) spread. None to keep the level's interval."""
    mean = _num((level or {}).get("output_tok_per_s"))
    found = _launch_windows(level) if floor and level else None
    if mean is None or mean <= 0 or found is None or int(floor["df"]) <= found[0] - 1:
        return None
    return [round(mean * math.exp(-found[1]), 3), round(mean * math.exp(found[1]), 3)]


def widen(rows: list[dict], floor: dict | None) -> list[int]:
    """Add the floor's launch variation to every level measured in one launch per mode (module docstring).

    Changes ``speedup_ci95`` in place (``speedup_ci95_window`` keeps the window-only interval);
    returns the concurrencies widened."""
    return [row["concurrency"] for row in rows
            if (row.get("launches") or 1) == 1 and _add_launch_part(row, "speedup", floor, 2.0)]


def _add_launch_part(row: dict, key: str, floor: dict | None, launches_factor: float,
                     data_bound: bool = False) -> bool:
    """``row[key + "_ci95"]`` with ``t * sigma_L * sqrt(launches_factor)`` (t on the floor's degrees of freedom)
    added in quadrature to its log half-width; the window-only interval kept as ``key + "_ci95_window"``, the two
    parts as ``ci_parts`` (the family-wise interval scales each by its own quantile: intervals.family_ci).
    ``data_bound``: the launch part is the wider of the floor's and the node's own data's (``launch_terms``).
    False, the row untouched, without a floor's launch sd or an interval."""
    ci, r = _interval(row.get(f"{key}_ci95")), _num(row.get(key))
    if not floor or not floor.get("launch_sd") or ci is None or r is None or r <= 0 or ci[0] <= 0:
        return False
    w = (math.log(ci[1]) - math.log(ci[0])) / 2.0
    terms = launch_terms(floor, launches_factor, data_bound)
    width = math.hypot(w, max(term[0] for term in terms))
    row[f"{key}_ci95_window"] = row[f"{key}_ci95"]
    row[f"{key}_ci95"] = [round(r * math.exp(-width), 4), round(r * math.exp(width), 4)]
    row["ci_parts"] = [[[round(w, 6), None]], terms]
    return True


def launch_terms(floor: dict, launches_factor: float, data_bound: bool = False) -> list[list]:
    """The launch part of a log half-width at 95%, ``t * sigma_L * sqrt(launches_factor)``, as family_ci's terms
    ``[[width, [df per mode, df per level]], ...]`` (family_ci keeps the widest at the family's quantile).

    The floor's sd on its degrees of freedom, the stated prior's included; with ``data_bound`` also the node's own
    data's sd (``launch_sd_data``) on the data's own degrees of freedom. The prior-weighted sd holds its t's
    coverage only where the true sd is near the prior: a node whose launches vary more than the prior says reads a
    floor too narrow (5% launch sd, a 3% prior of 2 degrees of freedom, 2 of data: the floor reads about 4.1% on
    average), and a proof of an equal configuration then claims "clearly slower" or "better" in more than its share
    of the error rate (benchmarks/decision_coverage.py, serve). The data's own sd on their own degrees of freedom
    is Student's t interval, whatever the true sd; the wider of the two covers at least as often, and the prior
    still keeps a floor whose data read about 0 from claiming no launch variation."""
    factor = math.sqrt(launches_factor)
    terms = [[round(t975(int(floor["df"])) * float(floor["launch_sd"]) * factor, 6), floor_dfs(floor)]]
    prior_df = int((floor.get("prior") or {}).get("df") or 0)
    data_df = int(floor.get("df_data") or 0)
    if data_bound and prior_df and data_df and floor.get("launch_sd_data"):
        levels_df = max(data_df, int(floor.get("df_levels") or floor["df"]) - prior_df)
        terms.append([round(t975(data_df) * float(floor["launch_sd_data"]) * factor, 6), [data_df, levels_df]])
    return terms


def pooled_ci(speedup: float | None, base_level: dict | None, spec_level: dict | None,
              floor: dict | None) -> tuple[list[float], list] | None:
    """A pooled level's speedup interval from the node's floor (module docstring) and its parts (the launch
    part on the floor's degrees of freedom, the windows' without: intervals.family_ci), or None to keep its
    own: no floor, a side measured in one launch, or a floor with no more degrees of freedom than the launches."""
    r = _num(speedup)
    if not floor or r is None or r <= 0 or not base_level or not spec_level:
        return None
    sides = []
    for level in (base_level, spec_level):
        found = _launch_windows(level)
        if found is None:
            return None
        sides.append(found)
    if int(floor["df"]) <= min(k for k, unused in sides) - 1:
        return None
    t = t975(int(floor["df"]))
    sd = float(floor.get("launch_sd") or 0.0)
    launch = t * sd * math.sqrt(math.fsum(1.0 / k for k, unused in sides))
    windows = math.sqrt(math.fsum(w ** 2 for unused, w in sides))
    width = math.hypot(launch, windows)
    return ([round(r * math.exp(-width), 4), round(r * math.exp(width), 4)],
            [[[round(launch, 6), floor_dfs(floor)]], [[round(windows, 6), None]]])


def floor_dfs(floor: dict) -> list[int]:
    """The floor's launch term's two degree-of-freedom counts for the family-wise scaling (intervals.family_ci):
    per mode (a launch moving all its levels alike) and per level (each level on its own)."""
    return [int(floor["df"]), int(floor.get("df_levels") or floor["df"])]
