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


def test_the_action_stores_each_runs_part_once_and_reads_the_floor_back(tmp_path):
    rng = random.Random(3605)
    two = {"baseline": launches(rng, "baseline", 0.03, 2), "eagle3": launches(rng, "eagle3", 0.03, 2)}
    for r in two.values():
        r["finished_at"] = datetime.datetime.now(datetime.UTC).isoformat()
    warnings: list[str] = []
    first = ActionModule._noise_floor(str(tmp_path), "node", "r1", two, 30.0, False, warnings)
    again = ActionModule._noise_floor(str(tmp_path), "node", "r1", two, 30.0, False, warnings)
    assert first == again and first["runs"] == ["r1"] and first["df"] == 2 and not warnings
    one = {"baseline": launches(rng, "baseline", 0.03, 1)}
    assert ActionModule._noise_floor(str(tmp_path), "node", "r2", one, 30.0, False, warnings) == first
    assert ActionModule._noise_floor(str(tmp_path), "node", "r2", one, 0.0, False, warnings) is None
    assert (tmp_path / "noise-floor" / "node.json").is_file()
