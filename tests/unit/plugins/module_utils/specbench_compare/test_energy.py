"""Energy per output token per mode and level, and the energy ratio speculation / baseline with its
family-wise verdict (specbench_compare.energy): in the comparison's rows, summary, report.md and
summary.csv; confounded levels are not decided; false claims on ties held to the family's 5% by
simulation. Pure computation (< 5 s)."""

from __future__ import annotations

import csv
import io
import math
import random

from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import energy as en
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare.pooling import pool_level

CONCS = (1, 4, 16, 64)


def with_energy(lv: dict, joules: float | None, rel_bound: float = 0.005, confounders=()) -> dict:
    lv["energy_j_per_output_token"] = joules
    if joules is not None:
        lv["energy_j_per_output_token_bounds"] = [joules * (1 - rel_bound), joules * (1 + rel_bound)]
    lv["energy_confounders"] = list(confounders)
    return lv


def pair(base_j, spec_j, spec_confounders=None):
    base = result("baseline", [with_energy(level(c, 1000.0 * c), j) for c, j in zip(CONCS, base_j)])  # noqa: B905
    spec = result("eagle3", [with_energy(level(c, 1000.0 * c), j, confounders=(spec_confounders or {}).get(c, ()))
                             for c, j in zip(CONCS, spec_j)])  # noqa: B905
    return base, spec


def test_verdicts_crossover_and_outputs():
    """Speculation saves at C=1 and 4, costs more at 16 and 64; the crossover lies between 4 and 16."""
    base, spec = pair([1.0, 0.5, 0.2, 0.1], [0.6, 0.4, 0.3, 0.15])
    comp = cmp.compare_pair(base, spec, "baseline", "eagle3")
    rows = {r["concurrency"]: r for r in comp["levels"]}
    assert [rows[c]["energy_verdict"] for c in CONCS] == ["saves", "saves", "costs more", "costs more"]
    lo, hi = rows[1]["energy_ratio_ci_family"]
    assert lo < 0.6 < hi < 1.0 and rows[1]["energy_ratio"] == 0.6
    # the family-wise interval is wider than the level's own
    assert rows[1]["energy_ratio_ci_family"][0] < rows[1]["energy_ratio_ci95"][0]
    assert rows[1]["baseline"]["energy_j_per_output_token"] == 1.0
    assert rows[1]["eagle3"]["energy_j_per_output_token_ci95"][0] < 0.6
    cross = comp["energy"]["crossover"]
    assert cross["bracket"] == [4, 16] and 4 < cross["concurrency"] < 16
    assert comp["energy"]["family"]["levels"] == 4
    summary = {"host": "n1", "baseline_mode": "baseline", "comparisons": {"eagle3": comp}}
    csv_rows = list(csv.DictReader(io.StringIO(rep.render_csv(summary))))
    assert [r["energy_verdict"] for r in csv_rows] == ["saves", "saves", "costs more", "costs more"]
    assert float(csv_rows[0]["spec_energy_j_per_token"]) == 0.6
    text = "\n".join(rep._energy_table(comp, "baseline", "eagle3"))
    assert "Energy crossover" in text and "| 16 |" in text


def test_confounded_in_one_mode_is_not_decided():
    base, spec = pair([1.0, 0.5, 0.2, 0.1], [0.6, 0.4, 0.3, 0.15],
                      spec_confounders={4: ["GPU 0 throttled during the window (sw_power_cap)"]})
    rows = {r["concurrency"]: r for r in cmp.compare_pair(base, spec, "baseline", "eagle3")["levels"]}
    assert rows[4]["energy_verdict"] == "confounded"
    assert rows[4]["energy_ratio_ci_family"] is None and "sw_power_cap" in rows[4]["energy_confounders"][0]
    assert rows[1]["energy_verdict"] == "saves"


def test_no_telemetry_and_saturated_stay_so():
    base, spec = pair([1.0, None, 0.2, 0.1], [0.6, 0.4, 0.3, 0.15])
    spec["levels"][3]["saturated"] = ["client: 95% of a core"]
    rows = {r["concurrency"]: r for r in cmp.compare_pair(base, spec, "baseline", "eagle3")["levels"]}
    assert rows[4]["energy_verdict"] == "no telemetry"
    assert rows[64]["energy_verdict"] == "saturated"


def test_pooled_launches_carry_their_spread():
    launches = [with_energy(level(4, 4000.0), j) for j in (0.50, 0.52, 0.49)]
    pooled = pool_level(launches)
    assert pooled["energy_launches"] == 3
    assert math.isclose(pooled["energy_j_per_output_token"], (0.50 + 0.52 + 0.49) / 3, rel_tol=1e-5)
    lo, hi = pooled["energy_j_per_output_token_ci95"]
    assert lo < 0.49 and hi > 0.52
    assert pooled["energy_ci_terms"][0][1] == 2  # the spread's term on k - 1 degrees of freedom
    assert en.side(pooled)["parts"] == pooled["energy_ci_terms"]


def test_false_claims_on_ties_within_the_family():
    """Eight levels, energy per token equal in both modes (a tie everywhere): each mode's figure drawn
    with its own window noise (the throughput interval it borrows, +-2% at 95%) and counter bounds.
    A run with any level read ``saves`` or ``costs more`` is a false claim; the family's rate must stay
    at 5% or under (binomial: 400 runs, allowed up to 8%, three standard errors over 5%)."""
    rng = random.Random(52)
    concs = (1, 2, 4, 8, 16, 32, 64, 128)
    sd = math.log(1.02) / 1.959964
    claims = 0
    runs = 400
    for _ in range(runs):
        levels = {}
        for mode in ("baseline", "eagle3"):
            lvs = []
            for c in concs:
                lv = level(c, 1000.0 * c, rel_half=0.02)
                lvs.append(with_energy(lv, 0.3 * math.exp(rng.gauss(0.0, sd)), rel_bound=0.0))
            levels[mode] = result(mode, lvs)
        comp = cmp.compare_pair(levels["baseline"], levels["eagle3"], "baseline", "eagle3")
        claims += any(r["energy_verdict"] in ("saves", "costs more") for r in comp["levels"])
    print(f"false energy claims on ties: {claims}/{runs}")
    assert claims / runs <= 0.08
