"""compare.yml on one emulated H100 node (the Llama-3.1-8B profile, one GPU) reports GPU energy per
output token per mode and level with intervals, the energy ratio's family-wise verdict and the energy
crossover, each mode's capacity under latency SLOs and its goodput per level, in summary.json, summary.csv and report.md;
every results level files its telemetry. One
pinned launch per mode, 2-s windows (about 60-120 s beside the suite)."""
from __future__ import annotations

import csv
import json

import pytest
from compare_kit import LLAMA, node_vars, not_kept_up, run_playbook
from specbench_testkit import free_port, inventory, kill_node_servers

from ansible_collections.specbench.core.plugins.module_utils.specbench_client import stats

LEVELS = [8, 64]


def test_compare_reports_energy_per_token_with_verdicts(tmp_path):
    node = tmp_path / "node-h100"
    host = node_vars(node, free_port(), LLAMA, 2.0, sglang_server_tp_size=1, bench_concurrency=LEVELS,
                     bench_input_len=64, bench_output_len=64, bench_warmup_s=1, bench_window_s=2)
    try:
        run = run_playbook(tmp_path, "playbooks/compare.yml", inventory({"h100": host}),
                           extravars={"results_dir": str(tmp_path / "results"), "run_id": "energy",
                                      "compare_slo": {"tpot_p99_ms": 60, "ttft_p99_ms": 2000}}, timeout=900)
    finally:
        kill_node_servers(node)
    assert run.rc == 0, run.stdout[-4000:]
    host_dir = tmp_path / "results" / "energy" / "h100"
    assert not not_kept_up(host_dir), not_kept_up(host_dir)
    for mode in ("baseline", "eagle3"):
        for level in json.loads((host_dir / f"{mode}.json").read_text())["levels"]:
            window = level["gpu_telemetry"][0]
            assert window["source"] == "emulated" and window["energy_source"] == "counter"
            assert [g["index"] for g in window["gpus"]] == [0]  # the server's one GPU
            assert level["energy_j_per_output_token"] > 0
            # each request's latencies, which goodput compares with the SLO, on the percentiles' own scale (node speed)
            tpots = [r[1] for r in level["request_latencies"]["rows"] if r[1] is not None]
            assert stats.summary(tpots)["p99"] == pytest.approx(level["tpot_ms"]["p99"], rel=1e-3)
    summary = json.loads((host_dir / "summary.json").read_text())
    comp = summary["comparisons"]["eagle3"]
    for row in comp["levels"]:
        for mode in ("baseline", "eagle3"):
            lo, hi = row[mode]["energy_j_per_output_token_ci95"]
            assert lo < row[mode]["energy_j_per_output_token"] < hi
        assert row["energy_verdict"] in ("saves", "costs more", "unclear"), row
        assert row["energy_ratio_ci_family"][0] < row["energy_ratio"] < row["energy_ratio_ci_family"][1]
    assert comp["energy"]["family"]["levels"] == len(LEVELS) and comp["energy"]["crossover"]["text"]
    rows = list(csv.DictReader((host_dir / "summary.csv").open()))
    assert all(r["energy_verdict"] for r in rows)
    assert all(r["baseline_slo_status"] and r["spec_goodput_tok_per_s"] for r in rows)
    slo = summary["slo"]
    assert set(slo["modes"]) == {"baseline", "eagle3"} and slo["text"].startswith("with p99 TPOT <= 60 ms")
    for info in slo["modes"].values():
        assert [r["concurrency"] for r in info["levels"]] == LEVELS
        assert all(r["status"] in ("meets", "misses", "unclear") for r in info["levels"])
        for row in info["levels"]:  # goodput: the tokens/s of the requests meeting both targets, with its interval
            lo, hi = row["goodput_tok_per_s_ci95"]
            assert lo <= row["goodput_tok_per_s"] <= hi and 0 <= row["goodput_share"] <= 1
            assert row["goodput_requests"][0] <= row["goodput_requests"][1]
    # what to serve comes from the SLO decision: every level's serve verdict and the sentence saying which decided
    serve = comp["serve_levels"]
    assert [r["concurrency"] for r in serve] == LEVELS and all(r["why"] for r in serve)
    assert "Under the SLO, eagle3 speculates at" in summary["recommendation"]
    report = (host_dir / "report.md").read_text()
    assert "**Latency SLO**" in report and "## Latency SLO and goodput, per level" in report
    assert "![p99 latency (TPOT and TTFT) with intervals](latency-p99.png)" in report
    assert "![GPU energy per output token](energy.png)" in report
    print(slo["text"])
    start = report.index("### GPU energy per output token")
    print(report[start:report.index("Energy crossover", start) + 200])
