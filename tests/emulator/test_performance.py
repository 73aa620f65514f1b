"""The emulator's performance model, measured over HTTP against a real emulator process."""

from __future__ import annotations

import math

import pytest
from acceptance_draws import accept_cv
from loadgen import analytic, closed_loop_window

from sglang_emulator import model
from sglang_emulator.profiles import PROFILES

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "test/draft"]
# Faster than the node, throughput read back in model time. C=1 steps are short, so its scale is
# kept where a busy 2-core machine's scheduling jitter stays small against one step.
SCALES = {1: 0.25, 70: 0.05}


Z = 4.5  # standard errors: a one-in-150,000 miss per run for the draws' noise


def window_tolerance(window, truth: dict) -> dict:
    """How far a window's rate over its scheduled time may sit from the model's steady state, each
    part from the window's own counts:
    - edges: each counter read can land inside a step or a prefill, whose time is then counted
      without its tokens: at most one of the longer kind at each end;
    - mix: the window holds one prefill more or fewer than the steady state's share of them;
    - batch: closed-loop clients leave a slot empty between a response and their next request;
      throughput grows at most in proportion to the batch, so the mean batch's shortfall bounds it;
    - draws: speculative acceptance is random, Z standard errors of the mean over every draw."""
    longest = max(truth["step_s"], truth["prefill_s"])
    parts = {
        "edges": 2 * longest / window.scheduled_s,
        "mix": truth["prefill_s"] / window.scheduled_s,
        "batch": max(0.0, 1 - window.rise["decode_batch_sum"] / window.rise["decode_steps"] / truth["running"]),
        "draws": 0.0,
    }
    if truth["accept_q_eff"] is not None:
        parts["draws"] = Z * accept_cv(truth["accept_q_eff"], truth["draft_steps"]) / math.sqrt(window.rise["decode_batch_sum"])
    return parts


@pytest.mark.parametrize(
    ("flags", "concurrency", "seeds_tok_per_s"),
    [
        pytest.param([], 1, 92.6, id="baseline-C1"),
        pytest.param(EAGLE3, 1, 96.1, id="eagle3-C1"),
        pytest.param(EAGLE3, 70, 340.0, id="eagle3-C70-mrr-unset"),
    ],
)
def test_default_profile_reproduces_the_seeds(emulator, flags, concurrency, seeds_tok_per_s):
    """The profile's model gives the seeds' figure, and the emulator serves the model's rate over
    HTTP for the time it ran its schedule: the window less its idle time (at C=1 every
    response's turnaround to the client's next request, which a loaded machine stretches: 3.4% of
    a window in one CI run) and any schedule it fell behind or gave up."""
    scale = SCALES[concurrency]
    emu = emulator("--tp-size", "8", "--enable-metrics", *flags, time_scale=scale)
    truth = analytic(emu.base_url, concurrency, 256, 256)
    assert truth["model_output_tok_per_s"] == pytest.approx(seeds_tok_per_s, rel=0.05)
    warmup = 2.5 if concurrency > 48 else 1.0
    window = closed_loop_window(emu.base_url, concurrency, warmup_s=warmup, window_s=4.0)
    parts = window_tolerance(window, truth)
    assert window.scheduled_tokens_per_s == pytest.approx(truth["output_tok_per_s"], rel=sum(parts.values())), (window, parts)


def test_speculation_wins_low_and_loses_high_in_the_model():
    prof = PROFILES["llama-3.1-8b-1x-h100"]
    costs = model.Costs(**prof["costs"])
    const = prof["spec"]["EAGLE3"]
    spec = model.SpecConfig("EAGLE3", 5, 4, 8, const["accept_q"], const["e0"], const["e1"])
    args = (256, 256, 1024, 10**7)
    base1 = model.steady_state(costs, None, 1, *args)["output_tok_per_s"]
    spec1 = model.steady_state(costs, spec, 1, *args)["output_tok_per_s"]
    assert base1 == pytest.approx(158, rel=0.02)
    assert spec1 == pytest.approx(373, rel=0.02)
    base250 = model.steady_state(costs, None, 250, *args)["output_tok_per_s"]
    spec250 = model.steady_state(costs, spec, 250, *args)["output_tok_per_s"]
    assert spec250 < base250
    crossover = model.crossover(costs, spec, *args)
    assert 30 < crossover < 70


def test_accept_length_draws_match_their_mean():
    import random

    rng = random.Random(1)
    q_eff, steps = 0.6, 3
    draws = [model.draw_accept(rng, q_eff, steps) for _unused1 in range(200_000)]
    assert sum(draws) / len(draws) == pytest.approx(model.mean_accept_length(q_eff, steps), rel=0.01)
    assert min(draws) == 1 and max(draws) == steps + 1


def test_expected_steps_matches_simulation():
    import random

    rng = random.Random(2)
    q_eff, steps, tokens = 0.7, 3, 255
    runs = []
    for _unused1 in range(4000):
        n = done = 0
        while done < tokens:
            done += model.draw_accept(rng, q_eff, steps)
            n += 1
        runs.append(n)
    assert sum(runs) / len(runs) == pytest.approx(model.expected_steps(tokens, q_eff, steps), rel=0.01)


def test_adaptive_default_table_turns_speculation_off_from_64():
    prof = PROFILES["llama-3.1-8b-1x-h100"]
    costs = model.Costs(**prof["costs"])
    const = prof["spec"]["EAGLE3"]
    table = ((1, (1, 3, 5, 7)), (8, (0, 1, 3)), (32, (0, 1)), (64, (0,)))
    spec = model.SpecConfig("EAGLE3", 3, 1, 4, const["accept_q"], const["e0"], const["e1"], table)
    assert model.step_choice(costs, spec, 64) == 0
    assert model.step_choice(costs, spec, 200) == 0
    assert model.step_choice(costs, spec, 1) in (1, 3, 5, 7)
    assert model.step_choice(costs, spec, 1) > 0
