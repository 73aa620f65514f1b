"""The comparison maths on synthetic results: intervals, the crossover, the advice, confounders."""

from __future__ import annotations

import json
import math
import random

import pytest
from compare_synth import analytic_results, level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep
from sglang_emulator.cli import parse_adaptive_table


# ---------------------------------------------------------------------------------------------
# The ratio interval
# ---------------------------------------------------------------------------------------------
def test_ratio_interval_adds_log_half_widths_in_quadrature():
    ratio, ci = cmp.ratio_ci(110.0, [100.0, 121.0], 100.0, [100 / 1.1, 110.0])
    assert ratio == pytest.approx(1.1)
    width = math.sqrt(2) * math.log(1.1)
    assert ci == pytest.approx([1.1 * math.exp(-width), 1.1 * math.exp(width)])
    # Asymmetric on the linear scale, symmetric on the log scale.
    assert math.log(ci[1] / ratio) == pytest.approx(math.log(ratio / ci[0]))


def test_ratio_interval_is_missing_without_both_intervals_and_undefined_without_a_baseline():
    assert cmp.ratio_ci(110.0, None, 100.0, [90.0, 110.0]) == (pytest.approx(1.1), None)
    assert cmp.ratio_ci(110.0, [100.0, 120.0], 0.0, [0.0, 1.0]) == (None, None)
    assert cmp.ratio_ci(None, None, 100.0, None) == (None, None)
    assert cmp.ratio_ci(110.0, [120.0, 100.0], 100.0, [90.0, 110.0])[1] is None  # lo > hi is no interval
    assert cmp.ratio_ci(True, [1, 2], 1.0, [0.5, 1.5]) == (None, None)


def test_ratio_interval_with_a_lower_end_at_zero_uses_the_relative_width():
    ratio, ci = cmp.ratio_ci(10.0, [0.0, 20.0], 10.0, [9.0, 11.0])
    assert ratio == 1.0
    assert ci[0] < 0.5 and ci[1] > 2.0


def test_ratio_interval_covers_the_true_ratio_about_95_percent_of_the_time():
    """Seeded Monte Carlo: two independent normal estimates with 95% z-intervals."""
    rng = random.Random(7)
    true_num, true_den, rel_se = 120.0, 100.0, 0.03
    trials, hits = 4000, 0
    for _unused1 in range(trials):
        num = rng.gauss(true_num, true_num * rel_se)
        den = rng.gauss(true_den, true_den * rel_se)
        half_n, half_d = 1.96 * true_num * rel_se, 1.96 * true_den * rel_se
        _unused1, ci = cmp.ratio_ci(num, [num - half_n, num + half_n], den, [den - half_d, den + half_d])
        hits += ci[0] <= true_num / true_den <= ci[1]
    assert 0.93 <= hits / trials <= 0.97


def test_per_stream_speed_and_tpot_borrow_the_throughput_width_when_the_client_gives_none():
    lv = level(4, 400.0, rel_half=0.05)
    figs = cmp.level_figures(lv)
    assert figs["per_stream"] == pytest.approx(100.0)
    assert figs["per_stream_ci95"][0] == pytest.approx(100.0 * 0.95 / math.sqrt(0.95 * 1.05), rel=1e-6)
    assert set(figs["borrowed"]) == {"per_stream", "tpot"}
    lv["tpot_ms"]["ci95"] = [9.0, 11.0]
    lv["decode_tok_per_s_per_stream"]["ci95"] = [95.0, 105.0]
    figs = cmp.level_figures(lv)
    assert figs["tpot_ms_ci95"] == [9.0, 11.0] and figs["per_stream_ci95"] == [95.0, 105.0]
    assert figs["borrowed"] == []


def test_per_stream_speed_comes_from_tpot_when_the_level_has_no_per_stream_field():
    lv = level(8, 800.0, per_stream=False)
    figs = cmp.level_figures(lv)
    assert figs["per_stream_source"] == "1000 / tpot_ms.mean"
    assert figs["per_stream"] == pytest.approx(100.0)


# ---------------------------------------------------------------------------------------------
# The crossover
# ---------------------------------------------------------------------------------------------
def rows(points):
    return [{"concurrency": c, "speedup": s, "speedup_ci95": ci} for c, s, ci in points]


def tight(value, rel=0.04):
    return (value, [value * (1 - rel), value * (1 + rel)])


def series(points):
    """(concurrency, speedup) or (concurrency, speedup, ci) -> crossover rows (+-4% by default)."""
    out = []
    for p in points:
        c, s = p[0], p[1]
        ci = p[2] if len(p) > 2 else tight(s)[1]
        out.append((c, s, ci))
    return rows(out)


def test_the_noisy_first_level_stays_unclear_and_the_crossover_lies_between_10_and_30():
    cross = cmp.crossover(series([(1, 0.98, [0.90, 1.07]), (2, 1.3), (5, 1.4), (10, 1.2), (30, 0.9), (70, 0.7)]))
    assert cross["status"] == "crosses"
    assert 10 < cross["concurrency"] < 30
    assert cross["bracket"] == [10.0, 30.0]
    assert [(r["from_concurrency"], r["to_concurrency"], r["verdict"]) for r in cross["regions"]] == [
        (1, 1, "unclear"), (2, 10, "pays"), (30, 70, "loses")]
    assert cross["ci95"] == [10.0, 30.0]  # the model-free bracket
    assert cross["gaps"] == [{"from_concurrency": 1.0, "to_concurrency": 1.0, "verdict": "unclear"}]
    rec = cmp.recommendation(cross, "eagle3", [1, 2, 5, 10, 30, 70])
    # The one rule: from C=2 (the first level that clearly pays) to C=10 (the last), never to the
    # interpolated crossing inside the bracket [10, 30].
    assert rec["speculate_ranges"] == [[2, 11]]
    assert rec["adaptive_table"]["1"] == [0] and rec["adaptive_table"]["11"] == [0]
    assert rec["text"].startswith("Speculate (eagle3) from C=2 to C=10")


def test_a_double_crossing_is_multiple_with_a_paying_region_again_at_high_concurrency():
    cross = cmp.crossover(series([(1, 1.3), (2, 1.2), (5, 0.8), (10, 0.85), (30, 1.2), (70, 1.15)]))
    assert cross["status"] == "multiple"
    assert [r["verdict"] for r in cross["regions"]] == ["pays", "loses", "pays"]
    assert cross["regions"][-1]["to_concurrency"] == 70
    stops, starts = cross["crossings"]
    assert stops["ci95"] == [2, 5] and starts["ci95"] == [10, 30]
    assert stops["direction"] == "stops_paying" and 2 < stops["concurrency"] < 5
    assert starts["direction"] == "starts_paying" and 10 < starts["concurrency"] < 30
    # crossover_concurrency: where the lowest-concurrency paying region ends.
    assert cross["concurrency"] == stops["concurrency"]
    rec = cmp.recommendation(cross, "eagle3", [1, 2, 5, 10, 30, 70])
    # From each clearly paying level to the last one: off from C=3 (not the interpolated point), on again
    # from C=30 (not from the interpolated point), off above C=70 (the top level measured).
    assert rec["speculate_ranges"] == [[1, 3], [30, 71]]
    assert "from C=1 to C=2 and again from C=30 to C=70" in rec["text"]
    table = {int(k): v for k, v in rec["adaptive_table"].items()}
    assert table[3] == [0] and any(s > 0 for s in table[30]) and any(s > 0 for s in table[1]) and table[71] == [0]
    # Off at and above lo_edge up to hi_edge, on again from hi_edge: the batch size picks the row.

    def row(bs):
        return table[max(k for k in table if k <= bs)]
    assert row(4) == [0] and row(29) == [0] and any(s > 0 for s in row(70)) and row(200) == [0]


def test_losing_at_small_batches_and_paying_at_moderate_ones_is_multiple_too():
    cross = cmp.crossover(series([(1, 0.7), (2, 0.8), (5, 1.2), (10, 1.3), (30, 1.1), (70, 0.8)]))
    assert cross["status"] == "multiple"
    assert [r["verdict"] for r in cross["regions"]] == ["loses", "pays", "loses"]
    assert 30 < cross["concurrency"] < 70  # the paying region (the lowest one) ends there
    rec = cmp.recommendation(cross, "eagle3", [1, 70])
    assert rec["adaptive_table"]["1"] == [0] and rec["speculate_ranges"][0][0] in (3, 4, 5)


def test_pays_everywhere_and_never_pays_are_said_as_such_without_a_number():
    everywhere = cmp.crossover(rows([(1, 2.0, [1.9, 2.1]), (10, 1.5, [1.4, 1.6]), (100, 1.1, [1.05, 1.15])]))
    assert everywhere["status"] == "pays_everywhere" and everywhere["concurrency"] is None
    assert everywhere["ci95"] is None and "every level measured, up to C=100" in everywhere["text"]
    never = cmp.crossover(rows([(1, 0.8, [0.75, 0.85]), (10, 0.6, [0.55, 0.65]), (30, 0.5, [0.45, 0.55])]))
    assert never["status"] == "never_pays" and never["concurrency"] is None
    assert "slower at every level measured, from C=1 to C=30" in never["text"]
    # An unclear last level does not join the losing region: it is a region of its own.
    tail = cmp.crossover(rows([(1, 0.8, [0.75, 0.85]), (10, 0.6, [0.55, 0.65]), (30, 0.98, [0.9, 1.05])]))
    assert tail["status"] == "loses_then_unclear"
    assert [r["verdict"] for r in tail["regions"]] == ["loses", "unclear"]


def test_unclear_everywhere_is_unclear_and_gives_no_advice():
    cross = cmp.crossover(rows([(1, 1.01, [0.9, 1.1]), (10, 0.99, [0.9, 1.1])]))
    assert cross["status"] == "unclear" and cross["concurrency"] is None
    assert cmp.recommendation(cross, "eagle3", [1, 10])["adaptive_table"] is None


def test_a_missing_level_in_the_middle_is_skipped_and_named():
    levels = series([(1, 1.3), (2, 1.2), (10, 0.8), (30, 0.7)])
    levels.insert(2, {"concurrency": 5, "speedup": None, "speedup_ci95": None})
    cross = cmp.crossover(levels)
    assert cross["status"] == "crosses" and cross["bracket"] == [2.0, 10.0]
    assert 2 < cross["concurrency"] < 10
    assert any("C=5 has no speedup" in n for n in cross["notes"])


def test_an_unclear_level_between_paying_and_losing_levels_is_the_transition():
    cross = cmp.crossover(series([(1, 1.3), (2, 1.05, [0.95, 1.15]), (5, 0.98, [0.9, 1.07]), (10, 0.8)]))
    assert cross["status"] == "crosses"
    assert [r["verdict"] for r in cross["regions"]] == ["pays", "unclear", "loses"]
    assert 2 < cross["concurrency"] < 5  # the point estimates cross between C=2 and C=5
    assert cross["ci95"] == [1, 10] and cross["gaps"] == []  # the transition is no gap


def test_a_losing_level_between_paying_ones_is_a_real_flip():
    cross = cmp.crossover(series([(1, 1.2), (2, 0.9), (5, 1.1)]))
    assert cross["status"] == "multiple"
    assert any("no interval" in n for n in cmp.crossover(rows([(1, 1.2, None), (2, 0.9, None)]))["notes"])


def test_a_level_without_an_interval_is_unclear_not_taken_at_its_word():
    """The client gives no interval where a window held a request or two (a draft model on vLLM
    CPU read 0.26x at C=4 that way, and was called 'loses'): the point figure is no evidence."""
    assert cmp.level_verdict(0.26, None) == "unclear" and cmp.level_verdict(1.4, None) == "unclear"
    cross = cmp.crossover(rows([(1, 1.0, None), (2, 0.5, None)]))
    assert cross["status"] != "crosses" and cross["concurrency"] is None


def test_the_crossover_interval_is_the_bracket_and_a_wide_one_asks_for_levels_in_between():
    cross = cmp.crossover(rows([(2, 1.3, [1.25, 1.35]), (70, 0.8, [0.77, 0.83])]))
    assert cross["ci95"] == [2, 70] and cross["ci95_text"] == "2 to 70"
    assert 2 < cross["concurrency"] < 70 and cross["crossings"][0]["estimate"] == "interpolated"
    assert "compare_refine" in cmp.recommendation(cross, "eagle3", [2, 70])["text"]


def test_no_common_level_gives_an_unknown_crossover():
    assert cmp.crossover([{"concurrency": 1, "speedup": None}])["status"] == "unknown"


@pytest.mark.parametrize(
    "profile, levels",
    [
        ("kimi-k2.5-8x-rtx-pro-6000", [1, 2, 5, 10, 30, 70, 100, 250]),
        ("llama-3.1-8b-1x-h100", [1, 2, 5, 10, 30, 70, 100, 250]),
        ("llama-3.1-8b-1x-h100", [8, 16, 32, 64, 128]),
    ],
)
def test_crossover_from_the_emulators_analytic_model_lies_in_its_bracket(profile, levels):
    base, spec, truth = analytic_results(profile, levels)
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node", "run")
    assert summary["crossover_status"] == "crosses"
    lo_level, hi_level = summary["crossover_bracket"]
    assert lo_level <= truth <= hi_level
    assert summary["crossover_ci95"] == [lo_level, hi_level]
    assert lo_level <= summary["crossover_concurrency"] <= hi_level
    # Log-linear interpolation between the bracketing levels is close to the model's crossover.
    assert summary["crossover_concurrency"] == pytest.approx(truth, rel=0.25)


# ---------------------------------------------------------------------------------------------
# Recommendation and the adaptive table
# ---------------------------------------------------------------------------------------------
def test_recommendation_and_adaptive_table_turn_speculation_off_after_the_last_paying_level():
    cross = cmp.crossover(series([(1, 1.3), (2, 0.8), (5, 0.7)]))
    rec = cmp.recommendation(cross, "eagle3", [1, 2, 5])
    assert rec["speculate_below"] == 2
    assert rec["adaptive_table"] == {"1": [1, 3, 5, 7], "2": [0]}
    assert "up to concurrency 1, the last level that clearly pays" in rec["text"]
    # The lowest level measured is 30: nothing below it speaks for speculation, nor does the
    # interpolated crossing between 30 and 70 (an estimate, never the rule's edge).
    rec = cmp.recommendation(cmp.crossover(series([(30, 1.2), (70, 0.8)])), "eagle3", [30, 70])
    assert rec["adaptive_table"] == {"1": [0], "30": [1, 3], "31": [0]}
    assert rec["adaptive_config"]["31"] == {"candidate_steps": [0]}


def test_recommendation_when_speculation_never_pays_or_always_pays():
    never = cmp.recommendation({"status": "never_pays", "concurrency": None}, "eagle3", [1, 2, 5])
    assert never["adaptive_table"] == {"1": [0]} and never["text"].startswith("Do not speculate")
    assert "Nothing was measured above C=5" in never["text"]
    always = cmp.recommendation(cmp.crossover(series([(1, 1.3), (10, 1.3), (250, 1.2)])), "eagle3", [1, 10, 250])
    # Never above the top level measured: SGLang's default rows above C=250 become steps [0].
    assert always["speculate_below"] == 251
    assert always["adaptive_table"] == {"1": [1, 3, 5, 7], "8": [0, 1, 3], "32": [0, 1], "251": [0]}
    assert "Add higher levels" in always["text"] and "become steps [0]" in always["text"]


@pytest.mark.parametrize("off_from", [1, 2, 8, 52, 300])
def test_the_adaptive_config_file_parses_in_the_emulator_as_sglang_reads_it(tmp_path, off_from):
    """The file compare writes (SGLang 0.5.23's format: a path to JSON rows of candidate_steps)."""
    table = cmp.adaptive_table(off_from)
    path = tmp_path / "adaptive-config.json"
    path.write_text(rep.adaptive_config_json(cmp.sglang_adaptive_config(table)))
    rows = dict(parse_adaptive_table(str(path)))
    assert rows == {int(bs): tuple(steps) for bs, steps in table.items()}
    assert rows[off_from] == (0,)
    assert all(any(s > 0 for s in steps) for bs, steps in rows.items() if bs < off_from)


# ---------------------------------------------------------------------------------------------
# Confounders and the host summary
# ---------------------------------------------------------------------------------------------
def seeds_like() -> tuple[dict, dict]:
    """The seeds' mistakes: 0.88 vs automatic memory fraction, the 48 cap, a saturated client."""
    base = result("baseline", [level(1, 92.6), level(10, 600.0), level(70, 690.0)],
                  server={"settings": {"max_running_requests": 512},
                          "server_info": {"mem_fraction_static": 0.78, "max_running_requests": 512}})
    spec = result(
        "eagle3",
        [level(1, 96.1, accept=2.2), level(10, 290.0, accept=2.2, bottleneck=True),
         level(70, 340.0, accept=2.2, running=48, queued=22)],
        server={"settings": {"mem_fraction_static": 0.88}, "max_running_requests": 48,
                "server_info": {"mem_fraction_static": 0.88, "max_running_requests": 48, "speculative_algorithm": "EAGLE3"}},
    )
    return base, spec


def test_confounders_name_capacity_differences_the_48_cap_and_a_saturated_client():
    base, spec = seeds_like()
    conf = cmp.confounders({"baseline": base, "eagle3": spec}, "baseline")
    kinds = [c["kind"] for c in conf]
    assert "capacity_differs" in kinds and "cap_reached" in kinds and "client_saturated" in kinds
    texts = " ".join(c["text"] for c in conf)
    assert "mem_fraction_static differs: baseline 0.78, eagle3 0.88" in texts
    assert "max_running_requests differs: baseline 512, eagle3 48" in texts
    assert "at most 48 requests (SGLang's default for speculative modes" in texts and "C=70" in texts
    assert "client was the bottleneck at C=10" in texts
    # Errors first.
    severities = [c["severity"] for c in conf]
    assert severities == sorted(severities, key=lambda s: s != "error")


def test_confounders_name_dirty_gpus_level_errors_failed_modes_and_bench_settings():
    base = result("baseline", [level(1, 100.0), level(2, None, error="C=2: every request failed (10)")],
                  gpu={"before": {"clean": False, "dirty_gpus": [3]}, "after": {"clean": True}})
    spec = result("eagle3", [level(1, 110.0, accept=2.0)], settings={"output_len": 128})
    conf = cmp.confounders({"baseline": base, "eagle3": spec}, "baseline",
                           {"eagle3": {"status": "failed", "error": "the server exited during startup"}})
    texts = [c["text"] for c in conf]
    assert "baseline: the GPUs were not clean before the launch (GPUs 3 not clean)" in texts
    assert "baseline C=2: C=2: every request failed (10)" in texts
    assert "eagle3: failed: the server exited during startup" in texts
    assert "benchmark setting output_len differs: baseline 256, eagle3 128" in texts


def test_a_level_with_a_wide_interval_is_flagged_as_noisy():
    base = result("baseline", [level(1, 100.0), level(64, 4000.0, rel_half=0.19)])
    spec = result("eagle3", [level(1, 110.0, accept=2.0), level(64, 3600.0, accept=2.0)])
    (noisy,) = [c for c in cmp.confounders({"baseline": base, "eagle3": spec}, "baseline") if c["kind"] == "noisy"]
    assert "baseline: the throughput interval is wide at C=64 (+-19%)" in noisy["text"]


def test_a_level_measured_again_is_named_with_the_first_attempts_reason():
    """The sweep measures a saturated level again (bench_saturated_retries): the figures are the
    last attempt's, and every output says the first did not keep up."""
    base = result("baseline", [level(1, 100.0), level(16, 900.0)])
    base["levels"][1]["remeasured_after"] = [{"started_at": 1.0, "output_tok_per_s": 700.0,
                                              "saturated": ["the emulator delivered 81% of its own model's rate"]}]
    spec = result("eagle3", [level(1, 110.0, accept=2.0), level(16, 950.0, accept=2.0)])
    (again,) = [c for c in cmp.confounders({"baseline": base, "eagle3": spec}, "baseline") if c["kind"] == "remeasured"]
    assert again["severity"] == "warning" and again["mode"] == "baseline"
    assert "C=16 (1 earlier attempt: the emulator delivered 81% of its own model's rate)" in again["text"]
    assert "figures are the last attempt's" in again["text"]


def test_a_clean_fair_run_has_no_confounders():
    base, spec, _unused1 = analytic_results("llama-3.1-8b-1x-h100", [1, 10, 100])
    assert cmp.confounders({"baseline": base, "eagle3": spec}, "baseline") == []


def test_summary_has_the_fields_awx_and_the_report_rely_on():
    base, spec, _unused1 = analytic_results("kimi-k2.5-8x-rtx-pro-6000", [1, 2, 5])
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node", "run")
    for key in ("crossover_concurrency", "crossover_ci95", "recommendation", "levels", "confounders", "complete",
                "speculate_below", "adaptive_config", "series", "comparisons"):
        assert key in summary
    assert summary["complete"] and summary["status"] == "complete"
    first = summary["levels"][0]
    for key in ("concurrency", "speedup", "speedup_ci95", "per_stream_speedup", "per_stream_speedup_ci95",
                "tpot_speedup", "tpot_speedup_ci95", "verdict", "baseline", "eagle3"):
        assert key in first
    assert first["speedup"] == pytest.approx(96.1 / 92.6, rel=0.01)
    assert first["tpot_speedup"] == pytest.approx(first["per_stream_speedup"], rel=1e-3)
    assert json.loads(json.dumps(summary)) == summary  # plain JSON all the way down
    short = cmp.compact(summary)
    assert short["levels"][0].keys() == {"concurrency", "speedup", "speedup_ci95", "verdict"}


def test_a_missing_mode_or_lost_levels_mark_the_summary_incomplete_but_keep_what_was_measured():
    base, spec, _unused1 = analytic_results("llama-3.1-8b-1x-h100", [1, 10, 100])
    spec["levels"] = spec["levels"][:2]  # crashed before C=100
    spec["error"] = "C=100: the server closed the connection mid-response"
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node", "run", modes=["baseline", "eagle3"])
    assert summary["status"] == "incomplete"
    assert summary["levels"][2]["verdict"] == "not measured in speculative"
    assert summary["levels"][0]["speedup"] > 1
    only_base = cmp.summarize_host({"baseline": base}, "node", "run", modes=["baseline", "eagle3"],
                                   outcomes={"eagle3": {"status": "failed", "error": "out of memory at startup"}})
    assert only_base["status"] == "incomplete" and only_base["crossover_status"] == "unknown"
    assert "eagle3: failed: out of memory at startup" in only_base["incomplete_reasons"]
    assert only_base["series"]["baseline"][0]["output_tok_per_s"] > 0
    nothing = cmp.summarize_host({}, "node", "run", modes=["baseline", "eagle3"])
    assert nothing["status"] == "failed"


def test_the_baseline_must_be_among_the_modes():
    with pytest.raises(cmp.CompareError, match="baseline mode 'baseline' is not among"):
        cmp.summarize_host({}, "node", "run", modes=["eagle3", "ngram"])


def test_an_adaptive_mode_is_checked_against_the_better_of_the_two():
    base, spec, _unused1 = analytic_results("kimi-k2.5-8x-rtx-pro-6000", [1, 2, 5])
    adaptive = result("eagle3-adaptive", [
        level(lv["concurrency"], max(b["output_tok_per_s"], s["output_tok_per_s"]) * 0.99)
        for lv, b, s in zip(base["levels"], base["levels"], spec["levels"], strict=True)
    ])
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec, "eagle3-adaptive": adaptive}, "node", "run",
                                 modes=["baseline", "eagle3", "eagle3-adaptive"])
    assert summary["spec_mode"] == "eagle3"
    assert summary["tracking"]["tracks"] is True
    assert summary["tracking"]["levels"][0]["better_mode"] == "eagle3"
    assert summary["tracking"]["levels"][1]["better_mode"] == "baseline"
    assert set(summary["comparisons"]) == {"eagle3", "eagle3-adaptive"}


def test_launches_are_pooled_so_launch_to_launch_variation_widens_the_interval():
    first = result("eagle3", [level(10, 1000.0, rel_half=0.01), level(30, 900.0, rel_half=0.01)])
    second = result("eagle3", [level(10, 1100.0, rel_half=0.01)])
    refined = result("eagle3", [level(20, 950.0, rel_half=0.01)])
    pooled = cmp.pool_runs([("launch1", first), ("launch2", second), ("refine1", refined)])
    by_conc = {lv["concurrency"]: lv for lv in pooled["levels"]}
    ten = by_conc[10]
    assert ten["launches"] == 2 and not ten["refined"] and ten["output_tok_per_s"] == 1050.0
    lo, hi = ten["output_tok_per_s_ci95"]
    assert lo < 1000.0 and hi > 1100.0  # the two launches disagree by far more than either's interval
    assert ten["ci_method"].startswith("pooled over 2 launches")
    # Two launches that disagree this much leave one degree of freedom: t(1) = 12.7, not 1.96.
    se = ((50.0 ** 2 * 2) / 2) ** 0.5  # s_between^2 = 5000 dominates the launches' own noise
    assert hi - lo > 2 * 10 * se and "t = 12.7" in ten["ci_method"]
    assert by_conc[20]["refined"] and by_conc[20]["launches"] == 1
    assert by_conc[30]["launches"] == 1 and not by_conc[30]["refined"]
    assert [r["tag"] for r in pooled["runs"]] == ["launch1", "launch2", "refine1"]
    assert cmp.split_run_name("eagle3@refine2") == ("eagle3", "refine2") and cmp.split_run_name("eagle3") == ("eagle3", None)


def test_an_unclear_first_level_is_not_called_slower():
    cross = cmp.crossover([{"concurrency": 1, "speedup": 1.04, "speedup_ci95": [0.96, 1.13]},
                           {"concurrency": 2, "speedup": 0.94, "speedup_ci95": [0.90, 0.985]},
                           {"concurrency": 4, "speedup": 0.64, "speedup_ci95": [0.61, 0.66]}])
    assert cross["status"] == "unclear_then_loses"
    rec = cmp.recommendation(cross, "eagle3", [1.0, 2.0, 4.0])
    assert "Do not speculate at C=2 to 4" in rec["text"] and "At C=1 the data cannot tell" in rec["text"]


def test_speculation_stops_above_the_last_paying_level_when_an_unclear_level_follows():
    """Pays to C=16, unclear at C=32, loses at C=64: the crossing's bracket [16, 64] puts its
    interpolated point at 52, but nothing shows speculation paying at 32, so the range ends just
    above 16; with the losing level next, the last paying level still ends it (the interpolated
    point is an estimate, never the rule's edge)."""
    regions = [{"verdict": "pays", "from_concurrency": 1, "to_concurrency": 16},
               {"verdict": "unclear", "from_concurrency": 32, "to_concurrency": 32},
               {"verdict": "loses", "from_concurrency": 64, "to_concurrency": 64}]
    cross = {"status": "pays_then_unclear", "regions": regions,
             "crossings": [{"direction": "stops_paying", "bracket": [16, 64], "concurrency": 51.6}]}
    assert cmp.speculate_ranges(cross) == [[1, 17]]
    direct = dict(cross, regions=[regions[0], regions[2]],
                  crossings=[{"direction": "stops_paying", "bracket": [16, 64], "concurrency": 40.2}])
    assert cmp.speculate_ranges(direct) == [[1, 17]]
