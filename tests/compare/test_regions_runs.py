"""Whole-series verdicts end to end: playbooks/compare.yml and bench.yml through ansible-runner on
emulated nodes (real processes, localhost only). Three shared runs:

* ``moe_run``: compare.yml on the kimi-k2.5-moe profile (speculation loses at small batches, pays at
  moderate ones, loses again) with ``compare_launches: 3``: each mode launched three times, interleaved
  (A B B A A B, a fresh server each time, ``<mode>@launchN.json``), the levels pooled; the report says
  ``multiple`` with the regions where the emulator's analytic model puts them.
* ``adaptive_run`` (after moe_run): bench.yml runs eagle3-adaptive on two hosts at once, one launched
  with the table that report recommends, one with SGLang's default table; the tracking check holds
  the first to the better fixed mode at every level and fails the second.
* ``refine_run``: compare.yml with compare_refine on the Llama-3.1-8B/H100 profile from two levels
  far apart, with a budget of 2 added levels per mode (``compare_refine_max_levels``): the interval
  holds the analytic crossover and narrows to hi/lo <= 1.3, to unclear levels only, or until the
  budget is spent. It runs beside the MoE run (it mostly waits on its slowed emulator).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from compare_kit import node_vars, not_kept_up, run_playbook
from compare_synth import truth_crossover
from specbench_testkit import free_port, inventory, kill_node_servers, shared_run, start_shared_run

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from sglang_emulator import model
from sglang_emulator.profiles import PROFILES

# A playbook run's limit guards against a hang only: these runs take 100-310 s in a quiet CI run
# (two pytest workers on 2 cores) and ran past 420 s beside other work (load 10-20); the pytest
# limit, which counts a shared run's fixture setup, stays above it.
RUN_TIMEOUT_S = 1200
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

MOE = "kimi-k2.5-moe"
LLAMA = "llama-3.1-8b-1x-h100"
MOE_LEVELS = [4, 32, 128]
MOE_LEN = 32
# Three launches: the pooled interval's t has k - 1 degrees of freedom, and with two (t(1) = 12.7)
# two launches that disagree a little on a busy machine leave C=32's clear 1.2x unclear (seen in a
# full run); t(2) = 4.3.
MOE_LAUNCHES = 3
LLAMA_LEVELS = [20, 80]
LLAMA_LEN = 32
# Refinement's level budget (compare_refine_max_levels, 4 by default): two rounds narrow 20-80 around the
# model's crossing near 50 (40, then 57 or 28) and show the budget stops it; each round is two launches (CI time).
REFINE_MAX_LEVELS = 2


def summary(run_dir: Path, host: str) -> dict:
    return json.loads((run_dir / host / "summary.json").read_text())


def moe_speedup(concurrency: float) -> float:
    prof = PROFILES[MOE]
    costs = model.Costs(**prof["costs"])
    const = prof["spec"]["EAGLE3"]
    steps, topk, draft = prof["draft_defaults"]
    spec = model.SpecConfig("EAGLE3", steps, topk, draft, const["accept_q"], const["e0"], const["e1"])
    args = (int(concurrency), MOE_LEN, MOE_LEN, 256, 10**8)
    return (model.steady_state(costs, spec, *args)["output_tok_per_s"]
            / model.steady_state(costs, None, *args)["output_tok_per_s"])


def moe_truth_crossings() -> list[float]:
    signs = [(c, moe_speedup(c) >= 1) for c in range(1, 257)]
    return [c for (unused, a), (c, b) in zip(signs, signs[1:], strict=False) if a != b]


def results_of(run_dir: Path, host: str) -> dict:
    """Each mode's results on a host, its launches (<mode>@launchN.json) pooled as compare pools them."""
    runs: dict[str, list] = {}
    for path in (run_dir / host).glob("*.json"):
        mode, tag = cmp.split_run_name(path.stem)
        if mode in ("baseline", "eagle3", "eagle3-adaptive"):
            runs.setdefault(mode, []).append((tag, json.loads(path.read_text())))
    return {mode: cmp.pool_runs(found) for mode, found in runs.items()}


def compare_on_one_node(tmp: Path, host: str, profile: str, time_scale: float, extravars: dict, **hostvars):
    """compare.yml on one emulated node (``tmp/node-<host>``), its servers killed after."""
    node = tmp / f"node-{host}"
    hosts = {host: node_vars(node, free_port(), profile, time_scale, **hostvars)}
    try:
        return run_playbook(tmp, "playbooks/compare.yml", inventory(hosts),
                            extravars={"results_dir": str(tmp / "results"), "compare_plots": False, **extravars},
                            timeout=RUN_TIMEOUT_S)
    finally:
        kill_node_servers(node)


@pytest.fixture(scope="module")
def moe_run(tmp_path_factory):
    def build(tmp: Path):
        # MOE_LAUNCHES launches of each mode, interleaved (compare_launches), pooled per level: the
        # regions below come from the pooled levels. 4-s windows: with 2 s, a baseline launch at C=32
        # read 87 % of the model twice here, each time leaving C=32 unclear in the pooled comparison:
        # once the emulator held 20 of its 32 requests (a stall, now flagged and measured again:
        # keepup.held_reasons), once its rate swung with a correlation time of 0.27 s (the closed
        # loop's fixed-length requests falling into step) and the window held 7 of them where the
        # client's own warning asks for 12: an honest interval of [0.03x, 1.9x] its figure.
        # Adaptive windows (+-8%, 12 s at most): EAGLE-3 at C=128 swings the same way, its 32-token
        # requests finishing in step with batches of 1.7-1.9 s, and in 4 s each launch read within
        # 0.4% of the others (1122, 1118, 1121: a launch replays the same requests) but with its own
        # interval +-31% to +-61% (1.5-1.9 degrees of freedom): pooled, C=128 read unclear beside a
        # suite here, twice. The levels that settle close early; that one runs longer.
        return compare_on_one_node(tmp, "moe", MOE, 0.5, {"run_id": "moe", "compare_launches": MOE_LAUNCHES},
                                   bench_concurrency=MOE_LEVELS, bench_input_len=MOE_LEN, bench_output_len=MOE_LEN,
                                   bench_warmup_s=1, bench_window_s=4, bench_target_rel_ci=0.08,
                                   bench_window_max_s=12)

    # The refine run beside it: it waits on its slowed emulator (time scale 4, 0.3 of a core in a full
    # run here) most of its 220-280 s, and this file ran 490-540 s with the two in turn.
    start_shared_run(tmp_path_factory, "regions-refine", build_refine)
    run, tmp = shared_run(tmp_path_factory, "regions-moe", build)
    return run, tmp / "results" / "moe"


@pytest.fixture(scope="module")
def adaptive_run(moe_run, tmp_path_factory):
    moe, moe_dir = moe_run
    assert moe.rc == 0, moe.stdout[-4000:]
    found = summary(moe_dir, "moe")
    assert found["crossover_status"] == "multiple", (
        f"the tracking check needs the MoE run's table from clear regions, and it read: {found['crossover_text']}")
    # What a user passes with -e @adaptive-vars.json (the report says so): the table, launchable as it is.
    recommended = json.loads((moe_dir / "moe" / "adaptive-vars.json").read_text())["sglang_server_adaptive_config"]
    assert recommended == found["adaptive_config"]

    def build(tmp: Path):
        nodes = {"right": tmp / "node-right", "wrong": tmp / "node-wrong"}
        common = dict(bench_concurrency=MOE_LEVELS, bench_input_len=MOE_LEN, bench_output_len=MOE_LEN,
                      bench_warmup_s=1, bench_window_s=3)
        hosts = {
            "right": node_vars(nodes["right"], free_port(), MOE, 0.5, sglang_server_adaptive_config=recommended,
                               **common),
            "wrong": node_vars(nodes["wrong"], free_port(), MOE, 0.5,
                               sglang_server_adaptive_config=cmp.sglang_adaptive_config(cmp.SGLANG_DEFAULT_ADAPTIVE),
                               **common),
        }
        try:
            return run_playbook(tmp, "bench.yml", inventory(hosts),
                                extravars={"results_dir": str(tmp / "results"), "run_id": "adaptive",
                                           "mode": "eagle3-adaptive"}, timeout=RUN_TIMEOUT_S)
        finally:
            for node in nodes.values():
                kill_node_servers(node)

    run, tmp = shared_run(tmp_path_factory, "regions-adaptive", build)
    return run, tmp / "results" / "adaptive", moe_dir, recommended


def build_refine(tmp: Path):
    return compare_on_one_node(tmp, "llama", LLAMA, 4.0, {"run_id": "refine", "compare_refine": True,
                                                          "compare_refine_max_levels": REFINE_MAX_LEVELS},
                               sglang_server_tp_size=1, bench_concurrency=LLAMA_LEVELS, bench_input_len=LLAMA_LEN,
                               bench_output_len=LLAMA_LEN, bench_warmup_s=1, bench_window_s=4)


@pytest.fixture(scope="module")
def refine_run(tmp_path_factory):
    run, tmp = shared_run(tmp_path_factory, "regions-refine", build_refine)  # started beside the MoE run
    return run, tmp / "results" / "refine"


def test_the_moe_profile_reports_multiple_with_both_regions_where_the_model_puts_them(moe_run):
    run, run_dir = moe_run
    assert run.rc == 0, run.stdout[-4000:]
    # The machine first: a level it could not serve at the model's speed is about the machine.
    assert not not_kept_up(run_dir / "moe"), "the machine did not keep up:\n" + "\n".join(not_kept_up(run_dir / "moe"))
    found = summary(run_dir, "moe")
    assert found["crossover_status"] == "multiple", found["crossover_text"]
    assert [r["verdict"] for r in found["regions"]] == ["loses", "pays", "loses"], found["regions"]
    for reg in found["regions"]:
        for conc in (reg["from_concurrency"], reg["to_concurrency"]):
            assert (moe_speedup(conc) >= 1) == (reg["verdict"] == "pays"), (conc, moe_speedup(conc))
    truth = moe_truth_crossings()
    assert len(truth) == 2
    for cross, true_c in zip(found["crossings"], truth, strict=True):
        lo, hi = cross["bracket"]
        assert lo <= true_c <= hi, (cross, truth)
    report = (run_dir / "moe" / "report.md").read_text()
    # The regions are said once, in the crossover's line (render: no separate Regions line repeating them).
    assert "regions: loses at C=4; pays at C=32; loses at C=128" in report and report.count("regions: ") == 1
    assert "again" in found["recommendation"] or found["speculate_ranges"][0][0] > 1


def test_compare_launches_interleaves_fresh_servers_and_pools_their_levels_into_the_summary(moe_run):
    run, run_dir = moe_run
    assert run.rc == 0, run.stdout[-4000:]
    host_dir = run_dir / "moe"
    launches = []
    for n in range(1, MOE_LAUNCHES + 1):
        for mode in ("baseline", "eagle3"):
            result = json.loads((host_dir / f"{mode}@launch{n}.json").read_text())
            info = result["server"]["server_info"]
            launches.append((info["startup_time"], info["emulator"]["pid"], mode, n))
            assert [lv["concurrency"] for lv in result["levels"]] == MOE_LEVELS
    assert not (host_dir / "baseline.json").exists() and not (host_dir / "eagle3.json").exists()
    # A fresh server each time (distinct pids and start times), started in the order A B B A A B: every
    # even launch runs the modes in reverse, so that a drift over the run falls equally on both.
    assert len({pid for unused, pid, unused_m, unused_n in launches}) == len(launches), launches
    assert len({t for t, unused, unused_m, unused_n in launches}) == len(launches), launches
    assert [(m, n) for unused, unused_p, m, n in sorted(launches)] == \
        [(m, n) for n in range(1, MOE_LAUNCHES + 1)
         for m in (("baseline", "eagle3") if n % 2 else ("eagle3", "baseline"))], launches
    # The pooled levels reach summary.json: every level of both modes from both launches.
    found = summary(run_dir, "moe")
    assert [lv["concurrency"] for lv in found["levels"]] == MOE_LEVELS
    assert all(lv["launches"] == MOE_LAUNCHES for lv in found["levels"]), found["levels"]
    # Each mode's outcome names the file its last launch was filed as, and that file exists.
    outcomes = json.loads((host_dir / "compare-run.json").read_text())["outcomes"]
    for mode in ("baseline", "eagle3"):
        assert Path(outcomes[mode]["results_file"]).name == f"{mode}@launch{MOE_LAUNCHES}.json", outcomes[mode]
        assert Path(outcomes[mode]["results_file"]).is_file()


def test_the_adaptive_mode_with_the_recommended_table_tracks_the_better_mode_and_a_wrong_table_fails(adaptive_run):
    run, run_dir, moe_dir, recommended = adaptive_run
    assert run.rc == 0, run.stdout[-4000:]
    fixed = results_of(moe_dir, "moe")
    verdicts = {}
    for host in ("right", "wrong"):
        results = dict(fixed, **results_of(run_dir, host))
        assert "eagle3-adaptive" in results
        verdicts[host] = cmp.tracking(results, "baseline", "eagle3", "eagle3-adaptive")
    assert verdicts["right"]["tracks"], (recommended, verdicts["right"])
    assert not verdicts["wrong"]["tracks"], verdicts["wrong"]
    # The wrong table speculates where speculation loses (C=4): the adaptive mode falls behind there.
    worst = min(verdicts["wrong"]["levels"], key=lambda r: r["ratio_to_better"])
    assert worst["concurrency"] in (4, 128) and worst["better_mode"] == "baseline"


def test_refinement_pins_the_crossover_near_the_model_within_the_ratio_and_the_level_budget(refine_run):
    run, run_dir = refine_run
    assert run.rc == 0, run.stdout[-4000:]
    found = summary(run_dir, "llama")
    truth = truth_crossover(LLAMA, LLAMA_LEN, LLAMA_LEN)
    # A level the machine did not keep up with (saturated) is measured again by the sweep and then by
    # refinement; one still saturated after both fails here, named with its reasons.
    assert found["crossover_status"] == "crosses", (found["crossover_text"], [
        (lv["concurrency"], lv["verdict"], lv.get("saturated")) for lv in found["levels"]])
    # The interval is the bracket of clear levels: it holds the model's crossing, and refinement
    # narrowed it to the ratio, or as far as clear verdicts allow: every level left inside it is
    # unclear (near the crossing the speedup is within a level's noise of 1; on a loaded machine
    # this run read [40, 57] with 48 and 52 unclear, and beside a vLLM sweep [28, 68] with 40 and 57
    # unclear, C=57's interval 0.32-3.35). How far it narrows is the noise's to say, not the test's:
    # it is narrower than the 20 to 80 it started from, and the estimate lies inside it.
    lo, hi = found["crossover_ci95"]
    assert lo <= truth <= hi, (truth, found["crossover_ci95"])
    inside = [lv["verdict"] for lv in found["levels"] if lo < lv["concurrency"] < hi]
    refined = [lv["concurrency"] for lv in found["levels"] if lv["refined"]]
    # Narrowed to the ratio, or as far as clear verdicts allow, or until the level budget was spent.
    assert hi / lo <= 1.3 or (inside and set(inside) == {"unclear"}) or len(refined) == REFINE_MAX_LEVELS, \
        found["levels"]
    # The bracket is the nearest clear levels: a refined level read clear narrows it below the 20 to 80 it started
    # from. Both refined levels unclear (beside a full CI run: C=40 1.16 [1.03, 1.31] and 57 0.94 [0.85, 1.05] at
    # 95%, neither clear family-wise) leave it there, the budget spent and the report saying so.
    if any(lv["refined"] and lv["verdict"] in ("pays", "loses") for lv in found["levels"]):
        assert hi / lo < 80 / 20, found["crossover_ci95"]
    else:
        assert len(refined) == REFINE_MAX_LEVELS and (lo, hi) == (20, 80), found["levels"]
        assert f"unclear (the data cannot tell) at C={min(refined)}" in found["crossover_text"], found["crossover_text"]
    assert lo <= found["crossover_concurrency"] <= hi, (found["crossover_concurrency"], found["crossover_ci95"])
    assert 1 <= len(refined) <= REFINE_MAX_LEVELS, found["levels"]
    host_dir = run_dir / "llama"
    for mode in ("baseline", "eagle3"):
        tagged = sorted(p.name for p in host_dir.glob(f"{mode}@refine*.json"))
        assert 1 <= len(tagged) <= REFINE_MAX_LEVELS, tagged
        added = {lv["concurrency"] for p in host_dir.glob(f"{mode}@refine*.json")
                 for lv in json.loads(p.read_text())["levels"]} - set(LLAMA_LEVELS)
        assert len(added) <= REFINE_MAX_LEVELS and added == set(refined)
    assert "(refined)" in (host_dir / "report.md").read_text()
    # The plan and its cost were printed before each round.
    assert "Round 1" in run.stdout and "launches, about" in run.stdout


def test_the_refine_plan_names_geometric_midpoints_and_stops_at_the_ratio():
    cross = cmp.crossover([{"concurrency": 20, "speedup": 1.3, "speedup_ci95": [1.15, 1.45]},
                           {"concurrency": 100, "speedup": 0.8, "speedup_ci95": [0.7, 0.9]}])
    assert cross["ci95"][1] / cross["ci95"][0] > 1.3
    comp = dict(cross, levels=[{"concurrency": 20, "speedup": 1.3, "verdict": "pays"},
                               {"concurrency": 100, "speedup": 0.8, "verdict": "loses"}],
                crossover_status=cross["status"])
    plan = cmp.refine_plan(comp, ratio=1.3, budget_s=100, level_cost_s=4, launch_cost_s=10)
    assert plan["levels"] == [round(math.sqrt(20 * 100))] and not plan["done"]
    assert plan["cost_s"] == 2 * (10 + 4) and "2 launches" in plan["text"]
    assert cmp.refine_plan(comp, ratio=10.0)["done"]
    assert cmp.refine_plan(comp, budget_s=20, level_cost_s=4, launch_cost_s=10)["done"]  # 28 s > 20 s
    # An unclear level is measured again even without a crossing (it joined its neighbours' verdict).
    unclear = {"crossings": [], "regions": [], "crossover_status": "pays_everywhere",
               "levels": [{"concurrency": 20, "speedup": 1.5, "verdict": "pays"},
                          {"concurrency": 80, "speedup": 0.9, "verdict": "unclear"}]}
    again = cmp.refine_plan(unclear)
    assert again["repeat"] == [80] and not again["done"]
    # So is a saturated one (no evidence: the machine did not keep up), until its launches run out.
    saturated = dict(unclear, levels=[unclear["levels"][0], {"concurrency": 80, "speedup": 0.9, "verdict": "saturated"}])
    again = cmp.refine_plan(saturated)
    assert again["repeat"] == [80] and not again["done"] and "C=80: saturated" in " ".join(again["why"])
    spent = dict(saturated, levels=[saturated["levels"][0], dict(saturated["levels"][1], launches=5)])
    assert cmp.refine_plan(spent)["done"]
