# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One comparison (a speculative mode against the baseline), the host summary and its compact form."""

from __future__ import annotations

import math

from .breakdown import (
    TERMS_METHOD,
    category_crossovers,
    category_rows,
    only_category,
    paying_longest,
    separate_categories,
    speedup_terms,
)
from .common import BASELINE, BORROWED_NOTE, CI_METHOD, SCHEMA, CompareError, _num, _rnd, _rnd_pair
from .confounders import _server, _server_info, capacity_settings, confounders, gpu_facts, outcome_error, running_cap
from .crossover import CROSSOVER_METHOD, crossover
from .energy import energy_rows, mode_fields
from .intervals import _stat, family_ci, level_figures, log_half_width, ratio_ci
from .latency import latency_rows
from .latency import mode_fields as latency_fields
from .launch_noise import LAUNCH_METHOD, estimate, floor_text, pooled_ci, widen
from .output_match import OUTPUT_MATCH_METHOD, OUTPUT_MATCH_MIN, output_match
from .recommend import recommendation
from .schedule import SCHEDULE_RULE, serve_plan, served_series
from .sequential import merge_looks
from .serve_guard import adaptive_refusal
from .slo import slo_serve, slo_summary, slo_text, slo_verdict
from .traffic import TRAFFIC_METHOD, traffic_gain, traffic_gains
from .verdict import (
    FAILED,
    FAMILY_ALPHA,
    FAMILY_METHOD,
    LOSES,
    PAYS,
    SATURATED,
    UNCLEAR,
    family_z,
    level_failure,
    level_saturation,
    level_verdict,
)


def _family_wise(rows: list[dict], alpha_look: float = FAMILY_ALPHA) -> int:
    """Each level's verdict from the simultaneous interval over the comparison's levels (FAMILY_METHOD).

    The family is every level with a speedup (saturated and failed levels make no claim); each gets
    ``speedup_ci_family`` and its verdict from it; ``speedup_ci95`` stays, the level's own 95%
    interval. Per-category verdicts are one family of their own (every category row with an
    interval). Returns the family's size."""
    family = [r for r in rows if r["verdict"] in (PAYS, LOSES, UNCLEAR) and r.get("speedup") is not None]
    z = family_z(len(family), alpha_look)
    alpha = alpha_look / max(1, len(family))
    for row in family:
        ci = family_ci(row["speedup"], row.get("speedup_ci95"), z, parts=row.get("ci_parts"), alpha_family=alpha,
                       alpha_total=alpha_look)
        row["speedup_ci_family"] = _rnd_pair(ci)
        row["verdict"] = level_verdict(row["speedup"], row["speedup_ci_family"])
    cats = [c for r in family for c in r.get("categories") or [] if c.get("speedup_ci95")]
    z_cat = family_z(len(cats), alpha_look)
    for cat in cats:
        cat["speedup_ci_family"] = _rnd_pair(family_ci(cat["speedup"], cat["speedup_ci95"], z_cat))
        cat["verdict"] = level_verdict(cat["speedup"], cat["speedup_ci_family"])
    return len(family)


def _mode_level_row(level: dict) -> dict:
    """A level of one mode as it appears in summary.json (rounded, the key figures only)."""
    fig = level_figures(level)
    client = level.get("client") if isinstance(level.get("client"), dict) else {}
    return {
        "output_tok_per_s": _rnd(fig["throughput"], 3),
        "output_tok_per_s_ci95": _rnd_pair(fig["throughput_ci95"], 3),
        "per_stream_tok_per_s": _rnd(fig["per_stream"], 3),
        "per_stream_tok_per_s_ci95": _rnd_pair(fig["per_stream_ci95"], 3),
        "tpot_ms": _rnd(fig["tpot_ms"], 3),
        "ttft_ms_p50": _stat(level, "ttft_ms", "p50"),
        "e2e_ms_p50": _stat(level, "e2e_ms", "p50"),
        "accept_length": _num(level.get("accept_length")),
        "request_per_s": _num(level.get("request_per_s")),
        "requests_ok": level.get("requests_ok"),
        "requests_failed": level.get("requests_failed"),
        "server_running_max": _stat(level, "server_running", "max"),
        "server_queued_max": _stat(level, "server_queued", "max"),
        "client_bottleneck": bool(client.get("bottleneck")),
        "error": level.get("error"),
        **mode_fields(level),
        **latency_fields(level),
    }


def _levels_by_conc(result: dict | None) -> dict:
    out = {}
    for level in (result or {}).get("levels") or []:
        # A level of a separately-run category (bench_categories: separate) is compared within it only.
        if isinstance(level, dict) and isinstance(level.get("concurrency"), int) and not level.get("category"):
            out[level["concurrency"]] = level
    return out


def compare_pair(base: dict | None, spec: dict | None, base_mode: str, spec_mode: str,
                 launch_floor: dict | None = None, alpha: float = FAMILY_ALPHA, looks: list | None = None) -> dict:
    """Per-level speedups of ``spec`` over ``base``, the crossover and the recommendation.

    ``launch_floor`` (launch_noise.floor_from: the node's stored launch-to-launch variation) widens
    each level measured in one launch per mode (launch_noise.widen) before the verdicts. ``alpha``: the
    family-wise error rate this look spends (sequential.look_alphas; all of FAMILY_ALPHA without added
    launches). ``looks``: the run's earlier looks, ``[(base, spec, floor, alpha), ...]`` in order, each as the
    results stood then (sequential.looks_from_runs): a level keeps the first clear verdict a look gave it while it
    was measured again in every look since (sequential.merge_looks)."""
    looked = []
    for look_base, look_spec, look_floor, look_alpha in looks or []:
        looked.append(_look_rows(look_base, look_spec, base_mode, spec_mode, look_floor, look_alpha))
    rows, widened, family_size, borrowed = _look_rows(base, spec, base_mode, spec_mode, launch_floor, alpha)
    sequence = None
    if looks is not None:  # a run whose budget allows added rounds: every level says how it stopped, rounds or none
        rows, sequence = merge_looks([found[0] for found in looked] + [rows])
    b_levels, s_levels = _levels_by_conc(base), _levels_by_conc(spec)
    pairs = {c: (b_levels.get(c), s_levels.get(c)) for c in set(b_levels) | set(s_levels)}
    energy = energy_rows(rows, pairs, base_mode, spec_mode, launch_floor, alpha)
    latency = latency_rows(rows, pairs, launch_floor, alpha)
    out = _finish(rows, widened, family_size, borrowed, spec, base_mode, spec_mode, launch_floor, alpha, sequence)
    out["energy"] = energy
    out["latency"] = latency
    return out


def _look_rows(base: dict | None, spec: dict | None, base_mode: str, spec_mode: str, launch_floor: dict | None,
               alpha: float) -> tuple[list[dict], list[int], int, set]:
    """One look's per-level rows with their family-wise verdicts (at ``alpha``), the levels widened by the floor,
    the family's size and the per-stream figures whose intervals were borrowed."""
    b_levels, s_levels = _levels_by_conc(base), _levels_by_conc(spec)
    rows = []
    borrowed = set()
    for conc in sorted(set(b_levels) | set(s_levels)):
        bl, sl = b_levels.get(conc), s_levels.get(conc)
        row: dict = {"concurrency": conc}
        bf = level_figures(bl) if bl else None
        sf = level_figures(sl) if sl else None
        thr = stream = tpot = (None, None)
        failed = [f"{name}: {why}" for name, lv in ((base_mode, bl), (spec_mode, sl)) if (why := level_failure(lv))]
        if bf and sf and not failed:  # a failed level has no speedup (a crashed server's rate is no figure)
            thr = ratio_ci(sf["throughput"], sf["throughput_ci95"], bf["throughput"], bf["throughput_ci95"])
            stream = ratio_ci(sf["per_stream"], sf["per_stream_ci95"], bf["per_stream"], bf["per_stream_ci95"])
            tpot = ratio_ci(bf["tpot_ms"], bf["tpot_ms_ci95"], sf["tpot_ms"], sf["tpot_ms_ci95"])
        for fig in (bf, sf):
            if fig:
                borrowed.update(fig["borrowed"])
        row["speedup"] = _rnd(thr[0])
        row["speedup_ci95"] = _rnd_pair(thr[1])
        row["per_stream_speedup"] = _rnd(stream[0])
        row["per_stream_speedup_ci95"] = _rnd_pair(stream[1])
        row["tpot_speedup"] = _rnd(tpot[0])
        row["tpot_speedup_ci95"] = _rnd_pair(tpot[1])
        saturated = [f"{name}: {why}" for name, lv in ((base_mode, bl), (spec_mode, sl)) for why in level_saturation(lv)]
        row["failed"] = "; ".join(failed) or None
        # A failed level is failed, never saturated: a crashed server's level carries keep-up reasons
        # (its /metrics stopped answering), and it is measured again (refine), not left out.
        row["saturated"] = [] if failed else saturated
        row["verdict"] = (FAILED if failed else SATURATED if saturated
                          else verdict(row["speedup"], row["speedup_ci95"], bl, sl))
        row.update(speedup_terms(bl, sl))
        cats = category_rows(bl, sl, row)
        if cats:
            row["categories"] = cats
        row["baseline_tok_per_s"] = _rnd(bf["throughput"], 3) if bf else None
        row["launches"] = min((lv or {}).get("launches") or 1 for lv in (bl, sl))
        from_floor = pooled_ci(row["speedup"], bl, sl, launch_floor)
        if from_floor:  # pooled launches, and a node floor with more degrees of freedom (launch_noise)
            row["speedup_ci95_launches"] = row["speedup_ci95"]
            row["speedup_ci95"], row["ci_parts"] = from_floor
        elif row["launches"] > 1 and row["speedup_ci95"] and row["speedup"]:
            # Pooled on its own launches' spread, t on (launches - 1) degrees of freedom (pooling.pool_level):
            # the family-wise interval scales that term by t's quantile, never the normal's (intervals.family_ci).
            row["ci_parts"] = [lv.get("ci_terms") or [[round(log_half_width(row["speedup"], row["speedup_ci95"])
                                                             / math.sqrt(2), 6), None]] for lv in (bl, sl)]
        row["refined"] = bool((bl or {}).get("refined") or (sl or {}).get("refined"))
        row[base_mode] = _mode_level_row(bl) if bl else None
        row[spec_mode] = _mode_level_row(sl) if sl else None
        rows.append(row)
    widened = widen(rows, launch_floor)
    family_size = _family_wise(rows, alpha)
    return rows, widened, family_size, borrowed


def _finish(rows: list[dict], widened: list[int], family_size: int, borrowed: set, spec: dict | None, base_mode: str,
            spec_mode: str, launch_floor: dict | None, alpha: float, sequence: dict | None) -> dict:
    """The comparison from its final rows: crossover, recommendation, notes."""
    cross = crossover(rows)
    measured = [float(r["concurrency"]) for r in rows if r["speedup"] is not None and not r["saturated"]]
    rec = recommendation(cross, spec_mode, measured, draft_steps(spec), adaptive_refusal(spec_mode, spec),
                         engine=str((spec or {}).get("engine") or "") or None)
    notes = list(cross["notes"])
    single = [r["concurrency"] for r in rows if r.get("speedup_ci95") and (r.get("launches") or 1) == 1]
    if launch_floor and single:
        notes.append(f"launch-to-launch variation: the node's noise floor ({floor_text(launch_floor)}) is in the "
                     f"intervals of the {len(single)} level(s) measured in one launch per mode")
    elif single:
        notes.append("launch-to-launch variation is NOT in the intervals: every level was measured in one launch per "
                     "mode and this node has no noise floor yet (compare_launches: auto, the default, launches each mode "
                     "twice on such a node: it measures and stores it); a second launch may read outside these intervals")
    if borrowed:
        notes.append(f"per-stream and TPOT intervals: {BORROWED_NOTE}")
    return {
        "baseline_mode": base_mode,
        "spec_mode": spec_mode,
        "crossover_status": cross["status"],
        "crossover_concurrency": cross["concurrency"],
        "crossover_ci95": cross["ci95"],
        "crossover_ci95_text": cross.get("ci95_text"),
        "crossover_bracket": cross["bracket"],
        "crossover_text": cross["text"],
        "regions": cross["regions"],
        "crossings": cross["crossings"],
        "gaps": cross["gaps"],
        "failed_levels": cross["failed"],
        "saturated_levels": cross["excluded"],
        "recommendation": rec["text"],
        "speculate_below": rec["speculate_below"],
        "speculate_ranges": rec["speculate_ranges"],
        "adaptive_table": rec["adaptive_table"],
        "adaptive_config": rec["adaptive_config"],
        "adaptive_refused": rec["adaptive_refused"],
        "notes": notes,
        "categories_paying": paying_longest(rows),
        "launch_variation": {"floor": launch_floor, "widened": widened,
                             "held": bool(launch_floor) or not single, "method": LAUNCH_METHOD},
        "family": {"levels": family_size, "alpha": FAMILY_ALPHA, "alpha_look": alpha,
                   "z": _rnd(family_z(family_size, alpha), 3), "method": FAMILY_METHOD},
        "sequential": sequence,
        "levels": rows,
    }


def draft_steps(result: dict | None) -> int | None:
    """The draft steps a speculative mode ran with (its server's resolved arguments), or None."""
    if not result:
        return None
    for source in (_server_info(result), _server(result).get("settings") or {}):
        value = source.get("speculative_num_steps") if isinstance(source, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def verdict(speedup, ci, base_level, spec_level) -> str:
    """pays / loses (the interval clear of 1), unclear (it straddles 1), or missing."""
    if speedup is None:
        missing = [name for name, lv in (("baseline", base_level), ("speculative", spec_level)) if not lv]
        if missing:
            return f"not measured in {' and '.join(missing)}"
        return "failed"
    return level_verdict(speedup, ci)


def tracking(results: dict, baseline: str, fixed: str, adaptive: str) -> dict | None:
    """How close an adaptive mode comes to the better of baseline and a fixed speculative mode.

    Per level: adaptive throughput / max(baseline, fixed), with its interval; the verdict
    "tracks" when the interval reaches 0.95 or more at every level.
    """
    a, b, f = (_levels_by_conc(results.get(m)) for m in (adaptive, baseline, fixed))
    rows = []
    for conc in sorted(set(a) & set(b) & set(f)):
        figs = {m: level_figures(lv[conc]) for m, lv in ((adaptive, a), (baseline, b), (fixed, f))}
        if any(fig["throughput"] is None for fig in figs.values()):
            continue
        best = max((baseline, fixed), key=lambda m: figs[m]["throughput"])
        mine, theirs = figs[adaptive], figs[best]
        ratio, ci = ratio_ci(mine["throughput"], mine["throughput_ci95"], theirs["throughput"], theirs["throughput_ci95"])
        rows.append(
            {"concurrency": conc, "better_mode": best, "ratio_to_better": _rnd(ratio), "ratio_to_better_ci95": _rnd_pair(ci)}
        )
    if not rows:
        return None
    worst = min(rows, key=lambda r: r["ratio_to_better"])
    ok = all((r["ratio_to_better_ci95"] or [r["ratio_to_better"]] * 2)[1] >= 0.95 for r in rows)
    text = (
        f"{adaptive} tracks the better of {baseline} and {fixed} at every level (within 5%)"
        if ok
        else f"{adaptive} falls behind the better mode: {worst['ratio_to_better']:.2f}x of {worst['better_mode']} at "
        f"C={worst['concurrency']}"
    )
    return {"adaptive_mode": adaptive, "fixed_mode": fixed, "tracks": ok, "text": text, "levels": rows}


def summarize_host(
    results: dict[str, dict],
    host: str,
    run_id: str,
    baseline: str = BASELINE,
    modes: list[str] | None = None,
    outcomes: dict | None = None,
    output_match_min: float = OUTPUT_MATCH_MIN,
    traffic: dict | None = None,
    launch_floor: dict | None = None,
    alpha: float = FAMILY_ALPHA,
    looks: list | None = None,
    slo: dict | None = None,
) -> dict:
    """summary.json for one host: every speculative mode against the baseline.

    ``slo``: latency targets (slo.parse_slo); each mode's capacity under them goes in ``slo``.

    ``results`` maps mode -> results file dict (modes whose file is missing are absent);
    ``modes`` is the list asked for (default: the baseline, then the others found);
    ``outcomes`` maps mode -> {status, error, gpu_before, gpu_after} as recorded by the run;
    ``output_match_min`` is the least share of outputs that must match the baseline's;
    ``traffic`` is {traffic: [{concurrency, share}], source} (``traffic.parse_traffic`` or
    ``traffic_prometheus.read_traffic``): each mode's expected gain on it goes in ``traffic``.
    The first speculative mode in ``modes`` gives the top-level crossover and recommendation.
    ``launch_floor``: the node's stored launch-to-launch variation (launch_noise), held in the
    intervals of levels measured in one launch per mode; ``launch_variation`` says what this run
    measured of it (``measured``, for the node's floor) and what was held. ``alpha`` and ``looks``: the
    sequential launches' share of the family-wise error rate for this look and the run's earlier looks,
    ``[(results, floor, alpha), ...]`` (sequential.py; compare_pair).
    """
    outcomes = dict(outcomes or {})
    if modes is None:
        modes = [baseline] + sorted(m for m in results if m != baseline)
    if baseline not in modes:
        raise CompareError(f"the baseline mode {baseline!r} is not among the modes compared ({', '.join(modes)}): add it")
    spec_modes = [m for m in modes if m != baseline]
    incomplete: list[str] = []
    for mode in modes:
        outcome = outcomes.get(mode) or {}
        if mode not in results:
            reason = outcome_error(outcome) if outcome else "no results file"
            incomplete.append(f"{mode}: {outcome.get('status') or 'missing'}: {reason}")
            outcomes.setdefault(mode, {"status": "missing", "error": "no results file"})
        elif outcome.get("status") and outcome["status"] != "ok":
            incomplete.append(f"{mode}: {outcome['status']}: {outcome_error(outcome)}")
        elif results[mode].get("error"):
            incomplete.append(f"{mode}: {results[mode]['error']}")
        elif results[mode].get("status") in ("running", "failed", "stopped"):
            state = "interrupted mid-sweep" if results[mode]["status"] == "running" else results[mode]["status"]
            incomplete.append(f"{mode}: the sweep {state}")
        else:
            wanted = (results[mode].get("settings") or {}).get("concurrency")
            got = {lv.get("concurrency") for lv in results[mode].get("levels") or [] if isinstance(lv, dict)}
            if isinstance(wanted, list):
                lost = [c for c in wanted if c not in got]
                if lost:
                    incomplete.append(f"{mode}: levels not measured: C={', '.join(map(str, lost))}")
    for mode in modes:
        for level in (results.get(mode) or {}).get("levels") or []:
            why = level_failure(level)
            if why and not any(why in reason for reason in incomplete):
                incomplete.append(f"{mode}: C={level.get('concurrency')} failed: {why}")
            elif why:
                incomplete.append(f"{mode}: C={level.get('concurrency')} failed (above)")
    separate = separate_categories(results)
    by_category = {}
    if separate and spec_modes:  # bench_categories: separate: one comparison per category
        by_category = {name: compare_pair(only_category(results.get(baseline), name),
                                          only_category(results.get(spec_modes[0]), name), baseline, spec_modes[0])
                       for name in separate}
    headline = None
    if separate and not any(_levels_by_conc(r) for r in results.values()):
        headline = separate[0]  # every level ran per category: the first category's is the headline comparison
        results = {m: only_category(r, headline) for m, r in results.items()}
    comparisons = {m: compare_pair(results.get(baseline), results.get(m), baseline, m, launch_floor, alpha,
                                   None if looks is None else
                                   [((r or {}).get(baseline), (r or {}).get(m), f, a) for r, f, a in looks])
                   for m in spec_modes}
    matches = output_match({m: r for m, r in results.items() if m in modes}, baseline, output_match_min)
    conf = confounders(results, baseline, {m: outcomes[m] for m in modes if m in outcomes}, matches)
    primary = comparisons[spec_modes[0]] if spec_modes else None
    summary: dict = {
        "schema": SCHEMA,
        "run_id": run_id,
        "host": host,
        # From the inputs, not the clock: rendering the same results twice gives the same files.
        "results_finished_at": max((str(r.get("finished_at")) for r in results.values() if r.get("finished_at")),
                                   default=None),
        "baseline_mode": baseline,
        "spec_mode": spec_modes[0] if spec_modes else None,
        "modes": modes,
        "modes_measured": [m for m in modes if m in results],
        "complete": not incomplete,
        "status": "complete" if not incomplete else ("failed" if not results else "incomplete"),
        "incomplete_reasons": incomplete,
        "confounders": conf,
        "launch_variation": {"measured": estimate({m: r for m, r in results.items() if m in modes}),
                             "floor": launch_floor, "method": LAUNCH_METHOD,
                             "held": all((c.get("launch_variation") or {}).get("held")
                                         for c in comparisons.values())},
        "method": {"verdicts": FAMILY_METHOD, "launch_variation": LAUNCH_METHOD, "speedup_ci95": CI_METHOD,
                   "crossover": CROSSOVER_METHOD, "output_match": OUTPUT_MATCH_METHOD, "traffic": TRAFFIC_METHOD,
                   "speedup_terms": TERMS_METHOD},
        "output_match": matches,
        "output_match_min": output_match_min,
    }
    keys = (
        "crossover_status",
        "crossover_concurrency",
        "crossover_ci95",
        "crossover_ci95_text",
        "crossover_bracket",
        "crossover_text",
        "regions",
        "crossings",
        "gaps",
        "failed_levels",
        "saturated_levels",
        "recommendation",
        "speculate_below",
        "speculate_ranges",
        "adaptive_table",
        "adaptive_config",
        "adaptive_refused",
        "notes",
        "categories_paying",
        "family",
        "levels",
    )
    for key in keys:
        summary[key] = primary[key] if primary else None
    if primary is None:
        summary["recommendation"] = "No recommendation: no speculative mode was compared (add one to compare_modes)."
        summary["levels"] = []
    summary["comparisons"] = comparisons
    summary["traffic"] = None
    if traffic and traffic.get("error"):
        summary["traffic"] = {"source": traffic.get("source"), "error": traffic["error"], "gains": {}}
    elif traffic:
        summary["traffic"] = {"source": traffic.get("source"), "traffic": traffic["traffic"],
                              "idle_share": traffic.get("idle_share"), "samples": traffic.get("samples"),
                              "gains": traffic_gains(comparisons, traffic["traffic"])}
    summary["headline_category"] = headline
    summary["category_crossovers"] = category_crossovers(by_category) if by_category else None
    adaptive = [m for m in spec_modes if "adaptive" in m]
    fixed = [m for m in spec_modes if "adaptive" not in m]
    summary["tracking"] = None
    if adaptive and fixed and baseline in results:
        summary["tracking"] = tracking(results, baseline, fixed[0], adaptive[0])
    summary["series"] = {m: mode_series(results[m]) for m in modes if m in results}
    summary["sources"] = {m: results[m].get("_path") for m in modes if m in results and results[m].get("_path")}
    summary["servers"] = {
        m: {
            "engine": results[m].get("engine"),
            "version": _server(results[m]).get("version"),
            "command": _server(results[m]).get("command"),
            "capacity": capacity_settings(results[m]),
            "speculative_config": _server(results[m]).get("speculative_config") or None,
            "running_cap": running_cap(results[m]),
            "gpu": gpu_facts(results[m]),
        }
        for m in modes
        if m in results
    }
    summary["bench_settings"] = {m: results[m].get("settings") for m in modes if m in results}
    _slo_decision(summary, results, modes, slo, alpha)
    summary["serve_schedule"] = None
    engine = "vllm" if any(info.get("engine") == "vllm" for info in summary["servers"].values()) else "sglang"
    if engine == "vllm":
        summary["serve_schedule"] = serve_schedule(summary)
    summary["static_choice"] = None
    if summary.get("adaptive_refused") and engine != "vllm":
        # No adaptive table serves the mode as measured: the static mode serve.yml serves, and why, said here.
        chosen = serve_plan(summary, engine)
        summary["static_choice"] = chosen["mode"]
        what = (f"{chosen['mode']} as measured (static, every batch size)" if chosen["mode"] != baseline
                else "the baseline")
        summary["recommendation"] = (f"{summary['recommendation']} serve.yml serves {what}: "
                                     f"{chosen.get('gain_text') or chosen['text']}.")
    if (summary.get("traffic") or {}).get("traffic"):
        # The served configuration's expected gain on the same traffic (schedule.served_series).
        try:
            name, series = served_series(summary, serve_plan(summary, engine))
        except ValueError:
            name, series = None, []
        if name and series:
            gain = traffic_gain(series, summary["traffic"]["traffic"], name)
            # Never the served configuration's measured gain: serve.yml's proof measures that (serve.json).
            gain["basis"] = "expected from the run's levels, not measured: serve.yml's proof measures it"
            gain["text"] = f"expected, not measured: {gain['text']}"
            summary["traffic"]["gains"][name] = gain
    return summary


def _slo_decision(summary: dict, results: dict, modes: list[str], slo: dict | None, alpha: float) -> None:
    """Each mode's capacity and goodput under the SLO (summary ``slo``) and, with SLOs, what to serve built from
    the SLO decision (slo.SLO_SERVE_RULE): each comparison's ``serve_levels`` (vLLM's schedule reads them) and
    the primary one's speculate_ranges and SGLang adaptive table, unless no adaptive table can serve the mode."""
    baseline = summary["baseline_mode"]
    summary["slo"] = slo_summary(results, [m for m in modes if m in results], slo or {}, alpha)
    if not summary["slo"]:
        return
    summary["slo"]["verdict"] = slo_verdict(summary["slo"], baseline)
    summary["slo"]["text"] = slo_text(summary["slo"], baseline)
    summary["slo"]["serve"] = {}
    for mode, comp in (summary.get("comparisons") or {}).items():
        if mode not in results or baseline not in results:
            continue
        serve = slo_serve(summary["slo"], comp, baseline, mode, draft_steps(results.get(mode)))
        comp["serve_levels"] = serve["levels"]
        summary["slo"]["serve"][mode] = {k: serve[k] for k in ("speculate_ranges", "text", "levels", "rule")}
        if mode == summary.get("spec_mode") and summary.get("adaptive_refused"):
            summary["recommendation"] = (f"{summary['recommendation']} {serve['text']}; no adaptive table serves "
                                         f"{mode} as measured, so the SLO does not change the static choice.")
        elif mode == summary.get("spec_mode"):
            ranges = serve["speculate_ranges"]
            summary["speculate_ranges"] = ranges
            summary["speculate_below"] = ranges[0][1] if len(ranges) == 1 and ranges[0][0] <= 1 else None
            summary["adaptive_table"], summary["adaptive_config"] = serve["adaptive_table"], serve["adaptive_config"]
            summary["recommendation"] = f"{summary['recommendation']} {serve['text']}."


def serve_schedule(summary: dict) -> dict:
    """What serve.yml would serve on vLLM (schedule.serve_plan), for the report beside SGLang's table."""
    try:
        plan = serve_plan(summary, "vllm")
    except ValueError as exc:
        return {"mode": None, "schedule": None, "text": f"no schedule: {exc}", "rule": SCHEDULE_RULE}
    return {"mode": plan["mode"], "schedule": plan["schedule"], "text": plan["text"], "rule": SCHEDULE_RULE}


def mode_series(result: dict) -> list[dict]:
    """Every level of one mode with its figures and intervals (what the plots draw)."""
    out = []
    for conc, level in sorted(_levels_by_conc(result).items()):
        fig = level_figures(level)
        out.append(
            {
                "concurrency": conc,
                "output_tok_per_s": _rnd(fig["throughput"], 3),
                "output_tok_per_s_ci95": _rnd_pair(fig["throughput_ci95"], 3),
                "per_stream_tok_per_s": _rnd(fig["per_stream"], 3),
                "per_stream_tok_per_s_ci95": _rnd_pair(fig["per_stream_ci95"], 3),
                "error": level.get("error"),
            }
        )
    return out


def compact(summary: dict) -> dict:
    """The part of a host summary that travels in set_stats and the fleet index."""
    return {
        "host": summary.get("host"),
        "status": summary.get("status"),
        "complete": summary.get("complete"),
        "spec_mode": summary.get("spec_mode"),
        "crossover_status": summary.get("crossover_status"),
        "crossover_concurrency": summary.get("crossover_concurrency"),
        "crossover_ci95": summary.get("crossover_ci95"),
        "regions": summary.get("regions"),
        "crossings": summary.get("crossings"),
        "failed_levels": summary.get("failed_levels") or [],
        "saturated_levels": summary.get("saturated_levels") or [],
        "recommendation": summary.get("recommendation"),
        "speculate_below": summary.get("speculate_below"),
        "speculate_ranges": summary.get("speculate_ranges"),
        "adaptive_config": summary.get("adaptive_config"),
        "adaptive_refused": summary.get("adaptive_refused"),
        "static_choice": summary.get("static_choice"),
        "confounders": len(summary.get("confounders") or []),
        "output_match": {m: {"share": v.get("share"), "status": v.get("status")}
                         for m, v in (summary.get("output_match") or {}).items()},
        "traffic_gains": {m: {k: g.get(k) for k in ("gain", "gain_ci95", "verdict", "known_share", "outside_share")}
                          for m, g in ((summary.get("traffic") or {}).get("gains") or {}).items()},
        "incomplete_reasons": summary.get("incomplete_reasons") or [],
        "levels": [
            {"concurrency": lv["concurrency"], "speedup": lv["speedup"], "speedup_ci95": lv["speedup_ci95"],
             "verdict": lv.get("verdict")}
            for lv in summary.get("levels") or []
        ],
    }
