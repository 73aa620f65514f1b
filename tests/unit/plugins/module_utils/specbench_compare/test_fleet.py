"""One verdict per kind of node (specbench_compare.fleet): which nodes are one kind, which are kept apart and
why, and the kind's verdict from its nodes' own speedups (coverage and power: decision_coverage.py fleet)."""
from __future__ import annotations

import math
import random

import design_sim as sim  # tests/compare: the simulation benchmarks/decision_coverage.py prints the figures of
import pytest
from compare_synth import level, result

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

LEVELS = [1, 8, 32]


def node(rng, speedup: float, model: str = "llama", version: str = "0.5.23", gpus: int = 1, window: float = 4.0,
         complete: bool = True) -> dict:
    results = {}
    for mode, factor in (("baseline", 1.0), ("eagle3", speedup)):
        lv = [level(c, 100.0 * c * factor * math.exp(rng.gauss(0, 0.01)), 0.02) for c in LEVELS]
        res = result(mode, lv, settings={"window_s": window},
                     gpu={"before": {"driver_version": "590", "gpus": [{"name": "H100", "uuid": f"GPU-{rng.random()}"}
                                                                      for _ in range(gpus)]}})
        res["server"] = dict(res["server"], version=version, model=model)
        results[mode] = res
    comp = cmp.compare_pair(results["baseline"], results["eagle3"], "baseline", "eagle3")
    return {"results": results, "comparisons": {"eagle3": comp}, "modes": ["baseline", "eagle3"], "complete": complete}


def test_nodes_of_one_kind_are_pooled_and_others_kept_apart_by_name():
    rng = random.Random(4801)
    hosts = {"a": node(rng, 1.3), "b": node(rng, 1.3), "c": node(rng, 1.3), "qwen": node(rng, 1.3, model="qwen"),
             "old": node(rng, 1.3, version="0.5.18"), "broken": node(rng, 1.3, complete=False),
             "long": node(rng, 1.3, window=60.0)}
    found = cmp.fleet_kinds(hosts, "baseline")
    assert [k["hosts"] for k in found["kinds"]] == [["a", "b", "c"]]
    kind = found["kinds"][0]
    # The GPUs' own ids differ between nodes (they are other machines); the kind does not name them.
    assert "gpu_uuids" not in kind["key"] and kind["key"]["model"] == "llama" and kind["nodes"] == 3
    assert set(found["apart"]) == {"qwen", "old", "long"}
    assert "model 'qwen' where another has 'llama'" in found["apart"]["qwen"]
    assert "engine_version '0.5.18'" in found["apart"]["old"] and "bench_window_s 60.0" in found["apart"]["long"]
    assert all(lv["verdict"] == "pays" and lv["nodes"] == 3 for lv in kind["levels"]), kind["levels"]
    assert kind["crossover_status"] == "pays_everywhere"


def test_a_kind_is_no_stronger_than_its_weakest_node():
    rng = random.Random(4802)
    hosts = {"a": node(rng, 1.3), "b": node(rng, 1.3), "c": node(rng, 1.3)}
    row = next(r for r in hosts["b"]["comparisons"]["eagle3"]["levels"] if r["concurrency"] == 8)
    row.update(saturated=["client: the benchmark client was the bottleneck"], verdict="saturated")
    kind = cmp.fleet_kinds(hosts, "baseline")["kinds"][0]
    got = {lv["concurrency"]: lv for lv in kind["levels"]}
    assert got[8]["verdict"] == "unclear" and got[8]["speedup"] is None
    assert got[1]["verdict"] == "pays"


@pytest.mark.parametrize("nodes", [2, 4])
def test_a_kind_reads_a_tie_as_a_tie(nodes):
    """A true tie on 2 or 4 nodes of one kind (5% node-to-node sd, 2% launch sd): a claim in at most 5% of runs
    plus 2.33 binomial sd (measured 0%, decision_coverage.py fleet), each level's 95% interval covering 90%."""
    rng = random.Random(f"fleet-{nodes}")
    n = 60
    hit = cover = total = 0
    for _ in range(n):
        kind = sim.fleet_run(rng, dict.fromkeys(sim.SEED_LEVELS, 1.0), nodes, 0.05, 0.02)
        hit += any(lv["verdict"] in ("pays", "loses") for lv in kind["levels"])
        for lv in kind["levels"]:
            total += 1
            cover += lv["speedup_ci95"][0] <= 1.0 <= lv["speedup_ci95"][1]
    assert cover / total >= 0.90 and hit / n <= 0.05 + 2.33 * math.sqrt(0.05 * 0.95 / n), (cover, total, hit)
