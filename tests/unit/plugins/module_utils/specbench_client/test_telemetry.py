"""GPU telemetry (specbench_client.telemetry) and the emulated GPUs' power model
(files/sglang_emulator/gpus.py): the emulator's writer and the client's reader agree exactly on the
model's energy, a window's energy and its bounds come from the samples either side of its edges,
power is integrated where no counter exists, and throttling or clock changes are named; only the
server's GPUs are read (a real process on loopback holding two of four emulated GPUs, read through
NVML's calls answered from the device folder). A temporary device folder (about 2 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pynvml
import pytest

from ansible_collections.specbench.core.plugins.module_utils.launch.process import server_gpu_hints
from ansible_collections.specbench.core.plugins.module_utils.specbench_client import telemetry as tl
from sglang_emulator import gpus

FILES = Path(__file__).resolve().parents[5] / "files"


@pytest.fixture
def device(tmp_path):
    gpus.ensure_device_dir(str(tmp_path), 2, "NVIDIA H100 80GB HBM3", 81559)
    return tmp_path


def test_power_model_is_within_the_published_h100_figures():
    model = gpus.PowerModel()
    assert 70 <= model.IDLE_W <= 100 and model.TDP_W == 700
    assert model.power(1) < model.power(8) < model.power(512) < model.TDP_W
    assert 200 <= model.power(1) <= 320  # decode at batch 1 draws well under the limit
    assert model.power(4096) > 600  # a long prefill comes near it


def test_reader_gives_the_writers_energy_exactly(device):
    """The counter read anywhere equals the model's integral: idle, a batch-1 step, then a running one
    (to 1 uJ: CLOCK_MONOTONIC's seconds since boot in a double carry ~1e-10 s, times 700 W)."""
    model = gpus.PowerModel()
    reader = tl.EmulatedReader(str(device), [0, 1])
    first = reader.read()
    t_a, e_a = first[0]["t"], first[0]["energy_j"]
    assert first[0]["power_w"] == model.IDLE_W and first[0]["throttle"] == 0x1  # idle
    time.sleep(0.05)
    writer = gpus.Telemetry(str(device), [0])  # GPU 1 stays idle
    writer.step(t_a + 0.01, t_a + 0.03, 1)
    writer.step(t_a + 0.03, time.monotonic() + 100, 96)
    now = reader.read()
    busy, idle = now[0], now[1]
    expected = e_a + model.IDLE_W * 0.01 + model.power(1) * 0.02 + model.power(96) * (busy["t"] - t_a - 0.03)
    assert busy["energy_j"] == pytest.approx(expected, rel=0, abs=1e-6)
    assert busy["power_w"] == model.power(96) and busy["sm_clock_mhz"] == model.SM_BOOST_MHZ
    assert busy["throttle"] == 0 and 0 < busy["util_pct"] <= 100
    assert idle["energy_j"] == pytest.approx(first[1]["energy_j"] + model.IDLE_W * (idle["t"] - first[1]["t"]), rel=0, abs=1e-6)
    writer.close()
    reader.close()


def test_a_finished_step_turns_idle(device):
    model = gpus.PowerModel()
    writer = gpus.Telemetry(str(device), [0])
    base = writer.state[0]  # the record the device folder started with: idle since its t0
    start = base[1]
    writer.step(start, start + 0.005, 1)
    time.sleep(0.02)
    reader = tl.EmulatedReader(str(device), [0])
    got = reader.read()[0]
    expected = base[2] + model.power(1) * 0.005 + model.IDLE_W * (got["t"] - start - 0.005)
    assert got["energy_j"] == pytest.approx(expected, rel=0, abs=1e-6)
    assert got["power_w"] == model.IDLE_W and got["sm_clock_mhz"] == tl.EMULATED_IDLE_SM_MHZ
    reader.close()
    writer.close()


def samples(power, times, counter=True, throttle=0, clocks=None):
    out = []
    for i, t in enumerate(times):
        out.append([{"index": 0, "t": t, "power_w": power, "energy_j": power * t if counter else None,
                     "sm_clock_mhz": (clocks or {}).get(i, 1980.0), "mem_clock_mhz": 2619.0, "util_pct": 100.0,
                     "mem_used_mib": 1000, "temperature_c": 50.0, "throttle": throttle if i == 3 else 0}])
    return out


def test_window_energy_and_its_bounds_from_the_counter():
    """Constant 300 W sampled every 0.25 s: the window's 600 J exactly; the bounds are what the samples
    either side of each edge allow, at most 2 * P * interval wide."""
    times = [0.0 + 0.25 * i for i in range(11)]
    got = tl.window_telemetry(samples(300.0, times), 0.1, 2.1, 0.25, "emulated")
    assert got["energy_source"] == "counter"
    assert got["energy_j"] == pytest.approx(600.0)
    lo, hi = got["energy_j_bounds"]
    assert lo <= 600.0 <= hi and hi - lo <= 2 * 300.0 * 0.25 + 1e-9
    assert got["gpus"][0]["power_w_mean"] == pytest.approx(300.0)
    assert got["confounders"] == []


def test_power_integrated_where_no_counter():
    times = [0.25 * i for i in range(11)]
    got = tl.window_telemetry(samples(300.0, times, counter=False), 0.1, 2.1, 0.25, "nvml")
    assert got["energy_source"] == "integrated power"
    assert got["energy_j"] == pytest.approx(600.0)
    assert got["energy_j_bounds"] is None


def test_throttling_and_clock_changes_are_confounders():
    times = [0.25 * i for i in range(11)]
    got = tl.window_telemetry(samples(300.0, times, throttle=0x4), 0.1, 2.1, 0.25, "nvml")
    assert got["gpus"][0]["throttle_reasons"] == ["sw_power_cap"]
    assert got["confounders"] and "sw_power_cap" in got["confounders"][0]
    got = tl.window_telemetry(samples(300.0, times, clocks={4: 1600.0}), 0.1, 2.1, 0.25, "nvml")
    assert any("SM clock" in c for c in got["confounders"])
    # an idle sample (between requests) at idle clocks is neither
    got = tl.window_telemetry(samples(300.0, times, throttle=0x1, clocks={3: 345.0}), 0.1, 2.1, 0.25, "nvml")
    assert got["confounders"] == []


def test_level_energy_over_repeats():
    windows = [{"energy_j": 100.0, "energy_j_bounds": [90.0, 110.0]}, {"energy_j": 300.0, "energy_j_bounds": [280.0, 330.0]}]
    got = tl.level_energy(windows, [1000, 1000])
    assert got["energy_j_per_output_token"] == pytest.approx(0.2)
    assert got["energy_j_per_output_token_bounds"] == [pytest.approx(0.185), pytest.approx(0.22)]
    assert tl.level_energy([None], [10]) == {"energy_j_per_output_token": None}


def test_no_device_folder_says_why(tmp_path):
    reader, why = tl.open_reader({"server_info": {"emulator": {"device_dir": None, "gpus": []}}})
    assert reader is None and "--emulator-device-dir" in why
    reader, why = tl.open_reader({"server_info": {"emulator": {"device_dir": str(tmp_path), "gpus": [0]}}})
    assert reader is None and "emulated-telemetry.bin" in why


def test_a_server_on_another_machine_is_not_read():
    reader, why = tl.open_reader({"server_info": {}}, "http://10.1.2.3:30000")
    assert reader is None and "not on the machine" in why


# --------------------------------------------------------------------------- the server's GPUs only


def test_pick_gpus_finds_the_servers_gpus_in_order_of_evidence():
    uuids = {"GPU-aaaa-0": 0, "GPU-bbbb-1": 1, "GPU-cccc-2": 2, "GPU-dddd-3": 3}
    holders = {0: {99}, 1: set(), 2: {41, 42}, 3: {43}}
    # NVML lists the server's tree (41 on its port, 42 and 43 its TP workers) on GPUs 2 and 3
    got, how = tl.pick_gpus(4, {"pids": [41, 42, 43], "visible": "0,1,2,3"}, {"tp_size": 1}, uuids, holders)
    assert got == [2, 3] and "NVML lists a process of the server" in how
    # no process seen (another pid namespace): CUDA_VISIBLE_DEVICES, cut to the ranks from base_gpu_id
    got, how = tl.pick_gpus(4, {"pids": [7], "visible": "3,1,2"}, {"tp_size": 2, "base_gpu_id": 1}, uuids, holders)
    assert got == [1, 2] and "CUDA_VISIBLE_DEVICES=3,1,2" in how and "2 rank(s) from GPU 1" in how
    got, how = tl.pick_gpus(4, {"visible": "GPU-cccc,GPU-aaaa-0"}, None, uuids, holders)  # UUIDs and their prefixes
    assert got == [2, 0]
    got, how = tl.pick_gpus(4, {}, {"tp_size": 2, "dp_size": 1, "base_gpu_id": 2}, uuids, holders)
    assert got == [2, 3] and "tp_size x dp_size = 2 from GPU 2" in how
    got, how = tl.pick_gpus(4, {}, {}, uuids, holders)
    assert got == [0, 1, 2, 3] and "every GPU of the node" in how


class EmulatedNvml:
    """pynvml's calls the reader makes, answered from the emulator's device folder (its GPUs' telemetry file,
    inventory and the processes holding their nodes, gpus.read_state); errors are pynvml's own class."""

    NVMLError = pynvml.NVMLError

    def __init__(self, device_dir: str):
        self.dir = device_dir
        with open(os.path.join(device_dir, gpus.GPUS_FILE), encoding="utf-8") as fh:
            self.inventory = json.load(fh)["gpus"]
        self.reader = tl.EmulatedReader(device_dir, [g["index"] for g in self.inventory])

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.inventory)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= len(self.inventory):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetUUID(self, handle):
        return self.inventory[handle]["uuid"]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        state = gpus.read_state(self.dir)["gpus"][handle]
        return [types.SimpleNamespace(pid=p["pid"]) for p in state["processes"]]

    def _one(self, handle):
        self.reader.indexes = [handle]
        return self.reader.read()[0]

    def nvmlDeviceGetPowerUsage(self, handle):
        return int(self._one(handle)["power_w"] * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return int(self._one(handle)["energy_j"] * 1000)


SERVER = r"""
import os, socket, sys, time
from sglang_emulator import gpus
device_dir = sys.argv[1]
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
held = [os.open(os.path.join(device_dir, f"nvidia{i}"), os.O_RDWR) for i in (2, 3)]
gpus.write_record(device_dir, "emulated-server", {2: 20000, 3: 20000})
print(sock.getsockname()[1], flush=True)
time.sleep(120)
"""


@pytest.fixture
def server_on_gpus_2_and_3(tmp_path):
    """A real process on loopback holding GPUs 2 and 3 of four emulated ones, CUDA_VISIBLE_DEVICES=2,3."""
    gpus.ensure_device_dir(str(tmp_path), 4, "NVIDIA H100 80GB HBM3", 81559)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="2,3",
               PYTHONPATH=os.pathsep.join([str(FILES), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True)
    try:
        port = int(proc.stdout.readline())
        yield tmp_path, port, proc.pid
    finally:
        proc.kill()  # only the process this test started
        proc.wait()


def test_nvml_reads_only_the_servers_gpus(server_on_gpus_2_and_3):
    """Four GPUs on the node, the server on 2 and 3; GPUs 0 and 1 run another job at full power: the window's
    energy is GPUs 2 and 3's alone, and the window says which GPUs were read and how they were found."""
    device_dir, port, pid = server_on_gpus_2_and_3
    hints = server_gpu_hints(port)
    assert hints["pids"] == [pid] and hints["visible"] == "2,3"
    other = gpus.Telemetry(str(device_dir), [0, 1])  # another job's steps on GPUs 0 and 1
    t0 = time.monotonic()
    other.step(t0, t0 + 100, 256)
    reader, why = tl.open_reader({"server_info": {"tp_size": 2}, "gpu_hints": hints}, "http://127.0.0.1:1",
                                 nvml=EmulatedNvml(str(device_dir)))
    assert why is None and reader.indexes == [2, 3]
    sampler = tl.TelemetrySampler(reader, 0.02, time.monotonic())
    sampler.start()
    time.sleep(0.3)
    sampler.halt.set()
    sampler.join()
    ws, we = sampler.samples[1][0]["t"], sampler.samples[-2][0]["t"]
    got = sampler.over_window(ws, we)
    assert [g["index"] for g in got["gpus"]] == [2, 3]
    assert got["energy_j"] == pytest.approx(2 * gpus.PowerModel().IDLE_W * (we - ws), rel=0.02)  # idle, not 0 and 1
    assert got["gpus_read"]["indexes"] == [2, 3] and "NVML lists a process of the server" in got["gpus_read"]["how"]
    inventory = {g["index"]: g["uuid"] for g in EmulatedNvml(str(device_dir)).inventory}
    assert got["gpus_read"]["uuids"] == [inventory[2], inventory[3]]
    # NVML sees no process of the server (another pid namespace): its CUDA_VISIBLE_DEVICES gives the same GPUs
    reader, why = tl.open_reader({"server_info": {}, "gpu_hints": {"pids": [1], "visible": "2,3"}},
                                 "http://127.0.0.1:1", nvml=EmulatedNvml(str(device_dir)))
    assert reader.indexes == [2, 3] and "CUDA_VISIBLE_DEVICES=2,3" in reader.how
    other.close()


def test_the_emulator_reads_its_ranks_gpus_of_a_larger_device_folder(tmp_path):
    """The emulator's device folder has four GPUs, the server's TP ranks two of them (its info names 1 and 3)."""
    gpus.ensure_device_dir(str(tmp_path), 4, "NVIDIA H100 80GB HBM3", 81559)
    reader, why = tl.open_reader({"server_info": {"emulator": {"device_dir": str(tmp_path), "gpus": [1, 3]}}})
    assert why is None
    sampler = tl.TelemetrySampler(reader, 0.02, time.monotonic())
    sampler.start()
    time.sleep(0.15)
    sampler.halt.set()
    sampler.join()
    got = sampler.over_window(sampler.samples[1][0]["t"], sampler.samples[-2][0]["t"])
    assert [g["index"] for g in got["gpus"]] == [1, 3] and got["gpus_read"]["indexes"] == [1, 3]
    assert "emulator's server info" in got["gpus_read"]["how"]
