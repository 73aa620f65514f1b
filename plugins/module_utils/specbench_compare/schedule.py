# Copyright: specbench developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What to serve from a run's summary: vLLM's per-batch-size schedule and the mode to launch.

vLLM's ``--speculative-config`` takes ``num_speculative_tokens_per_batch_size``: a list of
inclusive ranges ``[range_start, range_end, k]`` (vllm/config/speculative.py, SpeculativeConfig;
checked by ``validate_and_normalize_dynamic_sd_schedule`` in vllm/v1/spec_decode/dynamic/utils.py:
the first range must start at 1, ranges sorted and disjoint, k >= 0). ``build_dynamic_sd_schedule_lookup``
there carries the LAST range's k to every batch size above it (up to max_num_seqs), and k = 0 at a
batch size means no drafting. So the schedule here always spells out every batch size from 1 to the
server's max_num_seqs, and ends with k = 0 unless speculation clearly pays at the top.

The rule is the one speculation rule SGLang's table and the recommendation follow too
(``verdict.paying_runs``): k at the batch sizes from a level that clearly pays (family-wise) to
the last clearly paying level after it with no other level between; 0 everywhere else: at levels
that lose, are unclear, not measured, failed or saturated (no evidence), from the batch size after
the last paying level of a stretch, below the lowest level measured when it is above 1, and above
the highest level measured. Where no level pays, no schedule: the baseline is served. Under
``compare_slo`` the levels' verdicts are their serve verdicts (slo.SLO_SERVE_RULE): on where only
speculation meets the SLO, off where speculating misses it and the baseline does not surely.
"""

from __future__ import annotations

from .common import BASELINE
from .traffic import traffic_gain
from .verdict import BASELINE_SERVED, PAYS, paying_runs

SCHEDULE_RULE = ("k from a level that clearly pays (family-wise) to the last clearly paying level after it, no other "
                 "level between; 0 at levels that lose, are unclear, not measured, failed or saturated, from the batch "
                 "size after the last paying level of a stretch, below the lowest and above the highest level measured "
                 "(the same rule as SGLang's adaptive table)")


def vllm_schedule(levels: list[dict], k: int, max_batch: int) -> list[list[int]] | None:
    """``[[range_start, range_end, k_or_0], ...]`` covering 1..max_batch, or None where no level pays.

    ``levels``: one comparison's rows (``concurrency``, ``verdict``); ``k``: the mode's
    num_speculative_tokens; ``max_batch``: the server's max_num_seqs (the largest batch size).
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"num_speculative_tokens must be a positive integer, got {k!r}")
    if not isinstance(max_batch, int) or isinstance(max_batch, bool) or max_batch < 1:
        raise ValueError(f"max_num_seqs must be a positive integer, got {max_batch!r}")
    rows = sorted((int(r["concurrency"]), r.get("verdict")) for r in levels if isinstance(r.get("concurrency"), int))
    per_bs = [0] * (max_batch + 1)  # index = batch size; 0 unused
    for first, last in paying_runs(rows):
        for bs in range(int(first), min(int(last), max_batch) + 1):
            per_bs[bs] = k
    if not any(per_bs):
        return None
    out: list[list[int]] = []
    for bs in range(1, max_batch + 1):
        if out and out[-1][2] == per_bs[bs]:
            out[-1][1] = bs
        else:
            out.append([bs, bs, per_bs[bs]])
    return out


def schedule_words(schedule: list[list[int]] | None) -> str:
    """[[1, 4, 3], [5, 32, 0]] -> 'k=3 at batch sizes 1-4; off (0) at 5-32'."""
    if not schedule:
        return "no speculation (the baseline)"
    parts = []
    for start, end, k in schedule:
        where = f"{start}" if start == end else f"{start}-{end}"
        parts.append(f"k={k} at batch sizes {where}" if k else f"off (0) at {where}")
    return "; ".join(parts)


def _k_of(summary: dict, mode: str) -> int | None:
    """The mode's num_speculative_tokens, from its server's speculative config (summary ``servers``)."""
    spec = ((summary.get("servers") or {}).get(mode) or {}).get("speculative_config")
    value = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _max_batch(summary: dict) -> int | None:
    """The servers' max_num_seqs (the same in every mode: compare refuses a run where it differs)."""
    for info in (summary.get("servers") or {}).values():
        value = ((info or {}).get("capacity") or {}).get("max_num_seqs")
        try:
            return int(value)
        except (TypeError, ValueError):
            continue
    return None


def _paying(comp: dict) -> list[float]:
    """The speedups where the mode speculates: clearly paying levels, or under compare_slo the serve levels that
    are on (slo.serve_levels)."""
    serve = {r["concurrency"]: r["verdict"] for r in comp.get("serve_levels") or []}
    return [r["speedup"] for r in comp.get("levels") or []
            if serve.get(r["concurrency"], r.get("verdict")) == PAYS and r.get("speedup")]


def serve_plan(summary: dict, engine: str, serve_mode: str | None = None) -> dict:
    """What serve.yml launches from a host's summary.json: ``{mode, engine, schedule,
    adaptive_config, text}``.

    SGLang and the emulator: the primary comparison's recommendation. Speculation pays at every
    level from 1 up to the server's running cap -> that mode as is; otherwise, where it pays
    somewhere -> ``<mode>-adaptive`` with the run's adaptive table (on from a clearly paying level to
    the last clearly paying one, off elsewhere and above the top level measured); pays nowhere (or
    no clear level) -> the baseline.
    vLLM: among the speculative modes that clearly pay somewhere, the one with the highest expected
    gain of its schedule (``traffic_gain`` of ``served_series``, by tokens, on compare_traffic when
    given, else an even share of time at each level measured; ties: compare_modes' order), with its
    schedule (``vllm_schedule``); the baseline where none pays. ``expected_gain`` carries each
    candidate's gain and interval: expected from the run, not measured (serve.yml's proof measures it).
    ``serve_mode`` overrides the choice (for vLLM a speculative mode keeps the schedule derived from its
    own levels, the baseline none).
    """
    base = summary.get("baseline_mode") or BASELINE
    comps = summary.get("comparisons") or {}
    if engine == "vllm":
        candidates = [m for m in comps if not m.endswith("-adaptive")]
        gains = {}
        if serve_mode is None:
            # By expected gain (traffic-weighted when traffic is given, else an even share of time at each
            # level measured), never by counting paying levels: 1.6x at 3 levels beats 1.03x at 4.
            gains = {m: _expected_gain(summary, m, engine) for m in candidates if _paying(comps[m])}
            ranked = sorted(gains, key=lambda m: (-(gains[m].get("gain") or 0.0), candidates.index(m)))
            serve_mode = ranked[0] if ranked else base
        if serve_mode == base:
            return _plan(serve_mode, engine, None, None, "the baseline: speculation clearly pays at no "
                         "level measured" if not any(_paying(comps[m]) for m in candidates) else "the baseline (asked for)")
        if serve_mode not in comps:
            raise ValueError(f"serve_mode={serve_mode} was not compared in this run (compared: "
                             f"{', '.join([base, *comps])}): pick one of those")
        k, max_batch = _k_of(summary, serve_mode), _max_batch(summary)
        if k is None or max_batch is None:
            raise ValueError(f"the run's summary does not say {serve_mode}'s num_speculative_tokens or the servers' "
                             "max_num_seqs: re-render it with this version (ansible-playbook playbooks/report.yml)")
        # under compare_slo the levels' serve verdicts (slo.serve_levels), else their throughput verdicts
        schedule = vllm_schedule(comps[serve_mode].get("serve_levels") or comps[serve_mode]["levels"], k, max_batch)
        if schedule is None:
            return _plan(base, engine, None, None, f"the baseline: {serve_mode} clearly pays at no level measured")
        plan = _plan(serve_mode, engine, schedule, None,
                     f"{serve_mode} with num_speculative_tokens_per_batch_size: {schedule_words(schedule)}")
        if gains:
            plan["expected_gain"] = {m: {k: g.get(k) for k in ("gain", "gain_ci95", "verdict", "weighed")}
                                     for m, g in gains.items()}
            mine = gains[serve_mode]
            if mine.get("gain") is not None:
                plan["text"] += (f"; chosen by expected gain {mine['gain']:.2f}x [{mine['gain_ci95'][0]:.2f}, "
                                 f"{mine['gain_ci95'][1]:.2f}] (95%, {_gain_basis(summary)}; expected from the run, "
                                 "not measured: serve.yml's proof measures it)")
                others = [f"{m} {g['gain']:.2f}x" for m, g in gains.items() if m != serve_mode and g.get("gain")]
                if others:
                    plan["text"] += " over " + ", ".join(others)
        return plan
    spec = summary.get("spec_mode")
    if serve_mode is not None:
        table = summary.get("adaptive_config") if serve_mode.endswith("-adaptive") else None
        return _plan(serve_mode, engine, None, table, f"{serve_mode} (asked for with serve_mode)")
    ranges = summary.get("speculate_ranges") or []
    if not spec or not ranges:
        return _plan(base, engine, None, None, "the baseline: speculation clearly pays at no level measured")
    cap = ((summary.get("servers") or {}).get(spec) or {}).get("running_cap")
    if len(ranges) == 1 and ranges[0][0] <= 1 and (ranges[0][1] is None or (cap and ranges[0][1] > cap)):
        # It pays clearly at every level up to the server's running cap: no batch size is left unmeasured.
        return _plan(spec, engine, None, None, f"{spec}: it clearly pays at every level measured, up to the server's "
                     f"running cap ({cap})")
    refused = summary.get("adaptive_refused")
    if refused:
        return static_choice(summary, spec, engine, refused)
    adaptive = spec if spec.endswith("-adaptive") else f"{spec}-adaptive"
    return _plan(adaptive, engine, None, summary.get("adaptive_config"),
                 f"{adaptive} with the run's adaptive table: speculation on where {spec} clearly pays, off elsewhere")


def static_choice(summary: dict, spec: str, engine: str, refused: str) -> dict:
    """SGLang where no adaptive table can serve ``spec`` as measured (``refused``, from
    ``serve_guard.adaptive_refusal``): ``spec`` as measured, speculating at every batch size, where its
    expected gain (``traffic_gain``: on compare_traffic when given, else an even share of time at each
    level measured) is clearly above 1; else the baseline. Either way the text says why, with the gain."""
    base = summary.get("baseline_mode") or BASELINE
    gain = _expected_gain(summary, spec, engine)
    if gain.get("gain") is not None:
        lo, hi = gain["gain_ci95"]
        figure = (f"{spec} served statically is expected to gain {gain['gain']:.2f}x [{lo:.2f}, {hi:.2f}] over "
                  f"{base} (95%, {_gain_basis(summary)}; expected from the run, not measured: serve.yml's proof "
                  "measures it)")
    else:
        figure = f"no expected gain of {spec} served statically ({gain.get('text') or 'no level gives an estimate'})"
    why = f"no adaptive table ({refused})"
    if gain.get("verdict") == PAYS:
        plan = _plan(spec, engine, None, None, f"{spec} as measured (static, every batch size): {why}; {figure}")
    else:
        plan = _plan(base, engine, None, None, f"the baseline: {why}; {figure}, not clearly above 1")
    plan["adaptive_refused"] = refused
    plan["gain_text"] = figure
    plan["expected_gain"] = {spec: {k: gain.get(k) for k in ("gain", "gain_ci95", "verdict", "weighed")}}
    return plan


def _gain_traffic(summary: dict) -> list[dict]:
    """The traffic the mode choice weighs by: the run's compare_traffic, else an even share at each level."""
    given = (summary.get("traffic") or {}).get("traffic")
    if given:
        return given
    concs = sorted({r["concurrency"] for comp in (summary.get("comparisons") or {}).values()
                    for r in comp.get("levels") or [] if isinstance(r.get("concurrency"), (int, float))})
    return [{"concurrency": c, "share": 1.0 / len(concs)} for c in concs]


def _gain_basis(summary: dict) -> str:
    return ("tokens served on compare_traffic" if (summary.get("traffic") or {}).get("traffic")
            else "tokens served, an even share of time at each level measured")


def _expected_gain(summary: dict, mode: str, engine: str) -> dict:
    """traffic_gain of what serving ``mode`` with its schedule would serve (served_series)."""
    try:
        plan = serve_plan(summary, engine, mode)
    except ValueError:
        return {"gain": None}
    name, series = served_series(summary, plan)
    traffic = _gain_traffic(summary)
    return traffic_gain(series, traffic, name) if series and traffic else {"gain": None}


def _plan(mode, engine, schedule, adaptive_config, text) -> dict:
    return {"mode": mode, "engine": engine, "schedule": schedule,
            "adaptive_config": adaptive_config, "text": text}


def _on_at(plan: dict, summary: dict, conc: float) -> bool:
    """Whether the served configuration speculates at batch size ``conc``."""
    if plan.get("schedule"):
        return any(start <= conc <= end and k > 0 for start, end, k in plan["schedule"])
    if plan["mode"] == (summary.get("baseline_mode") or BASELINE):
        return False
    if plan["mode"].endswith("-adaptive") and plan.get("adaptive_config") is not None:
        # speculate_ranges are [from, below): below is exclusive, None for open (recommend.speculate_ranges)
        return any(lo <= conc and (hi is None or conc < hi) for lo, hi in summary.get("speculate_ranges") or [])
    return True


def served_series(summary: dict, plan: dict) -> tuple[str, list[dict]]:
    """What the served configuration is expected to gain over the baseline at each measured level,
    from the run alone (before serve.yml's own proof): ``(name, levels)`` for ``traffic_gain``.

    At a level where it speculates, the speculative mode's measured speedup, interval and verdict
    (an unclear level stays unclear, so its traffic is unknown); where it does not (k = 0, the
    adaptive table off, or the baseline served), the baseline itself: speedup 1 exactly, verdict
    ``baseline served``. Off stretches between two measured levels get their ends as points too, so
    the interpolation never carries a paying level's speedup into batch sizes served without
    speculation; nothing is added outside the measured levels (that traffic stays outside)."""
    base = summary.get("baseline_mode") or BASELINE
    comps = summary.get("comparisons") or {}
    spec = plan["mode"][: -len("-adaptive")] if plan["mode"].endswith("-adaptive") and plan["mode"] not in comps \
        else plan["mode"]
    source = comps.get(spec) or comps.get(summary.get("spec_mode") or "") or {}
    rows = [r for r in source.get("levels") or [] if isinstance(r.get("concurrency"), (int, float))]
    if not rows:
        return f"served: {plan['mode']}", []
    lo, hi = min(r["concurrency"] for r in rows), max(r["concurrency"] for r in rows)

    bases = {r["concurrency"]: r.get("baseline_tok_per_s") for r in rows}

    def off(conc: float) -> dict:
        return {"concurrency": conc, "speedup": 1.0, "speedup_ci95": [1.0, 1.0], "verdict": BASELINE_SERVED,
                "baseline_tok_per_s": bases.get(conc)}

    out = {r["concurrency"]: (r if plan["mode"] != base and _on_at(plan, summary, r["concurrency"])
                              else off(r["concurrency"])) for r in rows}
    for start, end, k in plan.get("schedule") or []:
        for edge in (start, end):
            if k == 0 and lo <= edge <= hi and edge not in out:
                out[edge] = off(edge)
    return f"served: {plan['mode']}", [out[c] for c in sorted(out)]
