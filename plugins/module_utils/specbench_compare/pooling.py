# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Several runs of one mode (compare_launches, refinement rounds): pooled levels."""

from __future__ import annotations

import datetime
import json
import math
import os

from ..specbench_client.stats import t975
from .common import _interval, _num
from .energy import pool_energy
from .verdict import Z975, level_failure, level_saturation

POOLED_METHOD = (
    "pooled over {k} launches: the mean of the launch means +- the wider of t sqrt(s_between^2 / k), where "
    "s_between^2 is the launch means' sample variance (it holds launch-to-launch variation and drift) and t is on "
    "the k - 1 degrees of freedom the launch means give (few launches: wide interval), here t = {t:.3g}, and "
    "1.96 sqrt(mean within-launch se^2) (never narrower than a launch's own interval: launches replay the same "
    "requests, so the noise of a window is shared between them and their agreement does not measure it)"
)
RUN_TAG = "@"  # <mode>@<tag>.json: another launch (launch2, ...) or a refinement round (refine1, ...) of <mode>


def split_run_name(stem: str) -> tuple[str, str | None]:
    """'eagle3@refine2' -> ('eagle3', 'refine2'); 'eagle3' -> ('eagle3', None)."""
    mode, sep, tag = stem.partition(RUN_TAG)
    return (mode, tag) if sep and tag else (stem, None)


def pool_runs(runs: list[tuple[str | None, dict]]) -> dict:
    """One results dict for a mode measured in several runs: ``runs`` is [(tag, results), ...].

    The first run gives the settings and server; levels measured in more than one run are pooled
    (``POOLED_METHOD``), each level notes its ``launches`` and whether it was ``refined`` (first
    measured in a refinement round), and ``runs`` lists the runs (tag, path, levels, seconds).
    """
    if len(runs) == 1 and runs[0][0] is None:
        return runs[0][1]
    ordered = sorted(runs, key=lambda tr: (tr[0] is not None, tr[0] or ""))
    base = dict(ordered[0][1])
    by_conc: dict[int, list] = {}
    listing = []
    for tag, result in ordered:
        listing.append({"tag": tag, "path": result.get("_path"), "status": result.get("status"),
                        "levels": [lv.get("concurrency") for lv in result.get("levels") or [] if isinstance(lv, dict)],
                        "seconds": run_seconds(result)})
        for level in result.get("levels") or []:
            if isinstance(level, dict) and isinstance(level.get("concurrency"), int):
                by_conc.setdefault(level["concurrency"], []).append((tag, level))
    levels = []
    for conc in sorted(by_conc):
        entries = by_conc[conc]
        pooled = pool_level([lv for unused, lv in entries])
        pooled["launches"] = len(entries)
        # A launch that measured nothing keeps the level failed (and the run incomplete): pooling the
        # launches left would read one launch as the design's evidence. A refinement round that
        # measured the level again heals it.
        lost = [(tag, why) for tag, lv in entries if (why := level_failure(lv)) and not (tag or "").startswith("refine")]
        healed = any((tag or "").startswith("refine") and not level_failure(lv) for tag, lv in entries)
        if lost and len(entries) > 1 and not healed:
            tag, why = lost[0]
            pooled.update(output_tok_per_s=None, output_tok_per_s_ci95=None,
                          error=f"launch {tag or 'launch1'} of {len(entries)} failed at C={conc}: {why}; the level stays "
                                "failed (refinement or a new run measures it again)")
        pooled["refined"] = all((tag or "").startswith("refine") for tag, unused in entries)
        levels.append(pooled)
    base["levels"] = levels
    base["runs"] = listing
    # The outputs checked once per mode (the first launch that checked them).
    base["output_match"] = next((r["output_match"] for unused, r in ordered if r.get("output_match")), None)
    statuses = [r.get("status") for unused, r in ordered]
    base["status"] = next((s for s in statuses if s in ("running", "failed", "stopped")), base.get("status"))
    # A run's error that was one of its levels' errors lasts only while the pooled level still
    # fails (a refinement round that measured it again heals it); any other run error stays.
    errors = [r["error"] for unused, r in ordered if r.get("error")
              and not any(isinstance(lv, dict) and lv.get("error") == r["error"] for lv in r.get("levels") or [])]
    errors += [why for lv in levels if (why := level_failure(lv))]
    base["error"] = errors[0] if errors else None
    return base


def pool_level(levels: list[dict]) -> dict:
    """Levels of one concurrency from several launches, as one level (see ``POOLED_METHOD``).

    Launches that measured nothing, and saturated launches when another launch kept up, are left out.
    """
    if len(levels) == 1:
        return dict(levels[0])
    usable = [(lv, _num(lv.get("output_tok_per_s")), _interval(lv.get("output_tok_per_s_ci95"))) for lv in levels]
    # A launch that failed (its server went down mid-level, though it delivered a rate) is no evidence.
    usable = [(lv, x, ci) for lv, x, ci in usable if x is not None and x > 0 and not level_failure(lv)]
    # A saturated launch is no evidence: pooled only when no launch at that level kept up.
    unsaturated = [(lv, x, ci) for lv, x, ci in usable if not level_saturation(lv)]
    usable = unsaturated or usable
    out = dict(usable[-1][0] if usable else levels[-1])
    if not usable:
        return out
    k = len(usable)
    xs = [x for unused, x, unused_ci in usable]
    mean, half, quantile, terms = _pooled(xs, [ci for unused, unused_x, ci in usable])
    out["output_tok_per_s"] = round(mean, 3)
    out["output_tok_per_s_ci95"] = [round(max(0.0, mean - half), 3), round(mean + half, 3)] if half > 0 else None
    out["ci_method"] = POOLED_METHOD.format(k=k, t=quantile)
    # The two terms the half-width is the larger of, as log half-widths with their degrees of freedom: the
    # family-wise interval scales each by its own quantile (intervals.family_ci).
    out["ci_terms"] = [[round(terms[0] / mean, 6), k - 1 if k > 1 else None],
                       [round(terms[1] / mean, 6), None]] if mean > 0 else None
    out["launch_tok_per_s"] = [round(x, 3) for x in xs]
    out["launch_ci95"] = [[round(ci[0], 3), round(ci[1], 3)] if ci else None for unused, unused_x, ci in usable]
    out["error"] = next((lv.get("error") for lv, unused_x, unused_ci in usable if lv.get("error")), None)
    # Latency and per-stream figures: each statistic the launches' mean, its interval pooled as the
    # throughput's (where every launch has one): the SLO checks read p90/p99 intervals of pooled levels.
    for key in ("tpot_ms", "decode_tok_per_s_per_stream", "ttft_ms", "e2e_ms"):
        stats = [lv.get(key) for lv, unused_x, unused_ci in usable if isinstance(lv.get(key), dict)]
        if stats:
            merged = {}
            for field in ("mean", "p50", "p90", "p99"):
                values = [_num(st.get(field)) for st in stats]
                if any(v is None for v in values):
                    continue
                cis = [_interval(st.get(f"{field}_ci95")) for st in stats]
                centre, width, unused_q, terms = _pooled(values, cis)
                merged[field] = round(centre, 3)
                if len(stats) == 1:
                    merged[f"{field}_ci95"] = stats[0].get(f"{field}_ci95")
                elif all(cis) and width > 0 and centre > 0:
                    merged[f"{field}_ci95"] = [round(max(0.0, centre - width), 3), round(centre + width, 3)]
                    merged[f"{field}_ci_terms"] = [[round(terms[0] / centre, 6), len(stats) - 1],
                                                   [round(terms[1] / centre, 6), None]]
            out[key] = merged
    pool_energy(out, [lv for lv, unused_x, unused_ci in usable])
    # Every launch's requests, for goodput under latency targets counted after the run (slo.goodput): the
    # share of tokens meeting them over all the launches' requests, times the pooled throughput.
    records = [lv.get("request_latencies") for lv, unused_x, unused_ci in usable]
    out["request_latencies"] = ({"columns": records[0]["columns"], "rows": [r for rec in records for r in rec["rows"]]}
                                if records and all(isinstance(rec, dict) and rec.get("rows") for rec in records)
                                else None)
    accepts = [_num(lv.get("accept_length")) for lv, unused_x, unused_ci in usable]
    accepts = [a for a in accepts if a is not None]
    out["accept_length"] = round(math.fsum(accepts) / len(accepts), 4) if accepts else None
    out["requests_ok"] = sum(lv.get("requests_ok") or 0 for lv, unused_x, unused_ci in usable)
    out["requests_failed"] = sum(lv.get("requests_failed") or 0 for lv in levels)
    # A launch that was saturated taints the pooled level: it carries every launch's reason.
    reasons = [why for lv, unused_x, unused_ci in usable for why in level_saturation(lv)]
    out["saturated"] = list(dict.fromkeys(reasons))
    out["client"] = next((lv.get("client") for lv, unused_x, unused_ci in usable if level_saturation(lv)),
                         usable[-1][0].get("client"))
    return out


def _pooled(xs: list[float], cis: list) -> tuple[float, float, float, tuple[float, float]]:
    """Launch means pooled: (mean, half-width, t quantile, (between term, within term)).

    Each launch mean is the truth plus a launch effect plus its window's noise: the launch means'
    sample variance estimates the whole of a launch mean's variance, on k - 1 degrees of freedom,
    whatever the launches' disagreement, so +-t(k - 1) sqrt(s_between^2 / k) holds exactly for
    launches that are independent draws (normal launch means, equal windows). They are not: each
    launch replays the same requests (the same prompts; greedy decoding gives the same outputs and
    acceptance on a real engine, the emulator's seed the same draws), so what a window's requests
    and the phase of its batch's swings add is shared, the launches agree on it, and their spread
    misses it. Seen: three MoE launches at C=4 read 368.5, 368.5 and 368.75 tok/s, each +-0.75% on
    its own. So the interval is never narrower than one launch's own (+-z sqrt(mean within se^2),
    the root mean square of their half-widths): pooling averages out only what differs between
    launches. Dividing this floor by k, as before, covered 74% of the truth when the launches shared
    their windows' noise (tests/unit/plugins/module_utils/specbench_compare/test_coverage.py). A
    data-driven df (Welch-Satterthwaite on between + within) gave t near 2 whenever two launches
    happened to agree, and covered 88% when launches differed by 3x their own noise.
    """
    k = len(xs)
    mean = math.fsum(xs) / k
    between = math.fsum((x - mean) ** 2 for x in xs) / (k - 1) if k > 1 else 0.0
    within = [((ci[1] - ci[0]) / (2 * Z975)) ** 2 for ci in cis if ci]
    within_mean = math.fsum(within) / len(within) if within else 0.0
    quantile = t975(k - 1) if k > 1 else Z975
    terms = (quantile * math.sqrt(between / k), Z975 * math.sqrt(within_mean))
    return mean, max(terms), quantile, terms


def run_seconds(result: dict) -> float | None:
    """Wall seconds a run's sweep took (from its started_at / finished_at), or None."""
    try:
        start = datetime.datetime.fromisoformat(str(result.get("started_at")).replace("Z", "+00:00"))
        end = datetime.datetime.fromisoformat(str(result.get("finished_at")).replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, (end - start).total_seconds())


# Files compare_results and serve.yml write in a host folder: never read back as a mode's results.
OWN_FILES = {"summary.json", "compare-run.json", "adaptive-config.json", "adaptive-vars.json", "serve.json"}


def _load_json(path: str):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_host_results(host_dir: str, modes: list[str] | None, warnings: list[str]) -> dict:
    """mode -> results dict for one host folder; unreadable files become warnings.

    ``<mode>@<tag>.json`` files are further runs of ``<mode>`` (compare_launches, refinement
    rounds, sequential rounds): pooled with ``<mode>.json`` by specbench_compare.pool_runs.
    """
    return {mode: pool_runs(found) for mode, found in load_host_runs(host_dir, modes, warnings).items()}


def load_host_runs(host_dir: str, modes: list[str] | None, warnings: list[str]) -> dict:
    """mode -> [(tag, results dict), ...] for one host folder, unpooled (load_host_results pools them)."""
    runs: dict = {}
    if not os.path.isdir(host_dir):
        return {}
    names = sorted(n for n in os.listdir(host_dir) if n.endswith(".json") and n not in OWN_FILES and not n.startswith("."))
    for name in names:
        mode, tag = split_run_name(name[: -len(".json")])
        if modes is not None and mode not in modes:
            continue
        path = os.path.join(host_dir, name)
        try:
            data = _load_json(path)
        except (OSError, ValueError) as exc:
            warnings.append(f"{path}: not readable as JSON ({exc}); {mode} left out of the comparison")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("levels"), list):
            if modes is not None:
                warnings.append(f"{path}: not a results file (no levels list); {mode} left out of the comparison")
            continue
        if data.get("mode") not in (None, mode):
            warnings.append(f"{path}: says mode {data.get('mode')!r} but is named {name}; read as {mode}")
        data["_path"] = path
        runs.setdefault(mode, []).append((tag, data))
    return runs
