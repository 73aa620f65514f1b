"""Sequential launches (specbench_compare.sequential): the error rate spent over the looks, the rows a run keeps,
the levels an added round measures, and the whole design's false-claim rate and power on known truths (the
figures at 1000 runs per cell: benchmarks/decision_coverage.py sequential, power, drift, embedded)."""
from __future__ import annotations

import math
import random

import design_sim as dc  # tests/compare: the simulation benchmarks/decision_coverage.py prints the figures of
import pytest

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.stats import t_two_sided

LEVELS = dc.SEED_LEVELS


def test_the_looks_spend_the_family_wise_rate_once_in_all():
    assert cmp.look_alphas(0) == [0.05]
    alphas = cmp.look_alphas(4)
    assert len(alphas) == 5 and math.isclose(sum(alphas), 0.05)
    assert alphas[0] > alphas[1] == alphas[4]


def row(conc, verdict, launches, speedup=1.0, ci=(0.9, 1.1)):
    return {"concurrency": conc, "verdict": verdict, "launches": launches, "speedup": speedup,
            "speedup_ci95": list(ci), "speedup_ci_family": list(ci)}


def test_a_level_keeps_the_first_clear_verdict_while_it_was_measured_in_every_look():
    look1 = [row(1, "unclear", 2), row(5, "loses", 1, 0.5, (0.45, 0.55)), row(10, "unclear", 1)]
    # Look 2: C=1 measured again (3 launches), now pays; C=5 was decided and not measured again (its row there,
    # read with another floor, would say unclear: it keeps look 1's); C=10 not measured again: never re-read.
    look2 = [row(1, "pays", 3, 1.2, (1.05, 1.3)), row(5, "unclear", 1), row(10, "pays", 1, 1.3, (1.1, 1.5))]
    rows, seq = cmp.merge_looks([look1, look2])
    got = {r["concurrency"]: r for r in rows}
    assert got[1]["verdict"] == "pays" and got[1]["look"] == 2 and got[1]["looks"] == 2
    assert got[5]["verdict"] == "loses" and got[5]["look"] == 1 and seq["levels"][5]["decided_at"] == 1
    assert got[10]["verdict"] == "unclear" and got[10]["looks"] == 1 and "left after look 1" in got[10]["sequential_stop"]
    # A level dropped at look 2 is not picked up again at look 3, whatever it would read.
    look3 = [row(1, "pays", 3, 1.2, (1.05, 1.3)), row(5, "unclear", 1), row(10, "pays", 2, 1.3, (1.1, 1.5))]
    rows, seq = cmp.merge_looks([look1, look2, look3])
    assert {r["concurrency"]: r["verdict"] for r in rows}[10] == "unclear" and seq["looks"] == 3


def comparison(rows, floor_df=12):
    return {"levels": rows, "family": {"levels": len(rows)}, "launch_variation": {"floor": {"df": floor_df}}}


def test_a_round_measures_the_levels_more_launches_could_decide_and_leaves_a_tie():
    close = row(1, "unclear", 2, 1.08, (1.0, 1.166))  # log sd ~0.035: six launches reach it
    tie = row(2, "unclear", 2, 1.001, (0.96, 1.04))
    done = row(5, "loses", 2, 0.5, (0.45, 0.55))
    plan = cmp.plan_round({"eagle3": comparison([close, tie, done])}, 1, 4, 6, 0.0, None, 10.0, 30.0, "baseline")
    assert not plan["done"] and plan["levels"] == {"baseline": [1], "eagle3": [1]}
    assert plan["order"] == ["baseline", "eagle3"] and plan["estimate_s"] == pytest.approx(2 * (30 + 10))
    assert "C=2 1.001" in plan["text"]
    # The second round launches B A (drift falls on both modes alike), at levels measured in every look so far.
    again = dict(close, looks=2, launches=3)
    assert cmp.plan_round({"eagle3": comparison([again])}, 2, 4, 6, 0.0, None, 10.0, 30.0, "baseline")["order"] == [
        "eagle3", "baseline"]
    assert cmp.plan_round({"eagle3": comparison([close])}, 2, 4, 6, 0.0, None, 10.0, 30.0, "baseline")["done"]
    # The budget: no rounds left, the launches spent, or the time.
    assert cmp.plan_round({"eagle3": comparison([close])}, 5, 4, 6, 0.0, None, 10.0, 30.0, "baseline")["done"]
    spent = dict(close, launches=6)
    assert cmp.plan_round({"eagle3": comparison([spent])}, 1, 4, 6, 0.0, None, 10.0, 30.0, "baseline")["done"]
    late = cmp.plan_round({"eagle3": comparison([close])}, 1, 4, 6, 100.0, 120.0, 10.0, 30.0, "baseline")
    assert late["done"] and "compare_time_budget_s" in late["text"]
    # A tie alone: no round.
    assert cmp.plan_round({"eagle3": comparison([tie, done])}, 1, 4, 6, 0.0, None, 10.0, 30.0, "baseline")["done"]


def test_a_floor_term_is_scaled_for_a_shared_launch_effect_and_for_each_levels_own():
    """[df, df_levels]: the larger of t on df at the whole family's rate and t on df_levels at each level's."""
    parts = [[[0.01, None]], [[0.05, [4, 20]]]]
    ci = cmp.family_ci(1.0, [0.9, 1.1], cmp.family_z(8), parts=parts, alpha_family=0.05 / 8, alpha_total=0.05)
    scale = max(t_two_sided(0.05, 4), t_two_sided(0.05 / 8, 20))
    want = math.hypot(0.01 * cmp.family_z(8) / 1.959964, 0.05 * scale / t_two_sided(0.05, 4))
    assert math.log(ci[1]) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize(("which", "rho", "launch_sd"), [("first", 1.0, 0.05), ("later", 0.0, 0.05)])
def test_the_default_design_reads_a_tie_as_a_tie_however_many_looks(which, rho, launch_sd):
    """A true tie at 8 levels through the whole default design (planned launches, added rounds): any claim at any
    level and look in at most 5% of runs (measured 0-4%, decision_coverage.py sequential), each level's 95%
    interval covering 90% or more."""
    rng = random.Random(f"seq-{which}-{rho}-{launch_sd}")
    n = 150
    hit, cover, total, unused, unused_total = dc.tie_cell(rng, n, which, launch_sd=launch_sd, rho=rho)
    assert cover / total >= 0.90, (cover, total)
    # 5% nominal, plus 2.33 binomial standard deviations at n runs (one-sided 1%): 9.1% at 150.
    assert hit / n <= 0.05 + 2.33 * math.sqrt(0.05 * 0.95 / n), hit


def test_a_ten_per_cent_gain_is_decided_within_the_default_budget():
    """At 3% launch sd, a true 1.10x reads pays at C=1 in most first runs within compare_max_launches (measured
    87-97% at 1000 runs, decision_coverage.py power); 60 runs here: at least 65%."""
    rng = random.Random("seq-power")
    n = 60
    pays = sum(dc.design_run(rng, dict.fromkeys(LEVELS, 1.10), 0.03, 0.02)["comp"]["levels"][0]["verdict"] == "pays"
               for _ in range(n))
    assert pays / n >= 0.65, pays
