"""The real SGLang emulator (tp-size 2, stubborn workers, one worker outside the group) torn
down through playbooks/teardown.yml, the way bench.yml's always block does it."""
from __future__ import annotations

import json
import re

import pytest
from td_support import run_playbook

from ansible_collections.specbench.core.plugins.module_utils.teardown import proc_table
from sglang_emulator import gpus

pytestmark = pytest.mark.slow


def test_emulator_with_stubborn_and_runaway_workers(emulator, lab, tmp_path):
    emu = emulator("--tp-size", "2", "--emulator-profile", "llama-3.1-8b-1x-h100", "--emulator-load-seconds", "0.2",
                   "--emulator-fault", "ignore-sigterm", "--emulator-fault", "worker-leaves-group")
    before = gpus.read_state(str(emu.device_dir))
    workers = [p["pid"] for g in before["gpus"] for p in g["processes"]]
    assert len(workers) == 2 and all(g["memory_used_mib"] > 1000 for g in before["gpus"])
    runaway = [w for w in workers if proc_table.read_proc(w).pgid != emu.proc.pid]
    detokenizer = detokenizer_of(emu.proc.pid)  # holds no GPU: found by the server's group
    assert len(runaway) == 1  # the last worker called setsid()
    # what the launch role of an earlier release recorded: the single state/server.json, still read
    (lab.node_dir / "state" / "server.json").write_text(json.dumps({"pid": emu.proc.pid, "pgid": emu.proc.pid}))

    play = run_playbook(tmp_path, lab.extravars(gpu_device_glob=f"{emu.device_dir}/nvidia*",
                                                gpu_kill_patterns=[re.escape(str(tmp_path))],
                                                gpu_term_timeout_s=2))
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    killed = {k["pid"]: k for k in res["killed"]}
    assert killed[emu.proc.pid]["step"] == "launched" and killed[emu.proc.pid]["signals"] == ["SIGTERM"]
    for pid in workers:
        assert killed[pid]["signal"] == "SIGKILL"  # they ignore SIGTERM
    assert killed[runaway[0]]["step"] == "memory"  # no start time in this record: found by its GPU memory
    after = gpus.read_state(str(emu.device_dir))
    assert [g["memory_used_mib"] for g in after["gpus"]] == [1, 1]
    assert not any(g["processes"] for g in after["gpus"])
    assert lab_holders(emu.device_dir) == set()
    assert emu.proc.wait(timeout=5) is not None
    assert "GPU(s) clean" in play.stdout
    assert not alive(detokenizer)


def detokenizer_of(server: int) -> int:
    """The emulator server's sglang::detokenizer child (waits for it to start)."""
    import os
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                    stat = handle.read()
            except OSError:
                continue
            comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
            if comm == "sglang::detoken" and int(rest[1]) == server:
                return int(pid)
        time.sleep(0.1)
    raise AssertionError(f"the emulator server {server} started no sglang::detokenizer")


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has exited)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def lab_holders(device_dir) -> set[int]:
    nodes = proc_table.expand_nodes(f"{device_dir}/nvidia*")
    return set(proc_table.holders(nodes))


def test_node_scope_with_the_roles_emulator_patterns(emulator, lab, tmp_path):
    """The role's own emulator patterns (data in defaults/main.yml, scoped to the node's device
    folder) find the emulator's server and workers by what they are, with no record at all;
    another emulator on the same machine (another device folder) is not touched. The workers
    ignore SIGTERM: the server, on its own SIGTERM, sends them SIGTERM too, and a worker that obeys
    may exit before the teardown's SIGTERM reaches it (`killed` lists what the teardown signalled;
    seen beside a loaded suite, the server alone). Ignoring it, each lives until the teardown's
    SIGKILL, so each is in `killed` however the three are scheduled."""
    emu = emulator("--tp-size", "2", "--emulator-profile", "llama-3.1-8b-1x-h100", "--emulator-load-seconds", "0.2",
                   "--emulator-fault", "ignore-sigterm")
    neighbour = emulator("--tp-size", "1", "--emulator-profile", "llama-3.1-8b-1x-h100",
                         "--emulator-load-seconds", "0.2")
    detokenizer = detokenizer_of(emu.proc.pid)
    extravars = lab.extravars(specbench_emulator_device_dir=str(emu.device_dir), gpu_kill_scope="node")
    del extravars["gpu_kill_patterns"], extravars["gpu_device_glob"]  # the role's defaults for engine=emulator
    play = run_playbook(tmp_path, extravars)
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    killed = {k["pid"]: k for k in res["killed"]}
    workers = {p["pid"] for g in res["before"]["gpus"] for p in g["processes"]}
    # the detokenizer obeys the server's SIGTERM and may be gone before the teardown's own
    assert set(killed) - {detokenizer} == {emu.proc.pid, *workers}
    assert not alive(detokenizer)
    assert all(k["step"] == "pattern" for k in killed.values())
    assert {pid for pid, k in killed.items() if k["signal"] == "SIGKILL"} == workers
    assert [g["memory_used_mib"] for g in gpus.read_state(str(emu.device_dir))["gpus"]] == [1, 1]
    assert neighbour.proc.poll() is None
    assert gpus.read_state(str(neighbour.device_dir))["gpus"][0]["memory_used_mib"] > 1000
