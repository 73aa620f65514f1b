"""compare.yml then serve.yml with the defaults, on each of the emulator's profiles at once (three emulated
nodes on localhost, their own ports and device folders), as AWX's workflow chains them: serve.yml takes
the run from compare's set_stats (no run id of its own). Two playbook runs in all (CI time).

What it holds: specbench recommends only what it can serve as measured. Each profile's EAGLE-3 runs at
SGLang's automatic settings: top-k 1 on the two Kimi profiles (a non-Llama model), top-k 4 on
Llama-3.1-8B/H100, where SGLang's adaptive speculation (top-k 1 only) cannot serve what was measured:
there the run gives no adaptive table and names the static mode serve.yml serves, and why. serve.yml
with the defaults then serves every host: never refused for serving something the run did not measure.

- kimi (the seeds' Kimi-K2.5 node, crossover near C=1.3) at C=1, 2, 4;
- llama (EAGLE-3 pays up to C=50 or so) at C=1, 4, 16: speculation clearly pays at every level, but
  not up to the server's running cap, so compare would have given the adaptive table before;
- moe (Kimi-like MoE: loses at small batches, pays near C=32) at C=4, 32: an adaptive table at top-k 1,
  served as eagle3-adaptive where a level clearly pays.

The proof's verdicts are statistics; the tests hold the served configuration to the run's own plan, not
to an expected verdict. COMPARE_PINNED (one launch per mode, no added rounds) keeps the run short.
"""

from __future__ import annotations

import json
from pathlib import Path

import compare_kit
import pytest
from compare_kit import node_vars, not_kept_up, run_playbook
from specbench_testkit import free_port, inventory, kill_node_servers, shared_run

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

RUN_ID = "defaults"
MOE = "kimi-k2.5-moe"
HOSTS = {
    # host: (profile, time scale, levels, input and output tokens)
    "kimi": (compare_kit.KIMI, 0.25, [1, 2, 4], 256),
    "llama": (compare_kit.LLAMA, 1.0, [1, 4, 16], 32),
    "moe": (MOE, 0.5, [4, 32], 32),
}


@pytest.fixture(scope="module")
def default_path(tmp_path_factory):
    def build(tmp: Path):
        nodes = {host: tmp / f"node-{host}" for host in HOSTS}
        # One emulated GPU for llama (its profile's own); the Kimi profiles at their node's tensor parallelism.
        hosts = {host: node_vars(nodes[host], free_port(), profile, scale,
                                 **({"sglang_server_tp_size": 1} if host == "llama" else {}),
                                 bench_concurrency=levels, bench_input_len=length, bench_output_len=length,
                                 bench_warmup_s=1, bench_window_s=3)
                 for host, (profile, scale, levels, length) in HOSTS.items()}
        try:
            compare = run_playbook(tmp / "compare", "playbooks/compare.yml", inventory(hosts),
                                   extravars={"results_dir": str(tmp / "results"), "run_id": RUN_ID,
                                              "compare_plots": False},
                                   timeout=compare_kit.RUN_TIMEOUT_S)
            compare.save(tmp / "compare.json")
            # AWX's serve node after compare: the survey's empty run id, the compare node's set_stats handed over.
            return run_playbook(tmp / "serve", "playbooks/serve.yml", inventory(hosts),
                                extravars={"results_dir": str(tmp / "results"), "run_id": "",
                                           "specbench_compare": compare.artifact_stats()["specbench_compare"]},
                                timeout=compare_kit.RUN_TIMEOUT_S)
        finally:
            for node in nodes.values():
                kill_node_servers(node)

    serve, tmp = shared_run(tmp_path_factory, "default-path", build)
    return compare_kit.kit.PlaybookRun.load(tmp / "compare.json"), serve, tmp / "results" / RUN_ID


def summary(run_dir: Path, host: str) -> dict:
    return json.loads((run_dir / host / "summary.json").read_text())


def test_compare_measures_every_profile_and_recommends_only_what_it_can_serve(default_path):
    compare, unused, run_dir = default_path
    assert compare.rc == 0, compare.stdout[-5000:]
    for host in HOSTS:
        assert not not_kept_up(run_dir / host), "the machine did not keep up:\n" + "\n".join(not_kept_up(run_dir / host))
        found = summary(run_dir, host)
        info = json.loads((run_dir / host / "eagle3.json").read_text())["server"]["server_info"]
        topk = info["speculative_eagle_topk"]
        assert topk == (4 if host == "llama" else 1), (host, info)
        plan = cmp.serve_plan(found, "emulator")
        if topk != 1 and found["speculate_ranges"]:
            # No table SGLang could not serve as measured: the static mode, and why, in the summary and the facts.
            assert found["adaptive_config"] is None and not (run_dir / host / "adaptive-config.json").exists()
            assert f"measured at top-k {topk} (resolved by the server)" in found["adaptive_refused"]
            assert plan["mode"] == found["static_choice"] and not plan["mode"].endswith("-adaptive"), plan
            stats = compare.artifact_stats()["specbench_compare"]["hosts"][host]
            assert stats["adaptive_refused"] == found["adaptive_refused"] and stats["static_choice"] == plan["mode"]
            assert found["adaptive_refused"] in (run_dir / host / "report.md").read_text()
        else:
            assert found["adaptive_refused"] is None, found["adaptive_refused"]


def test_serve_with_the_defaults_serves_every_profile(default_path):
    unused, serve, run_dir = default_path
    assert serve.rc == 0, serve.stdout[-8000:]
    assert "would serve something other than what the run measured" not in serve.stdout
    for host in HOSTS:
        found = summary(run_dir, host)
        doc = json.loads((run_dir / host / "serve.json").read_text())
        plan = cmp.serve_plan(found, "emulator")
        # The run's own plan was served (or, where its proof found it clearly slower, the rollback from it).
        served = (doc.get("rolled_back_from") or {}).get("mode") or doc["mode"]
        assert served == plan["mode"] and doc["state"] == "served", (host, doc["mode"], plan)
        if plan["mode"].endswith("-adaptive"):  # only from a mode measured at top-k 1
            assert "--speculative-eagle-topk" in doc["launch_command"] or doc.get("rolled_back_from"), doc
            assert json.loads((run_dir / host / "eagle3.json").read_text())["server"]["server_info"][
                "speculative_eagle_topk"] == 1
