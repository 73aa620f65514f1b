"""What a teardown that cannot succeed says: a process stuck in the driver (state D) and
memory held outside this PID namespace, simulated through the emulated backend's record
fields (docs/CONTRACTS.md, "Emulated teardown cases"), through real playbook runs."""
from __future__ import annotations

import json
import re

import pytest
from td_support import run_playbook

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table

pytestmark = pytest.mark.slow

FAST_FAIL = {"gpu_term_timeout_s": 0.3, "gpu_kill_timeout_s": 0.3, "gpu_clean_timeout_s": 0.5}


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_d_state_holder_is_named_with_reset_advice(lab, tmp_path):
    stuck, _unused = lab.start("--gpu", "0", "--mib", "30000", "--comm", "td-stuck",
                               "--record-extra", json.dumps({"emulated_state": "D"}))
    server, workers = lab.server(gpus_used=(1,))
    lab.write_server_record(server.pid, server.pid)
    play = run_playbook(tmp_path, lab.extravars(**FAST_FAIL))
    assert play.rc != 0
    res = play.task("Kill the server and the device holders")
    assert res["clean"] is False
    fail = flat(play.task("Refuse to go on with GPUs that are not clean")["msg"])
    assert "GPU 0" in fail and "30001 MiB used" in fail
    assert f"pid {stuck.pid} (user root) stuck in the driver (state D)" in fail
    assert "GPU reset (nvidia-smi --gpu-reset -i <gpu>" in fail and "reboot" in fail
    assert "GPU 1" not in fail  # the healthy server was killed and its GPU is clean
    killed = {k["pid"]: k for k in res["killed"]}
    assert killed[stuck.pid]["signals"] == ["SIGTERM", "SIGKILL"] and not killed[stuck.pid]["exited"]
    assert killed[server.pid]["exited"] and killed[workers[0]]["exited"]
    problems = {p["kind"]: p for p in res["problems"]}
    assert problems["d_state"]["pid"] == stuck.pid and problems["d_state"]["gpu"] == 0
    # the facts were recorded before the play failed
    fact = play.fact("specbench_gpu")
    assert fact["clean"] is False and fact["after"]["dirty_gpus"] == [0]


def test_memory_outside_the_namespace_is_reported_with_host_advice(lab, tmp_path):
    hidden, _unused = lab.start("--gpu", "1", "--mib", "12000", "--comm", "other-container",
                                "--record-extra", json.dumps({"outside_namespace": True}))
    play = run_playbook(tmp_path, lab.extravars(**FAST_FAIL))
    assert play.rc != 0
    res = play.task("Kill the server and the device holders")
    fail = flat(play.task("Refuse to go on with GPUs that are not clean")["msg"])
    assert "GPU 1" in fail and "12001 MiB used, 0 compute process(es)" in fail
    assert "12001 MiB with no process visible here: held outside this PID namespace" in fail
    assert "from inside it (pct exec <vmid>" in fail
    assert res["killed"] == []  # it cannot see the holder, so it signals nobody
    assert [(p["kind"], p["gpu"], p["mib"]) for p in res["problems"]] == [("outside_namespace", 1, 12001)]
    assert all(h["pid"] != hidden.pid for h in res["after"]["holders"])
    assert proc_table.alive(hidden.pid)


def test_memory_the_driver_cannot_attribute_is_not_called_outside(lab, tmp_path):
    """Drivers that list no compute process for this namespace (LXC, before 565): memory with a
    visible holder of the GPU's node is not "held outside"; the holder is named, and an engine
    process among the holders (matching the patterns) is killed, any other one left, said to
    perhaps hold that memory."""
    unlisted = json.dumps({"unlisted": True})
    # only drivers before 565 leave a container's processes unlisted: the emulated node says so
    inventory = lab.dev / "emulated-gpus.json"
    inventory.write_text(json.dumps({**json.loads(inventory.read_text()), "driver_version": "560.35.03"}))
    engine, _unused = lab.start("--gpu", "0", "--mib", "9000", "--comm", "td-engine", "--record-extra", unlisted)
    other, _unused = lab.start("--gpu", "1", "--mib", "4000", "--comm", "td-trainer", "--record-extra", unlisted)
    patterns = [{"comm": "^td-engine$", "args": lab.pattern}]
    play = run_playbook(tmp_path, lab.extravars(gpu_kill_patterns=patterns, **FAST_FAIL))
    assert play.rc != 0
    res = play.task("Kill the server and the device holders")
    assert res["before"]["gpus"][0]["processes"] == [] and res["before"]["gpus"][0]["memory_used_mib"] == 9001
    killed = {k["pid"]: k for k in res["killed"]}
    assert set(killed) == {engine.pid} and killed[engine.pid]["step"] == "memory"
    fail = flat(play.task("Refuse to go on with GPUs that are not clean")["msg"])
    assert "GPU 0" not in fail and "GPU 1" in fail and "4001 MiB used" in fail
    assert "the driver attributes it to no process here" in fail
    # issue 19, item 5: it may hold that memory, so it is never called a holder "without memory"
    assert f"pid {other.pid} (user root)" in fail and "holding a device node, no memory" not in fail
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    assert left[other.pid] == ("holds the node of GPU 1, whose 4001 MiB the driver attributes to no process (it "
                               "may hold them): left running")
    assert "held outside this PID namespace" not in fail
    (problem,) = res["problems"]
    assert (problem["kind"], problem["gpu"], problem["holders"]) == ("unattributed", 1, [other.pid])
    assert proc_table.alive(other.pid) and not proc_table.alive(engine.pid)
