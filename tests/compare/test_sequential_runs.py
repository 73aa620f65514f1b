"""Sequential launches end to end: compare.yml on one emulated node (the seeds' Kimi-K2.5 profile, where EAGLE-3
gains about 4% at C=1 and halves throughput at C=10), through ansible-runner, with one added round allowed
(``compare_max_launches: 2`` over one planned launch per mode).

C=10 is decided by the planned launches and never launched again; C=1, unclear after them and within the
budget's reach, is measured again in round 1 (one launch per mode, ``<mode>@round1.json``, at C=1 only); the
report says how many launches each level got and why the run stopped, and the error rate was spent over the two
looks as planned. Whether the looks hold their error rate is the simulation's to say
(tests/unit/.../test_sequential.py, benchmarks/decision_coverage.py sequential); this proves the wiring on real
processes: the plan, the launches, the files, the pooling, the merged verdicts and the report.
"""

from __future__ import annotations

import json

import pytest
from compare_kit import KIMI, node_vars, run_playbook
from specbench_testkit import free_port, inventory, kill_node_servers

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HOST = "seq"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sequential")
    node = tmp / "node-seq"
    hosts = {HOST: node_vars(node, free_port(), KIMI, bench_concurrency=[1, 10], bench_input_len=64,
                             bench_output_len=64, bench_warmup_s=1, bench_window_s=2)}
    try:
        found = run_playbook(tmp, "playbooks/compare.yml", inventory(hosts),
                             extravars={"results_dir": str(tmp / "results"), "run_id": "seq", "compare_plots": False,
                                        "compare_launches": 1, "compare_max_launches": 2}, timeout=600)
    finally:
        kill_node_servers(node)
    return found, tmp / "results" / "seq" / HOST


def test_an_unclear_level_is_measured_again_and_a_decided_one_is_not(run):
    found, folder = run
    assert found.rc == 0, found.stdout[-5000:]
    summary = json.loads((folder / "summary.json").read_text())
    budget = summary["sequential_budget"]
    assert budget["max_launches"] == 2 and budget["rounds"] == 1
    assert budget["alphas"] == pytest.approx(cmp.look_alphas(1))
    rows = {r["concurrency"]: r for r in summary["levels"]}
    # C=10 (EAGLE-3 at about half the baseline's rate) is decided at look 1 and never launched again.
    assert rows[10]["verdict"] == "loses" and rows[10].get("look", 1) == 1 and rows[10]["launches"] == 1
    sequence = summary["comparisons"]["eagle3"]["sequential"]
    planned = json.loads((folder / "baseline.json").read_text())
    assert [lv["concurrency"] for lv in planned["levels"]] == [1, 10]
    if budget["rounds_done"] == 1:
        # C=1 was unclear and within reach: round 1 launched both modes again at C=1 only, pooled with look 1's.
        for mode in ("baseline", "eagle3"):
            again = json.loads((folder / f"{mode}@round1.json").read_text())
            assert [lv["concurrency"] for lv in again["levels"]] == [1], mode
        assert rows[1]["launches"] == 2 and rows[1]["looks"] == 2 and sequence["looks"] == 2
        assert sequence["levels"]["1"]["launches"] == 2
        assert "round 1 of at most 1: baseline at C=[1], eagle3 at C=[1]" in found.stdout
        assert "every added round of the budget ran" in summary["sequential_stop"]
    else:
        # C=1 decided at look 1, or out of reach: no round, and the plan says why.
        assert not list(folder.glob("*@round*.json"))
        assert rows[1]["launches"] == 1 and summary["sequential_stop"].startswith("no further round")
    report = (folder / "report.md").read_text()
    assert "Launches per level" in report and "Sequential launches (compare_max_launches 2" in report
    assert summary["sequential_stop"] in report
