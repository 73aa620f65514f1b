"""False-claim rates and coverage of every claim the comparison makes, on known truths (COMPUTED figures).

Pure simulation: no server, no GPU. Each scenario draws noisy results files whose truth is known,
hands them to the comparison package's own functions (``compare_pair``, ``traffic_gain``,
``serve_plan``, ``pool_runs``) and counts how often a claim is false or an interval misses the
truth. The noise model is that of a real node, in the terms docs/explanation/decisions.md uses:

* each mode's level carries the client's 95% interval from its own window (relative half-width
  ``--half``, the window's noise, drawn as a normal relative error);
* each launch of a mode carries a launch effect, one multiplicative factor for all its levels
  (clocks, thermals, NUMA placement, graph capture, the machine's other load), relative sd
  ``launch_sd``: the client's window interval does not know it;
* ``compare_launches`` launches per mode, pooled by ``pool_runs`` as compare_results does.

Scenarios (each prints its replication count; a rate p over n runs has a standard error of
sqrt(p (1 - p) / n): 0.7% at p = 5%, n = 1000). The first four run the whole default design as compare.yml
does (tests/compare/design_sim.py: planned launches, the floor's prior, sequential rounds, every look at its
share of the error rate):

  power      power curves: a true speedup 1.00-1.30 at every level, launch sd 1-5%, the default design against
             its planned launches alone (fixed), first and later runs; one machine-readable line per cell:
             ``power speedup=1.10 launch_sd=0.03 design=default run=first window=0.020 pays=... loses=...
             runs=... mean_launches=... mean_time_x=...`` (time over the old fixed grid's, a launch costing
             LOAD_LEVELS levels' time)
  sequential a true tie through the default design, launch effects shared by a launch's levels (rho 1), half
             (0.5) or each level's own (0), launch sd 0-8%, first and later runs: runs with any claim at any
             level and look, each level's 95% and family-wise coverage
  drift      the same under a slow node drift (5%, correlation time 20-60 request durations, windows of
             50-400 over the run's own clock), the windows' intervals blind to it
  embedded   the embedded default's profile (the emulator's own model of the seeds' node): a first run's
             share that reads loses at every level from C=5
  fleet      one verdict per kind of node from 2, 4 and 8 nodes (fleet.fleet_kinds): a tie's claims, coverage,
             power at 1.10x, node-to-node sd 0 and 5%
  serve      the serve proof's sequence: one configuration proved 1-5 times (re-runs, relaunches), the node
             drifting between looks, launch sd 2% and 5%: an equal configuration's claims anywhere over the
             5 looks (target <= 5%), a 10% slower one caught by look 1, 2, 3, 5 (target >= 80% by look 3);
             one machine-readable line per cell

  tie        speedup exactly 1.00 at the seeds' 8 levels: share of runs with any claim (a level that
             pays or loses, a crossing, a speculation range), at +-2% and +-25% per level
  launch     the tie and a true 1.10x with launch sd 0-5%, at compare_launches 1 and 2 without a floor:
             coverage of the launch-population speedup, tie read "pays"/"loses", 1.10x read "pays"
  floor      the same, one launch per mode, with the node's noise floor from 1 or 3 earlier runs
  floor2     two launches per mode with the floor from this run alone or with 2 earlier runs; the second
             launches at 2 levels (the default compare_noise_floor_levels) or at every level
  smooth     a smooth truth crossing at C=10.8 on the sparse grid 4, 16, 64, 256: the share of runs
             where SGLang's table or vLLM's schedule speculates at a batch size where the truth
             loses, and the spread of "speculate below N"
  curved     the same on a curved truth with two crossings (loses at C=1, pays 2-20, loses above)
  traffic    traffic gain on a flat 1.02 truth, a half-C=1 (1.3x) half-C=30 (0.8x) mix and a curved
             truth: its verdict and the coverage of the tokens-served truth
  categories per-category accept length, acceptance varying by prompt: coverage at 3, 10, 30 requests
  choice     vLLM mode choice: n-gram 1.03x at 4 levels against EAGLE-3 1.6x at 3
  failed     a failed launch of two: the level and the run's completeness
  energy     GPU energy per output token: a tie (ratio 1.00) and a true 0.80 at the 8 levels, window noise
             +-2% (the throughput's, which the energy interval borrows) and counter bounds +-0.5%, launch sd
             0-3% on each mode's joules per token, launches 1 and 2, with the node's floor from 3 earlier runs,
             from the run's own two launches with the prior (compare_results' default on a new node) or none
             (floors off): runs with any energy claim (saves /
             costs more), the ratio's per-level 95% and family-wise coverage, 0.80 read "saves" everywhere
  latency    p99 TPOT per request (exponential, 800 requests a level), true p99 rising with C: runs with a
             false SLO claim (a level read "meets" where the truth is over the target, or "misses" where it is
             under), capacities claimed over the true one or equal to it, a tie's p99 ratio read faster / slower
  goodput    goodput under TPOT <= 50 ms (tokens/s of the requests meeting it), 200 and 800 requests a level,
             the share meeting it from 1.00 to 0.07 over the 8 levels: the 95% interval's coverage of the truth by
             share band; a tie's SLO verdict (speculate / serve the baseline) rate
  windows    one window's 95% interval of a simulated closed loop's rate (tests/closed_loop.py) under a
             5% AR(1) drift with correlation times of 1-60 request durations, windows of 50-400: the
             share of windows warned (summarize's "correlation times of its rate" warning, or no
             interval), the coverage of the unwarned ones, the median half-width against the rule
             before (batches and warning from Geyer's estimate alone); truth = the loop's long-run rate

Run: .venv/bin/python benchmarks/decision_coverage.py [--runs 1000] [--only power,sequential,tie,launch,...]
(the default-design scenarios take about 1 s per 10 runs per cell on 2 cores: --runs 400 for them)
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from statistics import NormalDist

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # closed_loop: the simulated closed loop the window tests use
sys.path.insert(0, str(ROOT / "tests" / "compare"))
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "files"))

from closed_loop import closed_loop_window, request_duration, true_rate  # noqa: E402
from compare_synth import level, result  # noqa: E402
from design_sim import (  # noqa: E402
    CLAIMS,
    LOAD_LEVELS,
    MAX_LAUNCHES,
    PRIOR,
    SEED_LEVELS,
    Z,
    base_curve,
    claims,
    design_run,
    earlier_parts,
    fixed_grid_cost,
    fleet_run,
    tie_cell,
)

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp  # noqa: E402
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import categories, stats  # noqa: E402
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.summary import (  # noqa: E402
    MAX_BINS,
    request_ratio_ci,
    window_interval,
)

RELAUNCH = cmp.relaunch_levels(SEED_LEVELS, 2)  # compare_noise_floor_levels: 2, the default: C=1 and C=30


def sweep(rng: random.Random, mode: str, truth: dict, half: float, launch_sd: float, launches: int,
          failed_launch: int | None = None, relaunch: list | None = None) -> dict:
    """``launches`` launches of one mode over truth's levels (conc -> true tok/s), pooled as compare_results does;
    the launches after the first measure only ``relaunch`` (compare_noise_floor_levels), when given."""
    sd = half / Z
    runs = []
    for n in range(launches):
        effect = math.exp(rng.gauss(0.0, launch_sd)) if launch_sd else 1.0
        levels = []
        for conc, tok in truth.items():
            if n and relaunch and conc not in relaunch:
                continue
            if failed_launch is not None and n == failed_launch:
                levels.append(level(conc, None, error="every request failed (connection refused)"))
                continue
            levels.append(level(conc, tok * effect * math.exp(rng.gauss(0.0, sd)), half))
        runs.append((None if n == 0 else f"launch{n + 1}", result(mode, levels)))
    return cmp.pool_runs(runs)


def compare(rng, speedups: dict, half=0.02, launch_sd=0.0, launches=1, base=base_curve, floor=None, **kw) -> dict:
    b_truth = {c: base(c) for c in speedups}
    s_truth = {c: base(c) * r for c, r in speedups.items()}
    b = sweep(rng, "baseline", b_truth, half, launch_sd, launches, **kw)
    s = sweep(rng, "eagle3", s_truth, half, launch_sd, launches)
    return cmp.compare_pair(b, s, "baseline", "eagle3", floor)


def node_floor(rng, runs: int, launch_sd: float, half: float = 0.02) -> dict | None:
    """The node's noise floor after ``runs`` earlier compare runs with compare_launches: 2 (launch_noise)."""
    parts = {}
    for n in range(runs):
        truth = {c: base_curve(c) for c in SEED_LEVELS}
        res = {"baseline": sweep(rng, "baseline", truth, half, launch_sd, 2),
               "eagle3": sweep(rng, "eagle3", {c: x * rng.uniform(0.7, 1.5) for c, x in truth.items()}, half,
                               launch_sd, 2)}
        part = cmp.launch_estimate(res)
        part["measured_at"] = "2026-01-01T00:00:00+00:00"
        parts[f"run{n}"] = part
    import datetime  # noqa: PLC0415 - only this scenario needs a clock
    return cmp.launch_floor_from(parts, now=datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))


def rate(hits: int, n: int) -> str:
    return f"{100.0 * hits / n:5.1f}% ({hits}/{n})" if n else f"    --  ({hits}/{n})"


def table_speculates(table: dict | None, bs: int) -> bool:
    """Whether SGLang's adaptive table (batch size -> candidate steps) may speculate at ``bs``."""
    if not table:
        return False
    row = None
    for key, steps in sorted(((int(k), v) for k, v in table.items())):
        if bs >= key:
            row = steps
    return bool(row) and any(s > 0 for s in row)


def schedule_speculates(schedule, bs: int) -> bool:
    return any(a <= bs <= b and k > 0 for a, b, k in schedule or [])


# ---------------------------------------------------------------------------------------------
def scen_tie(runs: int, rng: random.Random) -> None:
    print("== tie: speedup 1.00 at C=" + ",".join(map(str, SEED_LEVELS)) + " (launch sd 0, one launch per mode)")
    for half in (0.02, 0.25):
        hits = 0
        for _ in range(runs):
            hits += bool(claims(compare(rng, dict.fromkeys(SEED_LEVELS, 1.0), half=half)))
        print(f"  each level +-{100 * half:.0f}%: runs with any claim (pays/loses/crossing/speculate) {rate(hits, runs)}")


def scen_launch(runs: int, rng: random.Random) -> None:
    print("== launch-to-launch variation: 8 levels, +-2% windows, launch effect shared by a launch's levels")
    for launches in (1, 2):
        for launch_sd in (0.0, 0.01, 0.03, 0.05):
            cover = total = pays = loses = 0
            for _ in range(runs):
                comp = compare(rng, dict.fromkeys(SEED_LEVELS, 1.0), launch_sd=launch_sd, launches=launches)
                for r in comp["levels"]:
                    ci = r.get("speedup_ci95")
                    total += 1
                    cover += bool(ci) and ci[0] <= 1.0 <= ci[1]
                verdicts = {r["verdict"] for r in comp["levels"]}
                pays += "pays" in verdicts
                loses += "loses" in verdicts
            gain = 0
            for _ in range(max(1, runs // 4)):
                comp = compare(rng, dict.fromkeys(SEED_LEVELS, 1.10), launch_sd=launch_sd, launches=launches)
                gain += all(r["verdict"] == "pays" for r in comp["levels"])
            print(f"  launches {launches}, launch sd {100 * launch_sd:.0f}%: per-level 95% interval covers "
                  f"{rate(cover, total)}; tie reads pays {rate(pays, runs)}, loses {rate(loses, runs)}; "
                  f"1.10x reads pays at every level {rate(gain, max(1, runs // 4))}")


def scen_floor(runs: int, rng: random.Random) -> None:
    print("== launch variation held by the node's noise floor: earlier runs with compare_launches: 2 measured it; "
          "this run has one launch per mode (8 levels, +-2% windows)")
    for floor_runs in (1, 3):
        for launch_sd in (0.0, 0.01, 0.03, 0.05):
            cover = total = claims = 0
            n = max(1, runs // 2)
            for _ in range(n):
                floor = node_floor(rng, floor_runs, launch_sd)
                comp = compare(rng, dict.fromkeys(SEED_LEVELS, 1.0), launch_sd=launch_sd, floor=floor)
                for r in comp["levels"]:
                    ci = r.get("speedup_ci95")
                    total += 1
                    cover += bool(ci) and ci[0] <= 1.0 <= ci[1]
                claims += any(r["verdict"] in CLAIMS for r in comp["levels"])
            gain = 0
            m = max(1, runs // 8)
            for _ in range(m):
                floor = node_floor(rng, floor_runs, launch_sd)
                comp = compare(rng, dict.fromkeys(SEED_LEVELS, 1.10), launch_sd=launch_sd, floor=floor)
                gain += all(r["verdict"] == "pays" for r in comp["levels"])
            print(f"  floor from {floor_runs} run(s), launch sd {100 * launch_sd:.0f}%: per-level 95% interval covers "
                  f"{rate(cover, total)}; tie reads pays or loses {rate(claims, n)}; 1.10x reads pays at every "
                  f"level {rate(gain, m)}")


def scen_floor2(runs: int, rng: random.Random) -> None:
    print("== two launches per mode (A B B A; compare_launches: auto on a node without a floor), the node's floor "
          "from this run alone or with 2 earlier runs (8 levels, +-2% windows); the second launches re-measure "
          f"C={','.join(map(str, RELAUNCH))} (compare_noise_floor_levels: 2, the default) or every level (0)")
    import datetime  # noqa: PLC0415 - only this scenario needs a clock
    now = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    for relaunch, earlier in ((RELAUNCH, 0), (None, 0), (None, 2)):
        for launch_sd in (0.0, 0.03, 0.05):
            n = max(1, runs // 4)
            cover = total = claims = gain = 0
            for _rep in range(n):
                for truth_r in (1.0, 1.10):
                    truth = {c: base_curve(c) for c in SEED_LEVELS}
                    b = sweep(rng, "baseline", truth, 0.02, launch_sd, 2, relaunch=relaunch)
                    sp = sweep(rng, "eagle3", {c: x * truth_r for c, x in truth.items()}, 0.02, launch_sd, 2,
                               relaunch=relaunch)
                    part = cmp.launch_estimate({"baseline": b, "eagle3": sp})
                    part["measured_at"] = "2026-01-01T00:00:00+00:00"
                    parts = {"this": part}
                    if earlier:
                        for e in range(earlier):
                            t2 = {c: base_curve(c) for c in SEED_LEVELS}
                            p2 = cmp.launch_estimate({"baseline": sweep(rng, "baseline", t2, 0.02, launch_sd, 2),
                                                      "eagle3": sweep(rng, "eagle3", t2, 0.02, launch_sd, 2)})
                            p2["measured_at"] = "2026-01-01T00:00:00+00:00"
                            parts[f"e{e}"] = p2
                    floor = cmp.launch_floor_from(parts, now=now)
                    comp = cmp.compare_pair(b, sp, "baseline", "eagle3", floor)
                    if truth_r == 1.0:
                        for r in comp["levels"]:
                            total += 1
                            cover += bool(r["speedup_ci95"]) and r["speedup_ci95"][0] <= 1.0 <= r["speedup_ci95"][1]
                        claims += any(r["verdict"] in CLAIMS for r in comp["levels"])
                    else:
                        gain += all(r["verdict"] == "pays" for r in comp["levels"])
            again = "C=" + ",".join(map(str, relaunch)) if relaunch else "every level"
            print(f"  second launches at {again}, {earlier} earlier run(s), launch sd {100 * launch_sd:.0f}%: "
                  "per-level 95% interval covers "
                  f"{rate(cover, total)}; tie reads pays or loses {rate(claims, n)}; 1.10x reads pays at every level "
                  f"{rate(gain, n)}")


def _rule_scenario(name: str, grid: list[int], truth, runs: int, rng: random.Random) -> None:
    table_bad = sched_bad = table_on = 0
    belows: dict = {}
    for _ in range(runs):
        comp = compare(rng, {c: truth(c) for c in grid}, half=0.03)
        table = comp.get("adaptive_table")
        sched = cmp.vllm_schedule(comp["levels"], 3, grid[-1])
        loses_at = [bs for bs in range(1, grid[-1] + 1) if truth(bs) < 1.0]
        table_bad += any(table_speculates(table, bs) for bs in loses_at)
        sched_bad += any(schedule_speculates(sched, bs) for bs in loses_at)
        table_on += any(table_speculates(table, bs) for bs in range(1, grid[-1] + 1) if truth(bs) > 1.05)
        last = [r[1] - 1 for r in comp.get("speculate_ranges") or []]
        key = ",".join(map(str, last)) or "none"
        belows[key] = belows.get(key, 0) + 1
    common = sorted(belows.items(), key=lambda kv: -kv[1])[:6]
    print(f"  {name}: SGLang table speculates where the truth loses {rate(table_bad, runs)}; vLLM schedule "
          f"{rate(sched_bad, runs)}; the table speculates somewhere the truth pays 5% or more {rate(table_on, runs)}; "
          f"the last paying level named (value: runs) {', '.join(f'{k}: {v}' for k, v in common)}")


def scen_smooth(runs: int, rng: random.Random) -> None:
    print("== one speculation rule: sparse grid 4, 16, 64, 256, +-3% per level")

    def smooth(c):  # 1.45 at C=1, log-linear, crossing at 10.8
        return 1.45 - 0.45 * math.log(c) / math.log(10.8)

    _rule_scenario("smooth truth (crossing 10.8)", [4, 16, 64, 256], smooth, runs, rng)

    def curved(c):  # loses at C=1, pays from 2 to 20, loses above
        x = math.log(c)
        return 1.0 + 0.25 * math.sin(math.pi * (x - 0.5) / (math.log(20) - 0.5)) if c > 1.5 else 0.9

    _rule_scenario("curved truth (two crossings)", [1, 2, 5, 10, 30, 70, 100, 250], curved, runs, rng)


def tokens_truth(speedups: dict, traffic: list[dict]) -> float:
    num = sum(t["share"] * base_curve(t["concurrency"]) * speedups(t["concurrency"]) for t in traffic)
    den = sum(t["share"] * base_curve(t["concurrency"]) for t in traffic)
    return num / den


def scen_traffic(runs: int, rng: random.Random) -> None:
    print("== traffic gain: levels " + ",".join(map(str, SEED_LEVELS)) + ", +-2% per level; truth = tokens served "
          "with speculation / tokens served by the baseline over the mix")
    mixes = {
        "flat 1.02, even mix": (lambda c: 1.02, [{"concurrency": c, "share": 1.0} for c in SEED_LEVELS]),
        "half C=1 (1.3x), half C=30 (0.8x)": (lambda c: 1.3 if c < 20 else 0.8,
                                              [{"concurrency": 1, "share": 0.5}, {"concurrency": 30, "share": 0.5}]),
        "curved, even mix": (lambda c: 1.4 - 0.2 * math.log(c), [{"concurrency": c, "share": 1.0} for c in SEED_LEVELS]),
    }
    for name, (truth, given) in mixes.items():
        mix = cmp.parse_traffic(given)
        target = tokens_truth(truth, mix)
        cover = paid = lost = n_ok = 0
        for _ in range(runs):
            comp = compare(rng, {c: truth(c) for c in SEED_LEVELS})
            g = cmp.traffic_gain(comp["levels"], mix, "eagle3")
            if g["gain_ci95"]:
                n_ok += 1
                cover += g["gain_ci95"][0] <= target <= g["gain_ci95"][1]
            paid += g["verdict"] == "pays"
            lost += g["verdict"] == "loses"
        print(f"  {name}: truth {target:.3f}; interval covers {rate(cover, max(1, n_ok))}; reads pays "
              f"{rate(paid, runs)}, loses {rate(lost, runs)}")


def scen_categories(runs: int, rng: random.Random) -> None:
    print("== per-category accept length, acceptance varying by prompt (sd 0.6 tokens between prompts, 0.8 between "
          "steps), 20-80 verify steps per request; truth 2.5")
    for n_req in (3, 10, 30):
        cover = old = 0
        truth = 2.5
        for _ in range(runs):
            per_request = []
            for _r in range(n_req):
                mean = rng.gauss(truth, 0.6)
                k = rng.randint(20, 80)
                per_request.append((sum(rng.gauss(mean, 0.8) for _s in range(k)), k))
            est, ci = categories.ratio_of_sums_ci95(per_request)
            cover += ci is not None and ci[0] <= truth <= ci[1]
            steps = sum(k for unused, k in per_request)
            w = Z / math.sqrt(steps)  # before: breakdown.category_rows' 1.96 / sqrt(verify steps), steps independent
            old += est * math.exp(-w) <= truth <= est * math.exp(w)
        print(f"  {n_req} requests: cluster-robust interval by request covers {rate(cover, runs)} "
              f"(steps-independent interval, before: {rate(old, runs)})")


def scen_choice(runs: int, rng: random.Random) -> None:
    del runs
    print("== vLLM mode choice: ngram 1.03x at 4 levels vs eagle3 1.6x at 3 (+-0.5% windows)")
    grid = [1, 2, 4, 8, 16]
    b = {c: base_curve(c) for c in grid}
    ng = {c: base_curve(c) * (1.03 if c <= 8 else 0.9) for c in grid}
    ea = {c: base_curve(c) * (1.6 if c <= 4 else 0.7) for c in grid}
    res = {"baseline": sweep(rng, "baseline", b, 0.005, 0, 1), "ngram": sweep(rng, "ngram", ng, 0.005, 0, 1),
           "eagle3": sweep(rng, "eagle3", ea, 0.005, 0, 1)}
    for r in res.values():
        r["engine"] = "vllm"
    res["ngram"]["server"]["speculative_config"] = {"method": "ngram", "num_speculative_tokens": 3}
    res["eagle3"]["server"]["speculative_config"] = {"method": "eagle3", "num_speculative_tokens": 3}
    for r in res.values():
        r["server"]["settings"]["max_num_seqs"] = 16
    summary = cmp.summarize_host(res, "node", "sim", modes=["baseline", "ngram", "eagle3"])
    plan = cmp.serve_plan(summary, "vllm")
    print(f"  serve_plan picks {plan['mode']}: {plan['text']}")


def scen_failed(runs: int, rng: random.Random) -> None:
    del runs
    print("== a failed launch of two (baseline's second launch failed at every level)")
    truth = dict.fromkeys(SEED_LEVELS, 1.2)
    b = sweep(rng, "baseline", {c: base_curve(c) for c in truth}, 0.02, 0, 2, failed_launch=1)
    s = sweep(rng, "eagle3", {c: base_curve(c) * 1.2 for c in truth}, 0.02, 0, 2)
    summary = cmp.summarize_host({"baseline": b, "eagle3": s}, "node", "sim")
    lv = summary["levels"][0]
    print(f"  C=1 verdict {lv['verdict']}, launches {lv['launches']}; run complete: {summary['complete']}")
    print("  missing level: C=10 not measured in eagle3, neighbours pay")
    b = sweep(rng, "baseline", {c: base_curve(c) for c in SEED_LEVELS}, 0.02, 0, 1)
    s = sweep(rng, "eagle3", {c: base_curve(c) * 1.2 for c in SEED_LEVELS if c != 10}, 0.02, 0, 1)
    comp = cmp.compare_pair(b, s, "baseline", "eagle3")
    print(f"  C=10 verdict {[r['verdict'] for r in comp['levels'] if r['concurrency'] == 10]}; speculate ranges "
          f"{comp['speculate_ranges']}; table {comp['adaptive_table']}")


# The windows scenario's loop: the unit tests' C=8 case (tests/unit/.../test_level_intervals.py), a
# request of 9.1 s, under a drift of 5% whose integrated correlation time is WINDOW_TAUS request
# durations (an AR(1) with time constant half that); windows of WINDOW_LENGTHS request durations.
WINDOW_LOOP = {"streams": 8, "tokens": 256, "speed": 30.0, "spread": 0.3, "ttft": 0.3}
WINDOW_DRIFT_SD = 0.05
# A request's mean duration in WINDOW_LOOP (s), and the loop's true mean rate (tok/s).
WINDOW_DURATION = request_duration(WINDOW_LOOP["tokens"], WINDOW_LOOP["speed"], WINDOW_LOOP["spread"],
                                   WINDOW_LOOP["ttft"])
WINDOW_TRUTH = true_rate(**WINDOW_LOOP)
WINDOW_TAUS = (1, 5, 20, 40, 60)
WINDOW_LENGTHS = (50, 100, 200, 400)


def geyer_rule_interval(fine: list, window: float, requests: tuple) -> tuple[list | None, bool]:
    """(interval, warned) by the rule before issue 36 item 6: batches of BATCH_TAUS times Geyer's
    estimate (and one request), warned below MIN_CORRELATION_TIMES of Geyer's estimate; the wider
    of that and the requests' ratio interval, over the same bins as summary.window_interval."""
    tokens, durations = requests
    group = -(-len(fine) // MAX_BINS)
    coarse = [sum(fine[i:i + group]) / group for i in range(0, len(fine) - group + 1, group)]
    coarse_s = window / len(fine) * group
    tau = stats.integrated_autocorr_time(coarse)
    floor = math.ceil(sum(durations) / len(durations) / coarse_s)
    batch = max(1, floor, math.ceil(stats.BATCH_TAUS * tau))
    cis = [stats.overlapping_batch_means_ci95(coarse, batch)[1],
           request_ratio_ci(tokens, durations, sum(fine) / len(fine))]
    cis = [ci for ci in cis if ci]
    ci = max(cis, key=lambda c: c[1] - c[0]) if cis else None
    return ci, ci is None or len(coarse) / tau < stats.MIN_CORRELATION_TIMES


def drifting_window(rng: random.Random, tau: float, length: float) -> tuple[list, tuple, float]:
    """One window of WINDOW_LOOP, ``length`` request durations long, under a WINDOW_DRIFT_SD drift whose
    correlation time is ``tau`` request durations: (fine bins, requests, window seconds)."""
    loop = WINDOW_LOOP
    window = length * WINDOW_DURATION
    fine, requests = closed_loop_window(rng, loop["streams"], loop["tokens"], loop["speed"], loop["spread"],
                                        loop["ttft"], window, tau * WINDOW_DURATION / 2, WINDOW_DRIFT_SD)
    return fine, requests, window


def scen_windows(runs: int, rng: random.Random) -> None:
    loop, duration, truth = WINDOW_LOOP, WINDOW_DURATION, WINDOW_TRUTH
    print(f"== one window's interval: closed loop C={loop['streams']}, {loop['tokens']} tokens at {loop['speed']:g} "
          f"tok/s +-{100 * loop['spread']:.0f}%, TTFT {loop['ttft']:g} s (a request {duration:.1f} s), a "
          f"{100 * WINDOW_DRIFT_SD:.0f}% AR(1) drift; correlation time (tau) and window (W) in request durations")
    print("  warned: summarize's correlation warning, or no interval; covered: the unwarned windows whose interval "
          "holds the truth; either: covered or warned; width: median half-width now / before, same windows")
    print(f"  {'tau':>3} {'W':>4} | {'now: warned':>11} {'unwarned covered':>20} {'either':>6} | "
          f"{'before: warned':>14} {'unwarned covered':>20} {'either':>6} | width")
    for tau in WINDOW_TAUS:
        for length in WINDOW_LENGTHS:
            now = {"warned": 0, "covered": 0}
            before = {"warned": 0, "covered": 0}
            ratios = []
            for _ in range(runs):
                fine, requests, window = drifting_window(rng, tau, length)
                found = window_interval(fine, window, requests)
                ci = found["ci"]
                old, old_warned = geyer_rule_interval(fine, window, requests)
                for tally, interval, flag in ((now, ci, ci is None or found["warning"] is not None),
                                              (before, old, old_warned)):
                    tally["warned"] += flag
                    tally["covered"] += not flag and interval[0] <= truth <= interval[1]
                if ci and old:
                    ratios.append((ci[1] - ci[0]) / (old[1] - old[0]))
            ratios.sort()
            width = ratios[len(ratios) // 2] if ratios else float("nan")
            cells = []
            for tally in (now, before):
                unwarned = runs - tally["warned"]
                either = 100 * (tally["covered"] + tally["warned"]) / runs
                cells.append(f"{100 * tally['warned'] / runs:10.1f}% {rate(tally['covered'], unwarned):>20} "
                             f"{either:5.1f}%")
            print(f"  {tau:>3} {length:>4} | {cells[0]} |    {cells[1]} | x{width:.2f}")


# Adaptive windows (bench_target_rel_ci): a level stops at the first check where its interval's half-width is
# within the target of its figure, after at least ADAPT_MIN request durations, else at the longest window.
ADAPT_TAUS = (1, 5, 20)
ADAPT_TARGETS = (0.05, 0.02)
ADAPT_MAX = 200  # request durations: the fixed window it is held against
ADAPT_MIN = 5
ADAPT_CHECKS = 20


def scen_adaptive(runs: int, rng: random.Random) -> None:
    """Stopping a window when its interval is narrow enough (the worker's adaptive rule, summary.window_interval
    on the bins so far; the requests' ratio interval left out, as the simulated loop gives no send times) against
    the fixed window it is capped at: does stopping on the width cost coverage, and what does it save?"""
    duration, truth = WINDOW_DURATION, WINDOW_TRUTH
    print(f"== adaptive windows: the closed loop of 'windows', a {100 * WINDOW_DRIFT_SD:.0f}% drift of correlation time "
          f"tau; stop at the first of {ADAPT_CHECKS} checks where the half-width is within the target, after "
          f"{ADAPT_MIN} request durations, else at {ADAPT_MAX} (the fixed window); unwarned windows' coverage")
    for tau in ADAPT_TAUS:
        for target in ADAPT_TARGETS:
            fixed = {"covered": 0, "unwarned": 0}
            adaptive = {"covered": 0, "unwarned": 0}
            used = []
            for _ in range(runs):
                fine, unused, window = drifting_window(rng, tau, ADAPT_MAX)
                bin_s = window / len(fine)
                stop = len(fine)
                for k in range(1, ADAPT_CHECKS + 1):
                    bins = len(fine) * k // ADAPT_CHECKS
                    if bins * bin_s < ADAPT_MIN * duration:
                        continue
                    part = fine[:bins]
                    found = window_interval(part, bins * bin_s)
                    mean = sum(part) / len(part)
                    if found["ci"] and (found["ci"][1] - found["ci"][0]) / 2 <= target * mean:
                        stop = bins
                        break
                used.append(stop / len(fine))
                for tally, bins in ((fixed, len(fine)), (adaptive, stop)):
                    found = window_interval(fine[:bins], bins * bin_s)
                    if found["ci"] is not None and found["warning"] is None:
                        tally["unwarned"] += 1
                        tally["covered"] += found["ci"][0] <= truth <= found["ci"][1]
            print(f"  tau {tau:>2}, target +-{100 * target:.0f}%: adaptive covers "
                  f"{rate(adaptive['covered'], adaptive['unwarned'])} in {100 * sum(used) / runs:.0f}% of the fixed "
                  f"window's time (mean); fixed covers {rate(fixed['covered'], fixed['unwarned'])}")



def scen_power(runs: int, rng: random.Random) -> None:
    print(f"== power: a true speedup at every one of the 8 seed levels, launch effect shared by a launch's levels; "
          f"design default = the planned launches + sequential rounds up to compare_max_launches {MAX_LAUNCHES}, fixed = "
          f"the planned launches only (the whole error rate at one look); run first (A B B A) or later (one earlier "
          f"run's floor); window = each level's 95% window half-width (0.008: the embedded default's C=1, 60-s "
          f"windows); pays/loses: share of runs whose C=1 reads so; any_claim (ties): share with any claim at any "
          f"level; mean_time_x: the run's time over the old fixed grid's (one launch per mode; a launch = "
          f"{LOAD_LEVELS:g} levels' time); prior {PRIOR[0]:.0%} on {PRIOR[1]} degrees of freedom")
    n = max(1, runs)
    cells = [(0.02, 0.03, (1.00, 1.10, 1.20, 1.30)), (0.008, 0.01, (1.00, 1.04, 1.10)),
             (0.008, 0.03, (1.00, 1.04, 1.10, 1.20)), (0.02, 0.05, (1.00, 1.10, 1.20, 1.30))]
    for which in ("first", "later"):
        for half, launch_sd, speedups in cells:
            for speedup in speedups:
                for design in ("default", "fixed"):
                    pays = loses = launches = any_claim = 0
                    cost = 0.0
                    for _ in range(n):
                        earlier = earlier_parts(rng, 1, launch_sd, half) if which == "later" else None
                        out = design_run(rng, dict.fromkeys(SEED_LEVELS, speedup), launch_sd, half, design, earlier)
                        row = out["comp"]["levels"][0]
                        pays += row["verdict"] == "pays"
                        loses += row["verdict"] == "loses"
                        any_claim += bool(claims(out["comp"]))
                        launches += out["launches"]
                        cost += out["cost"] / fixed_grid_cost(SEED_LEVELS)
                    extra = f" any_claim={any_claim / n:.3f}" if speedup == 1.0 else ""
                    print(f"power speedup={speedup:.2f} launch_sd={launch_sd:.2f} design={design} run={which} "
                          f"window={half:.3f} pays={pays / n:.3f} loses={loses / n:.3f} runs={n} "
                          f"mean_launches={launches / n:.1f} mean_time_x={cost / n:.2f}{extra}", flush=True)


def scen_sequential(runs: int, rng: random.Random) -> None:
    print("== sequential: a true tie at the 8 seed levels, the default design (planned launches + added rounds, the "
          "error rate spent over the looks), +-2% windows: runs with any claim at any level and look (family-wise "
          "target <= 5%), per-level 95% interval coverage (target >= 90%); a launch effect shared by a launch's levels "
          "(rho 1), half shared (0.5) or each level's own (0)")
    n = max(1, runs)
    for which in ("first", "later"):
        for rho in (1.0, 0.5, 0.0):
            for launch_sd in (0.0, 0.01, 0.03, 0.05, 0.08):
                hit, cover, total, fam, fam_total = tie_cell(rng, n, which, launch_sd=launch_sd, rho=rho)
                print(f"  {which} run, rho {rho:.1f}, launch sd {100 * launch_sd:.0f}%: any claim {rate(hit, n)}; "
                      f"per-level 95% covers {rate(cover, total)}; family-wise covers {rate(fam, fam_total)}",
                      flush=True)


def scen_drift(runs: int, rng: random.Random) -> None:
    print("== drift: a true tie on a node whose rate drifts (AR(1), 5% sd, correlation time tau request durations) "
          "over the run's own clock (a load = 2 windows, a warm-up = half a window), windows of W request durations, "
          "+-2% window intervals that do not see the drift, no launch effect besides it; the default design, first "
          "run and a later run on the floor of one earlier run on the same node: any claim (target <= 5%), per-level "
          "95% coverage (target >= 90%)")
    n = max(1, runs)
    for which in ("first", "later"):
        for tau in (20.0, 60.0):
            for window in (50.0, 400.0):
                hit, cover, total, fam, fam_total = tie_cell(rng, n, which, drift_args=(0.05, tau, window))
                print(f"  {which} run, tau {tau:g}, W {window:g}: any claim {rate(hit, n)}; per-level 95% covers "
                      f"{rate(cover, total)}; family-wise covers {rate(fam, fam_total)}", flush=True)


def scen_embedded(runs: int, rng: random.Random) -> None:
    from compare_synth import analytic_results  # noqa: PLC0415 - the emulator's own model, this scenario only
    base, spec, unused = analytic_results("kimi-k2.5-8x-rtx-pro-6000", SEED_LEVELS)
    truth = {b["concurrency"]: s["output_tok_per_s"] / b["output_tok_per_s"]
             for b, s in zip(base["levels"], spec["levels"], strict=True)}
    print("== embedded: the embedded default's profile (the seeds' Kimi-K2.5 node, the emulator's model: speedup "
          + ", ".join(f"C={c} {r:.3f}" for c, r in truth.items()) + "), the emulator's default launch sd 2% (and 5%), "
          "a first run of the default design: share of runs that read loses at every level from C=5 (target >= 19 "
          "of 20, 95%), and that claim pays anywhere the truth loses")
    n = max(1, runs)
    for half in (0.01, 0.03):
        for launch_sd in (0.02, 0.05):
            decided = wrong = launches = 0
            cost = 0.0
            for _ in range(n):
                out = design_run(rng, truth, launch_sd, half)
                rows = {r["concurrency"]: r["verdict"] for r in out["comp"]["levels"]}
                decided += all(v == "loses" for c, v in rows.items() if c >= 5)
                wrong += any(v == "pays" and truth[c] < 1.0 for c, v in rows.items())
                launches += out["launches"]
                cost += out["cost"] / fixed_grid_cost(SEED_LEVELS)
            print(f"  windows +-{100 * half:.0f}%, launch sd {100 * launch_sd:.0f}%: loses at every level from C=5 "
                  f"{rate(decided, n)}; pays where the truth loses {rate(wrong, n)}; launches per mode "
                  f"{launches / n:.1f}, time {cost / n:.2f}x the fixed grid", flush=True)


def scen_fleet(runs: int, rng: random.Random) -> None:
    print("== fleet: one verdict for a kind of node from 2, 4 or 8 nodes (each its first run's planned launches, "
          "A B B A, read with the floor it measures; fleet.fleet_kinds reads the kind from the nodes' own speedups), "
          "node-to-node sd 0-5% (a node's speed moves both modes, half of it its speedup too), launch sd 2%, +-2% "
          "windows, the seeds' 8 levels: a true tie's claims (target <= 5%), each level's 95% interval's coverage "
          "(target >= 90%), a true 1.10x read pays at C=1 and at every level")
    n = max(1, runs)
    for nodes in (2, 4, 8):
        for node_sd in (0.0, 0.05):
            hit = cover = total = 0
            for _ in range(n):
                kind = fleet_run(rng, dict.fromkeys(SEED_LEVELS, 1.0), nodes, node_sd, 0.02)
                hit += any(lv["verdict"] in CLAIMS for lv in kind["levels"])
                for lv in kind["levels"]:
                    ci = lv.get("speedup_ci95")
                    total += 1
                    cover += bool(ci) and ci[0] <= 1.0 <= ci[1]
            pays1 = every = 0
            m = max(1, n // 2)
            for _ in range(m):
                kind = fleet_run(rng, dict.fromkeys(SEED_LEVELS, 1.10), nodes, node_sd, 0.02)
                pays1 += kind["levels"][0]["verdict"] == "pays"
                every += all(lv["verdict"] == "pays" for lv in kind["levels"])
            print(f"  {nodes} nodes, node sd {100 * node_sd:.0f}%: tie claims {rate(hit, n)}; per-level 95% covers "
                  f"{rate(cover, total)}; 1.10x pays at C=1 {rate(pays1, m)}, at every level {rate(every, m)}",
                  flush=True)


SERVE_LEVELS = [1, 4, 16]  # the levels of the runs on vLLM's CPU build
REF_GAP = 0.1  # a look's reference launch precedes its served launch by this share of the time between looks
SERVE_PLANNED = 3  # serve_planned_looks' default: the looks a proof's sequence plans for at its first


def serve_sequence(rng: random.Random, truth: float, looks: int, launch_sd: float, drift: float, design: str,
                   floor: dict | None, half: float = 0.02, planned: int | None = SERVE_PLANNED) -> list[dict]:
    """One configuration proved ``looks`` times on one node, the rule serve_proof applies (proof_rows at each look's
    share, check_unmoved for a look in place, look_record, apply_looks); returns each look's rows, combined.

    The node's speed walks between looks (log sd ``drift`` per look, sqrt(REF_GAP) of it between a look's reference
    launch and its served launch); every launch has its own effect (log sd ``launch_sd``); windows +-``half``. design
    ``relaunch``: every look a launch of its own, its reference (the static counterpart) measured again just before
    it (serve_measure_references); ``in place``: look 1 so, the later looks on the same server (a re-run of a proof
    that did not verify), held to look 1's references. The sequence is planned for ``planned`` looks
    (serve_planned_looks; None: the open rule, sequential.open_look_alpha)."""
    plan = {"mode": "ngram", "schedule": [[1, 1, 4]]}
    speed = 0.0
    kept, out, refs, effect, pid = [], [], None, 0.0, 0
    for k in range(1, looks + 1):
        if k > 1:
            speed += rng.gauss(0.0, drift)
        if design == "relaunch" or k == 1:
            # The reference launch a tenth of the time between looks before the served one (a random walk: sd
            # drift x sqrt(0.1)), a drift the node's floor, measured within compare runs, does not hold.
            ref_at = speed - rng.gauss(0.0, drift * math.sqrt(REF_GAP)) if drift else speed
            refs = {"ngram": sweep(rng, "ngram", {c: 100.0 * c * math.exp(ref_at) for c in SERVE_LEVELS}, half,
                                   launch_sd, 1)}
            effect, pid = rng.gauss(0.0, launch_sd), pid + 1
        served = result("ngram-sched", [level(c, 100.0 * c * truth * math.exp(speed + effect + rng.gauss(0.0, half / Z)),
                                              half) for c in SERVE_LEVELS])
        alpha = cmp.look_alpha(k, planned)
        rows = cmp.proof_rows(served, refs, 0.1, "ngram", launch_floor=floor, alpha=alpha)
        server = {"pid": pid, "starttime": pid}
        earlier = next((lo for lo in kept if lo["server"]["pid"] == pid), None)
        cmp.check_unmoved(rows, earlier, alpha)
        kept.append(cmp.look_record(rows, k, f"look{k}", server, earlier is not None, floor, planned))
        out.append(cmp.apply_looks(rows, kept, 0.1, plan))
    return out


def looks_needed(launch_sd: float, floor_df: int, design: str, half: float = 0.02, slower: float = 0.9,
                 target: float = 0.8, most: int = 99, planned: int | None = SERVE_PLANNED) -> int | None:
    """The first look at which a ``slower`` configuration reads worse with probability ``target`` at that look
    alone (a lower bound on "caught by then"), by the normal approximation of the pooled rule: ``k`` launches, each
    against references of its own, pool to a launch part ``launch_sd * sqrt(2 / k)`` (windows ``half`` per side,
    sqrt(2 / k) too), held on t's quantile at look k's share (a sequence planned for ``planned`` looks; None: the
    smallest plan whose own last look reaches ``target``, what serve_planned_looks should say on such a node) on the
    node's data plus the looks' ``k - 1`` degrees of freedom with the sd at its truth. In place the looks share one
    launch: only look 1's chance, whatever their number (None where that is under ``target``)."""
    def chance(k: int, plan: int) -> float:
        launches = 1 if design == "in place" else k
        alpha = cmp.planned_look_alpha(k, plan)
        launch_se = launch_sd * math.sqrt(2.0 / launches)
        window_se = math.sqrt(2.0 / launches) * half / Z
        width = math.hypot(stats.t_two_sided(alpha, floor_df + launches - 1) * launch_se,
                           stats.t_two_sided(alpha / len(SERVE_LEVELS)) * window_se)
        return NormalDist().cdf((-math.log(slower) - width) / math.hypot(launch_se, window_se))

    for k in range(1, (1 if design == "in place" else most) + 1):
        if chance(k, planned if planned else k) >= target:
            return k
    return None


def known_sd_bound(launch_sd: float, design: str, looks: int = 3, half: float = 0.02, slower: float = 0.9) -> float:
    """The chance that one two-sided 5% test of the looks' mean reads a ``slower`` configuration worse at one level,
    the launch sd known, no share spent on other looks or levels: what no rule with error control can beat by look
    ``looks`` (relaunch: that many launches, each against references of its own; in place: one launch, its windows
    averaged)."""
    launches = 1 if design == "in place" else looks
    se = math.sqrt(2.0 / launches * launch_sd ** 2 + 2.0 / looks * (half / Z) ** 2)
    return NormalDist().cdf(-math.log(slower) / se - NormalDist().inv_cdf(0.975))


def scen_serve(runs: int, rng: random.Random) -> None:
    print("== serve: one configuration proved 1-5 times in a row on one node (serve_proof's sequence: after look k the "
          "looks pooled, one log ratio per served launch, their mean held at look k's share of 5% planned for "
          f"{SERVE_PLANNED} looks (sequential.planned_look_alpha: 2.25%, 1.125%, 1.125%, then 0.5% x 6/(pi^2 j^2)) "
          "with the floor's launch "
          "part, the wider of the prior-weighted floor's and the node's own data's, on the floor's and the launches' "
          "own spread's degrees of freedom; the pooled intervals after each look intersected), C="
          + ",".join(map(str, SERVE_LEVELS))
          + ", +-2% windows, the node's floor from the compare run (A B B A, 2 degrees of freedom besides the prior) "
          "or from 3 runs, the node's speed drifting between looks (log sd per look; a look's reference launch a tenth of "
          "that time before its served launch), each launch its own effect; "
          "relaunch: every look a launch with its references measured again just before it; in place: the later "
          "looks on look 1's server and references (one launch: they cannot average its effect out). equal: share of "
          "sequences reading worse or better at any level after any of the 5 looks (target <= 5%; at 400 runs a 5% "
          "rate has a Monte-Carlo sd of 1.1%); 10% slower: share reading worse somewhere by look 1, 2, 3, 5 (target >= "
          "80% by look 3); looks_needed: the first look at which the 10% slower one reads worse in 80% (computed, "
          "looks_needed(): normal approximation, the launch sd at its truth; none: never, in place), with serve_planned_looks "
          f"at its default {SERVE_PLANNED}, and with it set to that number of looks; bound_look3: "
          "what no rule can beat by look 3 (known_sd_bound(): one 5% test of the looks' mean at one level, the launch "
          "sd known, nothing spent on other looks or levels): where it is under 80% the target is out of reach of any "
          "error-controlled proof, and only more launches (relaunch) or a quieter node decide. Then the spending rule "
          "itself (serve spending): the open rule (5% x 6/(pi^2 k^2)) against plans of 3 and 5 looks, relaunched at 2% "
          "launch sd; clear20_look1: a 20% slower configuration read worse by the first proof alone")
    n = max(1, runs)
    for floor_runs in (1, 3):
        for launch_sd in (0.02, 0.05):
            for drift in (0.0, 0.05):
                for design in ("relaunch", "in place"):
                    claims = 0
                    caught = [0] * 5
                    for _ in range(n):
                        floor = node_floor(rng, floor_runs, launch_sd)
                        seq = serve_sequence(rng, 1.0, 5, launch_sd, drift, design, floor)
                        claims += any(r["verdict"] in ("worse", "better") for rows in seq for r in rows)
                        seq = serve_sequence(rng, 0.9, 5, launch_sd, drift, design, floor)
                        first = next((j for j, rows in enumerate(seq) if any(r["verdict"] == "worse" for r in rows)), 5)
                        for j in range(first, 5):
                            caught[j] += 1
                    needed = looks_needed(launch_sd, 2 * floor_runs, design)
                    fitted = looks_needed(launch_sd, 2 * floor_runs, design, planned=None)
                    print(f"serve floor_runs={floor_runs} launch_sd={launch_sd:.2f} drift={drift:.2f} "
                          f"design={design.replace(' ', '_')} runs={n} equal_claims={claims / n:.3f} "
                          f"slower_caught_by_look1={caught[0] / n:.3f} look2={caught[1] / n:.3f} "
                          f"look3={caught[2] / n:.3f} look5={caught[4] / n:.3f} "
                          f"looks_needed={needed if needed else 'none'} "
                          f"with_planned_looks_set_to_it={fitted if fitted else 'none'} "
                          f"bound_look3={known_sd_bound(launch_sd, design):.3f}", flush=True)
    # What the plan costs and buys: on a 2%-launch-sd node, relaunched, the open rule against plans of 3 and 5 looks;
    # clear20_look1: a 20% slower configuration read worse by the first proof alone (a clear regression, decided at once).
    for floor_runs in (1, 3):
        for planned in (None, 3, 5):
            caught, clear = [0] * 5, 0
            for _ in range(n):
                floor = node_floor(rng, floor_runs, 0.02)
                seq = serve_sequence(rng, 0.9, 5, 0.02, 0.0, "relaunch", floor, planned=planned)
                first = next((j for j, rows in enumerate(seq) if any(r["verdict"] == "worse" for r in rows)), 5)
                for j in range(first, 5):
                    caught[j] += 1
                seq = serve_sequence(rng, 0.8, 1, 0.02, 0.0, "relaunch", floor, planned=planned)
                clear += any(r["verdict"] == "worse" for r in seq[0])
            print(f"serve spending floor_runs={floor_runs} launch_sd=0.02 design=relaunch "
                  f"planned_looks={planned if planned else 'open'} runs={n} slower_caught_by_look1={caught[0] / n:.3f} "
                  f"look3={caught[2] / n:.3f} look5={caught[4] / n:.3f} clear20_look1={clear / n:.3f}", flush=True)


def energy_sweep(rng: random.Random, mode: str, joules: dict, half: float, launch_sd: float, launches: int) -> dict:
    """``launches`` launches of one mode: throughput on the base curve and energy per token ``joules`` (conc -> true
    J/token), each launch's effect on its joules shared by its levels, pooled as compare_results does."""
    sd = half / Z
    runs = []
    for n in range(launches):
        effect = math.exp(rng.gauss(0.0, launch_sd)) if launch_sd else 1.0
        levels = []
        for conc, truth in joules.items():
            lv = level(conc, base_curve(conc) * math.exp(rng.gauss(0.0, sd)), half)
            value = truth * effect * math.exp(rng.gauss(0.0, sd))
            lv.update(energy_j_per_output_token=value, energy_j_per_output_token_bounds=[value * 0.995, value * 1.005],
                      energy_confounders=[])
            levels.append(lv)
        runs.append((None if n == 0 else f"launch{n + 1}", result(mode, levels)))
    return cmp.pool_runs(runs)


def own_floor(results: dict) -> dict | None:
    """The floor compare_results holds a run of two launches in on a node without earlier runs (its default,
    compare_noise_floor_max_age_days > 0): this run's own launch estimate with the stated prior."""
    import datetime  # noqa: PLC0415 - only this scenario needs a clock
    part = cmp.launch_estimate(results)
    if not part:
        return None
    part["measured_at"] = "2026-01-01T00:00:00+00:00"
    return cmp.launch_floor_from({"this": part}, now=datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC))


def scen_energy(runs: int, rng: random.Random) -> None:
    print("== energy per output token: ratio speculation/baseline at C=" + ",".join(map(str, SEED_LEVELS))
          + ", +-2% windows, counter bounds +-0.5%")
    # earlier: the node's floor from that many earlier runs; "own": none earlier, this run's own launches with the
    # prior (compare_results' default); 0: floors off (compare_noise_floor_max_age_days: 0), no floor at all
    for launches, launch_sd, earlier in ((1, 0.0, 0), (1, 0.03, 3), (2, 0.0, 0), (2, 0.0, "own"), (2, 0.03, 0),
                                         (2, 0.03, "own"), (2, 0.03, 3)):
        claims_n = cover = cover_f = total = 0
        floor = node_floor(rng, earlier, launch_sd) if isinstance(earlier, int) and earlier else None

        def run_floor(b, s, floor=floor, earlier=earlier):
            return own_floor({"baseline": b, "eagle3": s}) if earlier == "own" else floor

        for _ in range(runs):
            b = energy_sweep(rng, "baseline", dict.fromkeys(SEED_LEVELS, 0.3), 0.02, launch_sd, launches)
            s = energy_sweep(rng, "eagle3", dict.fromkeys(SEED_LEVELS, 0.3), 0.02, launch_sd, launches)
            comp = cmp.compare_pair(b, s, "baseline", "eagle3", run_floor(b, s))
            claims_n += any(r["energy_verdict"] in ("saves", "costs more") for r in comp["levels"])
            for r in comp["levels"]:
                ci, fam = r.get("energy_ratio_ci95"), r.get("energy_ratio_ci_family")
                total += 1
                cover += bool(ci) and ci[0] <= 1.0 <= ci[1]
                cover_f += bool(fam) and fam[0] <= 1.0 <= fam[1]
        gain = 0
        for _ in range(max(1, runs // 4)):
            b = energy_sweep(rng, "baseline", dict.fromkeys(SEED_LEVELS, 0.3), 0.02, launch_sd, launches)
            s = energy_sweep(rng, "eagle3", dict.fromkeys(SEED_LEVELS, 0.24), 0.02, launch_sd, launches)
            comp = cmp.compare_pair(b, s, "baseline", "eagle3", run_floor(b, s))
            gain += all(r["energy_verdict"] == "saves" for r in comp["levels"])
        where = ("this run's own launches with the prior (no earlier run)" if earlier == "own" else
                 f"from {earlier} earlier runs" if earlier else "none (floors off)")
        print(f"  launches {launches}, launch sd {100 * launch_sd:.0f}%, floor {where}: "
              "tie reads saves/costs more at some level "
              f"{rate(claims_n, runs)}; ratio's 95% interval covers {rate(cover, total)}, family-wise "
              f"{rate(cover_f, total)}; 0.80 reads saves at every level {rate(gain, max(1, runs // 4))}")


def latency_levels(rng: random.Random, mode: str, p99: dict, requests: int) -> dict:
    """One launch of a mode whose requests' TPOT is exponential with the true p99 ``p99[conc]`` (ms)."""
    levels = []
    for conc, truth in p99.items():
        scale = truth / math.log(100.0)
        lv = level(conc, 100.0 * conc)
        lv["tpot_ms"] = stats.summary([rng.expovariate(1.0 / scale) for _ in range(requests)], 1.0, ci=True)
        levels.append(lv)
    return result(mode, levels)


def scen_latency(runs: int, rng: random.Random) -> None:
    target = 50.0
    curves = {"baseline": {c: 30.0 + 0.5 * c for c in SEED_LEVELS}, "eagle3": {c: 20.0 + 0.6 * c for c in SEED_LEVELS}}
    true_cap = {m: max((c for c, v in curve.items() if v <= target), default=None) for m, curve in curves.items()}
    print(f"== latency: p99 TPOT per request, 800 requests a level, SLO p99 TPOT <= {target:g} ms at C="
          + ",".join(map(str, SEED_LEVELS)) + f" (true capacity: {true_cap})")
    false_runs = over = exact = 0
    for _ in range(runs):
        res = {m: latency_levels(rng, m, curve, 800) for m, curve in curves.items()}
        slo = cmp.summarize_host(res, "sim", "sim", slo={"tpot_p99_ms": target})["slo"]
        wrong = False
        for mode, info in slo["modes"].items():
            for row in info["levels"]:
                truth = curves[mode][row["concurrency"]]
                wrong |= (row["status"] == "meets" and truth > target) or (row["status"] == "misses" and truth <= target)
            cap, truth_cap = info["capacity"], true_cap[mode]
            over += cap is not None and (truth_cap is None or cap > truth_cap)
            exact += cap == truth_cap
        false_runs += wrong
    print(f"  runs with any false SLO claim (meets over the target or misses under it, either mode) "
          f"{rate(false_runs, runs)}; capacity claimed over the true one {rate(over, 2 * runs)}, equal to it "
          f"{rate(exact, 2 * runs)} (below it: a level near the target left unclear)")
    ties = 0
    for _ in range(runs):
        same = {c: 40.0 for c in SEED_LEVELS}
        comp = cmp.compare_pair(latency_levels(rng, "baseline", same, 800), latency_levels(rng, "eagle3", same, 800),
                                "baseline", "eagle3")
        ties += any(r.get("tpot_p99_ratio_verdict") in ("faster", "slower") for r in comp["levels"])
    print(f"  a tie (p99 TPOT equal in both modes): runs with any level read faster or slower {rate(ties, runs)}")


def goodput_levels(rng: random.Random, mode: str, p99: dict, requests: int) -> tuple[dict, dict]:
    """One launch of a mode: per level ``requests`` requests with exponential TPOT (true p99 ``p99[conc]`` ms) and
    50-300 output tokens, a throughput read +-2% about the truth 100 C tok/s; returns (result, true goodput by
    level) for the target SLO_TARGET_MS."""
    levels, truth = [], {}
    for conc, p in p99.items():
        scale = p / math.log(100.0)
        tpots = [rng.expovariate(1.0 / scale) for _ in range(requests)]
        tokens = [rng.randint(50, 300) for _ in range(requests)]
        true_thr = 100.0 * conc
        lv = level(conc, true_thr * math.exp(rng.gauss(0.0, 0.02 / Z)), 0.02)
        lv["tpot_ms"] = stats.summary(tpots, 1.0, ci=True)
        lv["request_latencies"] = {"columns": ["ttft_ms", "tpot_ms", "e2e_ms", "output_tokens"],
                                   "rows": [[50.0, t, 50.0 + t * n, n] for t, n in zip(tpots, tokens)]}  # noqa: B905
        levels.append(lv)
        truth[conc] = true_thr * (1.0 - math.exp(-SLO_TARGET_MS / scale))  # tokens independent of TPOT
    return result(mode, levels), truth


SLO_TARGET_MS = 50.0


def scen_goodput(runs: int, rng: random.Random) -> None:
    # true p99 TPOT per level: the share of requests meeting 50 ms runs from 1.00 to 0.07 over the levels
    curve = dict(zip(SEED_LEVELS, (15.0, 25.0, 40.0, 60.0, 100.0, 200.0, 600.0, 3000.0)))  # noqa: B905
    print(f"== goodput: tokens/s of the requests with TPOT <= {SLO_TARGET_MS:g} ms, 200 and 800 requests a level, "
          "TPOT exponential with true p99 " + ", ".join(f"{v:g}" for v in curve.values()) + " ms at C="
          + ",".join(map(str, SEED_LEVELS)) + "; throughput +-2%; the SLO verdict on a tie")
    for requests in (200, 800):
        cover = {"share >= 0.9": [0, 0], "0.1 < share < 0.9": [0, 0], "share <= 0.1": [0, 0]}
        for _ in range(runs):
            res, truth = goodput_levels(rng, "baseline", curve, requests)
            slo = cmp.summarize_host({"baseline": res}, "sim", "sim", slo={"tpot_p99_ms": SLO_TARGET_MS})["slo"]
            for row in slo["modes"]["baseline"]["levels"]:
                true = truth[row["concurrency"]]
                share = true / (100.0 * row["concurrency"])
                band = "share >= 0.9" if share >= 0.9 else "share <= 0.1" if share <= 0.1 else "0.1 < share < 0.9"
                ci = row.get("goodput_tok_per_s_ci95")
                cover[band][0] += bool(ci) and ci[0] <= true <= ci[1]
                cover[band][1] += 1
        print(f"  {requests} requests a level: goodput's 95% interval covers the truth "
              + "; ".join(f"{band} {rate(*hits)}" for band, hits in cover.items()))
    claims = 0
    for _ in range(runs):
        a, unused = goodput_levels(rng, "baseline", curve, 800)
        b, unused = goodput_levels(rng, "eagle3", curve, 800)
        slo = cmp.summarize_host({"baseline": a, "eagle3": b}, "sim", "sim", slo={"tpot_p99_ms": SLO_TARGET_MS})["slo"]
        claims += bool(slo["verdict"]["speculate"] or slo["verdict"]["baseline_better"])
    print(f"  a tie (the same TPOT in both modes, 800 requests a level): runs whose SLO verdict reads speculate or "
          f"serve the baseline {rate(claims, runs)}")


SCENARIOS = {
    "power": scen_power,
    "sequential": scen_sequential,
    "drift": scen_drift,
    "embedded": scen_embedded,
    "fleet": scen_fleet,
    "serve": scen_serve,
    "tie": scen_tie,
    "launch": scen_launch,
    "floor": scen_floor,
    "floor2": scen_floor2,
    "smooth": scen_smooth,
    "traffic": scen_traffic,
    "categories": scen_categories,
    "choice": scen_choice,
    "failed": scen_failed,
    "windows": scen_windows,
    "adaptive": scen_adaptive,
    "energy": scen_energy,
    "latency": scen_latency,
    "goodput": scen_goodput,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--seed", type=int, default=36)
    args = parser.parse_args()
    print(f"decision_coverage: COMPUTED figures (simulation through specbench_compare), {args.runs} runs per cell, "
          f"seed {args.seed}")
    for name in args.only.split(","):
        start = time.monotonic()
        SCENARIOS[name](args.runs, random.Random(f"{args.seed}-{name}"))
        print(f"  ({time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
