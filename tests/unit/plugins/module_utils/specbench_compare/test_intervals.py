"""Honest intervals, checked by simulation (pure computation, seeded, a few seconds).

Each level's samples carry AR(1) noise (rho = 0.8), as a closed-loop server's rate does from one
short bin to the next. The client's effective-sample-size interval (specbench_client.stats) must
cover the true level mean, the speedup interval (specbench_compare.ratio_ci) the true speedup, and
the crossover's interval (specbench_compare.crossover: the bracket of clear levels) the true crossover, each in at
least 90% of the cases (nominal 95%).
"""

from __future__ import annotations

import math
import random

import specbench_testkit as kit

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import stats

RHO = 0.8
REL_SD = 0.05  # marginal relative noise of one sample
SAMPLES = 200  # per level and mode (a window's bins)
LEVELS = [1, 2, 4, 8, 16, 32]
BASE_TOK_S = 100.0


def true_speedup(c: float) -> float:
    """A smooth, curved speedup: 1.6 * C^-0.2, crossing 1 at C = 1.6^5 = 10.49."""
    return 1.6 * c ** -0.2


TRUE_CROSSOVER = 1.6 ** 5


def ar1(rng: random.Random, n: int, rho: float = RHO, sd: float = REL_SD) -> list[float]:
    return kit.ar1(rng, n, rho, sd)


def measure(rng: random.Random, truth: float) -> tuple[float, list[float]]:
    samples = [truth * (1 + e) for e in ar1(rng, SAMPLES)]
    mean, ci, unused = stats.ess_mean_ci95(samples)
    return mean, ci


def sweep(rng: random.Random) -> tuple[list[dict], int, int]:
    """One simulated sweep: rows for crossover(), and how many level intervals covered the truth."""
    rows, covered, speedups_covered = [], 0, 0
    for c in LEVELS:
        base_true, spec_true = BASE_TOK_S * c, BASE_TOK_S * c * true_speedup(c)
        b, b_ci = measure(rng, base_true)
        s, s_ci = measure(rng, spec_true)
        covered += (b_ci[0] <= base_true <= b_ci[1]) + (s_ci[0] <= spec_true <= s_ci[1])
        ratio, r_ci = cmp.ratio_ci(s, s_ci, b, b_ci)
        speedups_covered += r_ci[0] <= true_speedup(c) <= r_ci[1]
        rows.append({"concurrency": c, "speedup": ratio, "speedup_ci95": r_ci})
    return rows, covered, speedups_covered


def test_naive_intervals_would_be_too_narrow_for_this_noise():
    """The check has teeth: an i.i.d. t-interval over the same samples covers far less than 90%."""
    rng = random.Random(3)
    hits = 0
    for _dummy in range(300):
        samples = [100.0 * (1 + e) for e in ar1(rng, SAMPLES)]
        ci = stats.mean_ci95(samples)[1]
        hits += ci[0] <= 100.0 <= ci[1]
    assert hits / 300 < 0.75


def test_level_speedup_and_crossover_intervals_cover_the_truth_under_ar1_noise():
    rng = random.Random(11)
    sweeps = 500
    level_hits = speedup_hits = cross_hits = 0
    statuses = {}
    for _dummy in range(sweeps):
        rows, covered, sp_covered = sweep(rng)
        level_hits += covered
        speedup_hits += sp_covered
        cross = cmp.crossover(rows)
        statuses[cross["status"]] = statuses.get(cross["status"], 0) + 1
        lo, hi = cross["ci95"] or (None, None)
        lo = 0.0 if lo is None else lo
        hi = math.inf if hi is None else hi
        cross_hits += cross["status"] == "crosses" and lo <= TRUE_CROSSOVER <= hi
    n_levels = sweeps * len(LEVELS)
    assert level_hits / (2 * n_levels) >= 0.90, level_hits / (2 * n_levels)
    assert speedup_hits / n_levels >= 0.90, speedup_hits / n_levels
    assert cross_hits / sweeps >= 0.90, (cross_hits / sweeps, statuses)
    # Not vacuous: the intervals are finite, and most sweeps close both ends.
    assert statuses.get("crosses", 0) >= 0.9 * sweeps
