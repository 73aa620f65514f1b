"""A level's interval from one window (specbench_client.summary.window_interval), checked by
simulation: pure computation, fixed seeds, a few seconds.

A simulated closed loop: C streams, each request waits its prefill (TTFT) then decodes its tokens
at its own speed (each request's speed drawn uniformly within +-A of the mean: accept lengths and
batch mixes differ from request to request), the window's rate in fine bins; optionally the whole
node drifts (AR(1), multiplicative). The true mean rate is known exactly (renewal-reward):
C * L / (TTFT + L * E[1 / speed]), the drift having mean 1 and being independent of the streams.

Coverage: a nominal 95 % interval, counted as covering only when it exists and holds the truth, must
cover in at least 90 % of the windows (the issue's bound). The seeds are fixed, so each figure is
the same on every run; what they gave when written (300 draws): 3 requests a window 96 %, C=8 96 %,
C=8 with a drift 93 %, C=32 with a drift 93 %, C=64 with 1.7 requests a window 97 %; AR(1) over 50
bins with tau 3 covered 91 %, with tau 8.4 and 49 (too few correlation times: warned) covered or
warned in 90 and 96 % (the tau 8.4 case sits on the bound: the issue's hardest short window).
"""

from __future__ import annotations

import math
import random
import zlib

import pytest
from specbench_testkit import ar1

from ansible_collections.specbench.core.plugins.module_utils.specbench_client import stats
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.summary import window_interval

DRAWS = 300
BINS = 500  # the client's fine bins per window: batches x FINE_BINS_PER_BATCH


def closed_loop_window(rng: random.Random, streams: int, tokens: int, speed: float, spread: float, ttft: float,
                       window: float, drift_tau_s: float = 0.0, drift_sd: float = 0.0) -> tuple[list, tuple]:
    """(the window's rate in BINS fine bins, (tokens, durations) of the requests sent in it): each
    stream starts at a random phase of a long warmup, so the window sees the loop's steady state."""
    bin_s = window / BINS
    tok = [0.0] * BINS  # tokens in the bins where a request starts or ends
    level = [0.0] * (BINS + 1)  # rate changes, for the bins a request fills (a difference array)
    durations = []
    for _stream in range(streams):
        t = -rng.uniform(2, 4) * (ttft + tokens / speed)
        while t < window:
            rate = speed * (1 + spread * rng.uniform(-1, 1))
            start, end = t + ttft, t + ttft + tokens / rate
            if 0 <= t < window:
                durations.append(end - t)
            if end > 0 and start < window:
                add_span(tok, level, max(0.0, start), min(window, end), rate, bin_s)
            t = end
    rate = 0.0
    for k in range(BINS):
        rate += level[k]
        tok[k] += rate * bin_s
    drift = [0.0] * BINS
    if drift_sd:
        drift = ar1(rng, BINS, math.exp(-bin_s / drift_tau_s), drift_sd)
    return [tok[k] / bin_s * (1 + drift[k]) for k in range(BINS)], ([tokens] * len(durations), durations)


def add_span(tok: list, level: list, start: float, end: float, rate: float, bin_s: float) -> None:
    """Tokens at ``rate`` from ``start`` to ``end``: the edge bins directly, the bins between as a level."""
    lo, hi = int(start / bin_s), min(len(tok) - 1, int(end / bin_s))
    if lo == hi:
        tok[lo] += rate * (end - start)
        return
    tok[lo] += rate * ((lo + 1) * bin_s - start)
    if hi < len(tok):
        tok[hi] += rate * (end - hi * bin_s)
    level[lo + 1] += rate
    level[hi] -= rate


def true_rate(streams: int, tokens: int, speed: float, spread: float, ttft: float) -> float:
    inv_speed = math.log((1 + spread) / (1 - spread)) / (2 * spread * speed) if spread else 1 / speed
    return streams * tokens / (ttft + tokens * inv_speed)


# (name, streams, tokens, speed tok/s per stream, spread, TTFT s, window s, drift time constant s, drift sd).
# A drift's integrated correlation time is twice its time constant: the drifts below leave 10 or more
# correlation times in the window (C=32 with 6 s, 5 of them, is in the next test).
CASES = [
    ("C=1, 2,000 tokens: 3 requests a window", 1, 2000, 100.0, 0.3, 0.2, 60.0, 0.0, 0.0),
    ("C=8, 256 tokens: many requests", 8, 256, 30.0, 0.3, 0.3, 60.0, 0.0, 0.0),
    ("C=8 with a 3 s drift of 5 %", 8, 256, 30.0, 0.3, 0.3, 60.0, 3.0, 0.05),
    ("C=32 with a 2 s drift of 5 %", 32, 256, 20.0, 0.2, 0.5, 60.0, 2.0, 0.05),
    ("C=64, a window of 1.7 requests", 64, 64, 20.0, 0.3, 0.1, 5.5, 0.0, 0.0),
]


def coverage(name, streams, tokens, speed, spread, ttft, window, drift_tau, drift_sd, draws=DRAWS):
    """(covered, claimed, flagged) over ``draws`` windows: flagged = the window holds fewer than
    MIN_CORRELATION_TIMES correlation times (summarize warns)."""
    rng = random.Random(zlib.crc32(name.encode()))
    truth = true_rate(streams, tokens, speed, spread, ttft)
    covered = claimed = flagged = 0
    for _draw in range(draws):
        fine, requests = closed_loop_window(rng, streams, tokens, speed, spread, ttft, window, drift_tau, drift_sd)
        found = window_interval(fine, window, requests)
        ci = found["ci"]
        claimed += ci is not None
        covered += ci is not None and ci[0] <= truth <= ci[1]
        flagged += (found["correlation_times"] or 0) < stats.MIN_CORRELATION_TIMES
    return covered, claimed, flagged


@pytest.mark.parametrize("name, streams, tokens, speed, spread, ttft, window, drift_tau, drift_sd", CASES,
                         ids=[c[0] for c in CASES])
def test_the_level_interval_covers_the_true_rate(name, streams, tokens, speed, spread, ttft, window,
                                                 drift_tau, drift_sd):
    covered, claimed, unused = coverage(name, streams, tokens, speed, spread, ttft, window, drift_tau, drift_sd)
    assert covered / DRAWS >= 0.90, (covered / DRAWS, claimed)


def test_a_window_of_one_or_two_requests_claims_no_interval():
    """C=1 with 4,000-token outputs: 1.5 requests a 60 s window (the old interval covered 65 %). Its
    rate is one request's or two: no interval, so the level stays unclear (adaptive windows lengthen it)."""
    unused, claimed, unused_f = coverage("C=1, 4,000 tokens", 1, 4000, 100.0, 0.3, 0.2, 60.0, 0.0, 0.0, draws=100)
    assert claimed == 0


def test_a_slow_drift_is_covered_or_flagged():
    """C=32 under a 6 s drift (12 s correlation, 5 of them in the window, as the issue's 30 s drift in a
    longer window): each window either covers the truth or warns that it holds too few correlation times."""
    covered, unused, flagged = coverage("C=32 with a 6 s drift", 32, 256, 20.0, 0.2, 0.5, 60.0, 6.0, 0.05, draws=100)
    assert covered >= 90 or covered + flagged >= 90, (covered, flagged)


@pytest.mark.parametrize("tau_bins", [3.0, 8.4, 49.0])
def test_ar1_series_of_50_bins_are_covered_or_flagged(tau_bins):
    """The issue's AR(1) series: 50 bins with an integrated correlation time of 3, 8.4 and 49 bins
    (rho = (tau - 1) / (tau + 1)); the effective-sample-size interval covered 92, 85 and 64 %, with
    no warning. Now each window's interval covers the truth or the window warns that it holds fewer
    than MIN_CORRELATION_TIMES correlation times; with 16 of them (tau 3) the interval alone covers."""
    rng = random.Random(int(tau_bins * 10))
    rho = (tau_bins - 1) / (tau_bins + 1)
    hits = honest = 0
    for _draw in range(DRAWS):
        fine = [100.0 * (1 + e) for e in ar1(rng, 50, rho, 0.05)]
        found = window_interval(fine, 50.0, None)
        ci = found["ci"]
        hit = ci is not None and ci[0] <= 100.0 <= ci[1]
        hits += hit
        honest += hit or found["correlation_times"] < stats.MIN_CORRELATION_TIMES
    assert honest / DRAWS >= 0.90, (hits / DRAWS, honest / DRAWS)
    if tau_bins * stats.MIN_CORRELATION_TIMES <= 50:
        assert hits / DRAWS >= 0.90, hits / DRAWS
