"""Rendering: summary.csv, report.md (confounders first), the plots, the fleet index."""

from __future__ import annotations

import csv
import io
import json

from compare_synth import analytic_results, level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import index as idx
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep

PNG = b"\x89PNG\r\n\x1a\n"


def kimi_summary(**kw) -> dict:
    base, spec, _unused1 = analytic_results("kimi-k2.5-8x-rtx-pro-6000", [1, 2, 5, 10])
    return cmp.summarize_host({"baseline": base, "eagle3": spec}, "node-a", "run-1", **kw)


def test_csv_has_one_row_per_level_with_speedups_and_intervals():
    summary = kimi_summary()
    rows = list(csv.DictReader(io.StringIO(rep.render_csv(summary))))
    assert [int(r["concurrency"]) for r in rows] == [1, 2, 5, 10]
    assert set(rep.CSV_COLUMNS) == set(rows[0])
    first = rows[0]
    assert float(first["speedup_lo"]) < float(first["speedup"]) < float(first["speedup_hi"])
    assert first["spec_mode"] == "eagle3" and first["verdict"] == "pays"


def test_report_puts_confounders_first_then_the_verdict_tables_and_the_adaptive_config():
    base = result("baseline", [level(1, 92.6), level(70, 690.0)])
    spec = result("eagle3", [level(1, 96.1, accept=2.2), level(70, 340.0, accept=2.2, running=48, queued=22)],
                  server={"max_running_requests": 48, "server_info": {"max_running_requests": 48}})
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node-a", "run-1")
    text = rep.render_markdown(summary, {"throughput": "throughput.png", "per_stream": "per-stream.png"})
    order = [text.index(h) for h in ("## Confounders", "## Verdict", "## Plots", "## eagle3 against baseline",
                                     "## SGLang adaptive speculation", "## Method")]
    assert order == sorted(order)
    assert "at most 48 requests" in text
    assert "![Output throughput](throughput.png)" in text and "![Per-stream decode speed](per-stream.png)" in text
    assert '"2": {"candidate_steps": [0]}' in text
    assert "--speculative-adaptive-config adaptive-config.json" in text


def test_an_incomplete_report_says_so_at_the_top():
    base, _unused1, _unused2 = analytic_results("kimi-k2.5-8x-rtx-pro-6000", [1, 2])
    summary = cmp.summarize_host({"baseline": base}, "node-a", "run-1", modes=["baseline", "eagle3"],
                                 outcomes={"eagle3": {"status": "failed", "error": "launch of eagle3: exited at startup"}})
    text = rep.render_markdown(summary)
    assert text.index("**INCOMPLETE**") < text.index("## Confounders")
    assert "eagle3: failed: launch of eagle3: exited at startup" in text
    assert "No recommendation" in text


def test_plots_are_pngs_for_throughput_per_stream_and_speedup(tmp_path):
    summary = kimi_summary()
    written = rep.render_plots(summary, str(tmp_path), dpi=60)
    assert written == {k: v for k, v in rep.PLOTS.items() if k != "energy"}  # no telemetry in these results
    for name in written.values():
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000


def test_plots_cope_with_a_mode_that_has_no_throughput(tmp_path):
    base, _unused1, _unused2 = analytic_results("kimi-k2.5-8x-rtx-pro-6000", [1, 2])
    spec = result("eagle3", [level(1, None, error="every request failed")])
    summary = cmp.summarize_host({"baseline": base, "eagle3": spec}, "node-a", "run-1")
    # The baseline's latencies still draw the latency plot; the speculative mode adds no point to any.
    assert set(rep.render_plots(summary, str(tmp_path), dpi=50)) == {"throughput", "per_stream", "speedup", "latency",
                                                                      "latency_p99"}


def test_p99_latency_and_energy_plots_with_intervals_and_the_slo(tmp_path):
    """Levels with p99 intervals and energy per token: both plots drawn, inlined in report.html by the same
    path as the others, named in report.md."""
    levels = {}
    for mode, joules in (("baseline", 0.30), ("eagle3", 0.24)):
        rows = []
        for c in (1, 8, 64):
            lv = level(c, 100.0 * c * (1.2 if mode == "eagle3" else 1.0))
            lv["tpot_ms"].update(p99=20.0 + c, p99_ci95=[19.0 + c, 22.0 + c])
            lv["ttft_ms"].update(p99=100.0 + c, p99_ci95=[95.0 + c, 110.0 + c])
            lv.update(energy_j_per_output_token=joules / c ** 0.5, energy_confounders=[])
            rows.append(lv)
        levels[mode] = result(mode, rows)
    summary = cmp.summarize_host(levels, "node-a", "run-1", slo={"tpot_p99_ms": 50.0})
    row = summary["comparisons"]["eagle3"]["levels"][0]["eagle3"]
    assert row["energy_j_per_output_token_ci95"] and row["tpot_p99_ms_ci95"]
    written = rep.render_plots(summary, str(tmp_path), dpi=50)
    assert {"latency_p99", "energy"} <= set(written)
    for kind in ("latency_p99", "energy"):
        assert (tmp_path / rep.PLOTS[kind]).read_bytes().startswith(PNG)
    text = rep.render_markdown(summary, written)
    assert "![p99 latency (TPOT and TTFT) with intervals](latency-p99.png)" in text
    assert "![GPU energy per output token](energy.png)" in text
    assert "## Latency SLO and goodput, per level" in text


def test_fleet_index_lists_every_host_and_those_that_produced_nothing():
    index = idx.build_index("run-1", {"node-a": kimi_summary()}, {"node-b": "unreachable"})
    assert index["hosts_total"] == 2 and index["hosts_complete"] == 1
    assert index["hosts"]["node-b"]["status"] == "failed"
    assert index["hosts"]["node-a"]["report"] == "node-a/report.md"
    text = idx.render_index_md(index)
    assert "| node-a | complete | crosses | pays C=1, loses C=2-10 | 1.29 | 1 to 2 | 1 |" in text and "node-b" in text
    json.dumps(index)


def test_the_adaptive_config_file_is_sglangs_format_one_row_a_line():
    text = rep.adaptive_config_json(cmp.sglang_adaptive_config({"1": [1, 3, 5, 7], "52": [0]}))
    assert json.loads(text) == {"1": {"candidate_steps": [1, 3, 5, 7]}, "52": {"candidate_steps": [0]}}
    assert len(text.splitlines()) == 4


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    rep.write_atomic(str(tmp_path / "sub" / "a.txt"), "x")
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["a.txt"]


def test_a_vllm_report_gives_no_sglang_adaptive_table():
    base = result("baseline", [level(1, 92.6), level(70, 690.0)])
    spec = result("ngram", [level(1, 150.0, accept=3.4), level(70, 340.0, accept=3.4)])
    for res in (base, spec):
        res["engine"] = "vllm"
    summary = cmp.summarize_host({"baseline": base, "ngram": spec}, "node-a", "run-1")
    assert summary["adaptive_table"], "the maths still computes the table"
    text = rep.render_markdown(summary, {})
    assert "## SGLang adaptive speculation" not in text and "--speculative-adaptive-config adaptive-config.json" not in text
    assert "## Speculation by batch size" in text and "vLLM" in text
    # vLLM 0.32 has SpeculativeConfig.num_speculative_tokens_per_batch_size: no false claim (issue 18).
    assert "no per-batch-size switch" not in text
