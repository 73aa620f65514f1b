"""A level whose server crashed mid-level is FAILED, never SATURATED (issue 38, minor): in the
comparison's rows and regions, the summary, report.md, summary.csv, the fleet index and the
console line. Pure computation on results files written as bench_sweep writes them (< 1 s)."""

from __future__ import annotations

import csv
import io
import json

from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.report import index as idx
from ansible_collections.specbench.core.plugins.module_utils.report import render as rep
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import format_level_line
from ansible_collections.specbench.core.plugins.module_utils.specbench_client.summary import server_went_down

ADDR = "127.0.0.1:40123"
# What the client's keep-up checks (specbench_client/keepup.py) write for a level whose emulator died:
# its /metrics stopped answering around the window, and its rate fell below its own model.
DEAD_SERVER_KEEPUP = [
    "engine: no reads of the emulator's /metrics bracketed the end of the level (4.0 s): whether it kept its "
    "schedule there is unknown (its server did not answer around the window: a stalled or overloaded machine; "
    "slow its time scale down or measure fewer streams at once)",
    "engine: delivered 38% of its own model's rate (190.0 of 500.0 tok/s wall-clock; interval up to 260.0)",
]


def crashed(conc: int, tok_s: float) -> dict:
    """The level as the client writes it when the server is killed a few seconds into the window
    (tests/bench/test_sweep_playbook.py's "crash" host: requests in flight are cut mid-response,
    the ones sent after are refused, the level stops early)."""
    lv = level(conc, tok_s, rel_half=0.3)
    lv.update(
        requests_ok=12, requests_failed=43, failures_by_kind={"connect_refused": 40, "disconnected": 3},
        failure_examples={"connect_refused": f"connect to {ADDR}: Connection refused",
                          "disconnected": "the connection closed after 310 bytes"},
        error=(f"C={conc}: 43 of 55 requests failed, and the level stopped early (the last 10 requests all "
               f"failed): 40 x connect_refused (connection refused: nothing listens at {ADDR} (the server is "
               f"down or has crashed); e.g. connect to {ADDR}: Connection refused); 3 x disconnected (the server "
               "closed the connection mid-response (crashed, restarted or killed?))"),
        saturated=list(DEAD_SERVER_KEEPUP),
    )
    return lv


def write(folder, name: str, doc: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(doc))


def test_a_level_whose_server_died_mid_level_is_failed_in_every_output(tmp_path):
    host = tmp_path / "run-1" / "node-a"
    write(host, "baseline.json", result("baseline", [level(c, 100.0 * c) for c in (1, 2, 5, 10)]))
    spec = result("eagle3", [level(c, 130.0 * c, accept=2.5) for c in (1, 2)] + [crashed(5, 190.0)]
                  + [level(10, 1300.0, accept=2.5)])
    spec["status"], spec["error"] = "complete_with_errors", spec["levels"][2]["error"]
    write(host, "eagle3.json", spec)
    warnings: list[str] = []
    results = cmp.load_host_results(str(host), None, warnings)
    assert not warnings
    dead = results["eagle3"]["levels"][2]
    assert server_went_down(dead).startswith("the server went down during the level (40 connect refused, "
                                             "3 disconnected; 12 request(s) completed before)")
    assert cmp.level_failure(dead).startswith("the server went down") and cmp.level_saturation(dead)

    summary = cmp.summarize_host(results, "node-a", "run-1")
    row = next(r for r in summary["levels"] if r["concurrency"] == 5)
    assert row["verdict"] == "failed" and row["saturated"] == [] and row["speedup"] is None
    assert "eagle3: the server went down during the level" in row["failed"]
    assert summary["failed_levels"] == [5] and summary["saturated_levels"] == []
    assert [r["verdict"] for r in summary["regions"]] == ["pays", "failed", "pays"]
    assert summary["status"] == "incomplete"
    assert any("C=5 failed" in r for r in summary["incomplete_reasons"]), summary["incomplete_reasons"]
    assert "C=5 failed" in summary["recommendation"] and "saturated" not in summary["recommendation"]
    assert cmp.compact(summary)["saturated_levels"] == []
    # Nothing is speculated across it, and refinement measures it again.
    assert 5 in cmp.refine_plan(summary)["repeat"]

    report = rep.render_markdown(summary)
    # The per-level table's row (the energy and p99 latency tables after it have a C=5 row of their own).
    line = next(x for x in report.splitlines() if x.startswith("| 5 |"))
    assert "| failed |" in line and "saturated" not in line and "no evidence" not in line
    assert "saturated" not in report.lower().partition("## method")[0].replace("unclear, failed, saturated", "")
    csv_row = next(r for r in csv.DictReader(io.StringIO(rep.render_csv(summary))) if r["concurrency"] == "5")
    assert csv_row["verdict"] == "failed"
    index_md = idx.render_index_md(idx.build_index("run-1", {"node-a": summary}))
    assert "saturated" not in index_md

    console = format_level_line(dead)
    assert "FAILED: the server went down during the level" in console and "SATURATED" not in console
    assert "ERROR: C=5: 43 of 55 requests failed" in console
    # A level that kept up, and one truly saturated, read as before.
    busy = dict(level(64, 900.0), saturated=["engine: delivered 55% of its own model's rate"])
    assert "SATURATED" in format_level_line(busy) and "FAILED" not in format_level_line(busy)
    assert server_went_down(busy) is None and cmp.level_failure(busy) is None


def test_a_launch_whose_server_died_keeps_the_pooled_level_failed_and_adds_nothing_to_its_rate(tmp_path):
    host = tmp_path / "run-1" / "node-a"
    write(host, "baseline.json", result("baseline", [level(c, 100.0 * c) for c in (1, 5)]))
    write(host, "eagle3.json", result("eagle3", [level(1, 130.0), crashed(5, 190.0)]))
    write(host, "eagle3@launch2.json", result("eagle3", [level(1, 131.0), level(5, 650.0)]))
    results = cmp.load_host_results(str(host), None, [])
    pooled = next(lv for lv in results["eagle3"]["levels"] if lv["concurrency"] == 5)
    assert pooled["output_tok_per_s"] is None and "failed at C=5: the server went down" in pooled["error"]
    summary = cmp.summarize_host(results, "node-a", "run-1")
    assert summary["failed_levels"] == [5] and summary["saturated_levels"] == []
    # A refinement round that measured it again heals it, from its own figure alone.
    write(host, "eagle3@refine1.json", result("eagle3", [level(5, 640.0)]))
    healed = next(lv for lv in cmp.load_host_results(str(host), None, [])["eagle3"]["levels"]
                  if lv["concurrency"] == 5)
    assert cmp.level_failure(healed) is None and healed["saturated"] == []
    assert healed["launch_tok_per_s"] == [650.0, 640.0]  # the crashed launch's 190 tok/s is left out
