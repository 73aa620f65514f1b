"""The nvidia-smi backend against a fake nvidia-smi whose CSV follows the live holders of the
test's device folder (tests/teardown/fake_nvidia_smi.py), its error texts, and the
gpu_state module through ansible-runner."""
from __future__ import annotations

import os
import stat
import sys

import ansible_runner
import pytest
from td_support import FAKE_SMI, ROOT, run_playbook

from ansible_collections.specbench.core.plugins.module_utils.teardown import gpu_state, proc_table


def fake_smi(lab, fail: str = "") -> str:
    """A wrapper script named nvidia-smi in the test's folder, bound to its device folder."""
    folder = lab.tmp / ("bin-" + (fail or "ok"))
    folder.mkdir(exist_ok=True)
    path = folder / "nvidia-smi"
    path.write_text(
        "#!/bin/sh\n"
        f"FAKE_NVSMI_DEVICE_DIR='{lab.dev}' FAKE_NVSMI_FAIL='{fail}' exec '{sys.executable}' '{FAKE_SMI}' \"$@\"\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_reads_follow_the_live_holders(lab):
    backend = gpu_state.open_backend("nvidia-smi", f"{lab.dev}/nvidia*", fake_smi(lab))
    assert [g["memory_used_mib"] for g in backend.read_gpus()] == [1, 1]
    server, workers = lab.server(gpus_used=(1,), mib=7000)
    state = gpu_state.read_state(backend, f"{lab.dev}/nvidia*", idle_mib=64)
    assert state["backend"] == "nvidia-smi" and state["driver_version"] == "590.48.01"
    assert [g["memory_used_mib"] for g in state["gpus"]] == [1, 7001]
    assert state["gpus"][1]["processes"][0]["pid"] == workers[0]
    assert state["gpus"][1]["processes"][0]["used_memory_mib"] == 7000
    assert state["gpus"][1]["memory_total_mib"] == 143771 and state["gpus"][1]["memory_reserved_mib"] == 512
    assert state["dirty_gpus"] == [1] and state["clean"] is False
    holders = {h["pid"]: h for h in state["holders"]}
    assert set(holders) == {server.pid, workers[0]}
    assert holders[workers[0]]["state"] == "S"
    assert any(n.endswith("/nvidia1") for n in holders[workers[0]]["nodes"])


def test_graphics_processes_and_device_minors_come_from_the_query_output(lab):
    """Issue 19, items 3 and 6: without /proc/driver/nvidia/gpus the nodes come from ``nvidia-smi
    -q`` (Minor Number, under the device glob's folder); memory no compute process explains makes it
    ask ``-q -d PIDS`` for graphics processes."""
    xorg, _unused = lab.start("--gpu", "1", "--mib", "200", "--comm", "Xorg", "--record-extra", '{"graphics": true}')
    backend = gpu_state.open_backend("nvidia-smi", f"{lab.dev}/nvidia*", fake_smi(lab))
    gpus = backend.read_gpus()
    assert [g["node"] for g in gpus] == [f"{lab.dev}/nvidia0", f"{lab.dev}/nvidia1"]
    assert gpus[0]["processes"] == []
    assert gpus[1]["processes"] == [{"pid": xorg.pid, "used_memory_mib": 200, "type": "graphics"}]
    nominor = gpu_state.open_backend("nvidia-smi", f"{lab.dev}/nvidia*", fake_smi(lab, "nominor"))
    assert [g["node"] for g in nominor.read_gpus()] == [None, None]


@pytest.mark.parametrize(
    ("fail", "kind", "text"),
    [
        ("driver", "driver_not_loaded", "The NVIDIA kernel driver is not loaded"),
        ("mismatch", "version_mismatch", "user-space library and kernel module versions differ"),
        ("nogpu", "no_gpu", "No NVIDIA GPU found"),
        ("nolib", "no_library", "No NVIDIA driver library on this node"),
    ],
)
def test_failures_are_told_apart(lab, fail, kind, text):
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("nvidia-smi", "/dev/nvidia*", fake_smi(lab, fail))
    assert err.value.kind == kind
    assert text in str(err.value)


def test_mismatch_names_the_lxc_fix(lab):
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("nvidia-smi", "/dev/nvidia*", fake_smi(lab, "mismatch"))
    assert "exactly the host's version" in str(err.value) and "--no-kernel-module" in str(err.value)


def test_older_nvidia_smi_without_memory_reserved(lab):
    backend = gpu_state.open_backend("nvidia-smi", f"{lab.dev}/nvidia*", fake_smi(lab, "old"))
    gpus = backend.read_gpus()
    assert [g["memory_reserved_mib"] for g in gpus] == [0, 0]
    assert [g["memory_used_mib"] for g in gpus] == [1, 1]


def test_missing_binary(tmp_path):
    with pytest.raises(gpu_state.GpuStateError) as err:
        gpu_state.open_backend("nvidia-smi", "/dev/nvidia*", str(tmp_path / "no-such-nvidia-smi"))
    assert err.value.kind == "no_library"
    assert "gpu_nvidia_smi" in str(err.value)


@pytest.mark.slow
def test_role_with_nvidia_smi_backend(lab, tmp_path):
    server, workers = lab.server(["--ignore-term"], [])
    lab.write_server_record(server.pid, server.pid)
    play = run_playbook(tmp_path, lab.extravars(gpu_backend="nvidia-smi", gpu_nvidia_smi=fake_smi(lab),
                                                gpu_term_timeout_s=0.5))
    assert play.rc == 0, play.stdout
    res = play.task("Kill the server and the device holders")
    assert res["backend"] == "nvidia-smi"
    assert res["before"]["gpus"][0]["memory_used_mib"] == 20001
    assert res["after"]["gpus"][0]["memory_used_mib"] == 1
    killed = {k["pid"]: k["signal"] for k in res["killed"]}
    assert killed == {server.pid: "SIGTERM", workers[0]: "SIGKILL", workers[1]: "SIGTERM"}
    assert lab.holders() == set()


@pytest.mark.slow
def test_gpu_state_module_sets_the_fact(lab, tmp_path):
    server, workers = lab.server(gpus_used=(0,), mib=5000)
    (tmp_path / "adhoc").mkdir()
    result = ansible_runner.run(
        private_data_dir=str(tmp_path / "adhoc"),
        host_pattern="localhost",
        module="specbench.core.gpu_state",
        module_args=f"backend=nvidia-smi nvidia_smi={fake_smi(lab)} device_glob={lab.dev}/nvidia* idle_mib=16",
        inventory=str(ROOT / "inventory" / "local.yml"),
        envvars={"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                 "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]},
        cmdline="--check",
        quiet=True,
    )
    assert result.rc == 0, result.stdout.read()
    res = next(e["event_data"]["res"] for e in result.events if e["event"] == "runner_on_ok")
    fact = res["ansible_facts"]["gpu_state"]
    assert res["changed"] is False
    assert fact["gpus"][0]["processes"][0]["pid"] == workers[0]
    assert fact["gpus"][0]["processes"][0]["name"] == "td-worker0"
    assert fact["dirty_gpus"] == [0]
    assert {h["pid"] for h in fact["holders"]} == {server.pid, workers[0]}
    assert proc_table.alive(server.pid)
