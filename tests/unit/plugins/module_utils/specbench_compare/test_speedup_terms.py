"""Why the crossover falls there (specbench_compare/breakdown.py): each level's speedup beside
accept length and the step-time ratio, on synthetic closed-loop data whose terms are known, and
the per-category table; the report's table, category section and plot."""

from __future__ import annotations

import math

import pytest
from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep

LEVELS = [1, 4, 16, 64, 256]
OUT = 256  # output tokens per request


def truth(c: int) -> tuple[float, float, float]:
    """(baseline step ms, accept length, step-time ratio) at C: acceptance falls with C, a verify
    step gets dearer relative to a plain one (the two reasons speculation stops paying)."""
    return 10.0 * (1 + c / 50), 3.0 - 0.5 * math.log10(c), 1.3 + c / 40


def synthetic(ttft_ms: float) -> dict:
    """Closed loop: C streams, each request TTFT + OUT tokens at the mode's ITL, so throughput =
    C x OUT / (TTFT + OUT x ITL). Spec ITL = ratio x baseline step / accept length."""
    base, spec = [], []
    for c in LEVELS:
        step, accept, ratio = truth(c)
        for itl, rows, acc in ((step, base, None), (ratio * step / accept, spec, accept)):
            lv = level(c, c * OUT * 1000.0 / (ttft_ms + OUT * itl), accept=acc, tpot_ms=itl)
            rows.append(lv)
    return cmp.summarize_host({"baseline": result("baseline", base), "eagle3": result("eagle3", spec)}, "n", "r")


def test_the_terms_recover_accept_length_and_step_ratio_and_multiply_to_the_speedup():
    """Without TTFT the decode speedup is the throughput speedup: accept / ratio equals the measured
    speedup to the summary's rounding (4 significant digits: 5e-4 relative)."""
    summary = synthetic(ttft_ms=0.0)
    for row in summary["levels"]:
        unused, accept, ratio = truth(row["concurrency"])
        assert row["accept_length"] == pytest.approx(accept, rel=5e-4)
        assert row["step_time_ratio"] == pytest.approx(ratio, rel=5e-4)
        assert row["speedup_from_terms"] == pytest.approx(accept / ratio, rel=1e-3)
        assert row["speedup"] == pytest.approx(row["speedup_from_terms"], rel=1e-3)
    # speculation stops paying between C=16 and 64 here, and the terms say why: both moved
    verdicts = {r["concurrency"]: r["speedup"] > 1 for r in summary["levels"]}
    assert verdicts == {1: True, 4: True, 16: True, 64: False, 256: False}
    assert "step_time_ratio" in summary["method"]["speedup_terms"]


def test_ttft_dilutes_the_measured_speedup_towards_one():
    """With a TTFT the same in both modes the throughput speedup is
    (T + n x ITL_b) / (T + n x ITL_s): between 1 and the decode speedup accept / ratio, exactly."""
    summary = synthetic(ttft_ms=50.0)
    for row in summary["levels"]:
        lo, hi = sorted((1.0, row["speedup_from_terms"]))
        assert lo - 1e-3 <= row["speedup"] <= hi + 1e-3
        step, accept, ratio = truth(row["concurrency"])
        exact = (50.0 + OUT * step) / (50.0 + OUT * ratio * step / accept)
        assert row["speedup"] == pytest.approx(exact, rel=1e-3)


def test_missing_accept_length_gives_no_terms():
    base = result("baseline", [level(1, 100.0)])
    spec = result("eagle3", [level(1, 150.0, accept=None)])
    row = cmp.summarize_host({"baseline": base, "eagle3": spec}, "n", "r")["levels"][0]
    assert row["step_time_ratio"] is None and row["speedup_from_terms"] is None


def categorised(c: int, tok_s: float, itl: float, accepts: dict | None, steps: int = 10000) -> dict:
    lv = level(c, tok_s, accept=None, tpot_ms=itl)
    if accepts:
        lv["accept_length"] = sum(accepts.values()) / len(accepts)  # equal steps per category
    lv["categories"] = [{"category": k, "requests": 10, "output_tokens": 1000, "throughput_share": 0.5,
                         "accept_length": (accepts or {}).get(k), "verify_steps": steps if accepts else 0}
                        for k in ("code", "chat")]
    return lv


def test_per_category_decode_speedup_and_who_pays_longest():
    """A mixed batch shares its step: a category's decode speedup is its accept length / the
    level's step-time ratio. Its interval: the level's log half-width and 1.96 / sqrt(steps) in
    quadrature (10000 steps: 0.0196)."""
    base, spec = [], []
    for c, step, accepts, ratio in ((1, 10.0, {"code": 3.0, "chat": 2.0}, 1.5),
                                    (8, 12.0, {"code": 2.8, "chat": 1.8}, 2.0),
                                    (64, 20.0, {"code": 2.6, "chat": 1.6}, 2.4)):
        base.append(categorised(c, 1000.0 * c / step, step, None))
        mean = sum(accepts.values()) / 2
        spec.append(categorised(c, 1000.0 * c * mean / (ratio * step), ratio * step / mean, accepts))
    summary = cmp.summarize_host({"baseline": result("baseline", base), "eagle3": result("eagle3", spec)}, "n", "r")
    row = summary["levels"][1]
    assert row["step_time_ratio"] == pytest.approx(2.0, rel=1e-3)
    cats = {c["category"]: c for c in row["categories"]}
    assert cats["code"]["speedup"] == pytest.approx(2.8 / 2.0, rel=1e-3)
    assert cats["chat"]["speedup"] == pytest.approx(1.8 / 2.0, rel=1e-3)
    w_level = math.log(1.02 / 0.98) / 2  # synthetic levels: +-2 % each; ratio_ci adds the two in quadrature
    w = math.hypot(math.hypot(w_level, w_level), 1.96 / 100)
    assert cats["code"]["speedup_ci95"][1] == pytest.approx(1.4 * math.exp(w), rel=1e-3)
    assert cats["code"]["verdict"] == "pays" and cats["chat"]["verdict"] == "loses"
    paying = summary["categories_paying"]
    assert paying["pays_up_to"] == {"code": 64, "chat": 1} and paying["longest"] == ["code"]
    text = rep.render_markdown(summary)
    assert "## Per category (eagle3, EMULATED)" in text  # synthetic results say engine: emulator
    assert "| 8 | code | 2.80 | 0.500 | 1.400 [" in text
    assert "keeps paying longest on code" in text


def test_report_shows_the_terms_table_and_plot(tmp_path):
    summary = synthetic(ttft_ms=50.0)
    plots = rep.render_plots(summary, str(tmp_path))
    assert plots["terms"] == "speedup-terms.png" and (tmp_path / "speedup-terms.png").read_bytes()[:4] == b"\x89PNG"
    text = rep.render_markdown(summary, plots)
    assert "## Why the crossover falls there (eagle3)" in text
    assert "| C | speedup [95%] | accept length | step-time ratio | accept / ratio | verdict |" in text
    assert "![Accept length and step-time ratio](speedup-terms.png)" in text


def test_categories_run_separately_get_a_crossover_each():
    """bench_categories: separate: every level once per category; each category is compared on
    its own levels, and the one whose speedup stays clearly above 1 longest is named."""
    gains = {"code": {1: 1.6, 8: 1.3, 64: 1.2}, "chat": {1: 1.3, 8: 0.8, 64: 0.7}}
    base, spec = [], []
    for cat, by_c in gains.items():
        for c, gain in by_c.items():
            base.append(dict(level(c, 1000.0 * c), category=cat))
            spec.append(dict(level(c, 1000.0 * c * gain, accept=2.0), category=cat))
    summary = cmp.summarize_host({"baseline": result("baseline", base, concurrency=[1, 8, 64]),
                                  "eagle3": result("eagle3", spec, concurrency=[1, 8, 64])}, "n", "r")
    cross = summary["category_crossovers"]
    assert cross["categories"]["code"]["pays_up_to"] == 64 and cross["categories"]["chat"]["pays_up_to"] == 1
    assert cross["longest"] == ["code"]
    assert summary["headline_category"] == "code"  # every level ran per category
    assert [r["concurrency"] for r in summary["levels"]] == [1, 8, 64]
    text = rep.render_markdown(summary)
    assert "## Crossover per category (EMULATED)" in text and "| code |" in text
    assert "keeps paying longest on code" in text


def test_a_saturated_level_is_no_evidence_for_its_categories():
    base = [categorised(1, 100.0, 10.0, None), categorised(8, 800.0, 10.0, None)]
    spec = [categorised(1, 150.0, 4.0, {"code": 3.0, "chat": 2.0}),
            categorised(8, 1200.0, 4.0, {"code": 3.0, "chat": 2.0})]
    spec[1]["saturated"] = ["engine: delivered 40% of its own model's rate"]
    summary = cmp.summarize_host({"baseline": result("baseline", base), "eagle3": result("eagle3", spec)}, "n", "r")
    assert {c["verdict"] for c in summary["levels"][1]["categories"]} == {"saturated"}
    assert summary["categories_paying"]["pays_up_to"] == {"code": 1, "chat": 1}
