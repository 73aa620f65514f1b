"""playbooks/report.yml through ansible-runner: re-render a saved run, never touching its results."""

from __future__ import annotations

import hashlib
import json

import pytest
from compare_kit import run_playbook
from compare_synth import analytic_results, write_run

pytestmark = pytest.mark.slow


def digest(folder) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.json")}


@pytest.fixture
def saved_run(tmp_path):
    """Two hosts: node-a complete (llama profile), node-b whose eagle3 failed (recorded by the run)."""
    results = tmp_path / "results"
    base, spec, truth = analytic_results("llama-3.1-8b-1x-h100", [8, 16, 32, 64, 128])
    a = write_run(results, "run-1", "node-a", {"baseline": base, "eagle3": spec})
    base_b, _unused1, _unused2 = analytic_results("kimi-k2.5-8x-rtx-pro-6000", [1, 2, 4])
    b = write_run(results, "run-1", "node-b", {"baseline": base_b})
    (b / "compare-run.json").write_text(json.dumps({
        "run_id": "run-1", "host": "node-b", "baseline": "baseline", "modes": ["baseline", "eagle3"],
        "outcomes": {"baseline": {"status": "ok"},
                     "eagle3": {"status": "failed", "error": "launch of eagle3: Not enough memory"}}}))
    (b / "ngram.json").write_text("{not json")  # a damaged file must not stop the report
    return results, a, b, truth


def test_report_re_renders_every_host_keeps_recorded_failures_and_never_touches_results(tmp_path, saved_run):
    results, a, b, truth = saved_run
    before = {a.name: digest(a), b.name: digest(b)}
    run = run_playbook(tmp_path, "playbooks/report.yml", extravars={"run_id": "run-1", "results_dir": str(results)})
    assert run.rc == 0, run.stdout
    for folder in (a, b):
        for name in ("summary.json", "summary.csv", "report.md", "report.html", "throughput.png", "per-stream.png"):
            assert (folder / name).is_file(), name
    for host, old in before.items():
        new = digest(results / "run-1" / host)
        assert all(new[name] == sha for name, sha in old.items()), f"{host}: a results file changed"
    summary_a = json.loads((a / "summary.json").read_text())
    assert summary_a["complete"] and summary_a["crossover_status"] == "crosses"
    assert summary_a["crossover_bracket"][0] <= truth <= summary_a["crossover_bracket"][1]
    summary_b = json.loads((b / "summary.json").read_text())
    assert summary_b["status"] == "incomplete"
    assert "eagle3: failed: launch of eagle3: Not enough memory" in summary_b["incomplete_reasons"]
    assert "ngram" not in summary_b["modes"]  # the saved run compared baseline and eagle3 only
    assert 'href="node-b/report.html"' in (results / "run-1" / "index.html").read_text()
    index = json.loads((results / "run-1" / "index.json").read_text())
    assert set(index["hosts"]) == {"node-a", "node-b"} and index["hosts_complete"] == 1
    stats = run.artifact_stats()["specbench_compare"]
    assert stats["run_id"] == "run-1" and stats["incomplete_hosts"] == ["node-b"]
    assert stats["hosts"]["node-a"]["crossover_concurrency"] == summary_a["crossover_concurrency"]


def test_report_in_check_mode_writes_nothing(tmp_path, saved_run):
    results, a, _unused1, _unused2 = saved_run
    run = run_playbook(tmp_path, "playbooks/report.yml", extravars={"run_id": "run-1", "results_dir": str(results)},
                       check=True)
    assert run.rc == 0, run.stdout
    assert not (a / "summary.json").exists() and not (results / "run-1" / "index.json").exists()


def test_report_of_an_unknown_run_names_the_runs_there(tmp_path, saved_run):
    results = saved_run[0]
    run = run_playbook(tmp_path, "playbooks/report.yml", extravars={"run_id": "run-9", "results_dir": str(results)})
    assert run.rc != 0
    (msg,) = [m for _unused1, _unused2, m in run.failures()]
    assert "no results for run run-9" in msg and "runs there: run-1" in msg and "-e run_id=" in msg


def test_report_without_a_run_id_says_how_to_give_one(tmp_path, saved_run):
    run = run_playbook(tmp_path, "playbooks/report.yml", extravars={"results_dir": str(saved_run[0])})
    assert run.rc != 0
    assert any("give -e run_id=" in m for _unused1, _unused2, m in run.failures())
