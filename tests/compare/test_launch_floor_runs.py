"""The default design end to end (issue 36, item 2): launch-to-launch variation is measured, not assumed away.

compare.yml, then serve.yml on its run, on one emulated node, with the defaults a user gets (``compare_launches: auto``, the
emulator's ``sglang_server_emulator_launch_sd`` as on a real node), through ansible-runner:

1. The node has no noise floor: every mode is launched twice, in A B B A order, each launch a fresh
   server at its own speed, the second at one of the two levels only (``compare_noise_floor_levels``);
   the launch variation is measured and stored as the node's floor (``<results_dir>/noise-floor/<host>.json``),
   the levels measured twice are pooled and the one measured once per mode is widened by that floor.
2. serve.yml on that run with its default ``serve_measure_references``: the proof's reference launched
   and measured again just before the served launch, and the proof held to it and to the node's floor.

The next run on the node (its floor read: one launch per mode, every level widened) is not run here, for
CI time: its parts are unit-tested (tests/unit/plugins/action/test_compare_results_noise_floor.py: the
decision; tests/unit/plugins/module_utils/specbench_compare/test_launch_noise.py: the widening).

What this proves is the wiring, on real processes: the decision, the order, the emulator's variation
reaching the results, the floor written and read. Whether the intervals cover is the simulation's to
say (benchmarks/decision_coverage.py launch, floor, floor2; tests/unit/.../test_launch_noise.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import compare_kit
import pytest
from compare_kit import node_vars, not_kept_up, run_playbook
from specbench_testkit import free_port, inventory, kill_node_servers, role_default

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HOST = "floor"
LEVELS = [1, 16]
# compare_noise_floor_levels: 1 of the two here (the default, 2, of the seeds' eight is the same rule: the
# lowest first, spread by index; tests/unit/plugins/action/test_compare_results_noise_floor.py), for time.
FLOOR_LEVELS = 1
RELAUNCHED = [1]
RUN_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("launch-floor")
    node = tmp / "node-floor"
    # The roles' own defaults, which the suite otherwise pins (specbench_testkit.PINNED): this test is about them.
    defaults = {"compare_launches": role_default("compare", "compare_launches"),
                "sglang_server_emulator_launch_sd": role_default("sglang_server", "sglang_server_emulator_launch_sd")}
    # Real time (time scale 1): the emulator and the client stay light beside the rest of the suite. One emulated
    # GPU (the Llama-3.1-8B/H100 profile, one scheduler process per launch, not eight): six launches here.
    hosts = {HOST: node_vars(node, free_port(), compare_kit.LLAMA, time_scale=1.0, sglang_server_tp_size=1,
                             bench_concurrency=LEVELS, bench_input_len=32, bench_output_len=32, bench_warmup_s=1,
                             bench_window_s=2)}
    runs = {}
    try:
        # 1. compare.yml on a node without a floor.
        runs["first"] = run_playbook(tmp, "playbooks/compare.yml", inventory(hosts),
                                     extravars={"results_dir": str(tmp / "results"), "run_id": "first",
                                                "compare_plots": False, **defaults,
                                                "compare_noise_floor_levels": FLOOR_LEVELS},
                                     timeout=RUN_TIMEOUT_S)
        assert runs["first"].rc == 0, runs["first"].stdout[-5000:]
        # 2. serve.yml on that run with its default serve_measure_references (the suite pins it off
        # elsewhere): static eagle3, asked for, held to the best static mode at each level, measured again.
        runs["serve"] = run_playbook(tmp, "playbooks/serve.yml", inventory(hosts),
                                     extravars={"results_dir": str(tmp / "results"), "run_id": "first",
                                                "serve_mode": "eagle3", "serve_on_regression": "keep",
                                                "serve_measure_references": role_default("serve", "serve_measure_references"),
                                                "sglang_server_emulator_launch_sd": defaults["sglang_server_emulator_launch_sd"]},
                                     timeout=RUN_TIMEOUT_S)
    finally:
        kill_node_servers(node)
    return runs, tmp / "results", defaults


def summary(results: Path, run_id: str) -> dict:
    return json.loads((results / run_id / HOST / "summary.json").read_text())


def test_the_defaults_are_auto_and_a_real_nodes_launch_variation(two_runs):
    unused, unused_results, defaults = two_runs
    assert defaults == {"compare_launches": "auto", "sglang_server_emulator_launch_sd": 0.02}
    assert role_default("compare", "compare_noise_floor_levels") == 2


def test_a_node_without_a_floor_launches_each_mode_twice_abba_and_stores_what_it_measured(two_runs):
    runs, results, unused = two_runs
    decided = runs["first"].task("Decide the launches per mode", HOST)
    assert decided["launches"] == 2 and decided["noise_floor"] is None, decided
    assert "compare_launches auto: two launches per mode, A B B A" in decided["msg"]
    assert f"{HOST} has no noise floor younger than 30 days" in decided["msg"]
    assert decided["relaunch_levels"] == RELAUNCHED, decided
    assert "the second launches re-measure C=1 only (compare_noise_floor_levels: 1)" in decided["msg"]
    host_dir = results / "first" / HOST
    launches = []
    relaunched = {}  # mode -> every launch's levels at RELAUNCHED
    for mode in ("baseline", "eagle3"):
        assert not (host_dir / f"{mode}.json").exists()
        for n in (1, 2):
            found = json.loads((host_dir / f"{mode}@launch{n}.json").read_text())
            relaunched.setdefault(mode, []).extend(lv for lv in found["levels"] if lv["concurrency"] in RELAUNCHED)
            # The first launch sweeps every level, the second the floor's levels only.
            assert [lv["concurrency"] for lv in found["levels"]] == (LEVELS if n == 1 else RELAUNCHED), found["levels"]
            info = found["server"]["server_info"]
            emu = info["emulator"]
            # Each launch drew its own speed, at the default sd: the variation reached the server.
            assert emu["launch_sd"] == 0.02, emu
            launches.append((info["startup_time"], mode, n, emu["launch_factor"]))
    # A fresh server each time, in A B B A order: a drift over the run falls equally on both modes.
    assert [(m, n) for unused_t, m, n, unused_f in sorted(launches)] == \
        [("baseline", 1), ("eagle3", 1), ("eagle3", 2), ("baseline", 2)], launches
    assert len({f for unused_t, unused_m, unused_n, f in launches}) == 4, launches
    floor = json.loads((results / "noise-floor" / f"{HOST}.json").read_text())
    part = floor["runs"]["first"]
    # Two modes, two launches each: a degree of freedom per mode whose relaunched level the machine kept up with in
    # both launches, 2 where it kept up. A launch it did not keep up with is left out of its level
    # (pooling.pool_level) and one launch measures no variation: beside a suite and two more heavy jobs, one mode's
    # C=1 was left out once here, and the run rightly stored 1.
    kept = [mode for mode, levels in relaunched.items()
            if len(levels) == 2 * len(RELAUNCHED)
            and all(not cmp.level_saturation(lv) and not cmp.level_failure(lv) for lv in levels)]
    assert kept, "the machine kept up with no relaunched level:\n" + "\n".join(not_kept_up(host_dir))
    assert floor["host"] == HOST and part["df"] == len(kept) and 1 <= part["df_levels"] <= 2 * len(RELAUNCHED), part
    found = summary(results, "first")
    variation = found["launch_variation"]
    assert variation["held"] is True and variation["measured"]["df"] == len(kept), variation
    # Each level pooled from both launches of both modes has the floor's interval (degrees of freedom more than its
    # own 1), its own kept beside it.
    pooled = [lv for lv in found["levels"] if lv["launches"] == 2 and lv["speedup"] is not None]
    assert {lv["concurrency"] for lv in pooled} <= set(RELAUNCHED), found["levels"]
    assert pooled or len(kept) < 2, found["levels"]
    assert all(lv["speedup_ci95_launches"] for lv in pooled), pooled
    # The level measured once per mode holds the floor this run measured (widened unless its sd estimate is 0).
    once = [lv for lv in found["levels"] if lv["concurrency"] not in RELAUNCHED]
    assert [lv["launches"] for lv in once] == [1], once
    widened = found["comparisons"]["eagle3"]["launch_variation"]["widened"]
    if variation["floor"]["launch_sd"] > 0 and once[0]["speedup"] is not None:
        # C=16, and C=1 where a launch of it was left out (it was then measured once in a mode).
        single = [lv["concurrency"] for lv in found["comparisons"]["eagle3"]["levels"]
                  if (lv.get("launches") or 1) == 1 and lv.get("speedup_ci95")]
        assert widened == single and 16 in single and once[0]["speedup_ci95_window"], (widened, once)
        assert widened == [16] or len(kept) < 2, widened
    else:
        assert widened == [], (variation, widened)


def test_the_proof_holds_its_reference_measured_just_before_the_served_launch(two_runs):
    """serve_measure_references (issue 36, item 2): the reference the proof holds the served configuration to
    is launched and measured again on the node, just before the served launch, and the proof reads it, not the
    compare run's figure taken at another time."""
    runs, results, unused = two_runs
    served = runs["serve"]
    assert served.rc == 0, served.stdout[-5000:]
    host = results / "first" / HOST
    doc = json.loads((host / "serve.json").read_text())
    fresh_dir = host / "serve" / "references" / "first" / HOST
    fresh = {p.stem: json.loads(p.read_text()) for p in sorted(fresh_dir.glob("*.json"))}
    # The best static mode the run measured at each level (eagle3 pays at both on this profile), once.
    modes = served.task("Read what the run recommended for this host")["reference_modes"]
    assert modes == sorted({r["best_static_mode"] for r in doc["levels"]}) and sorted(fresh) == modes, (modes, fresh)
    for mode, found in fresh.items():
        assert [lv["concurrency"] for lv in found["levels"]] == LEVELS and found["mode"] == mode
    # Each reference in a launch of its own, torn down, then the served configuration's launch.
    served_file = host / "serve" / "first" / HOST / "eagle3.json"
    started = {m: f["server"]["server_info"]["startup_time"] for m, f in fresh.items()}
    served_start = json.loads(served_file.read_text())["server"]["server_info"]["startup_time"]
    assert max(started.values()) < served_start, (started, served_start)
    # The proof read the references measured now.
    rows = [r for r in doc["levels"] if r["best_static_mode"]]
    assert [r["concurrency"] for r in rows] == LEVELS and all(r["reference_now"] for r in rows), doc["levels"]
    assert doc["reference_measured"].startswith("again on this node, each in a launch of its own"), doc
    # The node's floor, stored by the compare run, is held in the proof (widened unless its sd estimate is 0).
    assert doc["launch_variation"]["floor"]["runs"] == ["first"], doc["launch_variation"]
    for row in doc["levels"]:
        assert row["best_static_tok_per_s"] == pytest.approx(
            next(lv["output_tok_per_s"] for lv in fresh[row["best_static_mode"]]["levels"]
                 if lv["concurrency"] == row["concurrency"]), rel=1e-3), row
