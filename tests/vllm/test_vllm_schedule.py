"""vLLM's own validation of the schedule serve.yml gives it (num_speculative_tokens_per_batch_size):
the module file that expands it, loaded alone from the vLLM venv (it imports nothing of vLLM).
Here with the vLLM tests, which wait for that venv while .ci/run builds it beside them."""
from __future__ import annotations

import importlib.util

import vllmkit

from ansible_collections.specbench.core.plugins.module_utils import specbench_compare as cmp
from ansible_collections.specbench.core.plugins.module_utils.engines.vllm import postlaunch as vllm_pl


def rows(*pairs):
    return [{"concurrency": c, "verdict": v} for c, v in pairs]


def vllm_lookup():
    """vllm/v1/spec_decode/dynamic/utils.py from the vLLM venv, loaded alone."""
    vllmkit.wait_for_venv()
    path = vllmkit.ROOT / ".venv-vllm/lib/python3.11/site-packages/vllm/v1/spec_decode/dynamic/utils.py"
    spec = importlib.util.spec_from_file_location("vllm_dynamic_sd_utils", path)
    vutils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vutils)
    return vutils


def test_the_schedule_passes_vllms_own_validation():
    """vLLM's own expansion of the schedule (the module file alone: it imports nothing of vLLM)."""
    vutils = vllm_lookup()
    schedule = cmp.vllm_schedule(rows((1, "pays"), (4, "unclear"), (8, "pays"), (16, "loses")), 3, 32)
    lookup = vutils.build_dynamic_sd_schedule_lookup(schedule, 32, 3)
    assert lookup[1] == 3 and lookup[4] == 0 and lookup[8] == 3 and lookup[9:] == [0] * 24


def test_the_post_launch_check_reads_a_schedule_as_vllm_does():
    """engines/vllm/postlaunch.py vllm_tokens_at (what the check expects at its one request, batch size 1)
    against vLLM's own dense lookup, on schedules with gaps, caps and ranges out of order."""
    vutils = vllm_lookup()
    schedules = ([[1, 15, 0], [16, 16, 4], [17, 32, 0]], [[32, 48, 2], [1, 8, 5], [12, 20, 1]],
                 [[1, 1, 3]], cmp.vllm_schedule(rows((1, "unclear"), (4, "pays"), (16, "pays")), 4, 32))
    for schedule in schedules:
        for static in (1, 3, 4):
            lookup = vutils.build_dynamic_sd_schedule_lookup(schedule, 64, static)
            ours = [vllm_pl.vllm_tokens_at({"method": "ngram", "num_speculative_tokens": static,
                                            "num_speculative_tokens_per_batch_size": schedule}, bs) for bs in range(1, 65)]
            assert ours == lookup[1:], (schedule, static)
