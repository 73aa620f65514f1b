"""Latency SLOs (specbench_compare.slo): each mode's capacity under the targets, family-wise over every
check, unclear and saturated levels kept so, the one-line recommendation, and bad targets refused with
the fix. Pure computation (< 1 s)."""

from __future__ import annotations

import math

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
    # the point figures meet up to C=32 (48 <= 50), surely up to 16, surely not at 64
    assert spec["estimate"] == 32 and spec["upper"] == 64 and base["estimate"] == 8 and base["upper"] == 16
    assert got["text"].startswith("with p99 TPOT <= 50 ms, p99 TTFT <= 2000 ms: eagle3 serves up to C=32 [16, 64], "
                                  "baseline up to C=8 [8, 16]: speculate (eagle3: meets it at C=16 where")
    assert got["verdict"]["speculate"] == ["eagle3"] and got["verdict"]["levels"]["eagle3"]["wins"] == [16]
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


def requests_of(lv: dict, rows: list) -> dict:
    lv["request_latencies"] = {"columns": ["ttft_ms", "tpot_ms", "e2e_ms", "output_tokens"], "rows": rows}
    return lv


def test_goodput_counts_the_tokens_of_requests_meeting_every_target():
    """600 requests of 100 tokens: 450 meet TPOT <= 50 ms and TTFT <= 2000 ms, 100 miss TPOT, 50 miss TTFT:
    goodput = 3/4 of the throughput; the share's cluster-robust interval (sd of a 0/1 share sqrt(p(1-p)/n))
    added to the throughput's +-5% on the log scale."""
    rows = [[100.0, 40.0, 4000.0, 100]] * 450 + [[100.0, 60.0, 6000.0, 100]] * 100 + [[2500.0, 10.0, 3500.0, 100]] * 50
    base = result("baseline", [requests_of(lat(level(c, 1000.0), 40), rows) for c in (1, 8)])
    got = cmp.summarize_host({"baseline": base}, "n1", "r1",
                             slo=parse_slo({"tpot_p99_ms": 50, "ttft_p99_ms": 2000}))["slo"]["modes"]["baseline"]
    row = got["levels"][0]
    assert row["goodput_share"] == 0.75 and row["goodput_requests"] == [450, 600]
    assert row["goodput_tok_per_s"] == pytest.approx(750.0)
    thr_lo, thr_hi = base["levels"][0]["output_tok_per_s_ci95"]
    share_half = 1.96 * (0.75 * 0.25 / 600) ** 0.5  # t(599) ~ 1.964, HC1 factor 600/599: within 0.5% of this
    width = ((math.log(thr_hi / thr_lo) / 2) ** 2 + (math.log((0.75 + share_half) / (0.75 - share_half)) / 2) ** 2) ** 0.5
    lo, hi = row["goodput_tok_per_s_ci95"]
    assert lo == pytest.approx(750.0 * math.exp(-width), rel=5e-3) and hi == pytest.approx(750.0 * math.exp(width), rel=5e-3)


def test_goodput_of_none_and_of_all_keeps_an_interval():
    """Every request meets (or none does): the share's interval is the rule of three (3/n), never a point."""
    good = [[100.0, 40.0, 4000.0, 100]] * 300
    bad = [[100.0, 90.0, 9000.0, 100]] * 300
    base = result("baseline", [requests_of(lat(level(1, 1000.0), 40), good), requests_of(lat(level(8, 1000.0), 40), bad)])
    rows = cmp.summarize_host({"baseline": base}, "n1", "r1", slo=parse_slo({"tpot_p99_ms": 50}))["slo"]["modes"][
        "baseline"]["levels"]
    assert rows[0]["goodput_share"] == 1.0 and rows[0]["goodput_tok_per_s_ci95"][0] < 1000.0 * (1 - 3 / 300) + 1e-6
    assert rows[1]["goodput_tok_per_s"] == 0.0 and rows[1]["goodput_tok_per_s_ci95"][0] == 0.0
    assert rows[1]["goodput_tok_per_s_ci95"][1] == pytest.approx(base["levels"][1]["output_tok_per_s_ci95"][1] * 0.01)


def test_no_request_rows_give_no_goodput():
    base = result("baseline", [lat(level(c, 1000.0), 40) for c in (1, 8)])
    row = cmp.summarize_host({"baseline": base}, "n1", "r1", slo=parse_slo({"tpot_p99_ms": 50}))["slo"]["modes"][
        "baseline"]["levels"][0]
    assert row["goodput_tok_per_s"] is None and row["goodput_tok_per_s_ci95"] is None


def slo_run(speedups, base_tpot, spec_tpot, slo=None):
    base = result("baseline", [lat(level(c, 100.0 * c), t) for c, t in zip(CONCS, base_tpot)])  # noqa: B905
    spec = result("eagle3", [lat(level(c, 100.0 * c * x), t)
                             for c, x, t in zip(CONCS, speedups, spec_tpot)])  # noqa: B905
    return cmp.summarize_host({"baseline": base, "eagle3": spec}, "n1", "r1",
                              slo=parse_slo(slo if slo is not None else {"tpot_p99_ms": 50}))


def test_the_slo_turns_speculation_on_where_only_it_meets_the_targets():
    """Speculation pays up to C=16 and loses above; from C=16 on only eagle3 meets p99 TPOT <= 50 ms: the table
    and the schedule speculate at every level, the SLO deciding 16 (both rules agree), 32 and 64."""
    plain = slo_run([1.3, 1.3, 1.3, 0.8, 0.8], [30, 45, 60, 80, 100], [20, 30, 40, 44, 46], slo={})
    assert plain["speculate_ranges"] == [[1, 17]]
    got = slo_run([1.3, 1.3, 1.3, 0.8, 0.8], [30, 45, 60, 80, 100], [20, 30, 40, 44, 46])
    assert [r["verdict"] for r in got["levels"]] == ["pays", "pays", "pays", "loses", "loses"]  # throughput, as was
    serve = got["comparisons"]["eagle3"]["serve_levels"]
    assert [r["verdict"] for r in serve] == ["pays"] * 5
    assert [r["why"] for r in serve][2:] == ["only eagle3 meets the SLO"] * 3
    assert got["speculate_ranges"] == [[1, 65]] and got["adaptive_config"] != plain["adaptive_config"]
    assert "Under the SLO, eagle3 speculates at C=1, 8, 16, 32, 64" in got["recommendation"]
    assert cmp.vllm_schedule(serve, 3, 128) == [[1, 64, 3], [65, 128, 0]]
    plan = cmp.serve_plan(got, "sglang")
    assert plan["mode"] == "eagle3-adaptive" and plan["adaptive_config"] == got["adaptive_config"]


def test_the_slo_turns_speculation_off_where_it_misses_and_the_baseline_meets():
    """Speculation pays everywhere, but at C=16 and 32 eagle3 misses p99 TPOT <= 50 ms where the baseline meets it:
    off there; at C=64 both miss and the throughput verdict (pays) decides."""
    got = slo_run([1.3] * 5, [20, 30, 40, 45, 100], [20, 30, 70, 80, 90])
    serve = got["comparisons"]["eagle3"]["serve_levels"]
    assert [r["verdict"] for r in serve] == ["pays", "pays", "misses the SLO", "misses the SLO", "pays"]
    assert got["speculate_ranges"] == [[1, 9], [64, 65]]
    table = got["adaptive_table"]
    assert table["9"] == [0] and table["64"] != [0] and not any(9 <= int(bs) < 64 and steps != [0] for bs, steps in table.items())
    assert cmp.vllm_schedule(serve, 3, 100) == [[1, 8, 3], [9, 63, 0], [64, 64, 3], [65, 100, 0]]
    assert "the SLO decided C=16: off, 32: off" in got["recommendation"]
    assert got["slo"]["verdict"]["baseline_better"] == ["eagle3"]


def test_a_level_pooled_from_launches_keeps_its_latency_intervals_and_reads_the_launch_spread():
    """Two launches of one level: the pooled p99 keeps an interval (the larger of the launches' spread on
    1 degree of freedom and their own), so the SLO check can read it; agreeing launches meet a target well
    above them, launches far apart stay unclear (t on 1 degree of freedom at the family's rate)."""
    from ansible_collections.specbench.core.plugins.module_utils.specbench_compare.pooling import pool_level

    agree = pool_level([lat(level(8, 800.0), 40.0, 0.02), lat(level(8, 810.0), 40.4, 0.02)])
    stats = agree["tpot_ms"]
    assert stats["p99"] == pytest.approx(40.2) and stats["p99_ci95"][0] < 40.0 and stats["p99_ci95"][1] > 40.4
    assert stats["p99_ci_terms"][1][1] is None and stats["p99_ci_terms"][0][1] == 1
    apart = pool_level([lat(level(8, 800.0), 30.0, 0.02), lat(level(8, 810.0), 46.0, 0.02)])
    base = result("baseline", [agree])
    got = cmp.summarize_host({"baseline": base}, "n1", "r1", slo={"tpot_p99_ms": 50.0})["slo"]
    assert got["modes"]["baseline"]["levels"][0]["status"] == "meets"
    got = cmp.summarize_host({"baseline": result("baseline", [apart])}, "n1", "r1", slo={"tpot_p99_ms": 50.0})["slo"]
    row = got["modes"]["baseline"]["levels"][0]
    # mean 38 < 50, but two launches 16 ms apart on 1 degree of freedom cannot say so at the family's rate
    assert row["status"] == "unclear" and row["checks"]["tpot_p99_ms"]["ci_family"][1] > 50
