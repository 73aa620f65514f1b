"""The post-launch check (issue 18, item 5): one test per mismatch, on /server_info answers, and the
same check against the emulator, which turns --speculative-adaptive off as SGLang does. Pure
functions plus two emulator launches: about 3 s."""
from __future__ import annotations

import json

import pytest
from specbench_testkit import http

from ansible_collections.specbench.core.plugins.module_utils.engines.common import postlaunch_failure
from ansible_collections.specbench.core.plugins.module_utils.engines.sglang import postlaunch as sglang_pl
from ansible_collections.specbench.core.plugins.module_utils.engines.vllm import postlaunch as vllm_pl

EAGLE3_ADAPTIVE = ["--model-path", "m", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d",
                   "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                   "--speculative-num-draft-tokens", "4", "--speculative-adaptive"]
LLAMA = ["--emulator-profile", "llama-3.1-8b-1x-h100"]
RUNNING = {"speculative_algorithm": "EAGLE3", "speculative_adaptive": True, "speculative_num_steps": 3,
           "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}


def check(args, **changed):
    return sglang_pl.sglang_check(args, dict(RUNNING, **changed), "/server_info")


def test_what_runs_is_what_was_asked():
    out = check(EAGLE3_ADAPTIVE)
    assert out["ok"] and out["mismatches"] == [] and out["source"] == "/server_info"
    assert out["asked"] == RUNNING and out["running"] == RUNNING


@pytest.mark.parametrize(("field", "running", "needle"), [
    ("speculative_algorithm", "EAGLE", "speculative_algorithm: asked 'EAGLE3', the server runs 'EAGLE'"),
    ("speculative_adaptive", False, "speculative_adaptive: asked True, the server runs False"),
    ("speculative_num_steps", 5, "speculative_num_steps: asked 3, the server runs 5"),
    ("speculative_eagle_topk", 4, "speculative_eagle_topk: asked 1, the server runs 4"),
    ("speculative_num_draft_tokens", 8, "speculative_num_draft_tokens: asked 4, the server runs 8"),
])
def test_each_mismatch_fails_by_name(field, running, needle):
    out = check(EAGLE3_ADAPTIVE, **{field: running})
    assert not out["ok"] and len(out["mismatches"]) == 1 and out["mismatches"][0].startswith(needle)
    message = postlaunch_failure("eagle3-adaptive", out)
    assert message.startswith("mode eagle3-adaptive is not running as asked") and needle in message


def test_static_eagle3_is_never_taken_for_adaptive_nor_the_reverse():
    static = [a for a in EAGLE3_ADAPTIVE if a != "--speculative-adaptive"]
    assert check(static, speculative_adaptive=False)["ok"]
    assert not check(static)["ok"]  # asked static, the server adapts


def test_a_baseline_must_not_speculate_and_nextn_is_eagle():
    assert sglang_pl.sglang_check(["--model-path", "m"], {"speculative_algorithm": None}, "/server_info")["ok"]
    out = sglang_pl.sglang_check(["--model-path", "m"], {"speculative_algorithm": "EAGLE"}, "/server_info")
    assert out["mismatches"] == ["speculative_algorithm: asked None, the server runs 'EAGLE'"]
    nextn = ["--speculative-algorithm=nextn"]
    assert sglang_pl.sglang_check(nextn, {"speculative_algorithm": "EAGLE", "speculative_adaptive": False}, "x")["ok"]


def test_draft_tokens_forced_at_topk_1_says_why():
    asked = [*EAGLE3_ADAPTIVE[:-1]]
    asked[asked.index("--speculative-num-draft-tokens") + 1] = "8"
    out = check(asked, speculative_adaptive=False)
    assert "at top-k 1 SGLang sets the draft tokens to steps + 1" in out["mismatches"][0]


def test_no_server_info_is_a_failure_not_a_pass():
    out = sglang_pl.sglang_check(EAGLE3_ADAPTIVE, {}, None)
    assert not out["ok"] and "neither /server_info nor /get_server_info" in out["mismatches"][0]


def test_vllm_drafts_must_move_in_a_speculative_mode_and_be_absent_in_a_plain_one():
    name = vllm_pl.VLLM_DRAFTS
    assert vllm_pl.vllm_check({"method": "ngram"}, f"{name} 10\n", f'{name}{{engine="0"}} 14\n', 16)["ok"]
    still = vllm_pl.vllm_check({"method": "ngram"}, f"{name} 10\n", f"{name} 10\n", 16)
    assert not still["ok"] and "did not rise over a 16-token completion (10.0 -> 10.0)" in still["mismatches"][0]
    off = vllm_pl.vllm_check({"method": "eagle3"}, "x 1\n", "x 1\n", 16)
    assert "is absent (speculation is off)" in off["mismatches"][0]
    assert vllm_pl.vllm_check({}, "", "vllm:generation_tokens_total 3\n", 16)["ok"]
    assert not vllm_pl.vllm_check({}, "", f"{name} 3\n", 16)["ok"]
    assert "no /metrics" in vllm_pl.vllm_check({"method": "ngram"}, None, None, 16)["mismatches"][0]


def test_vllm_tokens_at_reads_a_schedule_the_way_vllm_expands_it():
    """vllm/v1/spec_decode/dynamic/utils.py, build_dynamic_sd_schedule_lookup: capped at the static
    count, a gap carries the previous range's count, past the last range its count."""
    spec = {"method": "ngram", "num_speculative_tokens": 3,
            "num_speculative_tokens_per_batch_size": [[32, 64, 2], [1, 15, 0], [16, 16, 5]]}
    assert [vllm_pl.vllm_tokens_at(spec, bs) for bs in (1, 15, 16, 17, 31, 32, 64, 100)] == [0, 0, 3, 3, 3, 2, 2, 2]
    assert vllm_pl.vllm_tokens_at({"method": "ngram", "num_speculative_tokens": 4}, 1) == 4
    assert vllm_pl.vllm_tokens_at(None, 1) == 0 and vllm_pl.vllm_tokens_at({}, 8) == 0


def test_a_schedule_off_at_batch_1_needs_the_counter_present_and_still():
    """serve.yml's schedule may draft nothing at batch size 1 (the run's C=1 did not clearly pay):
    the check's one request then must not draft, and the counter must exist (speculation on); a
    rise means the engine ignores the schedule (vLLM's static fallback under data parallelism)."""
    name = vllm_pl.VLLM_DRAFTS
    spec = {"method": "ngram", "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": [[1, 15, 0], [16, 16, 4], [17, 32, 0]]}
    still = vllm_pl.vllm_check(spec, f"{name} 0.0\n", f"{name} 0.0\n", 16)
    assert still["ok"] and still["running"]["draft_tokens_at_batch_1"] == 0
    assert "drafting at the larger batches is the serve proof's to show" in still["running"]["unobserved"]
    rose = vllm_pl.vllm_check(spec, f"{name} 0.0\n", f"{name} 5.0\n", 16)
    assert not rose["ok"] and "not running the schedule" in rose["mismatches"][0]
    absent = vllm_pl.vllm_check(spec, "x 1\n", "x 1\n", 16)
    assert not absent["ok"] and "is absent (speculation is off)" in absent["mismatches"][0]
    on_at_1 = {**spec, "num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 32, 0]]}
    assert not vllm_pl.vllm_check(on_at_1, f"{name} 0.0\n", f"{name} 0.0\n", 16)["ok"]
    assert "unobserved" not in vllm_pl.vllm_check(on_at_1, f"{name} 0\n", f"{name} 3\n", 16)["running"]


def test_the_check_catches_the_emulators_silent_adaptive_off(emulator):
    """SGLang (and the emulator) serve happily with adaptive turned off under attention DP: only
    /server_info and a log line say so. The check reads both and fails naming the reason."""
    args = [*EAGLE3_ADAPTIVE[2:], "--tp-size", "2", "--attn-dp-size", "2"]
    emu = emulator(*LLAMA, *args)
    info = json.loads(http("GET", emu.base_url + "/server_info")[2])
    out = sglang_pl.sglang_check(args, info, "/server_info", emu.log())
    assert not out["ok"]
    assert out["mismatches"] == ["speculative_adaptive: asked True, the server runs False (the server log says: "
                                 "speculative_adaptive disabled: attention DP is not supported (adaptive tier "
                                 "decisions are not synchronized across DP ranks). Falling back to static "
                                 "speculative params.)"]
    fine = emulator(*LLAMA, *EAGLE3_ADAPTIVE[2:])
    assert sglang_pl.sglang_check(EAGLE3_ADAPTIVE, json.loads(http("GET", fine.base_url + "/server_info")[2]),
                                  "/server_info", fine.log())["ok"]
