"""What serve.yml serves and how it proves it, as pure functions: vLLM's per-batch-size schedule
from the levels' verdicts, the mode chosen from a summary, the proof's verdicts and the rollback.
Hand-built inputs, no randomness, well under a second."""

from __future__ import annotations

import pytest
from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep


def rows(*pairs):
    return [{"concurrency": c, "verdict": v} for c, v in pairs]


# ---------------------------------------------------------------------------------------------
# vLLM's schedule (vllm/v1/spec_decode/dynamic/utils.py: ranges from 1, the last k carried up)
# ---------------------------------------------------------------------------------------------
def test_schedule_speculates_through_the_last_paying_level_and_not_beyond():
    # The CPU run: pays at 1 and 4, loses at 16 -> off from 5 (the bracket's lower end).
    assert cmp.vllm_schedule(rows((1, "pays"), (4, "pays"), (16, "loses")), 3, 32) == [[1, 4, 3], [5, 32, 0]]


def test_unclear_failed_and_saturated_levels_turn_speculation_off_there():
    got = cmp.vllm_schedule(rows((1, "pays"), (4, "unclear"), (8, "pays"), (16, "failed"), (24, "pays"),
                                 (32, "saturated"), (48, "pays")), 4, 64)
    # Each paying level on its own (its neighbours are no evidence), nothing carried across them,
    # nothing above the highest level (48) even though it pays.
    assert got == [[1, 1, 4], [2, 7, 0], [8, 8, 4], [9, 23, 0], [24, 24, 4], [25, 47, 0], [48, 48, 4], [49, 64, 0]]


def test_baseline_where_speculation_never_pays_and_nothing_below_the_lowest_level():
    assert cmp.vllm_schedule(rows((1, "loses"), (4, "unclear"), (16, "loses")), 3, 32) is None
    assert cmp.vllm_schedule(rows((2, "pays"), (8, "loses")), 3, 16) == [[1, 1, 0], [2, 2, 3], [3, 16, 0]]
    # Paying at the top level that is also the largest batch: no trailing 0 entry is needed.
    assert cmp.vllm_schedule(rows((1, "pays"), (16, "pays")), 2, 16) == [[1, 16, 2]]


def test_bad_k_or_batch_is_refused():
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        cmp.vllm_schedule(rows((1, "pays")), 0, 32)
    with pytest.raises(ValueError, match="max_num_seqs"):
        cmp.vllm_schedule(rows((1, "pays")), 3, None)


# ---------------------------------------------------------------------------------------------
# The mode chosen from a summary
# ---------------------------------------------------------------------------------------------
def vllm_summary(ngram, draft):
    def server(spec):
        return {"engine": "vllm", "capacity": {"max_num_seqs": 32}, "speculative_config": spec}

    return {"baseline_mode": "baseline", "spec_mode": "ngram",
            "comparisons": {"ngram": {"levels": ngram}, "draft": {"levels": draft}},
            "servers": {"baseline": server(None), "ngram": server({"method": "ngram", "num_speculative_tokens": 3}),
                        "draft": server({"method": "draft_model", "num_speculative_tokens": 4})}}


def lv(conc, verdict, speedup):
    return {"concurrency": conc, "verdict": verdict, "speedup": speedup}


def test_vllm_plan_picks_the_mode_paying_at_most_levels_with_its_own_k():
    summary = vllm_summary([lv(1, "pays", 2.1), lv(4, "pays", 1.3), lv(16, "loses", 0.86)],
                           [lv(1, "pays", 1.5), lv(4, "unclear", 1.0), lv(16, "loses", 0.7)])
    plan = cmp.serve_plan(summary, "vllm")
    assert plan["mode"] == "ngram" and plan["schedule"] == [[1, 4, 3], [5, 32, 0]]
    forced = cmp.serve_plan(summary, "vllm", "draft")
    assert forced["mode"] == "draft" and forced["schedule"] == [[1, 1, 4], [2, 32, 0]]
    assert cmp.serve_plan(summary, "vllm", "baseline")["schedule"] is None
    with pytest.raises(ValueError, match="not compared"):
        cmp.serve_plan(summary, "vllm", "eagle3")


def test_vllm_plan_serves_the_baseline_where_nothing_pays():
    summary = vllm_summary([lv(1, "unclear", 1.1)], [lv(1, "loses", 0.8)])
    plan = cmp.serve_plan(summary, "vllm")
    assert plan["mode"] == "baseline" and plan["schedule"] is None and "no level" in plan["text"]


def test_sglang_plan_follows_the_recommendation():
    table = {"1": {"candidate_steps": [1, 3]}, "5": {"candidate_steps": [0]}}
    crosses = {"baseline_mode": "baseline", "spec_mode": "eagle3", "speculate_ranges": [[1, 5]],
               "adaptive_config": table}
    plan = cmp.serve_plan(crosses, "emulator")
    assert plan["mode"] == "eagle3-adaptive" and plan["adaptive_config"] == table
    everywhere = dict(crosses, speculate_ranges=[[1, None]])
    assert cmp.serve_plan(everywhere, "sglang")["mode"] == "eagle3"
    nowhere = dict(crosses, speculate_ranges=[])
    assert cmp.serve_plan(nowhere, "sglang")["mode"] == "baseline"
    assert cmp.serve_plan(crosses, "sglang", "eagle3")["adaptive_config"] is None


# ---------------------------------------------------------------------------------------------
# The proof's verdicts and the rollback
# ---------------------------------------------------------------------------------------------
RUN = {
    "baseline": result("baseline", [level(1, 100.0), level(4, 380.0), level(16, 1500.0)]),
    "eagle3": result("eagle3", [level(1, 200.0), level(4, 500.0), level(16, 1200.0)]),
}


def test_proof_holds_each_level_against_the_best_static_mode():
    # 2% relative half-widths on both sides: the ratio's log half-width is sqrt(2) * 0.02 = 0.028.
    served = result("served", [level(1, 201.0), level(4, 450.0), level(16, 1700.0)])
    got = cmp.proof_rows(served, RUN, 0.1)
    assert [r["best_static_mode"] for r in got] == ["eagle3", "eagle3", "baseline"]
    assert [r["verdict"] for r in got] == ["matches", "worse", "better"]
    assert got[0]["ratio"] == pytest.approx(201 / 200, abs=1e-4)
    assert got[0]["ratio_ci95"][0] < 1 < got[0]["ratio_ci95"][1]
    verdict = cmp.proof_verdict(got)
    assert verdict["verified"] is False and verdict["worse"] == [4]
    assert cmp.regression_action(got, "rollback") == "rollback"
    assert cmp.rollback_mode(RUN) == "eagle3"  # fastest at 2 of 3 levels


def test_an_unclear_or_unmeasured_level_is_never_verified():
    wide = result("served", [level(1, 200.0, rel_half=0.3), level(4, 500.0), level(16, 1500.0)])
    got = cmp.proof_rows(wide, RUN, 0.1)
    assert [r["verdict"] for r in got] == ["unclear", "matches", "matches"]
    assert cmp.proof_verdict(got)["verified"] is False and cmp.regression_action(got, "fail") is None
    missing = result("served", [level(1, 200.0), level(4, 500.0)])
    got = cmp.proof_rows(missing, RUN, 0.1)
    assert got[2]["verdict"] == "unclear" and got[2]["why"] == "not measured by the served sweep"
    ok = cmp.proof_rows(result("served", [level(1, 200.0), level(4, 500.0), level(16, 1500.0)]), RUN, 0.1)
    assert cmp.proof_verdict(ok)["verified"] is True


def test_a_rollbacks_own_check_holds_it_against_its_own_measurement():
    served = result("served", [level(1, 200.0), level(4, 500.0), level(16, 1200.0)])
    got = cmp.proof_rows(served, RUN, 0.1, reference="eagle3")
    assert {r["best_static_mode"] for r in got} == {"eagle3"}
    assert cmp.proof_verdict(got)["verified"] is True
    with pytest.raises(ValueError, match="serve_on_regression"):
        cmp.regression_action(got, "ignore")
    with pytest.raises(ValueError, match="serve_match_margin"):
        cmp.proof_rows(served, RUN, 0.0)


def test_a_vllm_summary_carries_the_schedule_and_the_report_shows_it():
    def vllm(mode, levels, spec):
        res = result(mode, levels)
        res["engine"] = "vllm"
        res["server"] = {"engine": "vllm", "settings": {"max_num_seqs": 32, "max_model_len": 1024},
                         "speculative_config": spec}
        return res

    base = vllm("baseline", [level(1, 100.0), level(4, 300.0), level(16, 900.0)], {})
    spec = vllm("ngram", [level(1, 200.0), level(4, 390.0), level(16, 700.0)],
                {"method": "ngram", "num_speculative_tokens": 3})
    summary = cmp.summarize_host({"baseline": base, "ngram": spec}, "node-a", "run-1")
    assert summary["serve_schedule"]["schedule"] == [[1, 4, 3], [5, 32, 0]]
    text = rep.render_markdown(summary, {})
    assert "## Speculation by batch size (vLLM)" in text and "[[1, 4, 3], [5, 32, 0]]" in text
    served = {"mode": "ngram", "base_url": "http://127.0.0.1:1", "service": {"launcher": "session", "pid": 7},
              "run_id": "run-1", "verified": False,
              "text": "not verified: unclear at C=16", "launch_command": ["vllm", "serve"],
              "levels": cmp.proof_rows(spec, {"baseline": base, "ngram": spec}, 0.1)}
    text = rep.render_markdown(dict(summary, served=served), {})
    assert "## Served" in text and "**not verified** (unclear at C=16)" in text and "| 16 | 700.0" in text
    assert "a detached session (pid 7)" in text


def test_capacity_settings_other_than_the_runs_are_named():
    from ansible_collections.specbench.core.plugins.modules.serve_plan import fairness

    run = {"baseline": {"server": {"settings": {"max_num_seqs": 32, "max_model_len": 1024}}},
           "ngram": {"server": {"settings": {"max_num_seqs": 32, "max_model_len": 1024}}}}
    assert fairness(run, {"max_num_seqs": 32, "max_model_len": 1024}) == []
    assert fairness(run, {"max_num_seqs": 64, "max_model_len": 1024}) == [
        "max_num_seqs is 64 now, 32 when the run measured baseline", "max_num_seqs is 64 now, 32 when the run measured ngram"]
    sglang = {"eagle3": {"server": {"settings": {"--mem-fraction-static": 0.88}}}}
    assert fairness(sglang, {"--mem-fraction-static": 0.8}) == [
        "mem_fraction_static is 0.8 now, 0.88 when the run measured eagle3"]


def test_a_lasting_systemd_service_restarts_on_failure_and_logs_to_journald():
    from ansible_collections.specbench.core.plugins.module_utils.launch import process as sglang_process

    argv = sglang_process.systemd_run_argv("specbench-vllm-8000", ["python3"], "/l.log", "/run", {}, service=True)
    assert "--property=Restart=on-failure" in argv and "--property=StandardOutput=journal" in argv
    assert not any("append:/l.log" in a for a in argv)
    plain = sglang_process.systemd_run_argv("u", ["python3"], "/l.log", "/run", {})
    assert "--property=StandardOutput=append:/l.log" in plain and not any("Restart=" in a for a in plain)


# ---------------------------------------------------------------------------------------------
# The served configuration weighed by traffic (schedule.served_series, then traffic.traffic_gain)
# ---------------------------------------------------------------------------------------------
def served_summary():
    """A vLLM run: n-gram pays at C=1 (2.0x [1.8, 2.2]) and C=4 (1.3x [1.2, 1.4]), loses at C=16."""
    levels = [{"concurrency": 1, "speedup": 2.0, "speedup_ci95": [1.8, 2.2], "verdict": "pays"},
              {"concurrency": 4, "speedup": 1.3, "speedup_ci95": [1.2, 1.4], "verdict": "pays"},
              {"concurrency": 16, "speedup": 0.8, "speedup_ci95": [0.7, 0.9], "verdict": "loses"}]
    servers = {m: {"engine": "vllm", "capacity": {"max_num_seqs": 32},
                   "speculative_config": {"method": "ngram", "num_speculative_tokens": 3} if m == "ngram" else None}
               for m in ("baseline", "ngram")}
    return {"baseline_mode": "baseline", "spec_mode": "ngram", "servers": servers,
            "comparisons": {"ngram": {"levels": levels}}}


def test_the_served_schedules_gain_on_traffic_by_hand():
    summary = served_summary()
    plan = cmp.serve_plan(summary, "vllm")
    assert plan["schedule"] == [[1, 4, 3], [5, 32, 0]]
    name, series = cmp.served_series(summary, plan)
    # Speculating at 1 and 4 (their own figures); the baseline itself from 5 (the off stretch's end
    # inside the measured range) and at 16; nothing added above 16 (outside stays outside).
    assert [(r["concurrency"], r["speedup"], r["verdict"]) for r in series] == \
        [(1, 2.0, "pays"), (4, 1.3, "pays"), (5, 1.0, "baseline served"), (16, 1.0, "baseline served")]
    traffic = cmp.parse_traffic([{"concurrency": 2, "share": 0.4}, {"concurrency": 8, "share": 0.4},
                                 {"concurrency": 64, "share": 0.2}])
    gain = cmp.traffic_gain(series, traffic, name)
    # C=2: halfway in log C between 1 (2.0) and 4 (1.3): 1.65; C=8: between 5 and 16, both the
    # baseline: 1.0; C=64: outside. Gain over the known 80%: (0.4 * 1.65 + 0.4 * 1.0) / 0.8 = 1.325.
    assert gain["gain"] == pytest.approx(1.325)
    assert gain["outside_share"] == pytest.approx(0.2) and gain["known_share"] == pytest.approx(0.8)
    # n-gram everywhere interpolates 1.05 at C=8 (between 1.3 and 0.8): (0.4 * 1.65 + 0.4 * 1.05) / 0.8.
    # The schedule gives that up: no measured level shows speculation paying between 4 and 16.
    always = cmp.traffic_gain(summary["comparisons"]["ngram"]["levels"], traffic, "ngram")
    assert always["gain"] == pytest.approx(1.35)


def test_the_served_series_keeps_an_unclear_speculating_level_unclear():
    summary = served_summary()
    summary["comparisons"]["ngram"]["levels"][1].update(verdict="unclear", speedup_ci95=[0.9, 1.7])
    plan = cmp.serve_plan(summary, "vllm")
    assert plan["schedule"] == [[1, 1, 3], [2, 32, 0]]
    unused, series = cmp.served_series(summary, plan)
    # Off at the unclear level: the baseline is what runs there, so its gain is known (1.0).
    assert [(r["concurrency"], r["verdict"]) for r in series] == \
        [(1, "pays"), (2, "baseline served"), (4, "baseline served"), (16, "baseline served")]
    # An SGLang-style plan that speculates at an unclear level: that traffic counts with its uncertainty.
    # speculate_ranges are [from, below): [1, 5) speculates at 1 and 4, not at 16.
    sglang = dict(summary, speculate_ranges=[[1, 5]], adaptive_config={"table": "given"})
    plan = {"mode": "ngram-adaptive", "schedule": None, "adaptive_config": {"table": "given"}}
    unused, series = cmp.served_series(sglang, plan)
    assert [(r["concurrency"], r["verdict"]) for r in series] == [(1, "pays"), (4, "unclear"), (16, "baseline served")]
    gain = cmp.traffic_gain(series, cmp.parse_traffic([{"concurrency": 2, "share": 1.0}]), "served")
    assert gain["unknown_share"] == 0 and gain["gain"] is not None
    # The range's end is exclusive: [1, 4) stops before C=4, where the baseline is served.
    unused, series = cmp.served_series(dict(sglang, speculate_ranges=[[1, 4]]), plan)
    assert [(r["concurrency"], r["verdict"]) for r in series] == \
        [(1, "pays"), (4, "baseline served"), (16, "baseline served")]


# ---------------------------------------------------------------------------------------------
# Only what can be served as measured: SGLang's adaptive table from EAGLE/EAGLE-3 at top-k 1 only
# ---------------------------------------------------------------------------------------------
def sglang_run(topk, algorithm="EAGLE3", spec_levels=None):
    """The RUN above with the speculative mode's server saying which top-k and algorithm it resolved."""
    spec = result("eagle3", spec_levels or [level(1, 200.0), level(4, 500.0), level(16, 1200.0)])
    spec["server"]["command"] = ["python3", "-m", "sglang.launch_server", "--speculative-algorithm", algorithm]
    spec["server"]["server_info"].update(speculative_algorithm=algorithm, speculative_eagle_topk=topk)
    return {"baseline": RUN["baseline"], "eagle3": spec}


def test_a_mode_measured_at_top_k_1_gets_the_adaptive_table():
    summary = cmp.summarize_host(sglang_run(1), "node-a", "run-1")
    assert summary["adaptive_refused"] is None and summary["static_choice"] is None
    assert summary["adaptive_config"] and summary["speculate_ranges"] == [[1, 5]]
    assert cmp.serve_plan(summary, "emulator")["mode"] == "eagle3-adaptive"


def test_a_mode_measured_at_another_top_k_gets_no_table_and_a_static_mode_with_the_reason():
    summary = cmp.summarize_host(sglang_run(4), "node-a", "run-1")
    why = "SGLang's adaptive speculation runs top-k 1 only, and eagle3 was measured at top-k 4 (resolved by the server)"
    assert summary["adaptive_config"] is None and summary["adaptive_table"] is None
    assert summary["adaptive_refused"].startswith(why)
    # The regions stay what they were (pays at 1 and 4, loses at 16): only the served configuration changes.
    assert summary["speculate_ranges"] == [[1, 5]]
    # By tokens on an even share of time: 1900 served against the baseline's 1980 -> not clearly above 1.
    plan = cmp.serve_plan(summary, "emulator")
    assert plan["mode"] == "baseline" and plan["adaptive_config"] is None and why in plan["text"]
    assert summary["static_choice"] == "baseline"
    assert "No adaptive table: " + why in summary["recommendation"]
    assert "serve.yml serves the baseline" in summary["recommendation"]
    assert cmp.compact(summary)["adaptive_refused"] == summary["adaptive_refused"]
    text = rep.render_markdown(summary, {})
    assert why in text and "## SGLang adaptive speculation" not in text


def test_where_the_static_mode_clearly_gains_it_is_served_statically():
    paying = [level(1, 200.0), level(4, 700.0), level(16, 1450.0, rel_half=0.005)]
    summary = cmp.summarize_host(sglang_run(4, spec_levels=paying), "node-a", "run-1")
    plan = cmp.serve_plan(summary, "sglang")
    assert summary["adaptive_refused"] and plan["mode"] == "eagle3" and plan["adaptive_config"] is None
    assert plan["expected_gain"]["eagle3"]["verdict"] == "pays", plan
    assert "eagle3 as measured (static, every batch size)" in summary["recommendation"]


def test_an_algorithm_sglang_cannot_adapt_gets_no_table():
    summary = cmp.summarize_host(sglang_run(None, algorithm="NGRAM"), "node-a", "run-1")
    assert summary["adaptive_config"] is None
    assert "runs EAGLE and EAGLE-3 only, and eagle3 is NGRAM" in summary["adaptive_refused"]
    assert not cmp.serve_plan(summary, "emulator")["mode"].endswith("-adaptive")


def test_the_report_says_the_crossover_once_and_a_single_level_range_as_one_level():
    # Pays at C=1 only, loses from C=4: the table speculates at batch size 1, never "1 to 1".
    run = {"baseline": RUN["baseline"], "eagle3": result("eagle3", [level(1, 200.0), level(4, 300.0),
                                                                    level(16, 1200.0)])}
    summary = cmp.summarize_host(run, "node-a", "run-1")
    assert summary["speculate_ranges"] == [[1, 2]], summary["levels"]
    text = rep.render_markdown(summary, {})
    assert "This table speculates at batch sizes 1, from" in text and "1 to 1" not in text
    assert text.count(summary["crossover_text"]) == 1, text
    assert text.count("stops paying between") == 1 and text.count("interpolated estimate") == 1, text
    assert text.count(summary["recommendation"]) == 1
