"""A simulated closed loop's rate over one window, for the tests and the benchmark that hold a
window's interval (specbench_client.summary.window_interval) to a known truth: pure computation.

C streams, each request waits its prefill (TTFT) then decodes its tokens at its own speed (each
request's speed drawn uniformly within +-``spread`` of the mean: accept lengths and batch mixes
differ from request to request), the window's rate in ``bins`` fine bins; optionally the whole node
drifts (AR(1), multiplicative). The true mean rate is known exactly (renewal-reward, ``true_rate``):
C * L / (TTFT + L * E[1 / speed]), the drift having mean 1 and being independent of the streams.

Used by tests/unit/plugins/module_utils/specbench_client/test_level_intervals.py and by
benchmarks/decision_coverage.py's ``windows`` scenario (importable as ``closed_loop`` with tests/
on sys.path, as acceptance_draws is).
"""

from __future__ import annotations

import math
import random

from specbench_testkit import ar1

BINS = 500  # the client's fine bins per window: batches x FINE_BINS_PER_BATCH (10 x 50 by default)


def closed_loop_window(rng: random.Random, streams: int, tokens: int, speed: float, spread: float, ttft: float,
                       window: float, drift_tau_s: float = 0.0, drift_sd: float = 0.0,
                       bins: int = BINS) -> tuple[list, tuple]:
    """(the window's rate in ``bins`` fine bins, (tokens, durations) of the requests sent in it):
    each stream starts at a random phase of a long warmup, so the window sees the loop's steady
    state. The drift is AR(1) over the bins with time constant ``drift_tau_s`` (its integrated
    correlation time is about twice that) and relative sd ``drift_sd``."""
    bin_s = window / bins
    tok = [0.0] * bins  # tokens in the bins where a request starts or ends
    level = [0.0] * (bins + 1)  # rate changes, for the bins a request fills (a difference array)
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
    for k in range(bins):
        rate += level[k]
        tok[k] += rate * bin_s
    drift = [0.0] * bins
    if drift_sd:
        drift = ar1(rng, bins, math.exp(-bin_s / drift_tau_s), drift_sd)
    return [tok[k] / bin_s * (1 + drift[k]) for k in range(bins)], ([tokens] * len(durations), durations)


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


def mean_inverse_speed(speed: float, spread: float) -> float:
    """E[1 / speed] for a speed uniform within +-``spread`` of ``speed`` (s per token)."""
    return math.log((1 + spread) / (1 - spread)) / (2 * spread * speed) if spread else 1 / speed


def true_rate(streams: int, tokens: int, speed: float, spread: float, ttft: float) -> float:
    """The loop's long-run mean rate (tok/s), by renewal-reward."""
    return streams * tokens / request_duration(tokens, speed, spread, ttft)


def request_duration(tokens: int, speed: float, spread: float, ttft: float) -> float:
    """A request's mean duration (s): TTFT + L * E[1 / speed]."""
    return ttft + tokens * mean_inverse_speed(speed, spread)
