"""Latency percentiles with intervals (specbench_client.stats.quantile_ci95) and the p99 latency ratios
speculation / baseline with their family-wise verdicts (specbench_compare.latency), in the rows,
summary.csv and report.md. Pure computation, fixed seeds (< 5 s)."""

from __future__ import annotations

import csv
import io
import random

from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.stats import quantile_ci95, summary


def test_percentile_intervals_cover_the_truth():
    """Exponential latencies (mean 1): the true p50, p90, p99 are ln 2, ln 10, ln 100. Over 400 samples of
    600 requests each interval must cover in at least 92% (95% nominal; binomial sd 1.1% at 400)."""
    rng = random.Random(52)
    truth = {50: 0.6931471805599453, 90: 2.302585092994046, 99: 4.605170185988092}
    cover = dict.fromkeys(truth, 0)
    runs = 400
    for _ in range(runs):
        values = sorted(rng.expovariate(1.0) for _ in range(600))
        for p, t in truth.items():
            ci = quantile_ci95(values, p)
            cover[p] += bool(ci) and ci[0] <= t <= ci[1]
    print("coverage:", {p: c / runs for p, c in cover.items()})
    assert all(c / runs >= 0.92 for c in cover.values()), cover


def test_too_few_requests_give_no_p99_interval():
    assert quantile_ci95(sorted(range(50)), 99) is None
    stats = summary([0.01 * i for i in range(1, 801)], 1000.0, ci=True)  # a p99 needs ~600 requests
    assert stats["p99_ci95"] and stats["p99_ci95"][0] <= stats["p99"] <= stats["p99_ci95"][1]


def lat(lv: dict, tpot99: float, ttft99: float, rel: float = 0.05) -> dict:
    lv["tpot_ms"] = {"mean": tpot99 / 2, "p50": tpot99 / 2, "p90": tpot99 * 0.8, "p99": tpot99,
                     "p99_ci95": [tpot99 * (1 - rel), tpot99 * (1 + rel)]}
    lv["ttft_ms"] = {"mean": ttft99 / 2, "p50": ttft99 / 2, "p90": ttft99 * 0.8, "p99": ttft99,
                     "p99_ci95": [ttft99 * (1 - rel), ttft99 * (1 + rel)]}
    return lv


def test_latency_ratios_and_their_verdicts():
    concs = (1, 8, 64)
    base = result("baseline", [lat(level(c, 100.0 * c), 20.0, 100.0) for c in concs])
    spec = result("eagle3", [lat(level(c, 100.0 * c), t, 100.0) for c, t in zip(concs, (10.0, 19.0, 30.0))])  # noqa: B905
    comp = cmp.compare_pair(base, spec, "baseline", "eagle3")
    rows = {r["concurrency"]: r for r in comp["levels"]}
    assert [rows[c]["tpot_p99_ratio_verdict"] for c in concs] == ["faster", "unclear", "slower"]
    assert all(rows[c]["ttft_p99_ratio_verdict"] == "unclear" for c in concs)
    assert rows[1]["eagle3"]["tpot_p99_ms"] == 10.0 and rows[1]["eagle3"]["tpot_p99_ms_ci95"] == [9.5, 10.5]
    assert comp["latency"]["family_levels"]["tpot_p99"] == 3
    summary_doc = {"host": "n1", "baseline_mode": "baseline", "comparisons": {"eagle3": comp}}
    csv_rows = list(csv.DictReader(io.StringIO(rep.render_csv(summary_doc))))
    assert [r["tpot_p99_verdict"] for r in csv_rows] == ["faster", "unclear", "slower"]
    assert "### p99 latency" in "\n".join(rep._latency_table(comp, "baseline", "eagle3"))
