"""The adaptive mode chooses from the acceptance it observes (so a wrong table makes it wrong), and
the MoE profile's verification cost follows the experts it touches (a double crossing)."""

from __future__ import annotations

import json
import math
import random
import urllib.request

import pytest
from loadgen import closed_loop_throughput

from ansible_collections.specbench.core.plugins.module_utils.specbench_client.server import flush_cache
from sglang_emulator import model
from sglang_emulator.profiles import PROFILES

MOE = "kimi-k2.5-moe"


def speedup(profile: str, concurrency: int, spec_args=None, input_len: int = 256, output_len: int = 256) -> float:
    prof = PROFILES[profile]
    costs = model.Costs(**prof["costs"])
    const = prof["spec"]["EAGLE3"]
    steps, topk, draft = spec_args or prof["draft_defaults"]
    spec = model.SpecConfig("EAGLE3", steps, topk, draft, const["accept_q"], const["e0"], const["e1"])
    args = (concurrency, input_len, output_len, 10**6, 10**9)
    return (model.steady_state(costs, spec, *args)["output_tok_per_s"]
            / model.steady_state(costs, None, *args)["output_tok_per_s"])


def test_expert_union_is_n_times_one_minus_the_chance_an_expert_is_missed():
    assert model.expert_union(1, 384, 8) == pytest.approx(8.0)
    assert model.expert_union(4, 384, 8) == pytest.approx(384 * (1 - (1 - 8 / 384) ** 4))
    assert model.expert_union(10_000, 384, 8) == pytest.approx(384.0)
    assert model.expert_union(0, 384, 8) == 0.0
    costs = model.Costs(**PROFILES[MOE]["costs"])
    # Memory-bound passes cost more the more experts they touch; a dense profile's do not.
    assert costs.forward(4) > costs.forward(1)
    dense = model.Costs(**PROFILES["llama-3.1-8b-1x-h100"]["costs"])
    assert dense.forward(4) == dense.forward(1)


def test_the_moe_profile_loses_at_small_batches_pays_at_moderate_ones_and_loses_again():
    assert speedup(MOE, 1) < 0.9 and speedup(MOE, 4) < 0.9
    assert speedup(MOE, 32) > 1.15
    assert speedup(MOE, 128) < 0.85
    signs = [speedup(MOE, c) >= 1 for c in range(1, 257)]
    assert sum(a != b for a, b in zip(signs, signs[1:], strict=False)) == 2  # exactly two crossings


def test_adaptive_steps_follow_the_observed_acceptance_not_the_costs():
    table = ((1, (1, 3, 5, 7)), (32, (0, 1)))
    assert model.adaptive_steps(table, 4, 0.6, 3) == 3  # 0.6^3 >= 0.15 > 0.6^5
    assert model.adaptive_steps(table, 4, 0.3, 3) == 1
    assert model.adaptive_steps(table, 4, None, 3) == 3  # nothing observed yet: the launch's steps
    assert model.adaptive_steps(table, 40, 0.6, 3) == 1  # [0, 1]: acceptance is good, it speculates
    assert model.adaptive_steps(table, 40, 0.1, 3) == 0  # acceptance poor: plain decode
    assert model.adaptive_steps(((1, (0,)),), 4, 0.9, 3) == 0


def test_a_wrong_table_makes_the_adaptive_mode_speculate_where_it_loses():
    """Speculation loses at C=128 on the MoE profile; a table that offers steps there is followed."""
    prof = PROFILES[MOE]
    costs = model.Costs(**prof["costs"])
    const = prof["spec"]["EAGLE3"]

    def adaptive(table):
        return model.SpecConfig("EAGLE3", 3, 1, 4, const["accept_q"], const["e0"], const["e1"], table)

    args = (128, 256, 256, 10**6, 10**9)
    base = model.steady_state(costs, None, *args)["output_tok_per_s"]
    right = model.steady_state(costs, adaptive(((1, (0,)), (18, (1, 3)), (85, (0,)))), *args)
    wrong = model.steady_state(costs, adaptive(((1, (1, 3, 5, 7)), (32, (0, 3, 5)))), *args)
    assert right["draft_steps"] == 0 and right["output_tok_per_s"] == pytest.approx(base)
    assert wrong["draft_steps"] > 0 and wrong["output_tok_per_s"] < 0.9 * base


def test_the_acceptance_estimate_converges_to_the_true_acceptance():
    spec = model.SpecConfig("EAGLE3", 3, 1, 4, 0.6, 0.001, 0.0, ((1, (1, 3, 5, 7)),))
    state = model.AdaptiveState(spec)
    rng = random.Random(5)
    for _dummy in range(400):
        steps = state.choose(8)
        draws = [model.draw_accept(rng, 0.6, steps) for _dummy in range(8)]
        state.observe(sum(d - 1 for d in draws), sum(min(d, steps) for d in draws))
    assert state.q_hat == pytest.approx(0.6, abs=0.08)
    assert state.current == 3


def server_accept_length(base_url: str) -> float:
    with urllib.request.urlopen(base_url + "/server_info", timeout=10) as resp:
        return json.loads(resp.read())["internal_states"][0]["avg_spec_accept_length"]


def test_a_live_adaptive_server_picks_its_steps_from_what_it_accepts(emulator, tmp_path):
    """Same table, two draft models of different acceptance: different step counts, seen in the
    accept length the server reports (q=0.6 settles on 3 steps, q=0.32 on 1)."""
    table = tmp_path / "adaptive.json"
    table.write_text(json.dumps({"1": {"candidate_steps": [1, 3, 5, 7]}}))
    found = {}
    for profile, tp in (("kimi-k2.5-8x-rtx-pro-6000", "8"), ("llama-3.1-8b-1x-h100", "1")):
        emu = emulator("--emulator-profile", profile, "--tp-size", tp, "--enable-metrics", "--speculative-algorithm", "EAGLE3",
                       "--speculative-draft-model-path", "test/draft",
                       "--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
                       "--speculative-num-draft-tokens", "6", "--speculative-adaptive",
                       "--speculative-adaptive-config", str(table), time_scale=0.05)
        # Let the adaptive state settle, forget the counters (SGLang's /flush_cache), then measure.
        closed_loop_throughput(emu.base_url, 2, input_len=16, output_len=128, warmup_s=0.5, window_s=1.0)
        assert flush_cache({"base_url": emu.base_url}, wait_s=30.0), "the server never went idle to flush"
        closed_loop_throughput(emu.base_url, 2, input_len=16, output_len=128, warmup_s=0.2, window_s=1.5)
        found[profile] = server_accept_length(emu.base_url)
        emu.stop()
    kimi, llama = found["kimi-k2.5-8x-rtx-pro-6000"], found["llama-3.1-8b-1x-h100"]
    # 3 steps: 2.18; 1 step would read 1.60. The state moves between neighbouring rows' choices
    # while it settles, so a run can read a little under the 3-step figure.
    assert kimi == pytest.approx(model.mean_accept_length(0.60, 3), rel=0.15), found
    assert kimi > model.mean_accept_length(0.60, 1) * 1.1, found
    assert llama == pytest.approx(model.mean_accept_length(0.32, 1), rel=0.12), found
    assert not math.isclose(kimi, llama, rel_tol=0.15)


@pytest.mark.parametrize(("rows", "start"), [
    ({"1": {"candidate_steps": [0]}}, 0),  # a compare run's table where speculation pays nowhere
    ({"1": {"candidate_steps": [3, 5, 7]}, "8": {"candidate_steps": [0, 1]}}, 3),  # not the first row's middle (5)
])
def test_an_adaptive_server_without_starting_steps_starts_at_the_middle_candidate(emulator, tmp_path, rows, start):
    """Given no --speculative-num-steps, SGLang starts at the middle of every row's candidate steps
    (sglang/srt/arg_groups/speculative_hook.py, _init_adaptive_speculative_params: the union,
    sorted, index len // 2), with one draft token more; /server_info reports what it resolved."""
    table = tmp_path / "adaptive.json"
    table.write_text(json.dumps(rows))
    emu = emulator("--tp-size", "8", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "test/draft",
                   "--speculative-adaptive", "--speculative-adaptive-config", str(table), time_scale=0.05)
    with urllib.request.urlopen(emu.base_url + "/server_info", timeout=10) as resp:
        info = json.loads(resp.read())
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == \
        (start, 1, start + 1)
