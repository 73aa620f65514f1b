"""GPU telemetry (specbench_client.telemetry) and the emulated GPUs' power model
(files/sglang_emulator/gpus.py): the emulator's writer and the client's reader agree exactly on the
model's energy, a window's energy and its bounds come from the samples either side of its edges,
power is integrated where no counter exists, and throttling or clock changes are named. Pure
computation on a temporary device folder (< 1 s)."""

from __future__ import annotations

import time

import pytest

from ansible_collections.specbench.core.plugins.module_utils.specbench_client import telemetry as tl
from sglang_emulator import gpus


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
