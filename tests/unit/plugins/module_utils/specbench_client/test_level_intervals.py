"""A level's interval from one window (specbench_client.summary.window_interval), checked by
simulation: pure computation, fixed seeds, a few seconds.

A simulated closed loop (tests/closed_loop.py, which benchmarks/decision_coverage.py's ``windows``
scenario uses too): C streams, each request waits its prefill (TTFT) then decodes its tokens at its
own speed (each request's speed drawn uniformly within +-A of the mean), the window's rate in fine
bins; optionally the whole node drifts (AR(1), multiplicative). The true mean rate is known
exactly (renewal-reward): C * L / (TTFT + L * E[1 / speed]).

Coverage: a nominal 95 % interval, counted as covering only when it exists and holds the truth, must
cover in at least 90 % of the windows (the issue's bound). The seeds are fixed, so each figure is
the same on every run; what they gave (300 draws) with batches from the correlation time's upper
bound (issue 36 item 6; before it, from Geyer's estimate, in brackets): 3 requests a window 96 %
(96), C=8 97 % (96), C=8 with a drift 96 % (93), C=32 with a drift 93 % (93), C=64 with 1.7 requests
a window 97 % (97); AR(1) over 50 bins with tau 3 covered 96 % (91), with tau 8.4 and 49 (too few
correlation times: warned) covered or warned in 94 and 98 % (90 and 96).
"""

from __future__ import annotations

import random
import zlib

import pytest
from closed_loop import closed_loop_window, request_duration, true_rate
from specbench_testkit import ar1

from ansible_collections.specbench.core.plugins.module_utils.specbench_client import stats
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.summary import window_interval

DRAWS = 300


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
    """(covered, claimed, flagged) over ``draws`` windows: flagged = window_interval's correlation
    warning (summarize warns)."""
    rng = random.Random(zlib.crc32(name.encode()))
    truth = true_rate(streams, tokens, speed, spread, ttft)
    covered = claimed = flagged = 0
    for _draw in range(draws):
        fine, requests = closed_loop_window(rng, streams, tokens, speed, spread, ttft, window, drift_tau, drift_sd)
        found = window_interval(fine, window, requests)
        ci = found["ci"]
        claimed += ci is not None
        covered += ci is not None and ci[0] <= truth <= ci[1]
        flagged += found["warning"] is not None
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
        honest += hit or found["warning"] is not None
    assert honest / DRAWS >= 0.90, (hits / DRAWS, honest / DRAWS)
    if tau_bins * stats.MIN_CORRELATION_TIMES <= 50:
        assert hits / DRAWS >= 0.90, hits / DRAWS


# Issue 36, item 6: a drift correlated over 20 request durations in a window of 400 (20 of its
# correlation times). Geyer's estimate from the window runs low (its autocovariances are about the
# window's own mean, its sum stops at the first noisy negative pair), so batches of twice it were
# too short: the windows left unwarned covered 349 of 398 with this seed (87.7 %; 88.6 % over 600
# other draws). With the batches from its upper bound (stats.correlation_time_bound): 366 of 398 (92 %).
# The bound, binomially: nearly all N windows are unwarned here (the rule warns 1 % of them) and a
# coverage p measured over N has a standard deviation sqrt(p (1 - p) / N). At N = 400 an interval
# covering its nominal 95 % has 1.1 %, so the 90 % bound lies 4.6 of them below it; the 93 % this
# rule covered over 600 other draws (1.3 % at N = 400) lies 2.3 above the bound, the rule before's
# 88.6 % 0.9 below it. 400 windows of 400 request durations at C=8: about 3 s.
SLOW_DRIFT_DRAWS = 400


def test_windows_unwarned_under_a_slow_drift_cover():
    """C=8, 256 tokens (a request of 9.1 s), a 5 % drift with an integrated correlation time of 20
    request durations, windows of 400 request durations: the windows window_interval does not warn
    of (no correlation warning, an interval) hold the true rate in at least 90 % of the draws."""
    streams, tokens, speed, spread, ttft = 8, 256, 30.0, 0.3, 0.3
    duration = request_duration(tokens, speed, spread, ttft)
    window = 400 * duration
    truth = true_rate(streams, tokens, speed, spread, ttft)
    rng = random.Random(zlib.crc32(b"a drift over 20 requests, a window of 400"))
    unwarned = covered = 0
    for _draw in range(SLOW_DRIFT_DRAWS):
        fine, requests = closed_loop_window(rng, streams, tokens, speed, spread, ttft, window, 20 * duration / 2,
                                            0.05)
        found = window_interval(fine, window, requests)
        ci = found["ci"]
        if ci is None or found["warning"] is not None:
            continue
        unwarned += 1
        covered += ci[0] <= truth <= ci[1]
    assert unwarned >= 0.9 * SLOW_DRIFT_DRAWS, unwarned
    assert covered >= 0.90 * unwarned, (covered, unwarned)
