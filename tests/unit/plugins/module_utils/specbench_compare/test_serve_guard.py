"""serve.yml's guards as pure functions (issue 38): a failed or unclear proof is never up to date,
serve_on_regression is part of what must match, rollback is to a configuration (static n-gram is a
target for n-gram with a schedule), an incomplete run is refused, the launched command is held to
the measured one (model, draft, speculative settings), the proof repeats the run's workload and time
scale, and one port has one current claim (retire_others). Hand-built inputs, well under a second."""

from __future__ import annotations

import json

from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep

PLAN = {"mode": "eagle3-adaptive", "engine": "emulator", "schedule": None, "adaptive_config": {"1": [3, 1, 4]},
        "text": "eagle3-adaptive with the run's adaptive table"}


def served_doc(**over):
    doc = {"run_id": "r1", "plan": dict(PLAN), "mode": PLAN["mode"], "verified": True, "on_regression": "rollback",
           "text": "verified: ...", "state": "served", "base_url": "http://127.0.0.1:30000"}
    doc.update(over)
    return doc


# ------------------------------------------------------------------ up_to_date
def test_only_a_verified_proof_of_this_plan_under_the_same_on_regression_is_up_to_date():
    assert cmp.up_to_date(served_doc(), "r1", PLAN, "rollback") == (True, "")
    ok, why = cmp.up_to_date(served_doc(verified=False, text="not verified: clearly slower at C=16"), "r1", PLAN,
                             "rollback")
    assert not ok and "clearly slower at C=16" in why and "proved again" in why
    ok, why = cmp.up_to_date(served_doc(), "r1", PLAN, "keep")
    assert not ok and "serve_on_regression=rollback" in why and "keep" in why
    assert not cmp.up_to_date(served_doc(), "r2", PLAN, "rollback")[0]
    assert not cmp.up_to_date({}, "r1", PLAN, "rollback")[0]
    assert not cmp.up_to_date(served_doc(state="retired", retired_why="absent"), "r1", PLAN, "rollback")[0]
    assert not cmp.up_to_date(served_doc(), "r1", {**PLAN, "adaptive_config": {"1": [1, 1, 2]}}, "rollback")[0]


def test_a_verified_rollback_of_this_plan_is_up_to_date():
    rolled = served_doc(plan={"mode": "eagle3", "engine": "emulator", "schedule": None, "adaptive_config": None},
                        mode="eagle3", rolled_back_from={"mode": PLAN["mode"], "plan": dict(PLAN)})
    assert cmp.up_to_date(rolled, "r1", PLAN, "rollback") == (True, "")
    assert not cmp.up_to_date({**rolled, "verified": False}, "r1", PLAN, "rollback")[0]


def test_a_failed_proof_of_this_plan_is_proved_again_in_place_and_nothing_else_is():
    failed = served_doc(verified=False, text="not verified: clearly slower at C=16")
    assert cmp.proves_in_place(failed, "r1", PLAN)  # its server runs the plan: proved where it runs
    assert cmp.proves_in_place(served_doc(on_regression="keep"), "r1", PLAN)  # proved under another setting
    assert not cmp.proves_in_place(failed, "r2", PLAN)  # another run's record
    assert not cmp.proves_in_place({}, "r1", PLAN)
    assert not cmp.proves_in_place(served_doc(state="retired", retired_why="absent"), "r1", PLAN)
    assert not cmp.proves_in_place(failed, "r1", {**PLAN, "adaptive_config": {"1": [1, 1, 2]}})  # another table
    rolled = served_doc(plan={"mode": "eagle3", "engine": "emulator", "schedule": None, "adaptive_config": None},
                        mode="eagle3", verified=False, rolled_back_from={"mode": PLAN["mode"], "plan": dict(PLAN)})
    assert not cmp.proves_in_place(rolled, "r1", PLAN)  # a rollback runs, not the plan: launched again


def test_an_unclear_proof_is_relaunched_where_serve_reprove_unclear_says_so_and_a_slower_one_never_is():
    unclear = served_doc(verified=False, unclear=[4, 16], worse=[], text="not verified: unclear at C=4, 16")
    slower = served_doc(verified=False, unclear=[4], worse=[16], text="not verified: clearly slower at C=16")
    assert cmp.unclear_only(unclear) and not cmp.unclear_only(slower) and not cmp.unclear_only(served_doc())
    assert not cmp.unclear_only({**unclear, "node_changed": [16]})  # the node changed: relaunching says nothing new
    assert not cmp.unclear_only({**unclear, "ignored_schedule": [1]})
    # In place by default (no downtime); relaunched, a launch of evidence more, when asked.
    assert cmp.proves_in_place(unclear, "r1", PLAN) and cmp.proves_in_place(unclear, "r1", PLAN, "in_place")
    assert not cmp.proves_in_place(unclear, "r1", PLAN, "relaunch")
    assert cmp.proves_in_place(slower, "r1", PLAN, "relaunch")  # clearly slower: re-checked where it runs
    try:
        cmp.proves_in_place(unclear, "r1", PLAN, "restart")
    except ValueError as exc:
        assert "serve_reprove_unclear='restart'" in str(exc) and "in_place, relaunch" in str(exc)
    else:
        raise AssertionError("an unknown serve_reprove_unclear was accepted")


# ------------------------------------------------------------------ rollback to configurations
def test_rollback_is_to_a_configuration_not_a_name():
    ngram_scheduled = {"mode": "ngram", "engine": "vllm", "schedule": [[1, 4, 3], [5, 32, 0]], "adaptive_config": None}
    target = cmp.rollback_plan("ngram", ngram_scheduled)
    assert target["mode"] == "ngram" and target["schedule"] is None and target["adaptive_config"] is None
    assert "static" in target["text"]
    static = {"mode": "ngram", "engine": "vllm", "schedule": None, "adaptive_config": None}
    assert cmp.rollback_plan("ngram", static) is None  # the one served: nothing else to roll back to
    assert cmp.rollback_plan(None, static) is None
    assert cmp.rollback_plan("eagle3", PLAN)["mode"] == "eagle3"  # eagle3-adaptive -> static eagle3


# ------------------------------------------------------------------ serve only what was measured
def test_an_incomplete_run_is_refused_with_its_reasons():
    assert cmp.incomplete_problems({"complete": True, "modes_measured": ["baseline", "eagle3"]}) == []
    why = cmp.incomplete_problems({"complete": False, "status": "incomplete",
                                   "incomplete_reasons": ["eagle3: C=64 failed: the server exited"]})
    assert why == ["eagle3: C=64 failed: the server exited"]
    assert cmp.incomplete_problems({"complete": True, "modes_measured": []}) == ["no mode was measured"]


SG = ["python3", "-m", "sglang.launch_server", "--model-path", "/m/llama", "--port", "30000",
      "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/m/draft",
      "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


def test_the_launched_command_is_held_to_the_measured_one_flag_by_flag():
    results = {"eagle3": {"server": {"command": SG}}, "baseline": {"server": {"command": SG[:7]}}}
    adaptive = [*SG, "--speculative-adaptive-config", "/n/table.json", "--port", "30001"]
    assert cmp.identity_differences(adaptive, results, "eagle3-adaptive", "emulator") == []
    other = [a if a != "/m/draft" else "/m/other-draft" for a in SG]
    other[other.index("--speculative-num-steps") + 1] = "5"
    got = cmp.identity_differences(other, results, "eagle3", "sglang")
    assert got == ["--speculative-draft-model-path is /m/other-draft now, /m/draft when the run measured eagle3",
                   "--speculative-num-steps is 5 now, 3 when the run measured eagle3"]
    assert cmp.identity_differences(["--model-path=/m/other", *SG[5:7]], results, "baseline", "sglang") == [
        "--model-path is /m/other now, /m/llama when the run measured baseline"]
    assert cmp.identity_differences(SG, {}, "eagle3", "sglang") == []  # nothing recorded: nothing to hold it to


def test_the_engine_version_on_the_node_is_held_to_the_one_the_run_measured():
    results = {"eagle3": {"server": {"version": "0.5.23"}}, "baseline": {"server": {"version": "0.5.23"}}}
    assert cmp.version_difference("0.5.23", results, "eagle3-adaptive", "sglang") == ""
    why = cmp.version_difference("0.5.24", results, "eagle3-adaptive", "sglang")  # the table from eagle3's run
    assert why.startswith("SGLang is 0.5.24 on this node now, 0.5.23 when the run measured eagle3"), why
    assert "compare.yml on 0.5.24" in why and "install 0.5.23" in why
    vllm = {"ngram": {"server": {"version": "0.32.0"}}}
    assert "vLLM is 0.33.0 on this node now, 0.32.0" in cmp.version_difference("0.33.0", vllm, "ngram", "vllm")
    # Nothing recorded (or unknown): nothing to hold it to.
    assert cmp.version_difference("0.5.24", {"eagle3": {"server": {}}}, "eagle3", "sglang") == ""
    assert cmp.version_difference("0.5.24", {"eagle3": {"server": {"version": "unknown"}}}, "eagle3", "sglang") == ""


def test_a_setting_the_run_left_to_the_server_is_held_to_what_the_server_resolved():
    auto = SG[:9]  # eagle3 with steps, top-k and draft tokens left to SGLang
    info = {"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    results = {"eagle3": {"server": {"command": auto, "server_info": info}}}
    assert cmp.identity_differences(SG, results, "eagle3-adaptive", "emulator") == []
    results["eagle3"]["server"]["server_info"] = {**info, "speculative_num_steps": 5, "speculative_eagle_topk": 2}
    assert cmp.identity_differences(SG, results, "eagle3", "emulator") == [
        "--speculative-eagle-topk is 1 now, 2 (resolved by the server) when the run measured eagle3",
        "--speculative-num-steps is 3 now, 5 (resolved by the server) when the run measured eagle3"]
    # The adaptive configuration's steps and draft tokens are its table's, per batch size: not held to eagle3's.
    assert cmp.identity_differences(SG, results, "eagle3-adaptive", "emulator") == [
        "--speculative-eagle-topk is 1 now, 2 (resolved by the server) when the run measured eagle3"]
    # The run set the draft model explicitly: a launch without it is a difference.
    assert cmp.identity_differences(SG[:7] + SG[7:9], {"eagle3": {"server": {"command": SG}}}, "eagle3", "sglang")[0] \
        .startswith("--speculative-draft-model-path is (not set) now, /m/draft")


def test_vllm_speculative_config_is_compared_without_the_schedule():
    def cmd(**spec):
        return ["vllm", "serve", "--model", "/m/tiny", "--speculative-config", json.dumps(spec)]
    results = {"ngram": {"server": {"command": cmd(method="ngram", num_speculative_tokens=3)}}}
    served = cmd(method="ngram", num_speculative_tokens=3, num_speculative_tokens_per_batch_size=[[1, 4, 3]])
    assert cmp.identity_differences(served, results, "ngram", "vllm") == []
    got = cmp.identity_differences(cmd(method="ngram", num_speculative_tokens=5), results, "ngram", "vllm")
    assert len(got) == 1 and got[0].startswith("--speculative-config is") and '"num_speculative_tokens": 5' in got[0]


def test_the_proof_repeats_the_run_workload_and_time_scale():
    settings = {"api": "completions", "prompts_file": "builtin", "prompts_source": "builtin", "lengths": "dataset",
                "categories": "separate", "warmup_s": 1.5, "window_s": 3.0, "seed": 7, "concurrency": [16, 64]}
    base = result("baseline", [level(16, 100.0)], settings=settings,
                  server={"command": ["python3", "-m", "sglang_emulator", "--emulator-time-scale", "4.0"]})
    got = cmp.proof_workload({"baseline": base})
    assert got["api"] == "completions" and got["lengths"] == "dataset" and got["categories"] == "separate"
    assert got["warmup_s"] == 1.5 and got["window_s"] == 3.0 and got["seed"] == 7 and got["prompts_file"] == "builtin"
    assert "concurrency" not in got and set(got) <= set(cmp.WORKLOAD_KEYS)
    synth = result("baseline", [level(16, 100.0)], settings={"prompts_source": "synthesized", "prompts_file": None})
    assert cmp.proof_workload({"baseline": synth})["prompts_file"] == ""
    assert cmp.run_time_scale({"baseline": base}) == 4.0
    assert cmp.run_time_scale({"baseline": synth}) is None


# ------------------------------------------------------------------ records
def test_one_port_one_current_claim(tmp_path):
    for run, url in (("r1", "http://127.0.0.1:30000"), ("r2", "http://127.0.0.1:30000/"), ("r3", "http://127.0.0.1:1")):
        (tmp_path / run / "node").mkdir(parents=True)
        (tmp_path / run / "node" / "serve.json").write_text(json.dumps(served_doc(run_id=run, base_url=url)))
    assert cmp.retire_others(str(tmp_path), "node", "http://127.0.0.1:30000", "r2", "x", write=False) == ["r1"]
    assert cmp.retire_others(str(tmp_path), "node", "http://127.0.0.1:30000", "r2", "replaced by r2") == ["r1"]
    old = json.loads((tmp_path / "r1/node/serve.json").read_text())
    assert old["state"] == "retired" and old["retired_why"] == "replaced by r2" and old["verified"] is True
    assert json.loads((tmp_path / "r2/node/serve.json").read_text())["state"] == "served"
    assert cmp.retire_others(str(tmp_path), "node", None, None, "absent") == ["r2", "r3"]
    section = "\n".join(rep._served_section(json.loads((tmp_path / "r3/node/serve.json").read_text())))
    assert "**No longer served** (absent" in section and "was served at" in section
    assert "No longer served" not in "\n".join(rep._served_section(served_doc()))


# ------------------------------------------------------------------ minor: the client_saturated confounder
def test_a_server_count_warning_naming_a_possible_client_bottleneck_is_not_one():
    count = ("the server counted 80.0 generated tok/s in the window, the client 60.0 (-25.0%, more than 10%): "
             "other clients on the server, or a client bottleneck")
    own = "client bottleneck: a client worker used 97% of a core and read data late"

    def confounded(warning):
        lv = level(16, 100.0)
        lv["warnings"] = [warning]
        res = {"baseline": result("baseline", [lv]), "eagle3": result("eagle3", [level(16, 120.0)])}
        return [c for c in cmp.confounders(res, "baseline", {}, {}) if "client" in str(c).lower()]

    assert confounded(count) == []
    assert confounded(own), "the client's own bottleneck warning still raises the confounder"


# ------------------------------------------------------------------ the proof's reference is the plan's own (issue 36)
def test_each_level_is_held_to_the_reference_the_plan_uses():
    summary = {"baseline_mode": "baseline", "speculate_ranges": [[1, 32]]}
    assert cmp.proof_references(summary, PLAN, [16, 64]) == {16: "eagle3", 64: "baseline"}
    vllm = {"mode": "ngram", "schedule": [[1, 4, 3], [5, 32, 0]], "adaptive_config": None}
    assert cmp.proof_references({}, vllm, [1, 4, 16]) == {1: "ngram", 4: "ngram", 16: "baseline"}
    assert cmp.proof_references({}, {"mode": "baseline"}, [1, 64]) == {1: "baseline", 64: "baseline"}
    # A level the plan leaves off is held to the baseline even where eagle3 is faster there.
    results = {"baseline": result("baseline", [level(16, 100.0), level(64, 200.0)]),
               "eagle3": result("eagle3", [level(16, 150.0), level(64, 260.0)])}
    served = result("eagle3-adaptive", [level(16, 150.0), level(64, 200.0)])
    rows = cmp.proof_rows(served, results, 0.1, references={16: "eagle3", 64: "baseline"})
    assert [(r["best_static_mode"], r["verdict"]) for r in rows] == [("eagle3", "matches"), ("baseline", "matches")]
    rows = cmp.proof_rows(served, results, 0.1)  # the best static mode instead: 64 reads worse against eagle3
    assert [(r["best_static_mode"], r["verdict"]) for r in rows] == [("eagle3", "matches"), ("eagle3", "worse")]


# ------------------------------------------------------------------ the schedule shown to take effect (item 7)
def test_a_configuration_that_drafts_nowhere_its_plan_speculates_fails_by_name():
    results = {"baseline": result("baseline", [level(1, 50.0), level(16, 200.0)]),
               "ngram": result("ngram", [level(1, 80.0), level(16, 190.0)])}

    def served(drafts_at_1, drafts_at_16):
        lv1, lv16 = level(1, 80.0), level(16, 200.0)
        lv1["server_spec_drafts"], lv16["server_spec_drafts"] = drafts_at_1, drafts_at_16
        return result("ngram", [lv1, lv16])

    refs = {1: "ngram", 16: "baseline"}  # schedule [[1, 4, 3], [5, 32, 0]]
    rows = cmp.proof_rows(served(0.0, 0.0), results, 0.1, references=refs)
    assert [(r["plan_speculates"], r["drafts_counted"]) for r in rows] == [(True, 0.0), (False, 0.0)]
    verdict = cmp.proof_verdict(rows)
    assert verdict["ignored"] == [1] and not verdict["verified"] and "ignores its schedule" in verdict["text"]
    assert cmp.regression_action(rows, "rollback") == "rollback"
    rows = cmp.proof_rows(served(120.0, 3.0), results, 0.1, references=refs)
    assert cmp.proof_verdict(rows)["ignored"] == [] and cmp.regression_action(rows, "rollback") is None
    rows = cmp.proof_rows(served(None, None), results, 0.1, references=refs)  # no counters: not judged
    assert cmp.proof_verdict(rows)["ignored"] == []


def test_a_configuration_that_drafts_where_its_plan_says_off_fails_by_name():
    results = {"baseline": result("baseline", [level(1, 50.0), level(4, 120.0), level(16, 200.0)]),
               "ngram": result("ngram", [level(1, 80.0), level(4, 150.0), level(16, 190.0)])}

    def served(drafts):  # drafts over a 10-s window at C = 1, 4, 16
        levels = []
        for conc, tok_s, count in zip((1, 4, 16), (80.0, 150.0, 200.0), drafts, strict=True):
            lv = level(conc, tok_s)
            lv.update(window_s=10.0, wall_clock_output_tok_per_s=tok_s, server_spec_drafts=count)
            levels.append(lv)
        return result("ngram", levels)

    refs = {1: "ngram", 4: "ngram", 16: "baseline"}  # schedule [[1, 4, 3], [5, 32, 0]]
    # Honoured: 0.4 drafts per token where it speculates; at C=16 a few while the batch dipped at an edge.
    rows = cmp.proof_rows(served([320.0, 600.0, 40.0]), results, 0.1, references=refs)
    assert rows[2]["window_tokens"] == 2000.0 and cmp.offs_drafting(rows) == []
    assert cmp.proof_verdict(rows)["ignored"] == []
    # Ignored: C=16 drafts at the speculating rate (0.4 per token), where the plan says off.
    rows = cmp.proof_rows(served([320.0, 600.0, 800.0]), results, 0.1, references=refs)
    verdict = cmp.proof_verdict(rows)
    assert cmp.offs_drafting(rows) == [16] and verdict["ignored"] == [16] and not verdict["verified"]
    assert "drafts counted at C=16, where the plan says off" in verdict["text"], verdict["text"]
    assert cmp.regression_action(rows, "keep") == "keep"
    # No level that speculates drafted (nothing to hold C=16's rate to): only the silent levels are named.
    rows = cmp.proof_rows(served([0.0, 0.0, 800.0]), results, 0.1, references=refs)
    assert cmp.offs_drafting(rows) == [] and cmp.proof_verdict(rows)["ignored"] == [1, 4]
