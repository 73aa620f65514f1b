"""Latency SLOs (specbench_compare.slo): each mode's capacity under the targets, family-wise over every
check, unclear and saturated levels kept so, the one-line recommendation, and bad targets refused with
the fix. Pure computation (< 1 s)."""

from __future__ import annotations

import pytest
from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.specbench_compare.slo import SloError, parse_slo

CONCS = (1, 8, 16, 32, 64)


def lat(lv: dict, tpot99: float, rel: float = 0.05) -> dict:
    lv["tpot_ms"] = {"mean": tpot99 / 2, "p50": tpot99 / 2, "p90": tpot99 * 0.8, "p99": tpot99,
                     "p99_ci95": [tpot99 * (1 - rel), tpot99 * (1 + rel)]}
    lv["ttft_ms"] = {"mean": 50.0, "p50": 50.0, "p90": 80.0, "p99": 100.0, "p99_ci95": [95.0, 105.0]}
    return lv


def summary(base_tpot, spec_tpot, slo):
    base = result("baseline", [lat(level(c, 100.0 * c), t) for c, t in zip(CONCS, base_tpot)])  # noqa: B905
    spec = result("eagle3", [lat(level(c, 100.0 * c), t) for c, t in zip(CONCS, spec_tpot)])  # noqa: B905
    return cmp.summarize_host({"baseline": base, "eagle3": spec}, "n1", "r1", slo=parse_slo(slo))


def test_capacity_per_mode_and_recommendation():
    got = summary([30, 45, 60, 80, 100], [20, 30, 40, 48, 70], {"tpot_p99_ms": 50, "ttft_p99_ms": 2000})["slo"]
    base, spec = got["modes"]["baseline"], got["modes"]["eagle3"]
    # +-5% at 95% is +-7.8% family-wise (z 3.02 over 20 checks): 45 meets 50, 60 misses it, 48 straddles it
    assert base["capacity"] == 8 and base["bracket"] == [8, 16] and base["next_status"] == "misses"
    assert spec["capacity"] == 16 and spec["bracket"] == [16, 32] and spec["next_status"] == "unclear"
    assert [r["status"] for r in spec["levels"]] == ["meets", "meets", "meets", "unclear", "misses"]
    assert "eagle3 serves up to C=16" in got["text"] and "speculate (eagle3)" in got["text"]
    assert "20 checks" in got["method"]  # 5 levels x 2 targets x 2 modes: one family


def test_saturated_levels_stay_so_and_no_targets_give_nothing():
    base = result("baseline", [lat(level(c, 100.0 * c), 10) for c in CONCS])
    base["levels"][2]["saturated"] = ["client: 95% of a core"]
    got = cmp.summarize_host({"baseline": base}, "n1", "r1", slo={"tpot_p99_ms": 50.0})["slo"]
    rows = got["modes"]["baseline"]["levels"]
    assert rows[2]["status"] == "saturated" and got["modes"]["baseline"]["capacity"] == 8
    assert cmp.summarize_host({"baseline": base}, "n1", "r1")["slo"] is None


@pytest.mark.parametrize("bad, words", [({"tpot_p95_ms": 50}, "tpot_p99_ms"), ({"tpot_p99_ms": -1}, "positive"),
                                        ("50ms", "mapping")])
def test_bad_targets_name_the_fix(bad, words):
    with pytest.raises(SloError, match=words):
        parse_slo(bad)
