"""Bad -e values to compare.yml are refused before anything runs, each with a message naming the fix."""

from __future__ import annotations

import pytest
from compare_kit import node_vars, run_playbook
from specbench_testkit import free_port, inventory

pytestmark = pytest.mark.slow

CASES = [
    ({"compare_modes": ["baseline", "eagle7"]}, "compare_modes holds eagle7, which is not a serving mode: choose from"),
    ({"compare_modes": ["eagle3", "ngram"]}, "the baseline mode\n'baseline' among them"),
    ({"compare_modes": []}, "compare_modes must list at least two serving modes"),
    ({"compare_modes": "baseline"}, "compare_modes must list at least two serving modes"),
    ({"bench_concurrency": []}, "bench_concurrency is empty"),
    ({"bench_concurrency": "1,two,5"}, "'two', which is not a whole number"),
    ({"bench_concurrency": [1, 0]}, "must be at least 1"),
    ({"bench_output_len": 0}, "bench_output_len"),
    ({"mode": "eagle3"}, "remove -e mode=eagle3"),
    ({"compare_launches": 0}, "compare_launches must be auto (two launches per mode until the node has a noise floor, "
                              "then one) or a whole number from 1 to 10 (got 0)"),
    ({"compare_refine_ratio": 1.0}, "compare_refine_ratio a number above 1, the hi/lo width to reach"),
    ({"engine": "external", "base_url": "http://127.0.0.1:9"}, "use bench.yml -e engine=external"),
    ({"compare_traffic": [{"concurrency": 0, "share": 1}]}, "compare_traffic[0].concurrency must be a number above 0"),
]


@pytest.mark.parametrize("extravars, expected", CASES, ids=[next(iter(c[0])) + "-" + str(i) for i, c in enumerate(CASES)])
def test_bad_values_are_refused_before_anything_runs(tmp_path, extravars, expected):
    node = tmp_path / "node"
    results = tmp_path / "results"
    run = run_playbook(tmp_path, "playbooks/compare.yml", inventory({"node-a": node_vars(node, free_port())}),
                       extravars={"results_dir": str(results), "run_id": "bad", **extravars}, timeout=120)
    assert run.rc != 0
    messages = " ".join(m for _unused1, _unused2, m in run.failures())
    flat = " ".join(messages.split())
    assert " ".join(expected.split()) in flat, messages
    # Nothing ran: no teardown, no launch, no results, nothing on the node.
    assert not run.task_started("Make the GPUs clean") and not run.task_started("Start the server")
    assert not results.exists()
    assert not (node / "emulated-dev").exists()
