"""Issue 19, items 2 and 3: ``gpu_devices`` holds in scope node too, and unknown device numbers
never make every holder a target. Each test in a PID namespace of its own, through the role.

The world: gpu_devices [0]; the recorded SGLang-like server on GPU 0 must die; a second SGLang
server on GPU 1 and a notebook kernel with memory only on GPU 1 but /dev/nvidia0 open (CUDA
opens every visible GPU's node) must live. The kill patterns are SGLang's own, unscoped: nothing
outside this namespace can be reached.
"""
from __future__ import annotations

import os

import pytest
from td_support import run_playbook
from test_nvidia_smi_backend import fake_smi

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown import sequence as gpu_teardown

pytestmark = [pytest.mark.slow, pytest.mark.own_pid_namespace]


def subset_vars(lab, **more) -> dict:
    values = {"engine": "sglang", "gpu_devices": [0], "gpu_kill_scope": "node",
              "gpu_kill_patterns": gpu_teardown.ENGINE_KILL_PATTERNS["sglang"], "gpu_term_timeout_s": 1}
    return lab.extravars(**{**values, **more})


def test_node_scope_spares_a_second_server_and_a_notebook_on_another_gpu(lab, tmp_path):
    assert os.getpid() == 1
    ours, (our_worker,) = lab.sglang_tree(gpus_used=(0,), stubborn=(), escaped=())
    theirs, (their_worker,) = lab.start(
        "--nodes", "nvidiactl,nvidia-uvm",
        "--worker", '["--gpu", "1", "--mib", "30000", "--argv0", "sglang::scheduler_TP0"]', as_sglang=True)
    notebook, _unused = lab.start("--gpu", "1", "--mib", "9000", "--nodes", "nvidia0", "--comm", "ipykernel")
    assert lab.used() == [20001, 39001]

    play = run_playbook(tmp_path, subset_vars(lab))
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    assert {k["pid"] for k in res["killed"]} == {ours.pid, our_worker}
    for pid in (theirs.pid, their_worker, notebook.pid):
        assert proc_table.alive(pid), f"{pid} was killed"
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    assert "GPUs outside gpu_devices" in left[their_worker] and "GPUs outside gpu_devices" in left[theirs.pid]
    assert "GPUs outside gpu_devices" in left[notebook.pid]
    assert lab.used() == [1, 39001] and res["clean"] is True


@pytest.mark.parametrize("minors", ["known", "unknown"])
def test_nvidia_smi_without_proc_entries_maps_nodes_or_refuses(lab, tmp_path, minors):
    """No /proc/driver/nvidia/gpus here (no NVIDIA driver): the device minors come from
    ``nvidia-smi -q``; where it cannot say (Minor Number: N/A), nothing is killed by node."""
    assert not os.path.exists("/proc/driver/nvidia/gpus")
    ours, (our_worker,) = lab.sglang_tree(gpus_used=(0,), stubborn=(), escaped=())
    watcher, _unused = lab.start("--nodes", "nvidiactl,nvidia-uvm,nvidia1", "--comm", "td-notebook")
    smi = fake_smi(lab, "" if minors == "known" else "nominor")
    play = run_playbook(tmp_path, subset_vars(lab, gpu_backend="nvidia-smi", gpu_nvidia_smi=smi))
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    assert {k["pid"] for k in res["killed"]} == {ours.pid, our_worker}
    assert proc_table.alive(watcher.pid)
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    if minors == "known":
        assert [g["node"] for g in res["before"]["gpus"]] == [f"{lab.dev}/nvidia0", f"{lab.dev}/nvidia1"]
        assert "GPUs outside gpu_devices" in left[watcher.pid]
    else:
        assert "not killed by its device nodes" in left[watcher.pid]
        assert any("cannot map the device nodes to GPUs" in w for w in res.get("warnings", [])), res
    assert lab.used() == [1, 1] and res["clean"] is True
