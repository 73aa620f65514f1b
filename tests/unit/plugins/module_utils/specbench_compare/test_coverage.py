"""The comparison's intervals keep their promise, checked by simulation (fixed seeds, pure computation).

Each simulation draws a few hundred measurements whose truth is known and counts how often the
reported 95% interval holds it; each must reach 90%. Bound: an interval that truly covers 95%
shows, over n draws, a rate with standard deviation sqrt(0.95 * 0.05 / n) (1.3% at n = 300), so
90% lies 3.8 standard deviations below it; with fixed seeds the counts are the same on every run.
The level interval (the client's window) is simulated in the client's own tests (issue 17, item 5/6).
"""

from __future__ import annotations

import math
import random

import pytest
from compare_synth import analytic_results, level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from sglang_emulator import model, profiles

Z = 1.959964


def noisy(rng: random.Random, truth: float, rel_sd: float) -> tuple[float, list[float]]:
    """One estimate of ``truth`` with relative standard error ``rel_sd`` and its 95% z-interval."""
    x = truth * (1 + rng.gauss(0.0, rel_sd))
    return x, [x - Z * truth * rel_sd, x + Z * truth * rel_sd]


def test_the_speedup_interval_covers_the_true_speedup():
    """300 levels, each side's relative standard error drawn from 1% to 6%, speedups 0.5 to 2."""
    rng = random.Random(17)
    hits, n = 0, 300
    for _dummy in range(n):
        base_true, speedup = 1000.0, rng.uniform(0.5, 2.0)
        b, b_ci = noisy(rng, base_true, rng.uniform(0.01, 0.06))
        s, s_ci = noisy(rng, base_true * speedup, rng.uniform(0.01, 0.06))
        unused, ci = cmp.ratio_ci(s, s_ci, b, b_ci)
        hits += ci[0] <= speedup <= ci[1]
    assert hits / n >= 0.90, hits / n


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("disagree", [0.0, 3.0])
@pytest.mark.parametrize("shared", [0.0, 0.5, 1.0])
def test_the_pooled_interval_covers_the_truth_whether_launches_agree_or_not(k, disagree, shared):
    """k launches, each with its own launch effect (``disagree`` x the within-launch standard error)
    and its window's noise, of which the share ``shared`` (of its variance) is the same in every
    launch: launches replay the same requests, so a window's requests and the phase of its batch's
    swings repeat (three MoE launches at C=4 read 368.5, 368.5 and 368.75, each +-0.75%). Each
    launch's own interval is right about its whole noise. The pooled interval (pool_level) must cover
    the true rate. Before the degrees of freedom were fixed, k = 2 launches disagreeing by 3x covered
    88.25% of 2000 draws; before the floor stopped dividing by k, k = 3 agreeing launches covered
    74% with their noise shared, 92% with half of it (a true 95% shows 95 +- 0.5% over 2000 draws:
    the 90% bound is 10 standard deviations away from it)."""
    rng = random.Random(5)
    truth, within = 1000.0, 0.02
    hits, n = 0, 2000
    for _dummy in range(n):
        levels = []
        common = rng.gauss(0.0, within * math.sqrt(shared))
        for _launch in range(k):
            launch_truth = truth * (1 + rng.gauss(0.0, disagree * within))
            x = launch_truth * (1 + common + rng.gauss(0.0, within * math.sqrt(1.0 - shared)))
            ci = [x - Z * launch_truth * within, x + Z * launch_truth * within]
            levels.append(dict(level(8, x), output_tok_per_s_ci95=ci))
        pooled = cmp.pool_level(levels)
        lo, hi = pooled["output_tok_per_s_ci95"]
        hits += lo <= truth <= hi
    assert hits / n >= 0.90, hits / n


def true_crossings(profile: str, top: int) -> list[tuple[str, float]]:
    """(direction, concurrency) of every change of sign of the model's speedup - 1 from C=1 to ``top``."""
    base, spec, unused = analytic_results(profile, list(range(1, top + 1)))
    ratios = [s["output_tok_per_s"] / b["output_tok_per_s"] for s, b in zip(spec["levels"], base["levels"], strict=True)]
    out = []
    for c in range(1, top):
        r0, r1 = ratios[c - 1], ratios[c]
        if (r0 >= 1) != (r1 >= 1):
            frac = (r0 - 1) / (r0 - r1)
            out.append(("stops_paying" if r0 >= 1 else "starts_paying",
                        math.exp(math.log(c) + frac * (math.log(c + 1) - math.log(c)))))
    return out


GRIDS = [[1, 2, 5, 10, 30, 70, 100, 250], [1, 4, 16, 64, 256], [8, 16, 32, 64, 128]]


@pytest.mark.parametrize("profile, seen", [
    # kimi pays only 1.038x at C=1, inside one level's noise (+-5.5% on the speedup, +-7.7% family-wise at 5
    # levels): the crossing at 1.29 is seen only when C=1 reads clearly paying; otherwise the honest answer is
    # "unclear at C=1" (measured 90/300 with per-level verdicts, 34/300 with family-wise ones: the price of a
    # tie reading as a tie).
    ("kimi-k2.5-8x-rtx-pro-6000", 0.08),
    ("llama-3.1-8b-1x-h100", 0.90),
    ("kimi-k2.5-moe", 0.90),
])
def test_the_crossover_interval_covers_the_emulators_true_crossings_on_three_grids(profile, seen):
    """The emulator's curved profiles (log-linear in nothing) at three level grids, 150 noisy sweeps each
    (2% relative standard error per mode and level): every reported crossing's 95% interval must hold a
    true crossing of its direction, and the true crossings inside a grid must be reported, not dodged
    (``seen``: the share of true crossings found; measured 34/300 and the rest below with family-wise verdicts; coverage 100%)."""
    assert profile in profiles.PROFILES and model  # the emulator's own model is the truth
    rng = random.Random(sum(map(ord, profile)))
    reported = covered = 0
    expected = found = 0
    for grid in GRIDS:
        base, spec, unused = analytic_results(profile, grid)
        truths = [(d, c) for d, c in true_crossings(profile, grid[-1]) if grid[0] <= c <= grid[-1]]
        for _dummy in range(150):
            b_levels, s_levels = [], []
            for b, s in zip(base["levels"], spec["levels"], strict=True):
                bx, b_ci = noisy(rng, b["output_tok_per_s"], 0.02)
                sx, s_ci = noisy(rng, s["output_tok_per_s"], 0.02)
                b_levels.append(dict(b, output_tok_per_s=bx, output_tok_per_s_ci95=b_ci))
                s_levels.append(dict(s, output_tok_per_s=sx, output_tok_per_s_ci95=s_ci))
            comp = cmp.compare_pair(result("baseline", b_levels), result("eagle3", s_levels), "baseline", "eagle3")
            for cross in comp["crossings"]:
                reported += 1
                lo, hi = cross["ci95"]
                covered += any(d == cross["direction"] and lo <= c <= hi for d, c in truths)
            for d, c in truths:
                expected += 1
                found += any(x["direction"] == d and x["ci95"][0] <= c <= x["ci95"][1] for x in comp["crossings"])
    assert reported and covered / reported >= 0.90, (covered, reported)
    assert found / expected >= seen, (found, expected)
