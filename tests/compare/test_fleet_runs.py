"""A fleet is launches too, end to end: compare.yml on two emulated nodes of one kind at once (the
Llama-3.1-8B/H100 profile, one GPU each, their own folders, ports and device folders), through ansible-runner.
The fleet index gives one verdict for the kind beside each node's own, read from both nodes' speedups; the
nodes of other kinds are kept apart (tests/compare/test_compare_runs.py, the two-profile run). Whether the
kind's intervals cover is the simulation's to say (decision_coverage.py fleet, tests/unit/.../test_fleet.py)."""

from __future__ import annotations

import json

import compare_kit
import pytest
from compare_kit import node_vars, run_playbook
from specbench_testkit import free_port, inventory, kill_node_servers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    nodes = {name: tmp / f"node-{name}" for name in ("gpu-a", "gpu-b")}
    hosts = {name: node_vars(folder, free_port(), compare_kit.LLAMA, time_scale=1.0, sglang_server_tp_size=1,
                             bench_concurrency=[1, 16], bench_input_len=32, bench_output_len=32, bench_warmup_s=1,
                             bench_window_s=2)
             for name, folder in nodes.items()}
    try:
        run = run_playbook(tmp, "playbooks/compare.yml", inventory(hosts),
                           extravars={"results_dir": str(tmp / "results"), "run_id": "fleet", "compare_plots": False},
                           timeout=600)
    finally:
        for folder in nodes.values():
            kill_node_servers(folder)
    return run, tmp / "results" / "fleet"


def test_two_nodes_of_one_kind_get_one_verdict_beside_their_own(fleet):
    run, run_dir = fleet
    assert run.rc == 0, run.stdout[-5000:]
    index = json.loads((run_dir / "index.json").read_text())
    assert set(index["hosts"]) == {"gpu-a", "gpu-b"} and index["apart"] == {}
    [kind] = index["kinds"]
    assert kind["hosts"] == ["gpu-a", "gpu-b"] and kind["nodes"] == 2 and kind["spec_mode"] == "eagle3"
    assert kind["key"]["engine"] == "emulator" and kind["key"]["gpus"] == 1 and kind["key"]["bench_concurrency"] == [1, 16]
    for lv in kind["levels"]:
        own = [json.loads((run_dir / host / "summary.json").read_text())["levels"] for host in kind["hosts"]]
        speedups = [next(r["speedup"] for r in levels if r["concurrency"] == lv["concurrency"]) for levels in own]
        # The kind's speedup is the nodes' geometric mean, its interval around it.
        assert lv["nodes"] == 2 and lv["speedup"] == pytest.approx((speedups[0] * speedups[1]) ** 0.5, rel=2e-3)
        assert lv["speedup_ci_family"][0] <= lv["speedup"] <= lv["speedup_ci_family"][1]
        assert lv["verdict"] in ("pays", "loses", "unclear")
    text = (run_dir / "index.md").read_text()
    assert "## One verdict per kind of node" in text and "| kind 1 (" in text and "gpu-a, gpu-b" in text
    assert 'id="kinds"' in (run_dir / "index.html").read_text()
