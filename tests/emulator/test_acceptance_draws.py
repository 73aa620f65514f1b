"""The acceptance maths the accuracy tests hold accept lengths to (tests/acceptance_draws.py),
against the emulator's own draw (model.draw_accept, as engine.py calls it once per request per
verify step, the last step's gain cut to what the request still needs). Seeded, so each run draws
the same requests; the bounds are still the draws' own standard errors, so a change of seed or of
the draw's rule that the maths do not follow fails for a reason."""
from __future__ import annotations

import math
import random

import pytest
from acceptance_draws import accept_cv, accept_length_band, step_gains, verify_steps

from sglang_emulator import model

Z = 4.5  # standard errors: a one-in-150,000 miss for each comparison


def request_steps(rng: random.Random, q_eff: float, steps: int, tokens: int) -> int:
    """Verify steps one request takes to decode ``tokens`` tokens through the emulator's draw."""
    count = 0
    while tokens > 0:
        tokens -= model.draw_accept(rng, q_eff, steps)
        count += 1
    return count


@pytest.mark.parametrize(("q_eff", "steps", "tokens"), [(0.6, 3, 255), (0.3, 5, 63), (0.9, 7, 31)])
def test_verify_steps_matches_the_emulators_draw(q_eff, steps, tokens):
    """Mean and spread of a request's verify steps: the recursion against 4,000 requests drawn by
    the emulator, the mean within Z standard errors of the sample's, the standard deviation within
    Z of its own (sd / sqrt(2 (N - 1)) for a near-normal sum, doubled for the skew of short
    requests)."""
    rng = random.Random(20261204 + steps)
    n = 4000
    draws = [request_steps(rng, q_eff, steps, tokens) for _unused1 in range(n)]
    mean = sum(draws) / n
    sd = math.sqrt(sum((d - mean) ** 2 for d in draws) / (n - 1))
    want_mean, want_sd = verify_steps(q_eff, steps, tokens)
    assert mean == pytest.approx(want_mean, abs=Z * want_sd / math.sqrt(n)), (mean, want_mean)
    assert sd == pytest.approx(want_sd, abs=2 * Z * want_sd / math.sqrt(2 * (n - 1))), (sd, want_sd)


def test_one_steps_gains_and_spread():
    """The gains' distribution sums to 1 and its mean is the model's accept length per step
    (sum of q^j, j = 0..steps); the coefficient of variation is 0 without a draft to accept."""
    for q_eff, steps in ((0.6, 3), (0.3, 5), (0.95, 1)):
        gains = step_gains(q_eff, steps)
        assert sum(gains) == pytest.approx(1.0, abs=1e-12)
        assert sum(k * p for k, p in enumerate(gains, 1)) == pytest.approx(model.mean_accept_length(q_eff, steps))
    assert accept_cv(0.0, 3) == 0.0
    assert accept_cv(0.6, 3) > accept_cv(0.6, 1) > 0


@pytest.mark.parametrize("requests", [5, 20, 60])
def test_the_accept_length_band_covers_95_percent_at_1_96(requests):
    """accept_length_band's standard error, simulated: 1,000 levels of ``requests`` requests of 64
    tokens (the first from the prefill), each read as sum(tokens) / sum(verify steps) the way the
    native API's per-request counts are; at z = 1.96 the band holds the level's accept length in 95 %
    of them, within Z binomial standard errors of 1,000 levels (about 3 points)."""
    rng = random.Random(4120 + requests)
    truth = {"accept_q_eff": 0.6, "draft_steps": 3}
    level = {"accept_length_source": f"/generate per request: sum(completion_tokens) / sum(spec_verify_ct) over "
                                     f"the {requests} requests finished in the window"}
    expected, band, n = accept_length_band(level, truth, 64, z=1.96)
    assert n == requests
    trials, inside = 1000, 0
    for _unused1 in range(trials):
        verify = sum(request_steps(rng, 0.6, 3, 63) for _unused2 in range(requests))
        inside += abs(64 * requests / verify - expected) <= band
    assert inside / trials == pytest.approx(0.95, abs=Z * math.sqrt(0.95 * 0.05 / trials)), inside
