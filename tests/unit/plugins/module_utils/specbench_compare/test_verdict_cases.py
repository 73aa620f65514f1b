"""Issue 17's wrong answers, each with the exact inputs the issue gives (pure computation, < 1 s).

Unclear tails are not "pays" (item 1), failed levels make the comparison incomplete (item 2), the
crossover's interval is the model-free bracket (item 3), no status speaks for levels not measured
(item 4), one crossing is never "multiple" and the index shows the regions (item 8), and a saturated
level is no evidence (item 10).
"""

from __future__ import annotations

import pytest
from compare_synth import analytic_results, level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import index as idx
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep

LEVELS = [1, 2, 5, 10, 30, 70, 100, 250]


def rows(speedups, concs=None, rel=0.02):
    """Speedup rows with each mode's throughput +-``rel`` (the speedup's interval by ratio_ci), or a
    (speedup, interval) pair."""
    out = []
    for c, given in zip(concs or LEVELS, speedups, strict=True):
        if isinstance(given, tuple):
            s, ci = given
        else:
            s, ci = cmp.ratio_ci(100.0 * given, [100.0 * given * (1 - rel), 100.0 * given * (1 + rel)], 100.0,
                                 [100.0 * (1 - rel), 100.0 * (1 + rel)])
        out.append({"concurrency": c, "speedup": s, "speedup_ci95": ci})
    return out


def table_row(table: dict, bs: int) -> list[int]:
    return table[str(max(int(k) for k in table if int(k) <= bs))]


# ---------------------------------------------------------------------------------------------
# Item 1: an unclear tail is not "pays"
# ---------------------------------------------------------------------------------------------
def test_a_flat_tail_is_its_own_unclear_region_not_pays_everywhere():
    cross = cmp.crossover(rows([1.5, 1.3, 1.1, 1.01, 0.99, 1.0, 1.01, 0.98]))
    assert cross["status"] == "pays_then_unclear"
    assert [(r["from_concurrency"], r["to_concurrency"], r["verdict"]) for r in cross["regions"]] == [
        (1, 5, "pays"), (10, 250, "unclear")]
    rec = cmp.recommendation(cross, "eagle3", LEVELS)
    assert "pays clearly at C=1 to 5" in rec["text"] and "At C=10 to 250 the data cannot tell" in rec["text"]
    assert "every concurrency" not in rec["text"]
    # The table is built from clear verdicts only: off from just above C=5, and the top row is off.
    assert rec["speculate_ranges"] == [[1, 6]]
    table = rec["adaptive_table"]
    assert any(s > 0 for s in table_row(table, 5)) and table_row(table, 6) == [0] and table_row(table, 4096) == [0]


@pytest.mark.parametrize("speedups, status", [
    # A last level at 0.97 [0.876, 1.075] after clearly paying levels.
    ([1.5, 1.3, 1.2, 1.1, (0.97, [0.876, 1.075])], "pays_then_unclear"),
    # A noisy first level 0.8 [0.55, 1.15] before clearly paying ones.
    ([(0.8, [0.55, 1.15]), 1.3, 1.25, 1.2, 1.1], "unclear_then_pays"),
])
def test_one_unclear_level_at_either_end_is_never_read_as_paying(speedups, status):
    cross = cmp.crossover(rows(speedups, LEVELS[:5]))
    assert cross["status"] == status
    rec = cmp.recommendation(cross, "eagle3", LEVELS[:5])
    unclear_at = 1 if status.startswith("unclear") else 30
    assert table_row(rec["adaptive_table"], unclear_at) == [0]
    assert f"At C={unclear_at:g} the data cannot tell" in rec["text"]


def test_pooled_launches_unclear_at_the_top_do_not_make_pays_everywhere():
    """Two launches per mode; at C=70/100/250 the pooled speedups 0.905/0.821/0.746 are all unclear."""
    base = [result("baseline", [level(c, 100.0 * c, 0.01) for c in LEVELS]) for _dummy in range(2)]
    ratio = {70: 0.905, 100: 0.821, 250: 0.746}
    spec = []
    for shift in (1.25, 0.75):  # the two launches disagree: the pooled interval has one degree of freedom
        spec.append(result("eagle3", [level(c, 100.0 * c * (ratio[c] * shift if c in ratio else 1.3), 0.01)
                                      for c in LEVELS]))
    pooled = {"baseline": cmp.pool_runs([("launch1", base[0]), ("launch2", base[1])]),
              "eagle3": cmp.pool_runs([("launch1", spec[0]), ("launch2", spec[1])])}
    summary = cmp.summarize_host(pooled, "node", "run")
    by_conc = {lv["concurrency"]: lv for lv in summary["levels"]}
    assert [round(by_conc[c]["speedup"], 3) for c in (70, 100, 250)] == [0.905, 0.821, 0.746]
    assert all(by_conc[c]["verdict"] == "unclear" for c in (70, 100, 250))
    assert summary["crossover_status"] == "pays_then_unclear"
    assert summary["speculate_ranges"] == [[1, 31]]


# ---------------------------------------------------------------------------------------------
# Item 2: a failed level makes the comparison incomplete
# ---------------------------------------------------------------------------------------------
def failed_run(spec_level: dict):
    base = result("baseline", [level(c, 100.0 * c) for c in (1, 2, 5, 10)])
    spec = result("eagle3", [level(c, 130.0 * c) for c in (1, 2)] + [spec_level, level(10, 1300.0)])
    return cmp.summarize_host({"baseline": base, "eagle3": spec}, "node", "run")


@pytest.mark.parametrize("spec_level", [
    dict(level(5, 1.0), output_tok_per_s=0.0, output_tok_per_s_ci95=None,
         error="C=5: no output token arrived during the level"),
    level(5, None, error="C=5: every request failed (10): HTTP 500"),
])
def test_a_failed_level_makes_the_comparison_incomplete_and_splits_the_regions(spec_level):
    summary = failed_run(spec_level)
    assert summary["status"] == "incomplete" and not summary["complete"]
    assert any(r.startswith("eagle3: C=5 failed") for r in summary["incomplete_reasons"]), summary["incomplete_reasons"]
    assert summary["crossover_status"] != "pays_everywhere"
    assert summary["crossover_status"] == "pays_where_clear"
    assert [r["verdict"] for r in summary["regions"]] == ["pays", "failed", "pays"]
    assert summary["failed_levels"] == [5]
    (row,) = [lv for lv in summary["levels"] if lv["concurrency"] == 5]
    assert row["verdict"] == "failed" and "eagle3:" in row["failed"]
    assert "C=5 failed" in summary["recommendation"]
    assert table_row(summary["adaptive_table"], 5) == [0]  # no verdict across it
    report = rep.render_markdown(summary)
    assert report.index("INCOMPLETE") < report.index("## Verdict")
    plan = cmp.refine_plan(summary)
    assert 5 in plan["repeat"] and not plan["done"]


# ---------------------------------------------------------------------------------------------
# Item 3: the crossover interval is the model-free bracket
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("profile, levels, direction, truth", [
    ("kimi-k2.5-moe", LEVELS, "starts_paying", 17.43),
    ("llama-3.1-8b-1x-h100", LEVELS, "stops_paying", 51.47),
    ("kimi-k2.5-8x-rtx-pro-6000", [1, 4, 16, 64, 256], "stops_paying", 1.29),
])
def test_the_interval_holds_the_emulators_true_crossing_on_its_noise_free_profiles(profile, levels, direction, truth):
    base, spec, unused = analytic_results(profile, levels)
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node", "run")
    (cross,) = [c for c in summary["crossings"] if c["direction"] == direction][:1]
    lo, hi = cross["ci95"]
    assert lo <= truth <= hi, (cross, truth)
    assert cross["ci95"] == cross["bracket"] and lo <= cross["concurrency"] <= hi
    assert cross["estimate"] == "interpolated"


def test_a_crossing_between_30_and_70_at_one_percent_gets_the_whole_bracket_and_the_add_levels_hint():
    cross = cmp.crossover(rows([1.5, 1.4, 1.3, 1.2, 1.1, 0.85], LEVELS[:6], rel=0.01))
    assert cross["status"] == "crosses" and cross["ci95"] == [30, 70]
    rec = cmp.recommendation(cross, "eagle3", LEVELS[:6])
    # The bracket and the interpolated point are the crossover's text; the recommendation does not repeat them.
    assert "between C=30 (speedup 1.100, pays clearly) and C=70" in cross["text"] and "interpolated estimate" in cross["text"]
    assert "interpolat" not in rec["text"]
    assert "Only the levels C=30 and C=70 bracket where it stops paying: add levels in between" in rec["text"]


def test_an_unclear_level_inside_the_bracket_is_named_not_hidden_behind_add_levels():
    # llama at C = 16, 32, 64 in a suite run: C=32 measured, its interval [1.02, 1.95] (unclear, family-wise).
    cross = cmp.crossover(rows([(1.62, [1.42, 1.86]), (1.41, [0.98, 1.95]), (0.86, [0.83, 0.89])], [16, 32, 64]))
    assert cross["status"] == "crosses" and cross["bracket"] == [16, 64]
    rec = cmp.recommendation(cross, "eagle3", [16, 32, 64])
    assert "Between C=16 and C=64, where it stops paying, at C=32 the data cannot tell" in rec["text"], rec["text"]
    assert "Only the levels" not in rec["text"]  # C=32 was measured: "add levels in between" would hide it
    assert rec["speculate_ranges"] == [[16, 17]]  # speculation stops just above the last clear level


def test_refinement_stops_on_the_brackets_width_not_an_interpolated_one():
    wide = cmp.refine_plan(cmp.compare_pair(*_pair([1.5, 1.3, 0.8], [10, 30, 70]), "baseline", "eagle3"))
    assert not wide["done"] and wide["new"] == [46]
    narrow = cmp.refine_plan(cmp.compare_pair(*_pair([1.5, 1.3, 0.8], [10, 40, 46]), "baseline", "eagle3"))
    assert narrow["done"] and "within hi/lo 1.3" in narrow["reason"]


def _pair(speedups, concs):
    base = result("baseline", [level(c, 100.0 * c, 0.01) for c in concs])
    spec = result("eagle3", [level(c, 100.0 * c * s, 0.01) for c, s in zip(concs, speedups, strict=True)])
    return base, spec


# ---------------------------------------------------------------------------------------------
# Item 4: no status speaks for levels that were not measured
# ---------------------------------------------------------------------------------------------
def test_never_pays_on_low_levels_says_nothing_was_measured_above():
    base, spec, unused = analytic_results("kimi-k2.5-moe", [1, 2, 5, 10])
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node", "run")
    assert summary["crossover_status"] == "never_pays"
    assert "Serve the baseline mode" not in summary["recommendation"]
    assert "Nothing was measured above C=10" in summary["recommendation"]


@pytest.mark.parametrize("speedups", [
    [1.5, 1.3, 1.2, 1.1, 1.05], [0.8, 0.7, 0.6, 0.5, 0.4], [1.5, 1.3, 0.8, 0.7, 0.6], [0.8, 0.9, 1.2, 1.3, 1.4],
    [1.3, 0.8, 1.3, 0.8, 1.3], [1.3, 1.2, 1.1, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0],
])
def test_every_status_names_both_unmeasured_ends(speedups):
    concs = [4, 8, 16, 32, 64]
    rec = cmp.recommendation(cmp.crossover(rows(speedups, concs)), "eagle3", concs)
    assert "Nothing was measured above C=64 or below C=4" in rec["text"]


# ---------------------------------------------------------------------------------------------
# Item 8: one crossing is not "multiple"; the index shows the regions
# ---------------------------------------------------------------------------------------------
def test_one_crossing_upwards_is_loses_then_pays_and_the_index_shows_the_regions():
    cross = cmp.crossover(rows([0.8, 0.85, 0.9, 1.2, 1.3], [1, 2, 5, 30, 70]))
    assert cross["status"] == "loses_then_pays" and len(cross["crossings"]) == 1
    rec = cmp.recommendation(cross, "eagle3", [1, 2, 5, 30, 70])
    assert "more than once" not in rec["text"] and "1 crossings" not in rec["text"]
    assert rec["speculate_ranges"] == [[30, 71]] and rec["adaptive_table"]["1"] == [0]
    base, spec, unused = analytic_results("kimi-k2.5-moe", LEVELS)
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node", "run")
    assert summary["crossover_status"] == "multiple"
    index_md = idx.render_index_md(idx.build_index("run", {"node": summary}))
    assert "loses C=1-10, pays C=30-70, loses C=100-250" in index_md


# ---------------------------------------------------------------------------------------------
# Item 10: a saturated level is no evidence
# ---------------------------------------------------------------------------------------------
def test_saturated_levels_are_left_out_of_the_verdict_and_named_everywhere():
    """Llama-3.1-8B/H100 at 4, 16, 64, 256: the baseline at 64 and 256 delivered 55% and 17% of its rate."""
    base, spec, unused = analytic_results("llama-3.1-8b-1x-h100", [4, 16, 64, 256])
    for lv, share in zip(base["levels"][2:], (0.55, 0.17), strict=True):
        lv["output_tok_per_s"] *= share
        lv["output_tok_per_s_ci95"] = [x * share for x in lv["output_tok_per_s_ci95"]]
        lv["client"]["bottleneck"] = True
        lv["client"]["cpu_percent"] = 91.0
    base["levels"][3]["saturated"] = ["engine: delivered 17% of its own model's rate"]
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node", "run")
    assert summary["crossover_status"] == "pays_everywhere"
    assert [r["to_concurrency"] for r in summary["regions"]] == [16]
    assert [s["concurrency"] for s in summary["saturated_levels"]] == [64, 256]
    assert "engine: delivered 17%" in " ".join(summary["saturated_levels"][1]["reasons"])
    assert "up to C=16" in summary["recommendation"] and "C=64, 256" in summary["recommendation"]
    assert "saturated" in summary["recommendation"]
    assert [lv["verdict"] for lv in summary["levels"]][2:] == ["saturated", "saturated"]
    assert cmp.compact(summary)["saturated_levels"] == summary["saturated_levels"]
    report = rep.render_markdown(summary)
    assert "no evidence" in report and "C=64" in report
    index_md = idx.render_index_md(idx.build_index("run", {"node": summary}))
    assert "saturated: C=64, 256" in index_md


def test_a_refinement_round_that_measures_a_failed_level_again_heals_it():
    failed = dict(level(5, 1.0), output_tok_per_s=0.0, output_tok_per_s_ci95=None,
                  error="C=5: no output token arrived during the level")
    base = result("baseline", [level(c, 100.0 * c) for c in (1, 2, 5, 10)])
    first = result("eagle3", [level(c, 130.0 * c) for c in (1, 2)] + [failed, level(10, 1300.0)])
    first["error"], first["status"] = failed["error"], "complete_with_errors"
    again = result("eagle3", [level(5, 650.0)])
    pooled = cmp.pool_runs([(None, first), ("refine1", again)])
    assert pooled["error"] is None
    summary = cmp.summarize_host({"baseline": base, "eagle3": pooled}, "node", "run")
    assert summary["status"] == "complete", summary["incomplete_reasons"]
    assert summary["crossover_status"] == "pays_everywhere" and summary["failed_levels"] == []
