"""The teardown's scope, each test in a PID namespace of its own, through real playbook runs
(ansible-runner, as AWX runs them) over real process trees holding a device folder the test made.

The world: three emulated GPUs, gpu_devices [0, 1]. A stale SGLang-like tree (``python3 -m
sglang.launch_server`` with ``sglang::scheduler_TP<r>`` workers: one ignores SIGTERM, one left
the group with setsid) and an unnamed orphan holding GPU 1 must die; nvidia-persistenced, a
monitor holding every node without memory, ``tail -f sglang.launch_server.log``, a shell whose
arguments mention sglang.launch_server, another user's SGLang holding nothing of ours, and a
job holding only GPU 2 (not a target) must live. ``gpu_kill_scope: node`` in the same world
kills everything matching except the never-kill list.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from td_support import OTHER_USER, Lab, run_playbook

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table
from ansible_collections.specbench.core.plugins.module_utils.teardown import sequence as gpu_teardown

pytestmark = [pytest.mark.slow, pytest.mark.own_pid_namespace]

IDLE = 1  # an idle emulated GPU reads 1 MiB


@pytest.fixture
def world_lab(tmp_path):
    lab = Lab(tmp_path, gpu_count=3, shared=True)
    yield lab
    lab.cleanup()


def build_world(lab: Lab) -> dict:
    """Every process of the world, by role (pids)."""
    assert os.getpid() == 1, "not in a PID namespace of its own"
    server, workers = lab.sglang_tree(gpus_used=(0, 1), mib=20000, stubborn=(0,), escaped=(1,))
    parent, (orphan,) = lab.start("--exit-after-ready", "--worker", json.dumps(["--gpu", "1", "--mib", "3000"]))
    parent.wait(timeout=10)  # the orphan's parent is gone: it is reparented to this namespace's init
    persistenced = lab.never_kill_daemon()
    monitor = lab.monitor("nvtop")
    log = lab.tmp / "sglang.launch_server.log"
    log.write_text("[2026-12-01 07:00:00] The server is fired up and ready to roll!\n")
    tail = subprocess.Popen(["tail", "-f", str(log)], stdout=subprocess.DEVNULL, start_new_session=True)
    shell = subprocess.Popen(["bash", "-c", f"sleep 600; echo python3 -m sglang.launch_server {lab.tag}"],
                             start_new_session=True)
    lab.started += [tail, shell]
    stranger, _unused = lab.start(user=OTHER_USER, as_sglang=True)  # another user's SGLang, holding nothing
    other_gpu, _unused = lab.start("--gpu", "2", "--mib", "5000", "--comm", "td-other-job")
    deadline = time.monotonic() + 10
    while len(proc_table.descendants(shell.pid, proc_table.snapshot())) < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    world = {
        "server": server.pid, "stubborn": workers[0], "escaped": workers[1], "orphan": orphan,
        "persistenced": persistenced.pid, "monitor": monitor.pid, "tail": tail.pid, "shell": shell.pid,
        "stranger": stranger.pid, "other_gpu": other_gpu.pid,
    }
    assert proc_table.read_proc(orphan).ppid == 1
    assert proc_table.read_proc(workers[1]).pgid != server.pid  # the escaped worker left the group
    assert proc_table.read_proc(stranger.pid).uid != os.geteuid()
    assert lab.used() == [20001, 23001, 5001]
    return world


def world_vars(lab: Lab, **more) -> dict:
    # the engine's own patterns (SGLang's), unscoped: nothing outside this namespace can be reached
    values = {"engine": "sglang", "gpu_backend": "emulated", "gpu_devices": [0, 1],
              "gpu_kill_patterns": gpu_teardown.ENGINE_KILL_PATTERNS["sglang"],
              "gpu_term_timeout_s": 1, "gpu_kill_timeout_s": 5, "gpu_clean_timeout_s": 10}
    return lab.extravars(**{**values, **more})


def alive(pid: int) -> bool:
    return proc_table.alive(pid)


def test_default_scope_kills_the_stale_tree_and_nothing_else(world_lab):
    lab = world_lab
    w = build_world(lab)
    play = run_playbook(lab.tmp, world_vars(lab))
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    killed = {k["pid"]: k for k in res["killed"]}
    assert set(killed) == {w["server"], w["stubborn"], w["escaped"], w["orphan"]}
    assert killed[w["server"]]["step"] == "launched" and killed[w["server"]]["signals"] == ["SIGTERM"]
    assert killed[w["stubborn"]]["signals"] == ["SIGTERM", "SIGKILL"]
    assert killed[w["escaped"]]["step"] == "launched"  # a descendant of the recorded server, though in its own group
    assert killed[w["orphan"]]["step"] == "memory"
    for role in ("persistenced", "monitor", "tail", "shell", "stranger", "other_gpu"):
        assert alive(w[role]), f"{role} was killed"
    assert lab.used() == [IDLE, IDLE, 5001]
    assert res["clean"] is True and res["targets"] == [0, 1] and res["scope"] == "own"
    assert res["after"]["dirty_gpus"] == [] and res["after"]["targets"] == [0, 1]
    assert res["refused"] == []
    left = {s["pid"]: s["reason"] for s in res["left_alone"]}
    assert "gpu_never_kill" in left[w["persistenced"]]
    assert left[w["monitor"]] == "holding a device node, no memory: left running"
    assert "outside gpu_devices" in left[w["other_gpu"]]
    assert f"another user's ({OTHER_USER})" in left[w["stranger"]]
    assert w["tail"] not in left and w["shell"] not in left  # not SGLang by any measure
    fact = play.fact("specbench_gpu")
    assert fact["clean"] is True and {k["pid"] for k in fact["killed"]} == set(killed)
    assert "holding a device node, no memory: left running" in play.task("Kill the server")["msg"]


def test_node_scope_kills_everything_matching_but_the_never_kill_list(world_lab):
    lab = world_lab
    w = build_world(lab)
    play = run_playbook(lab.tmp, world_vars(lab, gpu_kill_scope="node"))
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    killed = {k["pid"]: k for k in res["killed"]}
    # the seeds' thoroughness: the tree, the orphan, the monitor holding the target GPUs' nodes and
    # the other user's SGLang all die
    assert set(killed) >= {w["server"], w["stubborn"], w["escaped"], w["orphan"], w["monitor"], w["stranger"]}
    assert killed[w["stranger"]]["step"] == "pattern" and killed[w["monitor"]]["step"] == "holder"
    for role in ("persistenced", "tail", "shell", "other_gpu"):
        assert alive(w[role]), f"{role} was killed"
    assert set(killed) == {w[r] for r in ("server", "stubborn", "escaped", "orphan", "monitor", "stranger")}
    assert lab.used() == [IDLE, IDLE, 5001]
    assert res["clean"] is True and res["scope"] == "node"


def test_check_mode_plans_the_same_and_kills_nothing(world_lab):
    lab = world_lab
    w = build_world(lab)
    play = run_playbook(lab.tmp, world_vars(lab), check=True)
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    assert {p["pid"] for p in res["would_kill"]} == {w["server"], w["stubborn"], w["escaped"], w["orphan"]}
    assert res["killed"] == [] and all(alive(p) for p in w.values())


def test_another_users_memory_on_a_target_gpu_fails_the_run_before_the_launch(world_lab):
    lab = world_lab
    assert os.getpid() == 1
    theirs, _unused = lab.start("--gpu", "0", "--mib", "8000", "--comm", "sglang::schedul", user=OTHER_USER)
    ours, _unused = lab.start("--gpu", "1", "--mib", "6000", "--comm", "td-stale")
    book = lab.tmp / "launch.yml"
    marker = lab.tmp / "launched"
    book.write_text(
        "- name: Teardown, then launch\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Make the GPUs clean\n      ansible.builtin.include_role:\n"
        "        name: specbench.core.gpu_teardown\n"
        "    - name: Launch the next mode\n      ansible.builtin.file:\n"
        f"        path: {marker}\n        state: touch\n        mode: '0644'\n"
    )
    play = run_playbook(lab.tmp, world_vars(lab, gpu_clean_timeout_s=60), playbook=str(book))
    assert play.rc != 0
    assert not marker.exists(), "the launch ran although the teardown failed"
    res = play.task("Kill the server and the device holders")
    assert {k["pid"] for k in res["killed"]} == {ours.pid}
    (refused,) = res["refused"]
    assert refused["pid"] == theirs.pid and refused["user"] == OTHER_USER and refused["kind"] == "other_user"
    assert "gpu_kill_other_users: true" in refused["fix"] and refused["gpus"] == [0]
    assert res["elapsed_s"] < 60  # it did not wait out the deadline for memory it will not free
    fail = re.sub(r"\s+", " ", play.task("Refuse to go on with GPUs that are not clean")["msg"])
    assert f"pid {theirs.pid} (user {OTHER_USER})" in fail
    assert "gpu_kill_other_users: true" in fail and "another user's process" in fail
    assert "--comm sglang::schedul" in fail  # its command line
    assert alive(theirs.pid) and not alive(ours.pid)
    assert lab.used() == [8001, IDLE, IDLE]

    allowed = run_playbook(lab.tmp, world_vars(lab, gpu_kill_other_users=True), playbook=str(book))
    assert allowed.rc == 0, allowed.stdout
    assert marker.exists() and not alive(theirs.pid)
    killed = allowed.task("Kill the server and the device holders")["killed"]
    assert [(k["pid"], k["user"], k["step"]) for k in killed] == [(theirs.pid, OTHER_USER, "memory")]
