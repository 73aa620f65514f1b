"""Emulated GPUs and the fault switches: real process trees holding a test-made folder."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest
from specbench_testkit import holders_of, http

from sglang_emulator import gpus

LLAMA2 = ["--emulator-profile", "llama-3.1-8b-1x-h100", "--tp-size", "2"]


def wait_for(predicate, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def used(device_dir) -> list[int]:
    return [g["memory_used_mib"] for g in gpus.read_state(str(device_dir))["gpus"]]


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode()


def workers(emu) -> dict[int, int]:
    """rank -> pid of the test's own emulator's workers."""
    found = {}
    for pid in holders_of(emu.device_dir):
        line = cmdline(pid)
        if "sglang::scheduler_TP" in line:
            found[int(line.split("sglang::scheduler_TP")[1].split()[0])] = pid
    return found


def test_device_folder_and_worker_process_tree(emulator):
    emu = emulator(*LLAMA2)
    names = sorted(os.listdir(emu.device_dir))
    for node in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "emulated-gpus.json"):
        assert node in names
    assert "nvidia2" not in names
    inventory = json.loads((emu.device_dir / "emulated-gpus.json").read_text())
    assert [g["index"] for g in inventory["gpus"]] == [0, 1]
    assert inventory["gpus"][0]["uuid"].startswith("GPU-")
    ranks = workers(emu)
    assert sorted(ranks) == [0, 1]
    for pid in ranks.values():
        assert os.getpgid(pid) == emu.proc.pid  # same process group as the server
        with open(f"/proc/{pid}/comm") as fh:
            assert fh.read().strip() == "sglang::schedul"
    assert emu.proc.pid in holders_of(emu.device_dir)  # the server holds nvidiactl too


def test_memory_reads_only_while_a_live_process_holds_the_node(emulator):
    emu = emulator(*LLAMA2, "--mem-fraction-static", "0.8")
    state = gpus.read_state(str(emu.device_dir))
    total = state["gpus"][0]["memory_total_mib"]
    assert all(u > 0.8 * total for u in used(emu.device_dir))
    assert state["gpus"][1]["processes"][0]["name"] == "sglang::scheduler_TP1"
    os.kill(workers(emu)[1], signal.SIGKILL)
    wait_for(lambda: used(emu.device_dir)[1] == 1)
    assert used(emu.device_dir)[0] > 0.8 * total  # the other GPU is still held
    os.killpg(emu.proc.pid, signal.SIGKILL)
    wait_for(lambda: used(emu.device_dir) == [1, 1])


def test_sigterm_stops_server_and_workers(emulator):
    emu = emulator(*LLAMA2)
    os.kill(emu.proc.pid, signal.SIGTERM)
    assert emu.proc.wait(timeout=10) == 0
    wait_for(lambda: not holders_of(emu.device_dir))
    assert used(emu.device_dir) == [1, 1]


def test_fault_workers_ignore_sigterm(emulator):
    emu = emulator(*LLAMA2, "--emulator-fault", "ignore-sigterm")
    os.kill(emu.proc.pid, signal.SIGTERM)
    emu.proc.wait(timeout=10)
    time.sleep(0.3)
    assert sorted(workers(emu)) == [0, 1]  # left behind, still holding their GPUs
    assert min(used(emu.device_dir)) > 1000
    assert "did not exit on SIGTERM" in emu.log()


def test_fault_worker_leaves_the_process_group(emulator):
    emu = emulator(*LLAMA2, "--emulator-fault", "worker-leaves-group")
    ranks = workers(emu)
    assert os.getpgid(ranks[0]) == emu.proc.pid
    assert os.getpgid(ranks[1]) != emu.proc.pid
    os.killpg(emu.proc.pid, signal.SIGKILL)
    emu.proc.wait(timeout=10)
    time.sleep(0.2)
    assert list(workers(emu)) == [1]  # killing the group missed it
    assert used(emu.device_dir)[1] > 1000


def test_fault_failing_start_exits_with_an_out_of_memory_line(emulator):
    emu = emulator(*LLAMA2, "--emulator-fault", "fail-start", wait=False)
    assert emu.proc.wait(timeout=30) == 1
    assert "torch.OutOfMemoryError: CUDA out of memory" in emu.log()
    wait_for(lambda: not holders_of(emu.device_dir))


def test_fault_slow_start_keeps_health_503(emulator):
    emu = emulator(*LLAMA2, "--emulator-load-seconds", "600", time_scale=1.0, wait=False)
    wait_for(lambda: _status(emu) == 503)
    time.sleep(1.0)
    assert _status(emu) == 503 and emu.proc.poll() is None


def _status(emu):
    try:
        return http("GET", emu.base_url + "/health_generate", timeout=2)[0]
    except OSError:
        return None


def test_fault_crash_after_n_requests(emulator):
    emu = emulator(*LLAMA2, "--emulator-crash-after", "3")
    body = {"text": "x", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    for _unused1 in range(3):
        assert http("POST", emu.base_url + "/generate", body)[0] == 200
    with pytest.raises(OSError):
        http("POST", emu.base_url + "/generate", body, timeout=10)
    assert emu.proc.wait(timeout=10) == 1
    assert "Scheduler hit an exception" in emu.log()


def test_port_in_use_fails_like_uvicorn(emulator, tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        emu = emulator(*LLAMA2, "--port", str(port), wait=False)
        assert emu.proc.wait(timeout=20) == 1
    assert "address already in use" in emu.log()
