"""The action plugin compare_results' noise floor (issue 36, item 2): each run's launch-to-launch
measurement stored per host by run id, read back by later runs. A controller test (it imports
ansible.plugins); the floor's maths are tested in module_utils/specbench_compare/test_launch_noise.py."""
from __future__ import annotations

import datetime
import math
import random

from compare_synth import level, result

from ansible_collections.specbench.core.plugins.action.compare_results import ActionModule
from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp

LEVELS = [1, 2, 5, 10, 30, 70, 100, 250]


def launches(rng, mode: str, launch_sd: float, k: int) -> dict:
    runs = []
    for n in range(k):
        effect = math.exp(rng.gauss(0, launch_sd))
        lv = [level(c, 100.0 * c / (1 + c / 25) * effect * math.exp(rng.gauss(0, 0.01)), 0.02) for c in LEVELS]
        runs.append((None if n == 0 else f"launch{n + 1}", result(mode, lv)))
    return cmp.pool_runs(runs)


def floor_args(max_age: float = 30.0, prior_sd: float = 0.03, prior_df: int = 2) -> dict:
    return {"noise_floor_max_age_days": max_age, "noise_floor_prior_sd": prior_sd, "noise_floor_prior_df": prior_df}


def test_the_action_stores_each_runs_part_once_and_reads_the_floor_back(tmp_path):
    rng = random.Random(3605)
    two = {"baseline": launches(rng, "baseline", 0.03, 2), "eagle3": launches(rng, "eagle3", 0.03, 2)}
    for r in two.values():
        r["finished_at"] = datetime.datetime.now(datetime.UTC).isoformat()
    warnings: list[str] = []
    first = ActionModule._noise_floor(str(tmp_path), "node", "r1", two, floor_args(), False, warnings)
    again = ActionModule._noise_floor(str(tmp_path), "node", "r1", two, floor_args(), False, warnings)
    # The data's 2 degrees of freedom (one per mode) and the stated prior's 2.
    assert first == again and first["runs"] == ["r1"] and first["df_data"] == 2 and first["df"] == 4 and not warnings
    one = {"baseline": launches(rng, "baseline", 0.03, 1)}
    assert ActionModule._noise_floor(str(tmp_path), "node", "r2", one, floor_args(), False, warnings) == first
    assert ActionModule._noise_floor(str(tmp_path), "node", "r2", one, floor_args(0.0), False, warnings) is None
    assert (tmp_path / "noise-floor" / "node.json").is_file()


def test_the_floor_is_kept_apart_by_engine_version_model_and_gpus(tmp_path):
    """A floor measured with one model (or engine version, or GPUs) is never read for another, and a node that
    one inventory name has meant with other GPUs starts a floor of its own."""
    rng = random.Random(3607)
    now = datetime.datetime.now(datetime.UTC).isoformat()

    def run(model: str, uuid: str) -> dict:
        out = {"baseline": launches(rng, "baseline", 0.03, 2), "eagle3": launches(rng, "eagle3", 0.03, 2)}
        for r in out.values():
            r["finished_at"] = now
            r["server"] = dict(r["server"], model=model)
            r["gpu"] = {"before": {"driver_version": "590.48.01", "gpus": [{"name": "NVIDIA H100", "uuid": uuid}]}}
        return out

    warnings: list[str] = []
    llama = ActionModule._noise_floor(str(tmp_path), "node", "r1", run("llama", "GPU-a"), floor_args(), False, warnings)
    assert llama["runs"] == ["r1"] and llama["key"]["model"] == "llama" and llama["key"]["gpu_uuids"] == "GPU-a"
    other_model = ActionModule._noise_floor(str(tmp_path), "node", "r2", run("qwen", "GPU-a"), floor_args(), False,
                                            warnings)
    assert other_model["runs"] == ["r2"]
    other_gpus = ActionModule._noise_floor(str(tmp_path), "node", "r3", run("llama", "GPU-b"), floor_args(), False,
                                           warnings)
    assert other_gpus["runs"] == ["r3"]
    same = ActionModule._noise_floor(str(tmp_path), "node", "r4", run("llama", "GPU-a"), floor_args(), False, warnings)
    assert same["runs"] == ["r1", "r4"]
    # Before a launch the plan knows the engine and the model only: the stored runs of that model match.
    assert cmp.launch_node_floor(str(tmp_path), "node", 30.0, warnings, key={"engine": "emulator", "model": "qwen"}
                                 )["runs"] == ["r2"]


def plan(tmp_path, launches_arg: str, min_df: int = 2, max_age: float = 30.0, levels=None, floor_levels: int = 2) -> dict:
    """_plan_launches as the compare role's preflight calls it (the action's other state is not used)."""
    import types

    from ansible.errors import AnsibleActionFail

    owner = types.SimpleNamespace(_display=types.SimpleNamespace(warning=lambda text: None))
    args = {"plan_launches": launches_arg, "hosts": ["node"], "results_dir": str(tmp_path),
            "noise_floor_min_df": min_df, "plan_levels": levels, "noise_floor_levels": floor_levels,
            "noise_floor_key": None, **floor_args(max_age)}
    try:
        return ActionModule._plan_launches(owner, {}, args, [])
    except AnsibleActionFail as exc:
        return {"failed": str(exc)}


def test_auto_launches_twice_until_the_node_has_a_floor_then_once(tmp_path):
    """compare_launches: auto (issue 36, item 2): two launches (A B B A) while the host has no floor younger
    than the limit with noise_floor_min_df degrees of freedom, one after; a number is taken as given."""
    first = plan(tmp_path, "auto")
    assert first["launches"] == 2 and first["noise_floor"] is None
    assert "two launches per mode, A B B A: node has no noise floor younger than 30 days" in first["msg"]
    rng = random.Random(3607)
    two = {"baseline": launches(rng, "baseline", 0.03, 2), "eagle3": launches(rng, "eagle3", 0.03, 2)}
    for r in two.values():
        r["finished_at"] = datetime.datetime.now(datetime.UTC).isoformat()
    ActionModule._noise_floor(str(tmp_path), "node", "r1", two, floor_args(), False, [])
    after = plan(tmp_path, "auto")
    assert after["launches"] == 1 and after["noise_floor"]["df_data"] == 2 and "one launch per mode" in after["msg"]
    thin = plan(tmp_path, "AUTO", min_df=4)
    assert thin["launches"] == 2 and "has 2 degrees of freedom, fewer than compare_noise_floor_min_df (4)" in thin["msg"]
    off = plan(tmp_path, "auto", max_age=0.0)
    assert off["launches"] == 2 and "noise floors are off" in off["msg"]
    assert plan(tmp_path, "3")["launches"] == 3 and plan(tmp_path, "1")["launches"] == 1
    assert "compare_launches must be auto or a whole number from 1 to 10 (got '0')" in plan(tmp_path, "0")["failed"]
    assert "compare_noise_floor_min_df must be 1 or more" in plan(tmp_path, "auto", min_df=0)["failed"]


def test_a_run_measuring_the_floor_relaunches_a_few_levels_spread_from_the_lowest(tmp_path):
    """compare_noise_floor_levels (issue 36, item 3): the second launches of a run without a floor re-measure a
    few levels, spread by index from the lowest; every level when 0 or when there are no more levels than that;
    a run with a floor, or an explicit number of launches, re-measures every level (relaunch_levels empty)."""
    from ansible_collections.specbench.core.plugins.module_utils.specbench_compare import relaunch_levels

    seeds = [1, 2, 5, 10, 30, 70, 100, 250]
    assert relaunch_levels(seeds, 2) == [1, 30]
    assert relaunch_levels(seeds, 3) == [1, 5, 70]
    assert relaunch_levels([16, 1, 4], 2) == [1, 4]
    assert relaunch_levels(seeds, 0) == seeds and relaunch_levels(seeds, 8) == seeds and relaunch_levels([4], 2) == [4]
    first = plan(tmp_path, "auto", levels=seeds)
    assert first["launches"] == 2 and first["relaunch_levels"] == [1, 30]
    assert "the second launches re-measure C=1, 30 only (compare_noise_floor_levels: 2)" in first["msg"]
    every = plan(tmp_path, "auto", levels=seeds, floor_levels=0)
    assert every["launches"] == 2 and every["relaunch_levels"] == [] and "re-measure" not in every["msg"]
    assert plan(tmp_path, "auto", levels=[1, 4], floor_levels=2)["relaunch_levels"] == []
    assert plan(tmp_path, "2", levels=seeds)["relaunch_levels"] == []
    assert "compare_noise_floor_levels must be 0 or more" in plan(tmp_path, "auto", levels=seeds, floor_levels=-1)["failed"]
